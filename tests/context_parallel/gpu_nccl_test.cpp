// The NCCL transport on one GPU: a communicator of one rank (NCCL refuses two ranks on one GPU, so
// this is all one GPU can check; several ranks need nvidia-h200-x2/x4: bench/ring_bench.py). With one
// rank the ring makes no transfer, and the all-gather variant runs ncclAllGather and ncclReduceScatter
// through the same code as N ranks. Skipped without a GPU or without NCCL, with the reason.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "context_parallel/ring_case.hpp"
#include "cuda/device_attention.hpp"

namespace flashbox::test {
namespace {

class NcclOneRank : public ::testing::TestWithParam<cp::Variant> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    if (!flashbox_cp_have_nccl()) GTEST_SKIP() << "built without NCCL (nccl.h / libnccl not found): NCCL test not run";
    uint8_t id[FLASHBOX_CP_NCCL_ID_BYTES];
    ASSERT_EQ(flashbox_cp_nccl_unique_id(id), 0) << cp::last_error();
    ASSERT_EQ(flashbox_cp_nccl_comm_init(&comm_, 1, 0, id), 0) << cp::last_error();
  }
  void TearDown() override {
    if (comm_) EXPECT_EQ(flashbox_cp_nccl_comm_destroy(comm_), 0) << cp::last_error();
  }
  void *comm_ = nullptr;
};

template <typename T>
void *upload(std::vector<T> &h) {
  void *d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T>
void download(std::vector<T> &h, void *d) {
  cudaMemcpy(h.data(), d, h.size() * sizeof(T), cudaMemcpyDeviceToHost);
  cudaFree(d);
}

TEST_P(NcclOneRank, ForwardAndBackwardEqualTheReference) {
  for (int causal : {0, 1}) {
    const cp::Options opt{cp::Layout::ZIGZAG, GetParam()};
    const AttentionCase c{.batch = 1,
                          .seqlen_q = 256,
                          .seqlen_k = 256,
                          .heads_q = 4,
                          .heads_kv = 2,
                          .head_dim = 128,
                          .dtype = FLASHBOX_BFLOAT16,
                          .causal = causal,
                          .device = FLASHBOX_CUDA};
    RingForwardCase f(c, 1, opt);
    flashbox_attention_args a = f.args[0];
    a.q = upload(f.q[0]), a.k = upload(f.k[0]), a.v = upload(f.v[0]), a.o = upload(f.o[0]);
    a.lse = static_cast<float *>(upload(f.lse[0]));
    ASSERT_EQ(cp::forward(a, static_cast<ncclComm_t>(comm_), nullptr, opt), 0) << cp::last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const void *p : {a.q, a.k, a.v}) cudaFree(const_cast<void *>(p));
    download(f.o[0], a.o);
    download(f.lse[0], a.lse);
    f.collect();
    const Comparison r = f.data().compare();
    EXPECT_LT(r.rel_error, 1e-2) << f.name();
    EXPECT_FALSE(r.has_nan) << f.name();

    RingBackwardCase b(c, 1, opt);
    flashbox_attention_grad_args g = b.grads[0];
    g.fwd.q = upload(b.q[0]), g.fwd.k = upload(b.k[0]), g.fwd.v = upload(b.v[0]), g.fwd.o = upload(b.o[0]);
    g.fwd.lse = static_cast<float *>(upload(b.lse[0]));
    g.dout = upload(b.dout[0]), g.dq = upload(b.dq[0]), g.dk = upload(b.dk[0]), g.dv = upload(b.dv[0]);
    ASSERT_EQ(cp::backward(g, static_cast<ncclComm_t>(comm_), nullptr, opt), 0) << cp::last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const void *p : {g.fwd.q, g.fwd.k, g.fwd.v, static_cast<const void *>(g.fwd.o), g.dout})
      cudaFree(const_cast<void *>(p));
    cudaFree(g.fwd.lse);
    download(b.dq[0], g.dq), download(b.dk[0], g.dk), download(b.dv[0], g.dv);
    b.collect();
    b.data().expect_close();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, NcclOneRank, ::testing::Values(cp::Variant::RING, cp::Variant::ALL_GATHER),
                         [](const auto &info) { return std::string(variant_label(info.param)); });

}  // namespace
}  // namespace flashbox::test
