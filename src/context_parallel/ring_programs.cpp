// The ring programs, forward and backward (docs/context-parallel.md: streams, events, overlap).
//
// Buffers are dense [batch, tokens, heads, head_dim] ("BTHD"); a K/V buffer is K then V. Partial
// results are kept in fp32 (O and its LSE in the forward, dQ and the travelling dK/dV in the
// backward), so N partial sums cost no more rounding than one: each partial is rounded once to the
// dtype by the local call and then summed in fp32.
//
// The backward of a step uses the global O and LSE (the forward's outputs), so each local call's
// P = exp(S - LSE) are the global probabilities and D = rowsum(dO * O) the global row sums: its
// dQ, dK, dV are exact parts of the full gradients, which sum.
#include "context_parallel/program_base.hpp"

namespace flashbox::cp {
namespace {

// Ring forward. Step s computes against the K/V of rank (rank - s) mod N in kv_[s % 2] while round
// s carries it on to the next rank and brings the next one into kv_[(s + 1) % 2].
class RingForward final : public ProgramBase {
 public:
  RingForward(const RankSetup &r, const flashbox_attention_args &a) : ProgramBase(r, a) {}
  int steps() const override { return r_.world; }

  int start() override {
    if (int rc = init_streams()) return rc;
    if (int rc = buffer(&acc_o_, q_elems, 4)) return rc;
    if (int rc = buffer(&acc_lse_, B * Hq * S, 4)) return rc;
    if (int rc = buffer(&part_o_, q_elems, es)) return rc;
    if (int rc = buffer(&part_lse_, B * Hq * S, 4)) return rc;
    for (int i = 0; i < (r_.world > 1 ? 2 : 1); ++i)
      if (int rc = buffer(&kv_[i], 2 * kv_elems, es)) return rc;
    if (int rc = events(ev_round_, r_.world)) return rc;
    if (int rc = events(ev_compute_, r_.world + 1)) return rc;  // [0]: start, [s + 1]: step s done
    if (int rc = fill(acc_o_, q_elems, 0.0f)) return rc;
    if (int rc = fill(acc_lse_, B * Hq * S, -INFINITY)) return rc;
    if (int rc = pack_kv(kv_[0], a_)) return rc;
    return record(ev_compute_[0], compute_);
  }

  int post_round(int s) override {
    if (s > r_.world - 2) return 0;
    Transport &t = *r_.transport;
    const size_t bytes = size_t(2 * kv_elems * es);
    if (int rc = wait(comm_, ev_compute_[size_t(s)])) return rc;  // kv_[(s+1)%2] no longer read (step s-1)
    if (int rc = t.group_begin(r_.rank)) return rc;
    if (int rc = t.send(r_.rank, kv_[s % 2], bytes, next(), comm_)) return rc;
    if (int rc = t.recv(r_.rank, kv_[(s + 1) % 2], bytes, prev(), comm_)) return rc;
    return t.group_end(r_.rank, comm_);
  }
  int after_round(int s) override { return s > r_.world - 2 ? 0 : record(ev_round_[size_t(s)], comm_); }

  int compute(int s) override {
    if (s > 0)
      if (int rc = wait(compute_, ev_round_[size_t(s - 1)])) return rc;
    const bool causal = a_.causal != 0;
    for (const Block &b : ring_blocks(r_.layout, causal, r_.world, r_.rank, s, S)) {
      flashbox_attention_args f = block_args(b, kv_[s % 2], S);
      f.o = byte(part_o_, b.q_begin * Hq * D);
      for (int i = 0; i < 3; ++i) f.o_stride[i] = dense_q_[i];
      f.lse = part_lse_;
      if (int rc = flashbox_attention_forward(&f)) return fail_from_flashbox(rc, where(s) + " local forward");
      MergeArgs m;
      m.n[0] = B, m.n[1] = Hq, m.n[2] = b.q_len, m.head_dim = D;
      m.acc_o = acc_o_ + b.q_begin * Hq * D;
      m.part_o = f.o, m.part_dtype = a_.dtype;
      const int64_t o_rows[3] = {S * Hq * D, D, Hq * D};  // (batch, head, token)
      for (int i = 0; i < 3; ++i) m.acc_o_stride[i] = m.part_o_stride[i] = o_rows[i];
      m.acc_lse = acc_lse_ + b.q_begin;
      m.acc_lse_stride[0] = Hq * S, m.acc_lse_stride[1] = S, m.acc_lse_stride[2] = 1;
      m.part_lse = part_lse_;
      m.part_lse_stride[0] = Hq * b.q_len, m.part_lse_stride[1] = b.q_len, m.part_lse_stride[2] = 1;
      if (int rc = r_.ops->merge(m, compute_)) return rc;
    }
    return record(ev_compute_[size_t(s) + 1], compute_);
  }

