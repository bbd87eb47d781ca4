// See head_dim_v_split.hpp.
#include "api/head_dim_v_split.hpp"

#ifdef FLASHBOX_HAVE_CUDA
#include <algorithm>
#include <string>
#include <vector>

#include "api/arg_text.hpp"
#include "api/dispatch.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cuda/common/column_copy.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_scratch.hpp"

namespace flashbox::detail {
namespace {

using cuda::ColumnOp;
using cuda::ColumnView;

// Columns [c0, c0 + n) of V (and O, dO, dV), run at head dim w.
struct Slice {
  int64_t c0, n, w;
  bool in_place() const { return n == w; }  // the caller's V / O / dO are read where they are
};

std::vector<Slice> slices_of(int64_t head_dim, int64_t head_dim_v) {
  std::vector<Slice> s;
  for (int64_t c0 = 0; c0 < head_dim_v; c0 += kMaxSliceColumns) {
    const int64_t n = std::min(kMaxSliceColumns, head_dim_v - c0);
    s.push_back({c0, n, std::max(head_dim, round_up(n, 8))});
  }
  return s;
}

// The rows of a [n0, n1, n2, columns] tensor of the call (varlen: [1, total, heads]).
struct Rows {
  int64_t n[3];
  int64_t count() const { return n[0] * n[1] * n[2]; }
};
Rows query_rows(const Problem &p) { return {{p.varlen() ? 1 : p.batch, p.seqlen_q, p.heads_q}}; }
Rows key_rows(const Problem &p) { return {{p.varlen() ? 1 : p.batch, p.seqlen_k, p.heads_kv}}; }

// Regions of one scratch allocation, each 256-byte aligned (the kernels load 16 bytes at a time and
// the TMA wants 16-byte aligned tensors). A region that was never taken resolves to null.
struct Region {
  int64_t offset = -1;
};
class ScratchLayout {
 public:
  Region take(int64_t bytes) {
    const Region r{size_};
    size_ = round_up(size_ + bytes, 256);
    return r;
  }
  int64_t size() const { return size_; }

  int allocate(cuda::DeviceScratch &scratch, const char *pass) {
    if (size_ == 0) return FLASHBOX_OK;
    const cudaError_t e = scratch.allocate(size_);
    if (e == cudaErrorMemoryAllocation)
      return fail(FLASHBOX_ERR_OUT_OF_MEMORY, std::string("cuda ") + pass +
                                                  " with head_dim_v != head_dim: cannot allocate " +
                                                  std::to_string(size_) + " bytes of scratch (padded slices)");
    FLASHBOX_CUDA_TRY(e);
    base_ = scratch.as<char>();
    return FLASHBOX_OK;
  }
  void *at(Region r) const { return r.offset < 0 ? nullptr : base_ + r.offset; }

 private:
  int64_t size_ = 0;
  char *base_ = nullptr;
};

const void *column(const void *p, int64_t c0, flashbox_dtype t) {
  return static_cast<const char *>(p) + c0 * cpu::dtype_size(t);
}
void *column(void *p, int64_t c0, flashbox_dtype t) { return static_cast<char *>(p) + c0 * cpu::dtype_size(t); }

ColumnView view(const void *p, flashbox_dtype t, const int64_t *stride) {
  return {const_cast<void *>(p), t, {stride[0], stride[1], stride[2]}};
}

void dense_strides(int64_t *stride, const Rows &r, int64_t w) {
  const ColumnView v = cuda::dense_columns(nullptr, FLASHBOX_FLOAT32, r.n, w);
  std::copy_n(v.stride, 3, stride);
}

// n columns of a caller's tensor from column c0 into a dense [rows, w] tensor, the rest zero.
int pad_copy(void *dst, const void *src, const int64_t *src_stride, int64_t c0, int64_t n, int64_t w, const Rows &r,
             flashbox_dtype t, cudaStream_t stream) {
  return cuda::copy_columns(cuda::dense_columns(dst, t, r.n, w), view(column(src, c0, t), t, src_stride), r.n, w, n,
                            ColumnOp::copy, stream);
}

// The first n columns of a dense [rows, w] tensor of src_t into a caller's tensor (dtype t) from c0.
int copy_out(void *dst, const int64_t *dst_stride, int64_t c0, flashbox_dtype t, const void *src, flashbox_dtype src_t,
             int64_t w, int64_t n, const Rows &r, cudaStream_t stream) {
  return cuda::copy_columns(view(column(dst, c0, t), t, dst_stride),
                            cuda::dense_columns(const_cast<void *>(src), src_t, r.n, w), r.n, n, n, ColumnOp::copy,
                            stream);
}

// Q and K at a slice's head dim: the caller's at w = head_dim, else zero-padded copies (made again
// only when w changes from one slice to the next; the slices run in order on one stream).
struct PaddedQk {
  void *q = nullptr, *k = nullptr;  // scratch of the widest padded head dim
  int64_t w = 0;                    // the head dim they hold now (0: none yet)

