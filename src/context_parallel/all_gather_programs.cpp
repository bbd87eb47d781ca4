// The all-gather programs, forward and backward: one all-gather of K/V (and one reduce-scatter of
// dK/dV), every query chunk one call against a key prefix in global order (docs/context-parallel.md).
#include "context_parallel/program_base.hpp"

namespace flashbox::cp {
namespace {

// All-gather: round 0 gathers every rank's packed K/V (rank order), compute reorders them into
// global token order, where each query chunk is one call against a key prefix (causal, bottom-right
// aligned) or all keys (non-causal). The backward then reorders its fp32 dK/dV of all tokens back to
// rank order, and round 1 reduce-scatters them: each rank receives the sum over ranks for its shard.
class AllGatherBase : public ProgramBase {
 public:
  AllGatherBase(const RankSetup &r, const flashbox_attention_args &a) : ProgramBase(r, a) { T = int64_t(r.world) * S; }
  int steps() const override { return 1; }

 protected:
  int start_gather() {
    if (int rc = init_streams()) return rc;
    if (int rc = buffer(&local_kv_, 2 * kv_elems, es)) return rc;
    if (int rc = buffer(&gathered_, 2 * kv_elems * r_.world, es)) return rc;
    if (int rc = buffer(&global_kv_, 2 * B * T * Hkv * D, es)) return rc;
    if (int rc = buffer(&lse_blk_, B * Hq * S, 4)) return rc;
    if (int rc = events(ev_, 4)) return rc;  // [0] packed, [1] gathered, [2] computed, [3] reduced
    if (int rc = pack_kv(local_kv_, a_)) return rc;
    return record(ev_[0], compute_);
  }
  int post_gather() {
    if (int rc = wait(comm_, ev_[0])) return rc;
    return r_.transport->all_gather(r_.rank, local_kv_, gathered_, size_t(2 * kv_elems * es), comm_);
  }
  // Moves every chunk between rank order ([rank][K|V][B, S, Hkv, D]) and global order ([K|V][B, T, Hkv, D]).
  int reorder(void *dst, const void *src, flashbox_dtype dtype, bool to_global, bool accumulate = false) {
    const int n = chunks_per_rank(r_.layout);
    const int64_t C = S / n, esz = element_bytes(dtype);
    const int64_t rank_s[3] = {S * Hkv * D, Hkv * D, D}, global_s[3] = {T * Hkv * D, Hkv * D, D};
    for (int j = 0; j < r_.world; ++j)
      for (int h = 0; h < n; ++h)
        for (int t = 0; t < 2; ++t) {
          const int64_t g = global_chunk(r_.layout, r_.world, j, h);
          const int64_t rank_off = (int64_t(j) * 2 + t) * kv_elems + h * C * Hkv * D;
          const int64_t global_off = t * B * T * Hkv * D + g * C * Hkv * D;
          const int64_t so = to_global ? rank_off : global_off, d0 = to_global ? global_off : rank_off;
          if (int rc = copy_tokens(static_cast<char *>(dst) + d0 * esz, dtype, to_global ? global_s : rank_s,
                                   static_cast<const char *>(src) + so * esz, dtype, to_global ? rank_s : global_s, C,
                                   Hkv, accumulate))
            return rc;
        }
    return 0;
  }

  int64_t T;
  void *local_kv_ = nullptr, *gathered_ = nullptr, *global_kv_ = nullptr;
  float *lse_blk_ = nullptr;
  std::vector<Event> ev_;
};

class AllGatherForward final : public AllGatherBase {
 public:
  AllGatherForward(const RankSetup &r, const flashbox_attention_args &a) : AllGatherBase(r, a) {}
  int start() override {
    if (int rc = start_gather()) return rc;
    if (int rc = buffer(&o_, q_elems, es)) return rc;
    return buffer(&lse_, B * Hq * S, 4);
  }
  int post_round(int s) override { return s == 0 ? post_gather() : 0; }
  int after_round(int s) override { return s == 0 ? record(ev_[1], comm_) : 0; }
  int compute(int) override {
    if (int rc = wait(compute_, ev_[1])) return rc;
    if (int rc = reorder(global_kv_, gathered_, a_.dtype, true)) return rc;
    for (const Block &b : all_gather_blocks(r_.layout, a_.causal != 0, r_.world, r_.rank, S)) {
      flashbox_attention_args f = block_args(b, global_kv_, T);
      f.o = byte(o_, b.q_begin * Hq * D);
      for (int i = 0; i < 3; ++i) f.o_stride[i] = dense_q_[i];
      f.lse = lse_blk_;
      if (int rc = flashbox_attention_forward(&f)) return fail_from_flashbox(rc, where(0) + " local forward");
      if (int rc = copy_lse(lse_, S, b.q_begin, lse_blk_, b.q_len, 0, b.q_len)) return rc;
    }
    return 0;
  }
  int finish() override {
    if (int rc = copy_tokens(a_.o, a_.dtype, a_.o_stride, o_, a_.dtype, dense_q_, S, Hq, false)) return rc;
    if (a_.lse)
      if (int rc = r_.ops->copy_bytes(a_.lse, lse_, size_t(B * Hq * S * 4), compute_)) return rc;
    finished_ = true;
    return 0;
  }

