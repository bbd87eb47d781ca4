// The CPU forward against a plain fp64 forward written here from the GPT-2 equations (no shared code
// beyond the weights), and the losses of the attention implementations against each other.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flashbox/flashbox.h"
#include "gpt2/eval/evaluate.hpp"
#include "gpt2/model/cpu_forward.hpp"
#include "gpt2_test_util.hpp"
#include "support/gpu_check.hpp"
#ifdef FLASHBOX_HAVE_CUDA
#include "gpt2/cuda/cuda_gpt2.hpp"
#endif

using namespace flashbox::gpt2;

namespace {

using Mat = std::vector<double>;  // row-major

// y[T, N] = x[T, K] W[N, K]^T + b
Mat linear64(const Mat &x, std::span<const float> W, std::span<const float> b, int T, int K, int N) {
  Mat y(size_t(T) * N);
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double acc = b.empty() ? 0.0 : b[size_t(n)];
      for (int k = 0; k < K; ++k) acc += x[size_t(t) * K + k] * double(W[size_t(n) * K + k]);
      y[size_t(t) * N + n] = acc;
    }
  return y;
}

Mat layernorm64(const Mat &x, std::span<const float> w, std::span<const float> b, int T, int C) {
  Mat y(x.size());
  for (int t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[size_t(t) * C + c] / C;
    for (int c = 0; c < C; ++c) var += (x[size_t(t) * C + c] - mean) * (x[size_t(t) * C + c] - mean) / C;
    for (int c = 0; c < C; ++c)
      y[size_t(t) * C + c] = (x[size_t(t) * C + c] - mean) / std::sqrt(var + 1e-5) * w[size_t(c)] + b[size_t(c)];
  }
  return y;
}

// Logits [T, V] of one window, everything in double.
Mat reference_logits(const Gpt2Weights &w, const std::vector<int32_t> &tok) {
  const Gpt2Config &cfg = w.config();
  const int T = int(tok.size()), C = cfg.n_embd, H = cfg.n_head, D = C / H, V = cfg.vocab_size;
  Mat x(size_t(T) * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c)
      x[size_t(t) * C + c] = double(w.tensor(Param::Wte)[size_t(tok[size_t(t)]) * C + c]) +
                             double(w.tensor(Param::Wpe)[size_t(t) * C + c]);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const Mat h = layernorm64(x, w.layer(Param::Ln1W, l), w.layer(Param::Ln1B, l), T, C);
    const Mat qkv = linear64(h, w.layer(Param::QkvW, l), w.layer(Param::QkvB, l), T, C, 3 * C);
    Mat att(size_t(T) * C, 0.0);
    for (int hd = 0; hd < H; ++hd)
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(size_t(i) + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) {  // causal: query i sees keys 0..i
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += qkv[size_t(i) * 3 * C + hd * D + d] * qkv[size_t(j) * 3 * C + C + hd * D + d];
          s[size_t(j)] = dot / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (int j = 0; j <= i; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < D; ++d)
            att[size_t(i) * C + hd * D + d] += s[size_t(j)] / sum * qkv[size_t(j) * 3 * C + 2 * C + hd * D + d];
      }
    const Mat proj = linear64(att, w.layer(Param::AttnProjW, l), w.layer(Param::AttnProjB, l), T, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    const Mat h2 = layernorm64(x, w.layer(Param::Ln2W, l), w.layer(Param::Ln2B, l), T, C);
    Mat fc = linear64(h2, w.layer(Param::FcW, l), w.layer(Param::FcB, l), T, C, 4 * C);
    for (double &v : fc) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    const Mat out = linear64(fc, w.layer(Param::FcProjW, l), w.layer(Param::FcProjB, l), T, 4 * C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
  }
  const Mat hf = layernorm64(x, w.tensor(Param::LnfW), w.tensor(Param::LnfB), T, C);
  return linear64(hf, w.tensor(Param::Wte), {}, T, C, V);  // tied LM head
}

std::vector<int32_t> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto &v : t) v = int32_t(gen() % unsigned(vocab));
  return t;
}

