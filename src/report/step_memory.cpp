// Report step "memory" (SPEC step 1): S and P against Q+K+V+O for the experiment's shape, T 512..16384.
#include "report/memory_arith.hpp"
#include "report/step_registry.hpp"

namespace flashbox::report {
namespace {

nlohmann::json run_memory(ReportContext &) {
  const MemoryConfig config;  // batch 4, 12 heads, head_dim 64, bf16: the SPEC's fixed experiment
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t t : default_memory_seqlens()) rows.push_back(to_json(memory_row(config, t)));
  // The page's T slider starts at 2,048, as the source page's does.
  return {{"measured", true}, {"config", to_json(config)}, {"example_seqlen", 2048}, {"rows", rows}};
}

FLASHBOX_REPORT_STEP(10, "memory", run_memory);

}  // namespace
}  // namespace flashbox::report
