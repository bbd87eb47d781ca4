// PLACEHOLDER until this backend lands: reports that it is not available. Replaced by its owner.
#include "api/backends.hpp"
#include "api/error.hpp"

namespace flashbox::detail {

int cuda_flash_forward_sm80(const flashbox_attention_args &) {
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "cuda_flash_forward_sm80: not implemented yet");
}

}  // namespace flashbox::detail
