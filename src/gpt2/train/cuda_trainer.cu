// Design: GPT-2 training on one GPU, bf16 activations and fp32 master weights.
//
// Memory: the parameters live in one fp32 buffer in llm.c's order with wte padded to Vp = V rounded
// up to 128 rows (zeros that stay zero: their logits get zero gradient); the gradients and AdamW's two
// moments are buffers of the same layout, and a bf16 copy of the parameters (rewritten by the AdamW
// kernel) feeds the matrix products. Embeddings, LayerNorm parameters and the residual projections'
// biases are read from the fp32 master.
//
// Forward, per layer l (kept for the backward: x_l, LN statistics, every bf16 activation, the
// attention's o and logsumexp):
//   ln1 = LN(x_l); qkv = ln1 Wqkv^T + b; att = attention(qkv) (flashbox forward with lse);
//   xm_l = x_l + att Wp^T + bp;  ln2 = LN(xm_l); h = ln2 Wfc^T + b; g = gelu(h);
//   x_{l+1} = xm_l + g Wfp^T + bfp      (cuBLASLt: the residual is the product's C operand)
// LM head in row chunks of TrainerShape::head_rows (--head-rows): logits = lnf wte^T in bf16, the
// cross-entropy kernel turns them into the loss and writes the bf16 dlogits over them (a row per
// CTA held in registers: one read and one write of the logits), which give dlnf
// (= dlogits wte) and dwte (+= dlogits^T lnf) at once, so only one chunk of logits ever exists.
// GELU and its derivative are cuBLASLt epilogues of the MLP products (the pre-activation kept as the
// epilogue's aux matrix).
// --deterministic 0 (TrainerShape::deterministic): the attention backward's atomic dQ sums (the
// deterministic mode orders them with semaphores, on the Hopper kernel as well) and tuned cuBLASLt
// algorithms. --profile (TrainerShape::profile) prints where a step's time goes (phase_clock.cuh).
// Backward in reverse with fp32 dx for the residual stream, bf16 copies of it for the products;
// LayerNorm's backward in one pass that also makes dx's bf16 copy and the bias gradient of the
// projection below (layernorm_backward.cu); attention through flashbox_attention_backward
// (deterministic unless --deterministic 0), writing dq, dk, dv straight into one [M, 3C] buffer so the
// qkv products run once on all three.
// The end of a step (finish_step) is queued whole: the gradients' sum of squares, its copy and the
// loss sum's into pinned memory, and AdamW, whose kernels compute the clipping factor from the norm on
// the device; the loop reads the numbers (step_stats) after it has queued the next step's micro-batches,
// so the GPU does not idle while the host sorts a batch and launches the next forward.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "gpt2/cuda/cuda_check.hpp"
#include "gpt2/cuda/device_buffer.hpp"
#include "gpt2/cuda/lt_matmul.hpp"
#include "gpt2/model/attention_call.hpp"
#include "gpt2/train/phase_clock.cuh"
#include "gpt2/train/train_kernels.cuh"
#include "gpt2/train/trainer.hpp"

