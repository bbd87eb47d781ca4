// Fuzz target: the C API's argument handling, forward and backward, on the CPU. The input bytes are
// decoded into a flashbox_attention_args (and, for the backward, a flashbox_attention_grad_args):
// mostly small valid shapes, layouts (BTHD, BHTD, padded, raw strides) and options, with a few bits
// that break one thing at a time (raw enums or sizes, a raw softmax scale, an output aliasing an
// input, a misaligned or NULL pointer). Every tensor the arguments describe gets its own heap block
// of exactly the bytes its strides reach, so AddressSanitizer sees any access outside it.
// The contract checked, beyond "no crash, no out-of-bounds access":
//   - a rejected call returns a known error code with a message and writes nothing (outputs are
//     poisoned with 0xff bytes and must come back byte-identical);
//   - arguments this harness knows to be invalid (a size < 1, a buffer too small for what the
//     strides describe, an output on top of an input, a misaligned or NULL pointer) are rejected;
//   - an accepted call writes every output element and nothing between them (gaps of a padded
//     layout keep their poison), and with finite inputs and a sane scale no output is NaN;
//   - flashbox_attention_backward_workspace_size is negative exactly when the backward's scalar
//     checks fail, so never negative for a call that then succeeds.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu/dtype.hpp"
#include "flashbox/flashbox.h"

namespace {

// Reads the input front to back; past the end every read is 0, so short inputs are valid cases.
class Reader {
 public:
  Reader(const uint8_t *data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  uint32_t u32() { return uint32_t(u8()) | uint32_t(u8()) << 8 | uint32_t(u8()) << 16 | uint32_t(u8()) << 24; }
  int64_t i64() { return int64_t(uint64_t(u32()) | uint64_t(u32()) << 32); }
  float f32() {
    const uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

 private:
  const uint8_t *p_;
  size_t n_, i_ = 0;
};

// What the first byte of an input turns on.
enum Mode : uint8_t {
  kBackward = 1 << 0,  // also run the backward on the forward's outputs
  kRawEnums = 1 << 1,  // device, dtype, impl as raw 32-bit values
  kRawSizes = 1 << 2,  // sizes as raw 64-bit values
  kRawScale = 1 << 3,  // softmax_scale as raw 32-bit float bits (NaN, inf, negative, huge)
  kAlias = 1 << 4,     // the output (o, or dq in the backward) points at an input
  kMisalign = 1 << 5,  // one tensor pointer is one byte off its element alignment
  kNull = 1 << 6,      // one required pointer is NULL
  kLse = 1 << 7,       // the forward writes lse (the backward always needs it)
};

constexpr int64_t kMaxTensorBytes = int64_t(1) << 20;
constexpr int64_t kMaxWork = int64_t(1) << 21;  // batch * heads_q * seqlen_q * seqlen_k * head_dim

struct Dims {
  int64_t batch, seq, heads, head_dim;
};

// One tensor: its strides, its own heap block (exactly the bytes the strides reach) and the pointer
// handed to the library (the block, or something else when a mode breaks it on purpose).
struct Tensor {
  int64_t stride[3] = {0, 0, 0};
  Dims dims{};
  int64_t bytes = -1;  // -1: the strides do not describe a reachable range (bad or overflowing)
  std::unique_ptr<uint8_t[]> block;
  void *ptr = nullptr;
};

// Wrapping arithmetic: with raw sizes the layouts' strides overflow, and then they are just more
// raw values for the library to refuse.
int64_t mul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }
int64_t add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }

void decode_strides(Reader &r, Tensor &t, const Dims &d) {
  const uint8_t layout = r.u8();
  const int64_t pad = r.u8() % 5;
  switch (layout % 8) {
    case 0:
    case 1:
    case 2:  // BTHD, contiguous
      t.stride[2] = d.head_dim;
      t.stride[1] = mul(d.heads, d.head_dim);
      t.stride[0] = mul(d.seq, t.stride[1]);
      break;
    case 3:
    case 4:  // BHTD, contiguous
      t.stride[1] = d.head_dim;
      t.stride[2] = mul(d.seq, d.head_dim);
      t.stride[0] = mul(d.heads, t.stride[2]);
      break;
    case 5:
    case 6:  // BTHD with gaps after each head row, each token and each sequence
      t.stride[2] = add(d.head_dim, pad);
      t.stride[1] = add(mul(d.heads, t.stride[2]), pad);
      t.stride[0] = add(mul(d.seq, t.stride[1]), pad);
      break;
    default:  // anything: zero, negative, overlapping, overflowing
      for (int64_t &s : t.stride) s = (layout & 0x80) ? r.i64() : int64_t(int8_t(r.u8()));
      break;
  }
}

// Bytes from the first element to one past the last, or -1 when a stride is < 1 or it overflows.
int64_t reach_bytes(const int64_t stride[3], const Dims &d, int64_t elem) {
  const int64_t extent[3] = {d.batch, d.seq, d.heads};
  int64_t last = d.head_dim - 1;
  for (int i = 0; i < 3; ++i) {
    int64_t term;
    if (stride[i] < 1 || __builtin_mul_overflow(extent[i] - 1, stride[i], &term) ||
        __builtin_add_overflow(last, term, &last))
      return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, elem, &bytes)) return -1;
  return bytes;
}

