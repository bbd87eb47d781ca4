// Bad arguments of flashbox_attention_backward: each is refused with its own error code, a message
// naming the argument, and nothing written to dq/dk/dv. Also the workspace-size query.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "backward_case.hpp"
#include "support/family_pin.hpp"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::test {
namespace {

struct BadCase {
  const char *what;
  int code;
  const char *mentions;
  std::function<void(flashbox_attention_grad_args &, BackwardData &)> edit;
};

void expect_refused(
    const BadCase &bc,
    AttentionCase c = {.batch = 2, .seqlen_q = 9, .seqlen_k = 9, .heads_q = 2, .heads_kv = 1, .head_dim = 16}) {
  BackwardData d(c);
  flashbox_attention_grad_args g = d.grad;
  bc.edit(g, d);
  const std::vector<uint8_t> dq = d.dq_bytes(), dk = d.dk_bytes(), dv = d.dv_bytes();
  EXPECT_EQ(flashbox_attention_backward(&g), bc.code) << bc.what << ": " << flashbox_last_error();
  EXPECT_NE(std::strstr(flashbox_last_error(), bc.mentions), nullptr)
      << bc.what << ": message does not name '" << bc.mentions << "': " << flashbox_last_error();
  EXPECT_TRUE(dq == d.dq_bytes() && dk == d.dk_bytes() && dv == d.dv_bytes()) << bc.what << ": a gradient was written";
}

TEST(BackwardApi, NullArgs) {
  EXPECT_EQ(flashbox_attention_backward(nullptr), FLASHBOX_ERR_NULL_POINTER);
  EXPECT_LT(flashbox_attention_backward_workspace_size(nullptr), 0);
}

TEST(BackwardApi, EveryBadArgumentIsNamed) {
  using G = flashbox_attention_grad_args;
  using D = BackwardData;
  const BadCase cases[] = {
      {"dout null", FLASHBOX_ERR_NULL_POINTER, "dout", [](G &g, D &) { g.dout = nullptr; }},
      {"dq null", FLASHBOX_ERR_NULL_POINTER, "dq", [](G &g, D &) { g.dq = nullptr; }},
      {"dk null", FLASHBOX_ERR_NULL_POINTER, "dk", [](G &g, D &) { g.dk = nullptr; }},
      {"dv null", FLASHBOX_ERR_NULL_POINTER, "dv", [](G &g, D &) { g.dv = nullptr; }},
      {"q null", FLASHBOX_ERR_NULL_POINTER, "q", [](G &g, D &) { g.fwd.q = nullptr; }},
      {"o null", FLASHBOX_ERR_NULL_POINTER, "o", [](G &g, D &) { g.fwd.o = nullptr; }},
      {"lse null", FLASHBOX_ERR_NULL_POINTER, "lse", [](G &g, D &) { g.fwd.lse = nullptr; }},
      {"dq_stride zero", FLASHBOX_ERR_BAD_STRIDE, "dq_stride[1]", [](G &g, D &) { g.dq_stride[1] = 0; }},
      {"dout_stride negative", FLASHBOX_ERR_BAD_STRIDE, "dout_stride[0]", [](G &g, D &) { g.dout_stride[0] = -1; }},
      {"dk rows overlap", FLASHBOX_ERR_BAD_STRIDE, "dk_stride[1]", [](G &g, D &) { g.dk_stride[1] = 8; }},
      {"dv heads overlap", FLASHBOX_ERR_BAD_STRIDE, "dv_stride",
       [](G &g, D &) {
         g.dv_stride[2] = 4;  // heads_kv = 1: the head stride is not looked at; the seq stride is
         g.dv_stride[1] = 4;
       }},
      {"dk aliases dq", FLASHBOX_ERR_INVALID_ARGUMENT, "dk", [](G &g, D &) { g.dk = g.dq; }},
      {"dv aliases dk", FLASHBOX_ERR_INVALID_ARGUMENT, "dv", [](G &g, D &) { g.dv = g.dk; }},
      {"dq aliases q", FLASHBOX_ERR_INVALID_ARGUMENT, "dq", [](G &g, D &) { g.dq = const_cast<void *>(g.fwd.q); }},
      {"dv aliases v", FLASHBOX_ERR_INVALID_ARGUMENT, "dv", [](G &g, D &) { g.dv = const_cast<void *>(g.fwd.v); }},
      {"dq aliases dout", FLASHBOX_ERR_INVALID_ARGUMENT, "dout", [](G &g, D &) { g.dq = const_cast<void *>(g.dout); }},
      {"dq aliases o", FLASHBOX_ERR_INVALID_ARGUMENT, "dq", [](G &g, D &) { g.dq = g.fwd.o; }},
      {"dk overlaps lse", FLASHBOX_ERR_INVALID_ARGUMENT, "lse",
       [](G &g, D &d) { g.fwd.lse = reinterpret_cast<float *>(d.dk_bytes().data()) + 4; }},
      {"deterministic 2", FLASHBOX_ERR_INVALID_ARGUMENT, "deterministic", [](G &g, D &) { g.deterministic = 2; }},
      {"causal 3", FLASHBOX_ERR_INVALID_ARGUMENT, "causal", [](G &g, D &) { g.fwd.causal = 3; }},
      {"heads mismatch", FLASHBOX_ERR_HEADS_MISMATCH, "heads_kv", [](G &g, D &) { g.fwd.heads_kv = 3; }},
      {"seqlen zero", FLASHBOX_ERR_INVALID_SIZE, "seqlen_k", [](G &g, D &) { g.fwd.seqlen_k = 0; }},
      {"flash on cpu", FLASHBOX_ERR_UNSUPPORTED_IMPL, "flash", [](G &g, D &) { g.fwd.impl = FLASHBOX_FLASH; }},
      {"bad dtype", FLASHBOX_ERR_UNSUPPORTED_DTYPE, "dtype", [](G &g, D &) { g.fwd.dtype = flashbox_dtype(7); }},
      {"naive on cuda", FLASHBOX_ERR_UNSUPPORTED_IMPL, "naive",
       [](G &g, D &) { g.fwd.device = FLASHBOX_CUDA, g.fwd.impl = FLASHBOX_NAIVE, g.fwd.dtype = FLASHBOX_BFLOAT16; }},
      // The cuda backward takes multiples of 8 up to 256 (the sm80 d256 kernels); 264 is past them.
      {"cuda backward head_dim 264", FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "multiples of 8 up to 256",
       [](G &g, D &) { g.fwd.device = FLASHBOX_CUDA, g.fwd.dtype = FLASHBOX_BFLOAT16, g.fwd.head_dim = 264; }},
  };
  for (const BadCase &bc : cases) expect_refused(bc);
}

TEST(BackwardApi, CudaNeedsAlignmentAndADevice) {
  const AttentionCase c{.batch = 1,
                        .seqlen_q = 8,
                        .seqlen_k = 8,
                        .heads_q = 1,
                        .heads_kv = 1,
                        .head_dim = 64,
                        .dtype = FLASHBOX_BFLOAT16};
  expect_refused({"dq misaligned", FLASHBOX_ERR_MISALIGNED, "dq",
                  [](flashbox_attention_grad_args &g, BackwardData &) {
                    g.fwd.device = FLASHBOX_CUDA;
                    g.dq = static_cast<char *>(g.dq) + 2;
                  }},
                 c);
  expect_refused({"dk_stride not a multiple of 8", FLASHBOX_ERR_MISALIGNED, "dk_stride",
                  [](flashbox_attention_grad_args &g, BackwardData &) {
                    g.fwd.device = FLASHBOX_CUDA;
                    g.dk_stride[1] = 68;
                  }},
                 c);
  // Host memory handed to device = cuda: no GPU (or no CUDA build) here, or host pointers there.
  expect_refused({"cuda with host pointers",
                  flashbox_cuda_device_count() > 0 ? FLASHBOX_ERR_INVALID_ARGUMENT : FLASHBOX_ERR_NO_DEVICE,
                  flashbox_cuda_device_count() > 0 ? "host memory" : "cuda",
                  [](flashbox_attention_grad_args &g, BackwardData &) { g.fwd.device = FLASHBOX_CUDA; }},
                 c);
}

#ifdef FLASHBOX_HAVE_CUDA
// The Hopper backward (src/cuda/backward/sm90) takes the calls (both dQ modes) on an sm_90 device.
bool sm90_backward_applies() {
#ifdef FLASHBOX_HAVE_SM90
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) {
    cudaGetLastError();
    return false;
  }
  const char *arch = std::getenv("FLASHBOX_BWD_ARCH");
  return major == 9 && minor == 0 && !(arch != nullptr && std::string(arch) == "sm80");
#else
  return false;
#endif
}
#endif

