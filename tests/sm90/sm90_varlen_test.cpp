// The Hopper forward on variable-length batches (cu_seqlens, [total, heads, head_dim] tensors;
// flashbox_attention_forward_ext) against the fp64 reference of src/cpu/reference_fp64, one
// reference call per sequence. Every case draws fresh seeded bf16/fp16 inputs (the seed is in the
// failure message; FLASHBOX_TEST_SEED=N reproduces), over-allocates O by rows past the batch's total,
// poisons O and LSE with NaN between guard bytes, and checks rel error < 1e-2, LSE (exact -inf for
// rows that see no key), no NaN, that the rows past the total and the guards are untouched, and that
// the sm90 kernel's varlen path ran (the instantiation that serves head_dim: 64 or 128). O may have
// guard columns (o_pad: bytes past head_dim in each row that must stay poisoned). Lengths include
// 0 and 1 and straddle the tile edges (63, 64, 65, 127, 128, 129, 1000, 4097), seqlen_q != seqlen_k per sequence (causal is bottom-right aligned
// within each sequence), GQA, windows, softcap and ALiBi per sequence.
// FLASHBOX_SM90_VARLEN_SMALL=1 keeps only the short cases (for compute-sanitizer). Skips without an
// sm90 GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/masks.hpp"
#include "cpu/reference_fp64.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "sm90/varlen_case.hpp"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"

namespace flashbox::test::sm90_varlen {
namespace {

bool small_only() {
  const char *s = std::getenv("FLASHBOX_SM90_VARLEN_SMALL");
  return s && *s && *s != '0';
}

constexpr int64_t kExtraRows = 70;  // O rows past the total: never written

// The lengths, shape and mods (varlen_case.hpp), then:
struct VarlenCase : VarlenShape {
  int nan_v_seq = -1;  // a sequence whose V rows are NaN (give it no queries: only its neighbours are checked)
  int64_t o_pad = 0;   // guard columns: O's head stride is head_dim + o_pad, the pad must stay poisoned
  uint64_t seed = fresh_seed();

  std::string name() const {
    return VarlenShape::name() + (o_pad ? " o_pad" + std::to_string(o_pad) : "") + " seed " + std::to_string(seed) +
           " (rerun with FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")";
  }
};

void check(const VarlenCase &c) {
  SCOPED_TRACE(c.name());
  ASSERT_EQ(c.lens_q.size(), c.lens_k.size());
  const int64_t B = int64_t(c.lens_q.size()), HQ = c.heads_q, HKV = c.heads_kv, D = c.head_dim, es = 2;
  const int64_t OD = D + c.o_pad;  // O's head stride: the columns past D are the caller's
  const VarlenPacking p(c);
  const std::vector<int32_t> &cu_q = p.cu_q, &cu_k = p.cu_k;
  const int64_t TQ = p.total_q, TK = p.total_k;
  Sm90Inputs inputs(c.seed);
  std::vector<uint8_t> q = inputs.normal(c.dtype, TQ * HQ * D), k = inputs.normal(c.dtype, TK * HKV * D),
                       v = inputs.normal(c.dtype, TK * HKV * D);
  if (c.nan_v_seq >= 0)
    for (int64_t i = cu_k[size_t(c.nan_v_seq)] * HKV * D; i < cu_k[size_t(c.nan_v_seq) + 1] * HKV * D; ++i)
      cpu::store_from_float(v.data(), c.dtype, i, NAN);
  const std::vector<float> slopes = inputs.slopes(c.alibi, B, HQ, c.slope_stride());

  // The reference, one fixed-length call per sequence, into [total, heads, dim] and [heads, total].
  std::vector<double> ref_o(size_t(TQ * HQ * D), 0.0), ref_lse(size_t(HQ * TQ), -INFINITY);
  for (int64_t s = 0; s < B; ++s) {
    const int64_t q0 = cu_q[size_t(s)], lq = c.lens_q[size_t(s)], lk = c.lens_k[size_t(s)];
    if (lq == 0 || lk == 0) continue;  // no rows, or rows that see no key: O = 0, LSE = -inf
    const flashbox_attention_args a = sequence_args(c, p, s, q.data(), k.data(), v.data());
    const core::ScoreMods mods = sequence_mods(c, slopes, s);
    std::vector<double> o, lse;
    cpu::reference_attention_fp64(a, o, &lse, &mods);
    std::copy(o.begin(), o.end(), ref_o.begin() + q0 * HQ * D);
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < lq; ++i) ref_lse[size_t(h * TQ + q0 + i)] = lse[size_t(h * lq + i)];
  }

