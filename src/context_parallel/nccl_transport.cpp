// The NCCL transport: this process is one rank of an ncclComm_t. Sends and receives are ncclSend /
// ncclRecv of raw bytes inside ncclGroupStart/End (so a rank's send to its successor and receive from
// its predecessor of one ring step progress together, without deadlock, for any world size), the
// collectives are ncclAllGather and ncclReduceScatter. No transport of our own: NCCL picks NVLink,
// PCIe or the network. NVLink SHARP/multicast stays off: NCCL_NVLS_ENABLE=0 is set by the launchers
// (bench/ring_bench.py), and flashbox_cp_nccl_comm_init (api.cpp) sets it where nobody has.
#include <cstdlib>
#include <string>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/transport.hpp"
#include "flashbox/context_parallel.h"

#ifdef FLASHBOX_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace flashbox::cp {

#ifdef FLASHBOX_HAVE_NCCL
namespace {

int nccl_fail(ncclResult_t r, const std::string &what) {
  return fail(FLASHBOX_CP_ERR_NCCL, what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")");
}

class NcclTransport final : public Transport {
 public:
  NcclTransport(ncclComm_t comm, int world, int rank) : comm_(comm), world_(world), rank_(rank) {}
  int world() const override { return world_; }
  int group_begin(int) override { return check(ncclGroupStart(), "ncclGroupStart"); }
  int send(int rank, const void *buf, size_t bytes, int peer, Stream s) override {
    if (int rc = own(rank)) return rc;
    return check(ncclSend(buf, bytes, ncclUint8, peer, comm_, cudaStream_t(s)), "ncclSend");
  }
  int recv(int rank, void *buf, size_t bytes, int peer, Stream s) override {
    if (int rc = own(rank)) return rc;
    return check(ncclRecv(buf, bytes, ncclUint8, peer, comm_, cudaStream_t(s)), "ncclRecv");
  }
  int group_end(int, Stream) override { return check(ncclGroupEnd(), "ncclGroupEnd"); }
  int all_gather(int rank, const void *send, void *recv, size_t bytes, Stream s) override {
    if (int rc = own(rank)) return rc;
    return check(ncclAllGather(send, recv, bytes, ncclUint8, comm_, cudaStream_t(s)), "ncclAllGather");
  }
  int reduce_scatter_sum(int rank, const float *send, float *recv, size_t count, Stream s) override {
    if (int rc = own(rank)) return rc;
    return check(ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, comm_, cudaStream_t(s)),
                 "ncclReduceScatter");
  }
  int flush() override { return 0; }

 private:
  int own(int rank) const {
    if (rank != rank_)
      return fail(FLASHBOX_ERR_INTERNAL, "nccl transport: rank " + std::to_string(rank) + " is not this process's (" +
                                             std::to_string(rank_) + ")");
    return 0;
  }
  static int check(ncclResult_t r, const char *what) { return r == ncclSuccess ? 0 : nccl_fail(r, what); }

  ncclComm_t comm_;
  int world_, rank_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(void *nccl_comm, int *rank_out) {
  ncclComm_t comm = static_cast<ncclComm_t>(nccl_comm);
  int world = 0, rank = 0;
  ncclResult_t r = ncclCommCount(comm, &world);
  if (r == ncclSuccess) r = ncclCommUserRank(comm, &rank);
  if (r != ncclSuccess) {
    nccl_fail(r, "ncclCommCount / ncclCommUserRank");
    return nullptr;
  }
  *rank_out = rank;
  return std::make_unique<NcclTransport>(comm, world, rank);
}

#else

std::unique_ptr<Transport> make_nccl_transport(void *, int *) {
  fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "this flashbox was built without NCCL (nccl.h / libnccl not found)");
  return nullptr;
}

#endif

}  // namespace flashbox::cp
