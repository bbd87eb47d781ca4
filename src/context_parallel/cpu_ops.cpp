// DeviceOps on the host: every operation runs at once, streams and events are empty handles. The
// row loops here are also the reference the CUDA kernels (cuda_ops.cu) are tested against.
#include <cstdlib>
#include <cstring>
#include <new>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/device_ops.hpp"
#include "context_parallel/element.hpp"
#include "context_parallel/merge_math.hpp"

namespace flashbox::cp {

void copy_rows_host(const RowCopy &c) {
  for (int64_t a = 0; a < c.n[0]; ++a)
    for (int64_t b = 0; b < c.n[1]; ++b)
      for (int64_t r = 0; r < c.n[2]; ++r) {
        const int64_t so = a * c.src_stride[0] + b * c.src_stride[1] + r * c.src_stride[2];
        const int64_t d0 = a * c.dst_stride[0] + b * c.dst_stride[1] + r * c.dst_stride[2];
        for (int64_t x = 0; x < c.width; ++x) {
          float v = c.src ? load_element(c.src, c.src_dtype, so + x) : c.fill;
          if (c.accumulate) v += static_cast<float *>(c.dst)[d0 + x];
          store_element(c.dst, c.dst_dtype, d0 + x, v);
        }
      }
}

void merge_host(const MergeArgs &m) {
  for (int64_t a = 0; a < m.n[0]; ++a)
    for (int64_t b = 0; b < m.n[1]; ++b)
      for (int64_t r = 0; r < m.n[2]; ++r) {
        auto off = [&](const int64_t *s) { return a * s[0] + b * s[1] + r * s[2]; };
        float &acc_lse = m.acc_lse[off(m.acc_lse_stride)];
        const MergeWeights w = merge_weights(acc_lse, m.part_lse[off(m.part_lse_stride)]);
        float *o = m.acc_o + off(m.acc_o_stride);
        const int64_t po = off(m.part_o_stride);
        for (int64_t x = 0; x < m.head_dim; ++x)
          o[x] = merge_value(w, o[x], load_element(m.part_o, m.part_dtype, po + x));
        acc_lse = w.lse;
      }
}

namespace {

class CpuOps final : public DeviceOps {
 public:
  flashbox_device device() const override { return FLASHBOX_CPU; }
  int alloc(void **p, size_t bytes, Stream) override {
    *p = nullptr;
    if (bytes == 0) return 0;
    *p = std::malloc(bytes);
    if (!*p) return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "host allocation of " + std::to_string(bytes) + " bytes failed");
    return 0;
  }
  void release(void *p, Stream) override { std::free(p); }
  int create_stream(Stream *s) override {
    *s = nullptr;
    return 0;
  }
  void destroy_stream(Stream) override {}
  int create_event(Event *e) override {
    *e = nullptr;
    return 0;
  }
  void destroy_event(Event) override {}
  int record(Event, Stream) override { return 0; }
  int wait(Stream, Event) override { return 0; }
  int synchronize(Stream) override { return 0; }
  int copy_bytes(void *dst, const void *src, size_t bytes, Stream) override {
    if (bytes) std::memmove(dst, src, bytes);
    return 0;
  }
  int copy_rows(const RowCopy &c, Stream) override {
    copy_rows_host(c);
    return 0;
  }
  int merge(const MergeArgs &m, Stream) override {
    merge_host(m);
    return 0;
  }
};

}  // namespace

std::unique_ptr<DeviceOps> make_cpu_ops() { return std::make_unique<CpuOps>(); }

#ifndef FLASHBOX_HAVE_CUDA
std::unique_ptr<DeviceOps> make_cuda_ops() { return nullptr; }  // cuda_ops.cu is not built
#endif

}  // namespace flashbox::cp
