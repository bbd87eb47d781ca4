// Per-call bookkeeping shared by all backends: the scratch allocations a call makes (so the peak
// extra memory is measured, not computed) and the name of the kernel that ran.
// The counters are thread-local to the calling thread: backends record allocations made on the
// calling thread (allocate before entering an OpenMP region, not inside it).
#pragma once
#include <cstdint>
#include <string>

namespace flashbox::detail {

void begin_call();                       // resets the scratch counters and the kernel name
void note_scratch_alloc(int64_t bytes);  // call after every successful scratch allocation
void note_scratch_free(int64_t bytes);   // call when that allocation is released
void set_kernel_name(std::string name);

int64_t scratch_peak_bytes();
const char *kernel_name();

// The state of the last successful call, kept across a failed one (the API reports the last
// *successful* call): snapshot before begin_call(), restore when the call fails.
struct CallStateSnapshot {
  int64_t scratch_peak = 0;
  std::string kernel;
};
CallStateSnapshot save_call_state();
void restore_call_state(const CallStateSnapshot &s);

}  // namespace flashbox::detail