  DeviceMem mem;
  const size_t o_size = size_t((TQ + kExtraRows) * HQ * OD * es), lse_size = size_t(HQ * TQ) * 4;
  void *dq = mem.alloc(q.size()), *dk = mem.alloc(k.size()), *dv = mem.alloc(v.size());
  auto *o_raw = static_cast<uint8_t *>(mem.alloc(o_size + 2 * kGuard));
  auto *lse_raw = static_cast<uint8_t *>(mem.alloc(lse_size + 2 * kGuard));
  void *dcu_q = mem.alloc(cu_q.size() * 4), *dcu_k = mem.alloc(cu_k.size() * 4);
  float *dslopes = c.alibi ? static_cast<float *>(mem.alloc(slopes.size() * 4)) : nullptr;
  ASSERT_TRUE(dq && dk && dv && o_raw && lse_raw && dcu_q && dcu_k && (!c.alibi || dslopes)) << "cudaMalloc failed";
  CUDA_OK(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dk, k.data(), k.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv, v.data(), v.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dcu_q, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dcu_k, cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
  if (c.alibi) CUDA_OK(cudaMemcpy(dslopes, slopes.data(), slopes.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(o_raw, kGuardByte, o_size + 2 * kGuard));
  CUDA_OK(cudaMemset(lse_raw, kGuardByte, lse_size + 2 * kGuard));
  CUDA_OK(cudaMemset(o_raw + kGuard, 0xff, o_size));  // NaN poison, also over the rows past the total
  CUDA_OK(cudaMemset(lse_raw + kGuard, 0xff, lse_size));

  flashbox_attention_args g = packed_args(c, p, OD);
  g.q = dq, g.k = dk, g.v = dv, g.o = o_raw + kGuard, g.lse = reinterpret_cast<float *>(lse_raw + kGuard);
  const flashbox_attention_ext e = packed_ext(c, p, dslopes, dcu_q, dcu_k);
  ASSERT_EQ(flashbox_attention_forward_ext(&g, &e), 0) << flashbox_last_error();
  const std::string kernel = flashbox_last_kernel();
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(kernel.rfind("cuda_flash_sm90", 0), 0u) << "ran " << kernel;
  EXPECT_NE(kernel.find("_varlen"), std::string::npos) << "ran " << kernel;
  // The next instantiation up; softcap or ALiBi at 72..96 run the 128 kernel (the 96 one has no MODS tile).
  const bool transforms = c.softcap > 0.f || c.alibi != 0;
  const std::string served = D <= 64                ? "cuda_flash_sm90_d64_"
                             : D <= 96 && !transforms ? "cuda_flash_sm90_d96_"
                                                      : "cuda_flash_sm90_d128_";
  EXPECT_EQ(kernel.rfind(served, 0), 0u) << "ran " << kernel;

  std::vector<uint8_t> o_host(o_size + 2 * kGuard), lse_host(lse_size + 2 * kGuard);
  CUDA_OK(cudaMemcpy(o_host.data(), o_raw, o_host.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lse_host.data(), lse_raw, lse_host.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(guard_intact(o_host, o_size) && guard_intact(lse_host, lse_size)) << "write outside O or LSE";
  const size_t written = size_t(TQ * HQ * OD * es);
  int64_t past_total = 0, pad_changed = 0;
  for (size_t i = written; i < o_size; ++i) past_total += o_host[kGuard + i] != 0xff;
  EXPECT_EQ(past_total, 0) << "bytes of O past the batch's total rows changed";
  for (int64_t rh = 0; rh < TQ * HQ; ++rh)  // every (row, head): its bytes past head_dim
    for (int64_t byte = D * es; byte < OD * es; ++byte) pad_changed += o_host[size_t(kGuard + rh * OD * es + byte)] != 0xff;
  EXPECT_EQ(pad_changed, 0) << "bytes of O past head_dim (guard columns) changed";

  auto o_at = [&](size_t i) -> double {  // O's element i of [total, heads, D] in its rows of OD
    return cpu::load_as_float(o_host.data() + kGuard, c.dtype, int64_t(i) / D * OD + int64_t(i) % D);
  };
  const ForwardError result =
      expect_forward_close(o_at, ref_o, reinterpret_cast<const float *>(lse_host.data() + kGuard), ref_lse);
  std::fprintf(stderr, "  %s: rel %.3e, LSE max abs %.3e, %s\n", c.name().c_str(), result.rel, result.lse,
               kernel.c_str());
}

VarlenCase mk(std::vector<int> lq, std::vector<int> lk, int64_t d, int causal) {
  return varlen_case<VarlenCase>(std::move(lq), std::move(lk), d, causal);
}

class Sm90Varlen : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!have_hopper(why)) GTEST_SKIP() << "sm90 test not run: " << why;
  }
};

// Lengths at the tile edges (BM 192 or 128, BN 128, the 64-row store slices), 0 and 1, causal and
// not, GQA, head_dim 64 and 128.
TEST_F(Sm90Varlen, TileEdges) {
  const std::vector<int> lens = small_only() ? std::vector<int>{63, 0, 1, 65, 129}
                                             : std::vector<int>{63, 64, 65, 0, 127, 128, 1, 129, 1000, 191, 193};
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) check(mk(lens, lens, d, causal));
}

