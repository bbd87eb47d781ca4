// All parameters of a GPT-2 in one fp32 buffer, in llm.c's order and layout: each weight matrix is
// [out, in] (as nn.Linear stores it), the per-layer tensors are stacked over layers, the token
// embedding has exactly vocab_size rows (no padding) and doubles as the LM head (tied).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpt2/model/config.hpp"

namespace flashbox::gpt2 {

enum class Param : int {
  Wte,
  Wpe,
  Ln1W,
  Ln1B,
  QkvW,
  QkvB,
  AttnProjW,
  AttnProjB,
  Ln2W,
  Ln2B,
  FcW,
  FcB,
  FcProjW,
  FcProjB,
  LnfW,
  LnfB,
  Count
};
inline constexpr int kParamCount = int(Param::Count);

// Shape of one layer's slice of a tensor (or of the whole tensor for Wte, Wpe, LnfW, LnfB).
struct ParamShape {
  int64_t rows, cols;  // cols == 1 for vectors
  bool per_layer;
  int64_t numel() const { return rows * cols; }
};
ParamShape param_shape(const Gpt2Config &c, Param p);
const char *param_name(Param p);  // llm.c's names: "wte", "qkvw", ...
// Number of parameters of a (validated) config, computed without allocating them: readers compare it
// with the file's size before trusting a header's shapes.
int64_t parameter_count(const Gpt2Config &c);

class Gpt2Weights {
 public:
  explicit Gpt2Weights(Gpt2Config config);  // zero-filled; validates the config

  const Gpt2Config &config() const { return config_; }
  int64_t size() const { return int64_t(data_.size()); }
  float *data() { return data_.data(); }
  const float *data() const { return data_.data(); }

  // The whole tensor (all layers) or one layer's slice.
  std::span<float> tensor(Param p);
  std::span<const float> tensor(Param p) const;
  std::span<float> layer(Param p, int l);
  std::span<const float> layer(Param p, int l) const;

 private:
  Gpt2Config config_;
  std::array<int64_t, kParamCount + 1> offsets_{};
  std::vector<float> data_;
};

// GPT-2's initialisation (as Hugging Face's GPT2PreTrainedModel does it): weights and embeddings
// normal(0, 0.02), the two residual projections (attention c_proj, MLP c_proj) normal(0,
// 0.02/sqrt(2 n_layer)), biases 0, LayerNorm weights 1 and biases 0. Deterministic in `seed` on every
// platform (own generator, not <random>'s distributions).
void init_gpt2_weights(Gpt2Weights &w, uint64_t seed);

}  // namespace flashbox::gpt2
