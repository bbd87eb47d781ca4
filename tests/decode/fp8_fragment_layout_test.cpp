// The e4m3 decode kernel's operand layout (src/cuda/decode/decode_fp8_layout.hpp), replayed on the CPU
// (runs in CI): one warp's loads of Q, K and V at the offsets the kernel uses, placed into the
// mma.sync m16n8k16 fragments by the PTX layout (lane g = lane / 4, t = lane % 4; A: row g / g + 8,
// k 2t, 2t + 1, 2t + 8, 2t + 9; B: k 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), n g), must give
// S = Q K^T over the right keys and O = P V in the right columns, integers compared exactly; and every
// load and cp.async write of the ring must touch the 32 banks once per phase (8 lanes for 16-byte
// accesses, 16 for 8-byte ones). The byte conversion itself is exercised by the fp8 GPU tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/decode/decode_fp8_layout.hpp"

namespace flashbox::cuda::decode {
namespace {

// One phase of lanes, each accessing `bytes` bytes at its byte offset: no bank touched twice.
void expect_conflict_free(const std::vector<int> &offsets, int bytes, const std::string &what) {
  const int lanes_per_phase = 128 / bytes;
  for (size_t p0 = 0; p0 < offsets.size(); p0 += lanes_per_phase) {
    std::set<int> banks;
    for (size_t l = p0; l < p0 + lanes_per_phase && l < offsets.size(); ++l)
      for (int w = 0; w < bytes / 4; ++w) banks.insert((offsets[l] / 4 + w) % 32);
    EXPECT_EQ(int(banks.size()), 32) << what << ", lanes " << p0 << "..";
  }
}

template <int D>
void check_layout() {
  using F = Fp8Frag<D>;
  constexpr int W = F::kVCols;
  std::mt19937 rng(1234 + D);
  std::uniform_int_distribution<int> val(-7, 7);
  // The warp's 16 keys (its first ring row is a multiple of 16; the swizzle sees row % 8).
  std::vector<int> q(16 * D), k(16 * D), v(16 * D), p(16 * 16);
  for (int &x : q) x = val(rng);
  for (int &x : k) x = val(rng);
  for (int &x : v) x = val(rng);
  for (int &x : p) x = val(rng);

  // The ring as load_block writes it (chunk c of row r: elements 16c..16c + 15), one int per byte.
  std::vector<int> ring_k(16 * D, 1 << 20), ring_v(16 * D, 1 << 20);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < D / 16; ++c)
      for (int b = 0; b < 16; ++b) {
        const int off = fp8_ring_offset<D>(r, c) + b;
        ASSERT_EQ(ring_k[off], 1 << 20) << "ring slot written twice";
        ring_k[off] = k[r * D + 16 * c + b];
        ring_v[off] = v[r * D + 16 * c + b];
      }
  // Q's 16-bit tile, swizzled by row % 8 in 8-element chunks (decode_split_kernel.cuh's swizzle).
  std::vector<int> sq(16 * D);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < D / 8; ++c)
      for (int e = 0; e < 8; ++e) sq[r * D + ((c ^ (r & 7)) << 3) + e] = q[r * D + 8 * c + e];

