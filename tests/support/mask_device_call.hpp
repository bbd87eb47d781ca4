// The mask-family GPU tests' shared pieces (tests/cuda/mask_sm80_test.cpp, tests/sm90/sm90_mask_test.cpp):
// document ids (sorted runs or scattered), queries and keys cut at the same fractions,
// a random block mask of dense kinds, and DeviceCall: a MaskData's inputs on the device, the
// forward with poisoned and guard-framed outputs copied back, and the backward from the reference's
// O and LSE or from given ones (a GPU forward's); an optional edit turns each call's args and ext
// into another call of the same mask (the mask-mod tests: documents as data into a mod).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"
#include "support/device_buffers.hpp"
#include "support/mask_case.hpp"

namespace flashbox::test::mask_gpu {

namespace core = flashbox::core;

// Document ids of `rows` tokens per batch entry: sorted runs of random lengths, or ids at random.
inline std::vector<int32_t> document_ids(std::mt19937_64 &rng, int64_t batch, int64_t rows, int docs, bool scattered) {
  std::vector<int32_t> ids(size_t(batch * rows));
  std::uniform_int_distribution<int> pick(0, docs - 1);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> cuts;
    for (int d = 1; d < docs; ++d) cuts.push_back(std::uniform_int_distribution<int64_t>(0, rows)(rng));
    std::sort(cuts.begin(), cuts.end());
    for (int64_t i = 0; i < rows; ++i)
      ids[size_t(b * rows + i)] =
          scattered ? pick(rng) : int32_t(std::upper_bound(cuts.begin(), cuts.end(), i) - cuts.begin());
  }
  return ids;
}

// Queries and keys cut at the same fractions of their lengths (one packed layout).
inline void same_documents(MaskCase &c, std::mt19937_64 &rng, int docs, bool scattered = false) {
  c.docs_q = document_ids(rng, c.batch, c.seqlen_q, docs, scattered);
  c.docs_k.resize(size_t(c.batch * c.seqlen_k));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < c.seqlen_k; ++j)
      c.docs_k[size_t(b * c.seqlen_k + j)] = c.docs_q[size_t(b * c.seqlen_q + j * c.seqlen_q / c.seqlen_k)];
}

// A random block mask: each pair skipped with probability `skip`, else full with probability `full`.
inline BlockSpec random_blocks(std::mt19937_64 &rng, const MaskCase &c, int64_t qb, int64_t kb, int64_t batches,
                               int64_t heads, double skip, double full) {
  BlockSpec s;
  s.q_block = qb, s.kv_block = kb, s.batches = batches, s.heads = heads;
  const int64_t n = batches * heads * ((c.seqlen_q + qb - 1) / qb) * ((c.seqlen_k + kb - 1) / kb);
  std::uniform_real_distribution<double> u(0, 1);
  s.kinds.resize(size_t(n));
  for (uint8_t &k : s.kinds) {
    const double x = u(rng);
    k = x < skip ? core::kBlockSkipped : x < skip + (1 - skip) * full ? core::kBlockFull : core::kBlockPartial;
  }
  s.full_lists = full > 0;
  return s;
}

// A MaskData's host inputs on the device, and an args / ext pair that points at them; `edit`, when
// given, rewrites the args and ext of every call before it runs.
class DeviceCall {
 public:
  using Edit = std::function<void(flashbox_attention_args &, flashbox_attention_ext &)>;
  explicit DeviceCall(MaskData &md, Edit edit = {}) : md_(md), edit_(std::move(edit)) {
    const MaskCase &c = md.config();
    const int64_t es = c.dtype == FLASHBOX_FLOAT32 ? 4 : 2;
    const int64_t rows_q = c.varlen() ? c.seqlen_q : c.batch * c.seqlen_q;
    const int64_t rows_k = c.varlen() ? c.seqlen_k : c.batch * c.seqlen_k;
    q_bytes_ = size_t(rows_q * c.heads_q * c.head_dim * es);
    k_bytes_ = size_t(rows_k * c.heads_kv * c.head_dim * es);
    e_ = md.ext();
    const size_t batch4 = size_t(c.batch) * 4;
    e_.alibi_slopes = static_cast<const float *>(up(e_.alibi_slopes, md.slopes().size() * 4));
    e_.cu_seqlens_q = static_cast<const int32_t *>(up(e_.cu_seqlens_q, md.cu_q().size() * 4));
    e_.cu_seqlens_k = static_cast<const int32_t *>(up(e_.cu_seqlens_k, md.cu_k().size() * 4));
    e_.seqused_q = static_cast<const int32_t *>(up(e_.seqused_q, batch4));
    e_.seqused_k = static_cast<const int32_t *>(up(e_.seqused_k, batch4));
    e_.document_ids_q = static_cast<const int32_t *>(up(e_.document_ids_q, c.docs_q.size() * 4));
    e_.document_ids_k = static_cast<const int32_t *>(up(e_.document_ids_k, c.docs_k.size() * 4));
    e_.prefix_lengths = static_cast<const int32_t *>(up(e_.prefix_lengths, batch4));
    e_.learnable_sink = static_cast<const float *>(up(e_.learnable_sink, size_t(c.heads_q) * 4));
    if (e_.dsink) e_.dsink = static_cast<float *>(mem_.alloc(size_t(c.heads_q) * 4));
    if (e_.block_mask) {
      bm_ = *e_.block_mask;
      const int32_t **tables[8] = {&bm_.kv_num_blocks, &bm_.kv_indices, &bm_.full_kv_num_blocks, &bm_.full_kv_indices,
                                   &bm_.q_num_blocks,  &bm_.q_indices,  &bm_.full_q_num_blocks,  &bm_.full_q_indices};
      for (int i = 0; i < 8; ++i)
        *tables[i] = static_cast<const int32_t *>(up(*tables[i], md.block_table(i).size() * 4));
      e_.block_mask = &bm_;
    }
    q_ = up(md.forward_args(FLASHBOX_AUTO).q, q_bytes_);
    const flashbox_attention_args host = md.forward_args(FLASHBOX_AUTO);
    k_ = up(host.k, k_bytes_), v_ = up(host.v, k_bytes_);
  }
  bool ok() const { return ok_; }
  flashbox_attention_ext &ext() { return e_; }
  // A host buffer copied into device memory the call owns (null for null).
  void *up(const void *host, size_t bytes) {
    if (!host) return nullptr;
    void *p = mem_.alloc(bytes);
    if (p && bytes) ok_ &= cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
    ok_ &= p != nullptr;
    return p;
  }

