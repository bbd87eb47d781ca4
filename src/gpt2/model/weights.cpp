#include "gpt2/model/weights.hpp"

#include <cmath>

namespace flashbox::gpt2 {

ParamShape param_shape(const Gpt2Config &c, Param p) {
  const int64_t C = c.n_embd;
  switch (p) {
    case Param::Wte: return {c.vocab_size, C, false};
    case Param::Wpe: return {c.n_ctx, C, false};
    case Param::Ln1W:
    case Param::Ln1B:
    case Param::Ln2W:
    case Param::Ln2B: return {C, 1, true};
    case Param::QkvW: return {3 * C, C, true};
    case Param::QkvB: return {3 * C, 1, true};
    case Param::AttnProjW: return {C, C, true};
    case Param::AttnProjB: return {C, 1, true};
    case Param::FcW: return {4 * C, C, true};
    case Param::FcB: return {4 * C, 1, true};
    case Param::FcProjW: return {C, 4 * C, true};
    case Param::FcProjB: return {C, 1, true};
    case Param::LnfW:
    case Param::LnfB: return {C, 1, false};
    case Param::Count: break;
  }
  return {0, 0, false};
}

const char *param_name(Param p) {
  static constexpr const char *names[kParamCount] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                                     "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                                     "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  return int(p) >= 0 && int(p) < kParamCount ? names[int(p)] : "?";
}

int64_t parameter_count(const Gpt2Config &c) {
  int64_t n = 0;
  for (int i = 0; i < kParamCount; ++i) {
    const ParamShape s = param_shape(c, Param(i));
    n += s.numel() * (s.per_layer ? c.n_layer : 1);
  }
  return n;
}

Gpt2Weights::Gpt2Weights(Gpt2Config config) : config_(std::move(config)) {
  validate_config(config_);
  for (int i = 0; i < kParamCount; ++i) {
    const ParamShape s = param_shape(config_, Param(i));
    offsets_[size_t(i) + 1] = offsets_[size_t(i)] + s.numel() * (s.per_layer ? config_.n_layer : 1);
  }
  data_.assign(size_t(offsets_[kParamCount]), 0.0f);
}

std::span<float> Gpt2Weights::tensor(Param p) {
  return {data_.data() + offsets_[size_t(p)], size_t(offsets_[size_t(p) + 1] - offsets_[size_t(p)])};
}
std::span<const float> Gpt2Weights::tensor(Param p) const {
  return {data_.data() + offsets_[size_t(p)], size_t(offsets_[size_t(p) + 1] - offsets_[size_t(p)])};
}
std::span<float> Gpt2Weights::layer(Param p, int l) {
  const int64_t n = param_shape(config_, p).numel();
  return tensor(p).subspan(size_t(n * l), size_t(n));
}
std::span<const float> Gpt2Weights::layer(Param p, int l) const {
  const int64_t n = param_shape(config_, p).numel();
  return tensor(p).subspan(size_t(n * l), size_t(n));
}

namespace {

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills `out` with normal(0, std) from its own stream (Box-Muller on 53-bit uniforms), so chunks of
// a tensor can be filled in parallel and the result does not depend on the thread count.
void fill_normal(std::span<float> out, uint64_t stream, double std) {
  uint64_t state = stream;
  auto uniform = [&] { return (double(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  for (size_t i = 0; i < out.size(); i += 2) {
    const double r = std * std::sqrt(-2.0 * std::log(uniform()));
    const double theta = 6.283185307179586 * uniform();
    out[i] = float(r * std::cos(theta));
    if (i + 1 < out.size()) out[i + 1] = float(r * std::sin(theta));
  }
}

}  // namespace

void init_gpt2_weights(Gpt2Weights &w, uint64_t seed) {
  const Gpt2Config &c = w.config();
  const double residual_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  constexpr int64_t kChunk = 1 << 16;
  for (int i = 0; i < kParamCount; ++i) {
    const Param p = Param(i);
    std::span<float> t = w.tensor(p);
    const bool is_vector = param_shape(c, p).cols == 1;
    if (is_vector) {
      // LayerNorm weights start at 1; LayerNorm biases and every linear bias at 0.
      const bool ln_weight = p == Param::Ln1W || p == Param::Ln2W || p == Param::LnfW;
      std::fill(t.begin(), t.end(), ln_weight ? 1.0f : 0.0f);
      continue;
    }
    const double std = (p == Param::AttnProjW || p == Param::FcProjW) ? residual_std : 0.02;
    const int64_t chunks = (int64_t(t.size()) + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      uint64_t s = seed * 0x100000001b3ull + uint64_t(i) * 0x51ed27ull + 1;
      const uint64_t stream = splitmix64(s) ^ (uint64_t(k) * 0x9e3779b97f4a7c15ull);
      const size_t begin = size_t(k * kChunk);
      fill_normal(t.subspan(begin, std::min(t.size() - begin, size_t(kChunk))), stream, std);
    }
  }
}

}  // namespace flashbox::gpt2
