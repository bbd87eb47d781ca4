#include "report/correctness.hpp"

#include "core/dtype.hpp"
#include "cpu/reference_fp64.hpp"
#include "report/build_config.hpp"
#include "report/cuda_device.hpp"
#include "report/dtype_names.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace flashbox::report {
namespace {

struct Target {
  flashbox_device device;
  flashbox_impl impl;
  std::string label;
  flashbox_kernel_family family = FLASHBOX_FAMILY_AUTO;  // asked for through flashbox_options
};

// The implementations to check; `not_checked` gets those this machine has but this build lacks.
std::vector<Target> targets_for_this_machine(bool use_gpu, std::vector<std::string> &not_checked) {
  std::vector<Target> t = {{FLASHBOX_CPU, FLASHBOX_NAIVE, "naive"}, {FLASHBOX_CPU, FLASHBOX_BLOCKED, "blocked"}};
  const auto gpu = use_gpu ? gpu_info() : std::nullopt;
  if (!gpu) return t;
  t.push_back({FLASHBOX_CUDA, FLASHBOX_NAIVE, "naive"});
  // On Hopper both flash kernel families exist (when this build has sm_90a): check each.
  if (gpu->cc_major == 9) {
    t.push_back({FLASHBOX_CUDA, FLASHBOX_FLASH, "flash (sm80)", FLASHBOX_FAMILY_SM80});
    if (built_with_sm90a())
      t.push_back({FLASHBOX_CUDA, FLASHBOX_FLASH, "flash (sm90)", FLASHBOX_FAMILY_SM90});
    else
      not_checked.push_back("cuda flash (sm90): this flashbox was built without sm_90a (FLASHBOX_CUDA_ARCHS)");
  } else {
    t.push_back({FLASHBOX_CUDA, FLASHBOX_FLASH, "flash"});
  }
  return t;
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// Runs one implementation; on success `host.o` holds its output.
CheckRow run_target(const Target &t, HostAttention &host) {
  CheckRow row;
  row.device = t.device == FLASHBOX_CPU ? "cpu" : "cuda";
  row.impl = flashbox_impl_name(t.impl);
  row.label = t.label;
  std::memset(host.o.data(), 0xff, host.o.size());  // poison: a skipped write shows up as NaN
  flashbox_options options;
  flashbox_options_init(&options);
  options.family = t.family;
  int rc = 0;
  // Every timed call follows one untimed call of the same implementation: the first call pays for
  // one-time work (cuBLAS handle and workspace, CUDA module loading, OpenMP threads, first-touch page
  // faults) that is not the attention. The output is poisoned again before the timed call, so the
  // error columns judge the timed call's output alone.
  if (t.device == FLASHBOX_CPU) {
    const auto args = host.args(t.impl);
    rc = flashbox_attention_forward_opts(&args, &options);
    std::memset(host.o.data(), 0xff, host.o.size());
    if (rc == FLASHBOX_OK) {
      const auto start = std::chrono::steady_clock::now();
      rc = flashbox_attention_forward_opts(&args, &options);
      row.ms = elapsed_ms(start);
    }
  } else {
    try {
      const AttentionShape &s = host.shape;
      DeviceBuffer q(host.q.size()), k(host.k.size()), v(host.v.size()), o(host.o.size());
      DeviceBuffer lse(host.lse.size() * sizeof(float));
      q.upload(host.q.data(), host.q.size());
      k.upload(host.k.data(), host.k.size());
      v.upload(host.v.data(), host.v.size());
      o.upload(host.o.data(), host.o.size());  // the poisoned bytes
      const auto args =
          make_args(s, FLASHBOX_CUDA, t.impl, q.get(), k.get(), v.get(), o.get(), static_cast<float *>(lse.get()));
      rc = flashbox_attention_forward_opts(&args, &options);  // warm-up
      if (rc == FLASHBOX_OK) {
        device_synchronize();
        o.upload(host.o.data(), host.o.size());  // poisoned again
        device_synchronize();
        const auto start = std::chrono::steady_clock::now();
        rc = flashbox_attention_forward_opts(&args, &options);
        if (rc == FLASHBOX_OK) device_synchronize();
        row.ms = elapsed_ms(start);
      }
      if (rc == FLASHBOX_OK) o.download(host.o.data(), host.o.size());
    } catch (const std::exception &e) {
      row.status = "error";
      row.error = e.what();
      return row;
    }
  }
  if (rc != FLASHBOX_OK) {
    row.status = "error";
    row.error = fmt::format("error {}: {}", rc, flashbox_last_error());
    return row;
  }
  row.kernel = flashbox_last_kernel();
  return row;
}

}  // namespace

ErrorNorms compare_to_reference(const void *out, flashbox_dtype dtype, const std::vector<double> &reference) {
  double max_abs = 0, diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double got = cpu::load_as_float(out, dtype, static_cast<int64_t>(i));
    const double d = std::fabs(got - reference[i]);
    // NaN compares false everywhere; make it win so a NaN output can never pass.
    max_abs = (d > max_abs || std::isnan(d)) ? d : max_abs;
    diff2 += (got - reference[i]) * (got - reference[i]);
    ref2 += reference[i] * reference[i];
  }
  return {max_abs, ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2)};
}

