// The report page writer: fills the page template with the report JSON (and, once the web bundle is
// embedded, the kernels' source). This first version writes a plain page with the data inline.
#include "report/html_page.hpp"

#include <fstream>
#include <stdexcept>
#include <string>

namespace flashbox::report {
namespace {

// JSON inside <script>: "</" would end the element early, "<!--" can open a script-data escape.
std::string escape_for_script(const std::string &text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void write_html_page(const nlohmann::json &document, const std::string &path) {
  std::string data = escape_for_script(document.dump());
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    throw std::runtime_error("cannot open " + path + " for writing");
  }
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<title>flashbox report</title></head><body><h1>flashbox report</h1>"
         "<pre id=\"raw\"></pre>"
         "<script type=\"application/json\" id=\"flashbox-data\">"
      << data
      << "</script><script>document.getElementById('raw').textContent = JSON.stringify("
         "JSON.parse(document.getElementById('flashbox-data').textContent), null, 2);</script>"
         "</body></html>\n";
  if (!out) {
    throw std::runtime_error("failed writing " + path);
  }
}

}  // namespace flashbox::report