  int apply(Problem &c, const Problem &p, const Rows &rq, const Rows &rk, int64_t w_slice, cudaStream_t stream) {
    if (w_slice == p.head_dim) return FLASHBOX_OK;  // c keeps the caller's q and k
    if (w_slice != w) {
      if (int rc = pad_copy(q, p.q, p.q_stride, 0, p.head_dim, w_slice, rq, p.dtype, stream)) return rc;
      if (int rc = pad_copy(k, p.k, p.k_stride, 0, p.head_dim, w_slice, rk, p.dtype, stream)) return rc;
      w = w_slice;
    }
    c.q = q, c.k = k;
    dense_strides(c.q_stride, rq, w_slice), dense_strides(c.k_stride, rk, w_slice);
    return FLASHBOX_OK;
  }
};

// The widest head dim a slice pads Q and K to (0: none), and the widest one that is not in place.
int64_t widest_padded_qk(const std::vector<Slice> &slices, int64_t head_dim) {
  int64_t w = 0;
  for (const Slice &s : slices)
    if (s.w > head_dim) w = std::max(w, s.w);
  return w;
}
int64_t widest_copied(const std::vector<Slice> &slices) {
  int64_t w = 0;
  for (const Slice &s : slices)
    if (!s.in_place()) w = std::max(w, s.w);
  return w;
}

std::string split_name(const std::vector<Slice> &slices, int64_t head_dim, int64_t head_dim_v) {
  std::string widths;
  for (const Slice &s : slices) widths += (widths.empty() ? "" : ", ") + std::to_string(s.w);
  return " (head_dim_v = " + std::to_string(head_dim_v) + " of head_dim = " + std::to_string(head_dim) + ": " +
         std::to_string(slices.size()) + (slices.size() == 1 ? " call" : " calls") + " at head dim " + widths + ")";
}

}  // namespace

int cuda_forward_head_dim_v(const Problem &p) {
  // A pair with a kernel of its own (tile_policy.hpp's dv_kernel) needs no slices where it runs.
  if (int rc = FLASHBOX_OK; cuda_forward_native_head_dim_v(p, rc)) return rc;
  const flashbox_dtype t = p.dtype;
  const int64_t d = p.head_dim, dv = p.head_dim_v, es = cpu::dtype_size(t);
  const std::vector<Slice> slices = slices_of(d, dv);
  const size_t last = slices.size() - 1;
  const Rows rq = query_rows(p), rk = key_rows(p);
  const auto stream = static_cast<cudaStream_t>(p.stream);

  // Scratch: padded Q and K, a padded V slice, and O for every slice but an in-place last one.
  ScratchLayout layout;
  const int64_t w_qk = widest_padded_qk(slices, d), w_v = widest_copied(slices);
  const Region q_pad = w_qk ? layout.take(rq.count() * w_qk * es) : Region{};
  const Region k_pad = w_qk ? layout.take(rk.count() * w_qk * es) : Region{};
  const Region v_pad = w_v ? layout.take(rk.count() * w_v * es) : Region{};
  std::vector<Region> o_slice(slices.size());
  for (size_t i = 0; i < slices.size(); ++i)
    if (!(i == last && slices[i].in_place())) o_slice[i] = layout.take(rq.count() * slices[i].w * es);
  cuda::DeviceScratch scratch(stream);
  if (int rc = layout.allocate(scratch, "forward")) return rc;

  PaddedQk qk{layout.at(q_pad), layout.at(k_pad)};
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice &s = slices[i];
    Problem c = p;
    c.head_dim = c.head_dim_v = s.w;
    if (int rc = qk.apply(c, p, rq, rk, s.w, stream)) return rc;
    if (s.in_place()) {
      c.v = column(p.v, s.c0, t);
    } else {
      if (int rc = pad_copy(layout.at(v_pad), p.v, p.v_stride, s.c0, s.n, s.w, rk, t, stream)) return rc;
      c.v = layout.at(v_pad);
      dense_strides(c.v_stride, rk, s.w);
    }
    if (o_slice[i].offset < 0) {
      c.o = column(p.o, s.c0, t);
    } else {
      c.o = layout.at(o_slice[i]);
      dense_strides(c.o_stride, rq, s.w);
    }
    c.lse = i == last ? p.lse : nullptr;  // every slice's LSE is the same
    if (int rc = cuda_forward(c)) return rc;
  }
  const std::string kernel = kernel_name();
  for (size_t i = 0; i < slices.size(); ++i)
    if (o_slice[i].offset >= 0)
      if (int rc = copy_out(p.o, p.o_stride, slices[i].c0, t, layout.at(o_slice[i]), t, slices[i].w, slices[i].n, rq,
                            stream))
        return rc;
  set_kernel_name(kernel + split_name(slices, d, dv));
  return FLASHBOX_OK;
}

