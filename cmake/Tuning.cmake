# FLASHBOX_TUNING=ON: a benchmark build. libflashbox then exports the private tuning interface
# (src/api/tuning_private.h: flashbox_private_tuning_set / _reset), through which benchmarks time one
# tile, schedule or threshold against another. Off by default: a default build has no way to change
# a kernel choice of the tile policies, and exports no such symbol.
option(FLASHBOX_TUNING "Export the private tuning interface (benchmark builds)" OFF)
if(FLASHBOX_TUNING)
  target_compile_definitions(flashbox_core PRIVATE FLASHBOX_TUNING=1)
endif()
