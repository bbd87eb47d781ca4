// Per-call bookkeeping shared by all backends: the scratch allocations a call makes (so the peak
// extra memory is measured, not computed) and the name of the kernel that ran.
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

}  // namespace flashbox::detail
