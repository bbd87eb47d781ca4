#include "report/training_run.hpp"

#include "report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>

namespace flashbox::report {
namespace {

using nlohmann::json;

// Losses to 1e-6 nats: far below the 0.02 the curves are compared at, and it halves the document of a
// run of thousands of steps.
double round6(double x) { return std::round(x * 1e6) / 1e6; }

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open {}", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string file_name(const std::string &path) { return std::filesystem::path(path).filename().string(); }

bool is_integer(const json &j) { return j.is_number_integer() || j.is_number_unsigned(); }

// The points of one curve as parallel arrays (compact for thousands of steps).
struct Curve {
  std::vector<int64_t> step, tokens;
  std::vector<double> loss;

  void drop_after(int64_t s) {
    size_t n = 0;
    while (n < step.size() && step[n] <= s) ++n;
    step.resize(n), tokens.resize(n), loss.resize(n);
  }
  void add(int64_t s, int64_t t, double l) { step.push_back(s), tokens.push_back(t), loss.push_back(round6(l)); }
  json to_json() const { return {{"step", step}, {"tokens", tokens}, {"loss", loss}}; }
};

json finish_run(const std::string &path, const std::string &format, const json &start, int64_t tokens_per_step,
                const Curve &train, const Curve &val, const json &val_tokens) {
  const std::string trainer = start.value("trainer", "flashbox");
  json run = {{"label", trainer == "pytorch" ? "PyTorch" : "flashbox"},
              {"trainer", trainer},
              {"file", file_name(path)},
              {"format", format},
              {"tokens_per_step", tokens_per_step},
              {"train", train.to_json()},
              {"val", val.to_json()}};
  // The recipe as the log states it; absent fields are simply not shown.
  for (const char *key : {"config", "parameters", "device", "attention", "batch", "seqlen", "lr", "warmup", "steps",
                          "seed", "torch", "dtype"})
    if (start.contains(key)) run[key] = start[key];
  json final = {{"step", train.step.back()}, {"tokens", train.tokens.back()}, {"loss", train.loss.back()},
                {"val_loss", nullptr},       {"val_step", nullptr},           {"val_tokens", nullptr}};
  if (!val.step.empty()) {
    final["val_loss"] = val.loss.back();
    final["val_step"] = val.step.back();
    final["val_tokens"] = val_tokens;
  }
  run["final"] = final;
  return run;
}

// `gpt2_train_torch.py train --json`: {"losses": [step 1, step 2, ...], "val_loss": after the last}.
json read_torch_result(const std::string &path, const json &j, int64_t fallback_tokens_per_step) {
  if (!j["losses"].is_array() || j["losses"].empty())
    throw std::runtime_error(fmt::format("{}: \"losses\" must be a non-empty array of numbers", path));
  int64_t tps = fallback_tokens_per_step;
  json start = {{"trainer", "pytorch"}};
  if (j.contains("total_batch") && is_integer(j["total_batch"])) tps = j["total_batch"].get<int64_t>();
  if (tps <= 0)
    throw std::runtime_error(fmt::format(
        "{}: the file does not say how many tokens a step takes (\"total_batch\"), and no flashbox log gives it",
        path));
  for (const char *key : {"config", "device", "batch", "seqlen", "lr", "torch"})
    if (j.contains(key)) start[key] = j[key];
  if (j.contains("schedule_steps")) start["steps"] = j["schedule_steps"];
  Curve train, val;
  int64_t step = 0;
  for (const auto &l : j["losses"]) {
    ++step;
    if (!l.is_number() || !std::isfinite(l.get<double>()))
      throw std::runtime_error(fmt::format("{}: losses[{}] is not a finite number", path, step - 1));
    train.add(step, step * tps, l.get<double>());
  }
  json val_tokens = nullptr;
  if (j.contains("val_loss") && j["val_loss"].is_number()) {
    val.add(step, step * tps, j["val_loss"].get<double>());
    if (j.contains("val_tokens")) val_tokens = j["val_tokens"];
  }
  json run = finish_run(path, "gpt2_train_torch.py --json", start, tps, train, val, val_tokens);
  if (!j.contains("total_batch") || !is_integer(j["total_batch"])) run["tokens_per_step_from"] = "the flashbox log";
  return run;
}

int64_t integer_field(const std::string &where, const json &j, const char *key) {
  if (!j.contains(key) || !is_integer(j[key]))
    throw std::runtime_error(fmt::format("{}: \"{}\" must be an integer", where, key));
  return j[key].get<int64_t>();
}

double finite_field(const std::string &where, const json &j, const char *key) {
  if (!j.contains(key) || !j[key].is_number() || !std::isfinite(j[key].get<double>()))
    throw std::runtime_error(fmt::format("{}: \"{}\" must be a finite number", where, key));
  return j[key].get<double>();
}

json read_event_log(const std::string &path, const std::string &text) {
  json start;  // the first start event: the run's recipe
  int64_t tps = 0, segment_start = 0, segment_tokens = 0;
  Curve train, val;
  json val_tokens = nullptr;
  std::istringstream lines(text);
  std::string line;
  int64_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, number);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error &e) {
      throw std::runtime_error(fmt::format("{}: not JSON ({})", where, e.what()));
    }
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string())
      throw std::runtime_error(fmt::format(
          "{}: no \"event\"; expected a `flashbox gpt2 train --log` or `gpt2_train_torch.py train --log` file", where));
    const std::string event = j["event"];
    if (event == "start") {
      tps = integer_field(where, j, "total_batch");
      if (tps <= 0) throw std::runtime_error(fmt::format("{}: \"total_batch\" must be positive", where));
      segment_start = j.contains("start_step") ? integer_field(where, j, "start_step") : 0;
      // A resumed run goes on from its checkpoint: what was logged after it is replaced.
      train.drop_after(segment_start);
      val.drop_after(segment_start);
      segment_tokens =
          !train.step.empty() && train.step.back() == segment_start ? train.tokens.back() : segment_start * tps;
      if (start.is_null()) start = j;
    } else if (event == "step") {
      if (tps == 0) throw std::runtime_error(fmt::format("{}: a step before the start event", where));
      const int64_t step = integer_field(where, j, "step");
      const double loss = finite_field(where, j, "loss");
      if (step <= segment_start || (!train.step.empty() && step <= train.step.back()))
        throw std::runtime_error(fmt::format("{}: step {} comes after step {}", where, step,
                                             train.step.empty() ? segment_start : train.step.back()));
      train.add(step, segment_tokens + (step - segment_start) * tps, loss);
    } else if (event == "val") {
      if (tps == 0) throw std::runtime_error(fmt::format("{}: a validation before the start event", where));
      const int64_t step = integer_field(where, j, "step");
      const double loss = finite_field(where, j, "val_loss");
      if (!val.step.empty() && step <= val.step.back())
        throw std::runtime_error(
            fmt::format("{}: validation at step {} comes after step {}", where, step, val.step.back()));
      val.add(step, segment_tokens + (step - segment_start) * tps, loss);
      val_tokens = j.value("val_tokens", json());
    }
    // "summary" and events added later are not part of the curves.
  }
  if (train.step.empty())
    throw std::runtime_error(fmt::format("{}: no step events (is it a `flashbox gpt2 train --log` file?)", path));
  return finish_run(path, "event log", start, tps, train, val, val_tokens);
}

