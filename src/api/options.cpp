// Options and tuning overrides (see options.hpp).
#include "api/options.hpp"

#include <cstddef>
#include <cstdlib>
#include <string>

#include "api/tuning.hpp"
#include "core/error.hpp"

namespace flashbox::detail {
namespace {

// Whether the caller's struct (struct_size bytes) holds the field at `offset` of `size` bytes; a
// field outside it keeps its default.
bool within(const flashbox_options &o, size_t offset, size_t size) { return size_t(o.struct_size) >= offset + size; }
#define FLASHBOX_HAS_FIELD(o, field) within(o, offsetof(flashbox_options, field), sizeof((o).field))

}  // namespace

int resolve_tuning(const flashbox_options *options, Pass pass, Tuning &out) {
  out = Tuning{};
  if (options != nullptr) {
    const flashbox_options &o = *options;
    constexpr int32_t smallest = int32_t(offsetof(flashbox_options, sm_margin));
    if (o.struct_size < smallest || o.struct_size > int32_t(sizeof o))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "options.struct_size = " + std::to_string(o.struct_size) + " must be between " +
                      std::to_string(smallest) + " and " + std::to_string(sizeof o) +
                      " (sizeof(flashbox_options); call flashbox_options_init)");
    if (o.family != FLASHBOX_FAMILY_AUTO && o.family != FLASHBOX_FAMILY_SM80 && o.family != FLASHBOX_FAMILY_SM90)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "options.family = " + std::to_string(int(o.family)) + " must be auto (0), sm80 (1) or sm90 (2)");
    out.family = o.family;
    if (FLASHBOX_HAS_FIELD(o, sm_margin)) {
      // The upper bound (below the device's SM count) is checked where the device is known
      // (api/family_choice.cpp, check_sm_margin).
      if (o.sm_margin < 0)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "options.sm_margin = " + std::to_string(o.sm_margin) + " must be >= 0 (SMs left free)");
      out.sm_margin = o.sm_margin;
    }
  }
  out.overrides = tuning_overrides();
  if (out.family == FLASHBOX_FAMILY_AUTO)
    out.family = pass == Pass::forward ? out.overrides.forward_family : out.overrides.backward_family;
  return FLASHBOX_OK;
}

const std::string &mod_cache_dir() {
  static const std::string dir = [] {
    if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/') return std::string(xdg) + "/flashbox/mods";
    if (const char *home = std::getenv("HOME"); home && home[0] != '\0') return std::string(home) + "/.cache/flashbox/mods";
    return std::string();
  }();
  return dir;
}

}  // namespace flashbox::detail

extern "C" FLASHBOX_API void flashbox_options_init(flashbox_options *options) {
  if (options == nullptr) return;
  *options = flashbox_options{};
  options->struct_size = int32_t(sizeof(flashbox_options));
  options->family = FLASHBOX_FAMILY_AUTO;
  options->sm_margin = 0;
}
