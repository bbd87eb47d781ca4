// SPEC step 1: how big the T x T score matrix is next to the tensors attention reads and writes.
// Naive attention keeps one S = QK^T and one P = softmax(S) per (batch, head), T x T each, in the
// inputs' dtype (as the source's naive PyTorch version does); Q, K, V and O grow linearly in T.
#pragma once
#include "flashbox/flashbox.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace flashbox::report {

struct MemoryConfig {
  int64_t batch = 4;
  int64_t heads = 12;
  int64_t head_dim = 64;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
};

struct MemoryRow {
  int64_t seqlen = 0;
  int64_t s_bytes = 0;     // one S for every (batch, head)
  int64_t p_bytes = 0;     // one P, the same size
  int64_t qkvo_bytes = 0;  // Q + K + V + O
  double s_over_qkvo = 0;  // = T / (4 * head_dim), independent of batch, heads and dtype
};

// Throws std::invalid_argument for sizes <= 0 or byte counts that overflow int64.
MemoryRow memory_row(const MemoryConfig &config, int64_t seqlen);
std::vector<int64_t> default_memory_seqlens();  // 512, 1024, ..., 16384

nlohmann::json to_json(const MemoryConfig &config);
nlohmann::json to_json(const MemoryRow &row);

}  // namespace flashbox::report
