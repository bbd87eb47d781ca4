# CUDA is optional. FLASHBOX_HAVE_CUDA is defined for every target that links flashbox_cuda_flags.
set(FLASHBOX_HAVE_CUDA OFF)
if(FLASHBOX_CUDA STREQUAL "AUTO" OR FLASHBOX_CUDA STREQUAL "ON")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Architectures are passed as explicit -gencode flags below (CMake 3.25 cannot name sm_90a).
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag (added in 3.26); name it so CMAKE_CUDA_STANDARD 20 works.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(FLASHBOX_HAVE_CUDA ON)
  elseif(FLASHBOX_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FLASHBOX_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "flashbox: CUDA ${FLASHBOX_HAVE_CUDA} (archs ${FLASHBOX_CUDA_ARCHS})")

# NVRTC compiles mask and score mods at run time (src/jit). libflashbox does not link it: it is
# loaded with dlopen on the first flashbox_mod_create, so the library loads and runs without it;
# only nvrtc.h is needed to build. AUTO: with the CUDA build. ON: also in a CPU-only build (the
# compiler and its cache run and are tested without a GPU; nothing can run a mod there).
set(FLASHBOX_NVRTC AUTO CACHE STRING "Build the NVRTC mod compiler: AUTO (with CUDA), ON or OFF")
set_property(CACHE FLASHBOX_NVRTC PROPERTY STRINGS AUTO ON OFF)
set(FLASHBOX_HAVE_NVRTC OFF)
if(FLASHBOX_NVRTC STREQUAL "ON" OR (FLASHBOX_NVRTC STREQUAL "AUTO" AND FLASHBOX_HAVE_CUDA))
  if(NOT CUDAToolkit_FOUND)
    find_package(CUDAToolkit)
  endif()
  find_path(FLASHBOX_NVRTC_INCLUDE_DIR nvrtc.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(CUDAToolkit_FOUND AND FLASHBOX_NVRTC_INCLUDE_DIR)
    set(FLASHBOX_HAVE_NVRTC ON)
    set(FLASHBOX_NVRTC_SONAME "libnvrtc.so.${CUDAToolkit_VERSION_MAJOR}")
  elseif(FLASHBOX_NVRTC STREQUAL "ON")
    message(FATAL_ERROR "FLASHBOX_NVRTC=ON but the CUDA toolkit's nvrtc.h was not found")
  endif()
endif()
message(STATUS "flashbox: NVRTC mods ${FLASHBOX_HAVE_NVRTC} ${FLASHBOX_NVRTC_SONAME}")

# -gencode flags for the generic CUDA sources (every arch in the list) and for Hopper-only sources.
set(FLASHBOX_GENCODE_ALL "")
set(FLASHBOX_GENCODE_SM90A "")
foreach(arch IN LISTS FLASHBOX_CUDA_ARCHS)
  list(APPEND FLASHBOX_GENCODE_ALL "-gencode=arch=compute_${arch},code=sm_${arch}")
  if(arch STREQUAL "90a")
    list(APPEND FLASHBOX_GENCODE_SM90A "-gencode=arch=compute_90a,code=sm_90a")
  endif()
endforeach()
# Without sm_90a the generic kernels also carry the PTX of the last listed architecture, so that a
# build for the A100 (FLASHBOX_CUDA_ARCHS=80) still runs on later GPUs, whose driver compiles it on first
# use (machine code for sm_80 runs only on compute capability 8.x).
set(_flashbox_last_arch "")
if(FLASHBOX_CUDA_ARCHS)
  list(GET FLASHBOX_CUDA_ARCHS -1 _flashbox_last_arch)
endif()
if(_flashbox_last_arch AND NOT FLASHBOX_GENCODE_SM90A AND NOT _flashbox_last_arch MATCHES "a$")
  list(APPEND FLASHBOX_GENCODE_ALL "-gencode=arch=compute_${_flashbox_last_arch},code=compute_${_flashbox_last_arch}")
endif()

# Adds CUDA sources to a target: files under an `sm90/` folder build for sm_90a only (and are left
# out when 90a is not in FLASHBOX_CUDA_ARCHS), the rest for every listed arch.
function(flashbox_add_cuda_sources target)
  foreach(src IN LISTS ARGN)
    if(NOT src MATCHES "\\.cu$")
      target_sources(${target} PRIVATE ${src})   # host C++ next to the kernels: no -gencode
      continue()
    endif()
    if(src MATCHES "/sm90/")
      if(NOT FLASHBOX_GENCODE_SM90A)
        continue()
      endif()
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${FLASHBOX_GENCODE_SM90A}")
    else()
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${FLASHBOX_GENCODE_ALL}")
    endif()
    target_sources(${target} PRIVATE ${src})
  endforeach()
endfunction()

set(FLASHBOX_CUDA_COMPILE_FLAGS
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --use_fast_math -lineinfo -Xptxas=-warn-spills>)
