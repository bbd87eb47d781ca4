#include "report/dtype_names.hpp"

#include <stdexcept>

namespace flashbox::report {

flashbox_dtype parse_dtype(const std::string &name) {
  if (name == "bf16" || name == "bfloat16") return FLASHBOX_BFLOAT16;
  if (name == "fp16" || name == "float16") return FLASHBOX_FLOAT16;
  if (name == "fp32" || name == "float32") return FLASHBOX_FLOAT32;
  throw std::invalid_argument("unknown dtype '" + name + "' (expected bf16, fp16 or fp32)");
}

std::vector<std::string> dtype_names() { return {"bf16", "fp16", "fp32"}; }

double rel_error_threshold(flashbox_dtype dtype) { return dtype == FLASHBOX_FLOAT32 ? 1e-5 : 1e-2; }

}  // namespace flashbox::report
