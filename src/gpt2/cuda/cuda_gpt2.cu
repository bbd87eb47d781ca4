// CudaGpt2: weights uploaded once as bf16 (LayerNorm parameters and the biases of the two residual
// projections in fp32, which is the type of what they are added to), activations for `batch`
// windows, and the forward pass per batch:
//   x = wte[tok] + wpe                                         (fp32 residual stream)
//   per layer: ln = LN1(x); qkv = ln Wqkv^T + b; att = attention(qkv); x += att Wproj^T + b
//              ln = LN2(x); fc = gelu(ln Wfc^T + b); x += fc Wfcproj^T + b
//   ln = LNf(x); per chunk of rows: logits = ln wte^T (fp32); loss = logsumexp - logit[target]
#include "gpt2/cuda/cuda_gpt2.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/dtype.hpp"
#include "gpt2/cuda/cuda_check.hpp"
#include "gpt2/cuda/device_buffer.hpp"
#include "gpt2/cuda/gpt2_kernels.cuh"
#include "gpt2/cuda/lt_matmul.hpp"
#include "gpt2/model/attention_call.hpp"

namespace flashbox::gpt2 {
namespace {

DeviceBuffer upload_bf16(const float *src, int64_t n, int64_t padded_n) {
  std::vector<uint16_t> host(size_t(padded_n), 0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = cpu::float_to_bf16(src[i]);
  DeviceBuffer d(size_t(padded_n) * 2);
  GPT2_CUDA(cudaMemcpy(d.as<void>(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

DeviceBuffer upload_f32(std::span<const float> src) {
  DeviceBuffer d(src.size() * 4);
  GPT2_CUDA(cudaMemcpy(d.as<void>(), src.data(), src.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

constexpr int64_t kLogitRows = 4096;  // rows of fp32 logits alive at once (~824 MB at V = 50304)

}  // namespace

struct CudaGpt2::State {
  Gpt2Config c;
  int batch = 0, T = 0;
  int64_t Vp = 0, chunk_rows = 0;
  DeviceBuffer param[kParamCount];
  LtMatmul lt{LtAlgoChoice::kHeuristic};  // cuBLASLt's first pick per shape
  DeviceBuffer tokens, losses, x, ln, qkv, att, fc, logits;
  int64_t windows = 0;

  void forward_batch(int64_t first_window, int nb, flashbox_impl impl, bool keep_logits_only);
  const float *f32(Param p, int l) const { return param[int(p)].as<float>() + int64_t(l) * param_shape(c, p).numel(); }
  const __nv_bfloat16 *bf(Param p, int l) const {
    return param[int(p)].as<__nv_bfloat16>() + int64_t(l) * param_shape(c, p).numel();
  }
};

CudaGpt2::CudaGpt2(const Gpt2Weights &w, int batch, int seqlen) : s_(std::make_unique<State>()) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw Gpt2Error("no CUDA device is present");
  }
  State &s = *s_;
  s.c = w.config();
  s.batch = batch;
  s.T = seqlen;
  const int64_t C = s.c.n_embd;
  if (C % 8 != 0) throw Gpt2Error("the CUDA forward needs n_embd to be a multiple of 8");
  if (batch <= 0 || seqlen <= 1 || seqlen > s.c.n_ctx) throw Gpt2Error("CUDA forward: bad batch or window size");
  // wte doubles as the LM head: pad its rows to a multiple of 128 (zeros) so the logits' rows stay
  // 16-byte aligned and the product tiles evenly; the padded logits are never read.
  s.Vp = (s.c.vocab_size + 127) / 128 * 128;
  for (int i = 0; i < kParamCount; ++i) {
    const Param p = Param(i);
    const auto t = w.tensor(p);
    const bool keep_f32 = param_shape(s.c, p).cols == 1 && p != Param::QkvB && p != Param::FcB;
    if (keep_f32)
      s.param[i] = upload_f32(t);
    else
      s.param[i] = upload_bf16(t.data(), int64_t(t.size()), p == Param::Wte ? s.Vp * C : int64_t(t.size()));
  }
  const int64_t M = int64_t(batch) * seqlen;
  s.chunk_rows = std::max<int64_t>(seqlen, kLogitRows / seqlen * seqlen);
  s.x = DeviceBuffer(size_t(M * C) * 4);
  s.ln = DeviceBuffer(size_t(M * C) * 2);
  s.qkv = DeviceBuffer(size_t(M * 3 * C) * 2);
  s.att = DeviceBuffer(size_t(M * C) * 2);
  s.fc = DeviceBuffer(size_t(M * 4 * C) * 2);
  s.logits = DeviceBuffer(size_t(s.chunk_rows * s.Vp) * 4);
}

CudaGpt2::~CudaGpt2() = default;

void CudaGpt2::set_tokens(const std::vector<int32_t> &tokens, int64_t windows) {
  State &s = *s_;
  const int64_t n = windows * s.T;
  if (windows <= 0 || int64_t(tokens.size()) < n) throw Gpt2Error("CUDA forward: fewer tokens than windows x seqlen");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= s.c.vocab_size)
      throw Gpt2Error("token id " + std::to_string(tokens[size_t(i)]) + " is outside the vocabulary");
  s.tokens = DeviceBuffer(size_t(n) * 4);
  s.losses = DeviceBuffer(size_t(n) * 4);
  GPT2_CUDA(cudaMemcpy(s.tokens.as<void>(), tokens.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
  s.windows = windows;
}

void CudaGpt2::State::forward_batch(int64_t first_window, int nb, flashbox_impl impl, bool first_chunk_logits_only) {
  const int64_t C = c.n_embd, M = int64_t(nb) * T, row0 = first_window * T;
  cudaStream_t stream = nullptr;  // the legacy default stream orders our kernels, cuBLASLt and the API
  const int32_t *tok = tokens.as<int32_t>() + row0;
  launch_embedding(tok, bf(Param::Wte, 0), bf(Param::Wpe, 0), x.as<float>(), M, T, int(C), stream);
  for (int l = 0; l < c.n_layer; ++l) {
    launch_layernorm(x.as<float>(), f32(Param::Ln1W, l), f32(Param::Ln1B, l), ln.as<__nv_bfloat16>(), M, int(C),
                     stream);
    lt.forward(ln.as<__nv_bfloat16>(), bf(Param::QkvW, l), qkv.as<void>(), CUDA_R_16BF, M, 3 * C, C, bf(Param::QkvB, l),
               nullptr);
    call_attention(qkv_attention_args(FLASHBOX_CUDA, FLASHBOX_BFLOAT16, impl, qkv.as<void>(), att.as<void>(), nb, T,
                                      c.n_head, c.n_embd));
    lt.forward(att.as<__nv_bfloat16>(), bf(Param::AttnProjW, l), x.as<void>(), CUDA_R_32F, M, C, C,
               f32(Param::AttnProjB, l), x.as<void>());
    launch_layernorm(x.as<float>(), f32(Param::Ln2W, l), f32(Param::Ln2B, l), ln.as<__nv_bfloat16>(), M, int(C),
                     stream);
    lt.forward(ln.as<__nv_bfloat16>(), bf(Param::FcW, l), fc.as<void>(), CUDA_R_16BF, M, 4 * C, C, bf(Param::FcB, l),
               nullptr);
    launch_gelu(fc.as<__nv_bfloat16>(), M * 4 * C, stream);
    lt.forward(fc.as<__nv_bfloat16>(), bf(Param::FcProjW, l), x.as<void>(), CUDA_R_32F, M, C, 4 * C,
               f32(Param::FcProjB, l), x.as<void>());
  }
  launch_layernorm(x.as<float>(), f32(Param::LnfW, 0), f32(Param::LnfB, 0), ln.as<__nv_bfloat16>(), M, int(C), stream);
  for (int64_t r0 = 0; r0 < M; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, M - r0);
    lt.forward(ln.as<__nv_bfloat16>() + r0 * C, bf(Param::Wte, 0), logits.as<void>(), CUDA_R_32F, rows, Vp, C, nullptr,
               nullptr);
    if (first_chunk_logits_only) return;
    launch_cross_entropy(logits.as<float>(), Vp, c.vocab_size, tokens.as<int32_t>(), row0 + r0, rows, T,
                         losses.as<float>(), stream);
  }
  GPT2_CUDA(cudaGetLastError());
}

double CudaGpt2::loss_sum(flashbox_impl impl, const std::function<void(int64_t, int64_t)> &progress,
                          int64_t max_windows) {
  State &s = *s_;
  if (s.windows == 0) throw Gpt2Error("CUDA forward: set_tokens was not called");
  const int64_t windows = max_windows > 0 ? std::min(max_windows, s.windows) : s.windows;
  for (int64_t b = 0; b < windows; b += s.batch) {
    const int nb = int(std::min<int64_t>(s.batch, windows - b));
    s.forward_batch(b, nb, impl, false);
    if (progress) {
      GPT2_CUDA(cudaDeviceSynchronize());
      progress(b + nb, windows);
    }
  }
  std::vector<float> host(size_t(windows * s.T));
  GPT2_CUDA(cudaMemcpy(host.data(), s.losses.as<void>(), host.size() * 4, cudaMemcpyDeviceToHost));
  double sum = 0.0;
  for (float v : host) sum += double(v);
  return sum;
}

std::vector<float> CudaGpt2::first_window_logits(flashbox_impl impl) {
  State &s = *s_;
  if (s.windows == 0) throw Gpt2Error("CUDA forward: set_tokens was not called");
  s.forward_batch(0, 1, impl, true);
  std::vector<float> host(size_t(s.T) * size_t(s.c.vocab_size));
  GPT2_CUDA(cudaMemcpy2D(host.data(), size_t(s.c.vocab_size) * 4, s.logits.as<void>(), size_t(s.Vp) * 4,
                         size_t(s.c.vocab_size) * 4, size_t(s.T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace flashbox::gpt2
