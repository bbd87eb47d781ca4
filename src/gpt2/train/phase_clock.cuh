// Where a CUDA training step's time goes (`flashbox gpt2 train --profile`): an event is recorded on the
// stream before each phase (mark("name")), so the interval between two marks is the GPU time of the
// work queued between them, including any time the GPU waited for the host to queue it. end_step()
// waits for the step, adds each interval to its name's total (phases that repeat per layer add up)
// and the report is ms per step by phase, largest first. The first step (cuBLASLt plans, warm-up) is
// left out. Off by default: then mark() and end_step() do nothing and nothing is synchronised.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace flashbox::gpt2::train {

class PhaseClock {
 public:
  explicit PhaseClock(bool on) : on_(on) {}
  ~PhaseClock() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  PhaseClock(const PhaseClock &) = delete;
  PhaseClock &operator=(const PhaseClock &) = delete;
  bool on() const { return on_; }

  void mark(const char *name) {
    if (!on_) return;
    if (used_ == 0) host_start_ = std::chrono::steady_clock::now();
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      cudaEventCreate(&e);
      events_.push_back(e);
    }
    cudaEventRecord(events_[used_], nullptr);
    names_.resize(std::max(names_.size(), used_ + 1));
    names_[used_++] = name;
  }

  void end_step() {
    if (!on_ || used_ == 0) return;
    mark("(end)");
    cudaEventSynchronize(events_[used_ - 1]);
    const double host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_).count();
    if (steps_seen_++ > 0) {
      for (size_t i = 0; i + 1 < used_; ++i) {
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, events_[i], events_[i + 1]);
        total_[names_[i]] += ms;
      }
      float span = 0.0f;
      cudaEventElapsedTime(&span, events_[0], events_[used_ - 1]);
      gpu_span_ += span;
      host_span_ += host_ms;
      ++timed_;
    }
    used_ = 0;
  }

  // One line per phase: ms per step and share of the GPU span; then the span and the host's time.
  std::string report() const {
    if (timed_ == 0) return "";
    std::vector<std::pair<double, std::string>> rows;
    for (const auto &[name, ms] : total_) rows.emplace_back(ms / double(timed_), name);
    std::sort(rows.rbegin(), rows.rend());
    std::string out = "phase profile (" + std::to_string(timed_) + " steps, ms per step):\n";
    char line[160];
    const double span = gpu_span_ / double(timed_);
    for (const auto &[ms, name] : rows) {
      std::snprintf(line, sizeof line, "  %-28s %8.3f ms %5.1f%%\n", name.c_str(), ms, 100.0 * ms / span);
      out += line;
    }
    std::snprintf(line, sizeof line, "  GPU span %.3f ms per step; host, first mark to step end, %.3f ms\n", span,
                  host_span_ / double(timed_));
    return out + line;
  }

 private:
  bool on_;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> names_;
  size_t used_ = 0;
  int steps_seen_ = 0, timed_ = 0;
  std::map<std::string, double> total_;
  double gpu_span_ = 0.0, host_span_ = 0.0;
  std::chrono::steady_clock::time_point host_start_;
};

}  // namespace flashbox::gpt2::train