// seqlen_q != seqlen_k per sequence (bottom-right aligned: rows of a longer query see nothing
// under causal), including sequences whose keys are empty (O = 0, LSE = -inf) or whose queries are.
TEST_F(Sm90Varlen, DifferentLengths) {
  const std::vector<int> lq = small_only() ? std::vector<int>{17, 65, 0, 3} : std::vector<int>{100, 300, 65, 1000, 0, 5, 130, 1};
  const std::vector<int> lk = small_only() ? std::vector<int>{65, 17, 9, 0} : std::vector<int>{300, 100, 1000, 65, 7, 0, 129, 200};
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) check(mk(lq, lk, d, causal));
}

// Random lengths (seeded, 0 and 1 included), MHA, GQA and MQA.
TEST_F(Sm90Varlen, RandomLengths) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("lengths seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  const int n = small_only() ? 6 : 24, top = small_only() ? 80 : 400;
  std::uniform_int_distribution<int> len(0, top);
  for (int trial = 0; trial < 2; ++trial)
    for (int64_t d : {64, 128}) {
      std::vector<int> lq(static_cast<size_t>(n)), lk(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) lq[size_t(i)] = len(rng), lk[size_t(i)] = trial ? len(rng) : lq[size_t(i)];
      lq[0] = 0, lq[1] = 1, lk[1] = trial ? 1 : lk[1], lq[2] = lk[2] = 1;
      for (int causal : {0, 1}) {
        VarlenCase c = mk(lq, lk, d, causal);
        c.heads_q = 6, c.heads_kv = trial ? 1 : 3;
        check(c);
      }
    }
}

// Many short sequences: a long tile list (the list kernel's warps loop over sequences).
TEST_F(Sm90Varlen, ManySequences) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_int_distribution<int> len(0, 40);
  std::vector<int> l(small_only() ? 40 : 300);
  for (int &x : l) x = len(rng);
  for (int causal : {0, 1}) {
    VarlenCase c = mk(l, l, 64, causal);
    c.heads_q = c.heads_kv = 2;
    check(c);
  }
}

// Sliding windows, softcap and ALiBi (one slope per head and a row per sequence) within each
// sequence, and fp16.
TEST_F(Sm90Varlen, WindowsSoftcapAlibi) {
  const std::vector<int> lq = small_only() ? std::vector<int>{65, 1, 130} : std::vector<int>{65, 1, 300, 0, 1000, 129};
  const std::vector<int> lk = small_only() ? std::vector<int>{65, 40, 130} : std::vector<int>{65, 40, 300, 3, 900, 300};
  for (int64_t d : {64, 128}) {
    VarlenCase c = mk(lq, lk, d, 1);
    c.window_left = 64;
    check(c);
    c = mk(lq, lk, d, 0);
    c.window_left = 100, c.window_right = 50;
    check(c);
    c = mk(lq, lq, d, 0);
    c.window_left = 0, c.window_right = 0;
    check(c);
    c = mk(lq, lk, d, 1);
    c.softcap = 30.f, c.alibi = 2;
    check(c);
    c = mk(lq, lk, d, 0);
    c.alibi = 1, c.window_left = 200, c.window_right = 20, c.dtype = FLASHBOX_FLOAT16;
    check(c);
  }
}

