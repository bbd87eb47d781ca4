// CUDA and cuBLAS status checks for the GPT-2 forward: a failure becomes a Gpt2Error naming the call.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "gpt2/error.hpp"

namespace flashbox::gpt2 {

inline void cuda_check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) throw Gpt2Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

inline void cublas_check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Gpt2Error(std::string("cuBLASLt: ") + what + " failed with status " + std::to_string(int(s)));
}

}  // namespace flashbox::gpt2

#define GPT2_CUDA(call) ::flashbox::gpt2::cuda_check((call), #call)
#define GPT2_CUBLAS(call) ::flashbox::gpt2::cublas_check((call), #call)
