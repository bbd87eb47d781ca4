// GPT-2 training on the CPU, everything fp32: the same forward as CpuGpt2 keeping what the backward
// needs, the backward of every layer written out, AdamW. Small configs only in practice (CI trains
// the tiny config for a few steps); it is also the fp32 side of the gradient check against PyTorch.
// Attention goes through the public C API (forward with lse, then flashbox_attention_backward).
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "gpt2/error.hpp"
#include "gpt2/model/attention_call.hpp"
#include "gpt2/model/cpu_forward.hpp"
#include "gpt2/train/trainer.hpp"

#ifdef FLASHBOX_HAVE_BLAS
#include <cblas.h>
#endif

namespace flashbox::gpt2 {

bool decays(Param p) {
  return p == Param::Wte || p == Param::Wpe || p == Param::QkvW || p == Param::AttnProjW || p == Param::FcW ||
         p == Param::FcProjW;
}

namespace {

using Vec = std::vector<float>;

// dX[M, K] (+)= dY[M, N] W[N, K]
void linear_input_grad(const float *dY, const float *W, int64_t M, int64_t N, int64_t K, float *dX) {
#ifdef FLASHBOX_HAVE_BLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(M), blasint(K), blasint(N), 1.0f, dY, blasint(N), W,
              blasint(K), 0.0f, dX, blasint(K));
#else
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    float *out = dX + m * K;
    std::fill(out, out + K, 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      const float g = dY[m * N + n];
      if (g == 0.0f) continue;
      const float *w = W + n * K;
#pragma omp simd
      for (int64_t k = 0; k < K; ++k) out[k] += g * w[k];
    }
  }
#endif
}

// dW[N, K] += dY[M, N]^T X[M, K]; db[N] += column sums of dY (when db is set)
void linear_weight_grad(const float *dY, const float *X, int64_t M, int64_t N, int64_t K, float *dW, float *db) {
#ifdef FLASHBOX_HAVE_BLAS
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasint(N), blasint(K), blasint(M), 1.0f, dY, blasint(N), X,
              blasint(K), 1.0f, dW, blasint(K));
#else
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float *out = dW + n * K;
    for (int64_t m = 0; m < M; ++m) {
      const float g = dY[m * N + n];
      if (g == 0.0f) continue;
      const float *x = X + m * K;
#pragma omp simd
      for (int64_t k = 0; k < K; ++k) out[k] += g * x[k];
    }
  }
#endif
  if (db) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t m = 0; m < M; ++m) acc += dY[m * N + n];
      db[n] += acc;
    }
  }
}

// dx += LN input gradient; dw, db += parameter gradients.
void layernorm_bwd(const float *dy, const float *x, const float *mean, const float *rstd, const float *w, int64_t M,
                   int64_t C, float *dx, float *dw, float *db) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float *g = dy + m * C, *xr = x + m * C;
    float a = 0.0f, b = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      a += g[c] * w[c];
      b += g[c] * w[c] * (xr[c] - mean[m]) * rstd[m];
    }
    a /= float(C);
    b /= float(C);
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (xr[c] - mean[m]) * rstd[m];
      dx[m * C + c] += rstd[m] * (g[c] * w[c] - a - xhat * b);
    }
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) {
      dw[c] += dy[m * C + c] * (x[m * C + c] - mean[m]) * rstd[m];
      db[c] += dy[m * C + c];
    }
}

constexpr float kGeluS = 0.7978845608028654f;

