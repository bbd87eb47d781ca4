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
  return tu;
}

}  // namespace flashbox::jit
