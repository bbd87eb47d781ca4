// The experiment of SPEC step 5: one model, one token stream, the mean next-token cross-entropy with
// each attention implementation, timed. The losses must agree (same mathematics, different
// accumulation orders); the table shows each one's difference from naive's.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flashbox/flashbox.h"
#include "gpt2/model/weights.hpp"

namespace flashbox::gpt2 {

struct EvalOptions {
  flashbox_device device = FLASHBOX_CPU;
  std::vector<flashbox_impl> impls;  // empty: every implementation available on the device
  int seqlen = 1024;
  int batch = 0;      // windows evaluated at once; 0: 1 on the CPU, 16 on CUDA
  int64_t count = 0;  // tokens to use from the stream (0: all); whole windows only
  std::function<void(const std::string &, int, int)> progress;  // (what, done, total)
};

struct EvalRow {
  std::string impl, device;
  bool ok = false;
  std::string error;  // why the implementation did not run (ok == false)
  double loss = 0.0;
  std::optional<double> diff_from_naive;
  double seconds = 0.0;
  double tokens_per_second = 0.0;
};

struct EvalResult {
  std::string config, device;
  int64_t tokens = 0;  // tokens evaluated: windows * seqlen
  int64_t windows = 0;
  int seqlen = 0, batch = 0;
  std::vector<EvalRow> rows;
};

// Implementations that exist for a device, naive first: CPU naive and blocked; CUDA naive and flash.
std::vector<flashbox_impl> impls_for(flashbox_device device);

// Throws Gpt2Error when the tokens do not fill one window, the window exceeds the model's context,
// or a token id is outside the vocabulary. A failing implementation gives a row with ok == false.
EvalResult evaluate(const Gpt2Weights &w, const std::vector<int32_t> &tokens, const EvalOptions &options);

// docs/report-schema.md, steps.gpt2.
nlohmann::json to_json(const EvalResult &r, const std::string &weights_label);

}  // namespace flashbox::gpt2
