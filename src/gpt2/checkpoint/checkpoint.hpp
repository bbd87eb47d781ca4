// GPT-2 checkpoints in the two formats people have: Hugging Face's model.safetensors of the gpt2
// family, and llm.c's gpt2_124M.bin / gpt2_124M_bf16.bin. Both are read into Gpt2Weights (fp32, llm.c
// layout) with every tensor checked; any problem is a Gpt2Error naming the file and the tensor.
#pragma once
#include <string>

#include "gpt2/model/weights.hpp"

namespace flashbox::gpt2 {

// Picks the reader from the file's first bytes (llm.c's magic number, else safetensors).
// heads_override > 0 sets n_head; otherwise it comes from the file (llm.c header, our safetensors
// metadata, a config.json beside the file) or, failing all of them, from head_dim 64 as every gpt2
// family member has.
Gpt2Weights load_checkpoint(const std::string &path, int heads_override = 0);

Gpt2Weights read_hf_safetensors(const std::string &path, int heads_override = 0);
// dtype: "F32", "F16" or "BF16". Conv1D weights are written [in, out] as Hugging Face stores them.
void write_hf_safetensors(const Gpt2Weights &w, const std::string &path, const std::string &dtype = "F32");

// llm.c: a 256 x int32 header (magic 20240326; version 3 = fp32, 5 = bf16; maxT, V, L, NH, C, padded
// V), then the 16 parameter tensors in llm.c's order with wte padded to padded V rows.
Gpt2Weights read_llmc_checkpoint(const std::string &path);
void write_llmc_checkpoint(const Gpt2Weights &w, const std::string &path, bool bf16);

inline constexpr int kLlmcModelMagic = 20240326;

}  // namespace flashbox::gpt2
