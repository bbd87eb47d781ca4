// The report's "pass criteria" box: what must hold for the experiment to have shown what it claims,
// each with the measured value, evaluated from the finished document (so merged steps count too).
#pragma once
#include <nlohmann/json.hpp>

namespace flashbox::report {

// criteria[] of docs/report-schema.md: {name, value, threshold, status: pass | fail | not_measured}.
nlohmann::json evaluate_criteria(const nlohmann::json &document);

}  // namespace flashbox::report
