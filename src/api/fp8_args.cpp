// Validation of the fp8 fields of flashbox_attention_ext; the rules are listed in fp8_args.hpp.
#include "api/fp8_args.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "api/arg_text.hpp"
#include "api/ext_validate.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "core/enum_bits.hpp"
#include "core/error.hpp"
#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::detail {
namespace {

using core::enum_bits;

std::string dtype_str(int t) {
  return cpu::dtype_valid(t) || t == FLASHBOX_FLOAT8_E4M3 ? cpu::dtype_name(flashbox_dtype(t)) : str(t);
}

struct Descale {
  const char *name;
  const float *ptr;
  const int64_t *stride;  // batch, kv head
};

void descales(const flashbox_attention_ext &e, Descale (&out)[3]) {
  out[0] = {"q_descale", e.q_descale, e.q_descale_stride};
  out[1] = {"k_descale", e.k_descale, e.k_descale_stride};
  out[2] = {"v_descale", e.v_descale, e.v_descale_stride};
}

#ifdef FLASHBOX_HAVE_CUDA
// Page-locked host memory for the descales' read-back, one buffer per thread, kept between calls and
// grown as needed: a copy into it is queued on the stream without waiting (a copy into pageable memory
// returns only once it is done, so the three descales cost three waits for the stream, not one).
// Null when the allocation fails (the caller then reads into pageable memory).
float *pinned_descale_buffer(size_t floats) {
  struct Pinned {
    float *p = nullptr;
    size_t capacity = 0;
    ~Pinned() {
      if (p) cudaFreeHost(p);  // at thread exit; an unloaded runtime's error is of no use here
    }
  };
  thread_local Pinned buf;
  if (floats <= buf.capacity) return buf.p;
  if (buf.p) cudaFreeHost(buf.p);
  buf.p = nullptr, buf.capacity = 0;
  const size_t want = std::max<size_t>(floats, 1024);
  void *raw = nullptr;
  if (cudaHostAlloc(&raw, want * 4, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  buf.p = static_cast<float *>(raw), buf.capacity = want;
  return buf.p;
}
#endif

}  // namespace

bool is_fp8_call(const flashbox_attention_args &a) { return enum_bits(a.dtype) == FLASHBOX_FLOAT8_E4M3; }

flashbox_dtype ext_out_dtype(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  return is_fp8_call(a) ? e.out_dtype : a.dtype;
}

int validate_fp8_fields(const flashbox_attention_args &a, flashbox_attention_ext &e, Pass pass) {
  const int out = enum_bits(e.out_dtype), dtype = enum_bits(a.dtype);
  Descale d[3];
  descales(e, d);
  if (!is_fp8_call(a)) {
    if (!cpu::dtype_valid(dtype)) return FLASHBOX_OK;  // the plain rules refuse it, naming the dtypes there are
    if (out != 0 && out != dtype)
      return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                  "out_dtype = " + dtype_str(out) + " differs from dtype = " + dtype_str(dtype) +
                      ": only an fp8 call (dtype = FLASHBOX_FLOAT8_E4M3) takes an output dtype of its own "
                      "(pass 0 or the call's dtype)");
    e.out_dtype = FLASHBOX_FLOAT32;  // 0: the same request as out_dtype = dtype
    for (const Descale &x : d) {
      if (x.ptr)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(x.name) + " is set but dtype = " + dtype_str(dtype) +
                                                       " (descales dequantize fp8 e4m3 inputs; pass NULL)");
      if (x.stride[0] != 0 || x.stride[1] != 0)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(x.name) + "_stride = {" + str(x.stride[0]) + ", " +
                                                       str(x.stride[1]) + "} is set but dtype = " + dtype_str(dtype) +
                                                       " has no descales (pass 0, 0)");
    }
    return FLASHBOX_OK;
  }
  if (pass == Pass::backward)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                "dtype = FLASHBOX_FLOAT8_E4M3: no backward takes fp8 inputs (as FlashAttention-3, whose fp8 path "
                "is forward only); run the backward in bf16 or fp16");
  if (out != FLASHBOX_BFLOAT16 && out != FLASHBOX_FLOAT16) {
    const bool known = cpu::dtype_valid(out) || out == FLASHBOX_FLOAT8_E4M3;
    const char *note = out == FLASHBOX_FLOAT32 ? " (0, the default)" : known ? "" : " (not a flashbox_dtype)";
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                "out_dtype = " + dtype_str(out) + note +
                    " with dtype = FLASHBOX_FLOAT8_E4M3: an fp8 call writes o in bf16 or fp16, named by out_dtype");
  }
  if (e.qv)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "qv with dtype = FLASHBOX_FLOAT8_E4M3 is not supported (qv has no descale; pass it in bf16/fp16 "
                "calls)");
  for (const Descale &x : d) {
    if (x.stride[0] < 0 || x.stride[1] < 0)
      return fail(FLASHBOX_ERR_BAD_STRIDE, std::string(x.name) + "_stride = {" + str(x.stride[0]) + ", " +
                                               str(x.stride[1]) + "} must be >= 0 (0 broadcasts)");
    if (!x.ptr && (x.stride[0] != 0 || x.stride[1] != 0))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(x.name) + " is NULL (1.0) but " + x.name + "_stride = {" +
                                                     str(x.stride[0]) + ", " + str(x.stride[1]) +
                                                     "} (pass 0, 0 without a descale)");
  }
  return FLASHBOX_OK;
}

