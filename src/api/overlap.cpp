// The exact shared-byte test of two strided views; the method is described in overlap.hpp.
// Arithmetic is in __int128: offsets of valid views fit int64, but differences of addresses and
// sums of two views' spans need one more bit, and the search's partial sums a few more.
#include "api/overlap.hpp"

#include <algorithm>
#include <utility>

namespace flashbox::detail {
namespace {

using i128 = __int128;

// One merged term: coefficient c > 0 times an integer w in [lo, hi].
struct Term {
  int64_t c;
  i128 lo, hi;
};

i128 floor_div(i128 a, int64_t b) {  // b > 0
  i128 q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}
i128 ceil_div(i128 a, int64_t b) { return -floor_div(-a, b); }

class Search {
 public:
  Search(const Term *terms, int n, i128 target_lo, i128 target_hi, int64_t budget)
      : t_(terms), n_(n), lo_(target_lo), hi_(target_hi), budget_(budget) {
    // rest_min_[k], rest_max_[k]: the range of sum_{j >= k} c_j w_j.
    rest_min_[n] = rest_max_[n] = 0;
    for (int k = n - 1; k >= 0; --k) {
      rest_min_[k] = rest_min_[k + 1] + i128(t_[k].c) * t_[k].lo;
      rest_max_[k] = rest_max_[k + 1] + i128(t_[k].c) * t_[k].hi;
    }
  }

  // True when some choice of the terms from k on puts `partial` + their sum in the target.
  bool feasible(int k, i128 partial) {
    if (partial + rest_max_[k] < lo_ || partial + rest_min_[k] > hi_) return false;
    if (k == n_) return true;
    const Term &t = t_[k];
    // partial + c w + rest in [lo, hi] with rest in [rest_min_[k+1], rest_max_[k+1]].
    const i128 w_lo = std::max(t.lo, ceil_div(lo_ - partial - rest_max_[k + 1], t.c));
    const i128 w_hi = std::min(t.hi, floor_div(hi_ - partial - rest_min_[k + 1], t.c));
    if (w_lo > w_hi) return false;
    if (k == n_ - 1) return true;  // no terms left: any w in range lands in the target
    for (i128 w = w_lo; w <= w_hi; ++w) {
      if (--budget_ < 0) {
        gave_up_ = true;
        return true;  // conservative: treat the unexplored rest as overlapping
      }
      if (feasible(k + 1, partial + i128(t.c) * w)) return true;
    }
    return false;
  }

  bool gave_up() const { return gave_up_; }

 private:
  const Term *t_;
  int n_;
  i128 lo_, hi_;
  int64_t budget_;
  bool gave_up_ = false;
  i128 rest_min_[9]{}, rest_max_[9]{};
};

}  // namespace

OverlapAnswer views_overlap(const ByteView &x, const ByteView &y, int64_t budget) {
  // Terms of sum_i a_i s_i (x, a_i in [0, n-1]) - sum_j b_j r_j (y: -b_j in [-(n-1), 0]), merged by
  // stride. Dims of extent 1 contribute nothing.
  Term terms[8];
  int n = 0;
  auto add = [&](int64_t c, i128 lo, i128 hi) {
    for (int i = 0; i < n; ++i)
      if (terms[i].c == c) {
        terms[i].lo += lo, terms[i].hi += hi;
        return;
      }
    terms[n++] = Term{c, lo, hi};
  };
  for (int i = 0; i < x.ndims; ++i)
    if (x.extent[i] > 1) add(x.stride[i], 0, x.extent[i] - 1);
  for (int j = 0; j < y.ndims; ++j)
    if (y.extent[j] > 1) add(y.stride[j], -i128(y.extent[j] - 1), 0);
  // Insertion sort, largest stride first (n <= 8; std::sort on a partly used array trips -Warray-bounds).
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && terms[j].c > terms[j - 1].c; --j) std::swap(terms[j], terms[j - 1]);

  const i128 d = i128(y.base) - i128(x.base);
  Search s(terms, n, d - x.run + 1, d + y.run - 1, budget);
  const bool hit = s.feasible(0, 0);
  return {hit, !s.gave_up()};
}

}  // namespace flashbox::detail
