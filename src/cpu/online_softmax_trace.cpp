// Online softmax (Milakov & Gimelshein 2018, arXiv 1805.02867): one pass over a row keeping only the
// running max m and l = sum exp(x - m). A block that brings a larger max rescales the old sum:
//   m_new = max(m_old, max(block)),  l = l * exp(m_old - m_new) + sum_block exp(x - m_new).
// After the last block softmax(x)_i = exp(x_i - m) / l, equal to the two-pass softmax up to rounding.
// Subtracting the running max keeps every exp <= 1, so nothing overflows.
#include "cpu/online_softmax_trace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace flashbox::cpu {

std::vector<double> default_trace_values() { return {1.0, 2.0, 0.5, 3.0, -1.0, 4.5, 2.0, 6.0}; }

OnlineSoftmaxTrace online_softmax_trace(std::span<const double> values, int64_t block) {
  if (values.empty()) throw std::invalid_argument("online softmax trace: no values");
  if (block < 1)
    throw std::invalid_argument("online softmax trace: block = " + std::to_string(block) + " must be >= 1");
  for (double x : values)
    if (!std::isfinite(x))
      throw std::invalid_argument("online softmax trace: value " + std::to_string(x) + " is not finite");

  OnlineSoftmaxTrace t;
  t.values.assign(values.begin(), values.end());
  t.block = block;
  const int64_t n = int64_t(values.size());
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block);
    OnlineSoftmaxStep s;
    s.block_index = start / block;
    s.numbers_read = end;
    float block_max = -std::numeric_limits<float>::infinity();
    for (int64_t i = start; i < end; ++i) {
      s.block_values.push_back(values[size_t(i)]);
      block_max = std::max(block_max, float(values[size_t(i)]));
    }
    const float m_new = std::max(m, block_max);
    const float rescale = std::exp(m - m_new);  // exp(-inf) = 0 on the first block
    float block_sum = 0.0f;
    for (int64_t i = start; i < end; ++i) block_sum += std::exp(float(values[size_t(i)]) - m_new);
    l = l * rescale + block_sum;
    s.block_max = block_max;
    s.m_old = m;
    s.m = m_new;
    s.rescale = rescale;
    s.l = l;
    m = m_new;
    t.steps.push_back(std::move(s));
  }

  // The exact softmax, two passes in double.
  const double mx = *std::max_element(values.begin(), values.end());
  double sum = 0.0;
  for (double x : values) sum += std::exp(x - mx);
  for (double x : values) {
    t.exact.push_back(std::exp(x - mx) / sum);
    t.softmax.push_back(double(std::exp(float(x) - m) / l));
    t.max_abs_error = std::max(t.max_abs_error, std::abs(t.softmax.back() - t.exact.back()));
  }
  return t;
}

}  // namespace flashbox::cpu