int validate_fp8_memory(const flashbox_attention_args &a, const flashbox_attention_ext &e, const ByteView *outputs,
                        const char *const *output_names, int n_outputs) {
  if (!is_fp8_call(a)) return FLASHBOX_OK;
  Descale d[3];
  descales(e, d);
  // On cuda the values are read back (each the span its strides cover, on the call's stream) and the
  // stream is synchronised once for the three: refusing a bad scale before anything is written, with
  // the call's return code, costs this wait (a check on the device could not report before the call
  // returns, nor keep the outputs unwritten without the same wait). The copies go into one page-locked
  // buffer (pinned_descale_buffer) so that they queue behind each other and the one synchronisation
  // waits for all three.
  int64_t span[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const Descale &x = d[i];
    if (!x.ptr) continue;
    const __int128 last = __int128(a.batch - 1) * x.stride[0] + __int128(a.heads_kv - 1) * x.stride[1];
    if (last >= (__int128(1) << 60))
      return fail(FLASHBOX_ERR_SIZE_OVERFLOW,
                  std::string(x.name) + "_stride = {" + str(x.stride[0]) + ", " + str(x.stride[1]) + "} over batch = " +
                      str(a.batch) + " and heads_kv = " + str(a.heads_kv) + " is not a plausible descale buffer");
    span[i] = int64_t(last + 1);
    if (int rc = check_input_buffer(x.ptr, span[i] * 4, x.name, outputs, output_names, n_outputs)) return rc;
  }
  const float *values[3] = {d[0].ptr, d[1].ptr, d[2].ptr};
#ifdef FLASHBOX_HAVE_CUDA
  std::vector<float> pageable;
  if (enum_bits(a.device) == FLASHBOX_CUDA && (d[0].ptr || d[1].ptr || d[2].ptr)) {
    for (const Descale &x : d)
      if (x.ptr)
        if (int rc = validate_device_pointer(x.ptr, x.name, a.device)) return rc;
    const size_t total = size_t(span[0] + span[1] + span[2]);
    float *host = pinned_descale_buffer(total);
    if (host == nullptr) {
      pageable.resize(total);
      host = pageable.data();
    }
    const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
    size_t at = 0;
    for (int i = 0; i < 3; ++i) {
      if (!d[i].ptr) continue;
      const cudaError_t err = cudaMemcpyAsync(host + at, d[i].ptr, size_t(span[i]) * 4, cudaMemcpyDeviceToHost, stream);
      if (err != cudaSuccess) {
        cudaGetLastError();
        cudaStreamSynchronize(stream);  // the copies queued before it land before the buffer is reused
        cudaGetLastError();
        return fail(FLASHBOX_ERR_CUDA, std::string("reading ") + d[i].name + " from the device: " + cudaGetErrorString(err));
      }
      values[i] = host + at, at += size_t(span[i]);
    }
    const cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return fail(FLASHBOX_ERR_CUDA, std::string("reading the descales from the device: ") + cudaGetErrorString(err));
    }
  }
#endif
  for (int i = 0; i < 3; ++i) {
    const Descale &x = d[i];
    if (!x.ptr) continue;
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t g = 0; g < a.heads_kv; ++g) {
        const float s = values[i][b * x.stride[0] + g * x.stride[1]];
        if (!std::isfinite(s) || s < 0.0f)
          return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                      std::string(x.name) + "[" + str(b) + ", " + str(g) + "] = " + std::to_string(s) + " (batch " +
                          str(b) + ", kv head " + str(g) + ") must be finite and >= 0 (a dequantisation factor)");
      }
  }
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
