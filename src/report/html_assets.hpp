// What the build embeds for the report page (cmake/EmbedWeb.cmake generates the definitions): the
// page template built from web/ and the kernels' source files as they were at build time.
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

}  // namespace flashbox::report::assets
