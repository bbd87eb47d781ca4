/* flashbox context parallelism: attention over a sequence sharded across ranks (GPUs), in C.
 *
 * Each rank holds one shard of S tokens of q, k, v (S = seqlen_q = seqlen_k of its args) and gets the
 * O and LSE of its own queries against the whole sequence of world * S tokens. The local attention
 * is flashbox_attention_forward / flashbox_attention_backward; partial results are combined exactly
 * by their LSEs (docs/context-parallel.md).
 *
 * Layouts (which global tokens a rank's shard holds; the caller shards, flashbox_cp_global_token says
 * where local token t comes from):
 *   CONTIGUOUS  rank r holds tokens [r*S, (r+1)*S)
 *   ZIGZAG      the sequence in 2*world chunks of S/2 tokens; rank r holds chunks r and 2*world-1-r,
 *               in that order (balances the causal work; S must be even)
 * Variants (how K/V reach every rank):
 *   RING        K/V shards travel around the ring (NCCL send/recv), the next one in flight while the
 *               current one is computed; the backward's dK/dV travel with them
 *   ALL_GATHER  one all-gather of K/V (and one reduce-scatter of dK/dV): for short shards, where the
 *               ring's world-1 latency-bound steps cost more than the extra memory
 *
 * Every function returns 0 or a FLASHBOX_ERR_* code (flashbox.h) or FLASHBOX_CP_ERR_NCCL; the message
 * of this thread's last failure is flashbox_cp_last_error(). Outputs are written only after every
 * local call succeeded; nothing is written on a failed validation. NCCL is optional at build time:
 * without it the NCCL entry points fail with FLASHBOX_ERR_UNSUPPORTED_IMPL. */
#ifndef FLASHBOX_CONTEXT_PARALLEL_H
#define FLASHBOX_CONTEXT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "flashbox/flashbox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FLASHBOX_CP_CONTIGUOUS = 0, FLASHBOX_CP_ZIGZAG = 1 } flashbox_cp_layout;
typedef enum { FLASHBOX_CP_RING = 0, FLASHBOX_CP_ALL_GATHER = 1 } flashbox_cp_variant;

enum { FLASHBOX_CP_ERR_NCCL = 32 /* an NCCL call failed; the message has ncclGetErrorString */ };

/* One rank's call. `shard` describes the local shard exactly as for flashbox_attention_forward
 * (seqlen_q == seqlen_k == S, device CUDA, its stream is the compute stream); lse may be NULL.
 * nccl_comm is an ncclComm_t of `world` ranks whose rank r holds shard r. */
FLASHBOX_API int flashbox_cp_forward(const flashbox_attention_args *shard, flashbox_cp_layout layout,
                                     flashbox_cp_variant variant, void *nccl_comm);
/* Backward: shard->fwd.o and shard->fwd.lse (required) are the context-parallel forward's outputs
 * (the global O and LSE of this rank's queries); dq/dk/dv of the local shard are written. */
FLASHBOX_API int flashbox_cp_backward(const flashbox_attention_grad_args *shard, flashbox_cp_layout layout,
                                      flashbox_cp_variant variant, void *nccl_comm);

/* The same algorithm with `world` simulated ranks in this process (a loopback transport instead of
 * NCCL): shards[r] is rank r's call. CPU (device CPU, every rank in turn) or one GPU (device CUDA;
 * each rank's compute stream is its args' stream, its transfers run on a stream of its own). */
FLASHBOX_API int flashbox_cp_forward_simulated(const flashbox_attention_args *shards, int world,
                                               flashbox_cp_layout layout, flashbox_cp_variant variant);
FLASHBOX_API int flashbox_cp_backward_simulated(const flashbox_attention_grad_args *shards, int world,
                                                flashbox_cp_layout layout, flashbox_cp_variant variant);

/* Global position of local token `local` of rank `rank` (world ranks, S tokens each); -1 if invalid. */
FLASHBOX_API int64_t flashbox_cp_global_token(flashbox_cp_layout layout, int world, int rank, int64_t tokens_per_rank,
                                              int64_t local);

/* NCCL set-up for callers without their own communicator (the Python entry): an ncclUniqueId is
 * FLASHBOX_CP_NCCL_ID_BYTES opaque bytes made on one rank and handed to every rank; comm_init binds
 * the communicator to the current CUDA device. */
#define FLASHBOX_CP_NCCL_ID_BYTES 128
FLASHBOX_API int flashbox_cp_nccl_unique_id(uint8_t id[FLASHBOX_CP_NCCL_ID_BYTES]);
FLASHBOX_API int flashbox_cp_nccl_comm_init(void **nccl_comm, int world, int rank,
                                            const uint8_t id[FLASHBOX_CP_NCCL_ID_BYTES]);
FLASHBOX_API int flashbox_cp_nccl_comm_destroy(void *nccl_comm);
FLASHBOX_API int flashbox_cp_have_nccl(void); /* 1 when built with NCCL */

FLASHBOX_API const char *flashbox_cp_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHBOX_CONTEXT_PARALLEL_H */
