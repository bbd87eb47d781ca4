// NAIVE on the GPU really allocates S and P: a size whose S cannot fit returns OUT_OF_MEMORY with a
// message, writes nothing, leaks nothing, and the next normal call works. FLASH takes no scratch.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "device_attention.hpp"

namespace flashbox::test {
namespace {

TEST(GpuNaiveMemory, OutOfMemoryIsCleanAndRecoverable) {
  SKIP_WITHOUT_GPU();
  // B64 H32 T65536: S alone is 64*32*65536^2*4 bytes = 35 TB. q, k, v and o are real, separate
  // device buffers (17 GB each, left uninitialised: the call must fail before it reads them).
  const int64_t B = 64, T = 65536, H = 32, D = 64;
  const size_t tensor_bytes = size_t(B * T * H * D * 2);
  void *bufs[4] = {nullptr, nullptr, nullptr, nullptr};
  for (void *&b : bufs) {
    if (cudaMalloc(&b, tensor_bytes) != cudaSuccess) {
      cudaGetLastError();
      for (void *x : bufs)
        if (x) cudaFree(x);
      GTEST_SKIP() << "this GPU cannot hold the 4 x 17 GB inputs of the out-of-memory case";
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  size_t free_before = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16, a.impl = FLASHBOX_NAIVE;
  a.batch = B, a.seqlen_q = T, a.seqlen_k = T, a.heads_q = H, a.heads_kv = H, a.head_dim = D;
  a.q = bufs[0], a.k = bufs[1], a.v = bufs[2], a.o = bufs[3];
  for (auto *s : {a.q_stride, a.k_stride, a.v_stride, a.o_stride}) s[2] = D, s[1] = H * D, s[0] = T * H * D;
  a.causal = 1;
  EXPECT_EQ(flashbox_attention_forward(&a), FLASHBOX_ERR_OUT_OF_MEMORY) << flashbox_last_error();
  const std::string msg = flashbox_last_error();
  std::printf("OOM message: %s\n", msg.c_str());
  EXPECT_NE(msg.find("cannot allocate"), std::string::npos) << msg;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed allocation must not leave a CUDA error behind";
  CUDA_OK(cudaDeviceSynchronize());
  // Free memory is the whole device's: tests running beside this one (ctest -j) allocate and free
  // too. A leak stays, so the check passes once free memory is back within 64 MB, read up to 50
  // times 100 ms apart.
  size_t free_after = 0;
  for (int tries = 0; tries < 50; ++tries) {
    CUDA_OK(cudaMemGetInfo(&free_after, &total));
    if (int64_t(free_after) + (64 << 20) >= int64_t(free_before)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(int64_t(free_after) + (64 << 20), int64_t(free_before)) << "device memory leaked by the failed call";
  for (void *b : bufs) CUDA_OK(cudaFree(b));

  // A normal call afterwards works.
  AttentionCase c;
  c.batch = 2, c.seqlen_q = 300, c.seqlen_k = 300, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64;
  c.dtype = FLASHBOX_BFLOAT16, c.causal = 1, c.device = FLASHBOX_CUDA, c.impl = FLASHBOX_NAIVE;
  AttentionData d(c);
  DeviceAttention dev(d);
  ASSERT_NO_FATAL_FAILURE(dev.upload());
  ASSERT_EQ(flashbox_attention_forward(&dev.args), FLASHBOX_OK) << flashbox_last_error();
  ASSERT_NO_FATAL_FAILURE(dev.download());
  const Comparison r = d.compare();
  EXPECT_FALSE(r.has_nan) << d.name();
  EXPECT_LT(r.rel_error, d.tolerance()) << d.name();
}

TEST(GpuNaiveMemory, ScratchIsMeasuredAndReleased) {
  SKIP_WITHOUT_GPU();
  AttentionCase c;
  c.batch = 2, c.seqlen_q = 1024, c.seqlen_k = 1024, c.heads_q = 4, c.heads_kv = 4, c.head_dim = 64;
  c.dtype = FLASHBOX_FLOAT16, c.device = FLASHBOX_CUDA, c.impl = FLASHBOX_NAIVE;
  AttentionData d(c);
  DeviceAttention dev(d);
  ASSERT_NO_FATAL_FAILURE(dev.upload());
  // A first call creates this thread's cuBLAS handle (and its workspace), which stays by design.
  ASSERT_EQ(flashbox_attention_forward(&dev.args), FLASHBOX_OK) << flashbox_last_error();
  // cudaMemGetInfo counts every process on the device: other GPU tests running beside this one can
  // take memory between the two readings. A leak of the scratch (48 MB a call, 240 MB for five
  // calls) shows in every attempt; another process's allocation rarely in three in a row.
  int64_t shortfall = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    CUDA_OK(cudaDeviceSynchronize());
    size_t free_before = 0, free_after = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free_before, &total));
    for (int i = 0; i < 5; ++i) ASSERT_EQ(flashbox_attention_forward(&dev.args), FLASHBOX_OK) << flashbox_last_error();
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemGetInfo(&free_after, &total));
    EXPECT_EQ(flashbox_last_scratch_peak_bytes(), int64_t(2) * 4 * 1024 * 1024 * 6);
    shortfall = int64_t(free_before) - int64_t(free_after);
    if (shortfall <= (64 << 20)) break;
  }
  EXPECT_LE(shortfall, 64 << 20) << "scratch not returned after the calls (free memory fell by " << shortfall
                                 << " bytes over five calls, in each of three attempts)";
}

}  // namespace
}  // namespace flashbox::test