bool CheckResult::all_passed() const {
  for (const auto &r : rows)
    if (!r.passed) return false;
  return !rows.empty();
}

CheckResult run_check(const CheckConfig &config, const Progress &progress) {
  validate(config.shape);
  CheckResult result;
  result.config = config;
  result.threshold = rel_error_threshold(config.shape.dtype);

  HostAttention host(config.shape, config.seed);
  auto targets = targets_for_this_machine(config.gpu, result.not_checked);
  if (config.shape.dtype == FLASHBOX_FLOAT32 &&
      std::erase_if(targets, [](const Target &t) { return t.device == FLASHBOX_CUDA; }) > 0)
    result.not_checked.push_back("cuda: its implementations take fp16 and bf16, not fp32");
  const int total = static_cast<int>(targets.size()) + 1;
  auto report = [&](const std::string &what, int done) {
    if (progress) progress(what, done, total);
  };

  report("fp64 reference", 0);
  std::vector<double> reference;
  auto ref_args = host.args(FLASHBOX_AUTO);
  cpu::reference_attention_fp64(ref_args, reference, nullptr);

  std::vector<unsigned char> cpu_naive_out;
  for (size_t i = 0; i < targets.size(); ++i) {
    report(fmt::format("{} {}", targets[i].device == FLASHBOX_CPU ? "cpu" : "cuda", targets[i].label),
           static_cast<int>(i) + 1);
    CheckRow row = run_target(targets[i], host);
    if (row.status == "ok") {
      const auto norms = compare_to_reference(host.o.data(), config.shape.dtype, reference);
      row.max_abs_error = norms.max_abs;
      row.rel_error = norms.rel;
      row.passed = norms.rel < result.threshold;  // false for NaN as well
      if (targets[i].device == FLASHBOX_CPU && targets[i].impl == FLASHBOX_NAIVE) cpu_naive_out = host.o;
      if (targets[i].device == FLASHBOX_CPU && targets[i].impl == FLASHBOX_BLOCKED && !cpu_naive_out.empty()) {
        // Compare the two CPU levels directly: the same maths must give (nearly) the same numbers.
        std::vector<double> naive(static_cast<size_t>(config.shape.q_elements()));
        for (size_t j = 0; j < naive.size(); ++j)
          naive[j] = cpu::load_as_float(cpu_naive_out.data(), config.shape.dtype, static_cast<int64_t>(j));
        const auto agree = compare_to_reference(host.o.data(), config.shape.dtype, naive);
        result.blocked_vs_naive_max_abs = agree.max_abs;
        result.blocked_vs_naive_rel = agree.rel;
      }
    }
    result.rows.push_back(std::move(row));
  }
  report("done", total);
  return result;
}

nlohmann::json to_json(const CheckResult &r) {
  const AttentionShape &s = r.config.shape;
  nlohmann::json j;
  j["measured"] = true;
  j["config"] = {{"batch", s.batch},
                 {"heads_q", s.heads_q},
                 {"heads_kv", s.heads_kv},
                 {"seqlen_q", s.seqlen_q},
                 {"seqlen_k", s.seqlen_k},
                 {"head_dim", s.head_dim},
                 {"dtype", cpu::dtype_name(s.dtype)},
                 {"causal", s.causal},
                 {"seed", r.config.seed}};
  j["threshold"] = r.threshold;
  j["warmup_calls"] = 1;  // before each row's one timed call
  j["rows"] = nlohmann::json::array();
  for (const auto &row : r.rows) {
    nlohmann::json jr = {{"device", row.device}, {"impl", row.impl},     {"label", row.label}, {"kernel", row.kernel},
                         {"status", row.status}, {"passed", row.passed}, {"ms", row.ms}};
    // NaN is not JSON: an output with NaN (or no output) has null errors and passed=false.
    const bool ran = row.status == "ok";
    jr["max_abs_error"] =
        ran && std::isfinite(row.max_abs_error) ? nlohmann::json(row.max_abs_error) : nlohmann::json();
    jr["rel_error"] = ran && std::isfinite(row.rel_error) ? nlohmann::json(row.rel_error) : nlohmann::json();
    if (row.status != "ok") jr["error"] = row.error;
    j["rows"].push_back(std::move(jr));
  }
  if (r.blocked_vs_naive_max_abs)
    j["blocked_vs_naive"] = {{"max_abs", *r.blocked_vs_naive_max_abs}, {"rel", *r.blocked_vs_naive_rel}};
  else
    j["blocked_vs_naive"] = nullptr;
  j["not_checked"] = r.not_checked;
  j["all_passed"] = r.all_passed();
  return j;
}

}  // namespace flashbox::report
