// GPT-2's shape: the named configurations and what the rest of the model derives from them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashbox::gpt2 {

struct Gpt2Config {
  std::string name;  // "gpt2", "small", "tiny", or "custom" for shapes read from a checkpoint
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;      // C
  int vocab_size = 0;  // V
  int n_ctx = 0;       // rows of the positional embedding: the longest window

  int head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
};

// gpt2: the 124M model. small and tiny keep head_dim 64 (so every attention kernel runs them) and
// GPT-2's vocabulary (so real tokenized text can be evaluated), with far fewer layers and channels.
const std::vector<Gpt2Config> &named_configs();
// Throws Gpt2Error listing the known names when `name` is not one of them.
Gpt2Config config_by_name(const std::string &name);
// Throws Gpt2Error when sizes are non-positive, n_embd is not a multiple of n_head, or a size would
// overflow the int32 arithmetic of the forward pass.
void validate_config(const Gpt2Config &c);

}  // namespace flashbox::gpt2
