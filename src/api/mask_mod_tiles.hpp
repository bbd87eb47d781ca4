// A mask mod on CUDA (flashbox_attention_ext.mask_mod; docs/masks.md, "Mask mods"): before the
// attention kernels run (the sm80 family's, or on Hopper the sm90 mask-family kernels), the mod's own
// NVRTC kernels (src/jit/mod_source.cpp) write, into scratch, one bit tile per partial block-mask
// entry, and without a caller's block mask first the block mask itself (FlexAttention's
// create_block_mask from the mod). attach_mask_mod points the Problem at them
// (block_mask, mod_bits, mod_tile_base, mod_batch, mod_heads); the attention kernels then read the
// bits where they apply the element rule (cuda/common/mask_ext.cuh). Nothing here writes a caller's
// buffer, so a failure (or a plan that declines later) leaves the outputs as they were.
#pragma once
#include "flashbox/flashbox.h"
#ifdef FLASHBOX_HAVE_CUDA
#include "core/problem.hpp"
#include "cuda/common/device_scratch.hpp"

namespace flashbox::detail {

// The scratch the tiles live in: it must outlive the attention launch (its release is stream-ordered).
struct MaskModScratch {
  explicit MaskModScratch(void *stream)
      : lists(static_cast<cudaStream_t>(stream)), tiles(static_cast<cudaStream_t>(stream)) {}
  cuda::DeviceScratch lists, tiles;
};

// `e` passed validation (src/api/mod_api.cpp: a live mask mod, aux tensors as declared, fixed
// length); `p` is the call's problem with the block mask (if any) and seqused added. FLASHBOX_OK or
// fail(...): UNSUPPORTED_IMPL (no CUBIN for the device's arch; block sizes not multiples of 128; a
// grid too large), OUT_OF_MEMORY (scratch), CUDA (a launch or the library load failed).
int attach_mask_mod(Problem &p, const flashbox_attention_ext &e, MaskModScratch &scratch);

}  // namespace flashbox::detail
#endif

namespace flashbox::detail {
// Unloads the CUDA libraries a mod's calls loaded (flashbox_mod_destroy); nothing without CUDA.
void unload_mod_libraries(::flashbox_mod_s &mod);
}  // namespace flashbox::detail
