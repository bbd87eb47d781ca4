// The next token from a row of logits: the largest at temperature 0 (greedy, ties to the lower id),
// else a draw from softmax(logits / temperature) restricted to the top_k largest logits (0: all of
// them). Draws come from a seeded 64-bit Mersenne Twister turned into [0, 1) by its top 53 bits, so
// a seed gives the same tokens on every platform.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace flashbox::gpt2 {

class TokenSampler {
 public:
  // Throws Gpt2Error for a negative or non-finite temperature or a negative top_k.
  TokenSampler(float temperature, int top_k, uint64_t seed);
  int32_t next(const std::vector<float> &logits);

 private:
  float temperature_;
  int top_k_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<double> weights_;
};

}  // namespace flashbox::gpt2
