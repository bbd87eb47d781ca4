// How far a result is from its reference, for every test that compares numbers (the forward and
// backward cases, the extension and sm90 tests, the GPT-2 trainer): the relative error
// ||got - ref|| / ||ref|| with the largest absolute error and a flag for non-finite values (NaN never
// passes), and the LSE check under one of two rules for the rows that see no key. Host code only:
// the tests copy their outputs back first.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace flashbox::test {

struct RelError {
  double rel = 0;    // ||got - ref|| / ||ref|| (ref all zero: ||got|| itself); NaN when got holds one
  bool nan = false;  // some value of got is NaN or infinite
  double max_abs = 0;  // max |got - ref| (a NaN difference is passed over: `nan` tells of it)

  // rel, or infinity where got holds a NaN or an infinity: what an EXPECT_LT(..., tolerance) reads.
  double rel_or_inf() const { return nan || std::isnan(rel) ? INFINITY : rel; }
};

// got(i) is the i-th value in ref's layout, as double (a load from the output's own dtype and
// strides); ref is any array of numbers (ref[i] is read as double).
template <class Got, class Ref>
RelError rel_error_of(const Got &got, const Ref &ref) {
  double num = 0, den = 0;
  RelError e;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got(i), want = double(ref[i]);
    if (!std::isfinite(g)) e.nan = true;
    const double d = std::abs(g - want);
    e.max_abs = std::max(e.max_abs, d);
    num += d * d;
    den += want * want;
  }
  e.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

// Over dense arrays of the same length.
inline RelError rel_error(const std::vector<double> &got, const std::vector<double> &ref) {
  return rel_error_of([&](size_t i) { return got[i]; }, ref);
}
inline RelError rel_error(std::span<const float> got, std::span<const float> ref) {
  return rel_error_of([&](size_t i) { return double(got[i]); }, ref);
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
