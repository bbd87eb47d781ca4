// PLACEHOLDER until the Hopper kernel lands: supports nothing, so dispatch falls back to sm80.
#include "api/backends.hpp"
#include "api/error.hpp"

namespace flashbox::detail {

bool cuda_flash_sm90_supports(const flashbox_attention_args &, const char **why_not) {
  if (why_not) *why_not = "the sm90 kernel is not implemented yet";
  return false;
}

int cuda_flash_forward_sm90(const flashbox_attention_args &) {
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "cuda_flash_forward_sm90: not implemented yet");
}

}  // namespace flashbox::detail
