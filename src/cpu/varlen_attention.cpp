// The extension's calls on the cpu: masks and score transforms go straight to the levels
// (src/cpu/masked_levels.hpp); a call with variable-length batches or seqused_q/k becomes one
// fixed-length call per sequence, so no padding is ever computed:
//   variable length: views of the packed [total, heads, head_dim] tensors (v and o: head_dim_v;
//                    token t of sequence s is row cu[s] + t); lse is [heads_q, total_q] packed;
//   seqused only:    batch entry b of the [batch, seq, heads, head_dim] tensors; lse
//                    [batch, heads_q, seqlen_q];
// either way the sequence's lengths are its span (or seqlen) cut to seqused when given, and its lse
// rows are [1, heads_q, len] in the per-sequence call: a small per-sequence buffer bridges the two.
// Sequences of length 0 are written here: queries with no key get O = 0 and LSE = -inf (dQ = 0),
// keys with no query dK = dV = 0. The backward also writes 0 to the gradient rows past seqused.
// qv runs as one product of [q | qv] with [k | v] (forward_with_qv), then as any other call. A
// learnable sink rides in the mods (the levels add it to each row's denominator); the backward's
// dsink is one reduction over o, dout and lse after the levels (write_sink_gradient).
// ALiBi slopes of sequence s are row s of the slope buffer (alibi_batch_stride apart); its document
// ids, prefix length and block-table entry are taken the same way (sequence_mods).
// Before anything is written, the largest sequence's scratch is checked against the host's free
// memory, so a call that would run out fails with nothing written, like the plain call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cpu/attention_backward.hpp"
#include "cpu/combine.hpp"
#include "cpu/masked_levels.hpp"
#include "cpu/scratch_buffer.hpp"

