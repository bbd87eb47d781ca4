// Options and environment overrides (see options.hpp). The overrides exist for benchmarks that time
// one kernel configuration against another in one process and for scripts that cannot pass options:
//   FLASHBOX_FLASH_ARCH = sm80|sm90     forward kernel family          (options.family)
//   FLASHBOX_BWD_ARCH   = sm80|sm90     backward kernel family         (options.family)
//   FLASHBOX_SM90_TILE  = MxN           sm90 forward tile              (options.sm90_tile_m/n)
//   FLASHBOX_SM90_SCHED = grid|persistent                              (options.sm90_schedule)
//   FLASHBOX_SM90_CTAS  = N > 0         persistent grid cap            (options.sm90_max_ctas)
//   FLASHBOX_SM90_L2MB  = N >= 0        MB of K/V per L2 section       (options.sm90_l2_section_mb)
//   FLASHBOX_BWD_BLOCK_Q = 32|64        sm80 backward query rows, d64  (options.sm80_bwd_block_q)
//   FLASHBOX_KVCACHE_PREFILL_ROWS = N >= 1   query rows per KV head from which a kvcache call runs
//                                       as chunked prefill (kvcache_prefill.hpp; kPrefillRows)
// Read where they are used, not here (no option carries them; some are read at every call, so that
// bench/sm90_bwd_variants.py --env can time one library under several settings in one process); here
// only their values are checked, once per process with the others, so that a typo fails the calls
// instead of silently running the default (both through the parsers of core/env_switch.hpp):
//   FLASHBOX_SM90_BWD_PDL = 0|1         0: the sm90 backward's main and convert kernels launched
//                                       normally, not programmatically (flash_bwd_sm90.cu, pdl_enabled)
//   FLASHBOX_SM90_BWD_EARLY_CONVERT = 0|1   0: dQ converted after the whole main grid (early_convert_enabled)
//   FLASHBOX_SM90_BWD_D64_QDESC = 0|1   deterministic bf16 d64 MHA's order forced (det_walk.hpp)
//   FLASHBOX_SM90_BWD_CHUNK_HEADS = N >= 1   (batch, kv head) pairs per chunk of the CTA order
//   FLASHBOX_SM90_BWD_CHUNK_RULE = v18  the chunk rounding before branch gqa (chunk_heads_for)
#include "api/options.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#include "core/env_switch.hpp"
#include "core/error.hpp"

