// The exact alias rule (src/api/overlap.hpp): two strided views share a byte or they do not, decided
// per element set. Checked three ways: named layouts callers use (packed QKV/KV gradients accepted,
// real overlaps refused), a randomized cross-check against brute-force byte sets on small shapes
// (seed printed), and the conservative fallback when the step budget runs out.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "api/overlap.hpp"
#include "support/attention_case.hpp"

namespace flashbox::detail {
namespace {

constexpr uintptr_t kBase = 1 << 20;  // views are described, never dereferenced: any address works

// A [b, s, h, d] tensor of `es`-byte elements at element offset `off` with element strides.
ByteView tensor(int64_t off, int64_t b, int64_t s, int64_t h, int64_t d, int64_t sb, int64_t ss, int64_t sh,
                int64_t es = 2) {
  ByteView v;
  v.base = kBase + uintptr_t(off * es);
  v.run = d * es;
  v.ndims = 3;
  const int64_t st[3] = {sb, ss, sh}, ex[3] = {b, s, h};
  for (int i = 0; i < 3; ++i) v.stride[i] = st[i] * es, v.extent[i] = ex[i];
  return v;
}

ByteView range(int64_t off_bytes, int64_t bytes) {
  ByteView v;
  v.base = kBase + uintptr_t(off_bytes);
  v.run = bytes;
  return v;
}

bool overlap(const ByteView &x, const ByteView &y) {
  const OverlapAnswer a = views_overlap(x, y), b = views_overlap(y, x);
  EXPECT_TRUE(a.exact && b.exact) << "the named layouts must be decided exactly";
  EXPECT_EQ(a.overlap, b.overlap) << "the answer must not depend on the order";
  return a.overlap;
}

TEST(Overlap, PackedQkvBthdIsDisjoint) {
  // qkv [b, s, 3, h, d]: q, k, v = qkv[:, :, i]. FA2's flash_attn_qkvpacked_func and its dqkv.
  for (int64_t d : {8, 64, 128}) {
    const int64_t b = 3, s = 17, h = 4, ss = 3 * h * d, sb = s * ss;
    const ByteView q = tensor(0, b, s, h, d, sb, ss, d), k = tensor(h * d, b, s, h, d, sb, ss, d),
                   v = tensor(2 * h * d, b, s, h, d, sb, ss, d);
    EXPECT_FALSE(overlap(q, k)) << d;
    EXPECT_FALSE(overlap(k, v)) << d;
    EXPECT_FALSE(overlap(q, v)) << d;
    EXPECT_TRUE(overlap(q, q)) << d;
    // One element further and k's last element of each head row is v's first.
    EXPECT_TRUE(overlap(tensor(h * d + 1, b, s, h, d, sb, ss, d), v)) << d;
    EXPECT_TRUE(overlap(tensor(h * d - 1, b, s, h, d, sb, ss, d), q)) << d;
  }
}

TEST(Overlap, PackedKvAndHeadInterleavedLayouts) {
  const int64_t b = 2, s = 33, h = 3, d = 64;
  // kv [b, s, 2, h, d]
  EXPECT_FALSE(overlap(tensor(0, b, s, h, d, s * 2 * h * d, 2 * h * d, d),
                       tensor(h * d, b, s, h, d, s * 2 * h * d, 2 * h * d, d)));
  // [b, s, h, 3, d]: heads 3d apart, q/k/v d apart inside a head.
  const int64_t ss = h * 3 * d, sb = s * ss;
  EXPECT_FALSE(overlap(tensor(0, b, s, h, d, sb, ss, 3 * d), tensor(d, b, s, h, d, sb, ss, 3 * d)));
  EXPECT_FALSE(overlap(tensor(2 * d, b, s, h, d, sb, ss, 3 * d), tensor(d, b, s, h, d, sb, ss, 3 * d)));
  EXPECT_TRUE(overlap(tensor(d / 2, b, s, h, d, sb, ss, 3 * d), tensor(d, b, s, h, d, sb, ss, 3 * d)));
  // qkv [b, 3, h, s, d] (BHTD packed)
  const int64_t sh = s * d, sb2 = 3 * h * s * d;
  EXPECT_FALSE(overlap(tensor(0, b, s, h, d, sb2, d, sh), tensor(h * s * d, b, s, h, d, sb2, d, sh)));
  EXPECT_TRUE(overlap(tensor(0, b, s, h, d, sb2, d, sh), tensor(h * s * d - d, b, s, h, d, sb2, d, sh)));
}

TEST(Overlap, DifferentSeqlensInOneBuffer) {
  // dq [b, sq, h, d] and dk [b, sk, h, d] interleaved per batch in one buffer: batch stride covers both.
  const int64_t b = 4, sq = 5, sk = 9, h = 2, d = 16, sb = (sq + sk) * h * d;
  const ByteView dq = tensor(0, b, sq, h, d, sb, h * d, d), dk = tensor(sq * h * d, b, sk, h, d, sb, h * d, d);
  EXPECT_FALSE(overlap(dq, dk));
  EXPECT_TRUE(overlap(dq, tensor(sq * h * d - 1, b, sk, h, d, sb, h * d, d)));
}

TEST(Overlap, SameBufferDifferentLayoutsOverlap) {
  const int64_t b = 2, s = 8, h = 4, d = 32;
  const ByteView bthd = tensor(0, b, s, h, d, s * h * d, h * d, d), bhtd = tensor(0, b, s, h, d, s * h * d, d, s * d);
  EXPECT_TRUE(overlap(bthd, bhtd));
  // A batch-strided slice of the next batch: rows overlap.
  EXPECT_TRUE(overlap(bthd, tensor(s * h * d - h * d, 1, s, h, d, s * h * d, h * d, d)));
  // Every other head of one buffer against the rest: disjoint.
  EXPECT_FALSE(
      overlap(tensor(0, b, s, h / 2, d, s * h * d, h * d, 2 * d), tensor(d, b, s, h / 2, d, s * h * d, h * d, 2 * d)));
}

TEST(Overlap, LseInTheGapsOfAPaddedTensor) {
  // o with 8 spare elements after every head row; an fp32 run placed in one gap is disjoint, one that
  // reaches one byte into the next row is not. A plain address-range test refuses both.
  const int64_t b = 1, s = 4, h = 2, d = 8, sh = 16, ss = 32;
  const ByteView o = tensor(0, b, s, h, d, s * ss, ss, sh);
  EXPECT_FALSE(overlap(o, range(d * 2, 16)));
  EXPECT_TRUE(overlap(o, range(d * 2, 17)));
  EXPECT_TRUE(overlap(o, range(d * 2 - 1, 4)));
  EXPECT_FALSE(overlap(o, range(-64, 64)));
  EXPECT_TRUE(overlap(o, range(-64, 65)));
}

// Brute force: the byte set of a view inside a small arena.
std::vector<char> bytes_of(const ByteView &v, size_t arena) {
  std::vector<char> in(arena, 0);
  int64_t idx[4] = {0, 0, 0, 0};
  const int64_t off0 = int64_t(v.base - kBase);
  while (true) {
    int64_t off = off0;
    for (int i = 0; i < v.ndims; ++i) off += idx[i] * v.stride[i];
    for (int64_t t = 0; t < v.run; ++t) in[size_t(off + t)] = 1;
    int i = 0;
    for (; i < v.ndims; ++i) {
      if (++idx[i] < v.extent[i]) break;
      idx[i] = 0;
    }
    if (i == v.ndims) break;
  }
  return in;
}

// A random view that fits in `arena` bytes; nested (strides covering the smaller dims, as the API
// requires of each tensor) or with arbitrary positive strides (the algorithm is exact for both).
ByteView random_view(std::mt19937_64 &rng, bool nested, int64_t arena) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  while (true) {
    ByteView v;
    v.ndims = int(uni(0, 4));
    v.run = uni(1, 12);
    int64_t covered = v.run, span = v.run;
    for (int i = 0; i < v.ndims; ++i) {
      v.extent[i] = uni(1, 5);
      v.stride[i] = nested ? covered + uni(0, 2) * uni(0, 8) : uni(1, 40);
      covered = v.stride[i] * v.extent[i];
      span += (v.extent[i] - 1) * v.stride[i];
    }
    if (nested && uni(0, 1)) {  // nested dims listed in any order (batch, seq, head need not be sorted)
      for (int i = v.ndims - 1; i > 0; --i) {
        const int j = int(uni(0, i));
        std::swap(v.stride[i], v.stride[j]), std::swap(v.extent[i], v.extent[j]);
      }
    }
    if (span > arena / 2) continue;
    v.base = kBase + uintptr_t(uni(0, arena - span));
    return v;
  }
}

TEST(Overlap, RandomViewsMatchBruteForce) {
  const uint64_t seed = flashbox::test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t arena = 1024;
  int overlapping = 0, disjoint = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const bool nested = trial % 2 == 0;
    const ByteView x = random_view(rng, nested, arena), y = random_view(rng, nested, arena);
    const std::vector<char> bx = bytes_of(x, size_t(arena)), by = bytes_of(y, size_t(arena));
    bool truth = false;
    for (size_t i = 0; i < bx.size() && !truth; ++i) truth = bx[i] && by[i];
    const OverlapAnswer a = views_overlap(x, y);
    ASSERT_TRUE(a.exact) << "small views must be decided exactly; seed " << seed << " trial " << trial;
    ASSERT_EQ(a.overlap, truth) << "seed " << seed << " trial " << trial << " (rerun with FLASHBOX_TEST_SEED=" << seed
                                << ")";
    (truth ? overlapping : disjoint)++;
  }
  // Both answers must be well represented, or the cross-check proves little.
  EXPECT_GT(overlapping, 2000) << "seed " << seed;
  EXPECT_GT(disjoint, 2000) << "seed " << seed;
}

