#include "report/fp8_compare.hpp"

#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "cpu/reference_fp64.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace flashbox::report {

Fp8Config fp8_config(bool quick, uint64_t seed) {
  Fp8Config c;
  c.seed = seed;
  if (quick) {
    c.seqlens = {2048};
    c.repeats = 3;
    c.warmup = 1;
  }
  return c;
}

AttentionShape fp8_shape(const Fp8Config &c, int64_t head_dim, int64_t seqlen, bool causal, flashbox_dtype dtype) {
  if (head_dim <= 0 || seqlen <= 0 || c.tokens % seqlen != 0 || c.width % head_dim != 0)
    throw std::invalid_argument(fmt::format("FP8 comparison: T {} must divide {} tokens and head_dim {} must divide {}",
                                            seqlen, c.tokens, head_dim, c.width));
  AttentionShape s{c.tokens / seqlen, seqlen, seqlen, c.width / head_dim, c.width / head_dim, head_dim, dtype, causal};
  validate(s);
  return s;
}

std::optional<std::string> fp8_unavailable_reason(const std::optional<GpuInfo> &gpu, bool built_with_sm90a) {
  if (!gpu)
    return std::string(
        "no CUDA GPU here (or flashbox built without CUDA): the FP8 (e4m3) forward runs on Hopper GPUs (sm_90a) "
        "only");
  if (gpu->cc_major != 9)
    return fmt::format("{} is sm_{}{}, not Hopper: the FP8 (e4m3) forward runs on sm_90a only", gpu->name,
                       gpu->cc_major, gpu->cc_minor);
  if (!built_with_sm90a)
    return std::string("this flashbox was built without sm_90a (FLASHBOX_CUDA_ARCHS): the FP8 (e4m3) forward needs it");
  return std::nullopt;
}

void quantize_e4m3(const float *x, int64_t n, float descale, unsigned char *e4m3, void *bf16) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    e4m3[i] = core::float_to_e4m3(x[i] / descale);
    // code x 2^-k has at most 4 significant bits: bf16 (8) holds it exactly.
    cpu::store_from_float(bf16, FLASHBOX_BFLOAT16, i, core::e4m3_to_float(e4m3[i]) * descale);
  }
}

std::vector<ErrorWindow> error_windows(const AttentionShape &s, int windows, int rows) {
  std::vector<ErrorWindow> w;
  const int64_t n = std::min<int64_t>(rows, s.seqlen_q);
  for (int i = 0; i < windows; ++i) {
    // Centres at (i + 1/2) / windows of the sequence; batch entries and heads taken in turn.
    const int64_t centre = (2 * int64_t(i) + 1) * s.seqlen_q / (2 * int64_t(windows));
    const int64_t first = std::clamp<int64_t>(centre - n / 2, 0, s.seqlen_q - n);
    w.push_back({i % s.batch, (int64_t(i) * 5) % s.heads_q, first, n});
  }
  return w;
}

namespace {

// Element offset of (b, row, head, 0) in a dense [batch, seq, heads, head_dim] tensor.
int64_t dense_offset(int64_t seq, int64_t heads, int64_t d, int64_t b, int64_t row, int64_t h) {
  return ((b * seq + row) * heads + h) * d;
}

}  // namespace

