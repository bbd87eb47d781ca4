// Column-aligned tables for the terminal: the subcommands print their results with it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashbox::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  void add_row(std::vector<std::string> cells);  // as many cells as header columns
  std::string render() const;                    // numbers right-aligned, text left-aligned

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string format_bytes(int64_t bytes);  // "1.50 GiB"
std::string format_sci(double value);     // "3.1e-03"

}  // namespace flashbox::cli
