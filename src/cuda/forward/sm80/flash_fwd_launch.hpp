// Host entry of the sm80 flash forward kernel family: picks the instantiation for (head_dim, dtype) —
// d64 for head_dim <= 64, d128 up to 128, d256 up to 256 (multiples of 8; the kernel zero-fills the
// columns beyond) —
// computes the grid, launches on `stream`. Returns the launch's CUDA error. The kernel name of an
// instantiation is e.g. "cuda_flash_sm80_d64_128x128".
#pragma once
#include <cuda_runtime.h>

#include "cuda/forward/sm80/flash_fwd_params.hpp"

namespace flashbox::cuda {

cudaError_t launch_flash_fwd_sm80(const FlashFwdParams &p, int head_dim, bool bf16, cudaStream_t stream);
const char *flash_fwd_sm80_kernel_name(int head_dim);

}  // namespace flashbox::cuda
