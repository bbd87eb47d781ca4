// Test support: one global attention problem (tests/support/attention_case.hpp, BTHD layout) cut into
// the shards N ranks hold under a layout, and the ranks' outputs put back in global order, so the
// simulated ring's result is judged by the same fp64 reference comparison as a single call.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "flashbox/context_parallel.hpp"

namespace flashbox::test {

// A dense BTHD tensor of `tokens` tokens per batch, `heads` heads, `dim` elements, `es` bytes each.
struct Dense {
  int64_t batch, tokens, heads, dim, es;
  int64_t row_bytes() const { return dim * es; }
  int64_t offset(int64_t b, int64_t t, int64_t h) const { return ((b * tokens + t) * heads + h) * dim * es; }
  int64_t bytes() const { return batch * tokens * heads * dim * es; }
};

// Rank r's shard (S tokens) of a global dense BTHD tensor, or (scatter) the shard written back.
inline void shard_rows(const Dense &global, std::vector<uint8_t> &shard, const uint8_t *src, cp::Layout layout,
                       int world, int rank, int64_t S) {
  const Dense local{global.batch, S, global.heads, global.dim, global.es};
  shard.assign(size_t(local.bytes()), 0);
  for (int64_t b = 0; b < global.batch; ++b)
    for (int64_t t = 0; t < S; ++t) {
      const int64_t g = cp::global_token(layout, world, rank, S, t);
      std::memcpy(shard.data() + local.offset(b, t, 0), src + global.offset(b, g, 0),
                  size_t(global.heads * global.row_bytes()));
    }
}
inline void unshard_rows(const Dense &global, uint8_t *dst, const std::vector<uint8_t> &shard, cp::Layout layout,
                         int world, int rank, int64_t S) {
  const Dense local{global.batch, S, global.heads, global.dim, global.es};
  for (int64_t b = 0; b < global.batch; ++b)
    for (int64_t t = 0; t < S; ++t) {
      const int64_t g = cp::global_token(layout, world, rank, S, t);
      std::memcpy(dst + global.offset(b, g, 0), shard.data() + local.offset(b, t, 0),
                  size_t(global.heads * global.row_bytes()));
    }
}

// LSE [batch, heads, tokens]: the shard's columns, and back.
inline std::vector<float> shard_lse(const std::vector<float> &lse, int64_t batch, int64_t heads, cp::Layout layout,
                                    int world, int rank, int64_t S) {
  std::vector<float> out(size_t(batch * heads * S));
  const int64_t T = int64_t(world) * S;
  for (int64_t bh = 0; bh < batch * heads; ++bh)
    for (int64_t t = 0; t < S; ++t)
      out[size_t(bh * S + t)] = lse[size_t(bh * T + cp::global_token(layout, world, rank, S, t))];
  return out;
}
inline void unshard_lse(std::vector<float> &lse, const std::vector<float> &shard, int64_t batch, int64_t heads,
                        cp::Layout layout, int world, int rank, int64_t S) {
  const int64_t T = int64_t(world) * S;
  for (int64_t bh = 0; bh < batch * heads; ++bh)
    for (int64_t t = 0; t < S; ++t)
      lse[size_t(bh * T + cp::global_token(layout, world, rank, S, t))] = shard[size_t(bh * S + t)];
}

inline void dense_strides(int64_t tokens, int64_t heads, int64_t dim, int64_t *s) {
  s[0] = tokens * heads * dim, s[1] = heads * dim, s[2] = dim;
}

}  // namespace flashbox::test
