#include "core/error.hpp"

namespace flashbox::detail {
namespace {
thread_local std::string t_last_error;
}

int fail(int code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

void clear_error() { t_last_error.clear(); }

const char *last_error() { return t_last_error.c_str(); }

}  // namespace flashbox::detail
