// The extension on the GPU (flashbox_attention_forward_ext / _backward_ext, device = cuda): sliding
// windows, softcap, ALiBi (per head and per batch x head), variable-length batches (lengths 0 and 1
// included, seqlen_q != seqlen_k), GQA, causal and not, and head dims that are multiples of 8 below
// the kernels' 64 / 128 / 256 (HeadDimsAbove128: 136 to 256; on Hopper the sm90 forward's and
// backward's 192 / 256 kernels), forward and backward (atomic and deterministic dQ), bf16, against the fp64
// CPU reference (src/cpu/reference_fp64.hpp, reference_backward_fp64.hpp) on random inputs (seed
// printed; FLASHBOX_TEST_SEED=N repeats one; the tensors and the reference: support/ext_tensors.hpp).
// Outputs are poisoned (NaN) and framed by guard bytes that must survive; the backward runs on the GPU
// forward's own O and LSE.
// On the H200, auto runs the sm90 forward where it takes the call (windows, softcap, ALiBi, and
// since 2026-12-01 varlen up to head_dim 128) and the sm90 backward for windows, softcap,
// ALiBi and (branch sm90-varlen-bwd) varlen at every head_dim up to 128 (since branch paddims the d32 /
// d40 / d80 / d96 cases here too: d64, d96 and d128 kernels with zero columns), and windows, softcap
// and ALiBi at 136..256 (d192 / d256) (not deterministic above 128); sm80 for the rest (varlen above 128).
// FLASHBOX_FLASH_ARCH=sm80 FLASHBOX_BWD_ARCH=sm80 pins sm80 for every case (family_pin.hpp).
// SmallCases is the set compute-sanitizer runs; LargeCases adds T = 1000; MalformedCuSeqlensStayInBounds
// checks the device-side clamping of unchecked prefix sums.
// Skipped, with the reason, where there is no GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "flashbox/flashbox.h"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"
#include "support/ext_tensors.hpp"
#include "support/family_pin.hpp"
#include "support/gpu_check.hpp"
#include "support/mods_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::test {
namespace {

// The shape and mods (support/mods_case.hpp), then:
struct ExtCase : ModsCase {
  std::vector<int> lens_q = {}, lens_k = {};  // varlen when set (batch, seqlen_* then follow from them)
  // Plain calls only: the forward through flashbox_attention_forward_opts with family = sm80, so
  // that a plain head_dim 256 forward runs the sm80 d256 kernel on a Hopper device too (auto gives
  // it to the sm90 d256 forward).
  bool sm80_forward = false;
};

ExtCase on_sm80_forward(ExtCase c) {
  c.sm80_forward = true;
  return c;
}

void run_case(const ExtCase &c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.name + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  const ExtTensors t(c, c.lens_q, c.lens_k, ExtDraw{}, rng);
  const ExtReference ref = ext_reference(t);

  DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(t.v.data(), t.v.size() * 2);
  DeviceInput dout(t.dout.data(), t.dout.size() * 2);
  DeviceInput cu_q(t.cu_q.data(), t.cu_q.size() * 4), cu_k(t.cu_k.data(), t.cu_k.size() * 4);
  DeviceInput slopes(t.slopes.data(), t.slopes.size() * 4);
  GuardedOutput o(t.q.size() * 2), lse(size_t(t.total_q * c.heads_q) * 4);
  ASSERT_TRUE(q.ptr && k.ptr && v.ptr && dout.ptr && o.raw && lse.raw) << "device allocation";

  flashbox_attention_args a = t.args();
  a.device = FLASHBOX_CUDA;
  a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
  flashbox_attention_ext e = call_ext(c, slopes.ptr);
  if (t.varlen) {
    e.cu_seqlens_q = static_cast<const int32_t *>(cu_q.ptr), e.cu_seqlens_k = static_cast<const int32_t *>(cu_k.ptr);
    e.max_seqlen_q = t.max_q, e.max_seqlen_k = t.max_k;
  }
  if (c.sm80_forward) {
    flashbox_options opts;
    flashbox_options_init(&opts);
    opts.family = FLASHBOX_FAMILY_SM80;
    ASSERT_TRUE(c.lens_q.empty() && c.window_left < 0 && c.window_right < 0 && c.softcap == 0 && c.alibi == Alibi::none)
        << "sm80_forward is for plain calls (the options entry point has no extension)";
    ASSERT_EQ(flashbox_attention_forward_opts(&a, &opts), 0) << flashbox_last_error();
  } else {
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
  }
  const std::string fwd_kernel = flashbox_last_kernel();
  // Above 128 every forward is the sm80 d256 kernel's except one without softcap, ALiBi or varlen
  // (plain or windowed), which the sm90 d256 forward takes on a Hopper device (every head_dim in
  // 136..256 since branch sm90-head-dims; FLASHBOX_FLASH_ARCH=sm80 keeps them on sm80); the backward
  // above 128: below.
  const char *arch = std::getenv("FLASHBOX_FLASH_ARCH");
  const bool forced_sm80 = arch != nullptr && std::string(arch) == "sm80";
  const bool sm90_may_take = !forced_sm80 && !c.sm80_forward && c.lens_q.empty() && c.softcap == 0 &&
                             c.alibi == Alibi::none;
  if (c.head_dim > 128 && !sm90_may_take)
    EXPECT_NE(fwd_kernel.find("cuda_flash_sm80_d256"), std::string::npos) << fwd_kernel;
#ifdef FLASHBOX_HAVE_SM90
  // On a Hopper device auto gives those plain and windowed calls to the sm90 forward: 136..192 on its
  // head_dim 192 kernel (since branch sm90-d192), 200..256 on the 256 one.
  int dev = 0, major = 0;
  if (c.head_dim > 128 && sm90_may_take && cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major == 9) {
    const bool on_sm90 =
        fwd_kernel.rfind(c.head_dim <= 192 ? "cuda_flash_sm90_d192_" : "cuda_flash_sm90_d256_", 0) == 0;
    std::string why;
    if (!on_sm90 && c.window_left < 0 && c.window_right < 0) {  // the sm90 family's own reason, asked for
      flashbox_options opts;
      flashbox_options_init(&opts);
      opts.family = FLASHBOX_FAMILY_SM90;
      why = flashbox_attention_forward_opts(&a, &opts) == 0 ? "(sm90 takes it when asked)" : flashbox_last_error();
    }
    EXPECT_TRUE(on_sm90) << fwd_kernel << ": " << why;
  }
#endif
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> o_host(t.q.size());
  std::vector<float> lse_host(size_t(t.total_q * c.heads_q));
  ASSERT_TRUE(o.back(o_host.data())) << "a guard byte around o changed (write out of bounds)";
  ASSERT_TRUE(lse.back(lse_host.data())) << "a guard byte around lse changed (write out of bounds)";
  const RelError eo = rel_error(to_double(o_host, FLASHBOX_BFLOAT16), ref.o);
  EXPECT_FALSE(eo.nan) << "o has NaN (" << fwd_kernel << ")";
  EXPECT_LT(eo.rel, 1e-2) << "o (" << fwd_kernel << ")";
  const LseError el = lse_error(lse_host.data(), ref.lse, LseRule::minus_inf_where_reference_is);
  EXPECT_EQ(el.bad, 0) << "lse entries with the wrong finiteness (" << fwd_kernel << ")";
  EXPECT_LT(el.max_abs, 2e-2) << "lse (" << fwd_kernel << ")";

  for (int det = 0; det <= 1; ++det) {
    GuardedOutput dq(t.q.size() * 2), dk(t.k.size() * 2), dv(t.v.size() * 2);
    ASSERT_TRUE(dq.raw && dk.raw && dv.raw) << "device allocation";
    flashbox_attention_grad_args g = grad_args_like(a, dout.ptr, dq.ptr(), dk.ptr(), dv.ptr(), det);
    ASSERT_EQ(flashbox_attention_backward_ext(&g, &e), 0) << flashbox_last_error();
    const std::string bwd_kernel = flashbox_last_kernel();
    // Above 128 the backward is the sm80 d256 kernel for varlen, deterministic mode or
    // FLASHBOX_BWD_ARCH=sm80, else on a Hopper device the sm90 one (since branch sm90-bwd-d256): its
    // d192 kernel for 136..192 (since branch sm90-bwd-d192), its d256 kernel above.
    if (c.head_dim > 128) {
      const bool sm90_bwd = bwd_kernel.rfind("cuda_flash_bwd_sm90_", 0) == 0;
      if (det || !c.lens_q.empty()) EXPECT_FALSE(sm90_bwd) << bwd_kernel;
      if (sm90_bwd)
        EXPECT_EQ(bwd_kernel.rfind(c.head_dim <= 192 ? "cuda_flash_bwd_sm90_d192" : "cuda_flash_bwd_sm90_d256", 0), 0u)
            << bwd_kernel;
      else
        EXPECT_EQ(bwd_kernel.rfind("cuda_flash_bwd_sm80_d256", 0), 0u) << bwd_kernel;
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> h_dq(t.q.size()), h_dk(t.k.size()), h_dv(t.v.size());
    ASSERT_TRUE(dq.back(h_dq.data())) << "a guard byte around dq changed";
    ASSERT_TRUE(dk.back(h_dk.data())) << "a guard byte around dk changed";
    ASSERT_TRUE(dv.back(h_dv.data())) << "a guard byte around dv changed";
    const std::pair<const char *, std::pair<const std::vector<uint16_t> *, const std::vector<double> *>> grads[] = {
        {"dq", {&h_dq, &ref.dq}}, {"dk", {&h_dk, &ref.dk}}, {"dv", {&h_dv, &ref.dv}}};
    for (const auto &[name, pr] : grads) {
      const RelError eg = rel_error(to_double(*pr.first, FLASHBOX_BFLOAT16), *pr.second);
      EXPECT_FALSE(eg.nan) << name << " has NaN (" << bwd_kernel << ", deterministic " << det << ")";
      EXPECT_LT(eg.rel, 1e-2) << name << " (" << bwd_kernel << ", deterministic " << det << ")";
    }
  }
  std::printf("  %-44s ok: o %.2e  kernels %s  seed %llu\n", c.name.c_str(), eo.rel, fwd_kernel.c_str(),
              static_cast<unsigned long long>(seed));
}

// Small shapes (compute-sanitizer memcheck runs these).
const std::vector<ExtCase> kSmall = {
    {"causal T17 GQA d64", 2, 17, 17, 4, 2, 64, 1},
    {"window(16,8) 63x65 MQA d128", 2, 63, 65, 4, 1, 128, 0, 16, 8},
    {"softcap 5 T64xT1 d32", 2, 64, 1, 2, 2, 32, 0, -1, -1, 5.0f},
    {"causal softcap 2 alibi/head 65x64 d96", 2, 65, 64, 4, 2, 96, 1, -1, -1, 2.0f, Alibi::head},
    {"alibi/batch window(5,-1) T1x63 d40", 2, 1, 63, 2, 1, 40, 0, 5, -1, 0.0f, Alibi::batch},
    {"window(0,0) 65x65 d64", 1, 65, 65, 2, 2, 64, 0, 0, 0},
    {"window(-1,3) 64x17 d72", 2, 64, 17, 2, 2, 72, 0, -1, 3},
    {"plain d8 65x63", 1, 65, 63, 2, 2, 8, 0},
    {"plain causal d24 65x63", 1, 65, 63, 2, 1, 24, 1},
    {"plain d48 17x65", 1, 17, 65, 2, 2, 48, 0},
    {"plain causal d80 64x64", 2, 64, 64, 2, 2, 80, 1},
    {"plain d104 63x1", 1, 63, 1, 2, 2, 104, 0},
    {"plain causal d120 65x17", 1, 65, 17, 4, 2, 120, 1},
    {"varlen causal d64",
     0,
     0,
     0,
     4,
     2,
     64,
     1,
     -1,
     -1,
     0.0f,
     Alibi::none,
     {0, 1, 17, 64, 65, 130},
     {5, 1, 17, 63, 0, 200}},
    {"varlen window softcap alibi/batch d128",
     0,
     0,
     0,
     4,
     2,
     128,
     0,
     20,
     10,
     3.0f,
     Alibi::batch,
     {0, 1, 17, 64, 65, 130},
     {5, 1, 17, 63, 0, 200}},
    {"varlen alibi/head d40 q=k", 0, 0, 0, 2, 1, 40, 1, -1, -1, 0.0f, Alibi::head, {1, 0, 63, 65}, {1, 0, 63, 65}},
};

// T = 1000 (and sequences of 1000 in a varlen batch).
const std::vector<ExtCase> kLarge = {
    {"causal window(100,0) T1000 d64", 1, 1000, 1000, 2, 2, 64, 1, 100},
    {"causal softcap 10 alibi/batch 1000x300 d72", 1, 1000, 300, 2, 2, 72, 1, -1, -1, 10.0f, Alibi::batch},
    {"window(64,64) 300x1000 d128", 1, 300, 1000, 2, 1, 128, 0, 64, 64},
    {"varlen causal alibi/head d80",
     0,
     0,
     0,
     2,
     2,
     80,
     1,
     -1,
     -1,
     0.0f,
     Alibi::head,
     {1000, 1, 0, 63},
     {1000, 1, 5, 63}},
};

// Head dims above 128 (the d256 instantiations, every multiple of 8 in (128, 256]): each mask and
// score transform, GQA/MQA, seqlen_q != seqlen_k, T in {1, 17, 65, 1000}, varlen with lengths 0 and
// 1, forward and backward (both dQ modes).
const std::vector<ExtCase> kWideSmall = {
    on_sm80_forward({"plain d256 T1", 2, 1, 1, 2, 2, 256, 0}),
    on_sm80_forward({"causal d256 65x17 GQA", 1, 65, 17, 4, 2, 256, 1}),
    on_sm80_forward({"plain d136 17x65", 1, 17, 65, 2, 1, 136, 0}),
    {"plain d256 17x65 MQA (auto)", 1, 17, 65, 2, 1, 256, 0},
    {"causal d136 65x65", 1, 65, 65, 2, 2, 136, 1},
    {"causal d176 17x65 GQA", 1, 17, 65, 4, 2, 176, 1},
    {"window(30,-1) 65x17 d192", 2, 65, 17, 2, 1, 192, 0, 30, -1},
    {"plain d200 65x1 GQA", 1, 65, 1, 4, 2, 200, 0},
    {"window(16,8) 63x65 MQA d160", 2, 63, 65, 4, 1, 160, 0, 16, 8},
    {"softcap 5 64x17 d192", 1, 64, 17, 2, 2, 192, 0, -1, -1, 5.0f},
    {"causal alibi/head 17x65 GQA d224", 1, 17, 65, 4, 2, 224, 1, -1, -1, 0.0f, Alibi::head},
    {"causal softcap 2 alibi/batch 65x64 d256", 2, 65, 64, 2, 1, 256, 1, -1, -1, 2.0f, Alibi::batch},
    {"window(5,-1) T1x63 d256", 2, 1, 63, 2, 2, 256, 0, 5, -1},
    {"varlen causal d192", 0, 0, 0, 4, 2, 192, 1, -1, -1, 0.0f, Alibi::none, {0, 1, 17, 65, 130}, {5, 1, 17, 63, 0}},
    {"varlen window softcap alibi/batch d256", 0, 0, 0, 2, 1, 256, 0, 20, 10, 3.0f, Alibi::batch, {1, 0, 65, 17},
     {1, 5, 64, 0}},
};

const std::vector<ExtCase> kWideLarge = {
    on_sm80_forward({"causal T1000 GQA d256", 1, 1000, 1000, 2, 1, 256, 1}),
    {"causal window(100,0) 1000x300 d192", 1, 1000, 300, 2, 1, 192, 1, 100},
    {"plain 300x1000 d160", 1, 300, 1000, 2, 2, 160, 0},
    {"varlen causal softcap 10 d224", 0, 0, 0, 2, 2, 224, 1, -1, -1, 10.0f, Alibi::none, {1000, 1, 0}, {1000, 1, 3}},
};

TEST(ExtSm80, HeadDimsAbove128) {
  SKIP_WITHOUT_GPU();
  for (const ExtCase &c : kWideSmall) run_case(c);
}

TEST(ExtSm80, HeadDimsAbove128Large) {
  SKIP_WITHOUT_GPU();
  for (const ExtCase &c : kWideLarge) run_case(c);
}

TEST(ExtSm80, SmallCases) {
  SKIP_WITHOUT_GPU();
  for (const ExtCase &c : kSmall) run_case(c);
}

TEST(ExtSm80, LargeCases) {
  SKIP_WITHOUT_GPU();
  for (const ExtCase &c : kLarge) run_case(c);
}

// cu_seqlens on the device are not checked (flashbox.h): negative, decreasing, past-the-total and
// longer-than-max_seqlen prefix sums must still give a successful call with every guard intact and no
// CUDA error (the values of the rows they name are unspecified; src/cuda/common/varlen_span.cuh).
TEST(ExtSm80, MalformedCuSeqlensStayInBounds) {
  SKIP_WITHOUT_GPU();
  const int64_t total = 100, heads = 2, d = 64;
  std::mt19937_64 rng(7);
  const std::vector<uint16_t> x = random_values(size_t(total * heads * d), FLASHBOX_BFLOAT16, rng, 1.0f);
  const std::vector<int32_t> cu_q = {0, 60, 30, 120, 100}, cu_k = {-5, 50, 200, 10, 100};
  DeviceInput q(x.data(), x.size() * 2), cq(cu_q.data(), cu_q.size() * 4), ck(cu_k.data(), cu_k.size() * 4);
  GuardedOutput o(x.size() * 2), lse(size_t(total * heads) * 4);
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16;
  a.batch = 4, a.seqlen_q = a.seqlen_k = total, a.heads_q = a.heads_kv = heads, a.head_dim = d;
  const int64_t st[3] = {total * heads * d, heads * d, d};
  std::copy_n(st, 3, a.q_stride), std::copy_n(st, 3, a.k_stride), std::copy_n(st, 3, a.v_stride);
  std::copy_n(st, 3, a.o_stride);
  a.q = a.k = a.v = q.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.cu_seqlens_q = static_cast<const int32_t *>(cq.ptr), e.cu_seqlens_k = static_cast<const int32_t *>(ck.ptr);
  e.max_seqlen_q = e.max_seqlen_k = 64;
  for (int causal = 0; causal <= 1; ++causal) {
    a.causal = causal;
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> host(x.size() * 2), lse_host(size_t(total * heads) * 4);
    EXPECT_TRUE(o.back(host.data())) << "a guard byte around o changed";
    EXPECT_TRUE(lse.back(lse_host.data())) << "a guard byte around lse changed";
    for (int det = 0; det <= 1; ++det) {
      GuardedOutput dq(x.size() * 2), dk(x.size() * 2), dv(x.size() * 2);
      flashbox_attention_grad_args g = grad_args_like(a, q.ptr, dq.ptr(), dk.ptr(), dv.ptr(), det);
      ASSERT_EQ(flashbox_attention_backward_ext(&g, &e), 0) << flashbox_last_error();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(dq.back(host.data()) && dk.back(host.data()) && dv.back(host.data()))
          << "a guard byte around dq/dk/dv changed (causal " << causal << ", deterministic " << det << ")";
    }
  }
}

// A head_dim above 256 (or not a multiple of 8) is refused with its own message on cuda, before
// any device work (no GPU needed for the check itself).
TEST(ExtSm80, HeadDimRule) {
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16;
  a.batch = 1, a.seqlen_q = a.seqlen_k = 8, a.heads_q = a.heads_kv = 1, a.head_dim = 264;
  std::vector<uint16_t> in(8 * 264), out(8 * 264);
  a.q = a.k = a.v = in.data(), a.o = out.data();
  const int64_t s[3] = {8 * 264, 264, 264};
  std::copy_n(s, 3, a.q_stride), std::copy_n(s, 3, a.k_stride), std::copy_n(s, 3, a.v_stride);
  std::copy_n(s, 3, a.o_stride);
  EXPECT_EQ(flashbox_attention_forward(&a), FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM);
  EXPECT_NE(std::string(flashbox_last_error()).find("multiples of 8 up to 256"), std::string::npos)
      << flashbox_last_error();
}

}  // namespace
}  // namespace flashbox::test
