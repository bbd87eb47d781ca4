// ProgramBase: what every rank program shares (sizes of the local shard, scratch and events owned by
// the program and released after its work, a comm stream of its own, strided row copies, the local
// call's arguments for one block). Internal to src/context_parallel.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/element.hpp"
#include "context_parallel/rank_program.hpp"
#include "context_parallel/schedule.hpp"

namespace flashbox::cp {

class ProgramBase : public RankProgram {
 public:
  ProgramBase(const RankSetup &r, const flashbox_attention_args &a) : r_(r), a_(a) {
    B = a.batch, S = a.seqlen_q, Hq = a.heads_q, Hkv = a.heads_kv, D = a.head_dim;
    es = element_bytes(a.dtype);
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
  int copy_lse(float *dst, int64_t dst_cols, int64_t dst_begin, const float *src, int64_t src_cols, int64_t src_begin,
               int64_t len) {
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

std::unique_ptr<RankProgram> make_ring_forward(const RankSetup &r, const flashbox_attention_args &a);
std::unique_ptr<RankProgram> make_ring_backward(const RankSetup &r, const flashbox_attention_grad_args &g);
std::unique_ptr<RankProgram> make_all_gather_forward(const RankSetup &r, const flashbox_attention_args &a);
std::unique_ptr<RankProgram> make_all_gather_backward(const RankSetup &r, const flashbox_attention_grad_args &g);

}  // namespace flashbox::cp
