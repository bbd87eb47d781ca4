// GPT-2 training: the CPU trainer's gradients against finite differences of its own loss (every
// tensor), the CPU training loop as CI runs it (tiny config, loss falls, resume gives the same
// run, checkpoints load), and on a GPU the CUDA trainer against the CPU one (gradients of every
// tensor, determinism, the naive/flash swap) and the eval path's file-format independence.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "flashbox/flashbox.h"
#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/eval/evaluate.hpp"
#include "gpt2/tokens/token_files.hpp"
#include "gpt2/train/train_loop.hpp"
#include "gpt2/train/trainer.hpp"
#include "gpt2_test_util.hpp"
#include "support/gpu_check.hpp"
#include "support/output_error.hpp"

using namespace flashbox::gpt2;

namespace {

std::vector<int32_t> random_ids(size_t n, int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(n);
  for (auto &v : t) v = int32_t(gen() % unsigned(vocab));
  return t;
}

// Scaled-up weights: gradients of every tensor far from zero and attention far from uniform.
Gpt2Weights lively(const Gpt2Config &c, uint64_t seed) {
  Gpt2Weights w = gpt2_test::seeded(c, seed);
  for (Param p : {Param::Wte, Param::Wpe, Param::QkvW, Param::FcW})
    for (float &v : w.tensor(p)) v *= 5.0f;
  std::mt19937 gen{unsigned(seed)};
  std::normal_distribution<float> n(0.0f, 0.1f);
  for (Param p : {Param::QkvB, Param::FcB, Param::Ln1W, Param::Ln1B, Param::Ln2W, Param::LnfW, Param::LnfB,
                  Param::AttnProjB, Param::FcProjB, Param::Ln2B})
    for (float &v : w.tensor(p)) v += n(gen);
  return w;
}

// One forward-backward of `in` against `tg` from zeroed gradients: the mean loss, with the gradients
// copied into `grads`.
double loss_and_grads(Gpt2Trainer &t, const std::vector<int32_t> &in, const std::vector<int32_t> &tg,
                      Gpt2Weights &grads) {
  t.zero_grad();
  t.forward_backward(in.data(), tg.data(), 1.0f);
  const double loss = t.mean_loss();
  t.get_grads(grads);
  return loss;
}

// The CUDA step tests' run: the small config's seeded weights, B4 x T256, one fixed batch.
struct SmallRun {
  Gpt2Config c = config_by_name("small");
  Gpt2Weights w = gpt2_test::seeded(c, 8);
  TrainerShape shape{.batch = 4, .seqlen = 256};
  std::vector<int32_t> in = random_ids(1024, c.vocab_size, 5), tg = random_ids(1024, c.vocab_size, 6);
};

}  // namespace

// Directional derivative of each tensor: (L(p + h d) - L(p - h d)) / 2h
// against g . d. fp32 losses limit the agreement to about 1e-3 relative; a wrong term in any
// layer's backward is off by far more.
TEST(CpuTrainer, GradientsMatchFiniteDifferences) {
  const Gpt2Config c = gpt2_test::micro_config();
  const Gpt2Weights w = lively(c, 5);
  TrainerShape shape;
  shape.batch = 2;
  shape.seqlen = 16;
  shape.attention = FLASHBOX_NAIVE;
  const auto in = random_ids(32, c.vocab_size, 1), tg = random_ids(32, c.vocab_size, 2);
  auto t = make_cpu_trainer(w, shape);
  Gpt2Weights g(c);
  EXPECT_GT(loss_and_grads(*t, in, tg, g), 1.0);
  std::mt19937 gen(9);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int i = 0; i < kParamCount; ++i) {
    const Param p = Param(i);
    // Along the computed gradient itself (plus a little noise): a wrong gradient's direction or size
    // then shows as a mismatch between |g|^2 and the measured slope.
    std::vector<float> d(w.tensor(p).size());
    for (size_t k = 0; k < d.size(); ++k) d[k] = g.tensor(p)[k] + 1e-3f * n(gen);
    double gd = 0, dd = 0;
    for (size_t k = 0; k < d.size(); ++k) {
      gd += double(g.tensor(p)[k]) * d[k];
      dd += double(d[k]) * d[k];
    }
    const float h = float(3e-2 / std::sqrt(dd));
    auto loss_at = [&](float s) {
      Gpt2Weights x = w;
      for (size_t k = 0; k < d.size(); ++k) x.tensor(p)[k] += s * h * d[k];
      return make_cpu_trainer(x, shape)->eval_loss(in.data(), tg.data());
    };
    const double fd = (loss_at(1) - loss_at(-1)) / (2.0 * h);
    EXPECT_GT(gd, 1e-8) << param_name(p) << ": no gradient";
    EXPECT_NEAR(fd, gd, 2e-2 * std::fabs(gd) + 1e-6) << param_name(p);
  }
}

