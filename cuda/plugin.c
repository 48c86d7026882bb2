/*
 * The GPU layer as libfeeder sees it: cuda/gpu.h implemented by forwarding
 * to the GPU plugin, libfeeder_cuda.so.0 (cuda/plugin.h). libfeeder links
 * no CUDA library; the plugin, and with it the CUDA runtime, is loaded the
 * first time a loader asks for a device (feeder__gpu_probe), never when
 * libfeeder itself is loaded. Where the plugin is:
 *
 *   1. $FEEDER_CUDA_PLUGIN, a path: that file and no other;
 *   2. next to the libfeeder in use (the directory dladdr names, which is
 *      the build tree's too);
 *   3. the build tree's directory, for the tests and benchmarks that link
 *      the library statically (FEEDER_PLUGIN_BUILD_DIR, internal builds only);
 *   4. the install libdir compiled in (FEEDER_PLUGIN_LIBDIR);
 *   5. dlopen's own search (LD_LIBRARY_PATH, ld.so.cache, ...).
 *
 * When none loads (no plugin, no CUDA runtime, a plugin of another build),
 * probe answers FEEDER_EUNSUPPORTED with dlerror's words and the loader
 * delivers host batches, as a build without CUDA always has. The outcome is
 * decided once per process.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "cuda/gpu.h"
#include "cuda/plugin.h"

#ifndef FEEDER_PLUGIN_LIBDIR
#define FEEDER_PLUGIN_LIBDIR ""
#endif

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const feeder__gpu_plugin *_Atomic table;
/* Why there is no table: the first loader error of a file that exists, else
 * the last one. */
static char load_why[512];
static int load_why_kept;

/* Set only in load(), before the table is published. */
static void note_failure(const char *msg, int file_exists)
{
    if (load_why_kept)
        return;
    snprintf(load_why, sizeof(load_why), "%s", msg);
    load_why_kept = file_exists;
}

static int table_fits(const feeder__gpu_plugin *t, const char *path)
{
    if (t->abi == FEEDER__PLUGIN_ABI && t->version == FEEDER_VERSION_NUMBER &&
        t->size == sizeof(*t) && t->config_size == sizeof(feeder__gpu_config) &&
        t->stats_size == sizeof(feeder_stats) && t->batch_size == sizeof(feeder_batch))
        return 1;
    char msg[sizeof(load_why)];
    snprintf(msg, sizeof(msg),
             "%s: built for feeder %u (plugin ABI %u), this libfeeder is %u (ABI %u)", path,
             t->version, t->abi, (unsigned)FEEDER_VERSION_NUMBER, (unsigned)FEEDER__PLUGIN_ABI);
    note_failure(msg, 1);
    return 0;
}

/* Open one candidate; 1 when its table is taken. A path without '/' goes to
 * dlopen's own search. */
static int try_open(const char *path)
{
    int exists = strchr(path, '/') ? access(path, F_OK) == 0 : 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* A plugin that is there but cannot load names what it lacks
         * ("libcudart.so.13: cannot open ..."), not itself: say which. */
        const char *e = dlerror();
        char msg[sizeof(load_why)];
        if (!e)
            e = "dlopen failed";
        if (exists && !strstr(e, path))
            snprintf(msg, sizeof(msg), "%s: %s", path, e);
        else
            snprintf(msg, sizeof(msg), "%s", e);
        note_failure(msg, exists);
        return 0;
    }
    /* POSIX guarantees a function's address survives the trip through void *. */
    const feeder__gpu_plugin *(*get)(void) =
        (const feeder__gpu_plugin *(*)(void))dlsym(h, FEEDER__PLUGIN_SYMBOL);
    if (!get) {
        char msg[sizeof(load_why)];
        snprintf(msg, sizeof(msg), "%s: no %s in it", path, FEEDER__PLUGIN_SYMBOL);
        note_failure(msg, 1);
        dlclose(h);
        return 0;
    }
    const feeder__gpu_plugin *t = get();
    if (!t || !table_fits(t, path)) {
        dlclose(h);
        return 0;
    }
    /* Never closed: the CUDA runtime does not survive being unloaded. */
    atomic_store_explicit(&table, t, memory_order_release);
    return 1;
}

