// Internal to the bench harness: one (T, implementation) measurement per device. The CUDA one lives in
// bench_cuda.cpp, guarded by FLASHBOX_HAVE_CUDA; the CPU one in bench_cpu.cpp.
#pragma once
#include "report/bench.hpp"

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

flashbox_attention_grad_args make_grad_args(const flashbox_attention_args &fwd, const void *dout, void *dq,
                                            void *dk, void *dv);

}  // namespace flashbox::report::detail
