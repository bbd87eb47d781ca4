// cuda_kvcache_attention: the decode family's host side. Turns a validated KvcacheProblem into
// DecodeParams, picks the split count (the model below unless num_splits is given), and launches
//   append (when k_new/v_new are given) -> split kernel -> combine (when splits > 1)
// on the caller's stream; with an e4m3 cache (cache_dtype) the append quantizes and the split kernel is
// its fp8 instantiation (same combine). The split workspace comes from DeviceScratch (stream-ordered, counted in
// flashbox_last_scratch_peak_bytes).
//
// Split model (docs/decode.md). The kernel streams the cache, so its time is bytes over bandwidth, with
// three ways to lose: too few CTAs to keep enough bytes in flight (each CTA holds at most
// `bytes_in_flight`, and needs about kLatencyUs to turn them around), a last wave that leaves slots
// empty, and the cost of splitting (each wave's start-up, the partial O written and read again, the
// combine launch). For s = 1 .. 256 splits the model adds these up and takes the fastest s, preferring
// fewer splits within 2 %:
//   ctas = batch * heads_kv * row_tiles * s, slots = SMs * resident CTAs per SM
//   wave time = ctas_in_wave * chunk_bytes / min(BW, ctas_in_wave * bytes_in_flight / kLatencyUs) + kWaveUs
//   + (s > 1) kCombineUs + 2 * s * rows * (head_dim + 1) * 4 / BW
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/kvcache_backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda {

using detail::KvcacheProblem;

namespace {

constexpr double kBandwidthBytesPerUs = 4.0e6;  // ~4 TB/s: the order of an H100/H200's HBM; only ratios matter
constexpr double kLatencyUs = 4.0;              // one CTA turns its ring over in ~4 us (H200, run 1)
constexpr double kWaveUs = 2.0;                 // a wave's start (first copies in flight) and its epilogue
constexpr double kCombineUs = 2.5;              // the combine launch
constexpr int kMaxSplits = 256;

struct SplitShape {
  int64_t base_ctas;   // batch * heads_kv * row_tiles
  int64_t max_keys;    // longest visible key range
  int64_t key_bytes;   // K + V bytes of one key of one KV head
  int64_t rows_total;  // batch * heads_q * seqlen_q
  int64_t head_dim;
  int sms, ctas_per_sm;
  int64_t bytes_in_flight;
};

double wave_time_us(int64_t ctas, double chunk_bytes, const SplitShape &s) {
  const double bw = std::min(kBandwidthBytesPerUs, double(ctas) * double(s.bytes_in_flight) / kLatencyUs);
  return double(ctas) * chunk_bytes / bw + kWaveUs;
}

double predicted_time_us(const SplitShape &s, int splits) {
  const int64_t blocks = std::max<int64_t>(1, (s.max_keys + 63) / 64);
  const int64_t chunk_blocks = (blocks + splits - 1) / splits;
  const double chunk_bytes = double(chunk_blocks) * 64.0 * double(s.key_bytes);
  const int64_t ctas = s.base_ctas * splits, slots = int64_t(s.sms) * s.ctas_per_sm;
  const int64_t full = ctas / slots, rest = ctas % slots;
  double t = double(full) * (full ? wave_time_us(slots, chunk_bytes, s) : 0.0);
  if (rest) t += wave_time_us(rest, chunk_bytes, s);
  if (splits > 1)
    t += kCombineUs + 2.0 * splits * double(s.rows_total) * double(s.head_dim + 1) * 4.0 / kBandwidthBytesPerUs;
  return t;
}

int choose_splits(const SplitShape &s) {
  const int64_t blocks = std::max<int64_t>(1, (s.max_keys + 63) / 64);
  const int max_s = int(std::min<int64_t>(kMaxSplits, blocks));
  double best_t = predicted_time_us(s, 1);
  for (int k = 2; k <= max_s; ++k) best_t = std::min(best_t, predicted_time_us(s, k));
  for (int k = 1; k <= max_s; ++k)
    if (predicted_time_us(s, k) <= best_t * 1.02) return k;
  return 1;
}

int split_shape(const KvcacheProblem &pr, int row_tiles, SplitShape &s) {
  const flashbox_kvcache_args &a = *pr.args;
  int dev = 0;
  FLASHBOX_CUDA_TRY(cudaGetDevice(&dev));
  FLASHBOX_CUDA_TRY(cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev));
  const bool fp8 = a.cache_dtype == FLASHBOX_FLOAT8_E4M3;
  FLASHBOX_CUDA_TRY(decode_split_occupancy(int(a.head_dim), a.dtype == FLASHBOX_BFLOAT16, fp8, &s.ctas_per_sm,
                                           &s.bytes_in_flight));
  s.ctas_per_sm = std::max(1, s.ctas_per_sm);
  s.base_ctas = a.batch * a.heads_kv * row_tiles;
  s.max_keys = pr.max_total_keys;
  s.key_bytes = 2 * a.head_dim * (fp8 ? 1 : 2);
  s.rows_total = a.batch * a.heads_q * a.seqlen_q;
  s.head_dim = a.head_dim;
  return FLASHBOX_OK;
}

DecodeParams make_params(const KvcacheProblem &pr) {
  const flashbox_kvcache_args &a = *pr.args;
  DecodeParams p{};
  p.q = a.q;
  p.k_cache = a.k_cache, p.v_cache = a.v_cache;
  p.k_new = a.k_new, p.v_new = a.v_new;
  p.o = a.o;
  p.lse = a.lse;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = a.q_stride[i];
    p.k_stride[i] = a.k_cache_stride[i], p.v_stride[i] = a.v_cache_stride[i];
    p.k_new_stride[i] = a.k_new_stride[i], p.v_new_stride[i] = a.v_new_stride[i];
    p.o_stride[i] = a.o_stride[i];
  }
  p.cache_seqlens = a.cache_seqlens, p.block_table = a.block_table;
  p.cache_batch_idx = a.cache_batch_idx, p.cache_leftpad = a.cache_leftpad;
  p.alibi_slopes = a.alibi_slopes, p.alibi_batch_stride = a.alibi_batch_stride;
  p.learnable_sink = a.learnable_sink;
  p.k_descale = a.k_descale, p.v_descale = a.v_descale;
  for (int i = 0; i < 2; ++i) p.k_descale_stride[i] = a.k_descale_stride[i], p.v_descale_stride[i] = a.v_descale_stride[i];
  p.block_table_stride = a.block_table_stride;
  p.cache_rows = a.cache_rows, p.cache_entries = a.cache_entries, p.capacity = pr.capacity;
  p.batch = int(a.batch), p.seqlen_q = int(a.seqlen_q), p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv);
  p.group = int(a.heads_q / a.heads_kv);
  p.seqlen_new = int(a.seqlen_new);
  p.head_dim = int(a.head_dim);
  p.rows = p.seqlen_q * p.group;
  p.row_tiles = (p.rows + 15) / 16;
  p.scale = pr.scale;
  p.softcap = a.softcap;
  p.causal = a.causal, p.has_window = a.has_window;
  p.window_left = a.window_left, p.window_right = a.window_right;
  return p;
}

}  // namespace
}  // namespace flashbox::cuda

