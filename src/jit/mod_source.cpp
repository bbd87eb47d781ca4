// The mod's translation unit (see mod_source.hpp). The prelude is fixed text; Aux and the probe are
// generated from the declaration. NVRTC compiles it without any include path, so the prelude uses
// only builtin types and intrinsics (__ldg, inline PTX for fp16).
#include "jit/mod_source.hpp"

#include <cstdint>
#include <string>

namespace flashbox::jit {
namespace {

const char kPrelude[] = R"(// flashbox mod translation unit: prelude
namespace fbx {
typedef signed char int8_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

// 16-bit floats as stored; an aux tensor of them reads as float.
struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };

template <class T> struct Element {
  typedef T value;
  static __device__ __forceinline__ T load(const T *p) { return __ldg(p); }
};
template <> struct Element<bf16> {
  typedef float value;
  static __device__ __forceinline__ float load(const bf16 *p) {
    return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const uint16_t *>(p))) << 16);
  }
};
template <> struct Element<f16> {
  typedef float value;
  static __device__ __forceinline__ float load(const f16 *p) {
    const uint16_t b = __ldg(reinterpret_cast<const uint16_t *>(p));
    float f;
    asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(b));
    return f;
  }
};

// A read-only auxiliary tensor: t(i0, ..., i{Rank-1}) reads element (i0, ...); an index outside
// [0, size) reads as 0, so nothing outside the tensor is ever read.
template <class T, int Rank> struct Tensor {
  const T *data;
  int64_t sizes[Rank];
  int64_t strides[Rank];  // elements
  __device__ __forceinline__ int64_t size(int d) const { return sizes[d]; }
  template <class... I> __device__ __forceinline__ typename Element<T>::value operator()(I... i) const {
    static_assert(sizeof...(I) == Rank, "flashbox: an aux tensor takes as many indices as its rank");
    const int64_t idx[Rank] = {static_cast<int64_t>(i)...};
    int64_t offset = 0;
#pragma unroll
    for (int d = 0; d < Rank; ++d) {
      if (static_cast<uint64_t>(idx[d]) >= static_cast<uint64_t>(sizes[d])) return typename Element<T>::value(0);
      offset += idx[d] * strides[d];
    }
    return Element<T>::load(data + offset);
  }
};

struct Aux;

// The plan of a mask mod's block kernels below; the host's jit::MaskGrid has the same layout (8-byte
// fields only, so no padding: both sides static_assert the size).
struct MaskGrid {
  int64_t batch, heads;  // the mod's tile space (1: evaluated with b = 0 / h = 0 for every one)
  int64_t seqlen_q, seqlen_k, q_block, kv_block, num_q_blocks, num_kv_blocks;
  int64_t bm_batch, bm_heads, max_kv;  // the lists' broadcast and row length
  int64_t all_partial;                 // flashbox_mask_lists: every visited block partial
  const int32_t *kv_num, *kv_idx;      // the lists whose partial entries get bit tiles
  int32_t *out_kv_num, *out_kv_idx, *out_full_num, *out_full_idx;  // flashbox_mask_lists writes them
  uint8_t *kinds;                      // [batch, heads, num_q_blocks, num_kv_blocks]: 0 empty, 1 partial, 2 full
  int64_t *tile_base;                  // [batch * heads * num_q_blocks + 1]
  uint32_t *bits;                      // the tiles, q_block x kv_block bits each
};

// Which of the contract's signatures F has: 1 mask, 2 mask with aux, 3 score, 4 score with aux, 0 none.
template <class F> struct Signature { static constexpr int value = 0; };
template <> struct Signature<bool (*)(int, int, int, int)> { static constexpr int value = 1; };
template <> struct Signature<bool (*)(int, int, int, int, const Aux &)> { static constexpr int value = 2; };
template <> struct Signature<float (*)(float, int, int, int, int)> { static constexpr int value = 3; };
template <> struct Signature<float (*)(float, int, int, int, int, const Aux &)> { static constexpr int value = 4; };

