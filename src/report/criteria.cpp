#include "report/criteria.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace flashbox::report {
namespace {

using nlohmann::json;

json criterion(const std::string &name, const std::string &value, const std::string &threshold,
               const std::string &status) {
  return {{"name", name}, {"value", value}, {"threshold", threshold}, {"status", status}};
}

json not_measured(const std::string &name, const std::string &threshold, const std::string &why) {
  return criterion(name, why, threshold, "not_measured");
}

// The step `name` when it exists and was measured, else null.
const json *measured_step(const json &doc, const char *name) {
  if (!doc.contains("steps") || !doc["steps"].contains(name)) return nullptr;
  const json &step = doc["steps"][name];
  return step.value("measured", false) ? &step : nullptr;
}

std::string why_missing(const json &doc, const char *name) {
  if (doc.contains("steps") && doc["steps"].contains(name) && doc["steps"][name].contains("reason"))
    return "not measured: " + doc["steps"][name]["reason"].get<std::string>();
  return fmt::format("not measured (no steps.{})", name);
}

// Accuracy of every row of steps.check on one device, one criterion per implementation label.
void check_criteria(const json &doc, json &out) {
  const json *check = measured_step(doc, "check");
  const double threshold = check ? check->value("threshold", 1e-2) : 1e-2;
  const std::string limit = fmt::format("rel error < {:.0e}", threshold);
  struct Expected {
    const char *device, *impl, *title;
  };
  for (const Expected &e : {Expected{"cpu", "naive", "CPU naive"}, Expected{"cpu", "blocked", "CPU blocked"},
                            Expected{"cuda", "naive", "CUDA naive"}, Expected{"cuda", "flash", "CUDA flash"}}) {
    const std::string name = fmt::format("{} matches the fp64 reference", e.title);
    if (!check) {
      out.push_back(not_measured(name, limit, why_missing(doc, "check")));
      continue;
    }
    bool found = false;
    for (const json &row : (*check)["rows"]) {
      if (row.value("device", "") != e.device || row.value("impl", "") != e.impl) continue;
      found = true;
      const std::string label = row.value("label", e.impl);
      const std::string title = label == e.impl ? name
                                                : fmt::format("{} {} matches the fp64 reference",
                                                              e.device == std::string("cpu") ? "CPU" : "CUDA", label);
      if (row.value("status", "ok") != "ok" || row["rel_error"].is_null()) {
        out.push_back(
            criterion(title, "failed to run: " + row.value("error", std::string("no output")), limit, "fail"));
        continue;
      }
      const double rel = row["rel_error"].get<double>();
      out.push_back(criterion(title,
                              fmt::format("rel error {:.2e}, max abs {:.2e}", rel, row["max_abs_error"].get<double>()),
                              limit, rel < threshold ? "pass" : "fail"));
    }
    if (!found)
      out.push_back(not_measured(name, limit,
                                 e.device == std::string("cuda") ? "no CUDA device on this machine" : "no such row"));
  }

  const std::string agree_name = "CPU blocked agrees with CPU naive";
  // Same maths, same fp32 accumulation: only summation order differs, so they agree far more closely
  // than either agrees with the reference.
  const double agree_limit = threshold / 4;
  if (!check || (*check)["blocked_vs_naive"].is_null()) {
    out.push_back(
        not_measured(agree_name, fmt::format("rel difference < {:.1e}", agree_limit), why_missing(doc, "check")));
  } else {
    const json &a = (*check)["blocked_vs_naive"];
    const double rel = a["rel"].get<double>();
    out.push_back(criterion(agree_name,
                            fmt::format("rel difference {:.2e}, max abs {:.2e}", rel, a["max_abs"].get<double>()),
                            fmt::format("rel difference < {:.1e}", agree_limit), rel < agree_limit ? "pass" : "fail"));
  }
}

void softmax_criteria(const json &doc, json &out) {
  const std::string name = "Online softmax equals the exact softmax";
  const std::string limit = "max abs error < 1e-6";
  const json *trace = measured_step(doc, "softmax_trace");
  if (!trace) return out.push_back(not_measured(name, limit, why_missing(doc, "softmax_trace")));
  const double err = (*trace)["max_abs_error"].get<double>();
  out.push_back(criterion(name, fmt::format("max abs error {:.2e}", err), limit, err < 1e-6 ? "pass" : "fail"));
}

// Rows of steps.bench for one device, implementation and direction, ordered by T.
std::vector<json> bench_rows(const json &bench, const char *device, const char *impl, const char *direction) {
  std::vector<json> rows;
  for (const json &row : bench["rows"])
    if (row.value("device", "") == device && row.value("impl", "") == impl &&
        row.value("direction", "forward") == direction)
      rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const json &a, const json &b) { return a["seqlen"] < b["seqlen"]; });
  return rows;
}

