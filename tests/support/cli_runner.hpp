// Runs the real `flashbox` binary (FLASHBOX_CLI_PATH) through the shell and captures its exit status,
// stdout and stderr, so the CLI tests (tests/cli, tests/gpt2) see exactly what a user sees.
#pragma once
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace flashbox::test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// The folder of this process's temp_path files: made on first use, removed with its contents when the
// process exits (ctest runs each test in a process of its own: one folder a test, none left behind).
class ProcessTempDir {
 public:
  ProcessTempDir()
      : path_(std::filesystem::temp_directory_path() / ("flashbox_cli_test_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ProcessTempDir() {
    std::error_code ignored;  // an exit handler may not throw
    std::filesystem::remove_all(path_, ignored);
  }
  ProcessTempDir(const ProcessTempDir &) = delete;
  ProcessTempDir &operator=(const ProcessTempDir &) = delete;
  const std::filesystem::path &path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A path in this process's temporary folder; the file goes with the folder at exit.
inline std::string temp_path(const std::string &name) {
  static const ProcessTempDir dir;
  return (dir.path() / name).string();
}

inline std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` is appended to the binary's path as shell words (tests pass only simple words).
inline CliResult run_cli(const std::string &args) {
  static int counter = 0;
  const std::string err_path = temp_path("stderr_" + std::to_string(++counter));
  const std::string command = std::string("'") + FLASHBOX_CLI_PATH + "' " + args + " 2>'" + err_path + "'";
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  CliResult r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.err = read_file(err_path);
  std::filesystem::remove(err_path);
  return r;
}

// Runs a command that must succeed and print JSON on stdout.
inline nlohmann::json run_cli_json(const std::string &args) {
  const CliResult r = run_cli(args);
  if (r.exit_code != 0)
    throw std::runtime_error("flashbox " + args + " exited " + std::to_string(r.exit_code) + ": " + r.err);
  return nlohmann::json::parse(r.out);
}

}  // namespace flashbox::test
