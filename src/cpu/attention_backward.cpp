// PLACEHOLDER until this backend lands: reports that it is not available. Replaced by its owner.
#include "api/backends.hpp"
#include "api/error.hpp"

namespace flashbox::detail {

int cpu_backward(const flashbox_attention_grad_args &) {
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "cpu_backward: not implemented yet");
}

}  // namespace flashbox::detail
