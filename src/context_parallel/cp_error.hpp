// This library's error state: the message of this thread's last failure (flashbox_cp_last_error).
#pragma once
#include <string>

namespace flashbox::cp {

int fail(int code, const std::string &message);  // records message, returns code
const char *last_error_message();
// The code of a failed flashbox_attention_* call, its message prefixed by `what` (e.g. "rank 2 step 1").
int fail_from_flashbox(int code, const std::string &what);

}  // namespace flashbox::cp