namespace flashbox::detail {
namespace {

// Variable-length batches: packed [total, heads, dim] tensors with cu_seqlens.
bool packed(const flashbox_attention_ext &e) { return e.cu_seqlens_q && e.cu_seqlens_k; }

// V's and O's head dim: head_dim unless the extension set another.
int64_t v_dim(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  return e.head_dim_v != 0 ? e.head_dim_v : a.head_dim;
}

// Sequence s of the call: where its rows start (varlen: the packed row; otherwise batch entry s at
// row 0), its span (varlen) or seqlen, and the lengths it uses.
struct Seq {
  bool packed;
  int64_t index;           // s
  int64_t q0, k0;          // first row (packed) or 0
  int64_t span_q, span_k;  // rows the sequence owns in the tensors
  int64_t lq, lk;          // rows it uses (seqused, else the span)
};

Seq sequence(const flashbox_attention_args &a, const flashbox_attention_ext &e, int64_t s) {
  Seq q{};
  q.packed = packed(e);
  q.index = s;
  if (q.packed) {
    q.q0 = e.cu_seqlens_q[s], q.k0 = e.cu_seqlens_k[s];
    q.span_q = e.cu_seqlens_q[s + 1] - q.q0, q.span_k = e.cu_seqlens_k[s + 1] - q.k0;
  } else {
    q.span_q = a.seqlen_q, q.span_k = a.seqlen_k;
  }
  q.lq = e.seqused_q ? e.seqused_q[s] : q.span_q;
  q.lk = e.seqused_k ? e.seqused_k[s] : q.span_k;
  return q;
}

// Row `row` of sequence q in a tensor (stride[0]: batch, stride[1]: token), `kv`: a K/V-side tensor.
template <class P>
P *seq_row(P *base, const int64_t *stride, const Seq &q, bool kv, int64_t row, flashbox_dtype t) {
  const int64_t r = (kv ? q.k0 : q.q0) + row;
  const int64_t offset = q.packed ? r * stride[1] : q.index * stride[0] + r * stride[1];
  return reinterpret_cast<P *>(reinterpret_cast<std::conditional_t<std::is_const_v<P>, const char, char> *>(base) +
                               offset * dtype_size(t));
}

// lse of sequence q, head h, its first used row: packed [heads_q, total_q] or [batch, heads_q, seqlen_q].
float *seq_lse(float *lse, const flashbox_attention_args &a, const Seq &q, int64_t h) {
  return q.packed ? lse + h * a.seqlen_q + q.q0 : lse + (q.index * a.heads_q + h) * a.seqlen_q;
}

// Rows [r0, r0 + n) of sequence q's part of a tensor set to 0.
void zero_rows(void *base, const int64_t *stride, const Seq &q, bool kv, int64_t r0, int64_t n, int64_t heads,
               int64_t d, flashbox_dtype t) {
  if (n <= 0) return;
  const std::vector<float> zeros(size_t(d), 0.0f);
  for (int64_t r = r0; r < r0 + n; ++r) {
    void *row = seq_row(base, stride, q, kv, r, t);
    for (int64_t h = 0; h < heads; ++h) cpu::store_row_from_float(row, t, h * stride[2], d, zeros.data());
  }
}

// The mods of sequence q as a batch-1 call: its slopes, document ids (packed: from its first row),
// prefix length and block table.
core::ScoreMods sequence_mods(core::ScoreMods m, const Seq &q) {
  const int64_t s = q.index;
  if (m.alibi_slopes) m.alibi_slopes += s * m.alibi_batch_stride;
  if (m.doc_q) {
    m.doc_q += q.packed ? q.q0 : s * m.doc_q_stride;
    m.doc_k += q.packed ? q.k0 : s * m.doc_k_stride;
  }
  if (m.prefix) m.prefix += s;
  m.blocks = m.blocks.entry(s);
  return m;
}

// Fails (nothing written yet) when the largest sequence's scratch exceeds the free host memory.
int check_memory(int64_t need, const char *what) {
  const int64_t avail = cpu::available_host_memory_bytes();
  if (avail >= 0 && need > avail)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY, std::string(what) + " needs " + std::to_string(need) +
                                                " bytes of scratch for its largest sequence, but only " +
                                                std::to_string(avail) + " bytes of host memory are available");
  return FLASHBOX_OK;
}

int forward_one(const flashbox_attention_args &x, const core::ScoreMods &m, int64_t head_dim_v) {
  const Problem p = make_problem(x, m, head_dim_v);
  return x.impl == FLASHBOX_NAIVE ? cpu_naive_forward(p) : cpu_blocked_forward(p);
}

// Whether the call runs one sequence at a time.
bool per_sequence(const flashbox_attention_ext &e) {
  return packed(e) || e.seqused_q || e.seqused_k;
}

// The fixed-length args of sequence q (batch 1, its used lengths, pointers at its first rows).
flashbox_attention_args sequence_args(const flashbox_attention_args &a, const Seq &q) {
  const flashbox_dtype t = a.dtype;
  flashbox_attention_args x = a;
  x.batch = 1, x.seqlen_q = q.lq, x.seqlen_k = q.lk;
  x.q = seq_row(a.q, a.q_stride, q, false, 0, t), x.o = seq_row(a.o, a.o_stride, q, false, 0, t);
  x.k = seq_row(a.k, a.k_stride, q, true, 0, t), x.v = seq_row(a.v, a.v_stride, q, true, 0, t);
  return x;
}

std::string layout_name(const flashbox_attention_ext &e) {
  return packed(e) ? "variable length" : "seqused";
}

// [x | y] per (row, head): a dense [batch, seq, heads, dx + dy] copy of two strided tensors of the
// same rows and heads (dtype t; the columns of a head are contiguous in both).
std::vector<uint8_t> concat_heads(const void *x, const int64_t *xs, int64_t dx, const void *y, const int64_t *ys,
                                  int64_t dy, int64_t batch, int64_t seq, int64_t heads, flashbox_dtype t) {
  const int64_t es = dtype_size(t), dc = dx + dy;
  std::vector<uint8_t> out(size_t(batch * seq * heads * dc * es));
  const auto *xb = static_cast<const uint8_t *>(x);
  const auto *yb = static_cast<const uint8_t *>(y);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < seq; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        uint8_t *dst = out.data() + ((b * seq + r) * heads + h) * dc * es;
        std::memcpy(dst, xb + (b * xs[0] + r * xs[1] + h * xs[2]) * es, size_t(dx * es));
        std::memcpy(dst + dx * es, yb + (b * ys[0] + r * ys[1] + h * ys[2]) * es, size_t(dy * es));
      }
  return out;
}