static int try_dir(const char *dir)
{
    if (!dir || !*dir)
        return 0;
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, FEEDER__PLUGIN_FILE);
    return n > 0 && (size_t)n < sizeof(path) && try_open(path);
}

/* The directory of the object this code was linked into: libfeeder.so, or
 * the program that holds libfeeder.a. */
static int try_own_dir(void)
{
    static const char anchor = 0;
    Dl_info info;
    if (!dladdr(&anchor, &info) || !info.dli_fname || !strchr(info.dli_fname, '/'))
        return 0;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    *strrchr(dir, '/') = '\0';
    return try_dir(dir[0] ? dir : "/");
}

static void load(void)
{
    const char *env = getenv("FEEDER_CUDA_PLUGIN");
    if (env && *env) {
        try_open(env);
        return;
    }
    if (try_own_dir())
        return;
#ifdef FEEDER_PLUGIN_BUILD_DIR
    if (try_dir(FEEDER_PLUGIN_BUILD_DIR))
        return;
#endif
    if (try_dir(FEEDER_PLUGIN_LIBDIR))
        return;
    try_open(FEEDER__PLUGIN_FILE);
}

/* The table once the plugin is loaded, else NULL. Every call that takes a
 * layer or a device batch comes after a probe that loaded it. */
static const feeder__gpu_plugin *plugin(void)
{
    return atomic_load_explicit(&table, memory_order_acquire);
}

int feeder__gpu_probe(int device, char *why, size_t whylen)
{
    pthread_once(&load_once, load);
    const feeder__gpu_plugin *t = plugin();
    if (t)
        return t->probe(device, why, whylen);
#ifdef FEEDER_PLUGIN_BUILT
    feeder__fmt(why, whylen, "device = %d, but feeder's GPU plugin did not load (%s): host batches",
                device, load_why);
#else
    feeder__fmt(why, whylen,
                "device = %d, but feeder was built without CUDA and no GPU plugin loaded (%s): "
                "host batches",
                device, load_why);
#endif
    return FEEDER_EUNSUPPORTED;
}

int feeder__gpu_start(const feeder__gpu_config *cfg, feeder__gpu **out, char *why,
                      size_t whylen)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->start(cfg, out, why, whylen) : feeder__gpu_probe(cfg->device, why, whylen);
}

void feeder__gpu_finish_start(feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    if (t)
        t->finish_start(gpu);
}

int feeder__gpu_next(feeder__gpu *gpu, feeder_batch **out)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->next(gpu, out) : FEEDER_EUNSUPPORTED;
}

int feeder__gpu_release(feeder_batch *b, void *stream)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->release(b, stream) : FEEDER_EINVAL;
}

feeder__gpu *feeder__gpu_of(const feeder_batch *b)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->of(b) : NULL;
}

void *feeder__gpu_host(const feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->host(gpu) : NULL;
}

const char *feeder__gpu_errmsg(const feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->errmsg(gpu) : "";
}

void feeder__gpu_drop(feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    if (t)
        t->drop(gpu);
}

const char *feeder__gpu_describe(const feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->describe(gpu) : "";
}

void feeder__gpu_stats(const feeder__gpu *gpu, feeder_stats *st)
{
    const feeder__gpu_plugin *t = plugin();
    if (t)
        t->stats(gpu, st);
}

void feeder__gpu_destroy(feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    if (t)
        t->destroy(gpu);
}

int feeder__gpu_pending(const feeder__gpu *gpu, uint64_t epoch, uint64_t *out, int cap, int *open)
{
    const feeder__gpu_plugin *t = plugin();
    if (t)
        return t->pending(gpu, epoch, out, cap, open);
    *open = 0;
    return 0;
}

int feeder__gpu_decodes(const feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->decodes(gpu) : 0;
}

const char *feeder__gpu_decode_why(const feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->decode_why(gpu) : "no GPU plugin";
}

int feeder__gpu_packed_direct(const feeder__gpu *gpu)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->packed_direct(gpu) : 0;
}

int feeder__gpu_owns(const feeder_batch *b)
{
    const feeder__gpu_plugin *t = plugin();
    return t ? t->owns(b) : 0;
}