TEST(CpuTrainer, LossFallsResumeRepeatsAndCheckpointsLoad) {
  gpt2_test::ScratchDir dir;
  std::vector<int32_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i % 61) * 811 % 50257);  // a repeating text
  write_token_shard(dir / "train.bin", tokens);
  write_token_shard(dir / "val.bin", std::vector<int32_t>(tokens.begin(), tokens.begin() + 1024));
  TrainOptions o;
  o.config = "tiny";
  o.shape.batch = 2;
  o.shape.seqlen = 32;
  o.steps = 4;
  o.lr = 3e-3f;
  o.warmup = 1;
  o.train_tokens = dir / "train.bin";
  o.val_tokens = dir / "val.bin";
  o.val_max_tokens = 128;
  o.quiet = true;
  o.out_dir = dir / "a";
  o.checkpoint_every = 2;
  o.log_json = dir / "a.jsonl";
  const TrainSummary full = run_training(o, [](const std::string &) {});
  EXPECT_EQ(full.steps, 4);
  EXPECT_NEAR(full.first_loss, std::log(50257.0), 0.5);
  EXPECT_LT(full.last_loss, full.first_loss - 0.5) << "the loss should fall on a repeating text";
  EXPECT_GT(full.val_loss, 0.0);

  // Resumed from step 2: the same last loss and the same weights.
  o.resume = dir / "a/state_000002.bin";
  o.out_dir = dir / "b";
  o.log_json = dir / "b.jsonl";
  std::filesystem::create_directories(dir / "b");
  const TrainSummary resumed = run_training(o, [](const std::string &) {});
  EXPECT_EQ(resumed.steps, 2);
  EXPECT_NEAR(resumed.last_loss, full.last_loss, 1e-5);
  const Gpt2Weights a = load_checkpoint(dir / "a/model_000004.bin"), b = load_checkpoint(dir / "b/model_000004.bin");
  EXPECT_LT(flashbox::test::rel_error(b.tensor(Param::QkvW), a.tensor(Param::QkvW)).rel_or_inf(), 1e-5);
  // Both formats hold the same weights.
  const Gpt2Weights st = load_checkpoint(dir / "a/model_000004.safetensors");
  for (int i = 0; i < kParamCount; ++i)
    EXPECT_EQ(flashbox::test::rel_error(st.tensor(Param(i)), a.tensor(Param(i))).rel_or_inf(), 0.0) << i;

  // The JSON log: a start line, one line per step, validations, a summary.
  std::ifstream log(dir / "a.jsonl");
  std::string line;
  int steps = 0, vals = 0;
  bool summary = false;
  while (std::getline(log, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") {
      ++steps;
      EXPECT_TRUE(j.contains("grad_norm") && j.contains("lr") && j.contains("tokens_per_second"));
    }
    vals += j["event"] == "val";
    summary |= j["event"] == "summary";
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(vals, 1);
  EXPECT_TRUE(summary);
}

TEST(TrainLoop, WarmupThenCosine) {
  TrainOptions o;
  o.lr = 1.0f;
  o.min_lr_fraction = 0.1f;
  o.warmup = 10;
  o.steps = 110;
  EXPECT_FLOAT_EQ(learning_rate(o, 1), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(o, 10), 1.0f);
  EXPECT_NEAR(learning_rate(o, 60), 0.55f, 1e-6);
  EXPECT_NEAR(learning_rate(o, 110), 0.1f, 1e-6);
}

