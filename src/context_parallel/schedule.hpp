// Which local attention calls one rank makes, and on which K/V (pure arithmetic, no device).
//
// A rank's shard is S tokens: one chunk (CONTIGUOUS) or two chunks of C = S/2 (ZIGZAG: global chunks
// r and 2N-1-r). Every call is one of three kinds so that flashbox's bottom-right causal mask is the
// global one: FULL (every query sees every key: non-causal, or all keys before all queries), CAUSAL
// with q_len == kv_len on the same global positions (the diagonal), or skipped (no call). In the
// all-gather variant a causal call may also have kv_len > q_len: keys [0, end) in global order and
// queries the last q_len of them, which bottom-right alignment masks exactly.
//
// Ring, step s, K/V of src = (rank - s) mod N:
//   non-causal              FULL  q [0, S) x kv [0, S)
//   causal, src == rank     CAUSAL q [0, S) x kv [0, S)   (zigzag too: chunk r sees itself diagonally,
//                                                          chunk 2N-1-r sees chunk r fully and itself)
//   contiguous, src < rank  FULL  q [0, S) x kv [0, S);   src > rank: nothing
//   zigzag, src < rank      FULL  q [0, S) x kv [0, C)    (both query chunks see chunk src, neither
//                                                          sees chunk 2N-1-src)
//   zigzag, src > rank      FULL  q [C, S) x kv [0, S)    (chunk 2N-1-r sees both, chunk r neither)
// so with zigzag every step after the first is S*C query-key pairs, the same on every rank.
#pragma once
#include <cstdint>
#include <vector>

#include "flashbox/context_parallel.h"

namespace flashbox::cp {

struct Block {
  int64_t q_begin, q_len;    // local query rows
  int64_t kv_begin, kv_len;  // rows of the K/V buffer the call reads
  bool causal;               // bottom-right causal (flashbox's mask), else full
};

// Local calls of `rank` at ring step `step` (K/V of rank (rank - step) mod world).
std::vector<Block> ring_blocks(flashbox_cp_layout layout, bool causal, int world, int rank, int step, int64_t S);

// All-gather variant: K/V of all ranks reordered into global order ([0, world*S) tokens).
std::vector<Block> all_gather_blocks(flashbox_cp_layout layout, bool causal, int world, int rank, int64_t S);

// Chunks per rank and their length: (1, S) contiguous, (2, S/2) zigzag.
int chunks_per_rank(flashbox_cp_layout layout);
// Global chunk index of local chunk `half` (0 or 1) of `rank`; chunk length is S / chunks_per_rank.
int64_t global_chunk(flashbox_cp_layout layout, int world, int rank, int half);
// Global token of local token `local`, or -1 when an argument is out of range.
int64_t global_token(flashbox_cp_layout layout, int world, int rank, int64_t S, int64_t local);

}  // namespace flashbox::cp
