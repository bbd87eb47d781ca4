// flashbox context parallelism, C++ entry: ring (or all-gather) attention of one rank over an NCCL
// communicator and a CUDA stream. A thin layer over context_parallel.h; see there for the contract.
//
//   flashbox::cp::forward(shard, comm, stream, {.layout = flashbox::cp::Layout::ZIGZAG});
//   flashbox::cp::backward(grad_shard, comm, stream);
//
// The header needs neither nccl.h nor cuda_runtime.h: ncclComm_t and cudaStream_t are declared here
// exactly as those headers declare them, so including either one as well is fine.
#pragma once
#include <cstdint>

#include "flashbox/context_parallel.h"
#include "flashbox/flashbox.h"

struct ncclComm;
typedef struct ncclComm *ncclComm_t;
struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;

namespace flashbox::cp {

enum class Layout : int { CONTIGUOUS = FLASHBOX_CP_CONTIGUOUS, ZIGZAG = FLASHBOX_CP_ZIGZAG };
enum class Variant : int { RING = FLASHBOX_CP_RING, ALL_GATHER = FLASHBOX_CP_ALL_GATHER };

struct Options {
  Layout layout = Layout::ZIGZAG;
  Variant variant = Variant::RING;
};

// One rank's forward: shard.stream is replaced by `stream`. Returns 0 or an error code.
inline int forward(flashbox_attention_args shard, ncclComm_t comm, cudaStream_t stream, Options opt = {}) {
  shard.stream = stream;
  return flashbox_cp_forward(&shard, flashbox_cp_layout(opt.layout), flashbox_cp_variant(opt.variant), comm);
}

// One rank's backward (shard.fwd.o / lse: the context-parallel forward's outputs).
inline int backward(flashbox_attention_grad_args shard, ncclComm_t comm, cudaStream_t stream, Options opt = {}) {
  shard.fwd.stream = stream;
  return flashbox_cp_backward(&shard, flashbox_cp_layout(opt.layout), flashbox_cp_variant(opt.variant), comm);
}

// `world` simulated ranks in this process (CPU, or one GPU), the same algorithm over a loopback transport.
inline int forward_simulated(const flashbox_attention_args *shards, int world, Options opt = {}) {
  return flashbox_cp_forward_simulated(shards, world, flashbox_cp_layout(opt.layout), flashbox_cp_variant(opt.variant));
}
inline int backward_simulated(const flashbox_attention_grad_args *shards, int world, Options opt = {}) {
  return flashbox_cp_backward_simulated(shards, world, flashbox_cp_layout(opt.layout),
                                        flashbox_cp_variant(opt.variant));
}

inline int64_t global_token(Layout layout, int world, int rank, int64_t tokens_per_rank, int64_t local) {
  return flashbox_cp_global_token(flashbox_cp_layout(layout), world, rank, tokens_per_rank, local);
}

inline const char *last_error() { return flashbox_cp_last_error(); }

}  // namespace flashbox::cp
