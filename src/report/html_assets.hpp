// What the build embeds for the report (cmake/EmbedWeb.cmake generates the definitions): the page
// template built from web/, the kernels' source files as they were at build time, and the Python
// script of the peers step (src/report/sdpa_peers.py), so the binary needs no source tree to run it.
#pragma once
#include <cstddef>

namespace flashbox::report::assets {

struct EmbeddedFile {
  const char *path;           // relative to the repository root
  const unsigned char *data;  // nullptr when the file was absent at build time
  std::size_t size;
  bool present;
};

extern const unsigned char *const page_template;  // UTF-8 HTML with two JSON placeholders
extern const std::size_t page_template_size;
extern const EmbeddedFile *const kernel_sources;
extern const std::size_t kernel_source_count;
extern const unsigned char *const peers_script;  // src/report/sdpa_peers.py
extern const std::size_t peers_script_size;

}  // namespace flashbox::report::assets