// qv: scale (q . k + qv . v) is one product of [q | qv] with [k | v] over head_dim + head_dim_v
// columns, V as it is; softmax_scale 0 means 1/sqrt(head_dim + head_dim_v). The copies are exact (same
// dtype), so the call is the same attention as the sum, computed by the unchanged levels.
int forward_with_qv(const flashbox_attention_args &a, const flashbox_attention_ext &e, const core::ScoreMods &mods) {
  const int64_t d = a.head_dim, dv = v_dim(a, e), dc = d + dv;
  const int64_t batch = packed(e) ? 1 : a.batch;  // varlen: one packed [total, heads, dim] tensor
  const std::vector<uint8_t> qc =
      concat_heads(a.q, a.q_stride, d, e.qv, e.qv_stride, dv, batch, a.seqlen_q, a.heads_q, a.dtype);
  const std::vector<uint8_t> kc =
      concat_heads(a.k, a.k_stride, d, a.v, a.v_stride, dv, batch, a.seqlen_k, a.heads_kv, a.dtype);
  flashbox_attention_args x = a;
  x.head_dim = dc;
  x.q = qc.data(), x.k = kc.data();
  const int64_t q_stride[3] = {a.seqlen_q * a.heads_q * dc, a.heads_q * dc, dc};
  const int64_t k_stride[3] = {a.seqlen_k * a.heads_kv * dc, a.heads_kv * dc, dc};
  std::copy_n(q_stride, 3, x.q_stride), std::copy_n(k_stride, 3, x.k_stride);
  if (x.softmax_scale == 0.0f) x.softmax_scale = float(1.0 / std::sqrt(double(dc)));
  flashbox_attention_ext y = e;
  y.qv = nullptr;
  y.head_dim_v = dv;  // x.head_dim is head_dim + head_dim_v: V's head dim is given explicitly
  if (int rc = cpu_forward_ext(x, y, mods)) return rc;
  set_kernel_name(std::string(kernel_name()) + "_qv");
  return FLASHBOX_OK;
}

// A strided [batch, seq, heads, d] tensor of dtype t as a dense fp32 copy (exact: fp16 and bf16 are
// subsets of fp32).
std::vector<float> dense_fp32(const void *x, const int64_t *xs, int64_t batch, int64_t seq, int64_t heads, int64_t d,
                              flashbox_dtype t) {
  std::vector<float> out(size_t(batch * seq * heads * d));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < seq; ++r)
      for (int64_t h = 0; h < heads; ++h)
        cpu::load_row_as_float(x, t, b * xs[0] + r * xs[1] + h * xs[2], d, out.data() + ((b * seq + r) * heads + h) * d);
  return out;
}

// num_splits > 1: each part of the keys (ScoreMods::split) is one call of the levels in fp32 (fp16 and
// bf16 inputs copied exactly), its output and LSE written to out_partial / lse_partial (or scratch),
// then the parts combined into o and lse by the combine's rule (cpu/combine.hpp).
int forward_with_splits(const flashbox_attention_args &a, const flashbox_attention_ext &e,
                        const core::ScoreMods &mods) {
  const int64_t S = e.num_splits, dv = v_dim(a, e);
  const int64_t B = packed(e) ? 1 : a.batch, T = a.seqlen_q, H = a.heads_q;
  flashbox_attention_args x = a;
  std::vector<float> q32, k32, v32;
  if (a.dtype != FLASHBOX_FLOAT32) {
    q32 = dense_fp32(a.q, a.q_stride, B, T, H, a.head_dim, a.dtype);
    k32 = dense_fp32(a.k, a.k_stride, B, a.seqlen_k, a.heads_kv, a.head_dim, a.dtype);
    v32 = dense_fp32(a.v, a.v_stride, B, a.seqlen_k, a.heads_kv, dv, a.dtype);
    x.dtype = FLASHBOX_FLOAT32, x.q = q32.data(), x.k = k32.data(), x.v = v32.data();
    const int64_t qs[3] = {T * H * a.head_dim, H * a.head_dim, a.head_dim};
    const int64_t ks[3] = {a.seqlen_k * a.heads_kv * a.head_dim, a.heads_kv * a.head_dim, a.head_dim};
    const int64_t vs[3] = {a.seqlen_k * a.heads_kv * dv, a.heads_kv * dv, dv};
    std::copy_n(qs, 3, x.q_stride), std::copy_n(ks, 3, x.k_stride), std::copy_n(vs, 3, x.v_stride);
  }
  const int64_t part_o = B * T * H * dv, part_lse = B * H * T;
  std::vector<float> o_scratch, lse_scratch;
  float *op = e.out_partial, *lp = e.lse_partial;
  if (!op) {
    o_scratch.resize(size_t(S * part_o)), lse_scratch.resize(size_t(S * part_lse));
    op = o_scratch.data(), lp = lse_scratch.data();
  }
  flashbox_attention_ext y = e;
  y.num_splits = 0, y.out_partial = y.lse_partial = nullptr;
  const int64_t os[3] = {T * H * dv, H * dv, dv};
  std::copy_n(os, 3, x.o_stride);
  std::string kernel;
  for (int64_t s = 0; s < S; ++s) {
    x.o = op + s * part_o, x.lse = lp + s * part_lse;
    core::ScoreMods m = mods;
    m.split = s, m.splits = S;
    if (int rc = cpu_forward_ext(x, y, m)) return rc;
    kernel = kernel_name();
  }
  flashbox_combine_args c{};
  c.struct_size = int32_t(sizeof c), c.device = FLASHBOX_CPU, c.out_dtype = a.dtype;
  c.num_splits = S, c.batch = B, c.seqlen = T, c.heads = H, c.head_dim_v = dv;
  c.out_partial = op, c.lse_partial = lp;
  const int64_t ps[4] = {part_o, T * H * dv, H * dv, dv}, ls[4] = {part_lse, H * T, 1, T};
  std::copy_n(ps, 4, c.out_partial_stride), std::copy_n(ls, 4, c.lse_partial_stride);
  c.out = a.o, c.lse = a.lse;
  std::copy_n(a.o_stride, 3, c.out_stride);
  cpu::combine_partials(c);
  set_kernel_name(kernel + "_split" + std::to_string(S));
  return FLASHBOX_OK;
}

}  // namespace

