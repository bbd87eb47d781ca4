// The CUDA runs of a normalised problem, shared by the plain entry points (dispatch.cpp,
// backward_api.cpp) and the extension's (ext_api.cpp): the impl and kernel family are chosen here,
// from p.impl and p.tuning, so every entry point chooses the same way. The problem must have passed
// validation; a family that lacks something the problem asks (core/problem.hpp, extension_in_use)
// declines, and the call fails with its reason if no family takes it.
#pragma once
#ifdef FLASHBOX_HAVE_CUDA
#include "core/problem.hpp"

namespace flashbox::detail {

int cuda_forward(const Problem &p);       // src/api/dispatch.cpp
// dtype fp8 e4m3 (p.out_dtype, descales): the sm90 fp8 forward, the one CUDA implementation that
// takes e4m3 inputs; refused with its reason (FLASHBOX_ERR_UNSUPPORTED_IMPL) where it declines.
int cuda_fp8_forward(const Problem &p);   // src/api/dispatch.cpp
int cuda_backward(const GradProblem &g);  // src/api/backward_api.cpp
// p.head_dim_v != p.head_dim: runs the call on the pair's own kernel (true, rc its result) when one
// exists and takes it (src/api/dispatch.cpp), else false and nothing ran (the caller splits V).
bool cuda_forward_native_head_dim_v(const Problem &p, int &rc);
// The same for a backward (g.fwd.head_dim_v != g.fwd.head_dim): true where the pair's own sm90
// backward ran (rc its result), else false and nothing ran (the caller splits V, O and dO).
bool cuda_backward_native_head_dim_v(const GradProblem &g, int &rc);

}  // namespace flashbox::detail
#endif
