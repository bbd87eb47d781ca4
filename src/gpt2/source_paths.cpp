#include "gpt2/source_paths.hpp"

#include <vector>

namespace flashbox::gpt2 {

std::optional<std::filesystem::path> find_source_root_with(const std::filesystem::path &relative) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> roots = {fs::current_path(ec)};
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    roots.push_back(exe.parent_path());
    roots.push_back(exe.parent_path().parent_path());
  }
  // This file is src/gpt2/source_paths.cpp of the tree the binary was built from.
  const fs::path self(__FILE__);
  if (self.is_absolute()) roots.push_back(self.parent_path().parent_path().parent_path());
  for (const auto &root : roots)
    if (!root.empty() && fs::exists(root / relative, ec)) return root;
  return std::nullopt;
}

}  // namespace flashbox::gpt2
