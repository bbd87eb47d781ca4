// Times the Hopper forward through the C API (options.family = sm90) on the issue's shapes and
// prints a table; --json PATH writes every row. Method (bench/NOTES.md): random inputs (never
// zeros), several input sets rotated so that L2 does not hold them, warm-up, 10 timed calls each
// between CUDA events, median. FLOPs: 4*B*H*T^2*D, halved for causal.
//   sm90_bench [--quick | --sched] [--json PATH]
// --sched: one CTA per tile against persistent CTAs on the issue's shapes.
// A variant is "tile/sched" (e.g. "128x128//" or "/persistent"; empty fields and "default" are the
// library's choice), passed as flashbox_options.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "flashbox/flashbox.h"

namespace {

__global__ void fill_random_bf16(uint16_t *p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t x = (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;
    const float u = float(x >> 40) * (1.0f / 16777216.0f) * 4.f - 2.f;  // uniform in [-2, 2)
    const uint32_t bits = __float_as_uint(u);
    p[i] = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

struct Shape {
  int64_t b, h, t, d;
  int causal;
};

struct Row {
  Shape s;
  std::string variant, kernel;
  double ms, tflops;
};

double flops(const Shape &s) { return 4.0 * s.b * s.h * double(s.t) * s.t * s.d / (s.causal ? 2.0 : 1.0); }

// Median time of 10 forward calls over `sets` rotated input sets, BTHD layout.
Row time_shape(const Shape &s, const std::string &variant, const flashbox_options &opts, int sets) {
  const int64_t n = s.b * s.t * s.h * s.d;
  std::vector<uint16_t *> buf(size_t(sets) * 4);
  for (size_t i = 0; i < buf.size(); ++i) {
    CHECK_CUDA(cudaMalloc(&buf[i], size_t(n) * 2));
    fill_random_bf16<<<1024, 256>>>(buf[i], n, 1234567ull * (i + 1));
    CHECK_CUDA(cudaGetLastError());
  }
  float *lse = nullptr;
  CHECK_CUDA(cudaMalloc(&lse, size_t(s.b * s.h * s.t) * 4));
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16, a.impl = FLASHBOX_FLASH;
  a.batch = s.b, a.seqlen_q = a.seqlen_k = s.t, a.heads_q = a.heads_kv = s.h, a.head_dim = s.d;
  const int64_t stride[3] = {s.t * s.h * s.d, s.h * s.d, s.d};
  for (int i = 0; i < 3; ++i) a.q_stride[i] = a.k_stride[i] = a.v_stride[i] = a.o_stride[i] = stride[i];
  a.causal = s.causal, a.lse = lse;
  const auto call = [&](int i) {
    const int set = i % sets;
    a.q = buf[size_t(set) * 4], a.k = buf[size_t(set) * 4 + 1], a.v = buf[size_t(set) * 4 + 2];
    a.o = buf[size_t(set) * 4 + 3];
    if (flashbox_attention_forward_opts(&a, &opts) != 0) {
      std::fprintf(stderr, "forward failed: %s\n", flashbox_last_error());
      std::exit(1);
    }
  };
  for (int i = 0; i < 3; ++i) call(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::string kernel = flashbox_last_kernel();
  std::vector<float> ms(10);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 10; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    call(i + 1);
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaEventElapsedTime(&ms[size_t(i)], e0, e1));
  }
  std::sort(ms.begin(), ms.end());
  const double med = 0.5 * (ms[4] + ms[5]);
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  for (uint16_t *p : buf) CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFree(lse));
  return {s, variant, kernel, med, flops(s) / (med * 1e-3) / 1e12};
}

flashbox_options options_for(const std::string &v) {
  flashbox_options o;
  flashbox_options_init(&o);
  o.family = FLASHBOX_FAMILY_SM90;
  if (v == "default") return o;
  const size_t slash = std::min(v.find('/'), v.size());
  const std::string tile = v.substr(0, slash), sched = slash < v.size() ? v.substr(slash + 1) : "";
  if (!tile.empty() && std::sscanf(tile.c_str(), "%dx%d", &o.sm90_tile_m, &o.sm90_tile_n) != 2) {
    std::fprintf(stderr, "bad tile in variant '%s'\n", v.c_str());
    std::exit(1);
  }
  if (sched.rfind("grid", 0) == 0) o.sm90_schedule = FLASHBOX_SCHEDULE_GRID;
  if (sched.rfind("persistent", 0) == 0) o.sm90_schedule = FLASHBOX_SCHEDULE_PERSISTENT;
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  const char *json = nullptr;
  bool quick = false, sched_plan = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json = argv[++i];
    else if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--sched") == 0)
      sched_plan = true;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (cc %d.%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);

  std::vector<std::pair<Shape, std::string>> plan;
  const std::vector<int64_t> ts = quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{2048, 4096, 8192, 16384};
  for (int64_t t : ts) {
    plan.push_back({{4, 12, t, 64, 1}, "default"});
    plan.push_back({{4, 16, t, 128, 1}, "default"});
  }
  for (const char *v : {"default", "128x128"}) plan.push_back({{4, 16, 16384, 128, 0}, v});
  plan.push_back({{4, 12, 16384, 64, 0}, "default"});
  plan.push_back({{4, 12, 16384, 64, 1}, "128x128"});
  if (sched_plan) {
    plan.clear();
    const Shape shapes[] = {{4, 12, 2048, 64, 1},  {4, 12, 4096, 64, 1},   {4, 12, 16384, 64, 1}, {4, 16, 2048, 128, 1},
                            {4, 16, 4096, 128, 1}, {4, 16, 16384, 128, 1}, {4, 16, 16384, 128, 0}};
    for (const Shape &sh : shapes)
      for (const char *v : {"/grid", "/persistent"}) plan.push_back({sh, v});
    for (int64_t t : {2048, 4096})
      for (const char *v : {"128x128/grid", "128x128/persistent"}) plan.push_back({{4, 12, t, 64, 1}, v});
  }
  std::vector<Row> rows;
  std::printf("%-4s %-3s %-6s %-4s %-7s %-22s %-40s %9s %8s\n", "B", "H", "T", "D", "causal", "variant", "kernel", "ms",
              "TFLOP/s");
  for (const auto &[shape, variant] : plan) {
    const int sets = shape.t <= 4096 ? 4 : 2;
    const Row r = time_shape(shape, variant, options_for(variant), sets);
    rows.push_back(r);
    std::printf("%-4lld %-3lld %-6lld %-4lld %-7d %-22s %-40s %9.3f %8.1f\n", (long long)shape.b, (long long)shape.h,
                (long long)shape.t, (long long)shape.d, shape.causal, variant.c_str(), r.kernel.c_str(), r.ms,
                r.tflops);
    std::fflush(stdout);
  }
  if (json) {
    FILE *f = std::fopen(json, "w");
    if (!f) return 1;
    std::fprintf(f, "{\"device\": \"%s\", \"rows\": [\n", prop.name);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      std::fprintf(f,
                   "  {\"batch\": %lld, \"heads\": %lld, \"seqlen\": %lld, \"head_dim\": %lld, \"causal\": %d, "
                   "\"variant\": \"%s\", \"kernel\": \"%s\", \"median_ms\": %.4f, \"tflops\": %.1f}%s\n",
                   (long long)r.s.b, (long long)r.s.h, (long long)r.s.t, (long long)r.s.d, r.s.causal,
                   r.variant.c_str(), r.kernel.c_str(), r.ms, r.tflops, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
