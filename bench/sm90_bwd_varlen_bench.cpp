// Times a variable-length BACKWARD on the H200 three ways, in one process, on the same packed tensors:
//   varlen sm90  one call over the whole batch, the sm90 backward's plan (plan_sm90_backward);
//   varlen sm80  the same call on the sm80 backward's plan (what auto ran before 2026-12-01);
//   fixed sum    one fixed-length sm90 backward call per sequence (flashbox_attention_backward, auto:
//                the sm90 family), each timed on its own, medians summed (the issue's "padded-free
//                ideal"); also the same calls back to back between one event pair ("fixed loop").
// O and LSE come from the sm90 forward (varlen: one call; fixed: one call per sequence, each with its
// own [1, heads, L] LSE). Method: random bf16 inputs (never zeros), 3 warm-up calls, median of 20
// calls between CUDA events; the packed batch does not fit in L2 at the default lengths, so inputs
// are not rotated. FLOPs: sum over sequences of 10 * H * L^2 * D (the backward's five products),
// halved for causal. Also checks the sm90 varlen gradients against the sm80 ones (max abs difference
// over dq, dk, dv).
//   sm90_bwd_varlen_bench [--json PATH] [--lens 4096,512,...] [--heads 16] [--deterministic]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backends.hpp"
#include "core/masks.hpp"
#include "core/problem.hpp"
#include "cuda_check.hpp"
#include "flashbox/flashbox.h"
#include "varlen_bench_host.hpp"

using namespace flashbox::bench;  // the helpers both varlen bench programs share

