// The simulated ring on one GPU (built with CUDA only; skipped without a GPU, with the reason): N = 2,
// 3, 4, 8 ranks, each with its own compute stream and transfer stream, flashbox's CUDA kernels for
// every local call and the loopback transport between ranks. Every mask (non-causal, causal zigzag,
// causal contiguous), GQA, ring and all-gather, forward and backward, bf16 < 1e-2 against the fp64
// reference of the whole sequence, and the forward against one flashbox call on the whole sequence.
// Shapes are not multiples of the kernels' tiles in some cases (S = 96, chunks of 48).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "context_parallel/ring_case.hpp"
#include "cuda/device_attention.hpp"

namespace flashbox::test {
namespace {

// Device copies of host buffers; download() copies them back into the same host vectors.
class Mirror {
 public:
  ~Mirror() {
    for (auto &e : entries_) cudaFree(e.dev);
  }
  template <typename T>
  void *add(std::vector<T> &host) {
    Entry e{host.data(), host.size() * sizeof(T), nullptr};
    if (cudaMalloc(&e.dev, e.bytes) != cudaSuccess) return nullptr;
    cudaMemcpy(e.dev, e.host, e.bytes, cudaMemcpyHostToDevice);
    entries_.push_back(e);
    return e.dev;
  }
  bool download() {
    if (cudaDeviceSynchronize() != cudaSuccess) return false;
    for (auto &e : entries_)
      if (cudaMemcpy(e.host, e.dev, e.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    return true;
  }

 private:
  struct Entry {
    void *host;
    size_t bytes;
    void *dev;
  };
  std::vector<Entry> entries_;
};

class Streams {
 public:
  explicit Streams(int n) : s_(size_t(n), nullptr) {
    for (auto &s : s_) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  }
  ~Streams() {
    for (auto s : s_) cudaStreamDestroy(s);
  }
  cudaStream_t operator[](int i) const { return s_[size_t(i)]; }

 private:
  std::vector<cudaStream_t> s_;
};

struct Shape {
  int world;
  int64_t S, batch, hq, hkv, d;
};
// One shape per world size: both head_dims, MHA, GQA and MQA, tile multiples and not.
constexpr Shape kShapes[] = {{2, 256, 2, 4, 2, 128},
                             {3, 192, 1, 4, 4, 64},
                             {4, 128, 1, 8, 2, 128},
                             {8, 96, 1, 4, 1, 64}};

AttentionCase global_case(const Shape &s, int causal) {
  return AttentionCase{.batch = s.batch,
                       .seqlen_q = s.world * s.S,
                       .seqlen_k = s.world * s.S,
                       .heads_q = s.hq,
                       .heads_kv = s.hkv,
                       .head_dim = s.d,
                       .dtype = FLASHBOX_BFLOAT16,
                       .causal = causal,
                       .device = FLASHBOX_CUDA};
}

void gpu_forward(const Shape &s, RingMask m, cp::Variant variant) {
  const cp::Options opt{m.layout, variant};
  RingForwardCase rc(global_case(s, m.causal), s.world, opt);
  Mirror mirror;
  Streams streams(s.world);
  for (int r = 0; r < s.world; ++r) {
    flashbox_attention_args &a = rc.args[size_t(r)];
    a.q = mirror.add(rc.q[size_t(r)]), a.k = mirror.add(rc.k[size_t(r)]), a.v = mirror.add(rc.v[size_t(r)]);
    a.o = mirror.add(rc.o[size_t(r)]), a.lse = static_cast<float *>(mirror.add(rc.lse[size_t(r)]));
    a.stream = streams[r];
    ASSERT_TRUE(a.q && a.k && a.v && a.o && a.lse) << "cudaMalloc failed";
  }
  ASSERT_EQ(cp::forward_simulated(rc.args.data(), s.world, opt), 0) << rc.name() << ": " << cp::last_error();
  ASSERT_TRUE(mirror.download());
  rc.collect();
  AttentionData &d = rc.data();
  const Comparison r = d.compare();
  EXPECT_FALSE(r.has_nan) << rc.name();
  EXPECT_LT(r.rel_error, 1e-2) << rc.name();
  EXPECT_LT(r.lse_max_abs_error, 2e-2) << rc.name();
  // One flashbox call over the whole sequence on the GPU, same inputs.
  const std::vector<double> ring_out = d.output_dense();
  d.poison();
  DeviceAttention single(d);
  single.upload();
  ASSERT_EQ(flashbox_attention_forward(&single.args), 0) << flashbox_last_error();
  single.download();
  EXPECT_LT(rel_diff(ring_out, d.output_dense()), 1e-2) << "ring vs single call: " << rc.name();
  std::printf("  %-70s rel err %.2e (single call %.2e), ring vs single %.2e\n", rc.name().substr(0, 70).c_str(),
              r.rel_error, d.compare().rel_error, rel_diff(ring_out, d.output_dense()));
}

// Points rank r's gradient args (its forward's q, k, v, o, lse and dout, dq, dk, dv) at device
// mirrors of its host shards.
void mirror_grad(Mirror &mirror, RingBackwardCase &rc, int r) {
  flashbox_attention_grad_args &g = rc.grads[size_t(r)];
  const size_t i = size_t(r);
  g.fwd.q = mirror.add(rc.q[i]), g.fwd.k = mirror.add(rc.k[i]), g.fwd.v = mirror.add(rc.v[i]);
  g.fwd.o = mirror.add(rc.o[i]), g.fwd.lse = static_cast<float *>(mirror.add(rc.lse[i]));
  g.dout = mirror.add(rc.dout[i]), g.dq = mirror.add(rc.dq[i]), g.dk = mirror.add(rc.dk[i]),
  g.dv = mirror.add(rc.dv[i]);
}

void gpu_backward(const Shape &s, RingMask m, cp::Variant variant) {
  const cp::Options opt{m.layout, variant};
  RingBackwardCase rc(global_case(s, m.causal), s.world, opt);
  Mirror mirror;
  Streams streams(s.world);
  for (int r = 0; r < s.world; ++r) {
    flashbox_attention_grad_args &g = rc.grads[size_t(r)];
    mirror_grad(mirror, rc, r);
    g.fwd.stream = streams[r];
    ASSERT_TRUE(g.dq && g.dk && g.dv && g.dout) << "cudaMalloc failed";
  }
  ASSERT_EQ(cp::backward_simulated(rc.grads.data(), s.world, opt), 0) << rc.name() << ": " << cp::last_error();
  ASSERT_TRUE(mirror.download());
  rc.collect();
  rc.data().expect_close();
  const std::vector<GradError> e = rc.data().compare();
  std::printf("  %-70s dq %.2e dk %.2e dv %.2e\n", rc.name().substr(0, 70).c_str(), e[0].rel, e[1].rel, e[2].rel);
}

class GpuRing : public ::testing::TestWithParam<cp::Variant> {};

TEST_P(GpuRing, ForwardEveryMaskAndWorld) {
  SKIP_WITHOUT_GPU();
  for (const Shape &s : kShapes)
    for (const RingMask &m : kRingMasks) gpu_forward(s, m, GetParam());
}

TEST_P(GpuRing, BackwardEveryMaskAndWorld) {
  SKIP_WITHOUT_GPU();
  for (const Shape &s : kShapes)
    for (const RingMask &m : kRingMasks) gpu_backward(s, m, GetParam());
}

// A small case for compute-sanitizer (memcheck): both passes, causal zigzag and non-causal.
TEST_P(GpuRing, Small) {
  SKIP_WITHOUT_GPU();
  const Shape s{3, 64, 1, 2, 1, 64};
  for (const RingMask &m : {kRingMasks[0], kRingMasks[2]}) {
    gpu_forward(s, m, GetParam());
    gpu_backward(s, m, GetParam());
  }
}

// The forward's own O and LSE (on the device) into the backward: the training pipeline.
TEST_P(GpuRing, ForwardThenBackward) {
  SKIP_WITHOUT_GPU();
  const Shape s{4, 128, 1, 4, 2, 128};
  const cp::Options opt{cp::Layout::ZIGZAG, GetParam()};
  RingBackwardCase rc(global_case(s, 1), s.world, opt);
  Mirror mirror;
  Streams streams(s.world);
  std::vector<flashbox_attention_args> fwd;
  for (int r = 0; r < s.world; ++r) {
    flashbox_attention_grad_args &g = rc.grads[size_t(r)];
    poison_bytes(rc.o[size_t(r)]);
    mirror_grad(mirror, rc, r);
    g.fwd.stream = streams[r];
    fwd.push_back(g.fwd);
  }
  ASSERT_EQ(cp::forward_simulated(fwd.data(), s.world, opt), 0) << cp::last_error();
  ASSERT_EQ(cp::backward_simulated(rc.grads.data(), s.world, opt), 0) << cp::last_error();
  ASSERT_TRUE(mirror.download());
  rc.collect();
  rc.data().expect_close();
}

INSTANTIATE_TEST_SUITE_P(Variants, GpuRing, ::testing::Values(cp::Variant::RING, cp::Variant::ALL_GATHER),
                         [](const auto &info) { return std::string(variant_label(info.param)); });

}  // namespace
}  // namespace flashbox::test
