#include <cstdio>

#include "cpu/scratch_buffer.hpp"

namespace flashbox::cpu {

// C stdio rather than an ifstream: the library is loaded into Python processes that have imported
// torch, whose libraries can bring a second copy of libstdc++'s locale code; iostream extraction then
// looked up a facet by an id the two copies disagree on and crashed (pytorch/pytorch#109923 is the same
// mechanism). The library's host code uses no iostreams for that reason.
int64_t available_host_memory_bytes() {
  std::FILE* meminfo = std::fopen("/proc/meminfo", "r");
  if (!meminfo) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, meminfo))
    if (std::sscanf(line, "MemAvailable: %lld", &kib) == 1) break;
  std::fclose(meminfo);
  return kib < 0 ? -1 : static_cast<int64_t>(kib) * 1024;
}

}  // namespace flashbox::cpu
