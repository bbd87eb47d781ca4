// PLACEHOLDER until this backend lands: reports that it is not available. Replaced by its owner.
#include "api/backends.hpp"
#include "api/error.hpp"

namespace flashbox::detail {

int cuda_naive_forward(const flashbox_attention_args &) {
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "cuda_naive_forward: not implemented yet");
}

}  // namespace flashbox::detail
