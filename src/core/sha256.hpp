// SHA-256 (FIPS 180-4), self-contained: the key of the mod compiler's disk cache (src/jit) and the
// checksum of each entry. Not for secrets (no constant-time care is needed for a cache key), so a
// plain implementation rather than a dependency on a crypto library.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flashbox::core {

class Sha256 {
 public:
  Sha256();
  void update(const void *data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // A length-prefixed field (8 bytes little-endian, then the bytes), so that a sequence of fields
  // hashes unambiguously ("ab" + "c" differs from "a" + "bc").
  void field(std::string_view s);
  std::array<uint8_t, 32> digest();  // ends the hash; the object is spent afterwards

 private:
  void block(const uint8_t *p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

std::array<uint8_t, 32> sha256(const void *data, size_t bytes);
std::string hex(const std::array<uint8_t, 32> &digest);

}  // namespace flashbox::core