namespace flashbox::detail {

int cuda_kvcache_num_splits(const KvcacheProblem &pr, int &splits) {
  const cuda::DecodeParams p = cuda::make_params(pr);
  cuda::SplitShape s{};
  if (int rc = cuda::split_shape(pr, p.row_tiles, s)) return rc;
  splits = cuda::choose_splits(s);
  return FLASHBOX_OK;
}

int cuda_kvcache_append(const KvcacheProblem &pr) {
  const flashbox_kvcache_args &a = *pr.args;
  if (!a.k_new) return FLASHBOX_OK;
  const cuda::DecodeParams p = cuda::make_params(pr);
  const auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.cache_dtype == FLASHBOX_FLOAT8_E4M3)
    FLASHBOX_CUDA_TRY(cuda::launch_decode_append_fp8(p, int(a.head_dim), a.dtype == FLASHBOX_BFLOAT16, stream));
  else
    FLASHBOX_CUDA_TRY(cuda::launch_decode_append(p, int(a.head_dim), 2, stream));
  return FLASHBOX_OK;
}

int cuda_kvcache_attention(const KvcacheProblem &pr) {
  const flashbox_kvcache_args &a = *pr.args;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const bool fp8 = a.cache_dtype == FLASHBOX_FLOAT8_E4M3;
  cuda::DecodeParams p = cuda::make_params(pr);
  if (a.num_splits > 0) {
    p.num_splits = a.num_splits;
  } else {
    cuda::SplitShape s{};
    if (int rc = cuda::split_shape(pr, p.row_tiles, s)) return rc;
    p.num_splits = cuda::choose_splits(s);
  }
  cuda::DeviceScratch scratch(stream);
  if (p.num_splits > 1) {
    const int64_t rows_total = a.batch * a.heads_q * a.seqlen_q;
    // Partial O rows are the instantiation's width (the split and combine kernels index them by D).
    const int64_t o_bytes = int64_t(p.num_splits) * rows_total * cuda::decode_kernel_dim(int(a.head_dim)) * 4;
    const int64_t bytes = o_bytes + int64_t(p.num_splits) * rows_total * 4;
    const cudaError_t e = scratch.allocate(bytes);
    if (e == cudaErrorMemoryAllocation)
      return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "the split workspace (" + std::to_string(bytes) + " bytes for " +
                                                  std::to_string(p.num_splits) + " splits) does not fit on the device");
    FLASHBOX_CUDA_TRY(e);
    p.o_partial = scratch.as<float>();
    p.lse_partial = p.o_partial + o_bytes / 4;
  }
  cuda::DeviceScratch q_rotated(stream);
  if (a.rotary_cos) {
    // q turned into a contiguous scratch copy first (it reads the lengths, which the append leaves alone).
    const cuda::RotaryParams r{a.rotary_cos, a.rotary_sin, int(a.rotary_dim), a.rotary_interleaved};
    const int64_t bytes = a.batch * a.seqlen_q * a.heads_q * a.head_dim * 2;
    const cudaError_t e = q_rotated.allocate(bytes);
    if (e == cudaErrorMemoryAllocation)
      return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                  "the rotated copy of q (" + std::to_string(bytes) + " bytes) does not fit");
    FLASHBOX_CUDA_TRY(e);
    FLASHBOX_CUDA_TRY(cuda::launch_decode_rotate_q(p, r, q_rotated.as<void>(), int(a.head_dim), bf16, stream));
    FLASHBOX_CUDA_TRY(cuda::launch_decode_append_rotary(p, r, int(a.head_dim), bf16, stream));
    p.q = q_rotated.as<void>();
    p.q_stride[2] = a.head_dim, p.q_stride[1] = a.heads_q * a.head_dim, p.q_stride[0] = a.seqlen_q * p.q_stride[1];
  } else if (a.k_new && fp8) {  // validation refuses rotary with an fp8 cache
    FLASHBOX_CUDA_TRY(cuda::launch_decode_append_fp8(p, int(a.head_dim), bf16, stream));
  } else if (a.k_new) {
    FLASHBOX_CUDA_TRY(cuda::launch_decode_append(p, int(a.head_dim), 2, stream));
  }
  const char *name = "";
  FLASHBOX_CUDA_TRY(cuda::launch_decode_split(p, int(a.head_dim), bf16, fp8, stream, &name));
  if (p.num_splits > 1) FLASHBOX_CUDA_TRY(cuda::launch_decode_combine(p, int(a.head_dim), bf16, stream));
  set_kernel_name(std::string(name) + "_splits" + std::to_string(p.num_splits));
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
