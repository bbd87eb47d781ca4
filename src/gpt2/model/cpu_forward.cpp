#include "gpt2/model/cpu_forward.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "gpt2/error.hpp"
#include "gpt2/model/attention_call.hpp"

#ifdef FLASHBOX_HAVE_BLAS
#include <cblas.h>
#endif

namespace flashbox::gpt2 {

// y = x W^T + b. BLAS for matrix products; a few rows (the KV-cache decoder's one token per step) take
// the OpenMP loop instead: a row times W is bound by reading W either way, and OpenBLAS's own thread
// pool spins between calls beside OpenMP's, which makes many small calls several times slower.
constexpr int64_t kBlasMinRows = 16;

void linear_forward(const float *x, const float *W, const float *b, int64_t M, int64_t K, int64_t N, float *y) {
#ifdef FLASHBOX_HAVE_BLAS
  if (M >= kBlasMinRows) {
    if (b) {
#pragma omp parallel for schedule(static)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) y[m * N + n] = b[n];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(M), blasint(N), blasint(K), 1.0f, x, blasint(K), W,
                blasint(K), b ? 1.0f : 0.0f, y, blasint(N));
    return;
  }
#endif
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      // Eight running sums (the compiler's vector lanes, without reassociating a single sum), then
      // added in a fixed order: the same result on every run and thread count.
      const float *xr = x + m * K, *wr = W + n * K;
      float lanes[8] = {};
      int64_t k = 0;
      for (; k + 8 <= K; k += 8)
        for (int u = 0; u < 8; ++u) lanes[u] += xr[k + u] * wr[k + u];
      float acc = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (; k < K; ++k) acc += xr[k] * wr[k];
      y[m * N + n] = acc + (b ? b[n] : 0.0f);
    }
}

void layernorm(const float *x, const float *w, const float *b, int64_t M, int64_t C, float *y, float *mean_out,
               float *rstd_out) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float *xr = x + m * C;
    float mean = 0.0f, var = 0.0f;
    for (int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= float(C);
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const float rstd = 1.0f / std::sqrt(var / float(C) + 1e-5f);  // GPT-2's epsilon
    for (int64_t c = 0; c < C; ++c) y[m * C + c] = (xr[c] - mean) * rstd * w[c] + b[c];
    if (mean_out) mean_out[m] = mean;
    if (rstd_out) rstd_out[m] = rstd;
  }
}

namespace {

void gelu_tanh(float *x, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
}

void add_inplace(float *x, const float *y, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

void embed_tokens(const Gpt2Weights &w, const int32_t *tokens, int64_t rows, int64_t window, int64_t first_position,
                  float *x) {
  const Gpt2Config &c = w.config();
  const int64_t C = c.n_embd;
  const float *wte = w.tensor(Param::Wte).data(), *wpe = w.tensor(Param::Wpe).data();
  for (int64_t m = 0; m < rows; ++m) {
    const int32_t tok = tokens[m];
    if (tok < 0 || tok >= c.vocab_size)
      throw Gpt2Error(fmt::format("token id {} is outside the model's vocabulary of {}", tok, c.vocab_size));
    const int64_t t = first_position + m % window;
    for (int64_t i = 0; i < C; ++i) x[m * C + i] = wte[tok * C + i] + wpe[t * C + i];
  }
}

void block_forward(const Gpt2Weights &w, int l, int64_t M, float *x, float *ln, float *qkv, float *att, float *fc,
                   const std::function<void(const float *qkv, float *att)> &attend) {
  const int64_t C = w.config().n_embd;
  auto p = [&](Param q) { return w.layer(q, l).data(); };
  layernorm(x, p(Param::Ln1W), p(Param::Ln1B), M, C, ln);
  linear_forward(ln, p(Param::QkvW), p(Param::QkvB), M, C, 3 * C, qkv);
  attend(qkv, att);
  linear_forward(att, p(Param::AttnProjW), p(Param::AttnProjB), M, C, C, ln);
  add_inplace(x, ln, M * C);
  layernorm(x, p(Param::Ln2W), p(Param::Ln2B), M, C, ln);
  linear_forward(ln, p(Param::FcW), p(Param::FcB), M, C, 4 * C, fc);
  gelu_tanh(fc, M * 4 * C);
  linear_forward(fc, p(Param::FcProjW), p(Param::FcProjB), M, 4 * C, C, ln);
  add_inplace(x, ln, M * C);
}

void CpuGpt2::trunk(const int32_t *tokens, int B, int T, flashbox_impl impl) {
  const Gpt2Config &c = w_.config();
  const int64_t C = c.n_embd, M = int64_t(B) * T;
  if (T <= 0 || B <= 0 || T > c.n_ctx)
    throw Gpt2Error(fmt::format("window of {} tokens does not fit the model's context of {}", T, c.n_ctx));
  x_.resize(size_t(M * C));
  ln_.resize(size_t(M * C));
  qkv_.resize(size_t(M * 3 * C));
  att_.resize(size_t(M * C));
  fc_.resize(size_t(M * 4 * C));

  embed_tokens(w_, tokens, M, T, 0, x_.data());
  const auto attend = [&](const float *qkv, float *att) {
    call_attention(qkv_attention_args(FLASHBOX_CPU, FLASHBOX_FLOAT32, impl, qkv, att, B, T, c.n_head, c.n_embd));
  };
  for (int l = 0; l < c.n_layer; ++l)
    block_forward(w_, l, M, x_.data(), ln_.data(), qkv_.data(), att_.data(), fc_.data(), attend);
  layernorm(x_.data(), w_.tensor(Param::LnfW).data(), w_.tensor(Param::LnfB).data(), M, C, ln_.data());
}

std::vector<float> CpuGpt2::logits(const int32_t *tokens, int T, flashbox_impl impl) {
  trunk(tokens, 1, T, impl);
  const Gpt2Config &c = w_.config();
  std::vector<float> out(size_t(T) * size_t(c.vocab_size));
  linear_forward(ln_.data(), w_.tensor(Param::Wte).data(), nullptr, T, c.n_embd, c.vocab_size, out.data());
  return out;
}

double CpuGpt2::loss_sum(const int32_t *tokens, int B, int T, flashbox_impl impl) {
  trunk(tokens, B, T, impl);
  const Gpt2Config &c = w_.config();
  const int64_t C = c.n_embd, V = c.vocab_size, M = int64_t(B) * T;
  // The LM head in row chunks keeps the fp32 logits small (chunk x V) however many windows there are.
  constexpr int64_t kChunk = 64;
  logits_.resize(size_t(kChunk * V));
  double total = 0.0;
  for (int64_t m0 = 0; m0 < M; m0 += kChunk) {
    const int64_t rows = std::min(kChunk, M - m0);
    linear_forward(ln_.data() + m0 * C, w_.tensor(Param::Wte).data(), nullptr, rows, C, V, logits_.data());
    double chunk_total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : chunk_total)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t m = m0 + r;
      if (m % T == T - 1) continue;  // the last position of a window has no target inside it
      const float *row = logits_.data() + r * V;
      float mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, row[v]);
      // exp in fp32 (the arguments are <= 0, so no overflow), summed in fp64.
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += double(std::exp(row[v] - mx));
      chunk_total += double(mx) + std::log(sum) - double(row[tokens[m + 1]]);
    }
    total += chunk_total;
  }
  return total;
}

}  // namespace flashbox::gpt2
