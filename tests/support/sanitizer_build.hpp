// Smaller work for the slowest CPU tests in the sanitizer build. With FLASHBOX_SANITIZE=ON,
// tests/CMakeLists.txt defines FLASHBOX_SANITIZER_BUILD=1 on every test program. That build looks for
// memory and undefined-behaviour errors, and small shapes reach them as well as large ones (partial
// 64-row tiles, T = 1, odd lengths, seqlen_q != seqlen_k, GQA, empty rows). So there the few tests
// that spend most of their time on long sequences or wide cross products run smaller versions of the
// same kinds of shape, through the helpers below. A normal build runs every shape: that build is the
// one that checks the numbers at length.
#pragma once

namespace flashbox::test {

#if defined(FLASHBOX_SANITIZER_BUILD) && FLASHBOX_SANITIZER_BUILD
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// `normal` in a normal build, `sanitized` in the sanitizer build (a length, a count, a flag).
template <class T>
constexpr T unless_sanitized(T normal, T sanitized) {
  return kSanitizerBuild ? sanitized : normal;
}

}  // namespace flashbox::test
