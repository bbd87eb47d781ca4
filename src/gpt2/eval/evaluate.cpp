#include "gpt2/eval/evaluate.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "gpt2/error.hpp"
#include "gpt2/model/cpu_forward.hpp"
#ifdef FLASHBOX_HAVE_CUDA
#include "gpt2/cuda/cuda_gpt2.hpp"
#endif

namespace flashbox::gpt2 {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void report(const EvalOptions &o, const std::string &what, int64_t done, int64_t total) {
  if (o.progress) o.progress(what, int(done), int(total));
}

}  // namespace

std::vector<flashbox_impl> impls_for(flashbox_device device) {
  if (device == FLASHBOX_CUDA) return {FLASHBOX_NAIVE, FLASHBOX_FLASH};
  return {FLASHBOX_NAIVE, FLASHBOX_BLOCKED};
}

EvalResult evaluate(const Gpt2Weights &w, const std::vector<int32_t> &tokens, const EvalOptions &o) {
  const Gpt2Config &c = w.config();
  if (o.seqlen < 2 || o.seqlen > c.n_ctx)
    throw Gpt2Error(fmt::format("--seqlen {} must be between 2 and the model's context of {}", o.seqlen, c.n_ctx));
  const int64_t usable = o.count > 0 ? std::min<int64_t>(o.count, int64_t(tokens.size())) : int64_t(tokens.size());
  const int64_t windows = usable / o.seqlen;
  if (windows == 0) throw Gpt2Error(fmt::format("{} tokens do not fill one window of {}", usable, o.seqlen));
  for (int64_t i = 0; i < windows * o.seqlen; ++i)
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= c.vocab_size)
      throw Gpt2Error(fmt::format("token {} at position {} is outside the model's vocabulary of {}", tokens[size_t(i)],
                                  i, c.vocab_size));

  EvalResult r;
  r.config = c.name;
  r.device = o.device == FLASHBOX_CUDA ? "cuda" : "cpu";
  r.seqlen = o.seqlen;
  r.windows = windows;
  r.tokens = windows * o.seqlen;
  r.batch = int(std::min<int64_t>(windows, o.batch > 0 ? o.batch : (o.device == FLASHBOX_CUDA ? 16 : 1)));
  const double targets = double(windows) * double(o.seqlen - 1);
  const std::vector<flashbox_impl> impls = o.impls.empty() ? impls_for(o.device) : o.impls;

#ifdef FLASHBOX_HAVE_CUDA
  std::unique_ptr<CudaGpt2> gpu;
#endif
  if (o.device == FLASHBOX_CUDA) {
#ifdef FLASHBOX_HAVE_CUDA
    report(o, "uploading weights", 0, 1);
    gpu = std::make_unique<CudaGpt2>(w, r.batch, o.seqlen);
    gpu->set_tokens(tokens, windows);
#else
    throw Gpt2Error("this flashbox was built without CUDA");
#endif
  }

  std::optional<double> naive_loss;
  for (flashbox_impl impl : impls) {
    EvalRow row;
    row.impl = flashbox_impl_name(impl);
    row.device = r.device;
    const std::string what = fmt::format("gpt2 {} {}", r.device, row.impl);
    try {
      double sum = 0.0;
      if (o.device == FLASHBOX_CPU) {
        CpuGpt2 model(w);
        const auto t0 = Clock::now();
        for (int64_t b = 0; b < windows; b += r.batch) {
          const int nb = int(std::min<int64_t>(r.batch, windows - b));
          report(o, what, b, windows);
          sum += model.loss_sum(tokens.data() + b * o.seqlen, nb, o.seqlen, impl);
        }
        row.seconds = seconds_since(t0);
      } else {
#ifdef FLASHBOX_HAVE_CUDA
        // One untimed batch first: cuBLAS heuristics, kernel loading and the attention library's first
        // call are set-up, not evaluation.
        report(o, what + " (warm-up)", 0, windows);
        gpu->loss_sum(impl, {}, r.batch);
        const auto t0 = Clock::now();
        // Progress on a terminal costs a synchronisation per batch; without a listener there is none.
        std::function<void(int64_t, int64_t)> on_batch;
        if (o.progress) on_batch = [&](int64_t done, int64_t total) { report(o, what, done, total); };
        sum = gpu->loss_sum(impl, on_batch);
        row.seconds = seconds_since(t0);
#endif
      }
      report(o, what, windows, windows);
      row.ok = std::isfinite(sum);
      row.loss = sum / targets;
      if (!row.ok) row.error = "the loss is not finite";
      row.tokens_per_second = row.seconds > 0 ? double(r.tokens) / row.seconds : 0.0;
      if (impl == FLASHBOX_NAIVE && row.ok) naive_loss = row.loss;
      if (naive_loss && row.ok) row.diff_from_naive = row.loss - *naive_loss;
    } catch (const Gpt2Error &e) {
      row.ok = false;
      row.error = e.what();
    }
    r.rows.push_back(row);
  }
  return r;
}

nlohmann::json to_json(const EvalResult &r, const std::string &weights_label) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto &row : r.rows) {
    nlohmann::json j = {{"impl", row.impl}, {"device", row.device}};
    if (row.ok) {
      j["loss"] = row.loss;
      j["diff_from_naive"] = row.diff_from_naive ? nlohmann::json(*row.diff_from_naive) : nlohmann::json(nullptr);
      j["seconds"] = row.seconds;
      j["tokens_per_second"] = row.tokens_per_second;
    } else {
      j["loss"] = nullptr;
      j["diff_from_naive"] = nullptr;
      j["seconds"] = nullptr;
      j["tokens_per_second"] = nullptr;
      j["error"] = row.error;
    }
    rows.push_back(j);
  }
  return {{"measured", true},     {"config", r.config}, {"weights", weights_label},
          {"tokens", r.tokens},   {"seqlen", r.seqlen}, {"batch", r.batch},
          {"windows", r.windows}, {"device", r.device}, {"rows", rows}};
}

}  // namespace flashbox::gpt2