void bench_criteria(const json &doc, json &out) {
  const json *bench = measured_step(doc, "bench");

  // Naive on the GPU either runs or says "out of memory": never a crash or another error.
  {
    const std::string name = "Naive GPU attention reports OOM cleanly where S and P do not fit";
    const std::string limit = "every naive row ok or oom";
    const auto rows = bench ? bench_rows(*bench, "cuda", "naive", "forward") : std::vector<json>{};
    if (rows.empty()) {
      out.push_back(not_measured(name, limit, bench ? "no CUDA naive rows (no GPU)" : why_missing(doc, "bench")));
    } else {
      std::vector<std::string> oom_at;
      bool clean = true;
      for (const json &r : rows) {
        const std::string status = r.value("status", "");
        if (status == "oom")
          oom_at.push_back(std::to_string(r["seqlen"].get<int64_t>()));
        else if (status != "ok")
          clean = false;
      }
      std::string value;
      if (!clean)
        value = "a naive row failed with an error other than OOM";
      else if (oom_at.empty())
        value = fmt::format("no OOM up to T={}", rows.back()["seqlen"].get<int64_t>());
      else
        value = fmt::format("OOM reported at T={}", fmt::join(oom_at, ", "));
      out.push_back(criterion(name, value, limit, clean ? "pass" : "fail"));
    }
  }

  // Flash keeps no T x T matrix: its scratch must grow at most linearly in T (twice the T, at most
  // about twice the bytes; 1 MiB of slack for fixed-size workspaces).
  {
    const std::string name = "Flash extra memory linear in T";
    const std::string limit = "extra(2T) <= 2.2 x extra(T) + 1 MiB";
    const auto rows = bench ? bench_rows(*bench, "cuda", "flash", "forward") : std::vector<json>{};
    std::vector<std::pair<int64_t, int64_t>> points;
    for (const json &r : rows)
      if (r.value("status", "") == "ok" && r.contains("seqlen") && r.contains("extra_bytes") &&
          r["extra_bytes"].is_number())
        points.emplace_back(r["seqlen"].get<int64_t>(), r["extra_bytes"].get<int64_t>());
    if (points.size() < 2) {
      out.push_back(not_measured(name, limit, bench ? "fewer than two CUDA flash rows" : why_missing(doc, "bench")));
    } else {
      bool linear = true;
      std::vector<std::string> shown;
      for (size_t i = 0; i < points.size(); ++i) {
        shown.push_back(fmt::format("T={}: {} B", points[i].first, points[i].second));
        if (i == 0) continue;
        const double growth = double(points[i].first) / double(points[i - 1].first);
        if (double(points[i].second) > 1.1 * growth * double(points[i - 1].second) + 1048576.0) linear = false;
      }
      out.push_back(criterion(name, fmt::format("{}", fmt::join(shown, ", ")), limit, linear ? "pass" : "fail"));
    }
  }

  // On the CPU, blocked keeps tiles only (per thread), naive a T x T S and P: at the largest T measured
  // the blocked level must need less. (At small T and many threads the per-thread tiles can weigh more.)
  {
    const std::string name = "CPU blocked uses less scratch memory than CPU naive";
    const std::string limit = "blocked extra < naive extra at the largest T";
    const auto naive = bench ? bench_rows(*bench, "cpu", "naive", "forward") : std::vector<json>{};
    const auto blocked = bench ? bench_rows(*bench, "cpu", "blocked", "forward") : std::vector<json>{};
    std::map<int64_t, int64_t> naive_bytes, blocked_bytes;
    for (const json &r : naive)
      if (r["extra_bytes"].is_number()) naive_bytes[r["seqlen"].get<int64_t>()] = r["extra_bytes"].get<int64_t>();
    for (const json &r : blocked)
      if (r["extra_bytes"].is_number() && naive_bytes.count(r["seqlen"].get<int64_t>()))
        blocked_bytes[r["seqlen"].get<int64_t>()] = r["extra_bytes"].get<int64_t>();
    if (blocked_bytes.empty()) {
      out.push_back(not_measured(name, limit, bench ? "no CPU rows" : why_missing(doc, "bench")));
    } else {
      const auto &[t, b] = *blocked_bytes.rbegin();
      out.push_back(criterion(name, fmt::format("T={}: blocked {} B, naive {} B", t, b, naive_bytes[t]), limit,
                              b < naive_bytes[t] ? "pass" : "fail"));
    }
  }
}