 private:
  const int64_t dense_q_[3] = {S * Hq * D, Hq *D, D};
  void *o_ = nullptr;
  float *lse_ = nullptr;
};

class AllGatherBackward final : public AllGatherBase {
 public:
  AllGatherBackward(const RankSetup &r, const flashbox_attention_grad_args &g) : AllGatherBase(r, g.fwd), g_(g) {}
  int start() override {
    if (int rc = start_gather()) return rc;
    if (int rc = buffer(&dq_, q_elems, es)) return rc;
    if (int rc = buffer(&dkv_part_, 2 * B * T * Hkv * D, es)) return rc;
    if (int rc = buffer(&dkv_global_, 2 * B * T * Hkv * D, 4)) return rc;
    if (int rc = buffer(&dkv_send_, 2 * kv_elems * r_.world, 4)) return rc;
    if (int rc = buffer(&dkv_mine_, 2 * kv_elems, 4)) return rc;
    return fill(dkv_global_, 2 * B * T * Hkv * D, 0.0f);
  }
  int post_round(int s) override {
    if (s == 0) return post_gather();
    if (int rc = wait(comm_, ev_[2])) return rc;
    return r_.transport->reduce_scatter_sum(r_.rank, dkv_send_, dkv_mine_, size_t(2 * kv_elems), comm_);
  }
  int after_round(int s) override { return record(ev_[s == 0 ? 1 : 3], comm_); }
  int compute(int) override {
    if (int rc = wait(compute_, ev_[1])) return rc;
    if (int rc = reorder(global_kv_, gathered_, a_.dtype, true)) return rc;
    const int64_t dense_g[3] = {T * Hkv * D, Hkv * D, D};
    for (const Block &b : all_gather_blocks(r_.layout, a_.causal != 0, r_.world, r_.rank, S)) {
      flashbox_attention_grad_args g{};
      g.fwd = block_args(b, global_kv_, T);
      g.fwd.o = byte(a_.o, b.q_begin * a_.o_stride[1]);
      if (b.q_begin == 0 && b.q_len == S) {
        g.fwd.lse = a_.lse;
      } else {
        if (int rc = copy_lse(lse_blk_, b.q_len, 0, a_.lse, S, b.q_begin, b.q_len)) return rc;
        g.fwd.lse = lse_blk_;
      }
      g.dout = byte(g_.dout, b.q_begin * g_.dout_stride[1]);
      for (int i = 0; i < 3; ++i) g.dout_stride[i] = g_.dout_stride[i];
      g.dq = byte(dq_, b.q_begin * Hq * D);
      g.dk = byte(dkv_part_, b.kv_begin * Hkv * D);
      g.dv = byte(dkv_part_, B * T * Hkv * D + b.kv_begin * Hkv * D);
      for (int i = 0; i < 3; ++i) g.dq_stride[i] = dense_q_[i], g.dk_stride[i] = g.dv_stride[i] = dense_g[i];
      g.deterministic = g_.deterministic;
      if (int rc = flashbox_attention_backward(&g)) return fail_from_flashbox(rc, where(0) + " local backward");
      for (int t = 0; t < 2; ++t)
        if (int rc = copy_tokens(dkv_global_ + t * B * T * Hkv * D + b.kv_begin * Hkv * D, FLASHBOX_FLOAT32, dense_g,
                                 byte(dkv_part_, t * B * T * Hkv * D + b.kv_begin * Hkv * D), a_.dtype, dense_g,
                                 b.kv_len, Hkv, true))
          return rc;
    }
    if (int rc = reorder(dkv_send_, dkv_global_, FLASHBOX_FLOAT32, false)) return rc;
    return record(ev_[2], compute_);
  }
  int finish() override {
    if (int rc = wait(compute_, ev_[3])) return rc;  // the reduce-scatter
    const int64_t dense_kv[3] = {S * Hkv * D, Hkv * D, D};
    if (int rc = copy_tokens(g_.dq, a_.dtype, g_.dq_stride, dq_, a_.dtype, dense_q_, S, Hq, false)) return rc;
    if (int rc = copy_tokens(g_.dk, a_.dtype, g_.dk_stride, dkv_mine_, FLASHBOX_FLOAT32, dense_kv, S, Hkv, false))
      return rc;
    if (int rc =
            copy_tokens(g_.dv, a_.dtype, g_.dv_stride, dkv_mine_ + kv_elems, FLASHBOX_FLOAT32, dense_kv, S, Hkv, false))
      return rc;
    finished_ = true;
    return 0;
  }

 private:
  flashbox_attention_grad_args g_;
  const int64_t dense_q_[3] = {S * Hq * D, Hq *D, D};
  void *dq_ = nullptr, *dkv_part_ = nullptr;
  float *dkv_global_ = nullptr, *dkv_send_ = nullptr, *dkv_mine_ = nullptr;
};

}  // namespace

std::unique_ptr<RankProgram> make_all_gather_forward(const RankSetup &r, const flashbox_attention_args &a) {
  return std::make_unique<AllGatherForward>(r, a);
}
std::unique_ptr<RankProgram> make_all_gather_backward(const RankSetup &r, const flashbox_attention_grad_args &g) {
  return std::make_unique<AllGatherBackward>(r, g);
}

}  // namespace flashbox::cp
