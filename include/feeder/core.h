/*
 * feeder: a data loader for C training loops.
 *
 * feeder turns a dataset (an image folder, a list file, a packed file, tar
 * shards, or C callbacks) into a stream of collated batches. Worker processes
 * read files with io_uring, decode with libjpeg-turbo (PNG with libspng, WebP
 * with libwebp) and write every sample straight into its place in a batch
 * slot in shared memory; the calling thread borrows finished batches with
 * feeder_next() and gives them back with feeder_batch_release().
 *
 * Conventions (see docs/ARCHITECTURE.md):
 *  - Every function that can fail returns an int: 0 is success, a positive
 *    value is a status (FEEDER_DONE), a negative value an error. OS and io_uring
 *    failures pass through as -errno; the library's own codes are the
 *    FEEDER_E* values below, far below any errno. feeder_strerror() names any
 *    of them; feeder_loader_errmsg() gives the detailed text of the last failure.
 *  - Handles are opaque. Create functions hand the handle back through an
 *    out-parameter and change it only on success; destroy functions accept NULL.
 *  - The library never prints, never aborts and installs no signal handler in
 *    the caller's process (its forked workers catch SIGBUS around reads of a
 *    packed file's mapping, to report a file cut under the loader).
 *
 * This header includes no CUDA, libjpeg or liburing header.
 *
 * feeder/core.h: the library's conventions, version, results and error names, and the
 * counter-based random generator every other part uses.
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_CORE_H
#define FEEDER_PUBLIC_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FEEDER_STATIC_DEFINE)
#define FEEDER_API
#elif defined(__GNUC__)
#define FEEDER_API __attribute__((visibility("default")))
#else
#define FEEDER_API
#endif

#define FEEDER_VERSION_MAJOR 0
#define FEEDER_VERSION_MINOR 1
#define FEEDER_VERSION_PATCH 0
#define FEEDER_VERSION_NUMBER \
    (FEEDER_VERSION_MAJOR * 10000 + FEEDER_VERSION_MINOR * 100 + FEEDER_VERSION_PATCH)

/* The library's version as FEEDER_VERSION_NUMBER computes it, so a program can
 * compare the header it was built with against the library it runs with.
 * Thread-safe. */
FEEDER_API unsigned feeder_version(void);
/* The version as "MAJOR.MINOR.PATCH". Static storage. Thread-safe. */
FEEDER_API const char *feeder_version_string(void);

/* ------------------------------------------------------------------------ */
/* Results                                                                   */
/* ------------------------------------------------------------------------ */

/* Positive statuses. */
#define FEEDER_OK 0
/* feeder_next(): the epoch has no more batches. */
#define FEEDER_DONE 1

/* Library error codes: X(name, value, text). Values are never renumbered. */
#define FEEDER_ERRNO_MAP(X)                                                        \
    X(EINVAL, -30001, "invalid argument")                                          \
    X(ERANGE, -30002, "option value out of range")                                 \
    X(ESTATE, -30003, "call not allowed in the loader's current state")            \
    X(EDATASET, -30004, "dataset is empty or malformed")                           \
    X(EDECODE, -30005, "image could not be decoded")                               \
    X(ETOOBIG, -30006, "image exceeds the pixel limit")                            \
    X(EWORKER, -30007, "worker process died")                                      \
    X(ETIMEDOUT, -30008, "timed out waiting for a batch")                          \
    X(ECALLBACK, -30009, "user callback failed")                                   \
    X(EBUSY, -30010, "every batch slot is borrowed; release a batch first")        \
    X(EUNSUPPORTED, -30011, "not supported by this build or machine")              \
    X(EPROTO, -30012, "internal protocol error between loader and worker")         \
    X(EOVERFLOW, -30013, "size computation overflows")                             \
    X(ECUDA, -30014, "a CUDA call failed")                                         \
    X(EFORKED, -30015, "loader used in a process forked from its creator")         \
    X(ESTATEBLOB, -30020, "saved loader state is corrupt or from another version") \
    X(EMISMATCH, -30021, "saved loader state does not match this loader")         \
    X(ELIMIT, -30022, "a system limit is too low for this configuration")          \
    X(EPATH, -30023, "a list-file path escapes the dataset root")                  \
    X(EFORMAT, -30030, "not a valid feeder packed file")                           \
    X(ECHECKSUM, -30031, "checksum mismatch")                                      \
    X(ESHAPE, -30032, "loader options do not match the packed file's samples")     \
    X(EREMOTE, -30040, "a transfer from a remote server failed")

typedef enum feeder_errno {
#define FEEDER__ERRENUM(name, value, text) FEEDER_##name = value,
    FEEDER_ERRNO_MAP(FEEDER__ERRENUM)
#undef FEEDER__ERRENUM
} feeder_errno;

/* Static text for any result: 0, a positive status, a FEEDER_E* code or a
 * -errno value. Never NULL. Thread-safe. */
FEEDER_API const char *feeder_strerror(int rc);
/* The symbolic name of a result ("FEEDER_EDECODE", "ENOENT", "FEEDER_DONE"),
 * or "unknown". Static storage. Thread-safe. */
FEEDER_API const char *feeder_err_name(int rc);

/* ------------------------------------------------------------------------ */
/* Deterministic randomness                                                  */
/* ------------------------------------------------------------------------ */

/* The counter-based generator behind every random choice feeder makes
 * (Philox4x32-10). Returns 64 random bits that depend only on
 * (seed, epoch, index, counter): the shuffled order uses index = position,
 * transforms use index = sample index, and each draw for one sample takes the
 * next counter. A user dataset that draws through this function keeps the
 * loader's guarantee that the same seed gives the same batches whatever the
 * number of workers. Counters from 2^63 up are reserved for the samplers
 * (which share the loader's seed); datasets and transforms use small ones.
 * Pure function. Thread-safe. */
FEEDER_API uint64_t feeder_random(uint64_t seed, uint64_t epoch, uint64_t index,
                                  uint64_t counter);
/* feeder_random() mapped to a double in [0, 1) with 53 random bits. */
FEEDER_API double feeder_random_uniform(uint64_t seed, uint64_t epoch, uint64_t index,
                                        uint64_t counter);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_CORE_H */
