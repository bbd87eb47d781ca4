// The KV-cache attention implementations. src/api/kvcache_api.cpp is the only caller.
#pragma once
#include "core/kvcache_problem.hpp"

namespace flashbox::detail {

int cpu_kvcache_attention(const KvcacheProblem &p);  // src/cpu/kvcache_attention.cpp

#ifdef FLASHBOX_HAVE_CUDA
int cuda_kvcache_attention(const KvcacheProblem &p);                // src/cuda/decode/decode_api.cu
int cuda_kvcache_num_splits(const KvcacheProblem &p, int &splits);  // the split model, same file
#endif

}  // namespace flashbox::detail
