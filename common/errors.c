/* Result codes: one X-macro (include/feeder.h) makes the enum and the text. */
#include <errno.h>
#include <string.h>

#include "feeder.h"

unsigned feeder_version(void) { return FEEDER_VERSION_NUMBER; }

#define FEEDER__STR2(x) #x
#define FEEDER__STR(x) FEEDER__STR2(x)
const char *feeder_version_string(void)
{
    return FEEDER__STR(FEEDER_VERSION_MAJOR) "." FEEDER__STR(FEEDER_VERSION_MINOR) "." FEEDER__STR(
        FEEDER_VERSION_PATCH);
}

const char *feeder_strerror(int rc)
{
    switch (rc) {
    case FEEDER_OK:
        return "success";
    case FEEDER_DONE:
        return "end of epoch";
#define FEEDER__ERRTEXT(name, value, text) \
    case value:                            \
        return text;
        FEEDER_ERRNO_MAP(FEEDER__ERRTEXT)
#undef FEEDER__ERRTEXT
    }
    if (rc < 0 && rc > -4096)
        return strerror(-rc); /* glibc's table is static and thread-safe */
    return "unknown result";
}

const char *feeder_err_name(int rc)
{
    switch (rc) {
    case FEEDER_OK:
        return "FEEDER_OK";
    case FEEDER_DONE:
        return "FEEDER_DONE";
#define FEEDER__ERRNAME(name, value, text) \
    case value:                            \
        return "FEEDER_" #name;
        FEEDER_ERRNO_MAP(FEEDER__ERRNAME)
#undef FEEDER__ERRNAME
    }
    if (rc < 0 && rc > -4096) {
        const char *n = strerrorname_np(-rc);
        return n ? n : "unknown";
    }
    return "unknown";
}
