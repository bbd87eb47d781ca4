# The quick start: `make report` builds and runs the main job; `make test` builds and runs every test.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: report test build deps

report: build
	mkdir -p runs
	./$(BUILD)/flashbox report --json runs/report.json --html runs/report.html

# After the run, the reasons of skipped tests (no GPU, no torch, ...) are listed with their counts.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS); rc=$$?; \
	grep -h -A1 ': Skipped$$' $(BUILD)/Testing/Temporary/LastTest.log 2>/dev/null | grep -v -e '^--$$' -e ': Skipped$$' \
	  | sort | uniq -c | sed 's/^ */skipped: /'; exit $$rc

build: deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

deps:
	./scripts/install-deps.sh
