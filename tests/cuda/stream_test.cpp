// The `stream` argument: uploads, the call and the download all go to one non-blocking stream and only
// that stream is synchronised; a backend that ran on another stream would race the copies.
#include <gtest/gtest.h>

#include "device_attention.hpp"

namespace flashbox::test {
namespace {

void run_on_stream(flashbox_impl impl, const char *arch) {
  const flashbox_options opts = family_options(arch);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  AttentionCase c;
  c.batch = 4, c.seqlen_q = 2048, c.seqlen_k = 2048, c.heads_q = 4, c.heads_kv = 4, c.head_dim = 64;
  c.dtype = FLASHBOX_BFLOAT16, c.causal = 1, c.device = FLASHBOX_CUDA, c.impl = impl;
  AttentionData d(c);
  {
    DeviceAttention dev(d);
    ASSERT_NO_FATAL_FAILURE(dev.upload(stream));
    ASSERT_EQ(flashbox_attention_forward_opts(&dev.args, &opts), FLASHBOX_OK) << flashbox_last_error();
    ASSERT_NO_FATAL_FAILURE(dev.download());
    EXPECT_TRUE(dev.guards_intact);
  }
  const Comparison r = d.compare();
  EXPECT_FALSE(r.has_nan) << d.name();
  EXPECT_LT(r.rel_error, d.tolerance()) << d.name();
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(GpuStream, FlashSm80RunsOnTheGivenStream) {
  SKIP_WITHOUT_GPU();
  run_on_stream(FLASHBOX_FLASH, "sm80");
}

TEST(GpuStream, NaiveRunsOnTheGivenStream) {
  SKIP_WITHOUT_GPU();
  run_on_stream(FLASHBOX_NAIVE, "");
}

}  // namespace
}  // namespace flashbox::test
