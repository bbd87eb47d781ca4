// The one list of implementations. src/api/dispatch.cpp is the only caller of these functions.
// Every backend receives arguments that src/api has already validated (sizes, strides, pointers,
// head_dim, dtype, the device) and returns FLASHBOX_OK or detail::fail(code, message).
#pragma once
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// CPU (src/cpu). Inputs fp32/fp16/bf16, arithmetic in fp32.
int cpu_naive_forward(const flashbox_attention_args &a);
int cpu_blocked_forward(const flashbox_attention_args &a);
int cpu_backward(const flashbox_attention_grad_args &g);

#ifdef FLASHBOX_HAVE_CUDA
int cuda_device_count();
int cuda_naive_forward(const flashbox_attention_args &a);        // src/cuda/naive
int cuda_flash_forward_sm80(const flashbox_attention_args &a);   // src/cuda/sm80
bool cuda_flash_sm90_supports(const flashbox_attention_args &a, const char **why_not);  // src/cuda/sm90
int cuda_flash_forward_sm90(const flashbox_attention_args &a);
int cuda_flash_backward(const flashbox_attention_grad_args &g);  // src/cuda/backward
int64_t cuda_backward_workspace_size(const flashbox_attention_grad_args &g);
#endif

}  // namespace flashbox::detail