// Visits the byte offset of every element of the tensor.
template <class Fn>
void for_each_element(const Tensor &t, int64_t elem, Fn &&fn) {
  for (int64_t b = 0; b < t.dims.batch; ++b)
    for (int64_t s = 0; s < t.dims.seq; ++s)
      for (int64_t h = 0; h < t.dims.heads; ++h)
        for (int64_t x = 0; x < t.dims.head_dim; ++x)
          fn((b * t.stride[0] + s * t.stride[1] + h * t.stride[2] + x) * elem);
}

[[noreturn]] void finding(const char *what) {
  std::fprintf(stderr, "fuzz_attention_api: %s (last error: '%s')\n", what, flashbox_last_error());
  std::abort();
}

struct Case {
  uint8_t mode = 0;
  bool sane_sizes = true;  // every size >= 1 and every buffer allocated as described
  bool must_fail = false;  // the harness broke something on purpose
  bool sane_scale = true;
  int device = 0, dtype_raw = 0, impl = 0;  // as decoded, possibly not enum values
  flashbox_dtype dtype = FLASHBOX_FLOAT32;
  int64_t elem = 4;
  flashbox_attention_args a{};
};

void allocate(Case &c, Tensor &t, bool output) {
  t.bytes = c.sane_sizes ? reach_bytes(t.stride, t.dims, c.elem) : -1;
  const bool described = t.bytes >= 0;
  if (!described) {
    // Nothing valid to describe: a small block, and the call must be refused.
    c.must_fail = true;
    t.bytes = 16;
  }
  t.block.reset(new uint8_t[size_t(t.bytes)]);
  std::memset(t.block.get(), 0xff, size_t(t.bytes));
  t.ptr = t.block.get();
  if (!output) {
    // Finite inputs in [-1, 1], varied by position so that no two rows are alike.
    const flashbox_dtype dt = c.dtype;
    if (described) {
      int64_t i = 0;
      for_each_element(t, c.elem, [&](int64_t off) {
        flashbox::cpu::store_from_float(t.block.get() + off, dt, 0, std::sin(float(++i) * 0.7f));
      });
    } else {
      std::memset(t.block.get(), 0, size_t(t.bytes));
    }
  }
}

bool poisoned(const uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] != 0xff) return false;
  return true;
}

// After a successful call: every element written (no poison, no NaN when that cannot be right) and
// every byte between elements untouched.
void check_written(const Case &c, const Tensor &t, bool expect_finite) {
  std::vector<uint8_t> is_element(size_t(t.bytes), 0);
  for_each_element(t, c.elem, [&](int64_t off) { std::memset(&is_element[size_t(off)], 1, size_t(c.elem)); });
  for (int64_t i = 0; i < t.bytes; ++i)
    if (!is_element[size_t(i)] && t.block[size_t(i)] != 0xff) finding("a byte between output elements was written");
  if (!expect_finite) return;
  for_each_element(t, c.elem, [&](int64_t off) {
    const float v = flashbox::cpu::load_as_float(t.block.get() + off, c.dtype, 0);
    if (std::isnan(v)) finding("an output element is NaN (unwritten, or computed wrong) for finite inputs");
  });
}

