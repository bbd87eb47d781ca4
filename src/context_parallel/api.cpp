// The exported functions of context_parallel.h: validation of what the local calls cannot see
// (equal shard lengths, layout and variant, the simulated ranks agreeing with each other), then the
// rank programs over the NCCL or the loopback transport. Everything flashbox validates itself
// (dtype, head_dim, strides, alignment) is left to the first local call: outputs are written only
// in the programs' finish(), so such a failure too leaves them untouched.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/rank_program.hpp"
#include "context_parallel/schedule.hpp"
#include "core/enum_bits.hpp"
#include "flashbox/context_parallel.h"

#ifdef FLASHBOX_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace flashbox::cp {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

using core::enum_bits;

int validate_options(const flashbox_cp_layout &layout_arg, const flashbox_cp_variant &variant_arg) {
  const int layout = enum_bits(layout_arg), variant = enum_bits(variant_arg);
  if (layout != FLASHBOX_CP_CONTIGUOUS && layout != FLASHBOX_CP_ZIGZAG)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "layout = " + str(layout) + " must be contiguous (0) or zigzag (1)");
  if (variant != FLASHBOX_CP_RING && variant != FLASHBOX_CP_ALL_GATHER)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "variant = " + str(variant) + " must be ring (0) or all_gather (1)");
  return 0;
}

bool strides_positive(const int64_t *s) { return s[0] > 0 && s[1] > 0 && s[2] > 0; }

// What one rank's shard must satisfy beyond flashbox's own checks.
int validate_shard(const flashbox_attention_args *a, flashbox_cp_layout layout, const std::string &who) {
  if (!a) return fail(FLASHBOX_ERR_NULL_POINTER, who + "args is NULL");
  if (a->device != FLASHBOX_CPU && a->device != FLASHBOX_CUDA)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, who + "device = " + str(int(a->device)) + " is not cpu (0) or cuda (1)");
  if (a->dtype != FLASHBOX_FLOAT32 && a->dtype != FLASHBOX_FLOAT16 && a->dtype != FLASHBOX_BFLOAT16)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, who + "dtype = " + str(int(a->dtype)) + " is unknown");
  if (a->batch <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || a->heads_q <= 0 || a->heads_kv <= 0 || a->head_dim <= 0)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                who + "batch, seqlen_q, seqlen_k, heads_q, heads_kv and head_dim must be > 0");
  if (a->seqlen_q != a->seqlen_k)
    return fail(FLASHBOX_ERR_INVALID_SIZE, who + "seqlen_q = " + str(a->seqlen_q) +
                                               " and seqlen_k = " + str(a->seqlen_k) +
                                               " must be equal: each rank holds S tokens of q, k and v");
  if (a->heads_q % a->heads_kv != 0)
    return fail(FLASHBOX_ERR_HEADS_MISMATCH,
                who + "heads_q = " + str(a->heads_q) + " is not a multiple of heads_kv = " + str(a->heads_kv));
  if (a->causal != 0 && a->causal != 1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, who + "causal = " + str(a->causal) + " must be 0 or 1");
  if (layout == FLASHBOX_CP_ZIGZAG && a->seqlen_q % 2 != 0)
    return fail(FLASHBOX_ERR_INVALID_SIZE, who + "seqlen = " + str(a->seqlen_q) +
                                               " tokens per rank must be even for the zigzag layout (two chunks)");
  if (!a->q || !a->k || !a->v || !a->o) return fail(FLASHBOX_ERR_NULL_POINTER, who + "q, k, v and o must not be NULL");
  if (!strides_positive(a->q_stride) || !strides_positive(a->k_stride) || !strides_positive(a->v_stride) ||
      !strides_positive(a->o_stride))
    return fail(FLASHBOX_ERR_BAD_STRIDE, who + "every stride must be > 0");
  if (a->batch > (int64_t(1) << 40) / (a->seqlen_q * a->heads_q * a->head_dim + 1))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW, who + "the shard's element count is too large");
  return 0;
}

int validate_grad_shard(const flashbox_attention_grad_args *g, flashbox_cp_layout layout, const std::string &who) {
  if (!g) return fail(FLASHBOX_ERR_NULL_POINTER, who + "grad args is NULL");
  if (int rc = validate_shard(&g->fwd, layout, who)) return rc;
  if (!g->fwd.lse)
    return fail(FLASHBOX_ERR_NULL_POINTER, who + "fwd.lse is NULL: the backward needs the forward's global LSE");
  if (!g->dout || !g->dq || !g->dk || !g->dv)
    return fail(FLASHBOX_ERR_NULL_POINTER, who + "dout, dq, dk and dv must not be NULL");
  if (!strides_positive(g->dout_stride) || !strides_positive(g->dq_stride) || !strides_positive(g->dk_stride) ||
      !strides_positive(g->dv_stride))
    return fail(FLASHBOX_ERR_BAD_STRIDE, who + "every gradient stride must be > 0");
  return 0;
}

