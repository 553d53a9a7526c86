/* no_entry.c — a shared library with a backend plugin's file name but no
 * tessera entry points (for the registry tests). */
#include "tessera/backend.h"

TSR_BACKEND_EXPORT int not_a_tessera_backend(void) { return 42; }
