// Token files: llm.c / nanoGPT shards (int32[256] header: magic 20240520, version 1, token count; then
// uint16 tokens) and raw uint16 arrays (any file without that magic).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashbox::gpt2 {

inline constexpr int kTokenShardMagic = 20240520;

// Throws Gpt2Error for a missing file, a shard whose header disagrees with its size, a bad version,
// an odd-sized raw file, or an empty one.
std::vector<int32_t> read_token_file(const std::string &path);
// Writes an llm.c shard (header + uint16). Throws Gpt2Error when an id does not fit in uint16.
void write_token_shard(const std::string &path, const std::vector<int32_t> &tokens);

}  // namespace flashbox::gpt2