  int finish() override {
    if (int rc = copy_tokens(a_.o, a_.dtype, a_.o_stride, acc_o_, FLASHBOX_FLOAT32, dense_q_, S, Hq, false)) return rc;
    if (a_.lse)
      if (int rc = r_.ops->copy_bytes(a_.lse, acc_lse_, size_t(B * Hq * S * 4), compute_)) return rc;
    finished_ = true;
    return 0;
  }

 private:
  const int64_t dense_q_[3] = {S * Hq * D, Hq *D, D};
  float *acc_o_ = nullptr, *acc_lse_ = nullptr, *part_lse_ = nullptr;
  void *part_o_ = nullptr, *kv_[2] = {nullptr, nullptr};
  std::vector<Event> ev_round_, ev_compute_;
};

// ---------------------------------------------------------------------------------------------
// Ring backward. K/V travel as in the forward; beside them travels the fp32 dK/dV accumulator of
// the shard being visited: at step s it is in dkv_[s % 2], this rank adds its part and round s + 1
// hands it on (overlapping step s + 1's local backward). Round N delivers each rank its own shard's
// complete dK/dV.
class RingBackward final : public ProgramBase {
 public:
  RingBackward(const RankSetup &r, const flashbox_attention_grad_args &g) : ProgramBase(r, g.fwd), g_(g) {}
  int steps() const override { return r_.world; }

  int start() override {
    if (int rc = init_streams()) return rc;
    const int bufs = r_.world > 1 ? 2 : 1;
    if (int rc = buffer(&dq_acc_, q_elems, 4)) return rc;
    if (int rc = buffer(&dq_part_, q_elems, es)) return rc;
    if (int rc = buffer(&dkv_part_, 2 * kv_elems, es)) return rc;
    if (int rc = buffer(&lse_blk_, B * Hq * S, 4)) return rc;
    for (int i = 0; i < bufs; ++i) {
      if (int rc = buffer(&kv_[i], 2 * kv_elems, es)) return rc;
      if (int rc = buffer(&dkv_[i], 2 * kv_elems, 4)) return rc;
    }
    if (int rc = events(ev_round_, r_.world + 1)) return rc;
    if (int rc = events(ev_compute_, r_.world + 1)) return rc;
    if (int rc = fill(dq_acc_, q_elems, 0.0f)) return rc;
    if (int rc = fill(dkv_[0], 2 * kv_elems, 0.0f)) return rc;
    if (int rc = pack_kv(kv_[0], a_)) return rc;
    return record(ev_compute_[0], compute_);
  }

  bool round_has_dkv(int s) const { return s >= 1 && r_.world > 1; }
  bool round_has_kv(int s) const { return s <= r_.world - 2; }

  int post_round(int s) override {
    if (!round_has_dkv(s) && !round_has_kv(s)) return 0;
    Transport &t = *r_.transport;
    if (int rc = wait(comm_, ev_compute_[size_t(s)])) return rc;  // step s-1 done (its dK/dV part added)
    if (int rc = t.group_begin(r_.rank)) return rc;
    if (round_has_dkv(s)) {
      const size_t bytes = size_t(2 * kv_elems * 4);
      if (int rc = t.send(r_.rank, dkv_[(s - 1) % 2], bytes, next(), comm_)) return rc;
      if (int rc = t.recv(r_.rank, dkv_[s % 2], bytes, prev(), comm_)) return rc;
    }
    if (round_has_kv(s)) {
      const size_t bytes = size_t(2 * kv_elems * es);
      if (int rc = t.send(r_.rank, kv_[s % 2], bytes, next(), comm_)) return rc;
      if (int rc = t.recv(r_.rank, kv_[(s + 1) % 2], bytes, prev(), comm_)) return rc;
    }
    return t.group_end(r_.rank, comm_);
  }
  int after_round(int s) override {
    if (!round_has_dkv(s) && !round_has_kv(s)) return 0;
    return record(ev_round_[size_t(s)], comm_);
  }

