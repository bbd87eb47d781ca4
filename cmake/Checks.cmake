# Build-wide checking options; CI turns them on (.ci/run), a plain build leaves them off.
#   FLASHBOX_WERROR    warnings of the host C/C++ compilers are errors. nvcc is left out: ptxas'
#                      spill report (-warn-spills) is information we want to read, not a failure.
#   FLASHBOX_SANITIZE  AddressSanitizer + UndefinedBehaviorSanitizer on every host C/C++ object and
#                      link; UB aborts (-fno-sanitize-recover) so a test that triggers it fails.
#                      Meant for CPU-only builds (-DFLASHBOX_CUDA=OFF): device code is not checked.
#   FLASHBOX_FUZZ      the libFuzzer targets of tests/fuzz (needs clang) and coverage
#                      instrumentation of every object; configure with FLASHBOX_SANITIZE=ON too,
#                      so that the fuzzers run under ASan/UBSan.
option(FLASHBOX_WERROR "Treat host compiler warnings as errors" OFF)
option(FLASHBOX_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(FLASHBOX_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only)" OFF)

if(FLASHBOX_WERROR)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-Werror>)
endif()

if(FLASHBOX_SANITIZE)
  if(FLASHBOX_HAVE_CUDA)
    message(WARNING "flashbox: FLASHBOX_SANITIZE with CUDA on checks the host code only; "
      "configure with -DFLASHBOX_CUDA=OFF for the CPU-only build CI checks")
  endif()
  set(FLASHBOX_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${FLASHBOX_SANITIZE_FLAGS}>")
  add_link_options(${FLASHBOX_SANITIZE_FLAGS})
  message(STATUS "flashbox: ASan + UBSan on (${CMAKE_CXX_COMPILER_ID})")
endif()

if(FLASHBOX_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "flashbox: FLASHBOX_FUZZ needs clang (libFuzzer); configure with "
      "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  # Coverage feedback from everything the targets call (the parsers live in flashbox_app, the API in
  # flashbox_core); only the fuzz targets themselves link libFuzzer (-fsanitize=fuzzer).
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()