TEST(Overlap, BudgetExhaustedAnswersOverlap) {
  // Strides 97 and 89 over many rows: disjoint only by arithmetic the search must enumerate.
  ByteView x, y;
  x.base = kBase, x.run = 2, x.ndims = 2, x.stride[0] = 97, x.extent[0] = 200, x.stride[1] = 97 * 200, x.extent[1] = 3;
  y = x;
  y.base = kBase + 48, y.stride[0] = 89, y.stride[1] = 89 * 200;
  const OverlapAnswer small = views_overlap(x, y, 3);
  if (!small.exact) EXPECT_TRUE(small.overlap) << "an undecided answer must be the conservative one";
  const OverlapAnswer full = views_overlap(x, y);
  EXPECT_TRUE(full.exact);
  // The truth by brute force.
  const size_t arena = size_t(97 * 200 * 3 + 200);
  const std::vector<char> bx = bytes_of(x, arena), by = bytes_of(y, arena);
  bool truth = false;
  for (size_t i = 0; i < arena && !truth; ++i) truth = bx[i] && by[i];
  EXPECT_EQ(full.overlap, truth);
}

TEST(Overlap, HugeViewsDecidedQuickly) {
  // Realistic sizes: packed dqkv of batch 64, seqlen 1M, 64 heads, d 256 (far beyond what could be
  // enumerated) is decided exactly, in a few steps.
  const int64_t b = 64, s = int64_t(1) << 20, h = 64, d = 256, ss = 3 * h * d, sb = s * ss;
  const ByteView dq = tensor(0, b, s, h, d, sb, ss, d), dk = tensor(h * d, b, s, h, d, sb, ss, d);
  const OverlapAnswer a = views_overlap(dq, dk, 1000);
  EXPECT_TRUE(a.exact);
  EXPECT_FALSE(a.overlap);
  const OverlapAnswer c = views_overlap(dq, tensor(h * d - 8, b, s, h, d, sb, ss, d), 1000);
  EXPECT_TRUE(c.exact);
  EXPECT_TRUE(c.overlap);
}

}  // namespace
}  // namespace flashbox::detail
