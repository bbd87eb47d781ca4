#include "gpt2/tokens/sample_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "gpt2/error.hpp"
#include "gpt2/source_paths.hpp"

namespace flashbox::gpt2 {

SampleText repository_sample_text(size_t min_bytes) {
  namespace fs = std::filesystem;
  const auto root = find_source_root_with("src/gpt2/tokens/sample_text.cpp");
  if (!root) throw Gpt2Error("cannot find the flashbox source tree for sample text");
  // Files whose content is stable and ours: the C API header, the docs, the GPT-2 sources.
  std::vector<fs::path> files;
  for (const char *dir : {"include/flashbox", "docs", "src/gpt2"}) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(*root / dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      const auto ext = it->path().extension();
      if (it->is_regular_file() && (ext == ".h" || ext == ".md" || ext == ".hpp" || ext == ".cpp"))
        files.push_back(it->path());
    }
  }
  std::sort(files.begin(), files.end());
  std::string corpus;
  for (const auto &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    corpus += ss.str();
    corpus += "\n";
  }
  if (corpus.empty()) throw Gpt2Error(fmt::format("no text files found under '{}'", root->string()));
  SampleText out;
  int copies = 0;
  while (out.text.size() < min_bytes || copies == 0) {
    out.text += corpus;
    ++copies;
  }
  out.description = fmt::format("{} repository files (include/flashbox, docs, src/gpt2){}", files.size(),
                                copies > 1 ? fmt::format(", repeated {} times", copies) : "");
  return out;
}

}  // namespace flashbox::gpt2