// flashbox against SDPA's FlashAttention-2 backend on the same shapes, one direction. flashbox's time
// is its own row in steps.peers where the peers program timed it in the same process
// (a merged peers document), else the bench step's row of that shape when the peers step timed SDPA by
// the bench step's method (`flashbox report` itself: same_method_as_bench).
void peers_criterion(const json &doc, const std::string &direction, json &out) {
  const std::string name =
      fmt::format("flashbox at least as fast as SDPA FlashAttention-2 ({}, T 1024..16384)", direction);
  const std::string limit = "flashbox ms <= sdpa_flash ms at every shape";
  const json *peers = measured_step(doc, "peers");
  if (!peers) return out.push_back(not_measured(name, limit, why_missing(doc, "peers")));
  // Keyed by (batch, heads, head_dim, T, causal as text: the script writes it as a bool or 0/1).
  using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, std::string>;
  std::map<Shape, std::map<std::string, double>> by_shape;
  auto causal_of = [](const json &v) { return v == true || v == 1 ? std::string("1") : std::string("0"); };
  bool any_cuda = false;
  for (const json &r : (*peers)["rows"]) {
    if (r.value("device", "cuda") != "cuda") continue;  // SDPA on the CPU is a peer of the CPU levels only
    any_cuda = true;
    if (r.value("direction", "forward") != direction || !r["ms"].is_number()) continue;
    const int64_t t = r.value("seqlen", int64_t{0});
    if (t < 1024 || t > 16384) continue;
    const std::string causal = r.contains("causal") ? causal_of(r["causal"]) : "?";
    by_shape[{r.value("batch", int64_t{0}), r.value("heads", int64_t{0}), r.value("head_dim", int64_t{0}), t, causal}]
            [r.value("impl", std::string())] = r["ms"].get<double>();
  }
  const json *bench = measured_step(doc, "bench");
  int from_bench = 0;
  if (bench && peers->value("same_method_as_bench", false) && bench->value("device", "") == "cuda") {
    const json &c = (*bench)["config"];
    for (const json &r : bench_rows(*bench, "cuda", "flash", direction.c_str())) {
      if (!r["ms"].is_number()) continue;
      const Shape shape{c.value("batch", int64_t{0}), c.value("heads", int64_t{0}), c.value("head_dim", int64_t{0}),
                        r["seqlen"].get<int64_t>(), causal_of(c.value("causal", json(true)))};
      auto it = by_shape.find(shape);
      if (it == by_shape.end() || it->second.count("flashbox")) continue;
      it->second["flashbox"] = r["ms"].get<double>();
      ++from_bench;
    }
  }
  int compared = 0, slower = 0;
  double worst = 0;
  for (const auto &[shape, impls] : by_shape) {
    if (!impls.count("flashbox") || !impls.count("sdpa_flash")) continue;
    ++compared;
    const double ratio = impls.at("flashbox") / impls.at("sdpa_flash");
    worst = std::max(worst, ratio);
    if (ratio > 1.0) ++slower;
  }
  if (!compared) {
    // A peers step with no backward rows (a forward-only peers run) has nothing to say about it.
    return out.push_back(not_measured(name, limit,
                                      any_cuda
                                          ? fmt::format("no {} shape with both flashbox and sdpa_flash rows", direction)
                                          : "no GPU: SDPA was timed on the CPU, beside the CPU levels"));
  }
  out.push_back(criterion(name,
                          fmt::format("{} shapes, slower at {}, worst time ratio {:.3f}{}", compared, slower, worst,
                                      from_bench ? " (flashbox: the bench step's rows, same method)" : ""),
                          limit, slower == 0 ? "pass" : "fail"));
}

