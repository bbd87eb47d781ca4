// GPU timings: CUDA events around each call on the default stream, after warm-up, inputs rotated among
// enough buffer sets that together exceed twice the L2 cache (so no call finds its inputs still
// cached by the previous one). Uses only cuda_device.hpp, so it builds without CUDA and then reports
// that no device is available.
#include "report/bench_point.hpp"

#include "report/cuda_device.hpp"
#include "report/random_fill.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace flashbox::report::detail {
namespace {

constexpr int kMaxSets = 64;

struct DeviceSet {
  DeviceBuffer q, k, v, o, lse, dout, dq, dk, dv;
};

int64_t set_bytes(const AttentionShape &s, bool backward) {
  const int64_t fwd = 2 * s.q_bytes() + 2 * s.kv_bytes() + s.lse_elements() * 4;
  return backward ? fwd + 2 * s.q_bytes() + 2 * s.kv_bytes() : fwd;
}

// Allocates and fills one set; throws DeviceOutOfMemory when it does not fit.
DeviceSet make_set(const AttentionShape &s, bool backward, uint64_t seed, std::vector<unsigned char> &staging) {
  DeviceSet d{DeviceBuffer(size_t(s.q_bytes())),
              DeviceBuffer(size_t(s.kv_bytes())),
              DeviceBuffer(size_t(s.kv_bytes())),
              DeviceBuffer(size_t(s.q_bytes())),
              DeviceBuffer(size_t(s.lse_elements() * 4)),
              {},
              {},
              {},
              {}};
  auto upload_random = [&](DeviceBuffer &dst, int64_t elements, uint64_t stream) {
    fill_random_normal(staging.data(), s.dtype, elements, seed, stream);
    dst.upload(staging.data(), dst.size());
  };
  upload_random(d.q, s.q_elements(), 0);
  upload_random(d.k, s.kv_elements(), 1);
  upload_random(d.v, s.kv_elements(), 2);
  if (backward) {
    d.dout = DeviceBuffer(size_t(s.q_bytes()));
    upload_random(d.dout, s.q_elements(), 3);
    d.dq = DeviceBuffer(size_t(s.q_bytes()));
    d.dk = DeviceBuffer(size_t(s.kv_bytes()));
    d.dv = DeviceBuffer(size_t(s.kv_bytes()));
  }
  return d;
}

BenchRow empty_row(const BenchConfig &c, flashbox_impl impl, int64_t seqlen) {
  BenchRow row;
  row.impl = flashbox_impl_name(impl);
  row.device = "cuda";
  row.direction = c.backward ? "backward" : "forward";
  row.seqlen = seqlen;
  return row;
}

}  // namespace

std::vector<BenchRow> bench_cuda_point(const BenchConfig &config, int64_t seqlen,
                                       const std::function<void(const std::string &)> &starting) {
  const AttentionShape shape = bench_shape(config, seqlen);
  std::vector<BenchRow> rows;
  auto fail_all = [&](const std::string &status, const std::string &why) {
    for (flashbox_impl impl : config.impls) {
      starting(flashbox_impl_name(impl));
      BenchRow row = empty_row(config, impl, seqlen);
      row.status = status;
      row.error = why;
      rows.push_back(std::move(row));
    }
    return rows;
  };
  const auto gpu = gpu_info();
  if (!gpu) return fail_all("error", "no CUDA device (or flashbox built without CUDA)");

  const int64_t rotate = config.rotate_bytes > 0 ? config.rotate_bytes : 2 * gpu->l2_bytes;
  const int64_t per_set = set_bytes(shape, config.backward);
  const int wanted = static_cast<int>(std::clamp<int64_t>((rotate + per_set - 1) / per_set, 1, kMaxSets));
  std::vector<DeviceSet> sets;
  std::vector<unsigned char> staging(size_t(std::max(shape.q_bytes(), shape.kv_bytes())));
  try {
    for (int i = 0; i < wanted; ++i) sets.push_back(make_set(shape, config.backward, config.seed + 7919u * i, staging));
  } catch (const DeviceOutOfMemory &e) {
    // Fewer sets still measure something; none at all means the problem itself does not fit.
    if (sets.empty()) return fail_all("oom", fmt::format("inputs and outputs do not fit: {}", e.what()));
  }
  staging = {};
  const int n = static_cast<int>(sets.size());

  for (flashbox_impl impl : config.impls) {
    starting(flashbox_impl_name(impl));
    BenchRow row = empty_row(config, impl, seqlen);
    row.input_sets = n;
    auto fwd_args = [&](int i) {
      DeviceSet &d = sets[size_t(i % n)];
      return make_args(shape, FLASHBOX_CUDA, impl, d.q.get(), d.k.get(), d.v.get(), d.o.get(),
                       static_cast<float *>(d.lse.get()));
    };
    auto call = [&](int i) {
      const auto fwd = fwd_args(i);
      if (!config.backward) return flashbox_attention_forward(&fwd);
      DeviceSet &d = sets[size_t(i % n)];
      const auto grad = make_grad_args(fwd, d.dout.get(), d.dq.get(), d.dk.get(), d.dv.get());
      return flashbox_attention_backward(&grad);
    };
    try {
      device_synchronize();
      const int64_t free_before = device_free_bytes();
      auto forward = [&](int i) {
        const auto fwd = fwd_args(i);
        return flashbox_attention_forward(&fwd);
      };
      if (measure_impl<GpuTimer>(row, config, shape, n, forward, call, [] { device_synchronize(); })) {
        device_synchronize();
        row.free_drop_bytes = free_before - device_free_bytes();
      }
    } catch (const std::exception &e) {
      row.status = "error";
      row.error = e.what();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace flashbox::report::detail
