// What this build of flashbox was configured with, as the report states it. Defined in
// build_config.cpp, the one report source that reads the build's definitions (FLASHBOX_CUDA_ARCHS,
// sm_90a): the others are then the same translation units in every CUDA build, so ccache serves
// an 80-only build the objects of an 80;90a one (.ci/run).
#pragma once

#include <string>

namespace flashbox::report {

// FLASHBOX_CUDA_ARCHS as CMake lists it, e.g. "80;90a".
std::string built_cuda_archs();

// Whether this build has the Hopper (sm_90a) kernels.
bool built_with_sm90a();

}  // namespace flashbox::report