int cpu_forward_ext(const flashbox_attention_args &a, const flashbox_attention_ext &e, const core::ScoreMods &mods) {
  const int64_t dv = v_dim(a, e);
  if (a.dtype == FLASHBOX_FLOAT8_E4M3) return cpu_forward_fp8(a, e, mods);
  if (e.qv) return forward_with_qv(a, e, mods);
  if (e.num_splits > 1) return forward_with_splits(a, e, mods);
  if (!per_sequence(e)) return forward_one(a, mods, dv);

  int64_t worst = 0;  // the naive level's S and P and fp32 copies of the largest sequence
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(a, e, s);
    const int64_t need = 4 * (2 * a.heads_q * q.lq * q.lk + q.lq * a.heads_q * a.head_dim +
                              q.lk * a.heads_kv * a.head_dim + q.lk * a.heads_kv * dv);
    worst = std::max(worst, need);
  }
  if (a.impl == FLASHBOX_NAIVE)
    if (int rc = check_memory(worst, ("naive attention (" + layout_name(e) + ")").c_str())) return rc;

  std::vector<float> lse;  // one sequence's [heads_q, len_q]
  std::string kernel = "none";
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(a, e, s);
    if (q.lq == 0) continue;
    if (q.lk == 0) {  // no key: O = 0, LSE = -inf (with a learnable sink: the sink)
      zero_rows(a.o, a.o_stride, q, false, 0, q.lq, a.heads_q, dv, a.dtype);
      if (a.lse)
        for (int64_t h = 0; h < a.heads_q; ++h) std::fill_n(seq_lse(a.lse, a, q, h), q.lq, mods.sink(h));
      continue;
    }
    flashbox_attention_args x = sequence_args(a, q);
    if (a.lse) {
      lse.resize(size_t(a.heads_q * q.lq));
      x.lse = lse.data();
    }
    if (int rc = forward_one(x, sequence_mods(mods, q), dv)) return rc;
    kernel = kernel_name();
    if (a.lse)
      for (int64_t h = 0; h < a.heads_q; ++h) std::copy_n(lse.data() + h * q.lq, q.lq, seq_lse(a.lse, a, q, h));
  }
  set_kernel_name(kernel + (packed(e) ? "_varlen" : "_seqused"));
  return FLASHBOX_OK;
}

