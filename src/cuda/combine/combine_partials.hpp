// flashbox_attention_combine on device = cuda (FlashAttention-3's flash_attn_combine): merges the
// num_splits partial results of a key-split attention by their log-sum-exp. Design: combine_partials.cu.
#pragma once
#include "flashbox/flashbox.h"

namespace flashbox::cuda {

// One launch on args.stream; FLASHBOX_OK or fail(FLASHBOX_ERR_CUDA) when the launch fails. The
// arguments were validated by src/api/combine_api.cpp (sizes, strides, alignment, no overlap).
int combine_partials(const flashbox_combine_args &args);

}  // namespace flashbox::cuda
