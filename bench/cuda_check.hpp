// CHECK_CUDA for the bench programs (sm90_bench.cu, sm90_varlen_bench.cpp, sm90_bwd_varlen_bench.cpp):
// a failed CUDA call prints where it was and what failed, and the program exits 1 (a bench has
// nothing to clean up).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call) \
  do { \
    const cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1); \
    } \
  } while (0)