int main(int argc, char **argv) {
  BenchArgs args;
  args.lens = {4096, 512, 2048, 7000, 3000, 8192, 1500, 1024};  // B = 8, 512..8192
  if (!parse_bench_args(argc, argv, args,
                        "usage: sm90_bwd_varlen_bench [--json PATH] [--lens a,b,...] [--heads H] [--deterministic]",
                        "--deterministic"))
    return 2;
  const std::vector<int> &lens = args.lens;
  const int64_t heads = args.heads;
  const int det = args.flag_set ? 1 : 0;
  const CuSeqlens cus = upload_cu_seqlens(lens);
  const std::vector<int32_t> &cu = cus.host;
  const int64_t total = cus.total, nseq = int64_t(lens.size());
  float *lse = nullptr, *lse_fix = nullptr;  // varlen [heads, total]; fixed: [heads, L] per sequence, packed
  CHECK_CUDA(cudaMalloc(&lse, size_t(heads * total) * 4));
  CHECK_CUDA(cudaMalloc(&lse_fix, size_t(heads * total) * 4));

  std::string out = "[";
  print_table_header();
  for (int64_t d : {128, 64}) {
    const int64_t n = total * heads * d;
    uint16_t *buf[13];
    for (uint16_t *&p : buf) CHECK_CUDA(cudaMalloc(reinterpret_cast<void **>(&p), size_t(n) * 2));
    uint16_t *q = buf[0], *k = buf[1], *v = buf[2], *o = buf[3], *dout = buf[4], *ofix = buf[5];
    uint16_t *g90[3] = {buf[6], buf[7], buf[8]}, *g80[3] = {buf[9], buf[10], buf[11]}, *gfix = buf[12];
    fill_random_bf16(q, n, 1);
    fill_random_bf16(k, n, 2);
    fill_random_bf16(v, n, 3);
    fill_random_bf16(dout, n, 4);
    for (int causal : {0, 1}) {
      flashbox_attention_args a = packed_view(cus, heads, d, causal, q, k, v);
      a.o = o, a.lse = lse;
      // The varlen forward (O, LSE), then the backward plans, as the extension passes them.
      flashbox::detail::Problem p = flashbox::detail::make_problem(a, flashbox::core::causal_mods(causal));
      set_sequences(p, cus, nseq);
      flashbox::detail::PlanResult rf = flashbox::detail::plan_sm90_forward(p);
      if (!rf.plan || rf.plan->run() != 0) {
        std::fprintf(stderr, "varlen forward: %s %s\n", rf.why_not.c_str(), flashbox_last_error());
        return 1;
      }
      flashbox_attention_grad_args ga{};
      ga.fwd = a, ga.dout = dout, ga.deterministic = det;
      for (int64_t *s : {ga.dout_stride, ga.dq_stride, ga.dk_stride, ga.dv_stride})
        s[0] = total * heads * d, s[1] = heads * d, s[2] = d;
      flashbox::detail::GradProblem g = flashbox::detail::make_grad_problem(ga, flashbox::core::causal_mods(causal));
      set_sequences(g.fwd, cus, nseq);
      g.dq = g90[0], g.dk = g90[1], g.dv = g90[2];
      flashbox::detail::PlanResult r90 = flashbox::detail::plan_sm90_backward(g, false);
      g.dq = g80[0], g.dk = g80[1], g.dv = g80[2];
      flashbox::detail::PlanResult r80 = flashbox::detail::plan_sm80_backward(g);
      if (!r90.plan || !r80.plan) {
        std::fprintf(stderr, "no plan: sm90 '%s' sm80 '%s'\n", r90.why_not.c_str(), r80.why_not.c_str());
        return 1;
      }
      const double t90 = median_ms_ok("sm90", [&] { return r90.plan->run(); });
      const double t80 = median_ms_ok("sm80", [&] { return r80.plan->run(); });
      // One fixed-length forward (for its O and LSE), then backward, per sequence, on its rows.
      std::vector<flashbox_attention_grad_args> per;
      for (int64_t s = 0; s < nseq; ++s) {
        const int L = lens[size_t(s)];
        if (L == 0) continue;
        flashbox_attention_args f = a;
        f.seqlen_q = f.seqlen_k = L;
        const int64_t off = int64_t(cu[size_t(s)]) * heads * d;
        for (int64_t *st : {f.q_stride, f.k_stride, f.v_stride, f.o_stride}) st[0] = int64_t(L) * heads * d;
        f.q = q + off, f.k = k + off, f.v = v + off, f.o = ofix + off, f.lse = lse_fix + int64_t(cu[size_t(s)]) * heads;
        if (flashbox_attention_forward(&f) != 0) {
          std::fprintf(stderr, "fixed forward: %s\n", flashbox_last_error());
          return 1;
        }
        flashbox_attention_grad_args fg = ga;
        fg.fwd = f, fg.dout = dout + off;
        for (int64_t *st : {fg.dout_stride, fg.dq_stride, fg.dk_stride, fg.dv_stride}) st[0] = int64_t(L) * heads * d;
        fg.dq = gfix + off, fg.dk = buf[7] + off, fg.dv = buf[8] + off;  // dk/dv: scratch (the sm90 ones are compared below first)
        per.push_back(fg);
      }
      // The varlen comparison before the fixed calls overwrite g90's dk/dv.
      double diff = 0;
      bool nan = false;
      for (int x = 0; x < 3; ++x)
        diff = std::max(diff, max_abs_diff(bf16_from_device(g90[x], n), bf16_from_device(g80[x], n), &nan));
      const FixedTimes fixed = time_fixed(per, flashbox_attention_backward, true);
      const double fixed_sum = fixed.sum, fixed_loop = fixed.loop;
      const double flop = varlen_flop(lens, heads, d, causal, 10.0);
      const double tf = flop / (t90 * 1e-3) / 1e12;
      std::printf("%-5lld %-7s %12.4f %12.4f %12.4f %12.4f %10.1f %9.3fx %9.3fx %.3g%s\n", (long long)d,
                  causal ? "causal" : "full", t90, t80, fixed_sum, fixed_loop, tf, fixed_sum / t90, t80 / t90, diff,
                  nan ? " NaN!" : "");
      print_kernels(r90.plan->kernel, r80.plan->kernel, fixed.kernels);
      char row[1024];
      std::snprintf(row, sizeof row,
                    "%s{\"head_dim\": %lld, \"heads\": %lld, \"causal\": %d, \"deterministic\": %d, "
                    "\"sm90_varlen_ms\": %.5f, \"sm80_varlen_ms\": %.5f, \"fixed_sum_ms\": %.5f, "
                    "\"fixed_loop_ms\": %.5f, \"sm90_tflops\": %.2f, \"max_abs_vs_sm80\": %.4g, \"nan\": %s, "
                    "\"sm90_kernel\": \"%s\"}",
                    out.size() > 1 ? ", " : "", (long long)d, (long long)heads, causal, det, t90, t80, fixed_sum,
                    fixed_loop, tf, diff, nan ? "true" : "false", r90.plan->kernel.c_str());
      out += row;
    }
    for (uint16_t *p : buf) CHECK_CUDA(cudaFree(p));
  }
  out += "]\n";
  const std::string l = join_lens(lens);
  std::printf("lengths %s, heads %lld, bf16%s\n", l.c_str(), (long long)heads, det ? ", deterministic" : "");
  return args.json && !write_rows_json(args.json, l, out) ? 1 : 0;
}