float gelu(float v) { return 0.5f * v * (1.0f + std::tanh(kGeluS * (v + 0.044715f * v * v * v))); }
float gelu_grad(float v) {
  const float t = std::tanh(kGeluS * (v + 0.044715f * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluS * (1.0f + 3.0f * 0.044715f * v * v);
}

struct Layer {
  Vec x, xm, ln1, m1, r1, qkv, att, lse, ln2, m2, r2, h, g;
};

class CpuTrainer final : public Gpt2Trainer {
 public:
  CpuTrainer(const Gpt2Weights &init, const TrainerShape &s)
      : c_(init.config()), s_(s), p_(init), g_(c_), m_(c_), v_(c_) {
    if (s.batch <= 0 || s.seqlen <= 1 || s.seqlen > c_.n_ctx)
      throw Gpt2Error(fmt::format("CPU trainer: batch {} x seqlen {} does not fit", s.batch, s.seqlen));
    if (s.attention == FLASHBOX_FLASH) s_.attention = FLASHBOX_BLOCKED;  // the CPU's fast path
    const int64_t M = int64_t(s.batch) * s.seqlen, C = c_.n_embd;
    layers_.resize(size_t(c_.n_layer));
    for (auto &a : layers_) {
      for (Vec *v : {&a.x, &a.xm, &a.ln1, &a.att, &a.ln2}) v->resize(size_t(M * C));
      for (Vec *v : {&a.m1, &a.r1, &a.m2, &a.r2}) v->resize(size_t(M));
      a.qkv.resize(size_t(M * 3 * C));
      a.lse.resize(size_t(int64_t(s.batch) * c_.n_head * s.seqlen));
      a.h.resize(size_t(M * 4 * C));
      a.g.resize(size_t(M * 4 * C));
    }
    xf_.resize(size_t(M * C));
    lnf_.resize(size_t(M * C));
    mf_.resize(size_t(M));
    rf_.resize(size_t(M));
  }

  void forward_backward(const int32_t *in, const int32_t *tg, float scale) override {
    loss_sum_ += run(in, tg, true, scale);
    ++micro_;
  }
  double mean_loss() override { return micro_ ? loss_sum_ / double(micro_) : 0.0; }
  double eval_loss(const int32_t *in, const int32_t *tg) override { return run(in, tg, false, 0.0f); }
  void zero_grad() override {
    std::fill(g_.data(), g_.data() + g_.size(), 0.0f);
    loss_sum_ = 0.0;
    micro_ = 0;
  }
  double grad_norm() override {
    double ss = 0.0;
    for (int64_t i = 0; i < g_.size(); ++i) ss += double(g_.data()[i]) * g_.data()[i];
    return std::sqrt(ss);
  }
  void adam_step(const AdamW &o, float lr, float mult, int64_t t) override {
    const float b1 = 1.0f - std::pow(o.beta1, float(t)), b2 = 1.0f - std::pow(o.beta2, float(t));
    for (int i = 0; i < kParamCount; ++i) {
      const float wd = decays(Param(i)) ? o.weight_decay : 0.0f;
      auto p = p_.tensor(Param(i)), g = g_.tensor(Param(i)), m = m_.tensor(Param(i)), v = v_.tensor(Param(i));
#pragma omp parallel for schedule(static)
      for (size_t k = 0; k < p.size(); ++k) {
        const float gk = g[k] * mult;
        m[k] = o.beta1 * m[k] + (1.0f - o.beta1) * gk;
        v[k] = o.beta2 * v[k] + (1.0f - o.beta2) * gk * gk;
        p[k] -= lr * ((m[k] / b1) / (std::sqrt(v[k] / b2) + o.eps) + wd * p[k]);
      }
    }
  }
  void get_params(Gpt2Weights &out) override { out = p_; }
  void get_grads(Gpt2Weights &out) override { out = g_; }
  void get_moments(Gpt2Weights &m, Gpt2Weights &v) override {
    m = m_;
    v = v_;
  }
  void set_moments(const Gpt2Weights &m, const Gpt2Weights &v) override {
    m_ = m;
    v_ = v;
  }
  const char *device_name() const override { return "cpu"; }

 private:
  double run(const int32_t *in, const int32_t *tg, bool grad, float scale);

  Gpt2Config c_;
  TrainerShape s_;
  Gpt2Weights p_, g_, m_, v_;
  std::vector<Layer> layers_;
  double loss_sum_ = 0.0;
  int64_t micro_ = 0;
  Vec xf_, lnf_, mf_, rf_, logits_, dx_, dln_, dres_, dfc_, datt_, dq_, dk_, dv_, dqkv_, tmp_;
};

double CpuTrainer::run(const int32_t *in, const int32_t *tg, bool grad, float scale) {
  const int B = s_.batch, T = s_.seqlen, L = c_.n_layer;
  const int64_t C = c_.n_embd, V = c_.vocab_size, M = int64_t(B) * T;
  for (int64_t i = 0; i < M; ++i)
    if (in[i] < 0 || in[i] >= V || tg[i] < 0 || tg[i] >= V)
      throw Gpt2Error(fmt::format("token id {} at position {} is outside the vocabulary", std::min(in[i], tg[i]), i));
  auto P = [&](Param q, int l = 0) { return p_.layer(q, l).data(); };
  auto G = [&](Param q, int l = 0) { return g_.layer(q, l).data(); };
  const float *wte = p_.tensor(Param::Wte).data(), *wpe = p_.tensor(Param::Wpe).data();
  float *x0 = layers_[0].x.data();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < C; ++i) x0[m * C + i] = wte[in[m] * C + i] + wpe[(m % T) * C + i];
  tmp_.resize(size_t(M * C));
  for (int l = 0; l < L; ++l) {
    Layer &a = layers_[size_t(l)];
    float *xn = l + 1 < L ? layers_[size_t(l) + 1].x.data() : xf_.data();
    layernorm(a.x.data(), P(Param::Ln1W, l), P(Param::Ln1B, l), M, C, a.ln1.data(), a.m1.data(), a.r1.data());
    linear_forward(a.ln1.data(), P(Param::QkvW, l), P(Param::QkvB, l), M, C, 3 * C, a.qkv.data());
    flashbox_attention_args args = qkv_attention_args(FLASHBOX_CPU, FLASHBOX_FLOAT32, s_.attention, a.qkv.data(),
                                                      a.att.data(), B, T, c_.n_head, int(C));
    args.lse = a.lse.data();
    call_attention(args);
    linear_forward(a.att.data(), P(Param::AttnProjW, l), P(Param::AttnProjB, l), M, C, C, tmp_.data());
    for (int64_t i = 0; i < M * C; ++i) a.xm[size_t(i)] = a.x[size_t(i)] + tmp_[size_t(i)];
    layernorm(a.xm.data(), P(Param::Ln2W, l), P(Param::Ln2B, l), M, C, a.ln2.data(), a.m2.data(), a.r2.data());
    linear_forward(a.ln2.data(), P(Param::FcW, l), P(Param::FcB, l), M, C, 4 * C, a.h.data());
    for (int64_t i = 0; i < M * 4 * C; ++i) a.g[size_t(i)] = gelu(a.h[size_t(i)]);
    linear_forward(a.g.data(), P(Param::FcProjW, l), P(Param::FcProjB, l), M, 4 * C, C, tmp_.data());
    for (int64_t i = 0; i < M * C; ++i) xn[i] = a.xm[size_t(i)] + tmp_[size_t(i)];
  }
  layernorm(xf_.data(), P(Param::LnfW), P(Param::LnfB), M, C, lnf_.data(), mf_.data(), rf_.data());

  // LM head in chunks of rows; the chunk's logits become its gradient in place.
  constexpr int64_t kChunk = 64;
  logits_.resize(size_t(kChunk * V));
  if (grad) dln_.assign(size_t(M * C), 0.0f);
  double total = 0.0;
  for (int64_t r0 = 0; r0 < M; r0 += kChunk) {
    const int64_t R = std::min(kChunk, M - r0);
    linear_forward(lnf_.data() + r0 * C, wte, nullptr, R, C, V, logits_.data());
    double chunk_total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : chunk_total)
    for (int64_t r = 0; r < R; ++r) {
      float *row = logits_.data() + r * V;
      float mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += double(std::exp(row[v] - mx));
      const int32_t t = tg[r0 + r];
      chunk_total += double(mx) + std::log(sum) - double(row[t]);
      if (grad) {
        const float k = scale / float(M), inv = float(1.0 / sum);
        for (int64_t v = 0; v < V; ++v) row[v] = (std::exp(row[v] - mx) * inv - (v == t ? 1.0f : 0.0f)) * k;
      }
    }
    total += chunk_total;
    if (!grad) continue;
    linear_input_grad(logits_.data(), wte, R, V, C, dln_.data() + r0 * C);
    linear_weight_grad(logits_.data(), lnf_.data() + r0 * C, R, V, C, G(Param::Wte), nullptr);
  }
  if (!grad) return total / double(M);

  dx_.assign(size_t(M * C), 0.0f);
  layernorm_bwd(dln_.data(), xf_.data(), mf_.data(), rf_.data(), P(Param::LnfW), M, C, dx_.data(), G(Param::LnfW),
                G(Param::LnfB));
  dfc_.resize(size_t(M * 4 * C));
  datt_.resize(size_t(M * C));
  dq_.resize(size_t(M * C));
  dk_.resize(size_t(M * C));
  dv_.resize(size_t(M * C));
  dqkv_.resize(size_t(M * 3 * C));
  for (int l = L - 1; l >= 0; --l) {
    Layer &a = layers_[size_t(l)];
    linear_input_grad(dx_.data(), P(Param::FcProjW, l), M, C, 4 * C, dfc_.data());
    linear_weight_grad(dx_.data(), a.g.data(), M, C, 4 * C, G(Param::FcProjW, l), G(Param::FcProjB, l));
    for (int64_t i = 0; i < M * 4 * C; ++i) dfc_[size_t(i)] *= gelu_grad(a.h[size_t(i)]);
    linear_input_grad(dfc_.data(), P(Param::FcW, l), M, 4 * C, C, dln_.data());
    linear_weight_grad(dfc_.data(), a.ln2.data(), M, 4 * C, C, G(Param::FcW, l), G(Param::FcB, l));
    layernorm_bwd(dln_.data(), a.xm.data(), a.m2.data(), a.r2.data(), P(Param::Ln2W, l), M, C, dx_.data(),
                  G(Param::Ln2W, l), G(Param::Ln2B, l));
    linear_input_grad(dx_.data(), P(Param::AttnProjW, l), M, C, C, datt_.data());
    linear_weight_grad(dx_.data(), a.att.data(), M, C, C, G(Param::AttnProjW, l), G(Param::AttnProjB, l));
    flashbox_attention_grad_args g{};
    g.fwd = qkv_attention_args(FLASHBOX_CPU, FLASHBOX_FLOAT32, FLASHBOX_AUTO, a.qkv.data(), a.att.data(), B, T,
                               c_.n_head, int(C));
    g.fwd.lse = a.lse.data();
    g.dout = datt_.data();
    g.dq = dq_.data();
    g.dk = dk_.data();
    g.dv = dv_.data();
    for (int64_t *st : {g.dout_stride, g.dq_stride, g.dk_stride, g.dv_stride}) {
      st[0] = int64_t(T) * C;
      st[1] = C;
      st[2] = c_.head_dim();
    }
    g.deterministic = 1;
    if (const int rc = flashbox_attention_backward(&g); rc != FLASHBOX_OK)
      throw Gpt2Error(fmt::format("attention backward failed (code {}): {}", rc, flashbox_last_error()));
    for (int64_t m = 0; m < M; ++m) {
      std::memcpy(&dqkv_[size_t(m * 3 * C)], &dq_[size_t(m * C)], size_t(C) * 4);
      std::memcpy(&dqkv_[size_t(m * 3 * C + C)], &dk_[size_t(m * C)], size_t(C) * 4);
      std::memcpy(&dqkv_[size_t(m * 3 * C + 2 * C)], &dv_[size_t(m * C)], size_t(C) * 4);
    }
    linear_input_grad(dqkv_.data(), P(Param::QkvW, l), M, 3 * C, C, dln_.data());
    linear_weight_grad(dqkv_.data(), a.ln1.data(), M, 3 * C, C, G(Param::QkvW, l), G(Param::QkvB, l));
    layernorm_bwd(dln_.data(), a.x.data(), a.m1.data(), a.r1.data(), P(Param::Ln1W, l), M, C, dx_.data(),
                  G(Param::Ln1W, l), G(Param::Ln1B, l));
  }
  float *dwte = G(Param::Wte), *dwpe = G(Param::Wpe);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < C; ++i) {
      dwte[in[m] * C + i] += dx_[size_t(m * C + i)];
      dwpe[(m % T) * C + i] += dx_[size_t(m * C + i)];
    }
  return total / double(M);
}

}  // namespace

std::unique_ptr<Gpt2Trainer> make_cpu_trainer(const Gpt2Weights &init, const TrainerShape &shape) {
  return std::make_unique<CpuTrainer>(init, shape);
}

#ifndef FLASHBOX_HAVE_CUDA
std::unique_ptr<Gpt2Trainer> make_cuda_trainer(const Gpt2Weights &, const TrainerShape &) {
  throw Gpt2Error("this flashbox was built without CUDA: train with --device cpu");
}
#endif

}  // namespace flashbox::gpt2
