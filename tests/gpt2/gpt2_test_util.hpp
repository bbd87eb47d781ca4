// Helpers shared by the GPT-2 tests: a scratch folder per test, seeded small models, error capture.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpt2/error.hpp"
#include "gpt2/model/weights.hpp"

namespace gpt2_test {

// A fresh folder under the system temp dir, removed with the object.
class ScratchDir {
 public:
  ScratchDir() {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    // One path component: a parameterized test's name ("Name/0") would make a folder inside a folder
    // that the destructor leaves behind.
    std::string name = info ? info->name() : "x";
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = std::filesystem::temp_directory_path() / ("flashbox_gpt2_" + name + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string &name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// 2 layers, 2 heads of 16, vocabulary 97, context 32: small enough for an fp64 reference.
inline flashbox::gpt2::Gpt2Config micro_config() { return {"custom", 2, 2, 32, 97, 32}; }

inline flashbox::gpt2::Gpt2Weights seeded(const flashbox::gpt2::Gpt2Config &c, uint64_t seed) {
  flashbox::gpt2::Gpt2Weights w(c);
  flashbox::gpt2::init_gpt2_weights(w, seed);
  return w;
}

// The message of the Gpt2Error `fn` throws, or "no error".
template <class Fn>
std::string error_of(Fn &&fn) {
  try {
    fn();
  } catch (const flashbox::gpt2::Gpt2Error &e) {
    return e.what();
  }
  return "no error";
}

inline std::string read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace gpt2_test
