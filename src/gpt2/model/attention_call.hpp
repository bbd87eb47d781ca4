// The one place GPT-2 calls attention: flashbox_attention_forward on strided views into the fused
// qkv activation [B*T, 3C] (q, k and v are column slices of it, so no copy is made), writing
// [B*T, C]. Used by the CPU and the CUDA forward alike.
#pragma once
#include "flashbox/flashbox.h"

namespace flashbox::gpt2 {

flashbox_attention_args qkv_attention_args(flashbox_device device, flashbox_dtype dtype, flashbox_impl impl,
                                           const void *qkv, void *out, int batch, int seqlen, int heads, int channels);
// Throws Gpt2Error carrying flashbox_last_error() when the call fails.
void call_attention(const flashbox_attention_args &args);

}  // namespace flashbox::gpt2
