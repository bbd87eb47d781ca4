// A C caller may pass any int where the API declares one of its enums. A value outside a C++ enum's
// range, loaded as that enum, is undefined behaviour (UBSan reports it), so validation reads the
// enums as their bytes, taking them by reference so that nothing loads them before.
#pragma once
#include <cstring>

namespace flashbox::core {

template <class Enum>
int enum_bits(const Enum &e) {
  static_assert(sizeof(Enum) == sizeof(int), "the C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace flashbox::core
