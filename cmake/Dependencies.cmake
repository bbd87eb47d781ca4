# Third-party code comes from Debian's packages only (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
# fmt is used header-only so binaries built here also run on machines without libfmt installed.
find_package(fmt CONFIG REQUIRED)
find_package(BLAS)
if(FLASHBOX_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