template <auto F> __device__ __forceinline__ bool apply_mask(int b, int h, int q_idx, int kv_idx, const Aux &aux) {
  constexpr int s = Signature<decltype(F)>::value;
  if constexpr (s == 1) return F(b, h, q_idx, kv_idx);
  else if constexpr (s == 2) return F(b, h, q_idx, kv_idx, aux);
  else return false;  // another signature: the probe's static_assert says which are taken
}
template <auto F>
__device__ __forceinline__ float apply_score(float score, int b, int h, int q_idx, int kv_idx, const Aux &aux) {
  constexpr int s = Signature<decltype(F)>::value;
  if constexpr (s == 3) return F(score, b, h, q_idx, kv_idx);
  else if constexpr (s == 4) return F(score, b, h, q_idx, kv_idx, aux);
  else return score;
}
}  // namespace fbx
)";

// The mask mod's block kernels (src/api/mask_mod_tiles.cpp launches them, in this order):
//   flashbox_mask_classify   one CTA per (b, h, q block, kv block) of the tile space: 0 when the mod
//                            is false for every in-range pair, 2 when true for every one, else 1
//                            (FlexAttention's create_block_mask); only without a caller's block mask
//   flashbox_mask_lists      one thread per tile row: the kinds as FlexAttention's lists (ascending)
//   flashbox_mask_tile_base  one CTA: the exclusive prefix sum of the rows' partial counts (clamped as
//                            the attention kernels clamp them), the total last
//   flashbox_mask_bits       one CTA per (tile row, list entry): the entry's bit tile, one 32-key
//                            word per thread and step; keys and rows outside the sequence are 0
// MOD is the caller's function; the kernels are only generated for mask mods.
const char kMaskKernels[] = R"(
namespace fbx {
__device__ __forceinline__ int64_t list_row(const MaskGrid &g, int64_t b, int64_t h, int64_t qb) {
  return ((g.bm_batch == 1 ? 0 : b) * g.bm_heads + (g.bm_heads == 1 ? 0 : h)) * g.num_q_blocks + qb;
}
__device__ __forceinline__ int64_t partial_count(const MaskGrid &g, int64_t lrow) {
  const int64_t cap = g.max_kv < g.num_kv_blocks ? g.max_kv : g.num_kv_blocks;
  const int64_t n = g.kv_num[lrow];
  return n < 0 ? 0 : (n > cap ? cap : n);
}
}  // namespace fbx

extern "C" __global__ void flashbox_mask_classify(fbx::Aux aux, fbx::MaskGrid g) {
  const long long pair = blockIdx.x;
  const long long kb = pair % g.num_kv_blocks, rest = pair / g.num_kv_blocks;
  const long long qb = rest % g.num_q_blocks, bh = rest / g.num_q_blocks;
  const int b = int(bh / g.heads), h = int(bh % g.heads);
  const long long q0 = qb * g.q_block, k0 = kb * g.kv_block;
  const long long rows = (q0 + g.q_block < g.seqlen_q ? q0 + g.q_block : g.seqlen_q) - q0;
  const long long cols = (k0 + g.kv_block < g.seqlen_k ? k0 + g.kv_block : g.seqlen_k) - k0;
  bool any = false, all = true;
  for (long long e = threadIdx.x; e < rows * cols && !(any && !all); e += blockDim.x) {
    const bool v = fbx::apply_mask<&MOD>(b, h, int(q0 + e / cols), int(k0 + e % cols), aux);
    any = any || v, all = all && v;
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  if (threadIdx.x == 0) g.kinds[pair] = any ? (all ? 2 : 1) : 0;
}

extern "C" __global__ void flashbox_mask_lists(fbx::MaskGrid g) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= g.batch * g.heads * g.num_q_blocks) return;
  const fbx::uint8_t *kinds = g.kinds + row * g.num_kv_blocks;
  int partial = 0, full = 0;
  for (int kb = 0; kb < g.num_kv_blocks; ++kb) {
    if (kinds[kb] == 2 && !g.all_partial) g.out_full_idx[row * g.num_kv_blocks + full++] = kb;
    else if (kinds[kb] != 0) g.out_kv_idx[row * g.num_kv_blocks + partial++] = kb;
  }
  g.out_kv_num[row] = partial;
  g.out_full_num[row] = full;
}

