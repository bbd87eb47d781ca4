// CPU backward entry point and the pieces both levels share: the row sums D, strided row loads and
// stores, the mask bounds and score transforms, and the scratch accounting. impl NAIVE materialises P; BLOCKED (and AUTO)
// recomputes P tile by tile from the forward's LSE.
#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>

#include <omp.h>

#include "core/backends.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cpu/attention_backward.hpp"
#include "cpu/masked_levels.hpp"

namespace flashbox::cpu::backward {

Problem make_problem(const detail::GradProblem &g) {
  const detail::Problem &a = g.fwd;
  Problem p{};
  p.g = &g;
  p.batch = a.batch, p.seqlen_q = a.seqlen_q, p.seqlen_k = a.seqlen_k;
  p.heads_q = a.heads_q, p.heads_kv = a.heads_kv, p.head_dim = a.head_dim, p.head_dim_v = a.head_dim_v;
  p.group = a.group;
  p.scale = a.scale;
  p.mods = a.mods;
  return p;
}

int64_t key_begin(const Problem &p, int64_t i) { return core::key_begin(p.mods, i, p.seqlen_q, p.seqlen_k); }
int64_t key_end(const Problem &p, int64_t i) { return core::key_end(p.mods, i, p.seqlen_q, p.seqlen_k); }
int64_t query_begin(const Problem &p, int64_t j) { return core::query_begin(p.mods, j, p.seqlen_q, p.seqlen_k); }
int64_t query_end(const Problem &p, int64_t j) { return core::query_end(p.mods, j, p.seqlen_q, p.seqlen_k); }

float transformed_score(const Problem &p, float s, float slope, int64_t i, int64_t j, float *grad) {
  const float c = core::capped_score(s, p.mods.softcap);
  *grad = core::softcap_grad(c, p.mods.softcap);
  return p.mods.alibi_slopes ? c + core::alibi_bias(slope, i, j, p.seqlen_q, p.seqlen_k) : c;
}

void load_rows(const Problem &p, const void *base, const int64_t *stride, int64_t b, int64_t h, int64_t r0, int64_t n,
               int64_t dim, float *dst) {
  const flashbox_dtype t = p.g->fwd.dtype;
  for (int64_t r = 0; r < n; ++r)
    load_row_as_float(base, t, b * stride[0] + (r0 + r) * stride[1] + h * stride[2], dim, dst + r * dim);
}

void store_rows(const Problem &p, void *base, const int64_t *stride, int64_t b, int64_t h, int64_t r0, int64_t n,
                int64_t dim, const float *src, float mul) {
  const flashbox_dtype t = p.g->fwd.dtype;
  std::vector<float> row(static_cast<size_t>(dim));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < dim; ++c) row[size_t(c)] = src[r * dim + c] * mul;
    store_row_from_float(base, t, b * stride[0] + (r0 + r) * stride[1] + h * stride[2], dim, row.data());
  }
}

void compute_rowsum(const Problem &p, float *rowsum) {
  const detail::GradProblem &g = *p.g;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t dv = p.head_dim_v;
      std::vector<float> o(static_cast<size_t>(dv)), d(static_cast<size_t>(dv));
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        load_rows(p, g.fwd.o, g.fwd.o_stride, b, h, i, 1, dv, o.data());
        load_rows(p, g.dout, g.dout_stride, b, h, i, 1, dv, d.data());
        float s = 0.0f;
        for (int64_t c = 0; c < dv; ++c) s += o[size_t(c)] * d[size_t(c)];
        rowsum[(b * p.heads_q + h) * p.seqlen_q + i] = s;
      }
    }
}

int threads_for(const Problem &p) {
  return std::max(1, std::min<int>(omp_get_max_threads(), int(p.batch * p.heads_kv)));
}

int64_t scratch_bytes(const detail::GradProblem &g) {
  const Problem p = make_problem(g);
  const int64_t rows = p.batch * p.heads_q * p.seqlen_q, threads = threads_for(p);
  if (g.fwd.impl == FLASHBOX_NAIVE) return 4 * (rows + naive_thread_elements(p) * threads);
  return 4 * (rows + rows * p.head_dim + blocked_thread_elements(p) * threads);
}

Scratch::~Scratch() { detail::note_scratch_free(bytes_); }

bool Scratch::allocate(std::vector<float> &buf, int64_t elements) {
  try {
    buf.assign(size_t(elements), 0.0f);
  } catch (const std::bad_alloc &) {
    return false;
  } catch (const std::length_error &) {
    return false;
  }
  const int64_t bytes = elements * int64_t(sizeof(float));
  bytes_ += bytes;
  detail::note_scratch_alloc(bytes);
  return true;
}

}  // namespace flashbox::cpu::backward

namespace flashbox::detail {

int cpu_backward(const GradProblem &g) {
  const cpu::backward::Problem p = cpu::backward::make_problem(g);
  if (g.fwd.impl == FLASHBOX_NAIVE) return cpu::backward::naive(p);
  return cpu::backward::blocked(p);
}

int64_t cpu_backward_workspace_size(const GradProblem &g) { return cpu::backward::scratch_bytes(g); }

}  // namespace flashbox::detail
