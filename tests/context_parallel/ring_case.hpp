// Test support: one global problem (AttentionCase with seqlen_q = seqlen_k = world * S, BTHD) as the
// host shards of `world` simulated ranks, with filled per-rank args, and the ranks' outputs put
// back into the global AttentionData / BackwardData so their fp64 comparisons judge the result.
// A GPU test mirrors the shards to device memory (gpu_ring_test.cpp) and copies results back into
// the same host shards before collect().
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backward/backward_case.hpp"
#include "context_parallel/shard.hpp"
#include "flashbox/context_parallel.hpp"
#include "support/attention_case.hpp"

namespace flashbox::test {

inline const char *layout_label(cp::Layout l) { return l == cp::Layout::ZIGZAG ? "zigzag" : "contiguous"; }
inline const char *variant_label(cp::Variant v) { return v == cp::Variant::RING ? "ring" : "all_gather"; }

// The masks the ring tests run (CPU and GPU): causal or not, each in both token layouts.
struct RingMask {
  int causal;
  cp::Layout layout;
};
inline constexpr RingMask kRingMasks[] = {{0, cp::Layout::CONTIGUOUS},
                                          {0, cp::Layout::ZIGZAG},
                                          {1, cp::Layout::ZIGZAG},
                                          {1, cp::Layout::CONTIGUOUS}};

// Relative difference of two dense outputs (the ring's and the single call's).
inline double rel_diff(const std::vector<double> &a, const std::vector<double> &b) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]), r2 += b[i] * b[i];
  return std::sqrt(d2 / r2);
}

inline void poison_bytes(std::vector<uint8_t> &b) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = (i & 1) ? 0x7f : 0xff;
}

// What the forward and backward cases share: the global problem's shape split into `world` ranks of
// S tokens, each rank's q, k, v and o shards and its forward args pointed at them (dense BTHD
// strides), and the case name.
class RingShards {
 protected:
  RingShards(const AttentionCase &c, int world, cp::Options opt) : world_(world), opt_(opt), c_(c) {
    S_ = c.seqlen_q / world;
    const int64_t es = cpu::dtype_size(c.dtype);
    qd_ = Dense{c.batch, c.seqlen_q, c.heads_q, c.head_dim, es};
    kd_ = Dense{c.batch, c.seqlen_k, c.heads_kv, c.head_dim, es};
    q.resize(size_t(world)), k = v = o = q;
    lse.resize(size_t(world));
  }

  // Rank r's shards of the global q, k and v.
  void shard_qkv(int r, AttentionData &f) {
    shard_rows(qd_, q[r], f.q_bytes().data(), opt_.layout, world_, r, S_);
    shard_rows(kd_, k[r], f.k_bytes().data(), opt_.layout, world_, r, S_);
    shard_rows(kd_, v[r], f.v_bytes().data(), opt_.layout, world_, r, S_);
  }

  // Rank r's forward args: S tokens, pointed at its shards with dense strides.
  void point_at_shards(flashbox_attention_args &a, int r) {
    a.seqlen_q = a.seqlen_k = S_;
    a.q = q[r].data(), a.k = k[r].data(), a.v = v[r].data(), a.o = o[r].data(), a.lse = lse[r].data();
    dense_strides(S_, c_.heads_q, c_.head_dim, a.q_stride);
    dense_strides(S_, c_.heads_kv, c_.head_dim, a.k_stride);
    dense_strides(S_, c_.heads_kv, c_.head_dim, a.v_stride);
    dense_strides(S_, c_.heads_q, c_.head_dim, a.o_stride);
  }

  std::string name_of(const std::string &case_name) const {
    return std::string(variant_label(opt_.variant)) + " " + layout_label(opt_.layout) + " N" + std::to_string(world_) +
           " S" + std::to_string(S_) + " " + case_name;
  }

 public:
  int64_t tokens_per_rank() const { return S_; }

  std::vector<std::vector<uint8_t>> q, k, v, o;
  std::vector<std::vector<float>> lse;

 protected:
  int world_;
  cp::Options opt_;
  AttentionCase c_;
  int64_t S_ = 0;
  Dense qd_{}, kd_{};
};

class RingForwardCase : public RingShards {
 public:
  RingForwardCase(const AttentionCase &c, int world, cp::Options opt) : RingShards(c, world, opt), d_(c) {
    args.resize(size_t(world));
    for (int r = 0; r < world; ++r) {
      shard_qkv(r, d_);
      o[r].resize(q[r].size());
      poison_bytes(o[r]);
      lse[r].assign(size_t(c.batch * c.heads_q * S_), std::numeric_limits<float>::quiet_NaN());
      flashbox_attention_args &a = args[size_t(r)];
      a = d_.args;
      point_at_shards(a, r);
    }
  }

  // The ranks' o and lse in global order, into the AttentionData (then compare() judges them).
  void collect() {
    for (int r = 0; r < world_; ++r) {
      unshard_rows(qd_, d_.o_bytes().data(), o[r], opt_.layout, world_, r, S_);
      unshard_lse(d_.lse, lse[r], d_.config().batch, d_.config().heads_q, opt_.layout, world_, r, S_);
    }
  }

  std::string name() const { return name_of(d_.name()); }

  AttentionData &data() { return d_; }

  std::vector<flashbox_attention_args> args;

 private:
  AttentionData d_;
};

class RingBackwardCase : public RingShards {
 public:
  RingBackwardCase(const AttentionCase &c, int world, cp::Options opt) : RingShards(c, world, opt), bd_(c) {
    AttentionData &f = bd_.forward();
    dout = dq = dk = dv = q;
    grads.resize(size_t(world));
    for (int r = 0; r < world; ++r) {
      shard_qkv(r, f);
      shard_rows(qd_, o[r], f.o_bytes().data(), opt.layout, world, r, S_);
      shard_rows(qd_, dout[r], bd_.dout_bytes().data(), opt.layout, world, r, S_);
      lse[r] = shard_lse(f.lse, c.batch, c.heads_q, opt.layout, world, r, S_);
      dq[r].resize(q[r].size()), dk[r].resize(k[r].size()), dv[r].resize(v[r].size());
      poison_bytes(dq[r]), poison_bytes(dk[r]), poison_bytes(dv[r]);
      flashbox_attention_grad_args &g = grads[size_t(r)];
      g = bd_.grad;
      point_at_shards(g.fwd, r);
      g.dout = dout[r].data(), g.dq = dq[r].data(), g.dk = dk[r].data(), g.dv = dv[r].data();
      dense_strides(S_, c.heads_q, c.head_dim, g.dout_stride);
      dense_strides(S_, c.heads_q, c.head_dim, g.dq_stride);
      dense_strides(S_, c.heads_kv, c.head_dim, g.dk_stride);
      dense_strides(S_, c.heads_kv, c.head_dim, g.dv_stride);
    }
  }

  void collect() {
    for (int r = 0; r < world_; ++r) {
      unshard_rows(qd_, bd_.dq_bytes().data(), dq[r], opt_.layout, world_, r, S_);
      unshard_rows(kd_, bd_.dk_bytes().data(), dk[r], opt_.layout, world_, r, S_);
      unshard_rows(kd_, bd_.dv_bytes().data(), dv[r], opt_.layout, world_, r, S_);
    }
  }

  std::string name() const { return name_of(bd_.name()); }

  BackwardData &data() { return bd_; }

  std::vector<std::vector<uint8_t>> dout, dq, dk, dv;
  std::vector<flashbox_attention_grad_args> grads;

 private:
  BackwardData bd_;
};

}  // namespace flashbox::test
