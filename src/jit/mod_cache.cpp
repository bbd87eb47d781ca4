// The mod cache's files (layout and rules in mod_cache.hpp).
#include "jit/mod_cache.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/sha256.hpp"

namespace flashbox::jit {
namespace {

constexpr char kMagic[8] = {'F', 'B', 'X', 'M', 'O', 'D', '0', '1'};
constexpr size_t kHeader = 8 + 8 + 32 + 32;

// The key as the 32 bytes it spells (a malformed key gives zeros, which no entry carries as its key
// unless it was written under the same malformed name).
std::array<uint8_t, 32> key_bytes(const std::string &key) {
  std::array<uint8_t, 32> out{};
  auto nibble = [](char c) { return c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0'; };
  for (size_t i = 0; i < 32 && 2 * i + 1 < key.size(); ++i)
    out[i] = uint8_t(nibble(key[2 * i]) << 4 | nibble(key[2 * i + 1]));
  return out;
}

}  // namespace

std::string cache_path(const std::string &dir, const std::string &key) { return dir + "/" + key + ".cubin"; }

bool cache_load(const std::string &dir, const std::string &key, std::vector<char> &image) {
  if (dir.empty()) return false;
  std::ifstream in(cache_path(dir, key), std::ios::binary);
  if (!in) return false;
  const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < kHeader || std::memcmp(file.data(), kMagic, 8) != 0) return false;
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= uint64_t(uint8_t(file[8 + i])) << (8 * i);
  if (size != file.size() - kHeader) return false;
  const auto digest = core::sha256(file.data() + kHeader, size);
  const auto want = key_bytes(key);
  if (std::memcmp(digest.data(), file.data() + 16, 32) != 0 || std::memcmp(want.data(), file.data() + 48, 32) != 0)
    return false;
  image.assign(file.begin() + kHeader, file.end());
  return true;
}

bool cache_store(const std::string &dir, const std::string &key, const std::vector<char> &image) {
  if (dir.empty()) return false;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return false;
  // A name no other writer uses: this process and a per-process counter.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = dir + "/." + key + "." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1)) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    char header[kHeader];
    std::memcpy(header, kMagic, 8);
    for (int i = 0; i < 8; ++i) header[8 + i] = char(uint64_t(image.size()) >> (8 * i));
    const auto digest = core::sha256(image.data(), image.size());
    const auto k = key_bytes(key);
    std::memcpy(header + 16, digest.data(), 32);
    std::memcpy(header + 48, k.data(), 32);
    out.write(header, kHeader);
    out.write(image.data(), std::streamsize(image.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), cache_path(dir, key).c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace flashbox::jit
