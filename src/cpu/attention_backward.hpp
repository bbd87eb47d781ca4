// Pieces the two CPU backward levels share (src/cpu/attention_backward*.cpp). Arithmetic is fp32;
// inputs are read in their dtype and gradients rounded to it once, at the end.
#pragma once
#include <cstdint>
#include <vector>

#include "core/masks.hpp"
#include "core/problem.hpp"

namespace flashbox::cpu::backward {

// Sizes and derived constants of one validated backward call, copied from the API's GradProblem.
struct Problem {
  const detail::GradProblem *g;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, group;
  int64_t head_dim_v;    // V's, O's, dO's and dV's head dim; Q, K, dQ and dK have head_dim
  float scale;           // the softmax scale (resolved by the API)
  core::ScoreMods mods;  // mask (causal folded in as window_right = 0) and score transforms
};
Problem make_problem(const detail::GradProblem &g);

// The keys query row i sees: [key_begin, key_end) (empty when key_end <= key_begin).
int64_t key_begin(const Problem &p, int64_t i);
int64_t key_end(const Problem &p, int64_t i);
// The query rows that see key j: [query_begin, query_end).
int64_t query_begin(const Problem &p, int64_t j);
int64_t query_end(const Problem &p, int64_t j);
// The transformed score (softcap, then ALiBi) of row i, key j from s = scale * q.k, and in *grad
// the softcap's derivative there (1 without softcap).
float transformed_score(const Problem &p, float s, float slope, int64_t i, int64_t j, float *grad);

// D_i = Σ_d dO_id · O_id (d < head_dim_v) for every (batch, query head, row) into `rowsum` [batch, heads_q, seqlen_q]:
// the term that makes dS = P ∘ (dP − D) the softmax's Jacobian applied to dP (FlashAttention-2 §3.2).
void compute_rowsum(const Problem &p, float *rowsum);

// Rows [r0, r0 + n) of head h of batch b of a strided tensor as dense fp32 [n, dim] (dim: head_dim
// for q, k, dq, dk; head_dim_v for v, o, dout, dv).
void load_rows(const Problem &p, const void *base, const int64_t *stride, int64_t b, int64_t h, int64_t r0, int64_t n,
               int64_t dim, float *dst);
// Writes dense fp32 rows [n, dim], each multiplied by `mul`, rounded to the call's dtype.
void store_rows(const Problem &p, void *base, const int64_t *stride, int64_t b, int64_t h, int64_t r0, int64_t n,
                int64_t dim, const float *src, float mul);

int naive(const Problem &p);    // attention_backward_naive.cpp
int blocked(const Problem &p);  // attention_backward_blocked.cpp

// Threads a call uses (one task per (batch, kv head)), and each level's per-thread scratch in floats.
int threads_for(const Problem &p);
int64_t naive_thread_elements(const Problem &p);
int64_t blocked_thread_elements(const Problem &p);

// Scratch buffers of a call, allocated on the calling thread (the scratch counters are per thread)
// before any output is written, and released (and counted as released) when it goes out of scope.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  ~Scratch();
  // False (with nothing allocated) when the host is out of memory.
  bool allocate(std::vector<float> &buf, int64_t elements);

 private:
  int64_t bytes_ = 0;
};

}  // namespace flashbox::cpu::backward

namespace flashbox::cpu::backward {

// Bytes of host scratch a call with these (validated) arguments allocates: what
// flashbox_attention_backward_workspace_size reports for device = cpu.
int64_t scratch_bytes(const detail::GradProblem &g);

}  // namespace flashbox::cpu::backward
