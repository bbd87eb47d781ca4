// The simulated ring on the CPU (flashbox's CPU backend for every local call, the loopback transport
// between ranks): for N = 1, 2, 3, 4, 8 ranks, every mask (non-causal, causal with the zigzag and the
// contiguous layout), MHA and GQA, ring and all-gather, forward and backward equal the fp64 reference
// of the whole sequence (fp32 < 1e-5, bf16 < 1e-2) and the single call on the whole sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "context_parallel/ring_case.hpp"

namespace flashbox::test {
namespace {

constexpr int kWorlds[] = {1, 2, 3, 4, 8};

AttentionCase global_case(int world, int64_t S, int causal, int64_t hq, int64_t hkv, flashbox_dtype dtype) {
  return AttentionCase{.batch = 2,
                       .seqlen_q = world * S,
                       .seqlen_k = world * S,
                       .heads_q = hq,
                       .heads_kv = hkv,
                       .head_dim = 16,
                       .dtype = dtype,
                       .causal = causal};
}

void run_forward(int world, int64_t S, RingMask m, cp::Variant variant, int64_t hq, int64_t hkv, flashbox_dtype dtype) {
  const cp::Options opt{m.layout, variant};
  RingForwardCase rc(global_case(world, S, m.causal, hq, hkv, dtype), world, opt);
  ASSERT_EQ(cp::forward_simulated(rc.args.data(), world, opt), 0) << rc.name() << ": " << cp::last_error();
  rc.collect();
  AttentionData &d = rc.data();
  const Comparison r = d.compare();
  EXPECT_FALSE(r.has_nan) << rc.name();
  EXPECT_LT(r.rel_error, d.tolerance()) << rc.name();
  EXPECT_LT(r.lse_max_abs_error, 1e-3) << rc.name();
  // The single call over the whole sequence, on the same inputs.
  const std::vector<double> ring_out = d.output_dense();
  d.poison();
  ASSERT_EQ(flashbox_attention_forward(&d.args), 0) << flashbox_last_error();
  EXPECT_LT(rel_diff(ring_out, d.output_dense()), d.tolerance()) << "ring vs single call: " << rc.name();
}

void run_backward(int world, int64_t S, RingMask m, cp::Variant variant, int64_t hq, int64_t hkv, flashbox_dtype dtype) {
  const cp::Options opt{m.layout, variant};
  RingBackwardCase rc(global_case(world, S, m.causal, hq, hkv, dtype), world, opt);
  ASSERT_EQ(cp::backward_simulated(rc.grads.data(), world, opt), 0) << rc.name() << ": " << cp::last_error();
  rc.collect();
  rc.data().expect_close();
}

// GQA at every world size, MHA at two (CI time: the fp64 reference backward dominates).
std::vector<std::pair<int64_t, int64_t>> heads_for(int world) {
  if (world == 2 || world == 3) return {{2, 2}, {4, 2}};
  return {{4, 2}};
}

class CpuRing : public ::testing::TestWithParam<cp::Variant> {};

TEST_P(CpuRing, ForwardFp32EveryMaskAndWorld) {
  for (const RingMask &m : kRingMasks)
    for (int world : kWorlds)
      for (auto [hq, hkv] : heads_for(world)) run_forward(world, 10, m, GetParam(), hq, hkv, FLASHBOX_FLOAT32);
}

TEST_P(CpuRing, BackwardFp32EveryMaskAndWorld) {
  for (const RingMask &m : kRingMasks)
    for (int world : kWorlds)
      for (auto [hq, hkv] : heads_for(world)) run_backward(world, 10, m, GetParam(), hq, hkv, FLASHBOX_FLOAT32);
}

TEST_P(CpuRing, Bf16ForwardAndBackward) {
  for (const RingMask &m : kRingMasks)
    for (int world : {2, 3, 8}) {
      run_forward(world, 12, m, GetParam(), 4, 1, FLASHBOX_BFLOAT16);
      run_backward(world, 12, m, GetParam(), 4, 1, FLASHBOX_BFLOAT16);
    }
}

// The forward's own O and LSE fed to the backward: the training pipeline, end to end.
TEST_P(CpuRing, ForwardThenBackward) {
  const int world = 4;
  const int64_t S = 8;
  for (int causal : {0, 1}) {
    const cp::Options opt{cp::Layout::ZIGZAG, GetParam()};
    RingBackwardCase rc(global_case(world, S, causal, 4, 2, FLASHBOX_FLOAT32), world, opt);
    std::vector<flashbox_attention_args> fwd;
    for (auto &g : rc.grads) fwd.push_back(g.fwd);  // o and lse point at the shards' o and lse
    for (int r = 0; r < world; ++r) poison_bytes(rc.o[size_t(r)]);
    ASSERT_EQ(cp::forward_simulated(fwd.data(), world, opt), 0) << cp::last_error();
    ASSERT_EQ(cp::backward_simulated(rc.grads.data(), world, opt), 0) << cp::last_error();
    rc.collect();
    rc.data().expect_close();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CpuRing, ::testing::Values(cp::Variant::RING, cp::Variant::ALL_GATHER),
                         [](const auto &info) { return std::string(variant_label(info.param)); });

}  // namespace
}  // namespace flashbox::test