namespace flashbox::detail {
namespace {

struct EnvOverrides {
  std::optional<flashbox_kernel_family> fwd_family, bwd_family;
  int tile_m = 0, tile_n = 0;
  flashbox_schedule schedule = FLASHBOX_SCHEDULE_AUTO;
  int max_ctas = 0, l2_section_mb = -1, bwd_block_q = 0, kvcache_prefill_rows = 0;
  std::string fwd_names, bwd_names;  // "NAME=value" of each variable set, for the kernel name
  std::string error;                 // the first bad value, or empty
};

void note(std::string &names, const char *name, const char *value) {
  if (!names.empty()) names += ",";
  names += std::string(name) + "=" + value;
}

using env::parse_int;

EnvOverrides read_environment() {
  EnvOverrides e;
  const auto bad = [&](const char *name, const char *value, const char *want) {
    if (e.error.empty()) e.error = std::string(name) + " = '" + value + "' must be " + want + " (or unset)";
  };
  const auto family = [&](const char *name, std::optional<flashbox_kernel_family> &out, std::string &names) {
    const char *v = std::getenv(name);
    if (v == nullptr) return;
    if (std::strcmp(v, "sm80") == 0)
      out = FLASHBOX_FAMILY_SM80;
    else if (std::strcmp(v, "sm90") == 0)
      out = FLASHBOX_FAMILY_SM90;
    else
      return bad(name, v, "sm80 or sm90");
    note(names, name, v);
  };
  family("FLASHBOX_FLASH_ARCH", e.fwd_family, e.fwd_names);
  family("FLASHBOX_BWD_ARCH", e.bwd_family, e.bwd_names);
  if (const char *v = std::getenv("FLASHBOX_SM90_TILE")) {
    int m = 0, n = 0;
    char x = 0;
    if (std::sscanf(v, "%d%c%d", &m, &x, &n) == 3 && x == 'x' && m > 0 && n > 0) {
      e.tile_m = m, e.tile_n = n;
      note(e.fwd_names, "FLASHBOX_SM90_TILE", v);
    } else {
      bad("FLASHBOX_SM90_TILE", v, "MxN, e.g. 128x128");
    }
  }
  if (const char *v = std::getenv("FLASHBOX_SM90_SCHED")) {
    if (std::strcmp(v, "grid") == 0)
      e.schedule = FLASHBOX_SCHEDULE_GRID;
    else if (std::strcmp(v, "persistent") == 0)
      e.schedule = FLASHBOX_SCHEDULE_PERSISTENT;
    else
      bad("FLASHBOX_SM90_SCHED", v, "grid or persistent");
    if (e.schedule != FLASHBOX_SCHEDULE_AUTO) note(e.fwd_names, "FLASHBOX_SM90_SCHED", v);
  }
  if (const char *v = std::getenv("FLASHBOX_SM90_CTAS")) {
    if (parse_int(v, 1, e.max_ctas))
      note(e.fwd_names, "FLASHBOX_SM90_CTAS", v);
    else
      bad("FLASHBOX_SM90_CTAS", v, "a CTA count >= 1");
  }
  if (const char *v = std::getenv("FLASHBOX_SM90_L2MB")) {
    if (parse_int(v, 0, e.l2_section_mb))
      note(e.fwd_names, "FLASHBOX_SM90_L2MB", v);
    else
      bad("FLASHBOX_SM90_L2MB", v, "a number of MB >= 0");
  }
  if (const char *v = std::getenv("FLASHBOX_BWD_BLOCK_Q")) {
    if (parse_int(v, 32, e.bwd_block_q) && (e.bwd_block_q == 32 || e.bwd_block_q == 64))
      note(e.bwd_names, "FLASHBOX_BWD_BLOCK_Q", v);
    else
      e.bwd_block_q = 0, bad("FLASHBOX_BWD_BLOCK_Q", v, "32 or 64");
  }
  if (const char *v = std::getenv("FLASHBOX_KVCACHE_PREFILL_ROWS"); v && !parse_int(v, 1, e.kvcache_prefill_rows))
    e.kvcache_prefill_rows = 0, bad("FLASHBOX_KVCACHE_PREFILL_ROWS", v, "a number of query rows >= 1");
  // The sm90 backward's switches, through the parsers their readers use (core/env_switch.hpp).
  for (const char *name : {"FLASHBOX_SM90_BWD_PDL", "FLASHBOX_SM90_BWD_EARLY_CONVERT", "FLASHBOX_SM90_BWD_D64_QDESC"})
    if (env::switch_01(name).state == env::State::bad) bad(name, std::getenv(name), "0 or 1");
  if (env::int_at_least("FLASHBOX_SM90_BWD_CHUNK_HEADS", 1).state == env::State::bad)
    bad("FLASHBOX_SM90_BWD_CHUNK_HEADS", std::getenv("FLASHBOX_SM90_BWD_CHUNK_HEADS"),
        "a number of (batch, kv head) pairs >= 1");
  if (env::word("FLASHBOX_SM90_BWD_CHUNK_RULE", "v18") == env::State::bad)
    bad("FLASHBOX_SM90_BWD_CHUNK_RULE", std::getenv("FLASHBOX_SM90_BWD_CHUNK_RULE"), "v18");
  return e;
}

const EnvOverrides &environment() {
  static const EnvOverrides e = read_environment();  // once per process (thread-safe initialisation)
  return e;
}

// Whether the caller's struct (struct_size bytes) holds the field at `offset` of `size` bytes; a
// field outside it keeps its default.
bool within(const flashbox_options &o, size_t offset, size_t size) { return size_t(o.struct_size) >= offset + size; }
#define FLASHBOX_HAS_FIELD(o, field) within(o, offsetof(flashbox_options, field), sizeof((o).field))

}  // namespace

int resolve_tuning(const flashbox_options *options, Pass pass, Tuning &out) {
  out = Tuning{};
  if (options != nullptr) {
    const flashbox_options &o = *options;
    if (o.struct_size < int32_t(offsetof(flashbox_options, sm90_tile_m)) || o.struct_size > int32_t(sizeof o))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "options.struct_size = " + std::to_string(o.struct_size) + " must be between " +
                      std::to_string(offsetof(flashbox_options, sm90_tile_m)) + " and " + std::to_string(sizeof o) +
                      " (sizeof(flashbox_options); call flashbox_options_init)");
    if (o.family != FLASHBOX_FAMILY_AUTO && o.family != FLASHBOX_FAMILY_SM80 && o.family != FLASHBOX_FAMILY_SM90)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "options.family = " + std::to_string(int(o.family)) + " must be auto (0), sm80 (1) or sm90 (2)");
    out.family = o.family;
    if (FLASHBOX_HAS_FIELD(o, sm90_tile_n)) {
      if (o.sm90_tile_m < 0 || o.sm90_tile_n < 0 || (o.sm90_tile_m == 0) != (o.sm90_tile_n == 0))
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "options.sm90_tile_m x sm90_tile_n = " + std::to_string(o.sm90_tile_m) + " x " +
                        std::to_string(o.sm90_tile_n) + " must be both 0 or both > 0");
      out.sm90_tile_m = o.sm90_tile_m, out.sm90_tile_n = o.sm90_tile_n;
    }
    if (FLASHBOX_HAS_FIELD(o, sm90_schedule)) {
      if (o.sm90_schedule != FLASHBOX_SCHEDULE_AUTO && o.sm90_schedule != FLASHBOX_SCHEDULE_GRID &&
          o.sm90_schedule != FLASHBOX_SCHEDULE_PERSISTENT)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "options.sm90_schedule = " + std::to_string(int(o.sm90_schedule)) +
                                                       " must be auto (0), grid (1) or persistent (2)");
      out.sm90_schedule = o.sm90_schedule;
    }
    if (FLASHBOX_HAS_FIELD(o, sm90_max_ctas)) {
      if (o.sm90_max_ctas < 0)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "options.sm90_max_ctas = " + std::to_string(o.sm90_max_ctas) + " must be >= 0 (0: one per SM)");
      out.sm90_max_ctas = o.sm90_max_ctas;
    }
    if (FLASHBOX_HAS_FIELD(o, sm90_l2_section_mb)) {
      if (o.sm90_l2_section_mb < -1)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "options.sm90_l2_section_mb = " + std::to_string(o.sm90_l2_section_mb) +
                        " must be >= 0 (or -1: the library's choice)");
      out.sm90_l2_section_mb = o.sm90_l2_section_mb;
    }
    if (FLASHBOX_HAS_FIELD(o, sm80_bwd_block_q)) {
      if (o.sm80_bwd_block_q != 0 && o.sm80_bwd_block_q != 32 && o.sm80_bwd_block_q != 64)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "options.sm80_bwd_block_q = " + std::to_string(o.sm80_bwd_block_q) + " must be 0, 32 or 64");
      out.sm80_bwd_block_q = o.sm80_bwd_block_q;
    }
  }

  const EnvOverrides &e = environment();
  if (!e.error.empty()) return fail(FLASHBOX_ERR_INVALID_ARGUMENT, e.error);
  const auto take = [&](auto &field, auto unset, auto value) {
    if (field == unset && value != unset) field = value;
  };
  if (pass == Pass::forward) {
    if (out.family == FLASHBOX_FAMILY_AUTO && e.fwd_family) out.family = *e.fwd_family;
    if (out.sm90_tile_m == 0) out.sm90_tile_m = e.tile_m, out.sm90_tile_n = e.tile_n;
    take(out.sm90_schedule, FLASHBOX_SCHEDULE_AUTO, e.schedule);
    take(out.sm90_max_ctas, 0, e.max_ctas);
    take(out.sm90_l2_section_mb, -1, e.l2_section_mb);
    out.env_overrides = e.fwd_names;
  } else {
    if (out.family == FLASHBOX_FAMILY_AUTO && e.bwd_family) out.family = *e.bwd_family;
    take(out.sm80_bwd_block_q, 0, e.bwd_block_q);
    out.env_overrides = e.bwd_names;
  }
  return FLASHBOX_OK;
}

int kvcache_prefill_rows(int64_t &rows) {
  const EnvOverrides &e = environment();
  if (!e.error.empty()) return fail(FLASHBOX_ERR_INVALID_ARGUMENT, e.error);
  if (e.kvcache_prefill_rows > 0) rows = e.kvcache_prefill_rows;
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail

extern "C" FLASHBOX_API void flashbox_options_init(flashbox_options *options) {
  if (options == nullptr) return;
  *options = flashbox_options{};
  options->struct_size = int32_t(sizeof(flashbox_options));
  options->family = FLASHBOX_FAMILY_AUTO;
  options->sm90_schedule = FLASHBOX_SCHEDULE_AUTO;
  options->sm90_l2_section_mb = -1;
}
