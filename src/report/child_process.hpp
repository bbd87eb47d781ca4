// Runs a program (the report's Python peers script) with its stdout and stderr read line by line,
// under a time limit. Only the report uses it; nothing here is part of libflashbox.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace flashbox::report {

struct ChildResult {
  bool started = false;    // false: the program could not be executed (output says why)
  bool timed_out = false;  // killed after the time limit
  int exit_code = -1;      // the exit status, or 128 + signal
  std::string output;      // the last lines of stdout and stderr together (at most ~4 KB)
};

// argv[0] is looked up on PATH when it has no '/'. `on_line` gets every output line as it comes.
ChildResult run_child(const std::vector<std::string> &argv, double timeout_s,
                      const std::function<void(const std::string &)> &on_line = {});

// The full path of `name` on PATH (or `name` itself when it holds a '/' and is executable); empty
// when there is none.
std::string find_executable(const std::string &name);

}  // namespace flashbox::report
