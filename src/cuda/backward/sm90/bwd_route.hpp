// Which Hopper backward instantiation serves a head_dim, the row width of its dQ accumulator, and
// which calls the plan (flash_bwd_sm90.cu) hands to the sm80 family before it looks at the device.
// Host-only, so the route is tested without a device (tests/backward/cuda_backward_test.cpp,
// CudaBackward.HopperRouteChoice).
//
// Every multiple of 8 up to 256 runs on the smallest instantiation at least as wide (32, 64, 96, 128,
// 192, 256): the TMA maps' innermost dimension is the call's head_dim, so the loads fill the columns
// past it with zeros (S and dP unchanged; dV, dK, dQ there come out 0), the dK/dV stores
// (store_rows) and the dQ converts stop at head_dim. No kernel of its own between 32 and 64 or
// between 96 and 128: head dims 40..56 do d64's work and 104..120 d128's. Measured (B4 H16 causal,
// T 1024..16384): 2.4-2.9x the sm80 route, 0.93-0.99 of cuDNN's time at d40, 1.03-1.08 at d112.
// Head dims 8..32 have the d32 kernel (half the padded tensor work of S, dP, dV, dK; 0.92-0.95 of the
// padded route's time at d32, 0.85-0.96 of cuDNN's causal), except deterministic bf16 calls with GQA
// groups > 1 (plan_kernel_d).
#pragma once
#include <cstdint>

#include <iterator>

#include "cuda/backward/sm90/det_walk.hpp"
#include "cuda/forward/sm90/tile_policy.hpp"

