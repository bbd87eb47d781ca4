// GPT-2 training: the interface one training step needs, implemented by the fp32 CPU trainer
// (cpu_trainer.cpp) and the bf16 CUDA trainer (cuda_trainer.cu). The loop around it (train_loop.cpp)
// owns the schedule, data, logging and checkpoints, so both devices train the same way.
//
// A step: zero_grad(); forward_backward() once per micro-batch (gradient accumulation: each adds
// d(mean loss of its batch) / d(theta) * grad_scale); finish_step() (the gradient norm, clipping and
// AdamW), whose loss and norm step_stats() returns once the device has them. Parameters, gradients
// and AdamW's moments are fp32 on both devices (the CUDA trainer keeps a bf16 copy of the parameters
// for its matrix products).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "flashbox/flashbox.h"
#include "gpt2/model/weights.hpp"
#include "gpt2/train/clip_factor.hpp"

namespace flashbox::gpt2 {

struct AdamW {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// What a finished step reports: the mean loss of its micro-batches and the gradients' L2 norm (before
// clipping).
struct StepStats {
  double loss = 0.0, grad_norm = 0.0;
};

// Weight decay applies to the matrices and embeddings (2-D tensors), not to biases or LayerNorm
// parameters (nanoGPT's and llm.c's grouping).
bool decays(Param p);

class Gpt2Trainer {
 public:
  virtual ~Gpt2Trainer() = default;
  // B windows of T: inputs and targets are B*T ids each (targets[i] is the token after inputs[i]).
  // Adds grad_scale * d(mean cross-entropy)/d(params) to the gradients. May return before the
  // device has finished (the CUDA trainer queues the work); the loss comes from mean_loss().
  virtual void forward_backward(const int32_t *inputs, const int32_t *targets, float grad_scale) = 0;
  // Mean of the micro-batches' mean losses since zero_grad() (waits for the device).
  virtual double mean_loss() = 0;
  // Mean cross-entropy of one batch, no gradients.
  virtual double eval_loss(const int32_t *inputs, const int32_t *targets) = 0;
  virtual void zero_grad() = 0;
  // L2 norm of all gradients (deterministic reduction order).
  virtual double grad_norm() = 0;
  // One AdamW update at 1-based step t; the gradients are multiplied by grad_mult first (clipping).
  virtual void adam_step(const AdamW &opt, float lr, float grad_mult, int64_t t) = 0;
  // The end of step t: the gradient norm, clipping to grad_clip, AdamW. This default runs the calls
  // above in order, waiting for each (the CPU trainer). The CUDA trainer queues all of it and returns
  // at once (the clipping factor computed on the device from the norm), so the loop can queue the next
  // step's micro-batches before it asks step_stats() for this one: the GPU never waits for the host
  // between steps.
  virtual void finish_step(const AdamW &opt, float lr, float grad_clip, int64_t t) {
    finished_.loss = mean_loss();
    finished_.grad_norm = grad_norm();
    adam_step(opt, lr, clip_factor(finished_.grad_norm, grad_clip), t);
  }
  // The loss and norm of the last finish_step() (waits for that step).
  virtual StepStats step_stats() { return finished_; }
  // Whether finish_step() returns before the step is done (then the loop reads a step's numbers after
  // queueing the next one; a trainer that finishes at once reports each step as it ends).
  virtual bool queues_steps() const { return false; }

  // Host copies in Gpt2Weights' layout (llm.c's order, unpadded vocabulary).
  virtual void get_params(Gpt2Weights &out) = 0;
  virtual void get_grads(Gpt2Weights &out) = 0;
  virtual void get_moments(Gpt2Weights &m, Gpt2Weights &v) = 0;
  virtual void set_moments(const Gpt2Weights &m, const Gpt2Weights &v) = 0;

  virtual const char *device_name() const = 0;

 protected:
  StepStats finished_;
};

// Batch shape and attention implementation of the forward (the backward is the device's own:
// blocked on the CPU, flash on CUDA).
struct TrainerShape {
  int batch = 4, seqlen = 64;
  flashbox_impl attention = FLASHBOX_FLASH;
  // CUDA: attention's backward in deterministic mode (a fixed dQ summation order; on sm_90 that is
  // the sm80 kernel family); off, the Hopper backward, whose dQ is summed by atomic adds.
  bool deterministic = true;
  // CUDA: rows of LM-head logits alive at once (bf16, padded vocabulary): 16,384 rows are 1.6 GB;
  // with tuned products the head's three products took 4.49 ms for a B 16 x T 1024 batch in one
  // chunk against 4.84 in four of 4,096 (H200). Fewer rows, less memory.
  int64_t head_rows = 16384;
  // CUDA: time each phase of a step with CUDA events and print the table at the end (phase_clock.cuh).
  bool profile = false;
};

std::unique_ptr<Gpt2Trainer> make_cpu_trainer(const Gpt2Weights &init, const TrainerShape &shape);
// Throws Gpt2Error when this build has no CUDA or no GPU is present.
std::unique_ptr<Gpt2Trainer> make_cuda_trainer(const Gpt2Weights &init, const TrainerShape &shape);

}  // namespace flashbox::gpt2
