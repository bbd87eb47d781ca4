// The extension's calls on the cpu: masks and score transforms go straight to the levels
// (src/cpu/masked_levels.hpp); variable-length batches become one fixed-length call per sequence on
// views of the packed [total, heads, head_dim] tensors (v and o: head_dim_v; token t of sequence s is
// row cu[s] + t), so no padding is ever computed. lse is [heads_q, total_q] in the packed layout and
// [1, heads_q, len] in a per-sequence call: a small per-sequence buffer bridges the two. Sequences of
// length 0 are written here: queries with no key get O = 0 and LSE = -inf (dQ = 0), keys with no
// query dK = dV = 0.
// ALiBi slopes of sequence s are row s of the slope buffer (alibi_batch_stride apart).
// Before anything is written, the largest sequence's scratch is checked against the host's free
// memory, so a call that would run out fails with nothing written, like the plain call.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cpu/attention_backward.hpp"
#include "cpu/masked_levels.hpp"
#include "cpu/scratch_buffer.hpp"

namespace flashbox::detail {
namespace {

struct Seq {
  int64_t q0, lq, k0, lk;
};

Seq sequence(const flashbox_attention_ext &e, int64_t s) {
  return {e.cu_seqlens_q[s], e.cu_seqlens_q[s + 1] - e.cu_seqlens_q[s], e.cu_seqlens_k[s],
          e.cu_seqlens_k[s + 1] - e.cu_seqlens_k[s]};
}

const void *row_ptr(const void *base, const int64_t *stride, int64_t row, flashbox_dtype t) {
  return static_cast<const char *>(base) + row * stride[1] * dtype_size(t);
}
void *row_ptr(void *base, const int64_t *stride, int64_t row, flashbox_dtype t) {
  return static_cast<char *>(base) + row * stride[1] * dtype_size(t);
}

// Rows [r0, r0 + n) of a packed [total, heads, head_dim] tensor set to 0.
void zero_rows(void *base, const int64_t *stride, int64_t r0, int64_t n, int64_t heads, int64_t d, flashbox_dtype t) {
  const std::vector<float> zeros(size_t(d), 0.0f);
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t h = 0; h < heads; ++h)
      cpu::store_row_from_float(base, t, r * stride[1] + h * stride[2], d, zeros.data());
}

core::ScoreMods sequence_mods(core::ScoreMods m, int64_t s) {
  if (m.alibi_slopes) m.alibi_slopes += s * m.alibi_batch_stride;
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

}  // namespace

int cpu_forward_ext(const flashbox_attention_args &a, const flashbox_attention_ext &e, const core::ScoreMods &mods) {
  // V's and O's head dim (head_dim unless the extension set another).
  const int64_t dv = e.head_dim_v != 0 ? e.head_dim_v : a.head_dim;
  if (!(e.cu_seqlens_q && e.cu_seqlens_k)) return forward_one(a, mods, dv);

  const flashbox_dtype t = a.dtype;
  int64_t worst = 0;  // the naive level's S and P and fp32 copies of the largest sequence
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(e, s);
    const int64_t need = 4 * (2 * a.heads_q * q.lq * q.lk + q.lq * a.heads_q * a.head_dim +
                              q.lk * a.heads_kv * a.head_dim + q.lk * a.heads_kv * dv);
    worst = std::max(worst, need);
  }
  if (a.impl == FLASHBOX_NAIVE)
    if (int rc = check_memory(worst, "naive attention (variable length)")) return rc;

