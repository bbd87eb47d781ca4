// `flashbox gpt2 train`: trains GPT-2 on llm.c token shards, on the CPU (fp32) or CUDA (bf16
// activations, fp32 master weights), with a progress line per step, an optional JSON log, periodic
// validation, checkpoints in both formats `gpt2 eval` reads and an optimizer state to resume from.
#include "command_registry.hpp"

#include <fmt/core.h>

#include <memory>

#include "flashbox/flashbox.h"
#include "gpt2/error.hpp"
#include "gpt2/train/train_loop.hpp"

namespace flashbox::cli {
namespace cmd_gpt2_train {

using namespace flashbox::gpt2;

struct TrainCli {
  TrainOptions o;
  std::string device, attention = "flash";
};

void run_train(TrainCli &cli) {
  TrainOptions o = cli.o;
  const bool have_gpu = flashbox_cuda_device_count() > 0;
  o.device = cli.device.empty()     ? (have_gpu ? FLASHBOX_CUDA : FLASHBOX_CPU)
             : cli.device == "cuda" ? FLASHBOX_CUDA
                                    : FLASHBOX_CPU;
  if (o.device == FLASHBOX_CUDA && !have_gpu)
    throw Gpt2Error("--device cuda: no CUDA device (or this flashbox was built without CUDA)");
  o.shape.attention = cli.attention == "naive" ? FLASHBOX_NAIVE : FLASHBOX_FLASH;
  const TrainSummary s = run_training(o, [](const std::string &line) {
    fmt::print("{}", line);
    std::fflush(stdout);
  });
  fmt::print("trained {} steps ({} tokens): loss {:.4f} -> {:.4f}", s.steps, s.tokens, s.first_loss, s.last_loss);
  if (s.val_loss >= 0) fmt::print(", val loss {:.4f}", s.val_loss);
  if (s.tokens_per_second > 0) fmt::print(", {:.0f} tokens/s", s.tokens_per_second);
  if (s.mfu > 0) fmt::print(" (MFU {:.1f}%)", s.mfu * 100.0);
  fmt::print("\n");
}

void setup(CLI::App &app) {
  CLI::App *gpt2 = app.get_subcommand("gpt2");
  auto cli = std::make_shared<TrainCli>();
  TrainOptions &o = cli->o;
  auto *t = gpt2->add_subcommand("train", "train GPT-2 on token shards (CPU fp32 or CUDA bf16)");
  t->add_option("--config", o.config, "seeded weights of this config: gpt2 (124M), small or tiny")
      ->capture_default_str();
  t->add_option("--init", o.init_weights, "start from this checkpoint instead (safetensors or llm.c .bin)");
  t->add_option("--seed", o.seed, "seed of the initial weights")->capture_default_str();
  t->add_option("--train", o.train_tokens, "training token shard (llm.c format)")->required();
  t->add_option("--val", o.val_tokens, "validation token shard");
  t->add_option("--data-label", o.data_label,
                "what the training shard holds, written into each checkpoint's model_N.json (default: its file name)");
  t->add_option("--device", cli->device, "cpu or cuda (default: cuda when present)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  t->add_option("--attention", cli->attention, "forward attention: flash (blocked on the CPU) or naive")
      ->check(CLI::IsMember({"naive", "flash"}))
      ->capture_default_str();
  t->add_option("--deterministic", o.shape.deterministic,
                 "1: bit-reproducible runs (attention backward with a fixed dQ order); 0: the faster "
                 "Hopper attention backward (dQ summed by atomics)")
      ->capture_default_str();
  t->add_option("--head-rows", o.shape.head_rows,
                "CUDA: rows of LM-head logits computed at once (bf16; 16384 rows of GPT-2's padded "
                "vocabulary are 1.6 GB); fewer rows, less memory, a slightly slower head")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_flag("--profile", o.shape.profile,
              "CUDA: time each phase of a step with CUDA events and print ms per step by phase at the end "
              "(synchronises every step)");
  t->add_option("--batch", o.shape.batch, "windows per micro-batch")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--seqlen", o.shape.seqlen, "window length")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--total-batch", o.total_batch,
                "tokens per optimizer step (gradient accumulation; default batch x seqlen)");
  t->add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  t->add_option("--min-lr-fraction", o.min_lr_fraction, "final learning rate / peak (cosine)")->capture_default_str();
  t->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  t->add_option("--weight-decay", o.adam.weight_decay, "AdamW weight decay (matrices and embeddings)")
      ->capture_default_str();
  t->add_option("--beta1", o.adam.beta1)->capture_default_str();
  t->add_option("--beta2", o.adam.beta2)->capture_default_str();
  t->add_option("--grad-clip", o.grad_clip, "clip the global gradient norm to this (0: off)")->capture_default_str();
  t->add_option("--val-every", o.val_every, "validate every N steps (and after the last)")->capture_default_str();
  t->add_option("--val-tokens", o.val_max_tokens, "validation tokens at most")->capture_default_str();
  t->add_option("--out", o.out_dir, "folder for checkpoints (model_N.bin, model_N.safetensors, state_N.bin)");
  t->add_option("--checkpoint-every", o.checkpoint_every, "checkpoint every N steps (and after the last)");
  t->add_option("--resume", o.resume, "continue from this state_N.bin (its model_N.bin beside it)");
  t->add_option("--log", o.log_json, "JSON log: one object per line (start, steps, validations, summary)");
  t->add_option("--save-init", o.save_init, "write the initial weights here (llm.c fp32 .bin)");
  t->add_option("--dump-grads", o.dump_grads, "write the first step's gradients here (llm.c fp32 layout)");
  t->add_flag("--quiet", o.quiet, "no progress lines");
  t->callback([cli] { run_train(*cli); });
}

FLASHBOX_COMMAND(61, setup);

}  // namespace cmd_gpt2_train
}  // namespace flashbox::cli
