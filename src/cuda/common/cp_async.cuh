// cp.async (sm_80+): 16-byte global -> shared copies that bypass registers and complete in groups.
// A copy with src_size 0 writes 16 zero bytes and reads nothing: that is how rows past the end of a
// sequence are loaded without a branch around the copy (the source address must still be valid,
// callers pass the tensor's base).
#pragma once
#include <cstdint>

namespace flashbox::cuda {

__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void *gmem_src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(src_size));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace flashbox::cuda
