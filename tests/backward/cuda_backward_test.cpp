// CUDA flash backward against the fp64 reference backward on the device: the forward's shape cases,
// seqlen_q != seqlen_k with empty rows, GQA/MQA, strided layouts, causal or not, bf16 and fp16,
// head_dim 40, 64, 112, 128 and above (136 to 256: sm80's d256 kernels; on Hopper the atomic-dQ calls
// run the sm90 d192 kernel up to 192 and its d256 one above, 40 the d64 and 112 the d128 one), both
// dQ modes (atomic and deterministic), poisoned outputs (padding included);
// deterministic mode bitwise-identical over repeated runs, atomic mode repeated against the reference
// (the scratch reused with the last call's counters); scratch equal to the workspace size.
// Skipped, with the reason, where there is no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "backward_case.hpp"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/backward/sm90/bwd_route.hpp"
#include "cuda/backward/sm90/det_walk.hpp"
#include "support/family_pin.hpp"
#include "support/gpu_check.hpp"

namespace flashbox::test {
namespace {

// Device copy of a host byte buffer; `back()` copies it (all bytes, padding too) into the host buffer.
class DeviceCopy {
 public:
  explicit DeviceCopy(std::vector<uint8_t> &host) : host_(host) {
    if (cudaMalloc(&ptr_, host.size()) == cudaSuccess)
      ok_ = cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~DeviceCopy() { cudaFree(ptr_); }
  bool ok() const { return ok_; }
  void *get() const { return ptr_; }
  bool back() { return cudaMemcpy(host_.data(), ptr_, host_.size(), cudaMemcpyDeviceToHost) == cudaSuccess; }

 private:
  std::vector<uint8_t> &host_;
  void *ptr_ = nullptr;
  bool ok_ = false;
};

// Runs the CUDA backward on device copies of d's buffers and copies the gradients back.
void run_on_device(BackwardData &d, int deterministic, int repeats = 1, bool *bitwise_equal = nullptr) {
  AttentionData &f = d.forward();
  std::vector<uint8_t> lse_bytes(f.lse.size() * 4);
  std::memcpy(lse_bytes.data(), f.lse.data(), lse_bytes.size());
  DeviceCopy q(f.q_bytes()), k(f.k_bytes()), v(f.v_bytes()), o(f.o_bytes()), lse(lse_bytes), dout(d.dout_bytes());
  DeviceCopy dq(d.dq_bytes()), dk(d.dk_bytes()), dv(d.dv_bytes());
  for (DeviceCopy *c : {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv}) ASSERT_TRUE(c->ok()) << "device allocation/copy";
  flashbox_attention_grad_args g = d.grad;
  g.fwd.device = FLASHBOX_CUDA;
  g.fwd.impl = FLASHBOX_AUTO;
  g.fwd.q = q.get(), g.fwd.k = k.get(), g.fwd.v = v.get(), g.fwd.o = o.get();
  g.fwd.lse = static_cast<float *>(lse.get());
  g.dout = dout.get(), g.dq = dq.get(), g.dk = dk.get(), g.dv = dv.get();
  g.deterministic = deterministic;
  std::vector<uint8_t> first_dq, first_dk, first_dv;
  for (int r = 0; r < repeats; ++r) {
    ASSERT_EQ(flashbox_attention_backward(&g), 0) << flashbox_last_error() << " " << d.name();
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaGetLastError());
    EXPECT_EQ(flashbox_last_scratch_peak_bytes(), flashbox_attention_backward_workspace_size(&g));
    ASSERT_TRUE(dq.back() && dk.back() && dv.back());
    if (r == 0) {
      first_dq = d.dq_bytes(), first_dk = d.dk_bytes(), first_dv = d.dv_bytes();
    } else if (bitwise_equal) {
      *bitwise_equal =
          *bitwise_equal && first_dq == d.dq_bytes() && first_dk == d.dk_bytes() && first_dv == d.dv_bytes();
    }
  }
}

void check(const AttentionCase &c, int deterministic) {
  BackwardData d(c);
  run_on_device(d, deterministic);
  SCOPED_TRACE(deterministic ? "deterministic" : "atomic dQ");
  d.expect_close();
}

struct Shape {
  int64_t b, sq, sk, hq, hkv, d;
};

class CudaBackwardShapes : public ::testing::TestWithParam<std::tuple<Shape, int, flashbox_dtype>> {};

TEST_P(CudaBackwardShapes, BothModesMatchReference) {
  SKIP_WITHOUT_GPU();
  const auto [s, causal, dtype] = GetParam();
  const AttentionCase c{.batch = s.b,
                        .seqlen_q = s.sq,
                        .seqlen_k = s.sk,
                        .heads_q = s.hq,
                        .heads_kv = s.hkv,
                        .head_dim = s.d,
                        .dtype = dtype,
                        .causal = causal};
  check(c, 0);
  check(c, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaBackwardShapes,
    ::testing::Combine(::testing::Values(Shape{1, 1, 1, 2, 2, 64}, Shape{2, 17, 17, 2, 1, 64},
                                         Shape{1, 63, 63, 2, 2, 64}, Shape{1, 64, 64, 2, 2, 128},
                                         Shape{2, 65, 65, 4, 2, 64}, Shape{1, 129, 129, 2, 2, 128},
                                         Shape{1, 1000, 1000, 2, 1, 64}, Shape{1, 1000, 1000, 1, 1, 128},
                                         Shape{1, 17, 300, 3, 1, 64}, Shape{1, 300, 17, 2, 2, 128},
                                         Shape{2, 200, 333, 6, 2, 64}, Shape{1, 333, 200, 4, 1, 128},
                                         // above 128: the sm80 d256 kernels (column halves); on Hopper
                                         // the atomic ones run sm90 d192 (136, 192) and d256 (224, 256)
                                         Shape{1, 1, 1, 2, 2, 136}, Shape{1, 65, 65, 2, 1, 256},
                                         Shape{2, 17, 300, 4, 2, 192}, Shape{1, 300, 17, 2, 2, 224},
                                         // below 64 and in 104..120: on Hopper the sm90 d64 and d128
                                         // kernels, zeros past head_dim (bwd_route.hpp)
                                         Shape{2, 65, 65, 4, 2, 40}, Shape{1, 129, 300, 2, 2, 112}),
                       ::testing::Values(0, 1), ::testing::Values(FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16)));

TEST(CudaBackward, StridedLayoutsAndScale) {
  SKIP_WITHOUT_GPU();
  for (Layout l : {Layout::BHTD, Layout::PADDED})
    for (int64_t d : {64, 128}) {
      const AttentionCase c{.batch = 2,
                            .seqlen_q = 150,
                            .seqlen_k = 150,
                            .heads_q = 4,
                            .heads_kv = 2,
                            .head_dim = d,
                            .dtype = FLASHBOX_BFLOAT16,
                            .causal = 1,
                            .layout = l,
                            .softmax_scale = 0.09f};
      check(c, 0);
      check(c, 1);
    }
}

TEST(CudaBackward, EmptyRowsGiveZeroDq) {
  SKIP_WITHOUT_GPU();
  for (int det : {0, 1}) {
    BackwardData d({.batch = 1,
                    .seqlen_q = 200,
                    .seqlen_k = 40,
                    .heads_q = 2,
                    .heads_kv = 1,
                    .head_dim = 64,
                    .dtype = FLASHBOX_BFLOAT16,
                    .causal = 1});
    run_on_device(d, det);
    d.expect_close();
    const uint16_t *dq = reinterpret_cast<const uint16_t *>(d.dq_bytes().data());
    for (int64_t i = 0; i < 160; ++i)
      for (int64_t x = 0; x < 2 * 64; ++x) ASSERT_EQ(dq[i * 128 + x], 0u) << "row " << i << " " << d.name();
  }
}

// T = 4097: many K/V blocks and query tiles, a last tile with a single row, GQA, both head_dims,
// causal and not (the shapes above stop at 1000).
TEST(CudaBackward, LongOddSequence) {
  SKIP_WITHOUT_GPU();
  for (int64_t dim : {64, 128})
    for (int causal : {0, 1}) {
      const AttentionCase c{.batch = 1,
                            .seqlen_q = 4097,
                            .seqlen_k = 4097,
                            .heads_q = 2,
                            .heads_kv = 1,
                            .head_dim = dim,
                            .dtype = FLASHBOX_BFLOAT16,
                            .causal = causal};
      check(c, 0);
    }
}

// On an sm_90 device the non-deterministic backward must run the Hopper kernels (the shape cases
// above then test them; FLASHBOX_BWD_ARCH=sm80 runs the same cases on the sm80 kernels).
TEST(CudaBackward, HopperRunsTheSm90Kernels) {
  SKIP_WITHOUT_GPU();
  int dev = 0, major = 0, minor = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) GTEST_SKIP() << "not an sm_90 device: the sm90 backward does not apply";
#ifndef FLASHBOX_HAVE_SM90
  GTEST_SKIP() << "built without sm_90a code";
#endif
  const char *arch = std::getenv("FLASHBOX_BWD_ARCH");
  if (arch != nullptr && std::string(arch) == "sm80") GTEST_SKIP() << "FLASHBOX_BWD_ARCH=sm80 forces the sm80 kernels";
  for (int64_t dim : {64, 128}) {
    BackwardData d({.batch = 2,
                    .seqlen_q = 300,
                    .seqlen_k = 300,
                    .heads_q = 4,
                    .heads_kv = 2,
                    .head_dim = dim,
                    .dtype = FLASHBOX_BFLOAT16,
                    .causal = 1});
    run_on_device(d, 0);
    EXPECT_NE(std::string(flashbox_last_kernel()).find("sm90"), std::string::npos) << flashbox_last_kernel();
    d.expect_close();
  }
}

// The deterministic-repeat tests' shapes: GQA heads_q:heads_kv (4:2 unless told), bf16 unless told,
// seqlen_q x causal_seqlen_k when causal (seqlen_k != seqlen_q) and seqlen_q x seqlen_q when not.
struct RepeatShape {
  int64_t batch, seqlen_q, causal_seqlen_k;
  int runs;  // backward calls on the same inputs, all of which must give the same bits
  int64_t heads_q = 4, heads_kv = 2;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
};

// deterministic = 1 on every head_dim of `dims`, causal then not: the gradients are bitwise the same
// over s.runs calls and close to the reference, and the last call's kernel names every one of
// `kernel_parts`; `check_kernel` (if given) asserts more about that name per head_dim.
// FLASHBOX_TEST_DET_RUNS=N (N >= 2) caps the runs, for compute-sanitizer (racecheck takes seconds a launch).
int det_runs(int runs) {
  const char *cap = std::getenv("FLASHBOX_TEST_DET_RUNS");
  const int n = cap != nullptr ? std::atoi(cap) : 0;
  return n >= 2 && n < runs ? n : runs;
}

void expect_bitwise_repeatable(std::initializer_list<int64_t> dims, const RepeatShape &s,
                               const std::vector<std::string> &kernel_parts,
                               const std::function<void(const std::string &, int64_t)> &check_kernel = {}) {
  for (int64_t dim : dims)
    for (int causal : {1, 0}) {
      BackwardData d({.batch = s.batch,
                      .seqlen_q = s.seqlen_q,
                      .seqlen_k = causal ? s.causal_seqlen_k : s.seqlen_q,
                      .heads_q = s.heads_q,
                      .heads_kv = s.heads_kv,
                      .head_dim = dim,
                      .dtype = s.dtype,
                      .causal = causal});
      bool equal = true;
      const int runs = det_runs(s.runs);
      run_on_device(d, 1, runs, &equal);
      EXPECT_TRUE(equal) << "deterministic = 1 gave different bits across " << runs << " runs: " << d.name();
      const std::string kernel = flashbox_last_kernel();
      for (const std::string &part : kernel_parts) EXPECT_NE(kernel.find(part), std::string::npos) << kernel;
      if (check_kernel) check_kernel(kernel, dim);
      d.expect_close();
    }
}

// Whether this process runs the Hopper backward (an sm_90 device, sm_90a code built, not forced off).
bool runs_hopper_backward() {
  const char *arch = std::getenv("FLASHBOX_BWD_ARCH");
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  bool hopper = major == 9 && minor == 0 && !(arch != nullptr && std::string(arch) == "sm80");
#ifndef FLASHBOX_HAVE_SM90
  hopper = false;
#endif
  return hopper;
}

// On the Hopper kernel, the deterministic order the plan must have picked (det_walk.hpp): "_qdesc"
// (v10's) in the name exactly when uses_qdesc_walk says so, and "_dqpair" (v9's with two dQ writers)
// exactly when uses_dq_pair does (bf16 head_dim 64 outside v10's order).
std::function<void(const std::string &, int64_t)> expect_order(bool hopper, const RepeatShape &s) {
  if (!hopper) return {};
  return [s](const std::string &kernel, int64_t dim) {
    const bool want = sm90::bwd::uses_qdesc_walk(sm90::bwd::kernel_head_dim(dim), s.dtype == FLASHBOX_BFLOAT16, false,
                                                 s.heads_q / s.heads_kv);
    EXPECT_EQ(kernel.find("_qdesc") != std::string::npos, want)
        << kernel << ": head_dim " << dim << ", group " << s.heads_q / s.heads_kv << (want ? ", v10's" : ", v9's")
        << " order expected";
    const bool pair = sm90::bwd::uses_dq_pair(sm90::bwd::kernel_head_dim(dim), s.dtype == FLASHBOX_BFLOAT16, want, false);
    EXPECT_EQ(kernel.find("_dqpair") != std::string::npos, pair)
        << kernel << ": head_dim " << dim << (pair ? ", two dQ writers" : ", no DQPAIR kernel") << " expected";
  };
}

// 50 runs each (issue 15's bar), causal and not, GQA, seqlen_q != seqlen_k; on an sm_90 device the
// Hopper kernel's semaphore-ordered dQ adds are what runs, here in v10's order (bf16, GQA 2: "_qdesc"
// at both head dims).
TEST(CudaBackward, DeterministicModeIsBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  const bool hopper = runs_hopper_backward();
  std::vector<std::string> kernel_parts = {"deterministic"};
  if (hopper) kernel_parts.push_back("sm90");
  const RepeatShape s{.batch = 2, .seqlen_q = 700, .causal_seqlen_k = 900, .runs = 50};
  expect_bitwise_repeatable({64, 128}, s, kernel_parts, expect_order(hopper, s));
}

// Atomic dQ, the same call repeated (branch convq): each call's scratch comes back from the stream-
// ordered pool at the same addresses, holding the last call's completion counters, already at their
// targets; the sm90 early dQ convert must not take them for this call's (prepare zeroes them, and
// the main kernel lets convert start only after prepare completed). Every run against the reference,
// causal with seqlen_q != seqlen_k (empty first rows, blocks with few adders), GQA, several key blocks.
TEST(CudaBackward, AtomicRepeatsMatchReference) {
  SKIP_WITHOUT_GPU();
  for (int64_t dim : {64, 128}) {
    BackwardData d({.batch = 2, .seqlen_q = 500, .seqlen_k = 300, .heads_q = 4, .heads_kv = 2, .head_dim = dim,
                    .dtype = FLASHBOX_BFLOAT16, .causal = 1});
    for (int r = 0; r < 10; ++r) {
      d.poison();  // every run writes every element again
      run_on_device(d, 0);
      SCOPED_TRACE("run " + std::to_string(r));
      d.expect_close();
    }
  }
}

// The other side of the plan's choice (det_walk.hpp), 50 runs each as above: v9's order with two dQ
// writers on bf16 MHA head_dim 64 (short and past 1024 keys), v9's with one on fp16 GQA, v10's on
// bf16 MHA head_dim 128 and a GQA group of 8.
TEST(CudaBackward, DeterministicOrdersAreBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  const bool hopper = runs_hopper_backward();
  std::vector<std::string> kernel_parts = {"deterministic"};
  if (hopper) kernel_parts.push_back("sm90");
  const RepeatShape mha{.batch = 1, .seqlen_q = 500, .causal_seqlen_k = 700, .runs = 50, .heads_q = 3, .heads_kv = 3};
  expect_bitwise_repeatable({64, 128}, mha, kernel_parts, expect_order(hopper, mha));
  const RepeatShape mha_long{
      .batch = 1, .seqlen_q = 1100, .causal_seqlen_k = 1200, .runs = 50, .heads_q = 3, .heads_kv = 3};
  expect_bitwise_repeatable({64}, mha_long, kernel_parts, expect_order(hopper, mha_long));
  const RepeatShape fp16{.batch = 1, .seqlen_q = 500, .causal_seqlen_k = 300, .runs = 50, .dtype = FLASHBOX_FLOAT16};
  expect_bitwise_repeatable({64, 128}, fp16, kernel_parts, expect_order(hopper, fp16));
  const RepeatShape g8{.batch = 1, .seqlen_q = 300, .causal_seqlen_k = 500, .runs = 50, .heads_q = 8, .heads_kv = 1};
  expect_bitwise_repeatable({64, 128}, g8, kernel_parts, expect_order(hopper, g8));
}

// The plan's choice of the deterministic order (no device needed): v10's for bf16 fixed length at
// head_dim 128 and at 64 with GQA groups > 1 ; v9's for fp16, varlen, 64 MHA
// and the d256 instantiation (which has no deterministic mode), with two dQ writers at bf16 d64
// without softcap.
TEST(CudaBackward, DeterministicOrderChoice) {
  using sm90::bwd::uses_qdesc_walk;
  EXPECT_TRUE(uses_qdesc_walk(128, true, false, 1));
  EXPECT_TRUE(uses_qdesc_walk(128, true, false, 4));
  EXPECT_TRUE(uses_qdesc_walk(64, true, false, 2));
  EXPECT_TRUE(uses_qdesc_walk(64, true, false, 8));
  EXPECT_FALSE(uses_qdesc_walk(64, true, false, 1));
  EXPECT_FALSE(uses_qdesc_walk(64, false, false, 4));  // fp16: descending
  EXPECT_FALSE(uses_qdesc_walk(64, true, true, 4));    // varlen: descending
  using sm90::bwd::uses_dq_pair;
  EXPECT_TRUE(uses_dq_pair(64, true, false, false));
  EXPECT_FALSE(uses_dq_pair(64, true, true, false));   // v10's order: the QDESC kernel's own two writers
  EXPECT_FALSE(uses_dq_pair(64, true, false, true));   // softcap: the CAPSEL kernel
  EXPECT_FALSE(uses_dq_pair(64, false, false, false));  // fp16
  EXPECT_FALSE(uses_dq_pair(32, true, false, false));
  EXPECT_FALSE(uses_dq_pair(96, true, false, false));
  EXPECT_FALSE(uses_dq_pair(128, true, false, false));
  EXPECT_FALSE(uses_qdesc_walk(128, false, false, 1));
  EXPECT_FALSE(uses_qdesc_walk(64, false, false, 4));
  EXPECT_FALSE(uses_qdesc_walk(128, true, true, 1));
  EXPECT_FALSE(uses_qdesc_walk(64, true, true, 4));
  EXPECT_FALSE(uses_qdesc_walk(256, true, false, 4));
}

// The Hopper backward's route (no device needed, bwd_route.hpp): every multiple of 8 in 8..256 on the
// smallest instantiation at least as wide (8..32 on d32, 40..64 on d64, 72..96 on d96, 104..128 on
// d128, 136..192 on d192, 200..256 on d256), nothing else; accumulator rows of whole 64-column chunks
// (d32's: 64, d96's: 128); deterministic bf16 GQA at 8..32 on d64 (plan_kernel_d, its v10 order);
// varlen and deterministic mode up to 128 (d32, d64, d96, d128); and the deterministic order of a padded
// head_dim is its instantiation's (uses_qdesc_walk takes kernel_d: a head_dim of 40 with GQA runs
// d64's v10 order, one of 112 d128's).
TEST(CudaBackward, HopperRouteChoice) {
  using namespace sm90::bwd;
  for (int64_t d = -8; d <= 272; ++d) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    const bool ok = d >= 8 && d <= 256 && d % 8 == 0;
    int want = 0;
    if (ok) want = d <= 32 ? 32 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;
    const int kd = kernel_head_dim(d);
    ASSERT_EQ(kd, want);
    if (!ok) {
      EXPECT_NE(route_decline(kd, false, false), nullptr);
      continue;
    }
    EXPECT_GE(accum_d_for(kd), d);
    EXPECT_EQ(accum_d_for(kd) % 64, 0);
    EXPECT_EQ(route_decline(kd, false, false), nullptr);
    EXPECT_EQ(route_decline(kd, true, false) == nullptr, d <= 128);
    EXPECT_EQ(route_decline(kd, false, true) == nullptr, d <= 128);
    EXPECT_EQ(route_decline(kd, true, true) == nullptr, d <= 128);
    // plan_kernel_d: the instantiation, but d64 for deterministic bf16 fixed-length GQA at 8..32.
    for (int det : {0, 1})
      for (int bf16 : {0, 1})
        for (int varlen : {0, 1})
          for (int64_t group : {1, 4}) {
            const bool to64 = kd == 32 && det && bf16 && !varlen && group > 1;
            EXPECT_EQ(plan_kernel_d(d, det, bf16, varlen, group), to64 ? 64 : kd)
                << det << bf16 << varlen << group;
          }
  }
  // The head dims the route added (branch paddims; 8..32 on d32 since branch d32bwd): sm90 where sm80
  // ran before.
  for (int64_t d : {8, 16, 24, 32}) EXPECT_EQ(kernel_head_dim(d), 32) << d;
  for (int64_t d : {40, 48, 56}) EXPECT_EQ(kernel_head_dim(d), 64) << d;
  EXPECT_FALSE(uses_qdesc_walk(kernel_head_dim(32), true, false, 4));
  EXPECT_EQ(accum_d_for(32), 64);
  for (int64_t d : {104, 112, 120}) EXPECT_EQ(kernel_head_dim(d), 128) << d;
  EXPECT_EQ(accum_d_for(96), 128);
  EXPECT_EQ(accum_d_for(64), 64);
  EXPECT_EQ(accum_d_for(128), 128);
  EXPECT_TRUE(uses_qdesc_walk(kernel_head_dim(40), true, false, 4));
  EXPECT_FALSE(uses_qdesc_walk(kernel_head_dim(40), true, false, 1));
  EXPECT_TRUE(uses_qdesc_walk(kernel_head_dim(112), true, false, 1));
  EXPECT_FALSE(uses_qdesc_walk(kernel_head_dim(112), false, false, 1));
}

// Head dims above 128 (the sm80 d256 kernels: dK/dV and dQ split into column halves): the
// deterministic mode gives the same bits over 3 runs, causal and not, GQA, seqlen_q != seqlen_k.
TEST(CudaBackward, DeterministicHeadDim256IsBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_repeatable({160, 256}, {.batch = 1, .seqlen_q = 300, .causal_seqlen_k = 400, .runs = 3},
                            {"cuda_flash_bwd_sm80_d256_deterministic"});
}

}  // namespace
}  // namespace flashbox::test

#else
TEST(CudaBackward, NotBuilt) { GTEST_SKIP() << "flashbox was built without CUDA: the CUDA backward is not run"; }
#endif
