// The private tuning interface (tuning.hpp): one process-wide set of overrides behind a mutex, with
// a flag that lets the calls of a default build (no override ever set) skip the lock.
#include "api/tuning.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "api/tuning_private.h"
#include "core/error.hpp"

namespace flashbox::detail {
namespace {

std::mutex g_mutex;
TuningOverrides g_overrides;        // guarded by g_mutex
std::atomic<bool> g_active{false};  // g_overrides differs from the defaults

int bad(const std::string &what, const std::string &want) {
  return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "tuning: " + what + " must be " + want);
}

int check(const TuningOverrides &o) {
  const auto family_ok = [](flashbox_kernel_family f) {
    return f == FLASHBOX_FAMILY_AUTO || f == FLASHBOX_FAMILY_SM80 || f == FLASHBOX_FAMILY_SM90;
  };
  if (!family_ok(o.forward_family) || !family_ok(o.backward_family))
    return bad("forward_family, backward_family", "auto (0), sm80 (1) or sm90 (2)");
  if (o.sm90_tile_m < 0 || o.sm90_tile_n < 0 || (o.sm90_tile_m == 0) != (o.sm90_tile_n == 0))
    return bad("sm90_tile = " + std::to_string(o.sm90_tile_m) + "x" + std::to_string(o.sm90_tile_n),
               "both 0 (the policy's) or both > 0");
  if (o.sm90_schedule != Sm90Schedule::policy && o.sm90_schedule != Sm90Schedule::grid &&
      o.sm90_schedule != Sm90Schedule::persistent)
    return bad("sm90_schedule", "policy, grid or persistent");
  if (o.sm90_max_ctas < 0) return bad("sm90_max_ctas = " + std::to_string(o.sm90_max_ctas), ">= 0");
  if (o.sm90_l2_section_mb < -1)
    return bad("sm90_l2_section_mb = " + std::to_string(o.sm90_l2_section_mb), ">= 0 (or -1: the policy's)");
  if (o.sm80_bwd_block_q != 0 && o.sm80_bwd_block_q != 32 && o.sm80_bwd_block_q != 64)
    return bad("sm80_bwd_block_q = " + std::to_string(o.sm80_bwd_block_q), "0, 32 or 64");
  if (o.kvcache_prefill_rows < 0)
    return bad("kvcache_prefill_rows = " + std::to_string(o.kvcache_prefill_rows), ">= 0");
  return FLASHBOX_OK;
}

void store(const TuningOverrides &o) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_overrides = o;
  g_active.store(!(o == TuningOverrides{}), std::memory_order_release);
}

bool parse_int(const char *s, int lo, int &out) {
  char *end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > (1 << 20)) return false;
  out = int(v);
  return true;
}

bool parse_family(const char *s, flashbox_kernel_family &out) {
  if (std::strcmp(s, "sm80") == 0) return out = FLASHBOX_FAMILY_SM80, true;
  if (std::strcmp(s, "sm90") == 0) return out = FLASHBOX_FAMILY_SM90, true;
  if (std::strcmp(s, "auto") == 0) return out = FLASHBOX_FAMILY_AUTO, true;
  return false;
}

}  // namespace

TuningOverrides tuning_overrides() {
  if (!g_active.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_overrides;
}

int set_tuning_overrides(const TuningOverrides &o) {
  if (int rc = check(o)) return rc;
  store(o);
  return FLASHBOX_OK;
}

int set_tuning(const char *key, const char *value) {
  if (key == nullptr) return fail(FLASHBOX_ERR_NULL_POINTER, "tuning: key is NULL");
  const std::string k = key;
  const bool reset = value == nullptr || *value == '\0';
  const char *v = reset ? "" : value;
  TuningOverrides o = tuning_overrides();
  const TuningOverrides defaults;
  const auto want = [&](const char *form) {
    return bad(k + " = '" + v + "'", std::string(form) + " (or empty: the policy's)");
  };
  if (k == "forward_family" || k == "backward_family") {
    flashbox_kernel_family &f = k == "forward_family" ? o.forward_family : o.backward_family;
    if (reset)
      f = FLASHBOX_FAMILY_AUTO;
    else if (!parse_family(v, f))
      return want("sm80, sm90 or auto");
  } else if (k == "sm90_tile") {
    int m = 0, n = 0;
    char x = 0, extra = 0;
    if (reset)
      o.sm90_tile_m = o.sm90_tile_n = 0;
    else if (std::sscanf(v, "%d%c%d%c", &m, &x, &n, &extra) == 3 && x == 'x' && m > 0 && n > 0)
      o.sm90_tile_m = m, o.sm90_tile_n = n;
    else
      return want("MxN, e.g. 128x128");
  } else if (k == "sm90_schedule") {
    if (reset || std::strcmp(v, "policy") == 0)
      o.sm90_schedule = Sm90Schedule::policy;
    else if (std::strcmp(v, "grid") == 0)
      o.sm90_schedule = Sm90Schedule::grid;
    else if (std::strcmp(v, "persistent") == 0)
      o.sm90_schedule = Sm90Schedule::persistent;
    else
      return want("grid, persistent or policy");
  } else if (k == "sm90_max_ctas") {
    if (reset)
      o.sm90_max_ctas = defaults.sm90_max_ctas;
    else if (!parse_int(v, 1, o.sm90_max_ctas))
      return want("a CTA count >= 1");
  } else if (k == "sm90_l2_section_mb") {
    if (reset)
      o.sm90_l2_section_mb = defaults.sm90_l2_section_mb;
    else if (!parse_int(v, 0, o.sm90_l2_section_mb))
      return want("a number of MB >= 0");
  } else if (k == "sm80_bwd_block_q") {
    int q = 0;
    if (reset)
      o.sm80_bwd_block_q = defaults.sm80_bwd_block_q;
    else if (parse_int(v, 32, q) && (q == 32 || q == 64))
      o.sm80_bwd_block_q = q;
    else
      return want("32 or 64");
  } else if (k == "kvcache_prefill_rows") {
    int rows = 0;
    if (reset)
      o.kvcache_prefill_rows = defaults.kvcache_prefill_rows;
    else if (parse_int(v, 1, rows))
      o.kvcache_prefill_rows = rows;
    else
      return want("a number of query rows >= 1");
  } else {
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "tuning: no key '" + k +
                    "' (forward_family, backward_family, sm90_tile, sm90_schedule, sm90_max_ctas, "
                    "sm90_l2_section_mb, sm80_bwd_block_q, kvcache_prefill_rows)");
  }
  return set_tuning_overrides(o);
}

ScopedTuning::ScopedTuning(const TuningOverrides &o) : previous_(tuning_overrides()) { store(o); }
ScopedTuning::~ScopedTuning() { store(previous_); }

}  // namespace flashbox::detail

#ifdef FLASHBOX_TUNING
extern "C" FLASHBOX_API int flashbox_private_tuning_set(const char *key, const char *value) {
  return flashbox::detail::set_tuning(key, value);
}
extern "C" FLASHBOX_API void flashbox_private_tuning_reset(void) { flashbox::detail::store({}); }
#endif
