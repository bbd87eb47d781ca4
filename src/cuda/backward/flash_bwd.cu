// PLACEHOLDER until this backend lands: reports that it is not available. Replaced by its owner.
#include "api/backends.hpp"
#include "api/error.hpp"

namespace flashbox::detail {

int cuda_flash_backward(const flashbox_attention_grad_args &) {
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "cuda_flash_backward: not implemented yet");
}

int64_t cuda_backward_workspace_size(const flashbox_attention_grad_args &) { return 0; }

}  // namespace flashbox::detail
