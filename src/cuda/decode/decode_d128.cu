// Decode kernels for head_dim 128, fp16 and bf16 (split kernel + combine).
#include "cuda/decode/decode_launch.cuh"

FLASHBOX_DECODE_INSTANTIATE(128)
