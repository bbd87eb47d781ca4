// attach_mask_mod (see mask_mod_tiles.hpp): the mod's CUBIN for the device as a CUDA library (loaded
// once per handle and arch), then its block kernels in stream order:
//   no caller's block mask: flashbox_mask_classify over every (b, h, q block, kv block) of the tile
//     space, flashbox_mask_lists into FlexAttention's lists (128 x 128 blocks, max_kv_blocks =
//     num_kv_blocks), which become the call's block mask;
//   flashbox_mask_tile_base: where each tile row's bit tiles start (packed: only partial entries
//     take memory); the total is read back (one stream synchronisation) to size the tiles;
//   flashbox_mask_bits: the tiles.
#include "api/mask_mod_tiles.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "api/arg_text.hpp"
#include "core/error.hpp"
#include "jit/compiled_mod.hpp"
#include "jit/mod_source.hpp"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>

#include "api/family_choice.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/mask_ext_plan.hpp"
#endif

namespace flashbox::detail {

#ifdef FLASHBOX_HAVE_CUDA
namespace {

// The CUBIN that runs on compute capability `cc`: the one built for it, else one of the same major
// at or below it (sm_80 machine code runs on 8.6 and 8.9); sm_90a only on 9.0.
const jit::Cubin *cubin_for(const jit::CompiledMod &m, int cc) {
  const int want = cc / 10 == 9 ? 90 : cc;
  const jit::Cubin *best = nullptr;
  for (const jit::Cubin &c : m.cubins) {
    if (c.arch == want) return &c;
    if (c.arch != 90 && c.arch / 10 == cc / 10 && c.arch <= cc && (!best || c.arch > best->arch)) best = &c;
  }
  return best;
}

int load_library(flashbox_mod_s &m, const jit::Cubin &c, cudaLibrary_t &lib) {
  std::lock_guard<std::mutex> lock(m.libraries_mutex);
  for (const auto &[arch, handle] : m.libraries)
    if (arch == c.arch) {
      lib = static_cast<cudaLibrary_t>(handle);
      return FLASHBOX_OK;
    }
  FLASHBOX_CUDA_TRY(cudaLibraryLoadData(&lib, c.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  m.libraries.emplace_back(c.arch, static_cast<void *>(lib));
  return FLASHBOX_OK;
}

int launch(cudaLibrary_t lib, const char *name, int64_t ctas, int threads, void **args, cudaStream_t stream) {
  if (ctas == 0) return FLASHBOX_OK;
  if (ctas > INT32_MAX)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, std::string("mask_mod: ") + name + " would need " + str(ctas) +
                                                   " CTAs (more than 2^31 - 1); use fewer batch entries or heads "
                                                   "per call, or mask_mod_broadcast");
  cudaKernel_t k = nullptr;
  FLASHBOX_CUDA_TRY(cudaLibraryGetKernel(&k, lib, name));
  FLASHBOX_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void *>(k), dim3(unsigned(ctas)), dim3(unsigned(threads)),
                                     args, 0, stream));
  return FLASHBOX_OK;
}

int allocate(cuda::DeviceScratch &s, int64_t bytes, const char *what) {
  const cudaError_t e = s.allocate(std::max<int64_t>(bytes, 4));
  if (e == cudaErrorMemoryAllocation)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "mask_mod: cannot allocate " + str(bytes) + " bytes of scratch (" +
                                                what + ")");
  FLASHBOX_CUDA_TRY(e);
  return FLASHBOX_OK;
}

// Rules of the call that a full block would skip (flashbox_block_mask: a full block admits every
// element): with any of them, a block built from the mod is listed partial, never full.
bool other_element_rules(const Problem &p) {
  const core::ScoreMods &m = p.mods;
  return m.window_left >= 0 || m.window_right >= 0 || m.chunk > 0 || m.doc_q || m.prefix;
}

}  // namespace

