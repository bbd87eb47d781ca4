// The factor that clips gradients of L2 norm `norm` to `clip` (0: no clipping), in double precision:
// one expression for the host (Gpt2Trainer::finish_step's default) and the device (the AdamW kernel,
// which takes the norm from device memory), so that both clip a step by the same float.
#pragma once

#if defined(__CUDACC__)
#define GPT2_HOST_DEVICE __host__ __device__
#else
#define GPT2_HOST_DEVICE
#endif

namespace flashbox::gpt2 {

GPT2_HOST_DEVICE inline float clip_factor(double norm, float clip) {
  return (clip > 0.0f && norm > double(clip)) ? float(double(clip) / norm) : 1.0f;
}

}  // namespace flashbox::gpt2
