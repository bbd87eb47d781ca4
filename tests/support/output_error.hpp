// How far a kernel's O and LSE are from the fp64 reference, shared by the extension and sm90 tests
// (tests/cuda/ext_sm80_test.cpp, tests/sm90/*): the relative error ||got - ref|| / ||ref|| with a
// flag for non-finite values (NaN never passes), and the LSE check under one of two rules for the
// rows that see no key. Host code only: the tests copy their outputs back first.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashbox::test {

struct RelError {
  double rel = 0;    // ||got - ref|| / ||ref|| (ref all zero: ||got|| itself); NaN when got holds one
  bool nan = false;  // some value of got is NaN or infinite
};

// got(i) is the i-th value in ref's layout, as double (a load from the output's own dtype and strides).
template <class Got>
RelError rel_error_of(const Got &got, const std::vector<double> &ref) {
  double num = 0, den = 0;
  RelError e;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got(i);
    if (!std::isfinite(g)) e.nan = true;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  e.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

// Over dense arrays of the same length.
inline RelError rel_error(const std::vector<double> &got, const std::vector<double> &ref) {
  return rel_error_of([&](size_t i) { return got[i]; }, ref);
}

// What an LSE must be where either side is infinite (a row that sees no key has LSE -inf).
enum class LseRule {
  // Where the reference or the output is infinite or the output NaN, the two are equal (-inf on
  // both sides); elsewhere the error counts.
  equal_where_infinite,
  // Where the reference is infinite, the output is -inf; elsewhere the output is finite and the
  // error counts (an infinite output there makes the error infinite).
  minus_inf_where_reference_is,
};

struct LseError {
  int64_t bad = 0;     // entries that break the rule's finiteness
  double max_abs = 0;  // largest |got - ref| over the entries where the error counts
};

inline LseError lse_error(const float *got, const std::vector<double> &ref, LseRule rule) {
  LseError e;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], want = ref[i];
    if (rule == LseRule::equal_where_infinite) {
      if (std::isinf(want) || std::isinf(g) || std::isnan(g)) {
        e.bad += !(g == want);
      } else {
        e.max_abs = std::max(e.max_abs, std::abs(g - want));
      }
    } else if (std::isinf(want)) {
      e.bad += !(std::isinf(g) && g < 0);
    } else {
      e.bad += !std::isfinite(g);
      e.max_abs = std::max(e.max_abs, std::fabs(g - want));
    }
  }
  return e;
}

}  // namespace flashbox::test
