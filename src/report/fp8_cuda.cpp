// The FP8 comparison's GPU side: for each shape, the e4m3 inputs and their bf16 dequantized copies made
// on the host (fp8_compare.hpp), both forwards timed by the bench step's method (bench_point.hpp's
// measure_impl: warm-ups, then the median of CUDA-event-timed calls), their outputs read back and
// measured against the fp64 reference on sampled rows. One input set per shape: at 16k tokens x 2048
// one set is 168 MB (e4m3) and 268 MB (bf16), past twice any Hopper L2. Uses only cuda_device.hpp, so it
// builds without CUDA (and is then never called: fp8_unavailable_reason says why).
#include "report/bench_point.hpp"
#include "report/fp8_compare.hpp"
#include "report/random_fill.hpp"

#include <fmt/core.h>

namespace flashbox::report {
namespace {

// One tensor of the problem on the device in both forms, made from seeded normals.
struct Operand {
  DeviceBuffer e4m3, bf16;
  std::vector<uint16_t> host_bf16;  // kept for the fp64 reference
};

Operand make_operand(int64_t elements, float descale, uint64_t seed, uint64_t stream) {
  std::vector<float> x(static_cast<size_t>(elements));
  fill_random_normal(x.data(), FLASHBOX_FLOAT32, elements, seed, stream);
  std::vector<unsigned char> codes(static_cast<size_t>(elements));
  Operand op{DeviceBuffer(size_t(elements)), DeviceBuffer(size_t(elements) * 2),
             std::vector<uint16_t>(size_t(elements))};
  quantize_e4m3(x.data(), elements, descale, codes.data(), op.host_bf16.data());
  op.e4m3.upload(codes.data(), codes.size());
  op.bf16.upload(op.host_bf16.data(), op.host_bf16.size() * 2);
  return op;
}

// Times one forward (`call` returns the C API's code) into `side`, the bench's way.
template <typename Call>
void time_side(Fp8Side &side, const Fp8Config &c, const AttentionShape &shape, Call &&call) {
  BenchConfig bc;
  bc.device = FLASHBOX_CUDA;
  bc.repeats = c.repeats;
  bc.warmup = c.warmup;
  BenchRow row;
  try {
    detail::measure_impl<GpuTimer>(row, bc, shape, 1, call, call, [] { device_synchronize(); });
  } catch (const std::exception &e) {
    row.status = "error";
    row.error = e.what();
  }
  side.status = row.status;
  side.error = row.error;
  side.kernel = row.kernel;
  side.ms = row.ms;
  side.tflops = row.tflops;
}

Fp8Row measure_shape(const Fp8Config &c, int64_t head_dim, int64_t seqlen, bool causal, uint64_t seed) {
  Fp8Row row{head_dim, seqlen, causal, {}, {}};
  const AttentionShape s16 = fp8_shape(c, head_dim, seqlen, causal, FLASHBOX_BFLOAT16);
  const AttentionShape s8 = fp8_shape(c, head_dim, seqlen, causal, FLASHBOX_FLOAT8_E4M3);
  auto fail_both = [&](const std::string &status, const std::string &why) {
    for (Fp8Side *side : {&row.bf16, &row.fp8}) {
      side->status = status;
      side->error = why;
    }
    return row;
  };
  try {
    const Operand q = make_operand(s16.q_elements(), c.descale, seed, 0);
    const Operand k = make_operand(s16.kv_elements(), c.descale, seed, 1);
    const Operand v = make_operand(s16.kv_elements(), c.descale, seed, 2);
    DeviceBuffer o16(size_t(s16.q_bytes())), o8(size_t(s16.q_bytes())), lse(size_t(s16.lse_elements()) * 4);
    DeviceBuffer descale(sizeof(float));
    descale.upload(&c.descale, sizeof(float));
    auto *lse_ptr = static_cast<float *>(lse.get());

    const auto a16 =
        make_args(s16, FLASHBOX_CUDA, FLASHBOX_FLASH, q.bf16.get(), k.bf16.get(), v.bf16.get(), o16.get(), lse_ptr);
    time_side(row.bf16, c, s16, [&](int) { return flashbox_attention_forward(&a16); });

    const auto a8 =
        make_args(s8, FLASHBOX_CUDA, FLASHBOX_FLASH, q.e4m3.get(), k.e4m3.get(), v.e4m3.get(), o8.get(), lse_ptr);
    flashbox_attention_ext ext = flashbox_attention_ext_default();
    ext.out_dtype = FLASHBOX_BFLOAT16;
    // One per-tensor scale: strides 0 broadcast it over (batch, kv head).
    ext.q_descale = ext.k_descale = ext.v_descale = static_cast<const float *>(descale.get());
    time_side(row.fp8, c, s8, [&](int) { return flashbox_attention_forward_ext(&a8, &ext); });

    const auto windows = error_windows(s16, c.error_windows, c.error_window_rows);
    const auto reference = windowed_reference(s16, q.host_bf16.data(), k.host_bf16.data(), v.host_bf16.data(), windows);
    std::vector<uint16_t> out(size_t(s16.q_elements()));
    for (auto [side, o] : {std::pair{&row.bf16, &o16}, std::pair{&row.fp8, &o8}}) {
      if (side->status != "ok") continue;
      o->download(out.data(), out.size() * 2);
      const ErrorNorms e = windowed_error(s16, out.data(), windows, reference);
      side->rel_error = e.rel;
      side->max_abs_error = e.max_abs;
    }
  } catch (const DeviceOutOfMemory &e) {
    return fail_both("oom", fmt::format("inputs and outputs do not fit: {}", e.what()));
  } catch (const std::exception &e) {
    return fail_both("error", e.what());
  }
  return row;
}

}  // namespace

std::vector<Fp8Row> measure_fp8(const Fp8Config &c, const Progress &progress) {
  std::vector<Fp8Row> rows;
  const int total = int(c.head_dims.size() * c.seqlens.size() * c.causal.size());
  for (int64_t d : c.head_dims)
    for (int64_t t : c.seqlens)
      for (bool causal : c.causal) {
        if (progress) progress(fmt::format("FP8 D{} T{}{}", d, t, causal ? " causal" : ""), int(rows.size()), total);
        rows.push_back(measure_shape(c, d, t, causal, c.seed + 7919u * rows.size()));
      }
  if (progress) progress("done", total, total);
  return rows;
}

}  // namespace flashbox::report