namespace flashbox::sm90::bwd {

// The instantiation that runs head_dim (0: none, a head_dim that is not a multiple of 8 in 8..256).
constexpr int kernel_head_dim(int64_t head_dim) {
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return 0;
  if (head_dim <= 32) return 32;
  if (head_dim <= 64) return 64;
  if (head_dim <= 96) return 96;
  if (head_dim <= 128) return 128;
  return head_dim <= 192 ? 192 : 256;
}

// The dQ accumulator's row width (floats) of an instantiation: its head_dim, 128 for 96 and 64 for 32
// (BwdConfig::DQ_LD: whole 64-column chunks, the d128 and d64 layouts, which the prepare and convert
// kernels read). The convert kernels (fixed length and varlen) read rows of this width and write
// head_dim columns of them.
constexpr int accum_d_for(int kernel_d) { return kernel_d == 96 ? 128 : kernel_d == 32 ? 64 : kernel_d; }

// The instantiation a call runs: kernel_head_dim, but deterministic calls that the d64 kernel runs in
// the ascending order (det_walk.hpp: bf16, fixed length, GQA groups > 1) stay on d64 at head dims
// 8..32: the d32 kernel has the descending order only (no ascending instantiation: two more kernels
// in CI), which is slowest with GQA (each CTA walks the group's heads and its shortest-first dispatch
// leaves the long CTAs for the end: det/non-det 0.68 at D128 GQA 32/8 against 0.88-0.98 ascending),
// far more than the d32 kernel saves (0.92-0.95 of the padded time). Without GQA d64 runs the
// descending order too, so there the d32 kernel runs it.
constexpr int plan_kernel_d(int64_t head_dim, bool deterministic, bool bf16, bool varlen, int64_t group) {
  const int kd = kernel_head_dim(head_dim);
  if (kd == 32 && deterministic && uses_qdesc_walk(64, bf16, varlen, group)) return 64;
  return kd;
}

// The DV of the instantiation serving a call whose head_dim_v differs from its head_dim (0: none,
// and 0 where they are equal): the pairs that the forward's sm90::dv_kernel gives a kernel of their
// own (one decision for both passes), when that kernel's D is the call's instantiation kernel_d (so
// deterministic calls at 8..32 moved to 64 do not match). Every pair of that table has a backward
// row (kBwdD192Dv128, launch_main in flash_bwd_sm90.cu); the assertion keeps the tables together.
// (192, 128): the forward's pair, BN = BM = 64 as the d192 kernel (bwd_sm90_traits.cuh, "Tiles").
constexpr int bwd_kernel_head_dim_v(int kernel_d, int64_t head_dim, int64_t head_dim_v) {
  if (head_dim_v == head_dim) return 0;
  const DvKernel *k = dv_kernel(head_dim, head_dim_v);
  return k != nullptr && k->head_dim == kernel_d ? k->head_dim_v : 0;
}
static_assert(std::size(kDvKernels) == 1 && kDvKernels[0].head_dim == 192 && kDvKernels[0].head_dim_v == 128,
              "a pair of sm90::kDvKernels without a backward instantiation (kBwdD192Dv128 is the only one)");

// Why the plan declines a call before it looks at the layout or the device (nullptr: it does not):
// a head_dim no instantiation serves, variable-length batches on the d192 and d256 instantiations
// (no varlen path in their SPLIT_D layout), deterministic mode on them (their dQ adds are unordered
// register adds). Varlen runs on d32, d64, d96 and d128: the same run-time fields, and the varlen dQ
// convert reads rows of accum_d_for(kernel_d) floats.
constexpr const char *route_decline(int kernel_d, bool varlen, bool deterministic) {
  if (kernel_d == 0) return "the sm90 backward takes head_dims that are multiples of 8 in 8..256";
  if (varlen && kernel_d > 128)
    return "the sm90 backward takes variable-length batches only up to head_dim 128 (the d192 and d256 "
           "kernels have no varlen path; the sm80 family takes them)";
  if (deterministic && kernel_d > 128)
    return "the sm90 backward has no deterministic mode for head_dim above 128 (its dQ adds are "
           "unordered; the sm80 family takes it)";
  return nullptr;
}

// The mask families of a call (core/problem.hpp, mask_family_in_use), as the route sees them.
struct MaskRouteCall {
  bool documents = false, prefix = false;  // document_ids_q/k, prefix_lengths: what the kernel takes
  bool block_mask = false, mask_mod = false, chunk = false, seqused = false;  // a mod comes with a block mask
  bool varlen = false, bf16 = true, deterministic = false, transforms = false;  // transforms: softcap or ALiBi
  int64_t head_dim = 128, head_dim_v = 128;
  int64_t group = 1;                      // query heads per kv head
  int64_t q_block = 128, kv_block = 128;  // a block mask's block sizes (block_mask only)
};

// The largest GQA group the block-mask walk encodes (7 bits of head per step: bwd_sm90_tile_order.cuh,
// encode_block_step, kBlockStepMaxGroup).
constexpr int64_t kBlockMaskMaxGroup = 128;

// The head dims the mask-family instantiation (kBwdD128MasksDqLag) serves: 72..128, multiples of 8
// (the d128 layout reads zeros past head_dim, as kernel_head_dim's rows do; the forward's mask
// kernel serves the same 72..128 at d128).
constexpr bool mask_kernel_takes(int64_t head_dim) { return head_dim > 64 && head_dim <= 128 && head_dim % 8 == 0; }

// Why the sm90 backward declines a call that uses the mask families (nullptr: it takes it, on the
// mask-family instantiation). It takes document ids, prefix-LM lengths, block masks and mask mods,
// with or without causal or a window, GQA, a learnable sink, at bf16 head dims 72..128 with
// head_dim_v = head_dim, fixed length, not deterministic. A block mask's walk is a list of (query
// head, query block, full) steps per CTA, which a pre-pass writes from the q_* transposes, or without
// them from kv_* inverted into per-key-block marks (flash_bwd_sm90_mask_walks.cu, block_walk_kernel,
// block_marks_kernel); block sizes must be multiples of 128 (the C API refuses others on CUDA; a
// 128-key CTA lies inside one mask key block, a mask query block is whole 64-row steps), GQA groups
// up to 128 (the step's encoding). A mask mod is routed as the block mask it comes with (the one
// src/api/mask_mod_tiles.hpp built or the caller's): its bit tiles are read in the partial steps. The
// rest goes to the sm80 family, which takes every mask family:
//   attention_chunk, seqused_q/k, variable-length batches: not built in this kernel's walk;
//   fp16 and other head dims: one instantiation (CI's compile time), bf16 d128;
//   softcap and ALiBi: the kernel has the plain path only;
//   deterministic mode: its add order (the semaphores' ranks, bwd_sm90_tile_order.cuh) counts the
//     window's key blocks, not the walk's (nor a block mask's lists).
constexpr const char *mask_route_decline(const MaskRouteCall &c) {
  const bool blocks = c.block_mask || c.mask_mod;
  if (blocks && (c.q_block <= 0 || c.kv_block <= 0 || c.q_block % 128 != 0 || c.kv_block % 128 != 0))
    return "the sm90 backward takes block masks with block sizes that are multiples of 128";
  if (blocks && c.group > kBlockMaskMaxGroup)
    return "the sm90 backward takes block masks with GQA groups up to 128 (the sm80 family takes larger ones)";
  if (c.chunk) return "the sm90 backward has no attention_chunk (the sm80 family takes it)";
  if (c.seqused) return "the sm90 backward has no used lengths (seqused_q/k; the sm80 family takes them)";
  if (c.varlen)
    return "the sm90 backward runs document ids, prefix-LM and block masks on fixed-length batches only (the sm80 "
           "family takes variable-length ones)";
  if (!c.bf16) return "the sm90 backward runs document ids, prefix-LM and block masks in bf16 only";
  if (!mask_kernel_takes(c.head_dim) || c.head_dim_v != c.head_dim)
    return "the sm90 backward runs document ids, prefix-LM and block masks at head dims 72..128 (multiples of 8) "
           "with head_dim_v = head_dim";
  if (c.transforms) return "the sm90 backward has no softcap or ALiBi with document ids, prefix-LM or block masks";
  if (c.deterministic) return "the sm90 backward has no deterministic mode with document ids, prefix-LM or block masks";
  return nullptr;
}

}  // namespace flashbox::sm90::bwd