// Simulated ranks must describe one problem: same sizes, dtype, device, mask and scale.
int validate_same(const flashbox_attention_args &a, const flashbox_attention_args &b, int rank) {
  if (a.device != b.device || a.dtype != b.dtype || a.impl != b.impl || a.batch != b.batch ||
      a.seqlen_q != b.seqlen_q || a.heads_q != b.heads_q || a.heads_kv != b.heads_kv || a.head_dim != b.head_dim ||
      a.causal != b.causal || a.softmax_scale != b.softmax_scale)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "rank " + str(rank) +
                    ": device, dtype, impl, sizes, causal and softmax_scale must be those "
                    "of rank 0");
  return 0;
}

std::unique_ptr<DeviceOps> ops_for(flashbox_device device) {
  if (device == FLASHBOX_CPU) return make_cpu_ops();
  auto ops = make_cuda_ops();
  if (!ops)
    fail(FLASHBOX_ERR_NO_DEVICE, "device = cuda, but this flashbox context-parallel library was built without CUDA");
  return ops;
}

template <typename F>
int guarded(F &&f) {
  try {
    return f();
  } catch (const std::bad_alloc &) {
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "host allocation failed");
  } catch (const std::exception &e) {
    return fail(FLASHBOX_ERR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

template <typename Args, typename Make>
int run_simulated(const Args *shards, int world, flashbox_cp_layout layout, flashbox_cp_variant variant, Make make,
                  const flashbox_attention_args &(*fwd_of)(const Args &)) {
  std::unique_ptr<DeviceOps> ops = ops_for(fwd_of(shards[0]).device);
  if (!ops) return FLASHBOX_ERR_NO_DEVICE;
  std::unique_ptr<Transport> transport = make_loopback_transport(*ops, world);
  if (!transport) return FLASHBOX_ERR_CUDA;
  std::vector<std::unique_ptr<RankProgram>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(make(RankSetup{ops.get(), transport.get(), r, world, layout, variant}, shards[r]));
  const int rc = run_programs(ranks, *transport);
  ranks.clear();  // programs release their memory before the transport's stream goes
  if (rc == 0 && ops->device() == FLASHBOX_CUDA)
    for (int r = 0; r < world; ++r)
      if (int e = ops->synchronize(fwd_of(shards[r]).stream)) return e;
  return rc;
}

const flashbox_attention_args &fwd_of_args(const flashbox_attention_args &a) { return a; }
const flashbox_attention_args &fwd_of_grad(const flashbox_attention_grad_args &g) { return g.fwd; }

// A simulated run: the options, the shard array, each rank's shard and its agreement with rank 0's,
// then the ranks over the loopback transport. The enums are taken by reference: a caller's value
// outside them must reach validate_options as bytes, never be loaded as the enum (undefined).
template <typename Args, typename Validate, typename Make>
int simulated(const Args *shards, int world, const flashbox_cp_layout &layout, const flashbox_cp_variant &variant,
              Validate validate_one, Make make, const flashbox_attention_args &(*fwd_of)(const Args &)) {
  return guarded([&] {
    if (int rc = validate_options(layout, variant)) return rc;
    if (!shards) return fail(FLASHBOX_ERR_NULL_POINTER, "shards is NULL");
    if (world < 1 || world > 4096)
      return fail(FLASHBOX_ERR_INVALID_SIZE, "world = " + std::to_string(world) + " must be in [1, 4096]");
    for (int r = 0; r < world; ++r) {
      if (int rc = validate_one(&shards[r], layout, "rank " + std::to_string(r) + ": ")) return rc;
      if (int rc = validate_same(fwd_of(shards[0]), fwd_of(shards[r]), r)) return rc;
    }
    return run_simulated(shards, world, layout, variant, make, fwd_of);
  });
}

template <typename Args, typename Make>
int run_nccl(const Args &shard, const flashbox_attention_args &fwd, flashbox_cp_layout layout,
             flashbox_cp_variant variant, void *comm, Make make) {
  if (fwd.device != FLASHBOX_CUDA)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "device must be cuda for an NCCL communicator (use the simulated entry on the CPU)");
  if (!comm) return fail(FLASHBOX_ERR_NULL_POINTER, "nccl_comm is NULL");
  int rank = 0;
  std::unique_ptr<Transport> transport = make_nccl_transport(comm, &rank);
  if (!transport) return flashbox_cp_have_nccl() ? int(FLASHBOX_CP_ERR_NCCL) : int(FLASHBOX_ERR_UNSUPPORTED_IMPL);
  std::unique_ptr<DeviceOps> ops = ops_for(FLASHBOX_CUDA);
  if (!ops) return FLASHBOX_ERR_NO_DEVICE;
  std::vector<std::unique_ptr<RankProgram>> ranks;
  ranks.push_back(make(RankSetup{ops.get(), transport.get(), rank, transport->world(), layout, variant}, shard));
  return run_programs(ranks, *transport);
}

}  // namespace
}  // namespace flashbox::cp

