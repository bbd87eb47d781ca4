// The four rank programs (ring / all-gather x forward / backward) and their driver.
//
// Buffers are dense [batch, tokens, heads, head_dim] ("BTHD"); a K/V buffer is K then V. Partial
// results are kept in fp32 (O and its LSE in the forward, dQ and the travelling dK/dV in the
// backward), so N partial sums cost no more rounding than one: each partial is rounded once to the
// dtype by the local call and then summed in fp32.
//
// The backward of a step uses the global O and LSE (the forward's outputs), so each local call's
// P = exp(S - LSE) are the global probabilities and D = rowsum(dO * O) the global row sums: its
// dQ, dK, dV are exact parts of the full gradients, which sum.
#include "context_parallel/rank_program.hpp"

#include <cmath>
#include <string>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/schedule.hpp"
#include "cpu/dtype.hpp"

namespace flashbox::cp {
namespace {

// Sizes and helpers every program shares.
class ProgramBase : public RankProgram {
 public:
  ProgramBase(const RankSetup &r, const flashbox_attention_args &a) : r_(r), a_(a) {
    B = a.batch, S = a.seqlen_q, Hq = a.heads_q, Hkv = a.heads_kv, D = a.head_dim;
    es = cpu::dtype_size(a.dtype);
    q_elems = B * S * Hq * D;
    kv_elems = B * S * Hkv * D;
    compute_ = a.stream;
  }
  ~ProgramBase() override {
    DeviceOps &ops = *r_.ops;
    if (!finished_) {  // a failure part-way: let queued work end before its memory goes
      if (comm_) ops.synchronize(comm_);
      ops.synchronize(compute_);
    }
    for (void *p : buffers_) ops.release(p, compute_);
    for (Event e : events_) ops.destroy_event(e);
    if (comm_) ops.destroy_stream(comm_);
  }

 protected:
  int init_streams() { return r_.ops->create_stream(&comm_); }

  template <typename T>
  int buffer(T **p, int64_t elements, int64_t elem_bytes) {
    void *raw = nullptr;
    if (int rc = r_.ops->alloc(&raw, size_t(elements * elem_bytes), compute_)) return rc;
    buffers_.push_back(raw);
    *p = static_cast<T *>(raw);
    return 0;
  }
  int events(std::vector<Event> &list, int n) {
    list.assign(size_t(n), nullptr);
    for (Event &e : list) {
      if (int rc = r_.ops->create_event(&e)) return rc;
      events_.push_back(e);
    }
    return 0;
  }

  // Rows over (batch, tokens, heads) of width head_dim between two BTHD-strided tensors.
  int copy_tokens(void *dst, flashbox_dtype dt, const int64_t *ds, const void *src, flashbox_dtype st,
                  const int64_t *ss, int64_t tokens, int64_t heads, bool accumulate) {
    RowCopy c;
    c.n[0] = B, c.n[1] = tokens, c.n[2] = heads, c.width = D;
    c.src = src, c.src_dtype = st, c.dst = dst, c.dst_dtype = dt, c.accumulate = accumulate;
    for (int i = 0; i < 3; ++i) c.src_stride[i] = ss[i], c.dst_stride[i] = ds[i];
    return r_.ops->copy_rows(c, compute_);
  }
  int fill(float *dst, int64_t n, float value) {
    RowCopy c;
    c.width = n, c.dst = dst, c.fill = value;
    return r_.ops->copy_rows(c, compute_);
  }
  // LSE columns [begin, begin+len) of a [B, Hq, cols] tensor into/out of a dense [B, Hq, len] one.
  int copy_lse(float *dst, int64_t dst_cols, int64_t dst_begin, const float *src, int64_t src_cols,
               int64_t src_begin, int64_t len) {
    RowCopy c;
    c.n[0] = B, c.n[1] = Hq, c.width = len;
    c.src = src + src_begin, c.src_stride[0] = Hq * src_cols, c.src_stride[1] = src_cols;
    c.dst = dst + dst_begin, c.dst_stride[0] = Hq * dst_cols, c.dst_stride[1] = dst_cols;
    return r_.ops->copy_rows(c, compute_);
  }
  // Packs the caller's K and V (any strides) into a dense K-then-V buffer.
  int pack_kv(void *dst, const flashbox_attention_args &a) {
    const int64_t ds[3] = {S * Hkv * D, Hkv * D, D};
    if (int rc = copy_tokens(dst, a.dtype, ds, a.k, a.dtype, a.k_stride, S, Hkv, false)) return rc;
    return copy_tokens(byte(dst, kv_elems), a.dtype, ds, a.v, a.dtype, a.v_stride, S, Hkv, false);
  }

  void *byte(void *p, int64_t elements) const { return static_cast<char *>(p) + elements * es; }
  const void *byte(const void *p, int64_t elements) const { return static_cast<const char *>(p) + elements * es; }

  // The local call's arguments for one block: queries from `q` (strided), keys and values from a
  // dense K-then-V buffer of kv_tokens tokens per batch.
  flashbox_attention_args block_args(const Block &b, const void *kv, int64_t kv_tokens) const {
    flashbox_attention_args f = a_;
    f.seqlen_q = b.q_len, f.seqlen_k = b.kv_len, f.causal = b.causal ? 1 : 0;
    f.q = byte(a_.q, b.q_begin * a_.q_stride[1]);
    const int64_t kvs[3] = {kv_tokens * Hkv * D, Hkv * D, D};
    f.k = byte(kv, b.kv_begin * Hkv * D);
    f.v = byte(kv, B * kv_tokens * Hkv * D + b.kv_begin * Hkv * D);
    for (int i = 0; i < 3; ++i) f.k_stride[i] = f.v_stride[i] = kvs[i];
    f.stream = compute_;
    return f;
  }
  std::string where(int s) const { return "rank " + std::to_string(r_.rank) + " step " + std::to_string(s); }