TEST(TrainLoop, BadInputsAreClearErrors) {
  gpt2_test::ScratchDir dir;
  write_token_shard(dir / "t.bin", std::vector<int32_t>(100, 1));
  TrainOptions o;
  o.train_tokens = dir / "t.bin";
  o.quiet = true;
  o.shape.batch = 4;
  o.shape.seqlen = 64;
  EXPECT_NE(gpt2_test::error_of([&] { run_training(o, [](const std::string &) {}); }).find("fewer than one batch"),
            std::string::npos);
  o.shape.batch = 1;
  o.shape.seqlen = 32;
  o.total_batch = 50;
  EXPECT_NE(gpt2_test::error_of([&] { run_training(o, [](const std::string &) {}); }).find("not a multiple"),
            std::string::npos);
  o.total_batch = 0;
  o.resume = dir / "t.bin";
  EXPECT_NE(gpt2_test::error_of([&] { run_training(o, [](const std::string &) {}); }).find("state_"),
            std::string::npos);
}

// ---- CUDA -----------------------------------------------------------------------------------------

// bf16 activations against the fp32 CPU trainer, same weights and batch: every tensor's gradient.
TEST(CudaTrainer, GradientsMatchTheCpuTrainer) {
  SKIP_WITHOUT_GPU();
  const Gpt2Config c = config_by_name("small");
  const Gpt2Weights w = gpt2_test::seeded(c, 7);
  TrainerShape shape;
  shape.batch = 2;
  shape.seqlen = 128;
  const auto in = random_ids(256, c.vocab_size, 3), tg = random_ids(256, c.vocab_size, 4);
  Gpt2Weights gc(c), gg(c);
  const double lc = loss_and_grads(*make_cpu_trainer(w, shape), in, tg, gc);
  // Deterministic with the LM head in chunks of 64 rows and in one chunk (the default 16,384 rows
  // cover all 256), and the Hopper attention backward (not deterministic) with tuned products.
  struct Variant {
    bool deterministic;
    int64_t head_rows;
  };
  for (const Variant v : {Variant{true, 64}, Variant{true, TrainerShape{}.head_rows}, Variant{false, 65536}}) {
    shape.deterministic = v.deterministic;
    shape.head_rows = v.head_rows;
    const std::string what =
        std::string(" deterministic ") + (v.deterministic ? "1" : "0") + " head_rows " + std::to_string(v.head_rows);
    for (flashbox_impl impl : {FLASHBOX_FLASH, FLASHBOX_NAIVE}) {
      shape.attention = impl;
      const double lg = loss_and_grads(*make_cuda_trainer(w, shape), in, tg, gg);
      EXPECT_NEAR(lg, lc, 2e-3 * lc) << flashbox_impl_name(impl) << what;
      for (int i = 0; i < kParamCount; ++i)
        EXPECT_LT(flashbox::test::rel_error(gg.tensor(Param(i)), gc.tensor(Param(i))).rel_or_inf(), 2e-2)
            << param_name(Param(i)) << " " << flashbox_impl_name(impl) << what;
    }
  }
}

TEST(CudaTrainer, DeterministicGivenTheSeed) {
  SKIP_WITHOUT_GPU();
  const SmallRun small;
  const auto &[c, w, shape, in, tg] = small;
  std::vector<Gpt2Weights> out;
  for (int run = 0; run < 2; ++run) {
    auto t = make_cuda_trainer(w, shape);
    for (int step = 1; step <= 3; ++step) {
      t->zero_grad();
      t->forward_backward(in.data(), tg.data(), 1.0f);
      t->adam_step(AdamW{}, 1e-3f, float(std::min(1.0, 1.0 / t->grad_norm())), step);
    }
    out.emplace_back(c);
    t->get_params(out.back());
  }
  EXPECT_TRUE(std::equal(out[0].data(), out[0].data() + out[0].size(), out[1].data())) << "two runs differ";
}

