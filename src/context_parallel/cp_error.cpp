#include "context_parallel/cp_error.hpp"

#include "flashbox/flashbox.h"

namespace flashbox::cp {
namespace {
thread_local std::string g_last_error;
}

int fail(int code, const std::string &message) {
  g_last_error = message;
  return code;
}

const char *last_error_message() { return g_last_error.c_str(); }

int fail_from_flashbox(int code, const std::string &what) { return fail(code, what + ": " + flashbox_last_error()); }

}  // namespace flashbox::cp
