#include "progress.hpp"

#include <fmt/core.h>

#include <unistd.h>
#include <cstdio>

namespace flashbox::cli {

ProgressLine::ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(const std::string &what, int done, int total) {
  if (tty_) {
    fmt::print(stderr, "\r\033[K[{}/{}] {}", done, total, what);
    std::fflush(stderr);
    open_ = true;
  } else if (what != last_) {
    fmt::print(stderr, "[{}/{}] {}\n", done, total, what);
  }
  last_ = what;
}

void ProgressLine::finish() {
  if (open_) {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  open_ = false;
}

}  // namespace flashbox::cli
