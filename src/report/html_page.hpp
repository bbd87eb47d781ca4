// Writes the self-contained report page (web/ bundled at build time) for a report JSON document.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace flashbox::report {

// Renders `document` (docs/report-schema.md) into one HTML file at `path`: data, scripts, styles and
// the kernels' source inline. Throws std::runtime_error with a message on failure.
void write_html_page(const nlohmann::json &document, const std::string &path);

}  // namespace flashbox::report
