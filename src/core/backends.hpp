// The backend interface: the one list of implementations. src/api/dispatch.cpp (forward) and src/api/backward_api.cpp
// (backward) are the only callers. Every backend receives a problem that src/api has validated
// (sizes, strides, pointers, head_dim, dtype, the device; src/api/validate.hpp) and normalised
// (src/core/problem.hpp), and returns FLASHBOX_OK or detail::fail(code, message). The CUDA flash
// families answer with a plan (src/core/plan.hpp) so that src/api can choose between them.
#pragma once
#include "core/plan.hpp"
#include "core/problem.hpp"

namespace flashbox::detail {

// CPU (src/cpu). Inputs fp32/fp16/bf16, arithmetic in fp32.
int cpu_naive_forward(const Problem &p);
int cpu_blocked_forward(const Problem &p);
int cpu_backward(const GradProblem &g);
int64_t cpu_backward_workspace_size(const GradProblem &g);

#ifdef FLASHBOX_HAVE_CUDA
int cuda_device_count();
int cuda_naive_forward(const Problem &p);             // src/cuda/naive
// Any head dims within core/explicit_limits.hpp, with qv ([batch, seqlen_q, heads_q, head_dim_v] of
// strides qv_stride; null: none): src/cuda/explicit. Not a flash family: src/api calls it directly.
int cuda_explicit_forward(const Problem &p, const void *qv, const int64_t *qv_stride);
PlanResult plan_sm80_forward(const Problem &p);       // src/cuda/forward/sm80
PlanResult plan_sm80_backward(const GradProblem &g);  // src/cuda/backward/sm80
#ifdef FLASHBOX_HAVE_SM90
// size_only: the workspace query, which has no pointers; no tensor maps are built and run is empty.
PlanResult plan_sm90_forward(const Problem &p);                       // src/cuda/forward/sm90
PlanResult plan_sm90_fp8_forward(const Problem &p);                   // src/cuda/forward/sm90 (e4m3 inputs)
PlanResult plan_sm90_backward(const GradProblem &g, bool size_only);  // src/cuda/backward/sm90
#endif
#endif

}  // namespace flashbox::detail