void check_curve(const json &c, const std::string &where, bool allow_empty) {
  if (!c.is_object()) throw std::runtime_error(fmt::format("{}: must be an object", where));
  for (const char *key : {"step", "tokens", "loss"})
    if (!c.contains(key) || !c[key].is_array())
      throw std::runtime_error(fmt::format("{}.{}: must be an array", where, key));
  const size_t n = c["step"].size();
  if (c["tokens"].size() != n || c["loss"].size() != n)
    throw std::runtime_error(fmt::format("{}: step, tokens and loss must have the same length", where));
  if (n == 0 && !allow_empty) throw std::runtime_error(fmt::format("{}: no points", where));
  for (size_t i = 0; i < n; ++i)
    if (!is_integer(c["step"][i]) || !is_integer(c["tokens"][i]) || !c["loss"][i].is_number())
      throw std::runtime_error(
          fmt::format("{}: point {} is not (integer step, integer tokens, number loss)", where, i));
}

void check_run(const json &run, const std::string &where) {
  if (!run.is_object()) throw std::runtime_error(fmt::format("{}: must be an object", where));
  check_curve(run.value("train", json()), where + ".train", false);
  check_curve(run.value("val", json()), where + ".val", true);
  if (!run.contains("label") || !run["label"].is_string())
    throw std::runtime_error(fmt::format("{}.label: must be a string", where));
}

}  // namespace

