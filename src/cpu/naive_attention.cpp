// Naive attention, the textbook way: S = Q K^T * scale for every (batch, head) at once, the score
// transforms (softcap, ALiBi) and the mask (causal, sliding window, documents, prefix, blocks;
// src/core/masks.hpp) written into S, P = softmax(S) row by row, O = P V. S and P are full
// [batch, heads_q, seqlen_q, seqlen_k] fp32 arrays, which is the point: their size grows with T^2
// and is reported through the scratch counters (flashbox_last_scratch_peak_bytes). Inputs are first
// converted to dense fp32 copies (K transposed so the S loop runs along keys); those count as
// scratch too.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/backends.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cpu/masked_levels.hpp"
#include "cpu/reference_fp64.hpp"
#include "cpu/scratch_buffer.hpp"

namespace flashbox::detail {

int cpu_naive_forward(const Problem &a) {
  const core::ScoreMods &m = a.mods;
  const int64_t B = a.batch, SQ = a.seqlen_q, SK = a.seqlen_k, HQ = a.heads_q, HKV = a.heads_kv, D = a.head_dim;
  const int64_t DV = a.head_dim_v;  // V's and O's row length (scores use D)
  const int64_t group = a.group;
  const float scale = a.scale;
  const int64_t score_elems = B * HQ * SQ * SK;  // fits: checked by validate_scalars
  const int64_t input_elems = B * SQ * HQ * D + B * SK * HKV * (D + DV);

  // Linux grants a huge allocation lazily and kills the process when it is touched; refuse up front.
  const int64_t need = (2 * score_elems + input_elems) * int64_t(sizeof(float));
  const int64_t avail = cpu::available_host_memory_bytes();
  if (avail >= 0 && need > avail)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                "naive attention needs " + std::to_string(need) + " bytes (S and P: " + std::to_string(score_elems) +
                    " fp32 scores each), but only " + std::to_string(avail) + " bytes of host memory are available");

  cpu::ScratchBuffer q(B * HQ * SQ * D), kt(B * HKV * D * SK), v(B * HKV * SK * DV);  // dense fp32 copies
  cpu::ScratchBuffer S(score_elems), P(score_elems);

  // Inputs to dense fp32: q [b, h, i, d], kt [b, hk, d, j], v [b, hk, j, dv].
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < SQ; ++i)
        cpu::load_row_as_float(a.q, a.dtype, b * a.q_stride[0] + i * a.q_stride[1] + h * a.q_stride[2], D,
                               q.data() + ((b * HQ + h) * SQ + i) * D);
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < HKV; ++h)
      for (int64_t j = 0; j < SK; ++j) {
        float *kt_bh = kt.data() + (b * HKV + h) * D * SK;
        for (int64_t x = 0; x < D; ++x)
          kt_bh[x * SK + j] =
              cpu::load_as_float(a.k, a.dtype, b * a.k_stride[0] + j * a.k_stride[1] + h * a.k_stride[2] + x);
        cpu::load_row_as_float(a.v, a.dtype, b * a.v_stride[0] + j * a.v_stride[1] + h * a.v_stride[2], DV,
                               v.data() + ((b * HKV + h) * SK + j) * DV);
      }

      // Step 1: S = Q K^T * scale, the softcap and ALiBi bias, then the mask written into S.
#pragma omp parallel for collapse(3)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < SQ; ++i) {
        float *s = S.data() + ((b * HQ + h) * SQ + i) * SK;
        const float *qi = q.data() + ((b * HQ + h) * SQ + i) * D;
        const float *kt_bh = kt.data() + (b * HKV + h / group) * D * SK;
        std::fill_n(s, SK, 0.0f);
        for (int64_t x = 0; x < D; ++x) {
          const float qx = qi[x];
          const float *k = kt_bh + x * SK;
          for (int64_t j = 0; j < SK; ++j) s[j] += qx * k[j];
        }
        for (int64_t j = 0; j < SK; ++j) s[j] *= scale;
        if (m.softcap > 0.0f)
          for (int64_t j = 0; j < SK; ++j) s[j] = core::capped_score(s[j], m.softcap);
        if (m.alibi_slopes) {
          const float slope = m.slope(b, h);
          for (int64_t j = 0; j < SK; ++j) s[j] += core::alibi_bias(slope, i, j, SQ, SK);
        }
        if (m.elementwise()) {  // documents, a prefix or a block mask: the mask key by key
          for (int64_t j = 0; j < SK; ++j)
            if (!core::visible(m, b, h, i, j, SQ, SK)) s[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const int64_t kb = core::key_begin(m, i, SQ, SK), ke = std::max(kb, core::key_end(m, i, SQ, SK));
        std::fill(s, s + kb, -std::numeric_limits<float>::infinity());
        std::fill(s + ke, s + SK, -std::numeric_limits<float>::infinity());
      }

      // Step 2: P = softmax(S) per row (max subtracted so exp cannot overflow). A row with every key
      // masked has max -inf: its P row is 0 and its LSE -inf. A learnable sink joins the max and the
      // denominator as a column with no value (such a row then has LSE = sink).
#pragma omp parallel for collapse(3)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < SQ; ++i) {
        const int64_t row = (b * HQ + h) * SQ + i;
        const float *s = S.data() + row * SK;
        float *prow = P.data() + row * SK;
        const float sink = m.sink(h);
        const float mx = std::max(*std::max_element(s, s + SK), sink);
        if (mx == -std::numeric_limits<float>::infinity()) {
          std::fill_n(prow, SK, 0.0f);
          if (a.lse) a.lse[row] = mx;
          continue;
        }
        float sum = std::exp(sink - mx);  // 0 without a sink
        for (int64_t j = 0; j < SK; ++j) {
          prow[j] = std::exp(s[j] - mx);
          sum += prow[j];
        }
        for (int64_t j = 0; j < SK; ++j) prow[j] /= sum;
        if (a.lse) a.lse[row] = mx + std::log(sum);
      }

      // Step 3: O = P V.
#pragma omp parallel for collapse(3)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < SQ; ++i) {
        const float *prow = P.data() + ((b * HQ + h) * SQ + i) * SK;
        const float *v_bh = v.data() + (b * HKV + h / group) * SK * DV;
        float out[kCpuMaxHeadDim];  // one output row before rounding to the output dtype (DV <= the limit)
        std::fill_n(out, DV, 0.0f);
        for (int64_t j = 0; j < SK; ++j) {
          const float pj = prow[j];
          for (int64_t x = 0; x < DV; ++x) out[x] += pj * v_bh[j * DV + x];
        }
        cpu::store_row_from_float(a.o, a.dtype, b * a.o_stride[0] + i * a.o_stride[1] + h * a.o_stride[2], DV, out);
      }
  set_kernel_name("cpu_naive");
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
