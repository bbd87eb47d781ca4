// Report step "bench" (SPEC step 5's timings): CPU rows always, at sizes this 2-core class of machine
// finishes in seconds; with a GPU, the SPEC's forward sweep (naive, flash) and the flash backward.
#include "report/bench.hpp"
#include "report/step_registry.hpp"

namespace flashbox::report {
namespace {

BenchConfig cpu_config(const ReportContext &ctx) {
  BenchConfig c;
  c.device = FLASHBOX_CPU;
  c.batch = 1;
  c.heads = ctx.quick ? 4 : 12;
  c.seqlens = ctx.quick ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{256, 512, 1024};
  c.impls = {FLASHBOX_NAIVE, FLASHBOX_BLOCKED};
  c.repeats = ctx.quick ? 3 : 10;
  c.warmup = 1;
  c.seed = ctx.seed;
  return c;
}

nlohmann::json run_bench(ReportContext &ctx) {
  const BenchResult cpu = run_bench(cpu_config(ctx), ctx.progress);
  if (!ctx.has_gpu) return to_json(cpu);

  BenchConfig gpu;  // the SPEC's defaults: B 4, H 12, D 64, bf16, causal, naive + flash
  gpu.device = FLASHBOX_CUDA;
  gpu.seed = ctx.seed;
  gpu.seqlens = ctx.quick ? std::vector<int64_t>{512, 1024, 2048} : default_bench_seqlens(FLASHBOX_CUDA);
  BenchConfig bwd = gpu;
  // One size past the SPEC's sweep: at T = 32768 naive's fp32 S alone is 206 GB, more than any current
  // GPU holds, so the memory wall is measured (an "oom" row) rather than asserted; flash runs on.
  if (!ctx.quick) gpu.seqlens.push_back(32768);
  const BenchResult forward = run_bench(gpu, ctx.progress);
  bwd.backward = true;
  bwd.impls = {FLASHBOX_FLASH};
  const BenchResult backward = run_bench(bwd, ctx.progress);

  nlohmann::json j = to_json(forward);
  j["cpu_config"] = to_json(cpu)["config"];
  for (const auto &part : {to_json(backward), to_json(cpu)})
    for (const auto &row : part["rows"]) j["rows"].push_back(row);
  return j;
}

FLASHBOX_REPORT_STEP(50, "bench", run_bench);

}  // namespace
}  // namespace flashbox::report
