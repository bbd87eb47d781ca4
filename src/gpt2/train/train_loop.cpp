#include "gpt2/train/train_loop.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/error.hpp"
#include "gpt2/tokens/token_files.hpp"

namespace flashbox::gpt2 {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kStateMagic = 20261201;
constexpr double kH200DenseBf16 = 989.4e12;  // FLOP/s, the datasheet's dense bf16 peak

// Model FLOPs per token of a training step (forward + backward): 6 N for the parameters' products
// plus 6 L T C for attention's two causal products (half of 12 L T C; PaLM's appendix B).
double flops_per_token(const Gpt2Config &c, int T) {
  return 6.0 * double(parameter_count(c)) + 6.0 * c.n_layer * double(T) * c.n_embd;
}

struct Batcher {
  const std::vector<int32_t> &tokens;
  int64_t bt;
  std::vector<int32_t> in, tg;
  Batcher(const std::vector<int32_t> &t, int64_t bt_) : tokens(t), bt(bt_), in(size_t(bt_)), tg(size_t(bt_)) {}
  int64_t count() const { return (int64_t(tokens.size()) - 1) / bt; }
  void load(int64_t k) {
    const int64_t pos = (k % count()) * bt;
    std::copy(tokens.begin() + pos, tokens.begin() + pos + bt, in.begin());
    std::copy(tokens.begin() + pos + 1, tokens.begin() + pos + bt + 1, tg.begin());
  }
};

std::string step_name(const std::string &dir, const char *what, int64_t step, const char *ext) {
  return (std::filesystem::path(dir) / fmt::format("{}_{:06d}{}", what, step, ext)).string();
}

// What a checkpoint is, for whoever shows it later (`flashbox report --weights`): model_N.json beside
// model_N.bin. `val` is the validation at this step (null when none ran).
nlohmann::json provenance(const TrainOptions &o, const Gpt2Config &c, int64_t step, int64_t tokens_per_step,
                          size_t train_tokens, const nlohmann::json &val) {
  return {{"trained_by", "flashbox gpt2 train"},
          {"config", c.name},
          {"parameters", parameter_count(c)},
          {"data", o.data_label.empty() ? std::filesystem::path(o.train_tokens).filename().string() : o.data_label},
          {"train_file_tokens", train_tokens},
          {"steps", step},
          {"tokens", step * tokens_per_step},
          {"tokens_per_step", tokens_per_step},
          {"seqlen", o.shape.seqlen},
          {"lr", o.lr},
          {"warmup", o.warmup},
          {"seed", o.seed},
          {"device", o.device == FLASHBOX_CUDA ? "cuda" : "cpu"},
          {"validation", val}};
}

void save_checkpoint(Gpt2Trainer &t, const Gpt2Config &c, const std::string &dir, int64_t step,
                     const nlohmann::json &info) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(step_name(dir, "model", step, ".json"), std::ios::trunc);
    out << info.dump(1) << "\n";
    if (!out) throw Gpt2Error(fmt::format("cannot write '{}'", step_name(dir, "model", step, ".json")));
  }
  Gpt2Weights w(c), m(c), v(c);
  t.get_params(w);
  t.get_moments(m, v);
  write_llmc_checkpoint(w, step_name(dir, "model", step, ".bin"), false);
  write_hf_safetensors(w, step_name(dir, "model", step, ".safetensors"), "F32");
  write_optimizer_state(step_name(dir, "state", step, ".bin"), step, m, v);
}

}  // namespace

float learning_rate(const TrainOptions &o, int64_t step) {
  if (o.warmup > 0 && step <= o.warmup) return o.lr * float(step) / float(o.warmup);
  const float lr_min = o.lr * o.min_lr_fraction;
  if (o.steps <= o.warmup) return o.lr;
  const double ratio = double(step - o.warmup) / double(o.steps - o.warmup);
  return lr_min + float(0.5 * (1.0 + std::cos(M_PI * std::min(1.0, ratio)))) * (o.lr - lr_min);
}

void write_optimizer_state(const std::string &path, int64_t step, const Gpt2Weights &m, const Gpt2Weights &v) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Gpt2Error(fmt::format("cannot write '{}'", tmp));
    const int64_t header[4] = {kStateMagic, 1, step, m.size()};
    out.write(reinterpret_cast<const char *>(header), sizeof header);
    out.write(reinterpret_cast<const char *>(m.data()), std::streamsize(m.size() * 4));
    out.write(reinterpret_cast<const char *>(v.data()), std::streamsize(v.size() * 4));
    if (!out.flush()) throw Gpt2Error(fmt::format("writing '{}' failed (disk full?)", tmp));
  }
  std::filesystem::rename(tmp, path);
}

