#include "report/random_fill.hpp"

#include "core/dtype.hpp"

#include <cmath>

namespace flashbox::report {
namespace {

// splitmix64's finaliser: a good 64-bit mix, enough for test data (not for cryptography).
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1]: never 0, so the logarithm below is finite.
double unit_open_low(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

void fill_random_normal(void *dst, flashbox_dtype dtype, int64_t count, uint64_t seed, uint64_t stream) {
  const uint64_t key = mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ull));
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < (count + 1) / 2; ++pair) {
    // Box-Muller: two uniforms give two independent normals.
    const double u1 = unit_open_low(mix64(key ^ static_cast<uint64_t>(2 * pair)));
    const double u2 = unit_open_low(mix64(key ^ static_cast<uint64_t>(2 * pair + 1)));
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    const int64_t i = 2 * pair;
    cpu::store_from_float(dst, dtype, i, static_cast<float>(r * std::cos(angle)));
    if (i + 1 < count) cpu::store_from_float(dst, dtype, i + 1, static_cast<float>(r * std::sin(angle)));
  }
}

}  // namespace flashbox::report
