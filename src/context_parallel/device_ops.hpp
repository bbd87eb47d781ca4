// What the algorithm needs from a device besides the attention calls (which go to flashbox's C API
// with the args' device and stream): memory, streams and events, a strided row copy with dtype
// conversion, and the LSE merge. CpuOps runs everything at once on the host (streams and events are
// empty); CudaOps enqueues on streams, so the same program overlaps transfers with compute on a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "flashbox/flashbox.h"

namespace flashbox::cp {

using Stream = void *;  // cudaStream_t on CUDA, nullptr on the CPU
using Event = void *;   // cudaEvent_t on CUDA, nullptr on the CPU

// dst[i0, i1, i2, 0:width] (op)= src[i0, i1, i2, 0:width] over n[0] x n[1] x n[2] rows, strides in
// elements. src == nullptr copies `fill`. accumulate adds into dst (dst must be fp32).
struct RowCopy {
  int64_t n[3] = {1, 1, 1};
  int64_t width = 0;
  const void *src = nullptr;
  flashbox_dtype src_dtype = FLASHBOX_FLOAT32;
  int64_t src_stride[3] = {0, 0, 0};
  void *dst = nullptr;
  flashbox_dtype dst_dtype = FLASHBOX_FLOAT32;
  int64_t dst_stride[3] = {0, 0, 0};
  bool accumulate = false;
  float fill = 0.0f;
};

// The merge of merge_math.hpp over n[0] x n[1] x n[2] rows of head_dim elements: (acc_o, acc_lse) <-
// merge((acc_o, acc_lse), (part_o, part_lse)). acc in fp32, part_o in `part_dtype`. Row (i0, i1, i2)
// of an O tensor starts at i0*s[0] + i1*s[1] + i2*s[2]; of an LSE tensor likewise (one float).
struct MergeArgs {
  int64_t n[3] = {1, 1, 1};
  int64_t head_dim = 0;
  float *acc_o = nullptr;
  int64_t acc_o_stride[3] = {0, 0, 0};
  float *acc_lse = nullptr;
  int64_t acc_lse_stride[3] = {0, 0, 0};
  const void *part_o = nullptr;
  flashbox_dtype part_dtype = FLASHBOX_FLOAT32;
  int64_t part_o_stride[3] = {0, 0, 0};
  const float *part_lse = nullptr;
  int64_t part_lse_stride[3] = {0, 0, 0};
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual flashbox_device device() const = 0;
  virtual int alloc(void **p, size_t bytes, Stream s) = 0;  // zero bytes gives nullptr
  virtual void release(void *p, Stream s) = 0;
  virtual int create_stream(Stream *s) = 0;
  virtual void destroy_stream(Stream s) = 0;
  virtual int create_event(Event *e) = 0;
  virtual void destroy_event(Event e) = 0;
  virtual int record(Event e, Stream s) = 0;
  virtual int wait(Stream s, Event e) = 0;  // later work on s waits for what e recorded
  virtual int synchronize(Stream s) = 0;
  virtual int copy_bytes(void *dst, const void *src, size_t bytes, Stream s) = 0;
  virtual int copy_rows(const RowCopy &c, Stream s) = 0;
  virtual int merge(const MergeArgs &m, Stream s) = 0;
};

// The host implementation (always built) and the CUDA one (nullptr when built without CUDA).
std::unique_ptr<DeviceOps> make_cpu_ops();
std::unique_ptr<DeviceOps> make_cuda_ops();

// The host loops behind CpuOps, also the reference the CUDA kernels are tested against.
void copy_rows_host(const RowCopy &c);
void merge_host(const MergeArgs &m);

}  // namespace flashbox::cp
