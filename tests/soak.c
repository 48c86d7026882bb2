/*
 * soak: run loaders for a while under faults and check that nothing is lost.
 *
 *   soak [--seconds S | --minutes M] [--workers W] [--images N] [--data DIR]
 *        [--kill-every K] [--corrupt-every C] [--recreate-every R] [--stall-every S]
 *        [--seed X]
 *
 * A folder of JPEGs is made (or DIR's JPEGs copied) in a temporary folder.
 * The reference is computed first on the clean copy: for each of 4 epochs,
 * the order and every sample's hash. Then loaders (train pipeline, shuffle,
 * skip policy, MAX_RESTARTS 1000) run epoch after epoch while, every few
 * batches:
 *   - a random worker is SIGKILLed (the loader restarts it);
 *   - a random file is replaced by bytes that are not a JPEG, and the last
 *     one restored (atomically, by rename);
 *   - the loader's state is saved, the loader destroyed with batches in
 *     flight, and a new one (random num_workers 0..W) resumes from the state;
 *     every other new loader is made and started by a short-lived thread that
 *     ends at once (its workers must outlive it: PR_SET_PDEATHSIG is bound to
 *     the forking thread), and its workers are checked alive afterwards;
 *   - a random worker is stopped (SIGSTOP): the loader, with TIMEOUT_MS 1000
 *     and MAX_RESTARTS, must kill it, start another and redo its parts.
 * Every delivered batch is checked: a batch with no skipped sample must hash
 * to the reference batch; in one with skips, every sample must be its
 * reference sample, or, where the original was corrupted at the time,
 * another sample of its class (the skip policy's rule, include/feeder.h). Every position of every epoch must be
 * delivered exactly once, across kills and recreations. RSS, open
 * descriptors and /dev/shm entries are printed at start and end and must not
 * grow (RSS by at most 16 MiB; under ASan set quarantine_size_mb=0, or its
 * quarantine alone grows RSS by design).
 * After the last loader no child process may be left (leaked or zombie).
 * Exit 0 when every check held.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "feeder.h"

#define EPOCHS 4
#define BATCH 8
#define H 48
#define W 64

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "soak: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static long count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct {
    long rss, fds, shm, refs;
} reading;

/* Lines of this process's maps and fds that name /dev/shm: the slots are a
 * memfd, so there must be none. (/dev/shm itself is shared with every other
 * process on the machine, so its entry count is printed, not compared.) */
static long shm_refs(void)
{
    long n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4300];
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, "/dev/shm/") != NULL;
    if (f)
        fclose(f);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[300], t[4200];
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, t, sizeof(t) - 1);
        if (k > 0) {
            t[k] = 0;
            n += strncmp(t, "/dev/shm/", 9) == 0;
        }
    }
    if (d)
        closedir(d);
    return n;
}

static reading measure(void)
{
    return (reading){rss_kib(), count_dir("/proc/self/fd") - 1, count_dir("/dev/shm"), shm_refs()};
}

/* TIMEOUT_MS of every loader: short when workers are stopped on purpose. */
static int64_t timeout_ms = 60000;

/* Every other loader keeps its workers between epochs (and begins the next
 * epoch early); persistent_made says what the last one made does. */
static int loaders_made, persistent_made;

static feeder_loader *make_loader(feeder_dataset *ds, int workers, uint64_t seed)
{
    feeder_loader *ld;
    persistent_made = loaders_made++ % 2 == 0;
    if (feeder_loader_create(ds, NULL, &ld))
        die("feeder_loader_create failed");
    feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, BATCH);
    feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers);
    feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1);
    feeder_loader_set(ld, FEEDER_OPT_SEED, (int64_t)seed);
    feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN);
    feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_SKIP);
    feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 1000);
    feeder_loader_set(ld, FEEDER_OPT_HEIGHT, H);
    feeder_loader_set(ld, FEEDER_OPT_WIDTH, W);
    feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, timeout_ms);
    feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, persistent_made);
    return ld;
}

/* The reference: per epoch, the order and each sample's hash by index. */
typedef struct {
    uint64_t n, nbatches;
    uint64_t *order[EPOCHS];
    uint64_t *sample[EPOCHS];
} ref;