  int wait(Stream s, Event e) { return r_.ops->wait(s, e); }
  int record(Event e, Stream s) { return r_.ops->record(e, s); }
  int next() const { return (r_.rank + 1) % r_.world; }
  int prev() const { return (r_.rank + r_.world - 1) % r_.world; }

  RankSetup r_;
  flashbox_attention_args a_;
  int64_t B, S, Hq, Hkv, D, es, q_elems, kv_elems;
  Stream compute_ = nullptr, comm_ = nullptr;
  bool finished_ = false;

 private:
  std::vector<void *> buffers_;
  std::vector<Event> events_;
};

// ---------------------------------------------------------------------------------------------
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
  const int64_t dense_q_[3] = {S * Hq * D, Hq * D, D};
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
      if (int rc = copy_tokens(dq_acc_ + b.q_begin * Hq * D, FLASHBOX_FLOAT32, dense_q_, byte(dq_part_, b.q_begin * Hq * D),
                               a_.dtype, dense_q_, b.q_len, Hq, true))
        return rc;
      if (!dkv_ready) {  // the accumulator arrives in round s, beside this step's local backward
        if (int rc = wait(compute_, ev_round_[size_t(s)])) return rc;
        dkv_ready = true;
      }
      for (int t = 0; t < 2; ++t)
        if (int rc = copy_tokens(dkv_[s % 2] + t * kv_elems + b.kv_begin * Hkv * D, FLASHBOX_FLOAT32, dense_kv_,
                                 byte(dkv_part_, t * kv_elems + b.kv_begin * Hkv * D), a_.dtype, dense_kv_, b.kv_len, Hkv,
                                 true))
          return rc;
    }
    return record(ev_compute_[size_t(s) + 1], compute_);
  }

  int finish() override {
    const int last = r_.world == 1 ? 0 : r_.world % 2;
    if (r_.world > 1)
      if (int rc = wait(compute_, ev_round_[size_t(r_.world)])) return rc;
    if (int rc = copy_tokens(g_.dq, a_.dtype, g_.dq_stride, dq_acc_, FLASHBOX_FLOAT32, dense_q_, S, Hq, false)) return rc;
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
  const int64_t dense_q_[3] = {S * Hq * D, Hq * D, D};
  const int64_t dense_kv_[3] = {S * Hkv * D, Hkv * D, D};
  float *dq_acc_ = nullptr, *lse_blk_ = nullptr, *dkv_[2] = {nullptr, nullptr};
  void *dq_part_ = nullptr, *dkv_part_ = nullptr, *kv_[2] = {nullptr, nullptr};
  std::vector<Event> ev_round_, ev_compute_;

};

// ---------------------------------------------------------------------------------------------
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
    const int64_t C = S / n, esz = cpu::dtype_size(dtype);
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
  const int64_t dense_q_[3] = {S * Hq * D, Hq * D, D};
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
                                 byte(dkv_part_, t * B * T * Hkv * D + b.kv_begin * Hkv * D), a_.dtype, dense_g, b.kv_len,
                                 Hkv, true))
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
    if (int rc = copy_tokens(g_.dv, a_.dtype, g_.dv_stride, dkv_mine_ + kv_elems, FLASHBOX_FLOAT32, dense_kv, S, Hkv,
                             false))
      return rc;
    finished_ = true;
    return 0;
  }

 private:
  flashbox_attention_grad_args g_;
  const int64_t dense_q_[3] = {S * Hq * D, Hq * D, D};
  void *dq_ = nullptr, *dkv_part_ = nullptr;
  float *dkv_global_ = nullptr, *dkv_send_ = nullptr, *dkv_mine_ = nullptr;
};

}  // namespace

std::unique_ptr<RankProgram> make_forward_program(const RankSetup &r, const flashbox_attention_args &args) {
  if (r.variant == FLASHBOX_CP_ALL_GATHER) return std::make_unique<AllGatherForward>(r, args);
  return std::make_unique<RingForward>(r, args);
}

std::unique_ptr<RankProgram> make_backward_program(const RankSetup &r, const flashbox_attention_grad_args &grad) {
  if (r.variant == FLASHBOX_CP_ALL_GATHER) return std::make_unique<AllGatherBackward>(r, grad);
  return std::make_unique<RingBackward>(r, grad);
}

int run_programs(std::vector<std::unique_ptr<RankProgram>> &ranks, Transport &transport) {
  for (auto &p : ranks)
    if (int rc = p->start()) return rc;
  const int steps = ranks.front()->steps();
  for (int s = 0; s <= steps; ++s) {
    for (auto &p : ranks)
      if (int rc = p->post_round(s)) return rc;
    if (int rc = transport.flush()) return rc;
    for (auto &p : ranks)
      if (int rc = p->after_round(s)) return rc;
    if (s < steps)
      for (auto &p : ranks)
        if (int rc = p->compute(s)) return rc;
  }
  for (auto &p : ranks)
    if (int rc = p->finish()) return rc;
  return 0;
}

}  // namespace flashbox::cp