// finish_step queues the norm, the clipping and AdamW (the factor computed on the device) and
// step_stats reads the numbers later, after the next step is queued, as the training loop does: the
// same parameters bit for bit, and the same loss and norm, as the host path (mean_loss, grad_norm,
// adam_step with clip_factor). A clip below the norm so that clipping happens.
TEST(CudaTrainer, QueuedStepEndMatchesTheHostPath) {
  SKIP_WITHOUT_GPU();
  const SmallRun small;
  const auto &[c, w, shape, in, tg] = small;
  const float clip = 0.25f;
  std::vector<Gpt2Weights> out;
  std::vector<StepStats> stats[2];
  for (int queued = 0; queued < 2; ++queued) {
    auto t = make_cuda_trainer(w, shape);
    for (int step = 1; step <= 3; ++step) {
      t->zero_grad();
      t->forward_backward(in.data(), tg.data(), 0.5f);
      t->forward_backward(tg.data(), in.data(), 0.5f);
      if (queued) {
        if (step > 1) stats[1].push_back(t->step_stats());  // the previous step's, read late
        t->finish_step(AdamW{}, 1e-3f, clip, step);
      } else {
        const double loss = t->mean_loss(), norm = t->grad_norm();
        stats[0].push_back({loss, norm});
        t->adam_step(AdamW{}, 1e-3f, clip_factor(norm, clip), step);
      }
    }
    if (queued) stats[1].push_back(t->step_stats());
    out.emplace_back(c);
    t->get_params(out.back());
  }
  ASSERT_EQ(stats[0].size(), 3u);
  ASSERT_EQ(stats[1].size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(stats[0][k].loss, stats[1][k].loss) << "step " << k + 1;
    EXPECT_EQ(stats[0][k].grad_norm, stats[1][k].grad_norm) << "step " << k + 1;
    EXPECT_GT(stats[0][k].grad_norm, clip) << "step " << k + 1 << " did not clip";
  }
  EXPECT_TRUE(std::equal(out[0].data(), out[0].data() + out[0].size(), out[1].data()))
      << "queued and host step ends give different parameters";
}

// Issue 17, item 0: one sharpened model with bf16-exact weights, written as llm.c fp32 (v3) and bf16
// (v5) files: the CUDA eval gives the same loss from both and stays near the CPU's fp32 loss.
TEST(CudaForward, SameLossFromBothLlmcFormats) {
  SKIP_WITHOUT_GPU();
  gpt2_test::ScratchDir dir;
  Gpt2Weights w = lively(config_by_name("small"), 13);
  write_llmc_checkpoint(w, dir / "m_bf16.bin", true);
  const Gpt2Weights exact = load_checkpoint(dir / "m_bf16.bin");  // the bf16 rounding of w
  write_llmc_checkpoint(exact, dir / "m_fp32.bin", false);
  const auto tokens = random_ids(8 * 256, 50257, 17);
  EvalOptions o;
  o.seqlen = 256;
  o.batch = 4;
  double loss[2][2];
  for (int f = 0; f < 2; ++f) {
    const Gpt2Weights m = load_checkpoint(dir / (f ? "m_fp32.bin" : "m_bf16.bin"));
    o.device = FLASHBOX_CUDA;
    const EvalResult r = evaluate(m, tokens, o);
    ASSERT_TRUE(r.rows[0].ok && r.rows[1].ok);
    loss[f][0] = r.rows[0].loss;
    loss[f][1] = r.rows[1].loss;
  }
  o.device = FLASHBOX_CPU;
  o.impls = {FLASHBOX_NAIVE};
  const double cpu = evaluate(exact, tokens, o).rows[0].loss;
  std::printf(
      "sharpened small model: cpu fp32 %.6f | cuda from v5: naive %.6f flash %.6f | from v3: naive %.6f flash %.6f\n",
      cpu, loss[0][0], loss[0][1], loss[1][0], loss[1][1]);
  EXPECT_EQ(loss[0][0], loss[1][0]);
  EXPECT_EQ(loss[0][1], loss[1][1]);
  EXPECT_NEAR(loss[0][0], cpu, 2e-3 * cpu);
}
