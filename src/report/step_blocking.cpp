// Report step "blocking" (SPEC step 3): how the T x T matrix is cut into BLOCK_M x BLOCK_N cells, how
// many programs the grid has, which cells a causal scan visits, skips or masks; and the CPU blocked
// level run next to the naive one on the same inputs (same numbers, no T x T scratch).
#include "report/attention_shape.hpp"
#include "report/correctness.hpp"
#include "report/step_registry.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace flashbox::report {
namespace {

constexpr int64_t kBlockM = 64, kBlockN = 64;

// Cells of the (seqlen/BLOCK_M) x (seqlen/BLOCK_N) grid under a bottom-right causal mask (square here):
// a cell is skipped when every (query, key) pair in it is masked, masked element-wise when some are.
nlohmann::json causal_cells(int64_t seqlen) {
  const int64_t q_blocks = (seqlen + kBlockM - 1) / kBlockM, k_blocks = (seqlen + kBlockN - 1) / kBlockN;
  int64_t visited = 0, diagonal = 0;
  for (int64_t i = 0; i < q_blocks; ++i) {
    const int64_t first_row = i * kBlockM, last_row = std::min(seqlen, first_row + kBlockM) - 1;
    for (int64_t j = 0; j < k_blocks; ++j) {
      const int64_t first_key = j * kBlockN, last_key = std::min(seqlen, first_key + kBlockN) - 1;
      if (first_key > last_row) continue;  // above the diagonal: never loaded
      ++visited;
      if (last_key > first_row) ++diagonal;  // some pair in it is masked
    }
  }
  return {{"total", q_blocks * k_blocks},
          {"visited", visited},
          {"skipped", q_blocks * k_blocks - visited},
          {"diagonal", diagonal}};
}

struct LevelRun {
  std::vector<unsigned char> out;
  int64_t scratch_bytes = 0;
  std::string kernel;
};

LevelRun run_level(HostAttention &host, flashbox_impl impl) {
  std::memset(host.o.data(), 0xff, host.o.size());
  const auto args = host.args(impl);
  if (int rc = flashbox_attention_forward(&args); rc != FLASHBOX_OK)
    throw std::runtime_error(std::string("CPU ") + flashbox_impl_name(impl) + " failed: " + flashbox_last_error());
  return {host.o, flashbox_last_scratch_peak_bytes(), flashbox_last_kernel()};
}

nlohmann::json run_blocking(ReportContext &ctx) {
  const int64_t batch = 4, heads = 12, example_seqlen = 4096;
  const int64_t q_blocks = (example_seqlen + kBlockM - 1) / kBlockM;
  nlohmann::json j = {{"measured", true},
                      {"block_m", kBlockM},
                      {"block_n", kBlockN},
                      {"batch", batch},
                      {"heads", heads},
                      {"example_seqlen", example_seqlen},
                      {"grid", {q_blocks, batch * heads}},
                      {"programs", q_blocks * batch * heads},
                      {"causal_cells", causal_cells(example_seqlen)}};

  // fp32 so that the two levels' agreement is not hidden under bf16's output rounding.
  const AttentionShape shape{1, ctx.quick ? 130 : 333, ctx.quick ? 130 : 333, 4, 4, 64, FLASHBOX_FLOAT32, true};
  HostAttention host(shape, ctx.seed);
  ctx.progress("CPU naive", 0, 2);
  const LevelRun naive = run_level(host, FLASHBOX_NAIVE);
  ctx.progress("CPU blocked", 1, 2);
  const LevelRun blocked = run_level(host, FLASHBOX_BLOCKED);
  std::vector<double> naive_values(size_t(shape.q_elements()));
  for (size_t i = 0; i < naive_values.size(); ++i)
    naive_values[i] = cpu::load_as_float(naive.out.data(), shape.dtype, int64_t(i));
  const auto agree = compare_to_reference(blocked.out.data(), shape.dtype, naive_values);
  j["comparison"] = {{"batch", shape.batch},
                     {"heads", shape.heads_q},
                     {"seqlen", shape.seqlen_q},
                     {"head_dim", shape.head_dim},
                     {"dtype", cpu::dtype_name(shape.dtype)},
                     {"causal", shape.causal},
                     {"naive_kernel", naive.kernel},
                     {"blocked_kernel", blocked.kernel},
                     {"naive_scratch_bytes", naive.scratch_bytes},
                     {"blocked_scratch_bytes", blocked.scratch_bytes},
                     {"rel_difference", agree.rel}};
  j["cpu_blocked_vs_naive_max_abs"] = agree.max_abs;
  ctx.progress("done", 2, 2);
  return j;
}

FLASHBOX_REPORT_STEP(30, "blocking", run_blocking);

}  // namespace
}  // namespace flashbox::report