void peers_criteria(const json &doc, json &out) {
  peers_criterion(doc, "forward", out);
  peers_criterion(doc, "backward", out);
}

void gpt2_criteria(const json &doc, json &out) {
  const std::string name = "GPT-2 losses within 2e-4 of naive";
  const std::string limit = "|loss - naive loss| < 2e-4";
  const json *gpt2 = measured_step(doc, "gpt2");
  if (!gpt2) return out.push_back(not_measured(name, limit, why_missing(doc, "gpt2")));
  double worst = 0;
  int compared = 0;
  for (const json &r : (*gpt2)["rows"]) {
    if (!r.contains("diff_from_naive") || !r["diff_from_naive"].is_number()) continue;
    worst = std::max(worst, std::fabs(r["diff_from_naive"].get<double>()));
    ++compared;
  }
  if (compared < 2) return out.push_back(not_measured(name, limit, "fewer than two implementations evaluated"));
  out.push_back(criterion(name, fmt::format("largest difference {:.2e} over {} implementations", worst, compared),
                          limit, worst < 2e-4 ? "pass" : "fail"));
}

// Issue 46's bars on the trained model's run (steps.gpt2_training): GPT-2 124M's validation loss, and
// flashbox's training loss against PyTorch's at every step both logged.
void training_criteria(const json &doc, json &out) {
  const std::string val_name = "trained GPT-2 124M: validation loss";
  const std::string val_limit = "<= 3.8 nats per token";
  const std::string gap_name = "trained GPT-2: flashbox's training loss against PyTorch's at every shared step";
  const std::string gap_limit = "|flashbox - PyTorch| <= 0.02";
  const json *run = measured_step(doc, "gpt2_training");
  if (!run) {
    out.push_back(not_measured(val_name, val_limit, why_missing(doc, "gpt2_training")));
    out.push_back(not_measured(gap_name, gap_limit, why_missing(doc, "gpt2_training")));
    return;
  }
  const json &fb = (*run)["flashbox"];
  const json &final = fb.value("final", json::object());
  if (fb.value("config", "") != "gpt2")
    out.push_back(not_measured(val_name, val_limit, fmt::format("the run trained config {}", fb.value("config", "?"))));
  else if (!final.contains("val_loss") || !final["val_loss"].is_number())
    out.push_back(not_measured(val_name, val_limit, "the run logged no validation"));
  else
    out.push_back(criterion(val_name,
                            fmt::format("{:.4f} after {} tokens", final["val_loss"].get<double>(),
                                        final.value("tokens", int64_t(0))),
                            val_limit, final["val_loss"].get<double>() <= 3.8 ? "pass" : "fail"));
  const json gap = run->value("gap", json());
  if (!gap.is_object() || !gap.value("train", json()).is_object()) {
    const json note = run->value("reference_note", json());
    out.push_back(not_measured(gap_name, gap_limit, note.is_string() ? note.get<std::string>() : "no shared steps"));
    return;
  }
  const double worst = gap["train"]["max_abs"].get<double>();
  out.push_back(criterion(gap_name,
                          fmt::format("largest {:.4f} at step {} of {}", worst, gap["train"]["at_step"].get<int64_t>(),
                                      gap["train"]["points"].get<int64_t>()),
                          gap_limit, worst <= 0.02 ? "pass" : "fail"));
}

}  // namespace

json evaluate_criteria(const json &document) {
  json out = json::array();
  check_criteria(document, out);
  softmax_criteria(document, out);
  bench_criteria(document, out);
  peers_criteria(document, out);
  gpt2_criteria(document, out);
  training_criteria(document, out);
  return out;
}

}  // namespace flashbox::report
