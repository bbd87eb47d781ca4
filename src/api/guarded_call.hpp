// The C API's exception boundary: runs a backend and turns any C++ exception into an error code,
// so nothing throws across the C ABI. Also keeps the last successful call's scratch peak and kernel
// name when this call fails. Used by every exported entry point (forward, backward).
#pragma once
#include <exception>
#include <new>
#include <string>

#include "core/call_state.hpp"
#include "core/error.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

template <class Fn>
int guarded_call(const char *what, Fn &&fn) {
  const CallStateSnapshot before = save_call_state();
  begin_call();
  int rc;
  try {
    rc = fn();
  } catch (const std::bad_alloc &) {
    rc = fail(FLASHBOX_ERR_OUT_OF_MEMORY, std::string(what) + ": out of host memory");
  } catch (const std::exception &e) {
    rc = fail(FLASHBOX_ERR_INTERNAL, std::string(what) + ": internal error: " + e.what());
  } catch (...) {
    rc = fail(FLASHBOX_ERR_INTERNAL, std::string(what) + ": internal error (unknown exception)");
  }
  if (rc != FLASHBOX_OK) restore_call_state(before);
  return rc;
}

}  // namespace flashbox::detail
