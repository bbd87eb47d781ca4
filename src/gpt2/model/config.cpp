#include "gpt2/model/config.hpp"

#include <fmt/format.h>

#include "gpt2/error.hpp"

namespace flashbox::gpt2 {

const std::vector<Gpt2Config> &named_configs() {
  static const std::vector<Gpt2Config> configs = {
      {"gpt2", 12, 12, 768, 50257, 1024},
      {"small", 4, 4, 256, 50257, 1024},
      {"tiny", 2, 2, 128, 50257, 1024},
  };
  return configs;
}

Gpt2Config config_by_name(const std::string &name) {
  std::string known;
  for (const auto &c : named_configs()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  throw Gpt2Error(fmt::format("unknown GPT-2 config '{}' (known: {})", name, known));
}

void validate_config(const Gpt2Config &c) {
  if (c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 || c.vocab_size <= 0 || c.n_ctx <= 0)
    throw Gpt2Error(
        fmt::format("GPT-2 config '{}' has a non-positive size (layers {}, heads {}, channels {}, "
                    "vocabulary {}, context {})",
                    c.name, c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.n_ctx));
  if (c.n_embd % c.n_head != 0)
    throw Gpt2Error(
        fmt::format("GPT-2 config '{}': {} channels do not divide into {} heads", c.name, c.n_embd, c.n_head));
  // 4C x C blocks and V x C embeddings index with int64, but a single row index must fit in int32.
  if (int64_t(c.n_embd) * 4 > (1 << 24) || c.vocab_size > (1 << 24) || c.n_ctx > (1 << 20) || c.n_layer > 1024)
    throw Gpt2Error(fmt::format("GPT-2 config '{}' is larger than this implementation supports", c.name));
}

}  // namespace flashbox::gpt2