namespace {

// dsink[h] = -sum over sequences and their used query rows of exp(sink[h] - lse) * (dout . o), in
// fp64 in a fixed order (deterministic), from the forward's o and lse and the caller's dout.
void write_sink_gradient(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e, int64_t dv) {
  const flashbox_attention_args &a = g.fwd;
  std::vector<double> dsink(size_t(a.heads_q), 0.0);
  std::vector<float> o(static_cast<size_t>(dv)), dout(static_cast<size_t>(dv));
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(a, e, s);
    for (int64_t i = 0; i < q.lq; ++i) {
      const void *orow = seq_row(a.o, a.o_stride, q, false, i, a.dtype);
      const void *drow = seq_row(g.dout, g.dout_stride, q, false, i, a.dtype);
      for (int64_t h = 0; h < a.heads_q; ++h) {
        cpu::load_row_as_float(orow, a.dtype, h * a.o_stride[2], dv, o.data());
        cpu::load_row_as_float(drow, a.dtype, h * g.dout_stride[2], dv, dout.data());
        double dot = 0.0;
        for (int64_t x = 0; x < dv; ++x) dot += double(o[size_t(x)]) * double(dout[size_t(x)]);
        const double lse = seq_lse(a.lse, a, q, h)[i];
        dsink[size_t(h)] -= std::exp(double(e.learnable_sink[h]) - lse) * dot;
      }
    }
  }
  for (int64_t h = 0; h < a.heads_q; ++h) e.dsink[h] = float(dsink[size_t(h)]);
}

int backward_levels(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e,
                    const core::ScoreMods &mods) {
  const flashbox_attention_args &a = g.fwd;
  const int64_t dv = v_dim(a, e);  // V's, O's, dout's and dv's
  if (!per_sequence(e)) return cpu_backward(make_grad_problem(g, mods, dv));

  const flashbox_dtype t = a.dtype;
  int64_t worst = 0;
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(a, e, s);
    flashbox_attention_grad_args x = g;
    x.fwd.batch = 1, x.fwd.seqlen_q = std::max<int64_t>(q.lq, 1), x.fwd.seqlen_k = std::max<int64_t>(q.lk, 1);
    worst = std::max(worst, cpu::backward::scratch_bytes(make_grad_problem(x, mods, dv)));
  }
  if (int rc = check_memory(worst, ("the cpu backward (" + layout_name(e) + ")").c_str())) return rc;

  std::vector<float> lse;
  std::string kernel = "none";
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(a, e, s);
    // Rows past the used lengths: nothing flows through them.
    zero_rows(g.dq, g.dq_stride, q, false, q.lq, q.span_q - q.lq, a.heads_q, a.head_dim, t);
    zero_rows(g.dk, g.dk_stride, q, true, q.lk, q.span_k - q.lk, a.heads_kv, a.head_dim, t);
    zero_rows(g.dv, g.dv_stride, q, true, q.lk, q.span_k - q.lk, a.heads_kv, dv, t);
    if (q.lk == 0) {  // no key: the rows' O is the constant 0, dQ = 0
      zero_rows(g.dq, g.dq_stride, q, false, 0, q.lq, a.heads_q, a.head_dim, t);
      continue;
    }
    if (q.lq == 0) {  // no query: nothing flows into these keys
      zero_rows(g.dk, g.dk_stride, q, true, 0, q.lk, a.heads_kv, a.head_dim, t);
      zero_rows(g.dv, g.dv_stride, q, true, 0, q.lk, a.heads_kv, dv, t);
      continue;
    }
    flashbox_attention_grad_args x = g;
    x.fwd = sequence_args(a, q);
    x.dout = seq_row(g.dout, g.dout_stride, q, false, 0, t), x.dq = seq_row(g.dq, g.dq_stride, q, false, 0, t);
    x.dk = seq_row(g.dk, g.dk_stride, q, true, 0, t), x.dv = seq_row(g.dv, g.dv_stride, q, true, 0, t);
    lse.resize(size_t(a.heads_q * q.lq));
    for (int64_t h = 0; h < a.heads_q; ++h) std::copy_n(seq_lse(a.lse, a, q, h), q.lq, lse.data() + h * q.lq);
    x.fwd.lse = lse.data();
    if (int rc = cpu_backward(make_grad_problem(x, sequence_mods(mods, q), dv))) return rc;
    kernel = kernel_name();
  }
  set_kernel_name(kernel + (packed(e) ? "_varlen" : "_seqused"));
  return FLASHBOX_OK;
}

}  // namespace

int cpu_backward_ext(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e,
                     const core::ScoreMods &mods) {
  if (int rc = backward_levels(g, e, mods)) return rc;
  if (e.learnable_sink) write_sink_gradient(g, e, v_dim(g.fwd, e));
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