void check_failure(int rc) {
  if (rc < FLASHBOX_ERR_NULL_POINTER || rc > FLASHBOX_ERR_INTERNAL) finding("unknown error code");
  if (rc == FLASHBOX_ERR_INTERNAL) finding("FLASHBOX_ERR_INTERNAL: an exception escaped a backend");
  if (!flashbox_last_error() || !*flashbox_last_error()) finding("a rejected call left no message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r(data, size);
  Case c;
  c.mode = r.u8();
  flashbox_attention_args &a = c.a;

  if (c.mode & kRawEnums) {
    // Any int, as a C caller may pass; stored as bytes (a C++ enum cannot hold them).
    c.device = int(r.u32() % 4);  // 2, 3: not devices
    c.dtype_raw = int(r.u32());
    c.impl = int(r.u32());
  } else {
    c.device = r.u8() % 16 == 15 ? FLASHBOX_CUDA : FLASHBOX_CPU;  // no CUDA in this build: refused
    c.dtype_raw = r.u8() % 3;
    c.impl = r.u8() % 4;
  }
  if (c.mode & kRawSizes) {
    a.batch = r.i64(), a.seqlen_q = r.i64(), a.seqlen_k = r.i64();
    a.heads_q = r.i64(), a.heads_kv = r.i64(), a.head_dim = r.i64();
  } else {
    a.batch = 1 + r.u8() % 2;
    a.seqlen_q = 1 + r.u8() % 9;
    a.seqlen_k = 1 + r.u8() % 9;
    a.heads_kv = 1 + r.u8() % 3;
    a.heads_q = a.heads_kv * (1 + r.u8() % 3);
    const uint8_t d = r.u8();
    a.head_dim = 1 + (d & 0x80 ? d % 4 * 96 + d % 32 : d % 40);  // now and then past the CPU's 256
  }
  const uint8_t causal = r.u8();
  a.causal = causal < 250 ? causal & 1 : causal - 250 + 2;
  if (c.mode & kRawScale) {
    a.softmax_scale = r.f32();
    c.sane_scale = std::isfinite(a.softmax_scale) && a.softmax_scale >= 0 && a.softmax_scale <= 4;
  } else {
    const uint8_t s = r.u8();
    a.softmax_scale = s < 128 ? 0.0f : float(s - 127) * 0.02f;
  }

  std::memcpy(&a.device, &c.device, sizeof(int));
  std::memcpy(&a.dtype, &c.dtype_raw, sizeof(int));
  std::memcpy(&a.impl, &c.impl, sizeof(int));
  const bool dtype_known = flashbox::cpu::dtype_valid(c.dtype_raw);
  c.dtype = dtype_known ? flashbox_dtype(c.dtype_raw) : FLASHBOX_FLOAT32;  // how the harness fills buffers
  c.elem = flashbox::cpu::dtype_size(c.dtype);
  // Sizes < 1, or dense byte counts past int64, must be refused: the call gets 16-byte dummies.
  // Other sizes past what the harness allocates (4096 each, kMaxWork in all) are not a case.
  const int64_t sizes[] = {a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_kv, a.head_dim};
  bool too_large = false;
  for (int64_t s : sizes) {
    if (s < 1) c.sane_sizes = false;
    if (s > 4096) too_large = true;
  }
  if (c.sane_sizes && too_large) {
    int64_t n;
    const bool overflows = __builtin_mul_overflow(a.batch, a.seqlen_q, &n) ||
                           __builtin_mul_overflow(n, a.heads_q, &n) || __builtin_mul_overflow(n, a.head_dim, &n) ||
                           __builtin_mul_overflow(n, c.elem, &n) || __builtin_mul_overflow(a.batch, a.seqlen_k, &n) ||
                           __builtin_mul_overflow(n, a.heads_kv, &n) || __builtin_mul_overflow(n, a.head_dim, &n) ||
                           __builtin_mul_overflow(n, c.elem, &n);
    if (!overflows) return 0;
    c.sane_sizes = false;
  }
  if (c.sane_sizes && a.batch * a.heads_q * a.seqlen_q * a.seqlen_k * a.head_dim > kMaxWork) return 0;

  const Dims qd{a.batch, a.seqlen_q, a.heads_q, a.head_dim}, kd{a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
  Tensor q, k, v, o;
  q.dims = o.dims = qd;
  k.dims = v.dims = kd;
  for (Tensor *t : {&q, &k, &v, &o}) decode_strides(r, *t, t->dims);
  for (Tensor *t : {&q, &k, &v, &o})
    if (c.sane_sizes && reach_bytes(t->stride, t->dims, c.elem) > kMaxTensorBytes) return 0;
  allocate(c, q, false);
  allocate(c, k, false);
  allocate(c, v, false);
  allocate(c, o, true);

  const bool backward = c.mode & kBackward;
  const int64_t lse_count = c.sane_sizes ? a.batch * a.heads_q * a.seqlen_q : 4;
  std::vector<float> lse_block(size_t(lse_count) + 1);
  std::memset(lse_block.data(), 0xff, lse_block.size() * 4);
  float *lse = (backward || (c.mode & kLse)) ? lse_block.data() : nullptr;

  // Break one thing on purpose.
  const uint8_t which = r.u8();
  void **tensor_ptrs[] = {&q.ptr, &k.ptr, &v.ptr, &o.ptr};
  if (c.mode & kAlias) {
    o.ptr = *tensor_ptrs[which % 3];  // o on q, k or v
    c.must_fail = true;
  }
  if (c.mode & kMisalign) {
    if (which % 5 == 4) {
      if (lse) lse = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(lse) + 2);
      c.must_fail |= lse != nullptr;
    } else if (c.elem > 1) {
      // One byte in: the block still holds the reach, the pointer is off its element alignment.
      Tensor *ts[] = {&q, &k, &v, &o};
      Tensor &t = *ts[which % 4];
      std::unique_ptr<uint8_t[]> shifted(new uint8_t[size_t(t.bytes) + 1]);
      std::memcpy(shifted.get() + 1, t.block.get(), size_t(t.bytes));
      shifted[0] = 0xff;
      t.block = std::move(shifted);
      t.ptr = t.block.get() + 1;
      if (&t == &o) o.bytes += 1;  // the poison check covers the whole shifted block
      c.must_fail = true;
    }
  }
  if (c.mode & kNull) {
    *tensor_ptrs[which % 4] = nullptr;
    c.must_fail = true;
  }

  a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr, a.lse = lse;
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = q.stride[i], a.k_stride[i] = k.stride[i];
    a.v_stride[i] = v.stride[i], a.o_stride[i] = o.stride[i];
  }

  const int rc = flashbox_attention_forward(&a);
  static const bool verbose = std::getenv("FLASHBOX_FUZZ_VERBOSE") != nullptr;  // replaying: say what happened
  if (verbose) std::fprintf(stderr, "forward: rc %d %s\n", rc, rc ? flashbox_last_error() : flashbox_last_kernel());
  const bool o_is_own = o.ptr == o.block.get();
  if (rc != FLASHBOX_OK) {
    check_failure(rc);
    if (!poisoned(o.block.get(), o.bytes)) finding("a rejected forward wrote to o");
    if (!poisoned(reinterpret_cast<uint8_t *>(lse_block.data()), int64_t(lse_block.size()) * 4))
      finding("a rejected forward wrote to lse");
  } else {
    if (c.must_fail) finding("the forward accepted arguments that are invalid");
    if (o_is_own) check_written(c, o, c.sane_scale);
    if (lse)
      for (int64_t i = 0; i < lse_count; ++i)
        if (std::isnan(lse[i]) && c.sane_scale) finding("an lse entry is NaN or unwritten");
  }
  if (!backward) return 0;

  // The backward on the forward's outputs (or on whatever o and lse hold when the forward refused).
  flashbox_attention_grad_args g{};
  g.fwd = a;
  const uint8_t det = r.u8();
  g.deterministic = det < 250 ? det & 1 : det - 250 + 2;
  Tensor dout, dq, dk, dv;
  dout.dims = dq.dims = qd;
  dk.dims = dv.dims = kd;
  const bool forward_ok = rc == FLASHBOX_OK;
  if (!forward_ok) {
    // o and lse hold poison (NaN); give them values so the backward has numbers to work on.
    std::memset(o.block.get(), 0, size_t(o.bytes));
    std::fill(lse_block.begin(), lse_block.end(), 0.0f);
  }
  for (Tensor *t : {&dout, &dq, &dk, &dv}) decode_strides(r, *t, t->dims);
  for (Tensor *t : {&dout, &dq, &dk, &dv})
    if (c.sane_sizes && reach_bytes(t->stride, t->dims, c.elem) > kMaxTensorBytes) return 0;
  allocate(c, dout, false);
  allocate(c, dq, true);
  allocate(c, dk, true);
  allocate(c, dv, true);
  if (c.mode & kAlias) dq.ptr = *tensor_ptrs[which % 3];
  g.dout = dout.ptr, g.dq = dq.ptr, g.dk = dk.ptr, g.dv = dv.ptr;
  for (int i = 0; i < 3; ++i) {
    g.dout_stride[i] = dout.stride[i], g.dq_stride[i] = dq.stride[i];
    g.dk_stride[i] = dk.stride[i], g.dv_stride[i] = dv.stride[i];
  }

  const int64_t ws = flashbox_attention_backward_workspace_size(&g);
  const int brc = flashbox_attention_backward(&g);
  if (verbose)
    std::fprintf(stderr, "backward: rc %d %s (workspace %lld)\n", brc,
                 brc ? flashbox_last_error() : flashbox_last_kernel(), (long long)ws);
  if (brc != FLASHBOX_OK) {
    check_failure(brc);
    for (const Tensor *t : {&dq, &dk, &dv})
      if (!poisoned(t->block.get(), t->bytes)) finding("a rejected backward wrote to a gradient");
  } else {
    if (c.must_fail) finding("the backward accepted arguments that are invalid");
    if (ws < 0) finding("workspace_size refused arguments the backward accepted");
    const bool finite = forward_ok && c.sane_scale;
    for (const Tensor *t : {&dq, &dk, &dv})
      if (t->ptr == t->block.get()) check_written(c, *t, finite);
  }
  return 0;
}
