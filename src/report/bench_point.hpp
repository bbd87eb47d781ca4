// Internal to the bench harness: one (T, implementation) measurement per device. The CUDA one lives in
// bench_cuda.cpp, guarded by FLASHBOX_HAVE_CUDA; the CPU one in bench_cpu.cpp.
#pragma once
#include "report/bench.hpp"

#include <utility>
#include <vector>

namespace flashbox::report::detail {

AttentionShape bench_shape(const BenchConfig &config, int64_t seqlen);

// Every implementation at one T: the inputs are made once and shared by the implementations.
std::vector<BenchRow> bench_cpu_point(const BenchConfig &config, int64_t seqlen,
                                      const std::function<void(const std::string &)> &starting);
std::vector<BenchRow> bench_cuda_point(const BenchConfig &config, int64_t seqlen,
                                       const std::function<void(const std::string &)> &starting);

// The row for a failed library call: "oom" for FLASHBOX_ERR_OUT_OF_MEMORY, else "error".
void record_failure(BenchRow &row, int code, const char *what);
// Fills ms and TFLOP/s from the timed runs.
void record_times(BenchRow &row, const BenchConfig &config, const AttentionShape &shape, std::vector<double> times_ms);

flashbox_attention_grad_args make_grad_args(const flashbox_attention_args &fwd, const void *dout, void *dq, void *dk,
                                            void *dv);

// The measurement both devices make of one implementation, into its row: on a backward the forward
// first, once on each of the `sets` input sets (the backward reads their o and lse); then
// config.warmup untimed calls, `synchronize()`, and config.repeats calls each timed by a Timer made at
// that point (start(), stop_ms()). The row gets the failure ("oom" or "error", naming the step), or
// the kernel, the library's scratch peak and the times. `forward(i)` and `call(i)` make one call on
// set i and return the C API's code. Returns false when the forward before the backward failed.
template <typename Timer, typename Forward, typename Call, typename Synchronize>
bool measure_impl(BenchRow &row, const BenchConfig &config, const AttentionShape &shape, int sets, Forward &&forward,
                  Call &&call, Synchronize &&synchronize) {
  int rc = FLASHBOX_OK;
  if (config.backward)
    for (int i = 0; i < sets && rc == FLASHBOX_OK; ++i) rc = forward(i);
  if (rc != FLASHBOX_OK) {
    record_failure(row, rc, "forward before backward");
    return false;
  }
  for (int i = 0; i < config.warmup && rc == FLASHBOX_OK; ++i) rc = call(i);
  synchronize();
  std::vector<double> times;
  Timer timer;
  for (int i = 0; i < config.repeats && rc == FLASHBOX_OK; ++i) {
    timer.start();
    rc = call(i);
    const double ms = timer.stop_ms();
    if (rc == FLASHBOX_OK) times.push_back(ms);
  }
  if (rc != FLASHBOX_OK) {
    record_failure(row, rc, config.backward ? "backward" : "forward");
  } else {
    row.kernel = flashbox_last_kernel();
    row.extra_bytes = flashbox_last_scratch_peak_bytes();
    record_times(row, config, shape, std::move(times));
  }
  return true;
}

}  // namespace flashbox::report::detail
