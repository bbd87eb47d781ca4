// FLASHBOX_FLASH_ARCH / FLASHBOX_BWD_ARCH = sm80 | sm90 pin the CUDA flash forward / backward family
// of every case of a test program, so that one program runs its cases on each family (e.g.
// FLASHBOX_BWD_ARCH=sm80 on a Hopper device). The library reads no environment: the test program
// reads these at start-up and passes them through the private tuning interface (api/tuning.hpp); a
// bad value stops the program.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "api/tuning.hpp"
#include "flashbox/flashbox.h"
#include "support/gpu_check.hpp"

namespace flashbox::test {

inline const bool kFamiliesPinned = [] {
  for (const auto &[variable, key] :
       {std::pair{"FLASHBOX_FLASH_ARCH", "forward_family"}, std::pair{"FLASHBOX_BWD_ARCH", "backward_family"}}) {
    const char *value = std::getenv(variable);
    if (value != nullptr && *value != '\0' && detail::set_tuning(key, value) != FLASHBOX_OK) {
      std::fprintf(stderr, "%s=%s: %s\n", variable, value, flashbox_last_error());
      std::abort();
    }
  }
  return true;
}();

// Both passes on one family for the scope of a test: the suites of one family in a program whose
// other suites must keep the library's own choice (a pin at start-up would hold for all of them).
class PinnedFamily {
 public:
  explicit PinnedFamily(flashbox_kernel_family family) : scope_(pinned(family)) {}

 private:
  static detail::TuningOverrides pinned(flashbox_kernel_family family) {
    detail::TuningOverrides o = detail::tuning_overrides();
    o.forward_family = o.backward_family = family;
    return o;
  }
  detail::ScopedTuning scope_;
};

}  // namespace flashbox::test

// The sm80 suites of a program whose cases a Hopper would partly give to the sm90 families: skips
// without a CUDA device (gpu_check.hpp), else pins both passes to sm80 for the rest of the test.
#define SKIP_WITHOUT_GPU_PIN_SM80() \
  SKIP_WITHOUT_GPU();               \
  const ::flashbox::test::PinnedFamily pin_sm80_(FLASHBOX_FAMILY_SM80)