using namespace flashbox::cp;

extern "C" {

FLASHBOX_API int flashbox_cp_forward(const flashbox_attention_args *shard, flashbox_cp_layout layout,
                                     flashbox_cp_variant variant, void *nccl_comm) {
  return guarded([&] {
    if (int rc = validate_options(layout, variant)) return rc;
    if (int rc = validate_shard(shard, layout, "")) return rc;
    return run_nccl(*shard, *shard, layout, variant, nccl_comm, make_forward_program);
  });
}

FLASHBOX_API int flashbox_cp_backward(const flashbox_attention_grad_args *shard, flashbox_cp_layout layout,
                                      flashbox_cp_variant variant, void *nccl_comm) {
  return guarded([&] {
    if (int rc = validate_options(layout, variant)) return rc;
    if (int rc = validate_grad_shard(shard, layout, "")) return rc;
    return run_nccl(*shard, shard->fwd, layout, variant, nccl_comm, make_backward_program);
  });
}

FLASHBOX_API int flashbox_cp_forward_simulated(const flashbox_attention_args *shards, int world,
                                               flashbox_cp_layout layout, flashbox_cp_variant variant) {
  return simulated(shards, world, layout, variant, validate_shard, make_forward_program, fwd_of_args);
}

FLASHBOX_API int flashbox_cp_backward_simulated(const flashbox_attention_grad_args *shards, int world,
                                                flashbox_cp_layout layout, flashbox_cp_variant variant) {
  return simulated(shards, world, layout, variant, validate_grad_shard, make_backward_program, fwd_of_grad);
}

FLASHBOX_API int64_t flashbox_cp_global_token(flashbox_cp_layout layout, int world, int rank, int64_t tokens_per_rank,
                                              int64_t local) {
  return global_token(layout, world, rank, tokens_per_rank, local);
}

FLASHBOX_API int flashbox_cp_have_nccl(void) {
#ifdef FLASHBOX_HAVE_NCCL
  return 1;
#else
  return 0;
#endif
}

FLASHBOX_API int flashbox_cp_nccl_unique_id(uint8_t id[FLASHBOX_CP_NCCL_ID_BYTES]) {
#ifdef FLASHBOX_HAVE_NCCL
  static_assert(sizeof(ncclUniqueId) == FLASHBOX_CP_NCCL_ID_BYTES, "ncclUniqueId size");
  if (!id) return fail(FLASHBOX_ERR_NULL_POINTER, "id is NULL");
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  ncclUniqueId u;
  if (ncclResult_t r = ncclGetUniqueId(&u); r != ncclSuccess)
    return fail(FLASHBOX_CP_ERR_NCCL, std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  std::memcpy(id, &u, sizeof u);
  return 0;
#else
  (void)id;
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "this flashbox was built without NCCL");
#endif
}

FLASHBOX_API int flashbox_cp_nccl_comm_init(void **nccl_comm, int world, int rank,
                                            const uint8_t id[FLASHBOX_CP_NCCL_ID_BYTES]) {
#ifdef FLASHBOX_HAVE_NCCL
  if (!nccl_comm || !id) return fail(FLASHBOX_ERR_NULL_POINTER, "nccl_comm and id must not be NULL");
  if (world < 1 || rank < 0 || rank >= world)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "rank = " + std::to_string(rank) + " must be in [0, world = " + std::to_string(world) + ")");
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off unless the caller decided otherwise
  ncclUniqueId u;
  std::memcpy(&u, id, sizeof u);
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, world, u, rank); r != ncclSuccess)
    return fail(FLASHBOX_CP_ERR_NCCL, std::string("ncclCommInitRank: ") + ncclGetErrorString(r));
  *nccl_comm = comm;
  return 0;
#else
  (void)nccl_comm, (void)world, (void)rank, (void)id;
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "this flashbox was built without NCCL");
#endif
}

FLASHBOX_API int flashbox_cp_nccl_comm_destroy(void *nccl_comm) {
#ifdef FLASHBOX_HAVE_NCCL
  if (!nccl_comm) return 0;
  if (ncclResult_t r = ncclCommDestroy(static_cast<ncclComm_t>(nccl_comm)); r != ncclSuccess)
    return fail(FLASHBOX_CP_ERR_NCCL, std::string("ncclCommDestroy: ") + ncclGetErrorString(r));
  return 0;
#else
  (void)nccl_comm;
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "this flashbox was built without NCCL");
#endif
}

FLASHBOX_API const char *flashbox_cp_last_error(void) { return last_error_message(); }

}  // extern "C"
