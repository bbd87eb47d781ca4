// One attention case with the extension's masks and score transforms (sliding window, softcap, ALiBi
// per head or per batch x head), shared by the GPU tests that check them against the fp64 reference:
// tests/cuda/ext_sm80_test.cpp (ExtCase adds varlen lengths and the sm80 forward pin) and
// tests/sm90/sm90_bwd_case.hpp (BwdCase adds the dtype). The derived cases stay aggregates, so their
// tables list a ModsCase's fields first, unbraced. What the two tests build from a case is here too:
// the ALiBi slopes, the reference's core::ScoreMods, the call's flashbox_attention_ext.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::test {

enum class Alibi { none, head, batch };

struct ModsCase {
  std::string name;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int causal;
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  Alibi alibi = Alibi::none;
};

// The case's ALiBi slopes, uniform in [0, 0.5): one per head, or per batch x head (none: empty).
inline std::vector<float> random_slopes(const ModsCase &c, std::mt19937_64 &rng) {
  std::vector<float> slopes;
  if (c.alibi == Alibi::none) return slopes;
  std::uniform_real_distribution<float> u(0.0f, 0.5f);
  slopes.resize(size_t(c.alibi == Alibi::batch ? c.batch * c.heads_q : c.heads_q));
  for (float &s : slopes) s = u(rng);
  return slopes;
}

// The fp64 reference's mods for the whole batch (host slopes; per batch: a row of heads_q per batch
// entry). Causal is the right window edge 0 there.
inline core::ScoreMods reference_mods(const ModsCase &c, const float *slopes) {
  core::ScoreMods m;
  m.window_left = c.window_left, m.window_right = c.causal ? 0 : c.window_right, m.softcap = c.softcap;
  if (c.alibi != Alibi::none) {
    m.alibi_slopes = slopes;
    if (c.alibi == Alibi::batch) m.alibi_batch_stride = c.heads_q;
  }
  return m;
}

// The call's extension (device slopes); causal gives the window no right edge (-1).
inline flashbox_attention_ext call_ext(const ModsCase &c, const void *device_slopes) {
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.window_left = c.window_left, e.window_right = c.causal ? -1 : c.window_right;
  e.softcap = c.softcap;
  if (c.alibi != Alibi::none) {
    e.alibi_slopes = static_cast<const float *>(device_slopes);
    e.alibi_batch_stride = c.alibi == Alibi::batch ? c.heads_q : 0;
  }
  return e;
}

}  // namespace flashbox::test