  std::vector<float> lse;  // one sequence's [heads_q, len_q]
  std::string kernel = "none";
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(e, s);
    if (q.lq == 0) continue;
    if (q.lk == 0) {  // no key: O = 0, LSE = -inf
      zero_rows(a.o, a.o_stride, q.q0, q.lq, a.heads_q, dv, t);
      if (a.lse)
        for (int64_t h = 0; h < a.heads_q; ++h)
          std::fill_n(a.lse + h * a.seqlen_q + q.q0, q.lq, -std::numeric_limits<float>::infinity());
      continue;
    }
    flashbox_attention_args x = a;
    x.batch = 1, x.seqlen_q = q.lq, x.seqlen_k = q.lk;
    x.q = row_ptr(a.q, a.q_stride, q.q0, t), x.o = row_ptr(a.o, a.o_stride, q.q0, t);
    x.k = row_ptr(a.k, a.k_stride, q.k0, t), x.v = row_ptr(a.v, a.v_stride, q.k0, t);
    if (a.lse) {
      lse.resize(size_t(a.heads_q * q.lq));
      x.lse = lse.data();
    }
    if (int rc = forward_one(x, sequence_mods(mods, s), dv)) return rc;
    kernel = kernel_name();
    if (a.lse)
      for (int64_t h = 0; h < a.heads_q; ++h) std::copy_n(lse.data() + h * q.lq, q.lq, a.lse + h * a.seqlen_q + q.q0);
  }
  set_kernel_name(kernel + "_varlen");
  return FLASHBOX_OK;
}

int cpu_backward_ext(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e,
                     const core::ScoreMods &mods) {
  const flashbox_attention_args &a = g.fwd;
  // V's, O's, dout's and dv's head dim (head_dim unless the extension set another).
  const int64_t dv = e.head_dim_v != 0 ? e.head_dim_v : a.head_dim;
  if (!(e.cu_seqlens_q && e.cu_seqlens_k)) return cpu_backward(make_grad_problem(g, mods, dv));

  const flashbox_dtype t = a.dtype;
  int64_t worst = 0;
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(e, s);
    flashbox_attention_grad_args x = g;
    x.fwd.batch = 1, x.fwd.seqlen_q = std::max<int64_t>(q.lq, 1), x.fwd.seqlen_k = std::max<int64_t>(q.lk, 1);
    worst = std::max(worst, cpu::backward::scratch_bytes(make_grad_problem(x, mods, dv)));
  }
  if (int rc = check_memory(worst, "the cpu backward (variable length)")) return rc;

  std::vector<float> lse;
  std::string kernel = "none";
  for (int64_t s = 0; s < a.batch; ++s) {
    const Seq q = sequence(e, s);
    if (q.lk == 0) {  // no key: the rows' O is the constant 0, dQ = 0
      zero_rows(g.dq, g.dq_stride, q.q0, q.lq, a.heads_q, a.head_dim, t);
      continue;
    }
    if (q.lq == 0) {  // no query: nothing flows into these keys
      zero_rows(g.dk, g.dk_stride, q.k0, q.lk, a.heads_kv, a.head_dim, t);
      zero_rows(g.dv, g.dv_stride, q.k0, q.lk, a.heads_kv, dv, t);
      continue;
    }
    flashbox_attention_grad_args x = g;
    x.fwd.batch = 1, x.fwd.seqlen_q = q.lq, x.fwd.seqlen_k = q.lk;
    x.fwd.q = row_ptr(a.q, a.q_stride, q.q0, t), x.fwd.o = row_ptr(a.o, a.o_stride, q.q0, t);
    x.fwd.k = row_ptr(a.k, a.k_stride, q.k0, t), x.fwd.v = row_ptr(a.v, a.v_stride, q.k0, t);
    x.dout = row_ptr(g.dout, g.dout_stride, q.q0, t), x.dq = row_ptr(g.dq, g.dq_stride, q.q0, t);
    x.dk = row_ptr(g.dk, g.dk_stride, q.k0, t), x.dv = row_ptr(g.dv, g.dv_stride, q.k0, t);
    lse.resize(size_t(a.heads_q * q.lq));
    for (int64_t h = 0; h < a.heads_q; ++h) std::copy_n(a.lse + h * a.seqlen_q + q.q0, q.lq, lse.data() + h * q.lq);
    x.fwd.lse = lse.data();
    if (int rc = cpu_backward(make_grad_problem(x, sequence_mods(mods, s), dv))) return rc;
    kernel = kernel_name();
  }
  set_kernel_name(kernel + "_varlen");
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