int cuda_backward_head_dim_v(const GradProblem &g) {
  // A pair with a backward of its own (the same sm90::dv_kernel decision as the forward's) needs no
  // slices where it runs.
  if (int rc = FLASHBOX_OK; cuda_backward_native_head_dim_v(g, rc)) return rc;
  const Problem &p = g.fwd;
  const flashbox_dtype t = p.dtype;
  const int64_t d = p.head_dim, dv = p.head_dim_v, es = cpu::dtype_size(t);
  const std::vector<Slice> slices = slices_of(d, dv);
  const size_t last = slices.size() - 1;
  const bool one = slices.size() == 1;
  const bool dqk_in_place = one && slices[0].w == d;  // the only slice writes the caller's dq and dk
  const Rows rq = query_rows(p), rk = key_rows(p);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const bool sinks = g.dsink != nullptr;

  // Scratch: padded Q and K; padded V, O and dO slices; dV for every slice but an in-place last one;
  // a slice's dQ and dK at its head dim unless written in place, and with several slices their fp32
  // sums (and dsink's).
  ScratchLayout layout;
  const int64_t w_qk = widest_padded_qk(slices, d), w_v = widest_copied(slices);
  int64_t w_max = 0;
  for (const Slice &s : slices) w_max = std::max(w_max, s.w);
  const Region q_pad = w_qk ? layout.take(rq.count() * w_qk * es) : Region{};
  const Region k_pad = w_qk ? layout.take(rk.count() * w_qk * es) : Region{};
  const Region v_pad = w_v ? layout.take(rk.count() * w_v * es) : Region{};
  const Region o_pad = w_v ? layout.take(rq.count() * w_v * es) : Region{};
  const Region do_pad = w_v ? layout.take(rq.count() * w_v * es) : Region{};
  std::vector<Region> dv_slice(slices.size());
  for (size_t i = 0; i < slices.size(); ++i)
    if (!(i == last && slices[i].in_place())) dv_slice[i] = layout.take(rk.count() * slices[i].w * es);
  const Region dq_w = dqk_in_place ? Region{} : layout.take(rq.count() * w_max * es);
  const Region dk_w = dqk_in_place ? Region{} : layout.take(rk.count() * w_max * es);
  const Region dq_sum = one ? Region{} : layout.take(rq.count() * d * 4);
  const Region dk_sum = one ? Region{} : layout.take(rk.count() * d * 4);
  const Region dsink_w = sinks && !one ? layout.take(p.heads_q * 4) : Region{};
  const Region dsink_sum = sinks && !one ? layout.take(p.heads_q * 4) : Region{};
  cuda::DeviceScratch scratch(stream);
  if (int rc = layout.allocate(scratch, "backward")) return rc;

  const int64_t head_row[3] = {1, 1, 1};  // dsink: one row of heads_q columns
  PaddedQk qk{layout.at(q_pad), layout.at(k_pad)};
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice &s = slices[i];
    GradProblem c = g;
    c.fwd.head_dim = c.fwd.head_dim_v = s.w;
    if (int rc = qk.apply(c.fwd, p, rq, rk, s.w, stream)) return rc;
    if (s.in_place()) {
      c.fwd.v = column(p.v, s.c0, t), c.fwd.o = column(p.o, s.c0, t), c.dout = column(g.dout, s.c0, t);
    } else {
      if (int rc = pad_copy(layout.at(v_pad), p.v, p.v_stride, s.c0, s.n, s.w, rk, t, stream)) return rc;
      if (int rc = pad_copy(layout.at(o_pad), p.o, p.o_stride, s.c0, s.n, s.w, rq, t, stream)) return rc;
      if (int rc = pad_copy(layout.at(do_pad), g.dout, g.dout_stride, s.c0, s.n, s.w, rq, t, stream)) return rc;
      c.fwd.v = layout.at(v_pad), c.fwd.o = layout.at(o_pad), c.dout = layout.at(do_pad);
      dense_strides(c.fwd.v_stride, rk, s.w), dense_strides(c.fwd.o_stride, rq, s.w);
      dense_strides(c.dout_stride, rq, s.w);
    }
    if (dv_slice[i].offset < 0) {
      c.dv = column(g.dv, s.c0, t);
    } else {
      c.dv = layout.at(dv_slice[i]);
      dense_strides(c.dv_stride, rk, s.w);
    }
    if (!dqk_in_place) {
      c.dq = layout.at(dq_w), c.dk = layout.at(dk_w);
      dense_strides(c.dq_stride, rq, s.w), dense_strides(c.dk_stride, rk, s.w);
    }
    if (sinks && !one) c.dsink = static_cast<float *>(layout.at(dsink_w));
    if (int rc = cuda_backward(c)) return rc;
    if (one) break;
    // This slice's dQ, dK (their first head_dim columns) and dsink into the fp32 sums.
    const ColumnOp op = i == 0 ? ColumnOp::copy : ColumnOp::add;
    if (int rc = cuda::copy_columns(cuda::dense_columns(layout.at(dq_sum), FLASHBOX_FLOAT32, rq.n, d),
                                    cuda::dense_columns(c.dq, t, rq.n, s.w), rq.n, d, d, op, stream))
      return rc;
    if (int rc = cuda::copy_columns(cuda::dense_columns(layout.at(dk_sum), FLASHBOX_FLOAT32, rk.n, d),
                                    cuda::dense_columns(c.dk, t, rk.n, s.w), rk.n, d, d, op, stream))
      return rc;
    if (sinks)
      if (int rc = cuda::copy_columns(cuda::dense_columns(layout.at(dsink_sum), FLASHBOX_FLOAT32, head_row, p.heads_q),
                                      cuda::dense_columns(c.dsink, FLASHBOX_FLOAT32, head_row, p.heads_q), head_row,
                                      p.heads_q, p.heads_q, op, stream))
        return rc;
  }

  // Every slice has run: the outputs not written in place are copied out.
  const std::string kernel = kernel_name();
  if (!dqk_in_place) {
    const void *dq_src = one ? layout.at(dq_w) : layout.at(dq_sum);
    const void *dk_src = one ? layout.at(dk_w) : layout.at(dk_sum);
    const flashbox_dtype src_t = one ? t : FLASHBOX_FLOAT32;
    const int64_t src_w = one ? slices[0].w : d;
    if (int rc = copy_out(g.dq, g.dq_stride, 0, t, dq_src, src_t, src_w, d, rq, stream)) return rc;
    if (int rc = copy_out(g.dk, g.dk_stride, 0, t, dk_src, src_t, src_w, d, rk, stream)) return rc;
  }
  if (sinks && !one)
    if (int rc = cuda::copy_columns(cuda::dense_columns(g.dsink, FLASHBOX_FLOAT32, head_row, p.heads_q),
                                    cuda::dense_columns(layout.at(dsink_sum), FLASHBOX_FLOAT32, head_row, p.heads_q),
                                    head_row, p.heads_q, p.heads_q, ColumnOp::copy, stream))
      return rc;
  for (size_t i = 0; i < slices.size(); ++i)
    if (dv_slice[i].offset >= 0)
      if (int rc = copy_out(g.dv, g.dv_stride, slices[i].c0, t, layout.at(dv_slice[i]), t, slices[i].w, slices[i].n, rk,
                            stream))
        return rc;
  set_kernel_name(kernel + split_name(slices, d, dv));
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
#endif