  // Fragments, matrices indexed [k-step][row or k][...]; -1 << 20 marks an unset entry.
  constexpr int kUnset = -(1 << 20);
  std::vector<int> a(D / 16 * 16 * 16, kUnset), bk(D / 16 * 16 * 16, kUnset), bv(D / 8 * 16 * 8, kUnset);
  auto set = [&](std::vector<int> &m, size_t i, int x) {
    EXPECT_EQ(m[i], kUnset) << "fragment entry set twice";
    m[i] = x;
  };
  std::vector<int> k_offs, v_offs, q_offs;
  for (int span = 0; span < F::kKSpans; ++span) {
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      int lo[16], hi[16];  // Q elements 0..15 of the lane's two chunks, rows g and g + 8
      for (int h = 0; h < 2; ++h) {
        const int c = fp8_q_chunk(span, t, h);
        for (int e = 0; e < 8; ++e) {
          lo[8 * h + e] = sq[g * D + ((c ^ (g & 7)) << 3) + e];
          hi[8 * h + e] = sq[(g + 8) * D + ((c ^ ((g + 8) & 7)) << 3) + e];
        }
      }
      for (int m = 0; m < 4; ++m) {
        const int kk = 4 * span + m;
        for (int i = 0; i < 2; ++i) {
          set(a, (kk * 16 + g) * 16 + 2 * t + i, lo[4 * m + i]);
          set(a, (kk * 16 + g + 8) * 16 + 2 * t + i, hi[4 * m + i]);
          set(a, (kk * 16 + g) * 16 + 2 * t + 8 + i, lo[4 * m + 2 + i]);
          set(a, (kk * 16 + g + 8) * 16 + 2 * t + 8 + i, hi[4 * m + 2 + i]);
        }
      }
    }
    for (int n = 0; n < 2; ++n) {
      k_offs.clear();
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4, off = fp8_k_offset<D>(span, n, g, t);
        k_offs.push_back(off);
        for (int m = 0; m < 4; ++m)
          for (int i = 0; i < 2; ++i) {
            const int kk = 4 * span + m;
            set(bk, (kk * 16 + 2 * t + i) * 16 + n * 8 + g, ring_k[off + 4 * m + i]);
            set(bk, (kk * 16 + 2 * t + 8 + i) * 16 + n * 8 + g, ring_k[off + 4 * m + 2 + i]);
          }
      }
      expect_conflict_free(k_offs, 16, "K load, D " + std::to_string(D));
    }
    for (int h = 0; h < 2; ++h) {
      q_offs.clear();
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4, c = fp8_q_chunk(span, t, h);
        q_offs.push_back(2 * (g * D + ((c ^ (g & 7)) << 3)));
      }
      expect_conflict_free(q_offs, 16, "Q load, D " + std::to_string(D));
    }
  }
  for (int span = 0; span < F::kVSpans; ++span)
    for (int x = 0; x < 4; ++x) {
      v_offs.clear();
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4, off = fp8_v_offset<D>(span, x, g, t);
        v_offs.push_back(off);
        const int kr = (x >> 1) * 8 + 2 * t + (x & 1);  // the fragment's k (local key) of this load
        for (int jj = 0; jj < W; ++jj) set(bv, ((span * W + jj) * 16 + kr) * 8 + g, ring_v[off + jj]);
      }
      expect_conflict_free(v_offs, W, "V load, D " + std::to_string(D));
    }
  for (int x : a) ASSERT_NE(x, kUnset) << "Q fragment entry never set";
  for (int x : bk) ASSERT_NE(x, kUnset) << "K fragment entry never set";
  for (int x : bv) ASSERT_NE(x, kUnset) << "V fragment entry never set";

  // S[row][col] over the k-steps: the score of key fp8_key_row(col).
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 16; ++col) {
      int64_t s = 0, want = 0;
      for (int kk = 0; kk < D / 16; ++kk)
        for (int kx = 0; kx < 16; ++kx) s += int64_t(a[(kk * 16 + row) * 16 + kx]) * bk[(kk * 16 + kx) * 16 + col];
      for (int d = 0; d < D; ++d) want += int64_t(q[row * D + d]) * k[fp8_key_row(col) * D + d];
      ASSERT_EQ(s, want) << "D " << D << " row " << row << " col " << col;
    }
  // P (columns = S's) times V: accumulator column j * 8 + n is output column d with fp8_o_index(d).
  std::set<int> seen;
  for (int d = 0; d < D; ++d) {
    const int o = fp8_o_index<D>(d);
    ASSERT_TRUE(seen.insert(o).second) << "fp8_o_index not one to one at " << d;
    if (d % 8) {
      ASSERT_EQ(o, fp8_o_index<D>(d - d % 8) + 8 * (d % 8)) << "the merge reads 8 columns 8 apart";
    }
    const int j = o / 8, n = o % 8;
    for (int row = 0; row < 16; ++row) {
      int64_t acc = 0, want = 0;
      for (int kx = 0; kx < 16; ++kx) {
        acc += int64_t(p[row * 16 + kx]) * bv[(j * 16 + kx) * 8 + n];
        want += int64_t(p[row * 16 + kx]) * v[fp8_key_row(kx) * D + d];
      }
      ASSERT_EQ(acc, want) << "D " << D << " row " << row << " column " << d;
    }
  }

  // cp.async writes of a whole 64-row stage: thread tid writes chunk tid % chunks of rows
  // tid / chunks + i * (128 / chunks), 8 lanes a phase.
  constexpr int kChunks = D / 16, kRowStep = 128 / kChunks;
  for (int i = 0; i < 64 / kRowStep; ++i)
    for (int warp = 0; warp < 4; ++warp) {
      std::vector<int> offs;
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = warp * 32 + lane;
        offs.push_back(fp8_ring_offset<D>(tid / kChunks + i * kRowStep, tid % kChunks));
      }
      expect_conflict_free(offs, 16, "cp.async write, D " + std::to_string(D));
    }
}

TEST(Fp8DecodeFragmentLayout, D64) { check_layout<64>(); }
TEST(Fp8DecodeFragmentLayout, D128) { check_layout<128>(); }
TEST(Fp8DecodeFragmentLayout, D256) { check_layout<256>(); }

}  // namespace
}  // namespace flashbox::cuda::decode