// A sequence's last key block reads the next sequence's rows: NaN values there (a sequence without
// queries here, so that only its neighbours' outputs are checked) must not reach the outputs
// (they are zeroed in shared memory before the first P.V; 0 * NaN would be NaN).
TEST_F(Sm90Varlen, NonFiniteNeighbourRows) {
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) {
      VarlenCase c = mk({100, 0, 65, 0, 1}, {100, 50, 65, 200, 1}, d, causal);
      c.nan_v_seq = 1;
      check(c);
      c = mk({100, 0, 65, 0, 1}, {100, 50, 65, 200, 1}, d, causal);
      c.nan_v_seq = 3;
      check(c);
    }
}

// head_dims that are not an instantiation's (64, 128) run on the next one up, the columns past
// head_dim zero-filled by the TMA: the partial-slice store (a sequence ending inside a 64-row slice,
// copied row by row, not by the TMA) must write only head_dim columns: O with guard columns (head
// stride head_dim + 8) whose bytes must stay poisoned. Lengths 0 and 1 and slices' edges, causal and
// not, GQA, a window, softcap and ALiBi, fp16. head_dims above 128 are declined to sm80 (the 256
// instantiation has no varlen path): Sm90HeadDims' plan test.
TEST_F(Sm90Varlen, HeadDimsOnTheNextInstantiation) {
  const std::vector<int> lq = small_only() ? std::vector<int>{0, 1, 65} : std::vector<int>{63, 0, 1, 65, 130, 1000, 17};
  const std::vector<int> lk = small_only() ? std::vector<int>{3, 1, 65} : std::vector<int>{63, 5, 1, 200, 129, 1000, 0};
  for (int64_t d : {8, 32, 40, 72, 96, 120})
    for (int causal : {0, 1}) {
      VarlenCase c = mk(lq, lk, d, causal);
      c.o_pad = 8;
      check(c);
      c = mk(lq, lq, d, causal);
      c.o_pad = 16, c.heads_q = 6, c.heads_kv = 1;
      check(c);
    }
  for (int64_t d : {40, 96}) {
    VarlenCase c = mk(lq, lk, d, 0);
    c.o_pad = 8, c.window_left = 100, c.window_right = 30;
    check(c);
    c = mk(lq, lk, d, 1);
    c.o_pad = 8, c.softcap = 30.f, c.alibi = 2;
    check(c);
    c = mk(lq, lk, d, 0);
    c.o_pad = 8, c.alibi = 1, c.dtype = FLASHBOX_FLOAT16;
    check(c);
  }
}

// Long sequences: 4097 (the last block one key long) and many tiles per persistent CTA.
TEST_F(Sm90Varlen, Long) {
  if (small_only()) GTEST_SKIP() << "FLASHBOX_SM90_VARLEN_SMALL: long shapes left out";
  for (int causal : {0, 1}) {
    VarlenCase c = mk({4097, 129, 1, 2000}, {4097, 129, 1, 2000}, 128, causal);
    c.heads_q = 2, c.heads_kv = 1;
    check(c);
  }
  VarlenCase c = mk({4097, 0, 640, 64}, {4097, 5, 640, 64}, 64, 1);
  c.heads_q = 2, c.heads_kv = 2;
  check(c);
}

