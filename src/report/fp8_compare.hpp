// The report's FP8 comparison (step "fp8", docs/fp8.md): flashbox's e4m3 forward timed beside its bf16
// forward on the same values, in FlashAttention-3's paper setup (batch x T = 16k tokens, heads x
// head_dim = 2048), with each one's error against fp64 attention on the dequantized inputs. The inputs
// are standard normal x quantized as e4m3(x / descale) with one per-tensor descale 2^-5; the bf16
// inputs are the dequantized values e4m3 x 2^-5, which bf16 holds exactly, so both forwards compute
// the same attention and the difference between them is the e4m3 kernel's own (P rounded to e4m3).
// This file is the host side (shapes, availability, quantisation, sampled error, JSON);
// fp8_cuda.cpp measures on the GPU.
#pragma once
#include "report/attention_shape.hpp"
#include "report/correctness.hpp"  // ErrorNorms, Progress
#include "report/cuda_device.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashbox::report {

struct Fp8Config {
  std::vector<int64_t> head_dims{128, 256};
  std::vector<int64_t> seqlens{2048, 16384};
  std::vector<bool> causal{false, true};
  int64_t tokens = 16384;    // batch x T of every shape
  int64_t width = 2048;      // heads x head_dim of every shape
  float descale = 0.03125f;  // 2^-5: x ~ N(0, 1) becomes e4m3 codes of magnitude ~32, far from 448 and the subnormals
  int repeats = 10, warmup = 3;
  int error_windows = 8, error_window_rows = 32;  // query rows the error is measured on, per shape
  uint64_t seed = 1234;
};

Fp8Config fp8_config(bool quick, uint64_t seed);  // quick: T 2048 only, fewer repeats

// The shape of one comparison row: batch = tokens / T, heads = width / head_dim, in `dtype`.
AttentionShape fp8_shape(const Fp8Config &config, int64_t head_dim, int64_t seqlen, bool causal, flashbox_dtype dtype);

// Why this machine cannot run the FP8 forward (one line), or nothing when it can: it needs a Hopper GPU
// (compute capability 9.x) and a flashbox built with sm_90a.
std::optional<std::string> fp8_unavailable_reason(const std::optional<GpuInfo> &gpu, bool built_with_sm90a);

// e4m3 codes of x / descale (saturating) and, as bf16, their dequantized values code x descale.
void quantize_e4m3(const float *x, int64_t n, float descale, unsigned char *e4m3, void *bf16);

// The query rows the error is measured on: `windows` runs of `rows` consecutive queries, spread over
// batch entries, heads and positions (early rows see few keys under a causal mask, late rows many).
struct ErrorWindow {
  int64_t batch, head, first_row, rows;
};
std::vector<ErrorWindow> error_windows(const AttentionShape &shape, int windows, int rows);

// fp64 attention (src/cpu/reference_fp64) on the windows' rows of the dense bf16 inputs of `shape`:
// a window's rows form a problem of their own (one head, its queries, the keys they may see), so the
// reference costs windows x rows x T x D, not T^2 x D. Returns the reference values, window by window.
std::vector<double> windowed_reference(const AttentionShape &shape, const void *q, const void *k, const void *v,
                                       const std::vector<ErrorWindow> &windows);
// max |o - ref| and ||o - ref|| / ||ref|| of a dense bf16 output `o` of `shape` over the windows' rows.
ErrorNorms windowed_error(const AttentionShape &shape, const void *o, const std::vector<ErrorWindow> &windows,
                          const std::vector<double> &reference);

// One forward of a comparison row: the bench's method (median of repeats after warm-ups).
struct Fp8Side {
  std::string status = "ok";  // "ok", "oom" or "error"
  std::string error, kernel;
  std::optional<double> ms, tflops, rel_error, max_abs_error;
};

struct Fp8Row {
  int64_t head_dim = 0, seqlen = 0;
  bool causal = false;
  Fp8Side bf16, fp8;
};

// The GPU measurement (fp8_cuda.cpp); call it only where fp8_unavailable_reason said nothing.
std::vector<Fp8Row> measure_fp8(const Fp8Config &config, const Progress &progress);

// steps.fp8 of docs/report-schema.md: the rows with batch, heads, FLOPs and the ratio FP8 / bf16 of
// TFLOP/s (null unless both ran).
nlohmann::json fp8_step_json(const Fp8Config &config, const std::string &device, const std::vector<Fp8Row> &rows);

}  // namespace flashbox::report