json read_training_log(const std::string &path, int64_t fallback_tokens_per_step) {
  const std::string text = read_text(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw std::runtime_error(fmt::format("{} is empty: no training log", path));
  const json whole = json::parse(text, nullptr, false);
  if (!whole.is_discarded() && whole.is_object() && whole.contains("losses"))
    return read_torch_result(path, whole, fallback_tokens_per_step);
  return read_event_log(path, text);
}

std::vector<json> read_samples(const std::string &path) {
  const std::string text = read_text(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error &e) {
    throw std::runtime_error(fmt::format("{}: not JSON ({})", path, e.what()));
  }
  const json list = j.is_array() ? j : json::array({j});
  std::vector<json> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json &s = list[i];
    const std::string where = j.is_array() ? fmt::format("{}[{}]", path, i) : path;
    if (!s.is_object() || !s.contains("tokens") || !s["tokens"].is_array())
      throw std::runtime_error(fmt::format("{}: not a `flashbox gpt2 generate --json` output (no \"tokens\")", where));
    if (!s.contains("text") || !s["text"].is_string())
      throw std::runtime_error(
          fmt::format("{}: no \"text\" (gpt2 generate decodes it when it finds the GPT-2 tokenizer)", where));
    json sample = {{"prompt", s.value("prompt", "")},
                   {"text", s["text"]},
                   {"new_tokens", s["tokens"].size()},
                   {"temperature", s.contains("temperature") && s["temperature"].is_number()
                                       ? json(round6(s["temperature"].get<double>()))  // a float in generate
                                       : json()},
                   {"top_k", s.value("top_k", json())},
                   {"seed", s.value("seed", json())},
                   {"checkpoint", s.value("checkpoint", json())},
                   {"file", file_name(path)}};
    out.push_back(std::move(sample));
  }
  return out;
}

json curve_gap(const json &a, const json &b) {
  std::map<int64_t, double> other;
  for (size_t i = 0; i < b["step"].size(); ++i) other[b["step"][i].get<int64_t>()] = b["loss"][i].get<double>();
  int64_t points = 0, at = 0;
  double worst = -1.0;
  for (size_t i = 0; i < a["step"].size(); ++i) {
    const auto it = other.find(a["step"][i].get<int64_t>());
    if (it == other.end()) continue;
    ++points;
    const double d = std::abs(a["loss"][i].get<double>() - it->second);
    if (d > worst) worst = d, at = it->first;
  }
  if (points == 0) return nullptr;
  return {{"points", points}, {"max_abs", round6(worst)}, {"at_step", at}};
}

json build_training_run(const TrainingRunInputs &in) {
  json doc;
  doc["flashbox"] = read_training_log(in.log);
  const int64_t tps = doc["flashbox"]["tokens_per_step"];
  doc["reference"] = nullptr;
  doc["gap"] = nullptr;
  doc["reference_note"] = nullptr;
  if (in.reference_log.empty()) {
    doc["reference_note"] =
        "no PyTorch reference log was given (bench/gpt2_train_torch.py train --log writes one; it needs torch)";
  } else {
    json ref = read_training_log(in.reference_log, tps);
    if (ref["tokens_per_step"].get<int64_t>() != tps)
      doc["reference_note"] = fmt::format(
          "the reference ran {} tokens per step against flashbox's {}: its steps are other batches, so no gap is "
          "computed",
          ref["tokens_per_step"].get<int64_t>(), tps);
    else
      doc["gap"] = {{"train", curve_gap(doc["flashbox"]["train"], ref["train"])},
                    {"val", curve_gap(doc["flashbox"]["val"], ref["val"])}};
    doc["reference"] = std::move(ref);
  }
  std::vector<json> samples;
  for (const auto &path : in.samples)
    for (auto &s : read_samples(path)) samples.push_back(std::move(s));
  // By checkpoint (those that name none last), then by seed: the page reads them in training order.
  auto step_of = [](const json &s) {
    const json &c = s["checkpoint"];
    return c.is_object() && c.contains("step") && is_integer(c["step"]) ? c["step"].get<int64_t>() : INT64_MAX;
  };
  std::stable_sort(samples.begin(), samples.end(),
                   [&](const json &x, const json &y) { return step_of(x) < step_of(y); });
  doc["samples"] = samples;
  return doc;
}

void check_training_run(const json &doc, const std::string &source) {
  if (!doc.is_object()) throw std::runtime_error(fmt::format("{}: a training run is a JSON object", source));
  if (!doc.contains("flashbox"))
    throw std::runtime_error(fmt::format("{}: no \"flashbox\" run; is it a `flashbox gpt2 curves` file?", source));
  check_run(doc["flashbox"], source + ": flashbox");
  if (doc.contains("reference") && !doc["reference"].is_null()) check_run(doc["reference"], source + ": reference");
  if (doc.contains("samples") && !doc["samples"].is_array())
    throw std::runtime_error(fmt::format("{}: \"samples\" must be an array", source));
}

json training_step_from_file(const std::string &path) {
  json doc = read_json_file(path);
  check_training_run(doc, path);
  doc["measured"] = true;
  doc["source"] = path;
  return doc;
}

}  // namespace flashbox::report
