#include <fstream>
#include <string>

#include "cpu/scratch_buffer.hpp"

namespace flashbox::cpu {

int64_t available_host_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

}  // namespace flashbox::cpu
