# Third-party code comes from Debian's packages only (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
# fmt links Debian's compiled libfmt (libfmt9): header-only fmt compiled its formatting code again in each
# of ~30 translation units (~6 s apiece at -O3). A machine that runs a binary built elsewhere needs libfmt9
# (tests/gpu.sh's DEPS_DEBS unpacks it beside the other packages).
find_package(fmt CONFIG REQUIRED)
find_package(BLAS)
if(FLASHBOX_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
