#include "report/bench.hpp"

#include "core/dtype.hpp"
#include "report/bench_point.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

namespace flashbox::report {

std::vector<int64_t> default_bench_seqlens(flashbox_device device) {
  if (device == FLASHBOX_CPU) return {256, 512, 1024, 2048};
  return {512, 1024, 2048, 4096, 8192, 16384};
}

std::vector<flashbox_impl> default_bench_impls(flashbox_device device) {
  if (device == FLASHBOX_CPU) return {FLASHBOX_NAIVE, FLASHBOX_BLOCKED};
  return {FLASHBOX_NAIVE, FLASHBOX_FLASH};
}

flashbox_impl parse_impl(const std::string &name) {
  for (flashbox_impl impl : {FLASHBOX_AUTO, FLASHBOX_NAIVE, FLASHBOX_BLOCKED, FLASHBOX_FLASH})
    if (name == flashbox_impl_name(impl)) return impl;
  throw std::invalid_argument("unknown implementation '" + name + "' (expected naive, blocked, flash or auto)");
}

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace detail {

AttentionShape bench_shape(const BenchConfig &c, int64_t seqlen) {
  AttentionShape s{c.batch, seqlen, seqlen, c.heads, c.heads_kv ? c.heads_kv : c.heads, c.head_dim, c.dtype, c.causal};
  validate(s);
  return s;
}

void record_failure(BenchRow &row, int code, const char *what) {
  row.status = code == FLASHBOX_ERR_OUT_OF_MEMORY ? "oom" : "error";
  row.error = fmt::format("{}: error {}: {}", what, code, flashbox_last_error());
}

void record_times(BenchRow &row, const BenchConfig &config, const AttentionShape &shape, std::vector<double> times) {
  row.repeats = static_cast<int>(times.size());
  row.ms = median(std::move(times));
  // The backward recomputes S and P and computes dV, dP, dS, dQ, dK: 2.5x the forward's FLOPs.
  const double flops = shape.forward_flops() * (config.backward ? 2.5 : 1.0);
  row.tflops = *row.ms > 0 ? flops / (*row.ms * 1e-3) / 1e12 : 0.0;
}

flashbox_attention_grad_args make_grad_args(const flashbox_attention_args &fwd, const void *dout, void *dq, void *dk,
                                            void *dv) {
  flashbox_attention_grad_args g{};
  g.fwd = fwd;
  g.dout = dout;
  g.dq = dq;
  g.dk = dk;
  g.dv = dv;
  for (int i = 0; i < 3; ++i) {
    g.dout_stride[i] = g.dq_stride[i] = fwd.q_stride[i];
    g.dk_stride[i] = fwd.k_stride[i];
    g.dv_stride[i] = fwd.v_stride[i];
  }
  g.deterministic = 0;
  return g;
}

}  // namespace detail

BenchResult run_bench(const BenchConfig &config, const Progress &progress) {
  if (config.repeats < 1) throw std::invalid_argument("repeats must be >= 1");
  if (config.warmup < 0) throw std::invalid_argument("warmup must be >= 0");
  BenchResult result;
  result.config = config;
  if (result.config.seqlens.empty()) result.config.seqlens = default_bench_seqlens(config.device);
  if (result.config.impls.empty()) result.config.impls = default_bench_impls(config.device);
  for (int64_t t : result.config.seqlens) detail::bench_shape(result.config, t);  // bad sizes fail before any work

  const int total = static_cast<int>(result.config.seqlens.size() * result.config.impls.size());
  int done = 0;
  for (int64_t t : result.config.seqlens) {
    auto starting = [&](const std::string &impl) {
      if (progress) progress(fmt::format("T={} {}", t, impl), done++, total);
    };
    auto rows = config.device == FLASHBOX_CPU ? detail::bench_cpu_point(result.config, t, starting)
                                              : detail::bench_cuda_point(result.config, t, starting);
    for (auto &r : rows) result.rows.push_back(std::move(r));
    done = static_cast<int>(result.rows.size());
  }
  if (progress) progress("done", total, total);
  return result;
}

nlohmann::json to_json(const BenchResult &r) {
  const BenchConfig &c = r.config;
  nlohmann::json j;
  j["measured"] = true;
  j["device"] = c.device == FLASHBOX_CPU ? "cpu" : "cuda";
  j["config"] = {{"batch", c.batch},
                 {"heads", c.heads},
                 {"heads_kv", c.heads_kv ? c.heads_kv : c.heads},
                 {"head_dim", c.head_dim},
                 {"dtype", cpu::dtype_name(c.dtype)},
                 {"causal", c.causal},
                 {"direction", c.backward ? "backward" : "forward"},
                 {"repeats", c.repeats},
                 {"warmup", c.warmup},
                 {"seed", c.seed}};
  j["rows"] = nlohmann::json::array();
  auto opt = [](const auto &o) { return o ? nlohmann::json(*o) : nlohmann::json(); };
  for (const auto &row : r.rows) {
    nlohmann::json jr = {{"impl", row.impl},           {"device", row.device},
                         {"kernel", row.kernel},       {"seqlen", row.seqlen},
                         {"direction", row.direction}, {"ms", opt(row.ms)},
                         {"tflops", opt(row.tflops)},  {"extra_bytes", opt(row.extra_bytes)},
                         {"status", row.status},       {"input_sets", row.input_sets},
                         {"repeats", row.repeats}};
    if (row.free_drop_bytes) jr["free_drop_bytes"] = *row.free_drop_bytes;
    if (!row.error.empty()) jr["error"] = row.error;
    j["rows"].push_back(std::move(jr));
  }
  return j;
}

}  // namespace flashbox::report
