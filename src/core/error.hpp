// Thread-local error state behind flashbox_last_error(). Every backend reports failures through
// fail(), which records the message and returns the code so call sites read `return fail(...)`.
#pragma once
#include <string>

namespace flashbox::detail {

int fail(int code, std::string message);
void clear_error();
const char *last_error();

}  // namespace flashbox::detail
