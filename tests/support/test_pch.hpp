// The precompiled header of the GoogleTest programs in clang builds (tests/CMakeLists.txt says why
// only there): GoogleTest and the standard headers that most test sources include, directly or through
// the library's headers. A source still includes what it uses: with g++, or with
// -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON, each one is compiled without this file.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
