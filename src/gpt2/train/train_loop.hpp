// `flashbox gpt2 train`: the training loop around a Gpt2Trainer (either device). Data are llm.c token
// shards read sequentially: micro-batch k (counting from 0 over the whole run) is the B*T tokens at
// offset (k mod K) * B*T of the training shard, K = (tokens - 1) / (B*T), its targets the same
// window shifted by one. A PyTorch run that wants the same batches needs nothing more than this rule.
// The learning rate warms up linearly over `warmup` steps, then follows a cosine down to
// lr * min_lr_fraction at the last step.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "gpt2/train/trainer.hpp"

namespace flashbox::gpt2 {

struct TrainOptions {
  std::string config = "tiny";  // seeded weights of this config, unless init_weights is set
  std::string init_weights;     // a checkpoint to start from instead
  uint64_t seed = 1337;
  flashbox_device device = FLASHBOX_CPU;
  TrainerShape shape;
  int64_t total_batch = 0;  // tokens per optimizer step; 0: one micro-batch (B*T)
  int64_t steps = 10;
  float lr = 6e-4f, min_lr_fraction = 0.1f, grad_clip = 1.0f;
  int64_t warmup = 0;
  AdamW adam;
  std::string train_tokens, val_tokens;
  std::string data_label;            // what the training shard is, for the checkpoints' model_N.json
  int64_t val_every = 0;             // 0: only after the last step
  int64_t val_max_tokens = 1 << 20;  // validation uses at most this many tokens (whole micro-batches)
  int64_t checkpoint_every = 0;      // 0: only after the last step (when out_dir is set)
  std::string out_dir;  // checkpoints: model_NNNNNN.bin, .safetensors, .json (provenance), state_NNNNNN.bin
  std::string resume;                // a state_NNNNNN.bin to continue from
  std::string log_json;              // one JSON object per line: steps, validations, the summary
  std::string save_init;             // write the initial weights (llm.c fp32) here before training
  std::string dump_grads;            // write the first step's gradients (llm.c fp32 layout) here
  bool quiet = false;
};

struct TrainSummary {
  int64_t steps = 0, tokens = 0;
  double first_loss = 0.0, last_loss = 0.0, val_loss = -1.0;
  double tokens_per_second = 0.0;  // steps after the first (start-up excluded)
  double mfu = 0.0;                // fraction of the device's dense bf16 peak (CUDA only)
};

float learning_rate(const TrainOptions &o, int64_t step);  // step is 1-based
TrainSummary run_training(const TrainOptions &o, const std::function<void(const std::string &)> &print);

// Optimizer state beside a checkpoint: magic, version, step, then AdamW's m and v (fp32, llm.c order).
void write_optimizer_state(const std::string &path, int64_t step, const Gpt2Weights &m, const Gpt2Weights &v);
int64_t read_optimizer_state(const std::string &path, Gpt2Weights &m, Gpt2Weights &v);

}  // namespace flashbox::gpt2