static uint64_t sample_hash(const feeder_batch *b, uint32_t i)
{
    uint64_t h = bu_hash64(0, b->data + (size_t)i * b->sample_bytes, b->sample_bytes);
    h = bu_hash64(h, &b->labels[i], sizeof(int64_t));
    return bu_hash64(h, &b->indices[i], sizeof(uint64_t));
}

static void make_reference(feeder_dataset *ds, uint64_t seed, ref *r)
{
    r->n = feeder_dataset_size(ds);
    r->nbatches = (r->n + BATCH - 1) / BATCH;
    feeder_loader *ld = make_loader(ds, 2, seed);
    feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_FAIL);
    for (int e = 0; e < EPOCHS; e++) {
        r->order[e] = calloc(r->n, sizeof(uint64_t));
        r->sample[e] = calloc(r->n, sizeof(uint64_t));
        feeder_batch *b;
        int rc;
        uint64_t pos = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            for (uint32_t i = 0; i < b->count; i++, pos++) {
                r->order[e][pos] = b->indices[i];
                r->sample[e][b->indices[i]] = sample_hash(b, i);
            }
            feeder_batch_release(b, NULL);
        }
        if (rc != FEEDER_DONE || pos != r->n)
            die("reference epoch %d: %s: %s", e, feeder_strerror(rc), feeder_loader_errmsg(ld));
    }
    feeder_loader_destroy(ld);
}

/* ---- files ---- */

typedef struct {
    char **paths;
    uint8_t **orig;
    size_t *len;
    uint64_t n;
    int64_t corrupted; /* index now corrupted, or -1 */
    uint64_t *bad_since; /* per index: how many corruptions touched it this epoch */
    uint64_t *bad_before; /* the same for the epoch before: a persistent loader reads the
                             next epoch's first batches while this one ends */
    char tmp[4200];
} files;

static void put_file(files *f, uint64_t i, const void *data, size_t len)
{
    snprintf(f->tmp, sizeof(f->tmp), "%s.soak-tmp", f->paths[i]);
    if (bu_write_file(f->tmp, data, len) != 0 || rename(f->tmp, f->paths[i]) != 0)
        die("rewriting %s: %s", f->paths[i], strerror(errno));
}

static void corrupt(files *f, uint64_t i)
{
    static const char junk[] = "this file was corrupted by soak; it is not a JPEG\n";
    put_file(f, i, junk, sizeof(junk) - 1);
    f->corrupted = (int64_t)i;
    f->bad_since[i]++;
}

static void restore(files *f)
{
    if (f->corrupted >= 0)
        put_file(f, (uint64_t)f->corrupted, f->orig[f->corrupted], f->len[f->corrupted]);
    f->corrupted = -1;
}

/* ---- the run ---- */

typedef struct {
    uint64_t batches, samples, skipped, kills, corruptions, recreations, epochs, restarts, ahead;
    uint64_t errors, stalls, threaded;
} counts;

