// Shared by the fuzz targets: the parsers under test read files by path, so each input is written
// to a file of this process (under TMPDIR, /tmp by default) and the parser reads it back. One file
// name per target and process, overwritten each iteration and removed at exit.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace flashbox::fuzz {

// A file whose content is replaced by write(); the path stays the same for the whole run.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string &name) {
    const char *tmp = std::getenv("TMPDIR");
    dir_ = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("flashbox_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / name).string();
  }
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string &write(const uint8_t *data, size_t size) {
    FILE *f = std::fopen(path_.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }
  const std::string &path() const { return path_; }

 private:
  std::filesystem::path dir_;
  std::string path_;
};

// A parser may reject an input only with its own error type (a clear message naming the file);
// anything else that escapes (a JSON library exception, std::out_of_range, ...) is a finding.
[[noreturn]] inline void unexpected_exception(const char *what) {
  std::fprintf(stderr, "fuzz: an exception other than the parser's own error escaped: %s\n", what);
  std::abort();
}

}  // namespace flashbox::fuzz
