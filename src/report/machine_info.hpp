// The "machine" block of the report: where the numbers were measured and with which build.
#pragma once
#include <nlohmann/json.hpp>

namespace flashbox::report {

nlohmann::json machine_description();
std::string utc_timestamp();  // ISO 8601, e.g. "2026-11-29T12:00:00Z"

}  // namespace flashbox::report
