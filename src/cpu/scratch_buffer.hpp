// Host scratch memory that the call-state bookkeeping sees: every CPU level allocates its
// intermediate buffers through ScratchBuffer on the calling thread, so flashbox_last_scratch_peak_bytes
// reports what was really allocated.
#pragma once
#include <cstdint>
#include <memory>

#include "core/call_state.hpp"

namespace flashbox::cpu {

class ScratchBuffer {
 public:
  // Throws std::bad_alloc when the allocation fails (the API turns it into FLASHBOX_ERR_OUT_OF_MEMORY).
  explicit ScratchBuffer(int64_t count) : data_(new float[size_t(count)]), bytes_(count * int64_t(sizeof(float))) {
    detail::note_scratch_alloc(bytes_);
  }
  ~ScratchBuffer() { detail::note_scratch_free(bytes_); }
  ScratchBuffer(const ScratchBuffer &) = delete;
  ScratchBuffer &operator=(const ScratchBuffer &) = delete;

  float *data() { return data_.get(); }
  int64_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<float[]> data_;
  int64_t bytes_;
};

// Bytes of host memory the kernel reports as available (MemAvailable), or -1 when unknown. Used to
// refuse an allocation that Linux would grant lazily and then kill the process for.
int64_t available_host_memory_bytes();

}  // namespace flashbox::cpu