/* Is `pid` running (neither gone nor a zombie)? */
static int alive(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

/* Child processes of this process, zombies included (every thread's list). */
static long children(void)
{
    DIR *d = opendir("/proc/self/task");
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/self/task/%s/children", e->d_name);
        FILE *f = fopen(path, "r");
        int pid;
        while (f && fscanf(f, "%d", &pid) == 1)
            n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

/* A new loader resumed from a saved state, made and started by `make_in`. */
typedef struct {
    feeder_dataset *ds;
    int workers;
    uint64_t seed;
    const uint8_t *blob;
    size_t len;
    feeder_loader *ld;
} resumed;

static void *make_resumed(void *arg)
{
    resumed *m = arg;
    m->ld = make_loader(m->ds, m->workers, m->seed);
    if (feeder_loader_state_load(m->ld, m->blob, m->len))
        die("state load: %s", feeder_loader_errmsg(m->ld));
    int rc = feeder_loader_start(m->ld);
    if (rc)
        die("start: %s: %s", feeder_strerror(rc), feeder_loader_errmsg(m->ld));
    return NULL;
}

/* The resumed loader, made here or (threaded) by a thread that ends right
 * after starting it; then its workers must all still run. */
static feeder_loader *resume_loader(resumed *m, int threaded)
{
    if (!threaded) {
        make_resumed(m);
        return m->ld;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, make_resumed, m) || pthread_join(t, NULL))
        die("pthread_create/join failed");
    usleep(20000);
    for (int i = 0; i < m->workers; i++) {
        int pid = feeder_loader_worker_pid(m->ld, i);
        if (pid > 0 && !alive(pid))
            die("worker %d (pid %d) of a loader started by a thread died with the thread", i,
                pid);
    }
    return m->ld;
}

/* Stop a random worker; the loader must notice (TIMEOUT_MS) and replace it. */
static void stall_one(feeder_loader *ld, int workers, unsigned *rnd, counts *c)
{
    int pid = feeder_loader_worker_pid(ld, (int)(rand_r(rnd) % (unsigned)workers));
    if (pid > 0 && kill(pid, SIGSTOP) == 0)
        c->stalls++;
}

static void usage(void)
{
    fprintf(stderr, "usage: soak [--seconds S | --minutes M] [--workers W] [--images N] "
                    "[--data DIR] [--kill-every K] [--corrupt-every C] [--recreate-every R] "
                    "[--stall-every S (0: never)] [--seed X]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    double seconds = 30;
    int workers = 3, images = 240, kill_every = 5, corrupt_every = 7, recreate_every = 23;
    int stall_every = 97;
    uint64_t seed = 1;
    const char *data = NULL;
    static const struct option opts[] = {
        {"seconds", 1, 0, 's'}, {"minutes", 1, 0, 'm'}, {"workers", 1, 0, 'w'},
        {"images", 1, 0, 'n'}, {"data", 1, 0, 'd'}, {"kill-every", 1, 0, 'k'},
        {"corrupt-every", 1, 0, 'c'}, {"recreate-every", 1, 0, 'r'}, {"seed", 1, 0, 'x'},
        {"stall-every", 1, 0, 't'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 's': seconds = atof(optarg); break;
        case 'm': seconds = atof(optarg) * 60; break;
        case 'w': workers = atoi(optarg); break;
        case 'n': images = atoi(optarg); break;
        case 'd': data = optarg; break;
        case 'k': kill_every = atoi(optarg); break;
        case 'c': corrupt_every = atoi(optarg); break;
        case 'r': recreate_every = atoi(optarg); break;
        case 't': stall_every = atoi(optarg); break;
        case 'x': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (seconds <= 0 || workers < 1 || images < BATCH || kill_every < 1 || corrupt_every < 1 ||
        recreate_every < 1 || stall_every < 0)
        usage();
    if (stall_every)
        timeout_ms = 1000;

    char dir[] = "/tmp/feeder-soak-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp: %s", strerror(errno));
    char root[256];
    snprintf(root, sizeof(root), "%s/data", dir);
    if (data) {
        char cmd[8400];
        snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", data, root);
        if (system(cmd) != 0)
            die("copying %s failed", data);
    } else {
        bu_photos *ph;
        char err[256];
        const char *pd = getenv("FEEDER_BENCH_PHOTOS");
        if (bu_photos_load(pd ? pd : FEEDER_TEST_PHOTOS, &ph, err, sizeof(err)))
            die("photos: %s", err);
        for (int i = 0; i < images; i++) {
            char p[512];
            snprintf(p, sizeof(p), "%s/c%d", root, i % 6);
            bu_mkdirs(p);
            snprintf(p, sizeof(p), "%s/c%d/%04d.jpg", root, i % 6, i);
            uint32_t w = 120 + (uint32_t)(i * 37 % 200), h = 100 + (uint32_t)(i * 53 % 180);
            if (bu_write_jpeg(ph, p, (unsigned)i, w, h, 80, -1, (uint64_t)i))
                die("writing %s", p);
        }
        bu_photos_free(ph);
    }
    char err[512];
    feeder_dataset *ds;
    if (feeder_dataset_open_folder(root, &ds, err, sizeof(err)))
        die("%s", err);
    files f = {.n = feeder_dataset_size(ds), .corrupted = -1};
    f.paths = calloc(f.n, sizeof(char *));
    f.orig = calloc(f.n, sizeof(uint8_t *));
    f.len = calloc(f.n, sizeof(size_t));
    f.bad_since = calloc(f.n, sizeof(uint64_t));
    f.bad_before = calloc(f.n, sizeof(uint64_t));
    for (uint64_t i = 0; i < f.n; i++) {
        f.paths[i] = strdup(feeder_dataset_path(ds, i));
        if (bu_read_file(f.paths[i], &f.orig[i], &f.len[i]))
            die("reading %s", f.paths[i]);
    }
    ref r;
    uint64_t t_ref = bu_now_ns();
    make_reference(ds, seed, &r);
    printf("soak: %llu images in %s, %llu batches an epoch, reference of %d epochs in %.1f s\n",
           (unsigned long long)r.n, root, (unsigned long long)r.nbatches, EPOCHS,
           (double)(bu_now_ns() - t_ref) / 1e9);
    printf("soak: %.0f s, up to %d workers, kill every %d batches, corrupt every %d, "
           "recreate every %d, stop a worker every %d\n",
           seconds, workers, kill_every, corrupt_every, recreate_every, stall_every);
    fflush(stdout);

    unsigned rnd = (unsigned)seed * 2654435761u + 1;
    counts c = {0};
    uint8_t *seen = calloc(r.n, 1);
    reading base = measure(); /* before any loader */
    int cur_workers = workers;
    feeder_loader *ld = make_loader(ds, cur_workers, seed);
    reading start = {0, 0, 0, 0}, peak = {0, 0, 0, 0};
    uint64_t t0 = bu_now_ns(), deadline = t0 + (uint64_t)(seconds * 1e9);
    uint64_t epoch_base = 0; /* epochs run so far; the loader's epoch is this mod EPOCHS */
    feeder_loader_set_epoch(ld, 0);
    int done = 0;
    while (!done) {
        int e = (int)(epoch_base % EPOCHS);
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        if (rc == FEEDER_DONE) {
            for (uint64_t p = 0; p < r.n; p++)
                if (seen[p] != 1)
                    die("epoch %llu: position %llu delivered %d times",
                        (unsigned long long)epoch_base, (unsigned long long)p, seen[p]);
            memset(seen, 0, r.n);
            memcpy(f.bad_before, f.bad_since, r.n * sizeof(uint64_t));
            memset(f.bad_since, 0, r.n * sizeof(uint64_t));
            if (f.corrupted >= 0)
                f.bad_since[f.corrupted] = 1;
            c.epochs++;
            epoch_base++;
            if (epoch_base == 1) {
                /* Warm: the first epoch grew every buffer to its size. */
                start = measure();
                peak = start;
            }
            feeder_loader_set_epoch(ld, epoch_base % EPOCHS);
            if (bu_now_ns() >= deadline)
                done = 1;
            continue;
        }
        if (rc != 0)
            die("epoch %llu: %s (%s): %s", (unsigned long long)epoch_base, feeder_strerror(rc),
                feeder_err_name(rc), feeder_loader_errmsg(ld));
        if (b->epoch != (uint64_t)e)
            die("batch of epoch %llu, expected %d", (unsigned long long)b->epoch, e);
        /* Check the batch. */
        uint64_t first = b->number * BATCH;
        uint32_t skips = 0;
        for (uint32_t i = 0; i < b->count; i++) {
            uint64_t pos = first + i, want = r.order[e][pos], got = b->indices[i];
            if (pos >= r.n)
                die("batch %llu overruns the epoch", (unsigned long long)b->number);
            seen[pos]++;
            if (got != want) {
                /* A skip: the original must have been corrupted, and the
                 * replacement is another sample of its class. */
                int bad = f.bad_since[want] || (persistent_made && f.bad_before[want]);
                if (!bad || got >= r.n ||
                    feeder_dataset_label(ds, got) != feeder_dataset_label(ds, want))
                    die("epoch %d batch %llu position %u: index %llu, expected %llu",
                        e, (unsigned long long)b->number, i, (unsigned long long)got,
                        (unsigned long long)want);
                skips++;
            }
            if (sample_hash(b, i) != r.sample[e][got])
                die("epoch %d batch %llu position %u (index %llu): bytes differ from the "
                    "reference",
                    e, (unsigned long long)b->number, i, (unsigned long long)got);
        }
        if (skips != b->skipped)
            die("batch %llu: %u replaced samples, batch says %u", (unsigned long long)b->number,
                skips, b->skipped);
        c.batches++;
        c.samples += b->count;
        c.skipped += skips;
        feeder_batch_release(b, NULL);

        /* Faults. */
        if (cur_workers && c.batches % (uint64_t)kill_every == 0) {
            int pid = feeder_loader_worker_pid(ld, (int)(rand_r(&rnd) % (unsigned)cur_workers));
            if (pid > 0 && kill(pid, SIGKILL) == 0)
                c.kills++;
        }
        if (cur_workers && stall_every && c.batches % (uint64_t)stall_every == 0)
            stall_one(ld, cur_workers, &rnd, &c);
        if (c.batches % (uint64_t)corrupt_every == 0) {
            restore(&f);
            corrupt(&f, rand_r(&rnd) % f.n);
            c.corruptions++;
        } else if (c.batches % (uint64_t)corrupt_every == (uint64_t)corrupt_every / 2) {
            restore(&f);
        }
        if (c.batches % (uint64_t)recreate_every == 0) {
            size_t len = 0;
            if (feeder_loader_state_save(ld, NULL, 0, &len))
                die("state size: %s", feeder_loader_errmsg(ld));
            uint8_t *blob = malloc(len);
            if (feeder_loader_state_save(ld, blob, len, &len))
                die("state save: %s", feeder_loader_errmsg(ld));
            feeder_stats st;
            feeder_loader_stats(ld, &st);
            c.restarts += st.worker_restarts;
            c.ahead += st.batches_ahead;
            feeder_loader_destroy(ld); /* with parts in flight */
            cur_workers = (int)(rand_r(&rnd) % (unsigned)(workers + 1));
            resumed m = {ds, cur_workers, seed, blob, len, NULL};
            int threaded = c.recreations % 2 == 1;
            ld = resume_loader(&m, threaded);
            free(blob);
            c.recreations++;
            c.threaded += (uint64_t)threaded;
        }
        if (epoch_base >= 1) {
            reading now = measure();
            if (now.rss > peak.rss)
                peak.rss = now.rss;
            if (now.fds > peak.fds)
                peak.fds = now.fds;
            if (now.shm > peak.shm)
                peak.shm = now.shm;
            if (now.refs > peak.refs)
                peak.refs = now.refs;
        }
    }
    restore(&f);
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    c.restarts += st.worker_restarts;
    c.ahead += st.batches_ahead;
    reading end = measure();
    double secs = (double)(bu_now_ns() - t0) / 1e9;
    printf("soak: %.0f s, %llu epochs, %llu batches (%llu samples) checked, %llu samples "
           "replaced under the skip policy\n",
           secs, (unsigned long long)c.epochs, (unsigned long long)c.batches,
           (unsigned long long)c.samples, (unsigned long long)c.skipped);
    printf("soak: %llu workers killed, %llu stopped (%llu restarts seen), %llu files corrupted "
           "and restored, %llu loaders destroyed mid-epoch and resumed (%llu of them made by a "
           "short-lived thread)\n",
           (unsigned long long)c.kills, (unsigned long long)c.stalls,
           (unsigned long long)c.restarts, (unsigned long long)c.corruptions,
           (unsigned long long)c.recreations, (unsigned long long)c.threaded);
    printf("soak: %llu batches begun ahead of their epoch by persistent loaders\n",
           (unsigned long long)c.ahead);
    printf("soak: RSS after epoch 1 / peak / end: %ld / %ld / %ld KiB\n", start.rss, peak.rss,
           end.rss);
    feeder_loader_destroy(ld);
    reading after = measure();
    long left = children();
    printf("soak: child processes left after the last loader: %ld\n", left);
    /* Descriptors and /dev/shm: before the first loader against after the
     * last (a live loader holds 2 per worker and its memfd). */
    printf("soak: open fds before the first loader / peak / after the last: %ld / %ld / %ld; "
           "/dev/shm entries (whole machine) %ld / %ld / %ld; /dev/shm files mapped or open "
           "here: %ld\n",
           base.fds, peak.fds, after.fds, base.shm, peak.shm, after.shm, peak.refs);
    int ok = c.epochs >= 1 && left == 0 && after.fds == base.fds && peak.refs == 0 && after.refs == 0 &&
             peak.fds <= base.fds + 2 * workers + 1 && end.rss <= start.rss + 16 * 1024;
    feeder_dataset_destroy(ds);
    for (uint64_t i = 0; i < f.n; i++) {
        free(f.paths[i]);
        free(f.orig[i]);
    }
    free(f.paths);
    free(f.orig);
    free(f.len);
    free(f.bad_since);
    free(f.bad_before);
    free(seen);
    for (int e = 0; e < EPOCHS; e++) {
        free(r.order[e]);
        free(r.sample[e]);
    }
    bu_rm_rf(dir);
    if (!ok) {
        printf("soak: FAILED: a reading grew, a child process was left, or no epoch finished\n");
        return 1;
    }
    printf("soak: ok\n");
    return 0;
}
