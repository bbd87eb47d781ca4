#include "core/call_state.hpp"

#include <algorithm>

namespace flashbox::detail {
namespace {
thread_local int64_t t_scratch_now = 0;
thread_local int64_t t_scratch_peak = 0;
thread_local std::string t_kernel;
}  // namespace

void begin_call() {
  t_scratch_now = 0;
  t_scratch_peak = 0;
  t_kernel.clear();
}

void note_scratch_alloc(int64_t bytes) {
  t_scratch_now += bytes;
  t_scratch_peak = std::max(t_scratch_peak, t_scratch_now);
}

void note_scratch_free(int64_t bytes) { t_scratch_now -= bytes; }

void set_kernel_name(std::string name) { t_kernel = std::move(name); }

int64_t scratch_peak_bytes() { return t_scratch_peak; }

const char *kernel_name() { return t_kernel.c_str(); }

CallStateSnapshot save_call_state() { return {t_scratch_peak, t_kernel}; }

void restore_call_state(const CallStateSnapshot &s) {
  t_scratch_now = 0;
  t_scratch_peak = s.scratch_peak;
  t_kernel = s.kernel;
}

}  // namespace flashbox::detail
