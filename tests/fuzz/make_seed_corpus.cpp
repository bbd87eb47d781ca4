// Writes the fuzz targets' seed corpus: small valid files made by flashbox's own writers, and
// copies corrupted by hand in the ways real files go bad (truncated, a wrong length or magic, a
// size field that lies, offsets past the end, bad JSON, a missing byte token ...). Run at build time
// (tests/fuzz/CMakeLists.txt): make_seed_corpus <out dir>; one folder per target under it.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/model/weights.hpp"
#include "gpt2/tokenizer/byte_unicode.hpp"
#include "gpt2/tokens/token_files.hpp"

namespace fs = std::filesystem;
using namespace flashbox::gpt2;
using Bytes = std::string;

namespace {

fs::path g_out;

void put(const std::string &target, const std::string &name, const Bytes &bytes) {
  fs::create_directories(g_out / target);
  std::ofstream(g_out / target / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

Bytes slurp(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put_le32(Bytes &b, size_t at, int32_t v) {
  for (int i = 0; i < 4; ++i) b[at + size_t(i)] = char(uint32_t(v) >> (8 * i));
}

// A model small enough to mutate: 1 layer, 2 heads of 4 channels, 16 tokens, 8 positions.
Gpt2Weights tiny_model() {
  Gpt2Weights w(Gpt2Config{"custom", 1, 2, 8, 16, 8});
  init_gpt2_weights(w, 7);
  return w;
}

void safetensors_seeds(const fs::path &tmp) {
  const Gpt2Weights w = tiny_model();
  for (const char *dtype : {"F32", "F16", "BF16"}) {
    write_hf_safetensors(w, (tmp / "m.safetensors").string(), dtype);
    put("safetensors", std::string("valid_") + dtype, slurp(tmp / "m.safetensors"));
  }
  write_hf_safetensors(w, (tmp / "m.safetensors").string(), "BF16");
  const Bytes valid = slurp(tmp / "m.safetensors");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(valid[size_t(i)]);
  const Bytes header = valid.substr(8, header_len), data = valid.substr(8 + header_len);
  auto with_header = [&](const std::string &h, const Bytes &d) {
    Bytes b(8, '\0');
    for (int i = 0; i < 8; ++i) b[size_t(i)] = char(uint64_t(h.size()) >> (8 * i));
    return b + h + d;
  };
  auto replaced = [&](const std::string &from, const std::string &to) {
    std::string h = header;
    if (const size_t at = h.find(from); at != std::string::npos) h.replace(at, from.size(), to);
    return with_header(h, data);
  };
  put("safetensors", "truncated_data", valid.substr(0, valid.size() - 100));
  put("safetensors", "truncated_header", valid.substr(0, 8 + header_len / 2));
  put("safetensors", "short_length", valid.substr(0, 5));
  Bytes long_len = valid;
  long_len[6] = char(0x7f);
  put("safetensors", "header_length_past_end", long_len);
  put("safetensors", "header_not_json", replaced("{", "["));
  put("safetensors", "dtype_unknown", replaced("\"BF16\"", "\"Q4\""));
  put("safetensors", "dtype_number", replaced("\"BF16\"", "7"));
  put("safetensors", "shape_negative", replaced("\"shape\":[", "\"shape\":[-1,"));
  put("safetensors", "shape_huge", replaced("\"shape\":[", "\"shape\":[1099511627775,1099511627775,"));
  put("safetensors", "offsets_reversed", replaced("\"data_offsets\":[0,", "\"data_offsets\":[99999999,"));
  put("safetensors", "offsets_one", replaced("\"data_offsets\":[", "\"data_offsets\":[1]"));
  put("safetensors", "no_wte", replaced("wte.weight", "wtf.weight"));
  put("safetensors", "metadata_heads", replaced("\"n_head\":\"2\"", "\"n_head\":\"99999999999999999999\""));
  put("safetensors", "metadata_not_object", replaced("\"__metadata__\":{", "\"__metadata__\":[{"));
  put("safetensors", "empty_object", with_header("{}", ""));
}

void llmc_seeds(const fs::path &tmp) {
  const Gpt2Weights w = tiny_model();
  for (bool bf16 : {false, true}) {
    write_llmc_checkpoint(w, (tmp / "m.bin").string(), bf16);
    put("llmc_checkpoint", bf16 ? "valid_bf16" : "valid_fp32", slurp(tmp / "m.bin"));
  }
  write_llmc_checkpoint(w, (tmp / "m.bin").string(), true);
  const Bytes valid = slurp(tmp / "m.bin");
  auto with_field = [&](int index, int32_t v) {
    Bytes b = valid;
    put_le32(b, size_t(index) * 4, v);
    return b;
  };
  put("llmc_checkpoint", "truncated", valid.substr(0, valid.size() - 3));
  put("llmc_checkpoint", "header_only", valid.substr(0, 1024));
  put("llmc_checkpoint", "short_header", valid.substr(0, 100));
  put("llmc_checkpoint", "extra_bytes", valid + Bytes(6, '\0'));
  put("llmc_checkpoint", "bad_magic", with_field(0, 20240327));
  put("llmc_checkpoint", "bad_version", with_field(1, 4));
  put("llmc_checkpoint", "padded_vocab_small", with_field(7, 15));
  put("llmc_checkpoint", "layers_huge", with_field(4, 1 << 30));
  put("llmc_checkpoint", "heads_zero", with_field(5, 0));
  put("llmc_checkpoint", "heads_not_dividing", with_field(5, 3));
  put("llmc_checkpoint", "channels_negative", with_field(6, -8));
}

void token_seeds(const fs::path &tmp) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 2654435761u) % 50257);
  write_token_shard((tmp / "t.bin").string(), tokens);
  const Bytes shard = slurp(tmp / "t.bin");
  put("token_file", "shard", shard);
  Bytes raw;
  for (int32_t t : tokens) raw += Bytes{char(t & 0xff), char(t >> 8)};
  put("token_file", "raw_uint16", raw);
  put("token_file", "raw_odd", raw.substr(0, 7));
  put("token_file", "empty", "");
  put("token_file", "shard_truncated", shard.substr(0, shard.size() - 2));
  Bytes lie = shard;
  put_le32(lie, 8, 1 << 30);
  put("token_file", "shard_count_lies", lie);
  Bytes negative = shard;
  put_le32(negative, 8, -2);
  put("token_file", "shard_count_negative", negative);
  Bytes version = shard;
  put_le32(version, 4, 2);
  put("token_file", "shard_version_2", version);
  put("token_file", "shard_header_only", shard.substr(0, 1024));
}

// A vocabulary of the 256 byte tokens, a few merges and <|endoftext|>, as encoder.json + NUL +
// vocab.bpe (the split fuzz_tokenizer_files uses).
void tokenizer_file_seeds() {
  auto utf8 = [](char32_t cp) {
    Bytes s;
    if (cp < 0x80)
      s += char(cp);
    else
      s += {char(0xc0 | (cp >> 6)), char(0x80 | (cp & 0x3f))};
    return s;
  };
  auto json_string = [&](const Bytes &mapped) {
    Bytes s = "\"";
    for (char ch : mapped) {
      if (ch == '"' || ch == '\\') s += '\\';
      s += ch;
    }
    return s + "\"";
  };
  auto mapped = [&](const Bytes &raw) {
    Bytes m;
    for (unsigned char b : raw) m += utf8(byte_to_unicode()[b]);
    return m;
  };
  const std::vector<std::pair<Bytes, Bytes>> merges = {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"}, {"a", "n"},
                                                       {"e", "r"}, {" ", "a"},  {"o", "n"},   {"in", "g"}};
  std::vector<Bytes> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(Bytes(1, char(b)));
  for (const auto &[l, r] : merges) vocab.push_back(l + r);
  Bytes encoder = "{";
  for (size_t i = 0; i < vocab.size(); ++i) encoder += json_string(mapped(vocab[i])) + ": " + std::to_string(i) + ", ";
  encoder += "\"<|endoftext|>\": " + std::to_string(vocab.size()) + "}";
  Bytes bpe = "#version: 0.2\n";
  for (const auto &[l, r] : merges) bpe += mapped(l) + " " + mapped(r) + "\n";
  const Bytes nul(1, '\0');
  put("tokenizer_files", "valid", encoder + nul + bpe);
  put("tokenizer_files", "valid_crlf", encoder + nul + "#version: 0.2\r\nt h\r\nth e\r\n");
  put("tokenizer_files", "no_merges", encoder + nul + "#version: 0.2\n");
  put("tokenizer_files", "merge_unknown", encoder + nul + "#version: 0.2\nq z\n");
  put("tokenizer_files", "merge_three_parts", encoder + nul + "t h e\n");
  put("tokenizer_files", "encoder_array", "[1, 2]" + nul + bpe);
  put("tokenizer_files", "encoder_truncated", encoder.substr(0, encoder.size() / 2) + nul + bpe);
  Bytes repeated = encoder;
  repeated.replace(repeated.rfind(std::to_string(vocab.size())), std::to_string(vocab.size()).size(), "0");
  put("tokenizer_files", "encoder_id_repeated", repeated + nul + bpe);
  put("tokenizer_files", "encoder_missing_byte", "{\"a\": 0, \"b\": 1}" + nul + "a b\n");
}

void tokenizer_text_seeds() {
  put("tokenizer_encode", "english", "The quick brown fox jumps over the lazy dog. It's 2026-12-01; we'll see.");
  put("tokenizer_encode", "code", "int main(void) {\n\treturn x->y[3] * 2.5e-3;   // done\n}\n");
  put("tokenizer_encode", "spaces", "  a   b\t\t\n\n  \r\n   ");
  put("tokenizer_encode", "unicode",
      "na\xc3\xafve caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 \xd9\xa3\xd9\xa4 ");
  put("tokenizer_encode", "invalid_utf8", "a\xff\xfe\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82 'S'RE'LL");
  put("tokenizer_encode", "contractions", "I'm you're they've he'd she'll it's don't 'T 'Re");
  put("tokenizer_encode", "endoftext", "<|endoftext|> text <|endoftext|>");
}

// Attention API cases in fuzz_attention_api's byte encoding: mode, enums, sizes, causal, scale,
// four layouts (two bytes each), what to break, and for the backward its flag and four layouts.
void attention_seeds() {
  auto bytes = [](std::initializer_list<int> v) {
    Bytes b;
    for (int x : v) b += char(x);
    return b;
  };
  //                               mode  dev dt impl  B  Tq Tk Hkv G  D   causal scale  layouts q k v o       which
  put("attention_api", "fwd_fp32", bytes({0x80, 0, 0, 2, 1, 8, 8, 1, 1, 15, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  put("attention_api", "fwd_bf16_gqa_bhtd",
      bytes({0x80, 0, 2, 1, 0, 4, 6, 1, 1, 31, 0, 140, 3, 0, 3, 0, 4, 0, 3, 0, 0}));
  put("attention_api", "fwd_fp16_padded", bytes({0x80, 0, 1, 0, 1, 5, 3, 2, 0, 7, 1, 0, 5, 2, 6, 3, 5, 1, 6, 4, 0}));
  put("attention_api", "fwd_head_dim_big",
      bytes({0x00, 0, 0, 2, 0, 1, 1, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  put("attention_api", "fwd_raw_strides",
      bytes({0x00, 0, 0, 2, 0, 2, 2, 0, 0, 3, 0, 0, 7, 0, 4, 0, 8, 0, 0xff, 0, 7, 0, 3, 8, 8, 4, 0, 0, 0, 0, 0}));
  put("attention_api", "fwd_alias", bytes({0x90, 0, 0, 2, 0, 3, 3, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  put("attention_api", "fwd_misaligned", bytes({0xa0, 0, 1, 2, 0, 3, 3, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
  put("attention_api", "fwd_null", bytes({0xc0, 0, 0, 2, 0, 3, 3, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3}));
  put("attention_api", "fwd_cuda", bytes({0x80, 15, 2, 3, 0, 3, 3, 0, 0, 63, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  put("attention_api", "fwd_raw_scale",
      bytes({0x88, 0, 0, 2, 0, 3, 3, 0, 0, 3, 0, 0, 0, 0xc0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  put("attention_api", "fwd_raw_sizes",
      bytes({0x84, 0,    0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
             0xff, 0x7f, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0,    0,    0,    0,    0,    0}));
  put("attention_api", "bwd_fp32",
      bytes({0x01, 0, 0, 2, 1, 7, 9, 1, 1, 15, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 3, 0, 5, 1, 0, 0}));
  put("attention_api", "bwd_bf16_naive",
      bytes({0x01, 0, 2, 1, 0, 5, 5, 2, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 2, 0, 0, 0, 0, 3, 0}));
  put("attention_api", "bwd_alias",
      bytes({0x11, 0, 0, 2, 0, 3, 3, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  put("attention_api", "bwd_deterministic_bad",
      bytes({0x01, 0, 0, 2, 0, 3, 3, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seed_corpus <out dir>\n");
    return 2;
  }
  g_out = argv[1];
  const fs::path tmp = g_out / ".scratch";
  fs::create_directories(tmp);
  safetensors_seeds(tmp);
  llmc_seeds(tmp);
  token_seeds(tmp);
  tokenizer_file_seeds();
  tokenizer_text_seeds();
  attention_seeds();
  fs::remove_all(tmp);
  return 0;
}
