// fp64 reference for KV-cache attention, on a cache already gathered into dense per-batch-entry arrays
// (the tests gather paged or indexed caches themselves, appends included). Independent of
// core/kvcache_rules.hpp: the visibility and score rules are written out again here.
#pragma once
#include <cstdint>
#include <vector>

namespace flashbox::cpu {

struct KvcacheReferenceInput {
  int64_t batch = 1, seqlen_q = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  int64_t max_keys = 0;               // dim 1 of k and v
  std::vector<double> q;              // [batch, seqlen_q, heads_q, head_dim]
  std::vector<double> k, v;           // [batch, max_keys, heads_kv, head_dim], key j at row j
  std::vector<int64_t> total, start;  // per entry: keys [start, total) exist (total = cache_seqlens + seqlen_new)
  double scale = 0;                   // resolved softmax scale
  bool causal = false, has_window = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;  // [heads_q] (alibi_batch_stride 0) or rows of alibi_batch_stride, or empty
  int64_t alibi_batch_stride = 0;
  std::vector<double> learnable_sink;  // [heads_q], or empty: one more exp(sink) in each row's denominator
  int64_t head_dim_v = 0;              // V's and O's head dim (0: head_dim); v is [.., heads_kv, head_dim_v]
  std::vector<double> qv;              // [batch, seqlen_q, heads_q, head_dim_v], or empty: score += qv . v
  int64_t attention_chunk = 0;         // > 0: a row sees only the keys of its chunk (positions from `start`)
};

struct KvcacheReferenceOutput {
  std::vector<double> o;    // [batch, seqlen_q, heads_q, head_dim_v]
  std::vector<double> lse;  // [batch, heads_q, seqlen_q]; -inf (the sink) for a row that sees no key (its o is 0)
};

KvcacheReferenceOutput kvcache_reference_fp64(const KvcacheReferenceInput &in);

}  // namespace flashbox::cpu
