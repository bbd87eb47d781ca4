// Times a variable-length forward on the H200 three ways, in one process, on the same packed tensors:
//   varlen sm90  one call over the whole batch, the sm90 family's plan (plan_sm90_forward);
//   varlen sm80  the same call on the sm80 family's plan (what auto ran before 2026-12-01);
//   fixed sum    one fixed-length flashbox call per sequence (flashbox_attention_forward, auto: the
//                sm90 family), each timed on its own, medians summed (the issue's "padded-free
//                ideal"); also the same calls back to back between one event pair ("fixed loop").
// Method: random bf16 inputs (never zeros), 3 warm-up calls, median of 20 calls between CUDA events.
// The packed batch (8 sequences, 19k tokens, 16 heads, 77 MB per tensor at D128) does not fit in L2,
// so inputs are not rotated. FLOPs: sum over sequences of 4 * H * Lq * Lk * D, halved for causal.
// Also checks the sm90 varlen output against the sm80 one (max abs difference).
//   sm90_varlen_bench [--json PATH] [--lens 4096,512,...] [--heads 16]
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
  args.lens = {4096, 512, 2048, 1, 3000, 8192, 100, 1024};
  if (!parse_bench_args(argc, argv, args, "usage: sm90_varlen_bench [--json PATH] [--lens a,b,...] [--heads H]")) return 2;
  const std::vector<int> &lens = args.lens;
  const int64_t heads = args.heads;
  const CuSeqlens cus = upload_cu_seqlens(lens);
  const std::vector<int32_t> &cu = cus.host;
  const int64_t total = cus.total, nseq = int64_t(lens.size());

  std::string out = "[";
  print_table_header();
  for (int64_t d : {128, 64}) {
    const int64_t n = total * heads * d;
    uint16_t *buf[6];
    for (uint16_t *&p : buf) CHECK_CUDA(cudaMalloc(reinterpret_cast<void **>(&p), size_t(n) * 2));
    uint16_t *q = buf[0], *k = buf[1], *v = buf[2], *o90 = buf[3], *o80 = buf[4], *ofix = buf[5];
    fill_random_bf16(q, n, 1);
    fill_random_bf16(k, n, 2);
    fill_random_bf16(v, n, 3);
    for (int causal : {0, 1}) {
      // The whole batch as the C API's extension would pass it (varlen_bench_host.hpp).
      const flashbox_attention_args a = packed_view(cus, heads, d, causal, q, k, v);
      flashbox::detail::Problem p = flashbox::detail::make_problem(a, flashbox::core::causal_mods(causal));
      set_sequences(p, cus, nseq);
      p.o = o90;
      flashbox::detail::PlanResult r90 = flashbox::detail::plan_sm90_forward(p);
      p.o = o80;
      flashbox::detail::PlanResult r80 = flashbox::detail::plan_sm80_forward(p);
      if (!r90.plan || !r80.plan) {
        std::fprintf(stderr, "no plan: sm90 '%s' sm80 '%s'\n", r90.why_not.c_str(), r80.why_not.c_str());
        return 1;
      }
      const double t90 = median_ms_ok("sm90", [&] { return r90.plan->run(); });
      const double t80 = median_ms_ok("sm80", [&] { return r80.plan->run(); });
      // One fixed-length call per sequence, on its rows of the packed tensors.
      std::vector<flashbox_attention_args> per;
      for (int64_t s = 0; s < nseq; ++s) {
        if (lens[size_t(s)] == 0) continue;
        flashbox_attention_args f = a;
        f.seqlen_q = f.seqlen_k = lens[size_t(s)];
        const int64_t off = int64_t(cu[size_t(s)]) * heads * d;
        f.q = q + off, f.k = k + off, f.v = v + off, f.o = ofix + off;
        per.push_back(f);
      }
      const FixedTimes fixed = time_fixed(per, flashbox_attention_forward, false);
      const double fixed_sum = fixed.sum, fixed_loop = fixed.loop;
      const double flop = varlen_flop(lens, heads, d, causal, 4.0);
      // sm90 against sm80 (both ran last on o90 / o80) and against the fixed calls.
      const std::vector<uint16_t> h90 = bf16_from_device(o90, n);
      bool nan = false;
      const double diff80 = max_abs_diff(h90, bf16_from_device(o80, n), &nan);
      const double diff_fix = max_abs_diff(h90, bf16_from_device(ofix, n), &nan);
      const double tf = flop / (t90 * 1e-3) / 1e12;
      std::printf("%-5lld %-7s %12.4f %12.4f %12.4f %12.4f %10.1f %9.3fx %9.3fx %.3g (vs fixed %.3g)%s\n",
                  (long long)d, causal ? "causal" : "full", t90, t80, fixed_sum, fixed_loop, tf, fixed_sum / t90,
                  t80 / t90, diff80, diff_fix, nan ? " NaN!" : "");
      print_kernels(r90.plan->kernel, r80.plan->kernel, fixed.kernels);
      char row[1024];
      std::snprintf(row, sizeof row,
                    "%s{\"head_dim\": %lld, \"heads\": %lld, \"causal\": %d, \"sm90_varlen_ms\": %.5f, "
                    "\"sm80_varlen_ms\": %.5f, \"fixed_sum_ms\": %.5f, \"fixed_loop_ms\": %.5f, \"sm90_tflops\": %.2f, "
                    "\"max_abs_vs_sm80\": %.4g, \"max_abs_vs_fixed\": %.4g, \"nan\": %s, \"sm90_kernel\": \"%s\"}",
                    out.size() > 1 ? ", " : "", (long long)d, (long long)heads, causal, t90, t80, fixed_sum, fixed_loop,
                    tf, diff80, diff_fix, nan ? "true" : "false", r90.plan->kernel.c_str());
      out += row;
    }
    for (uint16_t *p : buf) CHECK_CUDA(cudaFree(p));
  }
  out += "]\n";
  const std::string l = join_lens(lens);
  std::printf("lengths %s, heads %lld, bf16\n", l.c_str(), (long long)heads);
  return args.json && !write_rows_json(args.json, l, out) ? 1 : 0;
}