std::vector<double> windowed_reference(const AttentionShape &s, const void *q, const void *k, const void *v,
                                       const std::vector<ErrorWindow> &windows) {
  const int64_t d = s.head_dim;
  std::vector<int64_t> start(windows.size() + 1, 0);
  for (size_t i = 0; i < windows.size(); ++i) start[i + 1] = start[i] + windows[i].rows * d;
  std::vector<double> out(size_t(start.back()));
  const auto *q2 = static_cast<const uint16_t *>(q), *k2 = static_cast<const uint16_t *>(k),
             *v2 = static_cast<const uint16_t *>(v);
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < windows.size(); ++i) {
    const ErrorWindow &w = windows[i];
    const int64_t kv_head = w.head / (s.heads_q / s.heads_kv);
    // Queries first_row .. first_row + rows - 1 against keys 0 .. last: with seqlen_k = first_row +
    // rows, the API's bottom-right causal alignment lets query i of the window see keys <= first_row + i,
    // which is what row first_row + i of the whole problem sees.
    const int64_t keys = s.causal ? w.first_row + w.rows : s.seqlen_k;
    AttentionShape sub{1, w.rows, keys, 1, 1, d, FLASHBOX_BFLOAT16, s.causal};
    auto a = make_args(sub, FLASHBOX_CPU, FLASHBOX_AUTO,
                       q2 + dense_offset(s.seqlen_q, s.heads_q, d, w.batch, w.first_row, w.head),
                       k2 + dense_offset(s.seqlen_k, s.heads_kv, d, w.batch, 0, kv_head),
                       v2 + dense_offset(s.seqlen_k, s.heads_kv, d, w.batch, 0, kv_head), nullptr, nullptr);
    // The strides of the whole tensors (make_args wrote the sub-problem's dense ones).
    a.q_stride[0] = a.o_stride[0] = s.seqlen_q * s.heads_q * d;
    a.q_stride[1] = a.o_stride[1] = s.heads_q * d;
    a.k_stride[0] = a.v_stride[0] = s.seqlen_k * s.heads_kv * d;
    a.k_stride[1] = a.v_stride[1] = s.heads_kv * d;
    std::vector<double> ref;
    cpu::reference_attention_fp64(a, ref, nullptr);
    std::copy(ref.begin(), ref.end(), out.begin() + start[i]);
  }
  return out;
}

ErrorNorms windowed_error(const AttentionShape &s, const void *o, const std::vector<ErrorWindow> &windows,
                          const std::vector<double> &reference) {
  double max_abs = 0, diff2 = 0, ref2 = 0;
  size_t at = 0;
  for (const ErrorWindow &w : windows)
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t c = 0; c < s.head_dim; ++c, ++at) {
        const double got =
            cpu::load_as_float(o, FLASHBOX_BFLOAT16,
                               dense_offset(s.seqlen_q, s.heads_q, s.head_dim, w.batch, w.first_row + r, w.head) + c);
        const double d = got - reference.at(at);
        max_abs = (std::fabs(d) > max_abs || std::isnan(d)) ? std::fabs(d) : max_abs;  // NaN wins
        diff2 += d * d;
        ref2 += reference[at] * reference[at];
      }
  return {max_abs, ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2)};
}

namespace {

nlohmann::json side_json(const Fp8Side &s) {
  auto opt = [](const std::optional<double> &v) {
    return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json();  // NaN is not JSON
  };
  nlohmann::json j = {{"status", s.status},
                      {"kernel", s.kernel},
                      {"ms", opt(s.ms)},
                      {"tflops", opt(s.tflops)},
                      {"rel_error", opt(s.rel_error)},
                      {"max_abs_error", opt(s.max_abs_error)}};
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

}  // namespace

nlohmann::json fp8_step_json(const Fp8Config &c, const std::string &device, const std::vector<Fp8Row> &rows) {
  nlohmann::json j;
  j["measured"] = true;
  j["device"] = device;
  j["config"] = {{"tokens", c.tokens},      {"width", c.width},
                 {"dtype", "e4m3"},         {"out_dtype", "bf16"},
                 {"descale", "per-tensor"}, {"descale_value", c.descale},
                 {"repeats", c.repeats},    {"warmup", c.warmup},
                 {"seed", c.seed},          {"error_rows", int64_t(c.error_windows) * c.error_window_rows}};
  j["rows"] = nlohmann::json::array();
  for (const Fp8Row &r : rows) {
    const AttentionShape s = fp8_shape(c, r.head_dim, r.seqlen, r.causal, FLASHBOX_FLOAT8_E4M3);
    nlohmann::json jr = {{"head_dim", r.head_dim},    {"seqlen", r.seqlen},      {"causal", r.causal},
                         {"batch", s.batch},          {"heads", s.heads_q},      {"flops", s.forward_flops()},
                         {"bf16", side_json(r.bf16)}, {"fp8", side_json(r.fp8)}, {"ratio", nullptr}};
    if (r.bf16.tflops && r.fp8.tflops && *r.bf16.tflops > 0 && r.bf16.status == "ok" && r.fp8.status == "ok")
      jr["ratio"] = *r.fp8.tflops / *r.bf16.tflops;
    j["rows"].push_back(std::move(jr));
  }
  return j;
}

}  // namespace flashbox::report
