// The environment switches of the library's A/B experiments (FLASHBOX_SM90_BWD_*: bench/NOTES.md,
// the sm90 backward), parsed one way for both their check and their readers. api/options.cpp checks
// every value once per process and fails the calls with a message naming a value these parsers do
// not accept; the readers (the sm90 backward's plan, some at every call so that
// bench/sm90_bwd_variants.py --env can time several settings in one process) take a value only when
// it parses, and their default otherwise. Before this header each reader had its own parse, which
// could accept what the check refused ("1x" forced the d64 order) or the reverse.
// Host code only, std only (included by nvcc-compiled launchers too).
#pragma once
#include <cstdlib>
#include <cstring>

namespace flashbox::env {

enum class State { unset, ok, bad };

// A decimal integer in [lo, 2^20], the whole string.
inline bool parse_int(const char *s, int lo, int &out) {
  char *end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > (1 << 20)) return false;
  out = int(v);
  return true;
}

// "0" or "1".
struct Switch01 {
  State state;
  bool on;  // the value, when state == ok
};
inline Switch01 switch_01(const char *name) {
  const char *v = std::getenv(name);
  if (v == nullptr) return {State::unset, false};
  if (std::strcmp(v, "0") == 0) return {State::ok, false};
  if (std::strcmp(v, "1") == 0) return {State::ok, true};
  return {State::bad, false};
}
// On unless the switch is set to "0" (a bad value reads as unset: the call is refused anyway).
inline bool switch_on_by_default(const char *name) {
  const Switch01 s = switch_01(name);
  return !(s.state == State::ok && !s.on);
}

// An integer >= lo (parse_int).
struct IntSwitch {
  State state;
  int value;  // when state == ok
};
inline IntSwitch int_at_least(const char *name, int lo) {
  const char *v = std::getenv(name);
  if (v == nullptr) return {State::unset, 0};
  int n = 0;
  return parse_int(v, lo, n) ? IntSwitch{State::ok, n} : IntSwitch{State::bad, 0};
}

// Exactly `word`.
inline State word(const char *name, const char *want) {
  const char *v = std::getenv(name);
  if (v == nullptr) return State::unset;
  return std::strcmp(v, want) == 0 ? State::ok : State::bad;
}

}  // namespace flashbox::env