int64_t read_optimizer_state(const std::string &path, Gpt2Weights &m, Gpt2Weights &v) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open optimizer state '{}'", path));
  int64_t header[4] = {};
  in.read(reinterpret_cast<char *>(header), sizeof header);
  if (!in || header[0] != kStateMagic || header[1] != 1)
    throw Gpt2Error(
        fmt::format("'{}' is not a flashbox optimizer state (magic {}, version {})", path, header[0], header[1]));
  if (header[3] != m.size())
    throw Gpt2Error(fmt::format("'{}' holds {} parameters, the model has {}", path, header[3], m.size()));
  in.read(reinterpret_cast<char *>(m.data()), std::streamsize(m.size() * 4));
  in.read(reinterpret_cast<char *>(v.data()), std::streamsize(v.size() * 4));
  if (!in) throw Gpt2Error(fmt::format("'{}' is truncated", path));
  return header[2];
}

TrainSummary run_training(const TrainOptions &o, const std::function<void(const std::string &)> &print) {
  const int64_t bt = int64_t(o.shape.batch) * o.shape.seqlen;
  if (o.steps <= 0) throw Gpt2Error("--steps must be positive");
  const int64_t total = o.total_batch > 0 ? o.total_batch : bt;
  if (total % bt != 0)
    throw Gpt2Error(fmt::format("--total-batch {} is not a multiple of batch x seqlen = {}", total, bt));
  const int64_t accum = total / bt;
  if (o.train_tokens.empty()) throw Gpt2Error("--train FILE (a token shard) is required");
  const std::vector<int32_t> train = read_token_file(o.train_tokens);
  if (int64_t(train.size()) < bt + 1)
    throw Gpt2Error(
        fmt::format("'{}' holds {} tokens, fewer than one batch of {} + 1", o.train_tokens, train.size(), bt));
  std::vector<int32_t> val;
  if (!o.val_tokens.empty()) val = read_token_file(o.val_tokens);

  // Weights: a resumed run's checkpoint, a given file, or seeded.
  int64_t start = 0;
  std::optional<Gpt2Weights> w;
  std::string resume_model;
  if (!o.resume.empty()) {
    resume_model = o.resume;
    const auto pos = resume_model.rfind("state_");
    if (pos == std::string::npos) throw Gpt2Error("--resume expects a state_NNNNNN.bin written by flashbox gpt2 train");
    resume_model.replace(pos, 6, "model_");
    w.emplace(load_checkpoint(resume_model));
  } else if (!o.init_weights.empty()) {
    w.emplace(load_checkpoint(o.init_weights));
  } else {
    w.emplace(config_by_name(o.config));
    init_gpt2_weights(*w, o.seed);
  }
  const Gpt2Config c = w->config();
  for (const std::vector<int32_t> *tokens : {&train, static_cast<const std::vector<int32_t> *>(&val)})
    for (int32_t id : *tokens)
      if (id >= c.vocab_size)
        throw Gpt2Error(fmt::format("token id {} is outside the model's vocabulary of {}", id, c.vocab_size));
  if (!o.save_init.empty()) write_llmc_checkpoint(*w, o.save_init, false);

  std::unique_ptr<Gpt2Trainer> t =
      o.device == FLASHBOX_CUDA ? make_cuda_trainer(*w, o.shape) : make_cpu_trainer(*w, o.shape);
  if (!o.resume.empty()) {
    Gpt2Weights m(c), v(c);
    start = read_optimizer_state(o.resume, m, v);
    t->set_moments(m, v);
  }
  std::ofstream log;
  if (!o.log_json.empty()) {
    log.open(o.log_json, start > 0 ? std::ios::app : std::ios::trunc);
    if (!log) throw Gpt2Error(fmt::format("cannot write '{}'", o.log_json));
  }
  auto emit = [&](const nlohmann::json &j) {
    if (log) log << j.dump() << "\n" << std::flush;
  };
  emit({{"event", "start"},
        {"config", c.name},
        {"layers", c.n_layer},
        {"heads", c.n_head},
        {"channels", c.n_embd},
        {"parameters", parameter_count(c)},
        {"device", t->device_name()},
        {"attention", flashbox_impl_name(o.shape.attention)},
        {"batch", o.shape.batch},
        {"seqlen", o.shape.seqlen},
        {"total_batch", total},
        {"accum", accum},
        {"steps", o.steps},
        {"lr", o.lr},
        {"warmup", o.warmup},
        {"min_lr_fraction", o.min_lr_fraction},
        {"weight_decay", o.adam.weight_decay},
        {"grad_clip", o.grad_clip},
        {"seed", o.seed},
        {"train", o.train_tokens},
        {"train_tokens", train.size()},
        {"val", o.val_tokens},
        {"val_tokens", val.size()},
        {"start_step", start}});

  Batcher tb(train, bt);
  const double fpt = flops_per_token(c, o.shape.seqlen);
  nlohmann::json last_val = nullptr;  // the latest validation: {step, loss, tokens}
  auto validate = [&](int64_t step) {
    if (val.size() < size_t(bt) + 1) return -1.0;
    Batcher vb(val, bt);
    const int64_t n = std::max<int64_t>(1, std::min(vb.count(), o.val_max_tokens / bt));
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      vb.load(k);
      sum += t->eval_loss(vb.in.data(), vb.tg.data());
    }
    const double loss = sum / double(n);
    emit({{"event", "val"}, {"step", step}, {"val_loss", loss}, {"val_tokens", n * bt}});
    last_val = {{"step", step}, {"loss", loss}, {"tokens", n * bt}, {"file", o.val_tokens}};
    if (!o.quiet) print(fmt::format("step {:6d} | val loss {:.4f} ({} tokens)\n", step, loss, n * bt));
    return loss;
  };

  TrainSummary s;
  double timed_seconds = 0.0;
  int64_t timed_tokens = 0;
  // With a trainer that queues its steps (CUDA), step k's loss and norm are read once step k + 1's
  // micro-batches are queued, so a step's time is the interval between two such reads; validation,
  // checkpoints and the last step read at once.
  Clock::time_point ready = Clock::now();  // when the previous step's numbers arrived
  auto report = [&](int64_t step, float lr) {
    const StepStats st = t->step_stats();
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - ready).count();
    ready = now;
    const double loss = st.loss, norm = st.grad_norm;
    if (!std::isfinite(loss)) throw Gpt2Error(fmt::format("step {}: the loss is not finite", step));
    const double tps = double(total) / dt;
    const double mfu = o.device == FLASHBOX_CUDA ? tps * fpt / kH200DenseBf16 : 0.0;
    if (step > start + 1) {
      timed_seconds += dt;
      timed_tokens += total;
    }
    if (s.steps == 0) s.first_loss = loss;
    s.last_loss = loss;
    ++s.steps;
    s.tokens += total;
    emit({{"event", "step"},
          {"step", step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", norm},
          {"ms", dt * 1e3},
          {"tokens_per_second", tps},
          {"mfu", mfu}});
    if (!o.quiet)
      print(fmt::format("step {:6d}/{} | loss {:.6f} | lr {:.3e} | norm {:7.4f} | {:8.0f} tok/s | MFU {} | {:.1f} ms\n",
                        step, o.steps, loss, lr, norm, tps,
                        o.device == FLASHBOX_CUDA ? fmt::format("{:5.1f}%", mfu * 100.0) : std::string("-"), dt * 1e3));
  };
  int64_t pending = 0;  // the step whose numbers are not read yet (0: none)
  float pending_lr = 0.0f;
  for (int64_t step = start + 1; step <= o.steps; ++step) {
    t->zero_grad();
    for (int64_t j = 0; j < accum; ++j) {
      tb.load((step - 1) * accum + j);
      t->forward_backward(tb.in.data(), tb.tg.data(), 1.0f / float(accum));
    }
    if (pending > 0) report(pending, pending_lr), pending = 0;
    if (!o.dump_grads.empty() && step == start + 1) {
      Gpt2Weights g(c);
      t->get_grads(g);
      write_llmc_checkpoint(g, o.dump_grads, false);
    }
    const float lr = learning_rate(o, step);
    t->finish_step(o.adam, lr, o.grad_clip, step);
    const bool val_now = o.val_every > 0 && step % o.val_every == 0 && step != o.steps;
    const bool save_now = !o.out_dir.empty() && o.checkpoint_every > 0 && step % o.checkpoint_every == 0 &&
                          step != o.steps;
    if (t->queues_steps() && !val_now && !save_now && step != o.steps) {
      pending = step, pending_lr = lr;
      continue;
    }
    report(step, lr);
    if (val_now) validate(step);
    if (save_now)
      save_checkpoint(*t, c, o.out_dir, step,
                      provenance(o, c, step, total, train.size(),
                                 last_val.is_object() && last_val["step"] == step ? last_val : nlohmann::json()));
    ready = Clock::now();  // the next step's time leaves validation and the checkpoint out
  }
  s.val_loss = validate(o.steps);
  if (!o.out_dir.empty())
    save_checkpoint(*t, c, o.out_dir, o.steps, provenance(o, c, o.steps, total, train.size(), last_val));
  s.tokens_per_second = timed_seconds > 0 ? double(timed_tokens) / timed_seconds : 0.0;
  s.mfu = o.device == FLASHBOX_CUDA ? s.tokens_per_second * fpt / kH200DenseBf16 : 0.0;
  emit({{"event", "summary"},
        {"steps", s.steps},
        {"tokens", s.tokens},
        {"first_loss", s.first_loss},
        {"last_loss", s.last_loss},
        {"val_loss", s.val_loss},
        {"tokens_per_second", s.tokens_per_second},
        {"mfu", s.mfu}});
  return s;
}

}  // namespace flashbox::gpt2
