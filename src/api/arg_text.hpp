// Numbers and pointers as the text of the C API's error messages, and sizes rounded up to a multiple:
// one definition for the sources of src/api, which compile in shared translation units (the unity
// batches of src/CMakeLists.txt), where a copy in each file's anonymous namespace would clash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace flashbox::detail {

inline std::string str(int64_t v) { return std::to_string(v); }

inline std::string ptr_str(const void *p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace flashbox::detail