// One CTA of 1024 threads: each sums a run of rows, the runs' sums are scanned in shared memory.
extern "C" __global__ void flashbox_mask_tile_base(fbx::MaskGrid g) {
  __shared__ long long sums[1024];
  const long long rows = g.batch * g.heads * g.num_q_blocks;
  const long long run = (rows + 1023) / 1024, r0 = threadIdx.x * run;
  const long long r1 = r0 + run < rows ? r0 + run : rows;
  long long mine = 0;
  for (long long r = r0; r < r1; ++r) {
    const long long qb = r % g.num_q_blocks, bh = r / g.num_q_blocks;
    mine += fbx::partial_count(g, fbx::list_row(g, bh / g.heads, bh % g.heads, qb));
  }
  sums[threadIdx.x] = mine;
  __syncthreads();
  for (int step = 1; step < 1024; step *= 2) {  // inclusive scan (Hillis-Steele)
    const long long add = threadIdx.x >= step ? sums[threadIdx.x - step] : 0;
    __syncthreads();
    sums[threadIdx.x] += add;
    __syncthreads();
  }
  long long at = sums[threadIdx.x] - mine;
  for (long long r = r0; r < r1; ++r) {
    g.tile_base[r] = at;
    const long long qb = r % g.num_q_blocks, bh = r / g.num_q_blocks;
    at += fbx::partial_count(g, fbx::list_row(g, bh / g.heads, bh % g.heads, qb));
  }
  if (threadIdx.x == 1023) g.tile_base[rows] = sums[1023];
}

extern "C" __global__ void flashbox_mask_bits(fbx::Aux aux, fbx::MaskGrid g) {
  const long long cap = g.max_kv < g.num_kv_blocks ? g.max_kv : g.num_kv_blocks;
  const long long e = blockIdx.x % cap, row = blockIdx.x / cap;
  const long long qb = row % g.num_q_blocks, bh = row / g.num_q_blocks;
  const int b = int(bh / g.heads), h = int(bh % g.heads);
  const long long lrow = fbx::list_row(g, b, h, qb);
  if (e >= fbx::partial_count(g, lrow)) return;
  const long long c = g.kv_idx[lrow * g.max_kv + e];
  const long long wpr = g.kv_block / 32, words = g.q_block * wpr;
  fbx::uint32_t *tile = g.bits + (g.tile_base[row] + e) * words;
  for (long long w = threadIdx.x; w < words; w += blockDim.x) {
    const long long i = qb * g.q_block + w / wpr, j0 = c * g.kv_block + (w % wpr) * 32;
    fbx::uint32_t word = 0;
    if (c >= 0 && c < g.num_kv_blocks && i < g.seqlen_q)
      for (int k = 0; k < 32; ++k)
        if (j0 + k < g.seqlen_k && fbx::apply_mask<&MOD>(b, h, int(i), int(j0 + k), aux)) word |= 1u << k;
    tile[w] = word;
  }
}
)";

const char *element_type(flashbox_aux_dtype d) {
  switch (d) {
    case FLASHBOX_AUX_INT32: return "fbx::int32_t";
    case FLASHBOX_AUX_INT64: return "fbx::int64_t";
    case FLASHBOX_AUX_UINT8: return "fbx::uint8_t";
    case FLASHBOX_AUX_FLOAT32: return "float";
    case FLASHBOX_AUX_FLOAT16: return "fbx::f16";
    case FLASHBOX_AUX_BFLOAT16: return "fbx::bf16";
  }
  return "void";  // unreachable: the declaration was validated (src/api/mod_api.cpp)
}

}  // namespace

AuxLayout aux_layout(const ModSpec &spec) {
  AuxLayout l;
  size_t at = 0;
  for (const AuxDecl &a : spec.aux) {
    l.offsets.push_back(at);
    at += 8 * (1 + 2 * size_t(a.rank));
  }
  l.bytes = spec.aux.empty() ? 1 : at;
  return l;
}

std::vector<uint64_t> pack_aux(const ModSpec &spec, const flashbox_aux_tensor *tensors) {
  std::vector<uint64_t> words;
  for (size_t i = 0; i < spec.aux.size(); ++i) {
    const flashbox_aux_tensor &t = tensors[i];
    words.push_back(uint64_t(reinterpret_cast<uintptr_t>(t.data)));
    for (int r = 0; r < spec.aux[i].rank; ++r) words.push_back(uint64_t(t.sizes[r]));
    for (int r = 0; r < spec.aux[i].rank; ++r) words.push_back(uint64_t(t.strides[r]));
  }
  if (words.empty()) words.push_back(0);
  return words;
}

