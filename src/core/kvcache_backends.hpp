// The KV-cache attention implementations. src/api/kvcache_api.cpp is the only caller.
#pragma once
#include "core/kvcache_problem.hpp"

namespace flashbox::detail {

int cpu_kvcache_attention(const KvcacheProblem &p);  // src/cpu/kvcache_attention.cpp
int cpu_kvcache_append(const KvcacheProblem &p);     // k_new/v_new into the cache only (same file)

#ifdef FLASHBOX_HAVE_CUDA
int cuda_kvcache_attention(const KvcacheProblem &p);                // src/cuda/decode/decode_api.cu
int cuda_kvcache_num_splits(const KvcacheProblem &p, int &splits);  // the split model, same file
int cuda_kvcache_append(const KvcacheProblem &p);                   // k_new/v_new into the cache only
int cuda_kvcache_explicit(const KvcacheProblem &p);  // qv, head_dim_v, attention_chunk: src/cuda/explicit
#endif

}  // namespace flashbox::detail
