// Progress of long work on stderr: a rewritten line on a terminal, one line per new stage otherwise
// (so logs stay short). Stdout stays clean for tables and JSON.
#pragma once
#include <string>

namespace flashbox::cli {

class ProgressLine {
 public:
  ProgressLine();
  ~ProgressLine();  // ends a pending terminal line
  void update(const std::string &what, int done, int total);
  void finish();

 private:
  bool tty_;
  bool open_ = false;  // a terminal line is waiting to be overwritten
  std::string last_;
};

}  // namespace flashbox::cli