  // The forward on the GPU: o and lse poisoned as MaskData poisons them, copied back into it.
  // Returns the call's code; *kernel the kernel's name.
  int forward(std::string *kernel) {
    flashbox_attention_args a = md_.forward_args(FLASHBOX_AUTO);
    const size_t o_bytes = md_.o_bytes().size(), lse_bytes = md_.lse().size() * 4;
    GuardedOutput o(o_bytes), lse(lse_bytes);
    if (!o.raw || !lse.raw) return -1;
    cudaMemcpy(o.ptr(), a.o, o_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(lse.ptr(), a.lse, lse_bytes, cudaMemcpyHostToDevice);
    void *host_o = a.o;
    float *host_lse = a.lse;
    a.device = FLASHBOX_CUDA;
    a.q = q_, a.k = k_, a.v = v_, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
    flashbox_attention_ext e = e_;
    if (edit_) edit_(a, e);
    const int rc = flashbox_attention_forward_ext(&a, &e);
    *kernel = flashbox_last_kernel();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(o.back(host_o)) << "a guard byte around o changed (write out of bounds)";
    EXPECT_TRUE(lse.back(host_lse)) << "a guard byte around lse changed (write out of bounds)";
    return rc;
  }

  // The backward on the GPU from the reference's O and LSE; dq, dk, dv copied back into MaskData.
  // o_host / lse_host (optional): the O and LSE the backward reads instead of the reference's (a GPU
  // forward's, copied before grad_args rewrites MaskData's buffers with the reference).
  int backward(int deterministic, std::string *kernel, const std::vector<uint8_t> *o_host = nullptr,
               const std::vector<float> *lse_host = nullptr) {
    flashbox_attention_grad_args g = md_.grad_args(FLASHBOX_AUTO, deterministic);
    if (o_host) g.fwd.o = const_cast<uint8_t *>(o_host->data());
    if (lse_host) g.fwd.lse = const_cast<float *>(lse_host->data());
    const size_t o_bytes = md_.o_bytes().size(), lse_bytes = md_.lse().size() * 4;
    DeviceMem mem;
    void *o = mem.alloc(o_bytes), *lse = mem.alloc(lse_bytes), *dout = mem.alloc(o_bytes);
    GuardedOutput dq(q_bytes_), dk(k_bytes_), dv(k_bytes_);
    if (!o || !lse || !dout || !dq.raw || !dk.raw || !dv.raw) return -1;
    cudaMemcpy(o, g.fwd.o, o_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(lse, g.fwd.lse, lse_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(dout, g.dout, o_bytes, cudaMemcpyHostToDevice);
    void *host_dq = g.dq, *host_dk = g.dk, *host_dv = g.dv;
    g.fwd.device = FLASHBOX_CUDA;
    g.fwd.q = q_, g.fwd.k = k_, g.fwd.v = v_, g.fwd.o = o, g.fwd.lse = static_cast<float *>(lse);
    g.dout = dout, g.dq = dq.ptr(), g.dk = dk.ptr(), g.dv = dv.ptr();
    flashbox_attention_ext e = e_;
    if (edit_) edit_(g.fwd, e);
    const int rc = flashbox_attention_backward_ext(&g, &e);
    *kernel = flashbox_last_kernel();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(dq.back(host_dq)) << "a guard byte around dq changed";
    EXPECT_TRUE(dk.back(host_dk)) << "a guard byte around dk changed";
    EXPECT_TRUE(dv.back(host_dv)) << "a guard byte around dv changed";
    return rc;
  }

 private:
  MaskData &md_;
  Edit edit_;
  DeviceMem mem_;
  flashbox_attention_ext e_{};
  flashbox_block_mask bm_{};
  void *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
  size_t q_bytes_ = 0, k_bytes_ = 0;
  bool ok_ = true;
};

}  // namespace flashbox::test::mask_gpu
