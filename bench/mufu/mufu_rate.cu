// How many special-function results an H200 SM produces per clock, for the exponentials and tanh
// the attention kernels call, in fp32 and in the packed 16-bit forms (f16x2, bf16x2): whether a
// packed op gives two results in one MUFU slot (the question behind a cheaper softcap), or is
// split by ptxas into two. Each thread runs 8 independent chains of N ops; 8 blocks of 256 threads
// per SM keep the unit busy. Prints results per SM per clock at the peak SM clock the device
// reports (from the wall time of the second launch; under the power cap the clock can sit lower,
// which only lowers the figure) and the wall time. (A block's own clock64 span read 8x too short in
// the first run: the figure comes from the wall time, not from it.) Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a mufu_rate.cu
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); return 1; } } while (0)

constexpr int kChains = 8;
constexpr int kIters = 4096;

template <int OP> __device__ __forceinline__ uint32_t step(uint32_t x) {
  uint32_t y;
  if constexpr (OP == 0) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=r"(y) : "r"(x));
  if constexpr (OP == 1) asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  if constexpr (OP == 2) asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  if constexpr (OP == 3) asm volatile("tanh.approx.f32 %0, %1;" : "=r"(y) : "r"(x));
  if constexpr (OP == 4) asm volatile("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  if constexpr (OP == 5) asm volatile("tanh.approx.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

template <int OP> __global__ void rate(uint32_t* out) {
  uint32_t x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = 0x3c003c00u ^ (threadIdx.x * 7919u + c * 104729u) & 0x00ff00ffu;
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) x[c] = step<OP>(x[c]);
  uint32_t acc = 0;
  for (int c = 0; c < kChains; ++c) acc ^= x[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

template <int OP> int run(const char* name, int results_per_op, int sms, double clock_hz, uint32_t* out,
                          int blocks, int threads) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
  rate<OP><<<blocks, threads>>>(out);  // warm-up
  CHECK(cudaGetLastError()); CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(a));
  rate<OP><<<blocks, threads>>>(out);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(b)); CHECK(cudaEventSynchronize(b));
  float ms = 0; CHECK(cudaEventElapsedTime(&ms, a, b));
  const double ops_per_sm = double(blocks / sms) * threads * kChains * kIters;
  const double clocks = ms * 1e-3 * clock_hz;
  std::printf("%-22s results/SM/clk %6.2f   ops/SM/clk %6.2f   %.3f ms\n", name,
              ops_per_sm * results_per_op / clocks, ops_per_sm / clocks, ms);
  return 0;
}

int main() {
  int sms = 0; CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int threads = 256, blocks = sms * 8;
  int khz = 0; CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const double clock_hz = khz * 1e3;
  std::printf("%d SMs, peak SM clock %.0f MHz\n", sms, khz * 1e-3);
  uint32_t* out;
  CHECK(cudaMalloc(&out, sizeof(uint32_t) * blocks * threads));
  int rc = 0;
  rc |= run<0>("ex2.approx.ftz.f32", 1, sms, clock_hz, out, blocks, threads);
  rc |= run<1>("ex2.approx.f16x2", 2, sms, clock_hz, out, blocks, threads);
  rc |= run<2>("ex2.approx.ftz.bf16x2", 2, sms, clock_hz, out, blocks, threads);
  rc |= run<3>("tanh.approx.f32", 1, sms, clock_hz, out, blocks, threads);
  rc |= run<4>("tanh.approx.f16x2", 2, sms, clock_hz, out, blocks, threads);
  rc |= run<5>("tanh.approx.bf16x2", 2, sms, clock_hz, out, blocks, threads);
  return rc;
}
