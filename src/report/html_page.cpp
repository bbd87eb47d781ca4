// The report page writer: fills the page template built from web/ (embedded by cmake/EmbedWeb.cmake)
// with the report JSON and the kernels' source, giving one self-contained HTML file.
#include "report/html_page.hpp"

#include "report/html_assets.hpp"

#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace flashbox::report {
namespace {

constexpr std::string_view kDataSlot = "@@FLASHBOX_DATA@@";
constexpr std::string_view kSourcesSlot = "@@FLASHBOX_SOURCES@@";

// JSON text placed inside <script type="application/json">. "<" appears in JSON only inside strings,
// where \u003c means the same character; writing it escaped means neither "</script>" nor "<!--" can
// end or change the element early. Invalid UTF-8 (a source file in another encoding) becomes U+FFFD.
std::string json_for_script(const nlohmann::json &value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 64);
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

nlohmann::json kernel_sources_json() {
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < assets::kernel_source_count; ++i) {
    const assets::EmbeddedFile &f = assets::kernel_sources[i];
    nlohmann::json entry = {{"path", f.path}, {"present", f.present}};
    if (f.present) {
      entry["text"] = std::string(reinterpret_cast<const char *>(f.data), f.size);
    }
    files.push_back(std::move(entry));
  }
  return {{"files", std::move(files)}};
}

// Where `slot` is in the template; it must occur exactly once.
std::size_t slot_position(std::string_view page, std::string_view slot) {
  std::size_t at = page.find(slot);
  if (at == std::string_view::npos || page.find(slot, at + slot.size()) != std::string_view::npos) {
    throw std::runtime_error("html page: the embedded template does not have exactly one " + std::string(slot));
  }
  return at;
}

}  // namespace

void write_html_page(const nlohmann::json &document, const std::string &path) {
  if (!document.is_object()) {
    throw std::runtime_error("html page: the report document must be a JSON object");
  }
  std::string_view page(reinterpret_cast<const char *>(assets::page_template), assets::page_template_size);
  // Both slots are located in the template itself, so text inside the report or the sources can
  // never be taken for a placeholder.
  struct Fill {
    std::size_t at;
    std::string_view slot;
    std::string content;
  };
  Fill fills[] = {{slot_position(page, kDataSlot), kDataSlot, json_for_script(document)},
                  {slot_position(page, kSourcesSlot), kSourcesSlot, json_for_script(kernel_sources_json())}};
  if (fills[1].at < fills[0].at) std::swap(fills[0], fills[1]);
  std::string html;
  html.reserve(page.size() + fills[0].content.size() + fills[1].content.size());
  std::size_t from = 0;
  for (const Fill &f : fills) {
    html.append(page.substr(from, f.at - from));
    html.append(f.content);
    from = f.at + f.slot.size();
  }
  html.append(page.substr(from));

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw std::runtime_error("html page: cannot open " + path + " for writing");
  }
  out.write(html.data(), static_cast<std::streamsize>(html.size()));
  out.close();
  if (!out) {
    throw std::runtime_error("html page: failed writing " + path);
  }
}

}  // namespace flashbox::report
