// Decode kernels for head_dim 64, fp16 and bf16 (split kernel + combine): 2 of the family's 4 split
// instantiations (docs/decode.md says why there are no more).
#include "cuda/decode/decode_launch.cuh"

FLASHBOX_DECODE_INSTANTIATE(64)