// cu_seqlens on the device are not checked (flashbox.h): negative, decreasing, past-the-total and
// longer-than-max_seqlen prefix sums give a successful call on the sm90 path with every guard intact
// and no CUDA error (the values of the rows they name are unspecified).
TEST_F(Sm90Varlen, MalformedCuSeqlensStayInBounds) {
  const int64_t total = 300, heads = 2, d = 64;
  std::vector<uint16_t> x(size_t(total * heads * d), 0x3f80);  // bf16 1.0
  const std::vector<int32_t> cu_q = {0, 260, 30, 320, 100, 300}, cu_k = {-5, 50, 200, 10, 400, 300};
  DeviceMem mem;
  void *dx = mem.alloc(x.size() * 2), *dcq = mem.alloc(cu_q.size() * 4), *dck = mem.alloc(cu_k.size() * 4);
  const size_t o_size = x.size() * 2, lse_size = size_t(total * heads) * 4;
  auto *o_raw = static_cast<uint8_t *>(mem.alloc(o_size + 2 * kGuard));
  auto *lse_raw = static_cast<uint8_t *>(mem.alloc(lse_size + 2 * kGuard));
  ASSERT_TRUE(dx && dcq && dck && o_raw && lse_raw);
  CUDA_OK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dcq, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dck, cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16;
  a.batch = 5, a.seqlen_q = a.seqlen_k = total, a.heads_q = a.heads_kv = heads, a.head_dim = d;
  for (int64_t *s : {a.q_stride, a.k_stride, a.v_stride, a.o_stride}) s[0] = total * heads * d, s[1] = heads * d, s[2] = d;
  a.q = a.k = a.v = dx, a.o = o_raw + kGuard, a.lse = reinterpret_cast<float *>(lse_raw + kGuard);
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.cu_seqlens_q = static_cast<const int32_t *>(dcq), e.cu_seqlens_k = static_cast<const int32_t *>(dck);
  e.max_seqlen_q = e.max_seqlen_k = 200;
  for (int causal = 0; causal <= 1; ++causal) {
    CUDA_OK(cudaMemset(o_raw, kGuardByte, o_size + 2 * kGuard));
    CUDA_OK(cudaMemset(lse_raw, kGuardByte, lse_size + 2 * kGuard));
    a.causal = causal;
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
    const std::string kernel = flashbox_last_kernel();
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_NE(kernel.find("_varlen"), std::string::npos) << "ran " << kernel;
    std::vector<uint8_t> o_host(o_size + 2 * kGuard), lse_host(lse_size + 2 * kGuard);
    CUDA_OK(cudaMemcpy(o_host.data(), o_raw, o_host.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse_host.data(), lse_raw, lse_host.size(), cudaMemcpyDeviceToHost));
    EXPECT_TRUE(guard_intact(o_host, o_size) && guard_intact(lse_host, lse_size))
        << "write outside O or LSE (causal " << causal << ")";
  }
}

// A batch whose keys total 0 tokens never reaches a kernel family: validation refuses seqlen_k = 0
// (the sm90 plan would decline it anyway: a tensor map cannot have an empty dimension). Measured on
// the H200 (2026-12-01): "seqlen_k = 0 must be >= 1".
TEST_F(Sm90Varlen, TotalOfZeroKeysIsRefused) {
  DeviceMem mem;
  const int64_t tq = 5, heads = 2, d = 64;
  std::vector<uint16_t> x(size_t(tq * heads * d), 0x3f80);
  const std::vector<int32_t> cu_q = {0, 5}, cu_k = {0, 0};
  void *dx = mem.alloc(x.size() * 2), *dcq = mem.alloc(8), *dck = mem.alloc(8), *dout = mem.alloc(x.size() * 2);
  ASSERT_TRUE(dx && dcq && dck && dout);
  CUDA_OK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dcq, cu_q.data(), 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dck, cu_k.data(), 8, cudaMemcpyHostToDevice));
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16;
  a.batch = 1, a.seqlen_q = tq, a.seqlen_k = 0, a.heads_q = a.heads_kv = heads, a.head_dim = d;
  for (int64_t *s : {a.q_stride, a.k_stride, a.v_stride, a.o_stride}) s[0] = tq * heads * d, s[1] = heads * d, s[2] = d;
  a.q = a.k = a.v = dx, a.o = dout;
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.cu_seqlens_q = static_cast<const int32_t *>(dcq), e.cu_seqlens_k = static_cast<const int32_t *>(dck);
  e.max_seqlen_q = 5, e.max_seqlen_k = 0;
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_ERR_INVALID_SIZE);
  EXPECT_NE(std::string(flashbox_last_error()).find("seqlen_k"), std::string::npos) << flashbox_last_error();
}

}  // namespace
}  // namespace flashbox::test::sm90_varlen