std::string arch_name(int arch) { return "sm_" + std::to_string(arch) + (arch == 90 ? "a" : ""); }

std::vector<std::string> mod_compile_options(int arch) {
  return {"--gpu-architecture=" + arch_name(arch), "--std=c++17", "--use_fast_math",
          "--device-as-default-execution-space", "-DFLASHBOX_MOD=1"};
}

std::string mod_translation_unit(const ModSpec &spec) {
  const bool mask = spec.kind == FLASHBOX_MOD_MASK;
  const std::string &f = spec.function_name;
  std::string tu = kPrelude;
  tu += "struct fbx::Aux {\n";
  for (const AuxDecl &a : spec.aux)
    tu += "  fbx::Tensor<" + std::string(element_type(a.dtype)) + ", " + std::to_string(a.rank) + "> " + std::string(a.name) + ";\n";
  tu += "};\n";
  const AuxLayout layout = aux_layout(spec);
  tu += "static_assert(sizeof(fbx::Aux) == " + std::to_string(layout.bytes) +
        ", \"flashbox: fbx::Aux's size differs from the host's packing (jit::aux_layout)\");\n";
  // Members in declaration order, each 8-byte aligned with a size that is a multiple of 8, and the
  // struct's size their sum: then no padding exists and the offsets are aux_layout's.
  for (size_t i = 0; i < spec.aux.size(); ++i)
    tu += "static_assert(sizeof(fbx::Aux::" + std::string(spec.aux[i].name) + ") == " +
          std::to_string(8 * (1 + 2 * spec.aux[i].rank)) + " && alignof(decltype(fbx::Aux::" + std::string(spec.aux[i].name) +
          ")) == 8, \"flashbox: fbx::Aux's layout differs from the host's packing\");\n";
  tu += mask ? "#define FLASHBOX_MOD_KIND_MASK 1\n" : "#define FLASHBOX_MOD_KIND_SCORE 1\n";
  tu += "#line 1 \"mod.cu\"\n";
  tu += spec.source;
  tu += "\n#line 1 \"flashbox_probe.cu\"\n";
  if (mask)
    tu += "static_assert(fbx::Signature<decltype(&" + f + ")>::value == 1 || fbx::Signature<decltype(&" + f +
          ")>::value == 2,\n  \"flashbox: the mask mod " + f + " must be bool " + f +
          "(int b, int h, int q_idx, int kv_idx) or bool " + f +
          "(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux)\");\n";
  else
    tu += "static_assert(fbx::Signature<decltype(&" + f + ")>::value == 3 || fbx::Signature<decltype(&" + f +
          ")>::value == 4,\n  \"flashbox: the score mod " + f + " must be float " + f +
          "(float score, int b, int h, int q_idx, int kv_idx) or float " + f +
          "(float score, int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux)\");\n";
  tu += "extern \"C\" __global__ void flashbox_mod_probe(fbx::Aux aux, int b, int h, int q_len, int kv_len,\n"
        "                                                const float *scores, float *out) {\n"
        "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i >= (long long)q_len * kv_len) return;\n"
        "  const int q = int(i / kv_len), kv = int(i % kv_len);\n";
  tu += mask ? "  out[i] = fbx::apply_mask<&" + f + ">(b, h, q, kv, aux) ? 1.0f : 0.0f;\n"
             : "  out[i] = fbx::apply_score<&" + f + ">(scores[i], b, h, q, kv, aux);\n";
  tu += "}\n";
  tu += "static_assert(sizeof(fbx::MaskGrid) == " + std::to_string(sizeof(MaskGrid)) +
        ", \"flashbox: fbx::MaskGrid differs from the host's jit::MaskGrid\");\n";
  if (mask) {
    tu += "#line 1 \"flashbox_mask_kernels.cu\"\n#define MOD " + f + "\n";
    tu += kMaskKernels;
    tu += "#undef MOD\n";
  }
  return tu;
}

}  // namespace flashbox::jit