namespace flashbox::gpt2 {
namespace {

using train::bf16;

// Every buffer of the trainer starts at zero.
struct Buf : DeviceBuffer {
  Buf() = default;
  explicit Buf(size_t bytes) : DeviceBuffer(bytes, kZeroed) {}
};

// Page-locked host memory: copies from it are queued on the stream instead of waiting for the GPU.
class PinnedBuf {
 public:
  PinnedBuf() = default;
  explicit PinnedBuf(size_t bytes) {
    if (cudaMallocHost(&p_, bytes) != cudaSuccess) {
      cudaGetLastError();
      throw Gpt2Error("CUDA: cannot allocate " + std::to_string(bytes >> 20) + " MiB of pinned host memory");
    }
  }
  ~PinnedBuf() { cudaFreeHost(p_); }
  PinnedBuf(PinnedBuf &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  PinnedBuf &operator=(PinnedBuf &&o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  int32_t *ints() const { return static_cast<int32_t *>(p_); }
  double *doubles() const { return static_cast<double *>(p_); }

 private:
  void *p_ = nullptr;
};

struct LayerActs {
  Buf x, xm, mean1, rstd1, mean2, rstd2, ln1, qkv, att, lse, ln2, h, g;
};

class CudaTrainer final : public Gpt2Trainer {
 public:
  CudaTrainer(const Gpt2Weights &init, const TrainerShape &shape);
  ~CudaTrainer() override {
    cudaDeviceSynchronize();
    if (clock_.on()) std::fputs(clock_.report().c_str(), stderr);
    cudaEventDestroy(staged_);
    cudaEventDestroy(stats_ready_);
  }
  void forward_backward(const int32_t *inputs, const int32_t *targets, float grad_scale) override;
  double mean_loss() override;
  double eval_loss(const int32_t *inputs, const int32_t *targets) override;
  void zero_grad() override {
    clock_.mark("zero grad");
    GPT2_CUDA(cudaMemsetAsync(grad_.as<void>(), 0, size_t(total_) * 4, nullptr));
    GPT2_CUDA(cudaMemsetAsync(loss_acc_.as<void>(), 0, 8, nullptr));
    micro_ = 0;
  }
  double grad_norm() override;
  void adam_step(const AdamW &opt, float lr, float grad_mult, int64_t t) override {
    adam(opt, lr, grad_mult, nullptr, 0.0f, t);
  }
  void finish_step(const AdamW &opt, float lr, float grad_clip, int64_t t) override;
  StepStats step_stats() override;
  bool queues_steps() const override { return true; }
  void get_params(Gpt2Weights &out) override { download(param_, out); }
  void get_grads(Gpt2Weights &out) override { download(grad_, out); }
  void get_moments(Gpt2Weights &m, Gpt2Weights &v) override {
    download(m_, m);
    download(v_, v);
  }
  void set_moments(const Gpt2Weights &m, const Gpt2Weights &v) override {
    upload(m, m_);
    upload(v, v_);
  }
  const char *device_name() const override { return "cuda"; }

 private:
  // Offsets (elements) of each tensor in the padded layout.
  int64_t off(Param p, int l = 0) const { return offset_[int(p)] + int64_t(l) * param_shape(c_, p).numel(); }
  const float *pf(Param p, int l = 0) const { return param_.as<float>() + off(p, l); }
  const bf16 *pb(Param p, int l = 0) const { return param_bf_.as<bf16>() + off(p, l); }
  float *gf(Param p, int l = 0) const { return grad_.as<float>() + off(p, l); }
  void download(const Buf &src, Gpt2Weights &out);
  void upload(const Gpt2Weights &in, Buf &dst);
  void set_batch(const int32_t *inputs, const int32_t *targets, bool embedding_grad);
  // Forward through ln_f; with `with_grad`, the LM head's loss and the whole backward follow.
  double run(bool with_grad, float grad_scale);
  // AdamW on every tensor; with norm_sq, the clipping factor comes from it on the device.
  void adam(const AdamW &opt, float lr, float grad_mult, const double *norm_sq, float clip, int64_t t);

  Gpt2Config c_;
  TrainerShape s_;
  int64_t Vp_ = 0, M_ = 0, total_ = 0;
  std::array<int64_t, kParamCount + 1> offset_{};
  Buf param_, param_bf_, grad_, m_, v_;
  std::vector<LayerActs> layer_;
  Buf x_final_, meanf_, rstdf_, lnf_, inputs_, targets_, losses_, dlogits_;
  Buf dx_, dres_, dln_, dfc_, datt_, dqkv_, scratch_, norm_partial_, norm_out_;
  Buf emb_order_, emb_starts_, emb_uniq_, loss_acc_;
  PinnedBuf staging_;             // inputs, targets, order, starts, uniq: 5 x (M + 1) ids
  cudaEvent_t staged_ = nullptr;  // the last upload from staging_ has been done
  int n_unique_ = 0;
  std::vector<int32_t> order_, bucket_;  // set_batch's counting sort
  int64_t head_rows_ = 0;                // min(M, TrainerShape::head_rows)
  int64_t micro_ = 0;
  // finish_step's loss sum and squared norm, copied to pinned memory (the loop reads them with
  // step_stats before the next finish_step queues its own), and that step's micro-batch count.
  PinnedBuf stats_;
  cudaEvent_t stats_ready_ = nullptr;
  int64_t stats_micro_ = -1;  // -1: no step finished yet
  // Tuned products only where runs need not repeat bit for bit (the winner can differ between runs).
  LtMatmul lt_{s_.deterministic ? LtAlgoChoice::kOrdered : LtAlgoChoice::kOrderedTuned};
  train::PhaseClock clock_{s_.profile};
};

CudaTrainer::CudaTrainer(const Gpt2Weights &init, const TrainerShape &shape) : c_(init.config()), s_(shape) {
  const int64_t C = c_.n_embd, L = c_.n_layer, B = s_.batch, T = s_.seqlen, NH = c_.n_head;
  if (C % 8 != 0 || c_.head_dim() % 8 != 0)
    throw Gpt2Error("the CUDA trainer needs n_embd and head_dim multiples of 8");
  if (B <= 0 || T <= 1 || T > c_.n_ctx)
    throw Gpt2Error("CUDA trainer: batch " + std::to_string(B) + " x seqlen " + std::to_string(T) +
                    " does not fit the model");
  Vp_ = (c_.vocab_size + 127) / 128 * 128;
  M_ = B * T;
  if (s_.head_rows <= 0) throw Gpt2Error("CUDA trainer: head_rows must be positive");
  head_rows_ = std::min(M_, s_.head_rows);
  for (int i = 0; i < kParamCount; ++i) {
    const ParamShape ps = param_shape(c_, Param(i));
    const int64_t n = Param(i) == Param::Wte ? Vp_ * C : ps.numel() * (ps.per_layer ? L : 1);
    offset_[size_t(i) + 1] = offset_[size_t(i)] + n;
  }
  total_ = offset_[kParamCount];
  param_ = Buf(size_t(total_) * 4);
  param_bf_ = Buf(size_t(total_) * 2);
  grad_ = Buf(size_t(total_) * 4);
  m_ = Buf(size_t(total_) * 4);
  v_ = Buf(size_t(total_) * 4);
  upload(init, param_);
  train::to_bf16(param_.as<float>(), param_bf_.as<bf16>(), total_);

  const size_t MC = size_t(M_ * C);
  layer_.resize(size_t(L));
  for (auto &a : layer_) {
    a.x = Buf(MC * 4);
    a.xm = Buf(MC * 4);
    for (Buf *b : {&a.mean1, &a.rstd1, &a.mean2, &a.rstd2}) *b = Buf(size_t(M_) * 4);
    a.ln1 = Buf(MC * 2);
    a.qkv = Buf(3 * MC * 2);
    a.att = Buf(MC * 2);
    a.lse = Buf(size_t(B * NH * T) * 4);
    a.ln2 = Buf(MC * 2);
    a.h = Buf(4 * MC * 2);
    a.g = Buf(4 * MC * 2);
  }
  x_final_ = Buf(MC * 4);
  meanf_ = Buf(size_t(M_) * 4);
  rstdf_ = Buf(size_t(M_) * 4);
  lnf_ = Buf(MC * 2);
  inputs_ = Buf(size_t(M_) * 4);
  targets_ = Buf(size_t(M_) * 4);
  losses_ = Buf(size_t(M_) * 4);
  dlogits_ = Buf(size_t(head_rows_ * Vp_) * 2);
  dx_ = Buf(MC * 4);
  dres_ = Buf(MC * 2);
  dln_ = Buf(MC * 4);
  dfc_ = Buf(4 * MC * 2);
  datt_ = Buf(MC * 2);
  dqkv_ = Buf(3 * MC * 2);
  scratch_ = Buf(size_t(
      std::max(train::colsum_scratch_bytes(M_, 4 * C), train::layernorm_backward_fused_scratch_bytes(M_, int(C)))));
  norm_partial_ = Buf(1024 * 4);
  norm_out_ = Buf(8);
  emb_order_ = Buf(size_t(M_) * 4);
  emb_starts_ = Buf(size_t(M_ + 1) * 4);
  emb_uniq_ = Buf(size_t(M_) * 4);
  loss_acc_ = Buf(8);
  staging_ = PinnedBuf(5 * size_t(M_ + 1) * 4);
  GPT2_CUDA(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  stats_ = PinnedBuf(2 * sizeof(double));
  GPT2_CUDA(cudaEventCreateWithFlags(&stats_ready_, cudaEventDisableTiming));
}

void CudaTrainer::download(const Buf &src, Gpt2Weights &out) {
  if (out.config().n_layer != c_.n_layer || out.size() != parameter_count(c_))
    throw Gpt2Error("CUDA trainer: shape mismatch");
  GPT2_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < kParamCount; ++i) {
    auto t = out.tensor(Param(i));
    GPT2_CUDA(cudaMemcpy(t.data(), src.as<float>() + offset_[size_t(i)], t.size() * 4, cudaMemcpyDeviceToHost));
  }
}

void CudaTrainer::upload(const Gpt2Weights &in, Buf &dst) {
  if (in.size() != parameter_count(c_)) throw Gpt2Error("CUDA trainer: shape mismatch");
  for (int i = 0; i < kParamCount; ++i) {
    auto t = in.tensor(Param(i));
    GPT2_CUDA(cudaMemcpy(dst.as<float>() + offset_[size_t(i)], t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  }
}

void CudaTrainer::set_batch(const int32_t *inputs, const int32_t *targets, bool embedding_grad) {
  for (int64_t i = 0; i < M_; ++i)
    if (inputs[i] < 0 || inputs[i] >= c_.vocab_size || targets[i] < 0 || targets[i] >= c_.vocab_size)
      throw Gpt2Error("token id " + std::to_string(std::min(inputs[i], targets[i])) + " at position " +
                      std::to_string(i) + " is outside the vocabulary");
  // Positions grouped by token, ascending within each group: the embedding gradient sums them in
  // this fixed order. A counting sort (stable; O(M + V), a comparison sort of 16k positions took over
  // a millisecond, long enough for the GPU to wait), built while the GPU still works on the
  // previous micro-batch.
  std::vector<int32_t> &order = order_;
  order.resize(size_t(M_));
  bucket_.assign(size_t(c_.vocab_size) + 1, 0);
  for (int64_t i = 0; i < M_; ++i) ++bucket_[size_t(inputs[i]) + 1];
  for (size_t v = 1; v < bucket_.size(); ++v) bucket_[v] += bucket_[v - 1];
  for (int64_t i = 0; i < M_; ++i) order[size_t(bucket_[size_t(inputs[i])]++)] = int32_t(i);
  GPT2_CUDA(cudaEventSynchronize(staged_));  // the previous upload has left the staging buffer
  const size_t n = size_t(M_), stride = n + 1;
  int32_t *st = staging_.ints();
  int32_t *s_in = st, *s_tg = st + stride, *s_order = st + 2 * stride, *s_starts = st + 3 * stride,
          *s_uniq = st + 4 * stride;
  std::copy(inputs, inputs + n, s_in);
  std::copy(targets, targets + n, s_tg);
  std::copy(order.begin(), order.end(), s_order);
  int u = 0;
  for (size_t k = 0; k < n; ++k)
    if (k == 0 || inputs[order[k]] != inputs[order[k - 1]]) {
      s_starts[u] = int32_t(k);
      s_uniq[u++] = inputs[order[k]];
    }
  s_starts[u] = int32_t(n);
  n_unique_ = u;
  GPT2_CUDA(cudaMemcpyAsync(inputs_.as<void>(), s_in, n * 4, cudaMemcpyHostToDevice, nullptr));
  GPT2_CUDA(cudaMemcpyAsync(targets_.as<void>(), s_tg, n * 4, cudaMemcpyHostToDevice, nullptr));
  if (embedding_grad) {
    GPT2_CUDA(cudaMemcpyAsync(emb_order_.as<void>(), s_order, n * 4, cudaMemcpyHostToDevice, nullptr));
    GPT2_CUDA(cudaMemcpyAsync(emb_starts_.as<void>(), s_starts, size_t(u + 1) * 4, cudaMemcpyHostToDevice, nullptr));
    GPT2_CUDA(cudaMemcpyAsync(emb_uniq_.as<void>(), s_uniq, size_t(u) * 4, cudaMemcpyHostToDevice, nullptr));
  }
  GPT2_CUDA(cudaEventRecord(staged_, nullptr));
}

double CudaTrainer::run(bool with_grad, float grad_scale) {
  const int64_t C = c_.n_embd, M = M_;
  const int L = c_.n_layer, B = s_.batch, T = s_.seqlen;
  auto mark = [&](const char *name) {
    if (with_grad) clock_.mark(name);
  };
  mark("fwd embedding");
  train::embedding_forward(inputs_.as<int32_t>(), pf(Param::Wte), pf(Param::Wpe), layer_[0].x.as<float>(), M, T,
                           int(C));
  for (int l = 0; l < L; ++l) {
    LayerActs &a = layer_[size_t(l)];
    float *x_next = l + 1 < L ? layer_[size_t(l) + 1].x.as<float>() : x_final_.as<float>();
    mark("fwd layernorm");
    train::layernorm_forward(a.x.as<float>(), pf(Param::Ln1W, l), pf(Param::Ln1B, l), a.ln1.as<bf16>(),
                             a.mean1.as<float>(), a.rstd1.as<float>(), M, int(C));
    mark("fwd qkv gemm");
    lt_.forward(a.ln1.as<bf16>(), pb(Param::QkvW, l), a.qkv.as<void>(), CUDA_R_16BF, M, 3 * C, C, pb(Param::QkvB, l),
                nullptr);
    flashbox_attention_args att = qkv_attention_args(FLASHBOX_CUDA, FLASHBOX_BFLOAT16, s_.attention, a.qkv.as<void>(),
                                                     a.att.as<void>(), B, T, c_.n_head, int(C));
    att.lse = a.lse.as<float>();
    mark("fwd attention");
    call_attention(att);
    mark("fwd attn proj gemm");
    lt_.forward(a.att.as<bf16>(), pb(Param::AttnProjW, l), a.xm.as<void>(), CUDA_R_32F, M, C, C,
                pf(Param::AttnProjB, l), a.x.as<float>());
    mark("fwd layernorm");
    train::layernorm_forward(a.xm.as<float>(), pf(Param::Ln2W, l), pf(Param::Ln2B, l), a.ln2.as<bf16>(),
                             a.mean2.as<float>(), a.rstd2.as<float>(), M, int(C));
    mark("fwd fc gemm+gelu");
    lt_.forward_gelu(a.ln2.as<bf16>(), pb(Param::FcW, l), a.g.as<bf16>(), a.h.as<bf16>(), M, 4 * C, C,
                     pb(Param::FcB, l));
    mark("fwd fc proj gemm");
    lt_.forward(a.g.as<bf16>(), pb(Param::FcProjW, l), x_next, CUDA_R_32F, M, C, 4 * C, pf(Param::FcProjB, l),
                a.xm.as<float>());
  }
  mark("fwd layernorm");
  train::layernorm_forward(x_final_.as<float>(), pf(Param::LnfW), pf(Param::LnfB), lnf_.as<bf16>(), meanf_.as<float>(),
                           rstdf_.as<float>(), M, int(C));

  // LM head and loss, chunk by chunk; with gradients, dlnf lands in dln_.
  const int64_t head_rows = head_rows_;
  const float row_scale = grad_scale / float(M);
  for (int64_t r0 = 0; r0 < M; r0 += head_rows) {
    const int64_t R = std::min(head_rows, M - r0);
    const bf16 *lnf = lnf_.as<bf16>() + r0 * C;
    mark("head logits gemm");
    lt_.forward(lnf, pb(Param::Wte), dlogits_.as<void>(), CUDA_R_16BF, R, Vp_, C, nullptr, nullptr);
    mark("head cross-entropy");
    train::cross_entropy_inplace(dlogits_.as<bf16>(), Vp_, c_.vocab_size, targets_.as<int32_t>() + r0, R,
                                 losses_.as<float>() + r0, with_grad, row_scale);
    if (!with_grad) continue;
    mark("head dlnf gemm");
    lt_.input_grad(dlogits_.as<bf16>(), pb(Param::Wte), dln_.as<float>() + r0 * C, CUDA_R_32F, R, Vp_, C);
    mark("head dwte gemm");
    lt_.weight_grad(dlogits_.as<bf16>(), lnf, gf(Param::Wte), R, Vp_, C);
  }
  std::vector<float> losses(static_cast<size_t>(with_grad ? 0 : M));
  if (with_grad) {
    float *dx = dx_.as<float>();
    bf16 *dres = dres_.as<bf16>();
    // dx = LN_f's input gradient; its bf16 copy and the last MLP projection's bias gradient with it.
    mark("bwd layernorm fused");
    train::layernorm_backward_fused(dln_.as<float>(), x_final_.as<float>(), meanf_.as<float>(), rstdf_.as<float>(),
                                    pf(Param::LnfW), dx, false, gf(Param::LnfW), gf(Param::LnfB), dres,
                                    gf(Param::FcProjB, L - 1), M, int(C), scratch_.as<float>());
    for (int l = L - 1; l >= 0; --l) {
      LayerActs &a = layer_[size_t(l)];
      // MLP projection: x_{l+1} = xm + g Wfp^T + b (the LayerNorm backward above made dres and this
      // bias gradient).
      mark("bwd fc proj dgrad+dgelu");
      lt_.input_grad_dgelu(dres, pb(Param::FcProjW, l), dfc_.as<bf16>(), a.h.as<bf16>(), M, C, 4 * C);
      mark("bwd fc proj wgrad");
      lt_.weight_grad(dres, a.g.as<bf16>(), gf(Param::FcProjW, l), M, C, 4 * C);
      // MLP input: h = ln2 Wfc^T + b.
      mark("bwd fc dgrad");
      lt_.input_grad(dfc_.as<bf16>(), pb(Param::FcW, l), dln_.as<void>(), CUDA_R_32F, M, 4 * C, C);
      mark("bwd fc wgrad");
      lt_.weight_grad(dfc_.as<bf16>(), a.ln2.as<bf16>(), gf(Param::FcW, l), M, 4 * C, C);
      mark("bwd fc bias grad");
      train::colsum_add(dfc_.as<bf16>(), gf(Param::FcB, l), M, 4 * C, scratch_.as<float>());
      mark("bwd layernorm fused");
      train::layernorm_backward_fused(dln_.as<float>(), a.xm.as<float>(), a.mean2.as<float>(), a.rstd2.as<float>(),
                                      pf(Param::Ln2W, l), dx, true, gf(Param::Ln2W, l), gf(Param::Ln2B, l), dres,
                                      gf(Param::AttnProjB, l), M, int(C), scratch_.as<float>());
      // Attention projection: xm = x + att Wp^T + b (dres and the bias gradient are already made by
      // the LayerNorm backward above).
      mark("bwd attn proj dgrad");
      lt_.input_grad(dres, pb(Param::AttnProjW, l), datt_.as<void>(), CUDA_R_16BF, M, C, C);
      mark("bwd attn proj wgrad");
      lt_.weight_grad(dres, a.att.as<bf16>(), gf(Param::AttnProjW, l), M, C, C);
      // Attention.
      flashbox_attention_grad_args g{};
      g.fwd = qkv_attention_args(FLASHBOX_CUDA, FLASHBOX_BFLOAT16, FLASHBOX_AUTO, a.qkv.as<void>(), a.att.as<void>(), B,
                                 T, c_.n_head, int(C));
      g.fwd.lse = a.lse.as<float>();
      g.dout = datt_.as<void>();
      for (int64_t *st : {g.dout_stride, g.dq_stride, g.dk_stride, g.dv_stride}) {
        st[0] = int64_t(T) * C;
        st[1] = C;
        st[2] = c_.head_dim();
      }
      // dq, dk, dv straight into the [M, 3C] layout of qkv: disjoint element by element, which is all
      // the API asks of the gradients.
      bf16 *d = dqkv_.as<bf16>();
      g.dq = d;
      g.dk = d + C;
      g.dv = d + 2 * C;
      for (int64_t *st : {g.dq_stride, g.dk_stride, g.dv_stride}) {
        st[0] = int64_t(T) * 3 * C;
        st[1] = 3 * C;
      }
      g.deterministic = s_.deterministic ? 1 : 0;
      mark("bwd attention");
      if (const int rc = flashbox_attention_backward(&g); rc != FLASHBOX_OK)
        throw Gpt2Error("attention backward failed (code " + std::to_string(rc) + "): " + flashbox_last_error());
      // QKV projection: qkv = ln1 Wqkv^T + b.
      mark("bwd qkv dgrad");
      lt_.input_grad(dqkv_.as<bf16>(), pb(Param::QkvW, l), dln_.as<void>(), CUDA_R_32F, M, 3 * C, C);
      mark("bwd qkv wgrad");
      lt_.weight_grad(dqkv_.as<bf16>(), a.ln1.as<bf16>(), gf(Param::QkvW, l), M, 3 * C, C);
      mark("bwd qkv bias grad");
      train::colsum_add(dqkv_.as<bf16>(), gf(Param::QkvB, l), M, 3 * C, scratch_.as<float>());
      mark("bwd layernorm fused");
      train::layernorm_backward_fused(dln_.as<float>(), a.x.as<float>(), a.mean1.as<float>(), a.rstd1.as<float>(),
                                      pf(Param::Ln1W, l), dx, true, gf(Param::Ln1W, l), gf(Param::Ln1B, l),
                                      l > 0 ? dres : nullptr, l > 0 ? gf(Param::FcProjB, l - 1) : nullptr, M, int(C),
                                      scratch_.as<float>());
    }
    mark("bwd embedding");
    train::embedding_backward_wte(dx, emb_order_.as<int32_t>(), emb_starts_.as<int32_t>(), emb_uniq_.as<int32_t>(),
                                  n_unique_, gf(Param::Wte), int(C));
    train::embedding_backward_wpe(dx, gf(Param::Wpe), B, T, int(C));
  }
  GPT2_CUDA(cudaGetLastError());
  if (with_grad) {
    mark("loss sum");
    train::mean_add(losses_.as<float>(), M, loss_acc_.as<double>());
    return 0.0;
  }
  GPT2_CUDA(cudaMemcpy(losses.data(), losses_.as<void>(), losses.size() * 4, cudaMemcpyDeviceToHost));
  double sum = 0.0;
  for (float v : losses) sum += double(v);
  return sum / double(M);
}

void CudaTrainer::forward_backward(const int32_t *inputs, const int32_t *targets, float grad_scale) {
  clock_.mark("host batch upload");
  set_batch(inputs, targets, true);
  run(true, grad_scale);
  ++micro_;
}

double CudaTrainer::mean_loss() {
  clock_.mark("loss read (sync)");
  double acc = 0.0;
  GPT2_CUDA(cudaMemcpy(&acc, loss_acc_.as<void>(), 8, cudaMemcpyDeviceToHost));
  return micro_ ? acc / double(micro_) : 0.0;
}

double CudaTrainer::eval_loss(const int32_t *inputs, const int32_t *targets) {
  set_batch(inputs, targets, false);
  return run(false, 0.0f);
}

double CudaTrainer::grad_norm() {
  clock_.mark("grad norm");
  train::sum_squares(grad_.as<float>(), total_, norm_partial_.as<float>(), norm_out_.as<double>());
  double ss = 0.0;
  GPT2_CUDA(cudaMemcpy(&ss, norm_out_.as<void>(), 8, cudaMemcpyDeviceToHost));
  return std::sqrt(ss);
}

void CudaTrainer::finish_step(const AdamW &opt, float lr, float grad_clip, int64_t t) {
  clock_.mark("grad norm");
  train::sum_squares(grad_.as<float>(), total_, norm_partial_.as<float>(), norm_out_.as<double>());
  // The next zero_grad() clears loss_acc_ after these copies in stream order.
  double *h = stats_.doubles();
  GPT2_CUDA(cudaMemcpyAsync(h, loss_acc_.as<void>(), 8, cudaMemcpyDeviceToHost, nullptr));
  GPT2_CUDA(cudaMemcpyAsync(h + 1, norm_out_.as<void>(), 8, cudaMemcpyDeviceToHost, nullptr));
  GPT2_CUDA(cudaEventRecord(stats_ready_, nullptr));
  stats_micro_ = micro_;
  adam(opt, lr, 1.0f, norm_out_.as<double>(), grad_clip, t);
}

StepStats CudaTrainer::step_stats() {
  if (stats_micro_ < 0) return {};
  GPT2_CUDA(cudaEventSynchronize(stats_ready_));
  const double *h = stats_.doubles();
  return {stats_micro_ ? h[0] / double(stats_micro_) : 0.0, std::sqrt(h[1])};
}

void CudaTrainer::adam(const AdamW &opt, float lr, float grad_mult, const double *norm_sq, float clip, int64_t t) {
  clock_.mark("adamw");
  const float bias1 = 1.0f - std::pow(opt.beta1, float(t)), bias2 = 1.0f - std::pow(opt.beta2, float(t));
  for (int i = 0; i < kParamCount; ++i) {
    const int64_t o = offset_[size_t(i)], n = offset_[size_t(i) + 1] - o;
    train::adamw(param_.as<float>() + o, param_bf_.as<bf16>() + o, grad_.as<float>() + o, m_.as<float>() + o,
                 v_.as<float>() + o, n, lr, opt.beta1, opt.beta2, opt.eps, decays(Param(i)) ? opt.weight_decay : 0.0f,
                 grad_mult, norm_sq, clip, bias1, bias2);
  }
  GPT2_CUDA(cudaGetLastError());
  clock_.end_step();
}

}  // namespace

std::unique_ptr<Gpt2Trainer> make_cuda_trainer(const Gpt2Weights &init, const TrainerShape &shape) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw Gpt2Error("no CUDA device is present");
  }
  return std::make_unique<CudaTrainer>(init, shape);
}

}  // namespace flashbox::gpt2
