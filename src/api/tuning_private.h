/* The private tuning interface in C (api/tuning.hpp says what it is), exported by libflashbox only
 * when it is built with FLASHBOX_TUNING=ON (a benchmark build); not in include/, not public API, no
 * stability promised. Python reaches it through flashbox._lib.tuning_set (python/flashbox/_lib.py). */
#ifndef FLASHBOX_TUNING_PRIVATE_H
#define FLASHBOX_TUNING_PRIVATE_H
#include "flashbox/flashbox.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Sets one override by name (key and value as api/tuning.hpp's set_tuning lists; value NULL or "": the
 * policy's choice). 0 on success, else a FLASHBOX_ERR_* code and flashbox_last_error() says why. */
FLASHBOX_API int flashbox_private_tuning_set(const char *key, const char *value);
/* Every override back to the policy's choice. */
FLASHBOX_API void flashbox_private_tuning_reset(void);
#ifdef __cplusplus
}
#endif
#endif
