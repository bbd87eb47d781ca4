// One rank's part of a context-parallel forward or backward, as a program of phases that a driver
// runs for every rank in lockstep:
//
//   start()                                     scratch, K/V packed into the send buffer
//   for s in 0 .. steps():   post_round(s)      transfers of round s (K/V for step s+1, dK/dV, ...)
//                            [transport.flush() once every rank has posted]
//                            after_round(s)     an event marks the round's end on the comm stream
//                            compute(s)         (s < steps) local attention calls of step s
//   finish()                                    results into the caller's outputs
//
// With NCCL each process runs its one rank through these phases; the loopback runs all ranks of one
// process phase by phase. The code of a rank is the same in both cases. Compute runs on the caller's
// stream, transfers on a stream of the rank's own; events order the two (docs/context-parallel.md
// has the dependency table), so a round's transfers overlap the step computed beside them.
#pragma once
#include <memory>
#include <vector>

#include "context_parallel/device_ops.hpp"
#include "context_parallel/transport.hpp"
#include "flashbox/context_parallel.h"

namespace flashbox::cp {

class RankProgram {
 public:
  virtual ~RankProgram() = default;
  virtual int steps() const = 0;
  virtual int start() = 0;
  virtual int post_round(int s) = 0;
  virtual int after_round(int s) = 0;
  virtual int compute(int s) = 0;
  virtual int finish() = 0;
};

struct RankSetup {
  DeviceOps *ops;
  Transport *transport;
  int rank, world;
  flashbox_cp_layout layout;
  flashbox_cp_variant variant;
};

// The program for one rank's forward (args: the local shard) or backward (grad: the local shard).
std::unique_ptr<RankProgram> make_forward_program(const RankSetup &r, const flashbox_attention_args &args);
std::unique_ptr<RankProgram> make_backward_program(const RankSetup &r, const flashbox_attention_grad_args &grad);

// Runs the programs of the ranks this process holds (one for NCCL, all for the loopback).
int run_programs(std::vector<std::unique_ptr<RankProgram>> &ranks, Transport &transport);

}  // namespace flashbox::cp
