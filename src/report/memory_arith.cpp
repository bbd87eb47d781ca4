#include "report/memory_arith.hpp"

#include "core/dtype.hpp"

#include <limits>
#include <stdexcept>
#include <string>

namespace flashbox::report {
namespace {

int64_t checked_product(std::initializer_list<int64_t> factors) {
  int64_t result = 1;
  for (int64_t f : factors) {
    if (f <= 0) throw std::invalid_argument("memory: every size must be > 0, got " + std::to_string(f));
    if (result > std::numeric_limits<int64_t>::max() / f)
      throw std::invalid_argument("memory: byte count overflows int64");
    result *= f;
  }
  return result;
}

}  // namespace

MemoryRow memory_row(const MemoryConfig &c, int64_t seqlen) {
  const int64_t elem = cpu::dtype_size(c.dtype);
  MemoryRow row;
  row.seqlen = seqlen;
  row.s_bytes = checked_product({c.batch, c.heads, seqlen, seqlen, elem});
  row.p_bytes = row.s_bytes;
  row.qkvo_bytes = checked_product({4, c.batch, seqlen, c.heads, c.head_dim, elem});
  row.s_over_qkvo = static_cast<double>(row.s_bytes) / static_cast<double>(row.qkvo_bytes);
  return row;
}

std::vector<int64_t> default_memory_seqlens() {
  std::vector<int64_t> t;
  for (int64_t s = 512; s <= 16384; s *= 2) t.push_back(s);
  return t;
}

nlohmann::json to_json(const MemoryConfig &c) {
  return {{"batch", c.batch}, {"heads", c.heads}, {"head_dim", c.head_dim}, {"dtype", cpu::dtype_name(c.dtype)}};
}

nlohmann::json to_json(const MemoryRow &r) {
  return {{"seqlen", r.seqlen},
          {"s_bytes", r.s_bytes},
          {"p_bytes", r.p_bytes},
          {"qkvo_bytes", r.qkvo_bytes},
          {"s_over_qkvo", r.s_over_qkvo}};
}

}  // namespace flashbox::report
