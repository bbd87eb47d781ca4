// The KV-cache attention implementations. src/api/kvcache_api.cpp is the only caller.
#pragma once
#include "core/kvcache_problem.hpp"
#include "core/plan.hpp"

namespace flashbox::detail {

int cpu_kvcache_attention(const KvcacheProblem &p);  // src/cpu/kvcache_attention.cpp
int cpu_kvcache_append(const KvcacheProblem &p);     // k_new/v_new into the cache only (same file)

#ifdef FLASHBOX_HAVE_CUDA
int cuda_kvcache_attention(const KvcacheProblem &p);                // src/cuda/decode/decode_api.cu
int cuda_kvcache_num_splits(const KvcacheProblem &p, int &splits);  // the split model, same file
int cuda_kvcache_append(const KvcacheProblem &p);                   // k_new/v_new into the cache only
int cuda_kvcache_explicit(const KvcacheProblem &p);  // qv, head_dim_v, attention_chunk: src/cuda/explicit
#endif
#ifdef FLASHBOX_HAVE_SM90
// The Hopper MLA decode kernel (src/cuda/decode/sm90/mla_decode_api.cu) for a call that would run on
// the explicit forward: a plan, or why not (the device, the shape, the options it lacks); splits
// receives the plan's split count.
PlanResult plan_kvcache_mla(const KvcacheProblem &p, int *splits = nullptr);
#endif

}  // namespace flashbox::detail
