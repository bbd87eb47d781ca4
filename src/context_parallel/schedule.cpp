// The block schedule of schedule.hpp; tests/context_parallel/schedule_test.cpp checks it pair by
// pair against the global causal mask for every world size up to 8.
#include "context_parallel/schedule.hpp"

namespace flashbox::cp {

int chunks_per_rank(flashbox_cp_layout layout) { return layout == FLASHBOX_CP_ZIGZAG ? 2 : 1; }

int64_t global_chunk(flashbox_cp_layout layout, int world, int rank, int half) {
  if (layout == FLASHBOX_CP_ZIGZAG) return half == 0 ? rank : 2 * int64_t(world) - 1 - rank;
  return rank;
}

int64_t global_token(flashbox_cp_layout layout, int world, int rank, int64_t S, int64_t local) {
  if (world < 1 || rank < 0 || rank >= world || S < 1 || local < 0 || local >= S) return -1;
  if (layout == FLASHBOX_CP_ZIGZAG) {
    if (S % 2 != 0) return -1;
    const int64_t C = S / 2;
    return global_chunk(layout, world, rank, int(local / C)) * C + local % C;
  }
  if (layout == FLASHBOX_CP_CONTIGUOUS) return int64_t(rank) * S + local;
  return -1;
}

std::vector<Block> ring_blocks(flashbox_cp_layout layout, bool causal, int world, int rank, int step, int64_t S) {
  const int src = ((rank - step) % world + world) % world;
  if (!causal) return {{0, S, 0, S, false}};
  if (src == rank) return {{0, S, 0, S, true}};
  if (layout == FLASHBOX_CP_ZIGZAG) {
    const int64_t C = S / 2;
    if (src < rank) return {{0, S, 0, C, false}};
    return {{C, C, 0, S, false}};
  }
  if (src < rank) return {{0, S, 0, S, false}};
  return {};
}

std::vector<Block> all_gather_blocks(flashbox_cp_layout layout, bool causal, int world, int rank, int64_t S) {
  const int64_t T = int64_t(world) * S;
  if (!causal) return {{0, S, 0, T, false}};
  const int n = chunks_per_rank(layout);
  const int64_t C = S / n;
  std::vector<Block> blocks;
  for (int half = 0; half < n; ++half) {
    const int64_t g = global_chunk(layout, world, rank, half);
    blocks.push_back({half * C, C, 0, (g + 1) * C, true});  // keys [0, end of this chunk), bottom-right
  }
  return blocks;
}

}  // namespace flashbox::cp
