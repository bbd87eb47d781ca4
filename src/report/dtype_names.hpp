// The names the tools accept for the C API's dtypes ("bf16", "fp16", "fp32"), and the error each
// dtype allows. Element sizes and printing names come from src/core/dtype.hpp.
#pragma once
#include "flashbox/flashbox.h"

#include <string>
#include <vector>

namespace flashbox::report {

// Throws std::invalid_argument naming the accepted values when `name` is not one of them.
flashbox_dtype parse_dtype(const std::string &name);
std::vector<std::string> dtype_names();

// Pass threshold on the relative error of an implementation against the fp64 reference: the inputs'
// own rounding decides what agreement is possible (bf16/fp16 keep 8/11 mantissa bits).
double rel_error_threshold(flashbox_dtype dtype);

}  // namespace flashbox::report
