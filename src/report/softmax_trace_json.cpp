#include "report/softmax_trace_json.hpp"

#include <cmath>

namespace flashbox::report {
namespace {

// -inf (the running max before the first block) has no JSON spelling: it becomes null.
nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

nlohmann::json to_json(const cpu::OnlineSoftmaxTrace &t) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto &s : t.steps)
    steps.push_back({{"block_index", s.block_index},
                     {"read", s.block_values},
                     {"numbers_read", s.numbers_read},
                     {"block_max", s.block_max},
                     {"m_old", finite_or_null(s.m_old)},
                     {"m", s.m},
                     {"l", s.l},
                     {"rescale", s.rescale}});
  return {{"measured", true},
          {"values", t.values},
          {"block", t.block},
          {"steps", steps},
          {"softmax", t.softmax},
          {"exact_softmax", t.exact},
          {"max_abs_error", t.max_abs_error}};
}

}  // namespace flashbox::report
