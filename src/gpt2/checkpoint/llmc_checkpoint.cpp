// llm.c's checkpoint format (train_gpt2.c / train_gpt2.cu): header int32[256] = {20240326, version,
// maxT, V, L, NH, C, Vp, 0...}; then wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b, qkvw [L, 3C, C],
// qkvb [L, 3C], attprojw [L, C, C], attprojb, ln2w, ln2b, fcw [L, 4C, C], fcb [L, 4C],
// fcprojw [L, C, 4C], fcprojb, lnfw [C], lnfb [C]; fp32 (version 3) or bf16 (version 5).
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/dtype.hpp"
#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/error.hpp"

namespace flashbox::gpt2 {
namespace {

constexpr int kHeaderInts = 256;
constexpr int kVersionFp32 = 3, kVersionBf16 = 5;

int padded_vocab(int v) { return (v + 127) / 128 * 128; }

}  // namespace

Gpt2Weights read_llmc_checkpoint(const std::string &path) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw Gpt2Error(fmt::format("cannot open llm.c checkpoint '{}': {}", path, ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open llm.c checkpoint '{}'", path));
  if (file_size < kHeaderInts * 4)
    throw Gpt2Error(fmt::format("'{}' is truncated: {} bytes, shorter than llm.c's 1024-byte header", path, file_size));
  int32_t h[kHeaderInts];
  in.read(reinterpret_cast<char *>(h), sizeof h);
  if (h[0] != kLlmcModelMagic)
    throw Gpt2Error(
        fmt::format("'{}' is not an llm.c model checkpoint: magic {} (expected {})", path, h[0], kLlmcModelMagic));
  if (h[1] != kVersionFp32 && h[1] != kVersionBf16)
    throw Gpt2Error(fmt::format("'{}': llm.c checkpoint version {} is not supported (3 = fp32, 5 = bf16)", path, h[1]));
  const bool bf16 = h[1] == kVersionBf16;
  Gpt2Config c{"custom", h[4], h[5], h[6], h[3], h[2]};
  const int vp = h[7];
  if (c.vocab_size <= 0 || vp < c.vocab_size)
    throw Gpt2Error(
        fmt::format("'{}': corrupt header: vocabulary {} and padded vocabulary {}", path, c.vocab_size, vp));
  try {
    validate_config(c);
  } catch (const Gpt2Error &e) {
    throw Gpt2Error(fmt::format("'{}': corrupt header: {}", path, e.what()));
  }
  for (const auto &named : named_configs())
    if (named.n_layer == c.n_layer && named.n_head == c.n_head && named.n_embd == c.n_embd &&
        named.vocab_size == c.vocab_size && named.n_ctx == c.n_ctx)
      c.name = named.name;

  // Sizes are checked against the file before anything is allocated, so a corrupt header cannot ask
  // for terabytes.
  const int64_t pad_rows = vp - c.vocab_size;
  const int64_t elem = bf16 ? 2 : 4;
  const uint64_t expected = kHeaderInts * 4 + uint64_t(parameter_count(c) + pad_rows * c.n_embd) * uint64_t(elem);
  if (file_size < expected)
    throw Gpt2Error(fmt::format("'{}' is truncated: {} bytes, the header's shapes need {}", path, file_size, expected));
  if (file_size > expected)
    throw Gpt2Error(fmt::format("'{}' has {} bytes more than the header's shapes account for (corrupt header?)", path,
                                file_size - expected));

  Gpt2Weights w(c);
  std::vector<char> raw;
  auto read_into = [&](float *dst, int64_t n) {
    raw.resize(size_t(n * elem));
    in.read(raw.data(), std::streamsize(raw.size()));
    if (!in) throw Gpt2Error(fmt::format("'{}': short read", path));
    cpu::load_row_as_float(raw.data(), bf16 ? FLASHBOX_BFLOAT16 : FLASHBOX_FLOAT32, 0, n, dst);
  };
  for (int i = 0; i < kParamCount; ++i) {
    const std::span<float> t = w.tensor(Param(i));
    read_into(t.data(), int64_t(t.size()));
    if (Param(i) == Param::Wte && pad_rows > 0) in.seekg(std::streamoff(pad_rows * c.n_embd * elem), std::ios::cur);
  }
  return w;
}

void write_llmc_checkpoint(const Gpt2Weights &w, const std::string &path, bool bf16) {
  const Gpt2Config &c = w.config();
  int32_t h[kHeaderInts] = {};
  h[0] = kLlmcModelMagic;
  h[1] = bf16 ? kVersionBf16 : kVersionFp32;
  h[2] = c.n_ctx;
  h[3] = c.vocab_size;
  h[4] = c.n_layer;
  h[5] = c.n_head;
  h[6] = c.n_embd;
  h[7] = padded_vocab(c.vocab_size);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Gpt2Error(fmt::format("cannot write '{}'", path));
  out.write(reinterpret_cast<const char *>(h), sizeof h);
  const int64_t elem = bf16 ? 2 : 4;
  std::vector<char> raw;
  for (int i = 0; i < kParamCount; ++i) {
    const std::span<const float> t = w.tensor(Param(i));
    raw.resize(t.size() * size_t(elem));
    cpu::store_row_from_float(raw.data(), bf16 ? FLASHBOX_BFLOAT16 : FLASHBOX_FLOAT32, 0, int64_t(t.size()), t.data());
    out.write(raw.data(), std::streamsize(raw.size()));
    if (Param(i) == Param::Wte) {
      raw.assign(size_t((h[7] - c.vocab_size) * int64_t(c.n_embd) * elem), 0);  // zero padding rows
      out.write(raw.data(), std::streamsize(raw.size()));
    }
  }
  out.flush();
  if (!out) throw Gpt2Error(fmt::format("writing '{}' failed (disk full?)", path));
}

Gpt2Weights load_checkpoint(const std::string &path, int heads_override) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open checkpoint '{}'", path));
  int32_t magic = 0;
  in.read(reinterpret_cast<char *>(&magic), sizeof magic);
  const bool looks_llmc = in && magic == kLlmcModelMagic;
  if (looks_llmc || (path.size() >= 4 && path.ends_with(".bin"))) {
    Gpt2Weights w = read_llmc_checkpoint(path);
    if (heads_override > 0 && heads_override != w.config().n_head)
      throw Gpt2Error(fmt::format("'{}' says {} heads; --heads {} disagrees", path, w.config().n_head, heads_override));
    return w;
  }
  return read_hf_safetensors(path, heads_override);
}

}  // namespace flashbox::gpt2