// Seeded init gives near-uniform logits; scale the weights up so that attention patterns and the
// loss are far from trivial and an error in any layer shows.
Gpt2Weights sharpened(const Gpt2Config &c, uint64_t seed) {
  Gpt2Weights w = gpt2_test::seeded(c, seed);
  for (Param p : {Param::Wte, Param::Wpe, Param::QkvW, Param::FcW, Param::AttnProjW, Param::FcProjW})
    for (float &v : w.tensor(p)) v *= 10.0f;
  std::mt19937 gen{static_cast<unsigned>(seed)};
  std::normal_distribution<float> n(0.0f, 0.1f);
  for (Param p : {Param::QkvB, Param::FcB, Param::Ln1W, Param::Ln1B, Param::LnfB})
    for (float &v : w.tensor(p)) v += n(gen);
  return w;
}

}  // namespace

class CpuLogits : public ::testing::TestWithParam<flashbox_impl> {};

TEST_P(CpuLogits, MatchFp64Reference) {
  const Gpt2Weights w = sharpened(gpt2_test::micro_config(), 11);
  const auto tokens = random_tokens(24, w.config().vocab_size, 5);
  const Mat ref = reference_logits(w, tokens);
  CpuGpt2 model(w);
  const std::vector<float> got = model.logits(tokens.data(), int(tokens.size()), GetParam());
  ASSERT_EQ(got.size(), ref.size());
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::fabs(double(got[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  EXPECT_GT(max_ref, 1.0) << "the test model should not be trivial";
  EXPECT_LT(max_err, 2e-4 * max_ref) << "max |logit error| " << max_err << " with logits up to " << max_ref;
}

INSTANTIATE_TEST_SUITE_P(Impls, CpuLogits, ::testing::Values(FLASHBOX_NAIVE, FLASHBOX_BLOCKED),
                         [](const auto &info) { return std::string(flashbox_impl_name(info.param)); });

TEST(CpuLoss, MatchesFp64CrossEntropy) {
  const Gpt2Weights w = sharpened(gpt2_test::micro_config(), 12);
  const auto tokens = random_tokens(32, w.config().vocab_size, 6);  // two windows of 16
  double ref = 0;
  for (int win = 0; win < 2; ++win) {
    const std::vector<int32_t> window(tokens.begin() + win * 16, tokens.begin() + win * 16 + 16);
    const Mat logits = reference_logits(w, window);
    const int V = w.config().vocab_size;
    for (int t = 0; t + 1 < 16; ++t) {
      double mx = -1e300, sum = 0;
      for (int v = 0; v < V; ++v) mx = std::max(mx, logits[size_t(t) * V + v]);
      for (int v = 0; v < V; ++v) sum += std::exp(logits[size_t(t) * V + v] - mx);
      ref += mx + std::log(sum) - logits[size_t(t) * V + window[size_t(t) + 1]];
    }
  }
  CpuGpt2 model(w);
  const double got = model.loss_sum(tokens.data(), 2, 16, FLASHBOX_NAIVE);
  EXPECT_NEAR(got / 30, ref / 30, 1e-4 * std::max(1.0, ref / 30));
  EXPECT_GT(ref / 30, 0.5);
}

TEST(CpuLoss, NaiveAndBlockedAgreeOnTheTinyConfig) {
  const Gpt2Weights w = gpt2_test::seeded(config_by_name("tiny"), 21);
  const auto tokens = random_tokens(512, w.config().vocab_size, 7);
  EvalOptions o;
  o.device = FLASHBOX_CPU;
  o.seqlen = 128;
  o.batch = 2;
  const EvalResult r = evaluate(w, tokens, o);
  ASSERT_EQ(r.rows.size(), 2u);
  for (const auto &row : r.rows) ASSERT_TRUE(row.ok) << row.impl << ": " << row.error;
  EXPECT_EQ(r.tokens, 512);
  EXPECT_NEAR(r.rows[0].loss, std::log(50257.0), 0.5) << "seeded GPT-2 starts near uniform";
  ASSERT_TRUE(r.rows[1].diff_from_naive.has_value());
  EXPECT_LT(std::fabs(*r.rows[1].diff_from_naive), 2e-4);
  EXPECT_EQ(to_json(r, "seeded")["rows"].size(), 2u);
}

TEST(Eval, BadInputsAreClearErrors) {
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 1);
  EvalOptions o;
  o.seqlen = 16;
  EXPECT_NE(gpt2_test::error_of([&] { evaluate(w, random_tokens(10, 97, 1), o); }).find("do not fill one window"),
            std::string::npos);
  EXPECT_NE(gpt2_test::error_of([&] {
              evaluate(w, std::vector<int32_t>(16, 97), o);
            }).find("outside the model's vocabulary"),
            std::string::npos);
  o.seqlen = 64;
  EXPECT_NE(gpt2_test::error_of([&] { evaluate(w, random_tokens(64, 97, 1), o); }).find("context"), std::string::npos);
}

TEST(Init, SeededAndScaledAsGpt2) {
  const Gpt2Config c = config_by_name("tiny");
  const Gpt2Weights a = gpt2_test::seeded(c, 1), b = gpt2_test::seeded(c, 1), d = gpt2_test::seeded(c, 2);
  EXPECT_TRUE(std::equal(a.data(), a.data() + a.size(), b.data()));
  EXPECT_FALSE(std::equal(a.data(), a.data() + a.size(), d.data()));
  auto stddev = [&](Param p) {
    double s = 0;
    for (float v : a.tensor(p)) s += double(v) * v;
    return std::sqrt(s / double(a.tensor(p).size()));
  };
  EXPECT_NEAR(stddev(Param::Wte), 0.02, 0.0005);
  EXPECT_NEAR(stddev(Param::QkvW), 0.02, 0.001);
  EXPECT_NEAR(stddev(Param::FcProjW), 0.02 / std::sqrt(2.0 * c.n_layer), 0.0005);
  for (float v : a.tensor(Param::Ln2W)) ASSERT_EQ(v, 1.0f);
  for (float v : a.tensor(Param::FcB)) ASSERT_EQ(v, 0.0f);
}

TEST(CudaForward, NaiveAndFlashAgreeAndMatchTheCpu) {
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  const Gpt2Weights w = gpt2_test::seeded(config_by_name("small"), 31);
  const auto tokens = random_tokens(4 * 256, w.config().vocab_size, 8);
  EvalOptions o;
  o.device = FLASHBOX_CUDA;
  o.seqlen = 256;
  o.batch = 2;
  const EvalResult r = evaluate(w, tokens, o);
  ASSERT_EQ(r.rows.size(), 2u);
  for (const auto &row : r.rows) ASSERT_TRUE(row.ok) << row.impl << ": " << row.error;
  EXPECT_LT(std::fabs(*r.rows[1].diff_from_naive), 2e-4);
  // bf16 GPU loss against the fp32 CPU loss of the same tokens.
  CpuGpt2 cpu(w);
  const double cpu_loss = cpu.loss_sum(tokens.data(), 4, 256, FLASHBOX_NAIVE) / (4 * 255);
  EXPECT_NEAR(r.rows[0].loss, cpu_loss, 5e-3);
  // Logits of one window, flash on the GPU against the CPU.
  CudaGpt2 gpu(w, 1, 256);
  gpu.set_tokens(tokens, 1);
  const auto g = gpu.first_window_logits(FLASHBOX_FLASH);
  const auto c = cpu.logits(tokens.data(), 256, FLASHBOX_NAIVE);
  ASSERT_EQ(g.size(), c.size());
  double max_err = 0;
  for (size_t i = 0; i < g.size(); ++i) max_err = std::max(max_err, double(std::fabs(g[i] - c[i])));
  EXPECT_LT(max_err, 0.05);
#endif
}