TEST(BackwardApi, WorkspaceSize) {
  BackwardData d({.batch = 2, .seqlen_q = 100, .seqlen_k = 50, .heads_q = 4, .heads_kv = 2, .head_dim = 64});
  const int64_t rows = 2 * 4 * 100;
  EXPECT_GE(flashbox_attention_backward_workspace_size(&d.grad), rows * 4 + rows * 64 * 4);  // D and the dQ accumulator
  flashbox_attention_grad_args g = d.grad;
  g.deterministic = 5;
  EXPECT_EQ(flashbox_attention_backward_workspace_size(&g), -FLASHBOX_ERR_INVALID_ARGUMENT);
  g = d.grad;
  g.fwd.device = FLASHBOX_CUDA, g.fwd.dtype = FLASHBOX_BFLOAT16;
  const int64_t cuda_bytes = flashbox_attention_backward_workspace_size(&g);
#ifdef FLASHBOX_HAVE_CUDA
  // The sm90 early dQ convert (fixed length, head_dim <= 128): one completion counter per (batch,
  // head, 128-row query tile) without the deterministic mode, and convert's work counter.
  const bool early = true;
  const int64_t tiles = 2 * 4 * 1;
  if (sm90_backward_applies()) {
    // LSE·log2 e and D, and the dQ accumulator, over rows padded to whole 128-row query tiles.
    const int64_t padded = 2 * 4 * 128;
    EXPECT_EQ(cuda_bytes, 2 * padded * 4 + padded * 64 * 4 + (early ? tiles * 4 + 4 : 0));
  } else {
    EXPECT_EQ(cuda_bytes, rows * 4 + rows * 64 * 4);
  }
  g.deterministic = 1;
  if (sm90_backward_applies()) {
    // One semaphore per (batch, head, 128-row query tile, consumer warpgroup) instead of the counters.
    EXPECT_EQ(flashbox_attention_backward_workspace_size(&g),
              cuda_bytes - (early ? tiles * 4 : 0) + tiles * 2 * 4);
  } else {
    EXPECT_EQ(flashbox_attention_backward_workspace_size(&g), rows * 4);  // no dQ accumulator
  }
#else
  EXPECT_EQ(cuda_bytes, -FLASHBOX_ERR_NO_DEVICE);
#endif
}

}  // namespace
}  // namespace flashbox::test
