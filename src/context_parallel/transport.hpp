// How K/V and dK/dV move between ranks. The algorithm (rank_program.cpp) is written against this
// interface only, so the same code runs over NCCL (one rank per process, nccl_transport.cpp) and over
// the loopback (every rank in this process, loopback_transport.cpp).
//
// Semantics are NCCL's: sends and receives posted between group_begin and group_end form one group
// (a send to `peer` is matched by that peer's receive from this rank, in posting order); collectives
// are called by every rank. Everything is stream-ordered: a rank's later work on the same stream sees
// the transfer done. flush() is where the loopback, having been handed every rank's posts of this
// round, carries them out; NCCL transfers need no flush (it does nothing there).
#pragma once
#include <cstddef>

#include "context_parallel/device_ops.hpp"

namespace flashbox::cp {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int world() const = 0;
  virtual int group_begin(int rank) = 0;
  virtual int send(int rank, const void *buf, size_t bytes, int peer, Stream s) = 0;
  virtual int recv(int rank, void *buf, size_t bytes, int peer, Stream s) = 0;
  virtual int group_end(int rank, Stream s) = 0;
  // recv = the `bytes` of every rank's send, rank after rank.
  virtual int all_gather(int rank, const void *send, void *recv, size_t bytes, Stream s) = 0;
  // recv[i] = sum over ranks of send[rank * count + i] (fp32).
  virtual int reduce_scatter_sum(int rank, const float *send, float *recv, size_t count, Stream s) = 0;
  virtual int flush() = 0;
};

// Every rank of `world` in this process over `ops` (CPU or one GPU).
std::unique_ptr<Transport> make_loopback_transport(DeviceOps &ops, int world);
// One rank over an ncclComm_t (nullptr with an error when built without NCCL).
std::unique_ptr<Transport> make_nccl_transport(void *nccl_comm, int *rank_out);

}  // namespace flashbox::cp