  int compute(int s) override {
    if (s > 0)
      if (int rc = wait(compute_, ev_round_[size_t(s - 1)])) return rc;  // K/V of step s
    bool dkv_ready = !round_has_dkv(s);
    for (const Block &b : ring_blocks(r_.layout, a_.causal != 0, r_.world, r_.rank, s, S)) {
      if (int rc = local_backward(b, kv_[s % 2], S, s)) return rc;
      if (int rc = copy_tokens(dq_acc_ + b.q_begin * Hq * D, FLASHBOX_FLOAT32, dense_q_,
                               byte(dq_part_, b.q_begin * Hq * D), a_.dtype, dense_q_, b.q_len, Hq, true))
        return rc;
      if (!dkv_ready) {  // the accumulator arrives in round s, beside this step's local backward
        if (int rc = wait(compute_, ev_round_[size_t(s)])) return rc;
        dkv_ready = true;
      }
      for (int t = 0; t < 2; ++t)
        if (int rc = copy_tokens(dkv_[s % 2] + t * kv_elems + b.kv_begin * Hkv * D, FLASHBOX_FLOAT32, dense_kv_,
                                 byte(dkv_part_, t * kv_elems + b.kv_begin * Hkv * D), a_.dtype, dense_kv_, b.kv_len,
                                 Hkv, true))
          return rc;
    }
    return record(ev_compute_[size_t(s) + 1], compute_);
  }

  int finish() override {
    const int last = r_.world == 1 ? 0 : r_.world % 2;
    if (r_.world > 1)
      if (int rc = wait(compute_, ev_round_[size_t(r_.world)])) return rc;
    if (int rc = copy_tokens(g_.dq, a_.dtype, g_.dq_stride, dq_acc_, FLASHBOX_FLOAT32, dense_q_, S, Hq, false))
      return rc;
    if (int rc = copy_tokens(g_.dk, a_.dtype, g_.dk_stride, dkv_[last], FLASHBOX_FLOAT32, dense_kv_, S, Hkv, false))
      return rc;
    if (int rc = copy_tokens(g_.dv, a_.dtype, g_.dv_stride, dkv_[last] + kv_elems, FLASHBOX_FLOAT32, dense_kv_, S, Hkv,
                             false))
      return rc;
    finished_ = true;
    return 0;
  }

 private:
  // flashbox_attention_backward of one block: global O, LSE and dO rows of the block's queries.
  int local_backward(const Block &b, const void *kv, int64_t kv_tokens, int s) {
    flashbox_attention_grad_args g{};
    g.fwd = block_args(b, kv, kv_tokens);
    g.fwd.o = byte(a_.o, b.q_begin * a_.o_stride[1]);
    if (b.q_begin == 0 && b.q_len == S) {
      g.fwd.lse = a_.lse;
    } else {  // the C API takes a dense [B, Hq, q_len] LSE: gather the block's columns
      if (int rc = copy_lse(lse_blk_, b.q_len, 0, a_.lse, S, b.q_begin, b.q_len)) return rc;
      g.fwd.lse = lse_blk_;
    }
    g.dout = byte(g_.dout, b.q_begin * g_.dout_stride[1]);
    for (int i = 0; i < 3; ++i) g.dout_stride[i] = g_.dout_stride[i];
    g.dq = byte(dq_part_, b.q_begin * Hq * D);
    g.dk = byte(dkv_part_, b.kv_begin * Hkv * D);
    g.dv = byte(dkv_part_, kv_elems + b.kv_begin * Hkv * D);
    for (int i = 0; i < 3; ++i) g.dq_stride[i] = dense_q_[i], g.dk_stride[i] = g.dv_stride[i] = dense_kv_[i];
    g.deterministic = g_.deterministic;
    if (int rc = flashbox_attention_backward(&g)) return fail_from_flashbox(rc, where(s) + " local backward");
    return 0;
  }

  flashbox_attention_grad_args g_;
  const int64_t dense_q_[3] = {S * Hq * D, Hq *D, D};
  const int64_t dense_kv_[3] = {S * Hkv * D, Hkv *D, D};
  float *dq_acc_ = nullptr, *lse_blk_ = nullptr, *dkv_[2] = {nullptr, nullptr};
  void *dq_part_ = nullptr, *dkv_part_ = nullptr, *kv_[2] = {nullptr, nullptr};
  std::vector<Event> ev_round_, ev_compute_;
};

}  // namespace

std::unique_ptr<RankProgram> make_ring_forward(const RankSetup &r, const flashbox_attention_args &a) {
  return std::make_unique<RingForward>(r, a);
}
std::unique_ptr<RankProgram> make_ring_backward(const RankSetup &r, const flashbox_attention_grad_args &g) {
  return std::make_unique<RingBackward>(r, g);
}

}  // namespace flashbox::cp
