#include "gpt2/model/sampling.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpt2/error.hpp"

namespace flashbox::gpt2 {

TokenSampler::TokenSampler(float temperature, int top_k, uint64_t seed)
    : temperature_(temperature), top_k_(top_k), rng_(seed) {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    throw Gpt2Error(fmt::format("temperature {} must be finite and >= 0 (0: greedy)", temperature));
  if (top_k < 0) throw Gpt2Error(fmt::format("top-k {} must be >= 0 (0: every token)", top_k));
}

int32_t TokenSampler::next(const std::vector<float> &logits) {
  const int32_t V = int32_t(logits.size());
  if (temperature_ == 0.0f) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  order_.resize(size_t(V));
  std::iota(order_.begin(), order_.end(), 0);
  const int32_t k = top_k_ > 0 ? std::min(top_k_, V) : V;
  // The k largest first (ties to the lower id, so the choice does not depend on the sort).
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double top = logits[size_t(order_[0])];
  weights_.resize(size_t(k));
  double total = 0.0;
  for (int32_t i = 0; i < k; ++i)
    total += weights_[size_t(i)] = std::exp((double(logits[size_t(order_[size_t(i)])]) - top) / temperature_);
  const double u = double(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0.0;
  for (int32_t i = 0; i < k; ++i)
    if ((acc += weights_[size_t(i)]) > u) return order_[size_t(i)];
  return order_[size_t(k - 1)];  // u within rounding of the total
}

}  // namespace flashbox::gpt2
