// CPU timings: std::chrono around each call, inputs rotated between two buffer sets.
#include "report/bench_point.hpp"

#include "report/random_fill.hpp"

#include <chrono>

namespace flashbox::report::detail {
namespace {

constexpr int kCpuSets = 2;

// One set of buffers for a problem: q/k/v (random), o/lse (the forward's), and for the backward
// dout (random) and dq/dk/dv.
struct CpuSet {
  CpuSet(const AttentionShape &s, uint64_t seed, bool backward) : host(s, seed) {
    if (!backward) return;
    dout.resize(host.o.size());
    fill_random_normal(dout.data(), s.dtype, s.q_elements(), seed, 3);
    dq.resize(host.q.size());
    dk.resize(host.k.size());
    dv.resize(host.v.size());
  }
  HostAttention host;
  std::vector<unsigned char> dout, dq, dk, dv;
};

// Wall time of one call.
class SteadyTimer {
 public:
  void start() { since_ = std::chrono::steady_clock::now(); }
  double stop_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since_).count();
  }

 private:
  std::chrono::steady_clock::time_point since_;
};

}  // namespace

std::vector<BenchRow> bench_cpu_point(const BenchConfig &config, int64_t seqlen,
                                      const std::function<void(const std::string &)> &starting) {
  const AttentionShape shape = bench_shape(config, seqlen);
  std::vector<CpuSet> sets;
  for (int i = 0; i < kCpuSets; ++i) sets.emplace_back(shape, config.seed + 7919u * i, config.backward);

  std::vector<BenchRow> rows;
  for (flashbox_impl impl : config.impls) {
    starting(flashbox_impl_name(impl));
    BenchRow row;
    row.impl = flashbox_impl_name(impl);
    row.device = "cpu";
    row.direction = config.backward ? "backward" : "forward";
    row.seqlen = seqlen;
    row.input_sets = kCpuSets;

    // One call on set `i`; the backward's o and lse come from a forward made before timing.
    auto call = [&](int i) {
      CpuSet &s = sets[static_cast<size_t>(i % kCpuSets)];
      const auto fwd = s.host.args(impl);
      if (!config.backward) return flashbox_attention_forward(&fwd);
      const auto grad = make_grad_args(fwd, s.dout.data(), s.dq.data(), s.dk.data(), s.dv.data());
      return flashbox_attention_backward(&grad);
    };
    auto forward = [&](int i) {
      const auto fwd = sets[static_cast<size_t>(i)].host.args(impl);
      return flashbox_attention_forward(&fwd);
    };
    measure_impl<SteadyTimer>(row, config, shape, kCpuSets, forward, call, [] {});
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace flashbox::report::detail
