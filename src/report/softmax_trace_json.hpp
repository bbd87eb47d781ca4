// steps.softmax_trace of docs/report-schema.md from the CPU's online softmax trace; shared by the
// report step and `flashbox softmax-trace --json`.
#pragma once
#include "cpu/online_softmax_trace.hpp"

#include <nlohmann/json.hpp>

namespace flashbox::report {

nlohmann::json to_json(const cpu::OnlineSoftmaxTrace &trace);

}  // namespace flashbox::report
