// Hugging Face's GPT-2 layout: tensor names h.N.attn.c_attn.weight etc., optionally under
// "transformer."; c_attn, c_proj and c_fc are Conv1D modules whose weights are stored [in, out],
// the transpose of our [out, in]. lm_head.weight, when present, is the same matrix as wte (tied).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/checkpoint/safetensors.hpp"
#include "gpt2/error.hpp"

namespace flashbox::gpt2 {
namespace {

struct HfName {
  std::string name;  // without prefix and layer: "attn.c_attn.weight"
  bool transposed;   // stored [in, out]
};

HfName hf_name(Param p) {
  switch (p) {
    case Param::Wte: return {"wte.weight", false};
    case Param::Wpe: return {"wpe.weight", false};
    case Param::Ln1W: return {"ln_1.weight", false};
    case Param::Ln1B: return {"ln_1.bias", false};
    case Param::QkvW: return {"attn.c_attn.weight", true};
    case Param::QkvB: return {"attn.c_attn.bias", false};
    case Param::AttnProjW: return {"attn.c_proj.weight", true};
    case Param::AttnProjB: return {"attn.c_proj.bias", false};
    case Param::Ln2W: return {"ln_2.weight", false};
    case Param::Ln2B: return {"ln_2.bias", false};
    case Param::FcW: return {"mlp.c_fc.weight", true};
    case Param::FcB: return {"mlp.c_fc.bias", false};
    case Param::FcProjW: return {"mlp.c_proj.weight", true};
    case Param::FcProjB: return {"mlp.c_proj.bias", false};
    case Param::LnfW: return {"ln_f.weight", false};
    case Param::LnfB: return {"ln_f.bias", false};
    case Param::Count: break;
  }
  return {"", false};
}

std::string full_name(const std::string &prefix, Param p, bool per_layer, int layer) {
  return per_layer ? fmt::format("{}h.{}.{}", prefix, layer, hf_name(p).name) : prefix + hf_name(p).name;
}

// Shape as Hugging Face stores the tensor: vectors 1-D, Conv1D weights [in, out].
std::vector<int64_t> hf_shape(const ParamShape &s, bool transposed) {
  if (s.cols == 1) return {s.rows};
  return transposed ? std::vector<int64_t>{s.cols, s.rows} : std::vector<int64_t>{s.rows, s.cols};
}

void transpose(const float *in, int64_t rows, int64_t cols, float *out) {  // in [rows, cols] -> out [cols, rows]
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

int heads_from_config_json(const std::string &checkpoint_path) {
  const auto cfg = std::filesystem::path(checkpoint_path).parent_path() / "config.json";
  std::ifstream in(cfg);
  if (!in) return 0;
  try {
    const auto j = nlohmann::json::parse(in);
    if (j.contains("n_head") && j["n_head"].is_number_integer()) return j["n_head"].get<int>();
  } catch (const nlohmann::json::exception &) {
    throw Gpt2Error(fmt::format("'{}' is not valid JSON", cfg.string()));
  }
  return 0;
}

}  // namespace

Gpt2Weights read_hf_safetensors(const std::string &path, int heads_override) {
  const SafetensorsFile file(path);
  std::string prefix;
  if (file.find("transformer.wte.weight"))
    prefix = "transformer.";
  else if (!file.find("wte.weight"))
    throw Gpt2Error(fmt::format("'{}' has no wte.weight (nor transformer.wte.weight): not a GPT-2 checkpoint", path));
  const SafetensorsEntry &wte = *file.find(prefix + "wte.weight");
  const SafetensorsEntry *wpe = file.find(prefix + "wpe.weight");
  if (!wpe) throw Gpt2Error(fmt::format("'{}': tensor '{}wpe.weight' is missing", path, prefix));
  if (wte.shape.size() != 2 || wpe->shape.size() != 2 || wte.shape[1] != wpe->shape[1])
    throw Gpt2Error(fmt::format("'{}': wte and wpe must be 2-D with the same width", path));

  Gpt2Config c;
  c.vocab_size = int(wte.shape[0]);
  c.n_embd = int(wte.shape[1]);
  c.n_ctx = int(wpe->shape[0]);
  while (file.find(fmt::format("{}h.{}.ln_1.weight", prefix, c.n_layer))) ++c.n_layer;
  if (c.n_layer == 0) throw Gpt2Error(fmt::format("'{}': no transformer blocks (h.0.ln_1.weight is missing)", path));
  c.n_head = heads_override;
  if (c.n_head <= 0 && file.metadata().is_object() && file.metadata().contains("n_head")) {
    const auto &v = file.metadata()["n_head"];
    c.n_head = v.is_string() ? std::atoi(v.get<std::string>().c_str()) : 0;
  }
  if (c.n_head <= 0) c.n_head = heads_from_config_json(path);
  if (c.n_head <= 0) c.n_head = c.n_embd % 64 == 0 ? c.n_embd / 64 : 0;
  if (c.n_head <= 0)
    throw Gpt2Error(
        fmt::format("'{}': cannot tell the number of heads (no metadata, no config.json, {} channels "
                    "not a multiple of 64); pass it explicitly",
                    path, c.n_embd));
  c.name = "custom";
  for (const auto &named : named_configs())
    if (named.n_layer == c.n_layer && named.n_head == c.n_head && named.n_embd == c.n_embd &&
        named.vocab_size == c.vocab_size && named.n_ctx == c.n_ctx)
      c.name = named.name;

  validate_config(c);
  // Every parameter takes at least 2 bytes in the file: a header whose shapes need more than the file
  // holds is corrupt, and is caught here before anything is allocated.
  uint64_t data_bytes = 0;
  for (const auto &[name, e] : file.entries()) data_bytes = std::max<uint64_t>(data_bytes, e.end);
  if (uint64_t(parameter_count(c)) * 2 > data_bytes)
    throw Gpt2Error(fmt::format("'{}': {} layers of {} channels need more data than the file's {} bytes", path,
                                c.n_layer, c.n_embd, data_bytes));
  Gpt2Weights w(c);
  std::vector<float> staging;
  for (int i = 0; i < kParamCount; ++i) {
    const Param p = Param(i);
    const ParamShape s = param_shape(c, p);
    const HfName hn = hf_name(p);
    const std::vector<int64_t> shape = hf_shape(s, hn.transposed);
    for (int l = 0; l < (s.per_layer ? c.n_layer : 1); ++l) {
      const std::string name = full_name(prefix, p, s.per_layer, l);
      float *dst = s.per_layer ? w.layer(p, l).data() : w.tensor(p).data();
      if (!hn.transposed || s.cols == 1) {
        file.read_f32(name, shape, dst);
      } else {
        staging.resize(size_t(s.numel()));
        file.read_f32(name, shape, staging.data());
        transpose(staging.data(), s.cols, s.rows, dst);
      }
    }
  }
  if (const SafetensorsEntry *head = file.find("lm_head.weight"); head && head->shape != wte.shape)
    throw Gpt2Error(fmt::format("'{}': lm_head.weight does not have wte's shape, so it cannot be tied to it", path));
  return w;
}

void write_hf_safetensors(const Gpt2Weights &w, const std::string &path, const std::string &dtype) {
  const Gpt2Config &c = w.config();
  std::vector<std::vector<float>> transposed_copies;
  std::vector<SafetensorsTensor> tensors;
  for (int i = 0; i < kParamCount; ++i) {
    const Param p = Param(i);
    const ParamShape s = param_shape(c, p);
    const HfName hn = hf_name(p);
    for (int l = 0; l < (s.per_layer ? c.n_layer : 1); ++l) {
      const float *src = s.per_layer ? w.layer(p, l).data() : w.tensor(p).data();
      if (hn.transposed && s.cols != 1) {
        transposed_copies.emplace_back(size_t(s.numel()));
        transpose(src, s.rows, s.cols, transposed_copies.back().data());
        src = transposed_copies.back().data();
      }
      tensors.push_back({full_name("", p, s.per_layer, l), hf_shape(s, hn.transposed), src});
    }
  }
  write_safetensors(
      path, tensors, dtype,
      {{"format", "pt"}, {"config", c.name}, {"n_head", std::to_string(c.n_head)}, {"written_by", "flashbox"}});
}

}  // namespace flashbox::gpt2
