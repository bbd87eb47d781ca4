// See tma_host.hpp. docs/hopper.md §3.1 has the encoding rules.
#include "cuda/hopper/tma_host.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <algorithm>

namespace flashbox::sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

bool tma_available() { return tensor_map_encoder() != nullptr; }

const char *sm90_unavailable_reason() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return "no CUDA device to query";
  }
  if (major != 9 || minor != 0) return "the sm90 kernels are built for sm_90a and need compute capability 9.0";
  if (!tma_available()) return "the driver does not provide cuTensorMapEncodeTiled";
  return nullptr;
}

bool tma_describable(const TensorView &t, int elem_bytes) {
  if (reinterpret_cast<uintptr_t>(t.base) % 16 != 0) return false;
  const int64_t sizes[3] = {t.batch, t.seq, t.heads};
  for (int i = 0; i < 3; ++i)
    if (sizes[i] > 1 && ((t.stride[i] * elem_bytes) % 16 != 0 || t.stride[i] * elem_bytes >= (int64_t(1) << 40)))
      return false;
  return true;
}

bool encode_map(CUtensorMap *map, TmaOrder *ord, CUtensorMapDataType type, const TensorView &t, int64_t d,
                int box_rows, int box_cols, int elem_bytes) {
  struct Dim {
    int64_t size, stride;
    int which;  // 0 seq, 1 head, 2 batch
  };
  Dim dims[3] = {{t.seq, t.stride[1], 0}, {t.heads, t.stride[2], 1}, {t.batch, t.stride[0], 2}};
  const auto key = [](const Dim &x) { return x.size == 1 ? INT64_MAX : x.stride; };  // unit dims last
  std::stable_sort(dims, dims + 3, [&](const Dim &x, const Dim &y) { return key(x) < key(y); });
  cuuint64_t gdim[4] = {cuuint64_t(d), 1, 1, 1};
  cuuint64_t gstride[3];
  cuuint32_t box[4] = {cuuint32_t(box_cols), 1, 1, 1};
  const cuuint32_t estride[4] = {1, 1, 1, 1};
  int64_t extent = d * elem_bytes;  // bytes spanned by the dims so far: a legal stride for a unit dim
  int *slot[3] = {&ord->seq, &ord->head, &ord->batch};
  for (int i = 0; i < 3; ++i) {
    const int64_t stride_bytes = dims[i].size == 1 ? (extent + 15) / 16 * 16 : dims[i].stride * elem_bytes;
    gdim[i + 1] = cuuint64_t(dims[i].size);
    gstride[i] = cuuint64_t(stride_bytes);
    extent = std::max(extent, stride_bytes * dims[i].size);
    if (dims[i].which == 0) box[i + 1] = cuuint32_t(box_rows);
    *slot[dims[i].which] = i + 1;
  }
  const CUresult r = tensor_map_encoder()(map, type, 4, const_cast<void *>(t.base), gdim, gstride, box, estride,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          box_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

bool encode_map_4d(CUtensorMap *map, CUtensorMapDataType type, const void *base, const uint64_t (&dims)[4],
                   const uint64_t (&stride_bytes)[3], const uint32_t (&box)[4]) {
  cuuint64_t gdim[4], gstride[3];
  cuuint32_t b[4];
  const cuuint32_t estride[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) gdim[i] = dims[i], b[i] = box[i];
  for (int i = 0; i < 3; ++i) gstride[i] = stride_bytes[i];
  const CUresult r = tensor_map_encoder()(map, type, 4, const_cast<void *>(base), gdim, gstride, b, estride,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

}  // namespace flashbox::sm90