int attach_mask_mod(Problem &p, const flashbox_attention_ext &e, MaskModScratch &scratch) {
  flashbox_mod_s &m = *e.mask_mod;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  int cc = 0;
  if (int rc = current_compute_capability(cc)) return rc;
  const jit::Cubin *cubin = cubin_for(m.mod, cc);
  if (!cubin) {
    std::string archs;
    for (const jit::Cubin &c : m.mod.cubins) archs += (archs.empty() ? "" : ", ") + jit::arch_name(c.arch);
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "mask_mod = " + m.mod.spec.function_name + " was compiled for " +
                                                   archs + ", not for this device (compute capability " +
                                                   str(cc / 10) + "." + str(cc % 10) +
                                                   "): create it with arch = 0 on this device");
  }
  const bool own_blocks = p.block_mask.kv_num_blocks == nullptr;
  const int64_t q_block = own_blocks ? cuda::kMaskTile : p.block_mask.q_block_size;
  const int64_t kv_block = own_blocks ? cuda::kMaskTile : p.block_mask.kv_block_size;
  if (q_block % cuda::kMaskTile != 0 || kv_block % cuda::kMaskTile != 0)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "mask_mod with a block mask of " + str(q_block) + " x " + str(kv_block) +
                    " blocks: the kernels take q_block_size and kv_block_size multiples of " +
                    str(cuda::kMaskTile));
  cudaLibrary_t lib = nullptr;
  if (int rc = load_library(m, *cubin, lib)) return rc;

  jit::MaskGrid g;
  const bool same_b = e.mask_mod_broadcast & FLASHBOX_MOD_SAME_BATCH;
  const bool same_h = e.mask_mod_broadcast & FLASHBOX_MOD_SAME_HEADS;
  g.seqlen_q = p.seqlen_q, g.seqlen_k = p.seqlen_k;
  g.q_block = q_block, g.kv_block = kv_block;
  g.num_q_blocks = (p.seqlen_q + q_block - 1) / q_block;
  g.num_kv_blocks = (p.seqlen_k + kv_block - 1) / kv_block;
  // The tile space: one tile row per (b, h) unless the mod and the lists both broadcast.
  g.batch = same_b && (own_blocks || p.block_mask.batch == 1) ? 1 : p.batch;
  g.heads = same_h && (own_blocks || p.block_mask.heads == 1) ? 1 : p.heads_q;
  const int64_t rows = g.batch * g.heads * g.num_q_blocks;
  std::vector<uint64_t> aux = jit::pack_aux(m.mod.spec, e.mask_mod_aux);

  // One scratch for the lists (kinds and lists only without a caller's block mask) and tile_base.
  const int64_t nk = g.num_kv_blocks;
  const int64_t kinds_at = 0, kv_num_at = own_blocks ? round_up(rows * nk, 256) : 0;
  const int64_t kv_idx_at = kv_num_at + (own_blocks ? round_up(rows * 4, 256) : 0);
  const int64_t full_num_at = kv_idx_at + (own_blocks ? round_up(rows * nk * 4, 256) : 0);
  const int64_t full_idx_at = full_num_at + (own_blocks ? round_up(rows * 4, 256) : 0);
  const int64_t base_at = full_idx_at + (own_blocks ? round_up(rows * nk * 4, 256) : 0);
  if (int rc = allocate(scratch.lists, base_at + (rows + 1) * 8, "block lists")) return rc;
  char *lists = scratch.lists.as<char>();
  g.tile_base = reinterpret_cast<int64_t *>(lists + base_at);
  void *grid_args[] = {&g};
  void *aux_grid_args[] = {aux.data(), &g};

  if (own_blocks) {
    g.kinds = reinterpret_cast<uint8_t *>(lists + kinds_at);
    g.out_kv_num = reinterpret_cast<int32_t *>(lists + kv_num_at);
    g.out_kv_idx = reinterpret_cast<int32_t *>(lists + kv_idx_at);
    g.out_full_num = reinterpret_cast<int32_t *>(lists + full_num_at);
    g.out_full_idx = reinterpret_cast<int32_t *>(lists + full_idx_at);
    g.all_partial = other_element_rules(p) ? 1 : 0;
    if (int rc = launch(lib, "flashbox_mask_classify", rows * nk, 256, aux_grid_args, stream)) return rc;
    if (int rc = launch(lib, "flashbox_mask_lists", (rows + 255) / 256, 256, grid_args, stream)) return rc;
    flashbox_block_mask bm{};
    bm.struct_size = int32_t(sizeof bm);
    bm.batch = g.batch, bm.heads = g.heads;
    bm.q_block_size = q_block, bm.kv_block_size = kv_block;
    bm.max_kv_blocks = nk, bm.max_q_blocks = g.num_q_blocks;
    bm.kv_num_blocks = g.out_kv_num, bm.kv_indices = g.out_kv_idx;
    bm.full_kv_num_blocks = g.out_full_num, bm.full_kv_indices = g.out_full_idx;
    p.block_mask = bm;
  }
  const flashbox_block_mask &bm = p.block_mask;
  g.bm_batch = bm.batch, g.bm_heads = bm.heads, g.max_kv = bm.max_kv_blocks;
  g.kv_num = bm.kv_num_blocks, g.kv_idx = bm.kv_indices;
  if (int rc = launch(lib, "flashbox_mask_tile_base", 1, 1024, grid_args, stream)) return rc;
  int64_t tiles = 0;
  FLASHBOX_CUDA_TRY(cudaMemcpyAsync(&tiles, g.tile_base + rows, sizeof tiles, cudaMemcpyDeviceToHost, stream));
  FLASHBOX_CUDA_TRY(cudaStreamSynchronize(stream));
  const int64_t tile_bytes = q_block * kv_block / 8;
  if (tiles < 0 || tiles > rows * nk)
    return fail(FLASHBOX_ERR_INTERNAL, "mask_mod: the bit tiles' count " + str(tiles) + " is outside [0, " +
                                           str(rows * nk) + "]");
  if (int rc = allocate(scratch.tiles, tiles * tile_bytes, "bit tiles of the partial blocks")) return rc;
  g.bits = scratch.tiles.as<uint32_t>();
  const int64_t cap = std::min(g.max_kv, nk);
  if (int rc = launch(lib, "flashbox_mask_bits", rows * cap, 256, aux_grid_args, stream)) return rc;
  p.mod_bits = g.bits, p.mod_tile_base = g.tile_base;
  p.mod_batch = g.batch, p.mod_heads = g.heads;
  return FLASHBOX_OK;
}

void unload_mod_libraries(flashbox_mod_s &mod) {
  std::lock_guard<std::mutex> lock(mod.libraries_mutex);
  for (const auto &lib : mod.libraries)
    if (cudaLibraryUnload(static_cast<cudaLibrary_t>(lib.second)) != cudaSuccess) (void)cudaGetLastError();
  mod.libraries.clear();
}
#else
void unload_mod_libraries(flashbox_mod_s &) {}
#endif

}  // namespace flashbox::detail
