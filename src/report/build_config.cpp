#include "report/build_config.hpp"

namespace flashbox::report {

std::string built_cuda_archs() {
  // CMake passes the list with ',' (a ';' would split the definition); the schema writes CMake's ';'.
  std::string arch_list = FLASHBOX_CUDA_ARCHS_STRING;
  for (char &c : arch_list)
    if (c == ',') c = ';';
  return arch_list;
}

bool built_with_sm90a() {
#ifdef FLASHBOX_HAVE_SM90
  return true;
#else
  return false;
#endif
}

}  // namespace flashbox::report
