#include "cpu/combine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.hpp"

namespace flashbox::cpu {

void combine_partials(const flashbox_combine_args &a) {
  const int64_t S = a.num_splits, DV = a.head_dim_v;
  const int64_t *ps = a.out_partial_stride, *ls = a.lse_partial_stride;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t t = 0; t < a.seqlen; ++t) {
      std::vector<float> acc(static_cast<size_t>(DV));
      for (int64_t h = 0; h < a.heads; ++h) {
        // The largest part LSE first, so that every weight exp(L_s - max) is at most 1.
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < S; ++s) mx = std::max(mx, a.lse_partial[s * ls[0] + b * ls[1] + t * ls[2] + h * ls[3]]);
        std::fill(acc.begin(), acc.end(), 0.0f);
        float lse = -std::numeric_limits<float>::infinity();
        if (mx != -std::numeric_limits<float>::infinity()) {
          double sum = 0.0;
          for (int64_t s = 0; s < S; ++s) {
            const float l = a.lse_partial[s * ls[0] + b * ls[1] + t * ls[2] + h * ls[3]];
            if (l == -std::numeric_limits<float>::infinity()) continue;  // no key: O_s is not read
            const float w = std::exp(l - mx);
            sum += w;
            const float *o = a.out_partial + s * ps[0] + b * ps[1] + t * ps[2] + h * ps[3];
            for (int64_t x = 0; x < DV; ++x) acc[size_t(x)] += w * o[x];
          }
          const float inv = float(1.0 / sum);
          for (float &x : acc) x *= inv;
          lse = mx + float(std::log(sum));
        }
        store_row_from_float(a.out, a.out_dtype, b * a.out_stride[0] + t * a.out_stride[1] + h * a.out_stride[2], DV,
                             acc.data());
        if (a.lse) a.lse[(b * a.heads + h) * a.seqlen + t] = lse;
      }
    }
}

}  // namespace flashbox::cpu
