#include "gpt2/tokens/token_files.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "gpt2/error.hpp"

namespace flashbox::gpt2 {
namespace {
constexpr int kHeaderInts = 256;
constexpr int kShardVersion = 1;
}  // namespace

std::vector<int32_t> read_token_file(const std::string &path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw Gpt2Error(fmt::format("cannot open token file '{}': {}", path, ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open token file '{}'", path));
  uint64_t offset = 0, count = size / 2;
  if (size >= kHeaderInts * 4) {
    int32_t h[kHeaderInts];
    in.read(reinterpret_cast<char *>(h), sizeof h);
    if (h[0] == kTokenShardMagic) {
      if (h[1] != kShardVersion)
        throw Gpt2Error(fmt::format("'{}': token shard version {} is not supported (1)", path, h[1]));
      const uint64_t expected = kHeaderInts * 4 + uint64_t(uint32_t(h[2])) * 2;
      if (h[2] < 0 || expected != size)
        throw Gpt2Error(fmt::format("'{}': the shard header says {} tokens ({} bytes) but the file has {} bytes{}",
                                    path, h[2], expected, size, size < expected ? " (truncated)" : ""));
      offset = kHeaderInts * 4;
      count = uint64_t(h[2]);
    }
  }
  if (offset == 0 && size % 2 != 0)
    throw Gpt2Error(fmt::format("'{}' is neither a token shard (magic {}) nor a uint16 array (odd size {})", path,
                                kTokenShardMagic, size));
  if (count == 0) throw Gpt2Error(fmt::format("'{}' holds no tokens", path));
  std::vector<uint16_t> raw(count);
  in.seekg(std::streamoff(offset));
  in.read(reinterpret_cast<char *>(raw.data()), std::streamsize(count * 2));
  if (!in) throw Gpt2Error(fmt::format("'{}': short read", path));
  return {raw.begin(), raw.end()};
}

void write_token_shard(const std::string &path, const std::vector<int32_t> &tokens) {
  int32_t h[kHeaderInts] = {};
  h[0] = kTokenShardMagic;
  h[1] = kShardVersion;
  h[2] = int32_t(tokens.size());
  std::vector<uint16_t> raw(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 0xffff) throw Gpt2Error(fmt::format("token {} does not fit in uint16", tokens[i]));
    raw[i] = uint16_t(tokens[i]);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(h), sizeof h);
  out.write(reinterpret_cast<const char *>(raw.data()), std::streamsize(raw.size() * 2));
  if (!out) throw Gpt2Error(fmt::format("cannot write '{}'", path));
}

}  // namespace flashbox::gpt2
