/*
 * The timeline trace (feeder_loader_set_trace): the file is strict JSON (a
 * small strict parser here, which the first test shows rejecting broken
 * files), with one decode and one transform span per sample, a read span per
 * task, named worker tracks with their real pids, spans inside the run,
 * flushes that only grow, the errors, the per-track cap and a killed worker.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "testutil.h"
#include "feeder.h"
#include "loader/loader.h"
#include "common/trace.h"

/* ---- a strict JSON parser (RFC 8259), into a small tree ---- */

typedef struct jv {
    char type;     /* 'o' object, 'a' array, 's' string, 'n' number, 't', 'f', 'z' (null) */
    char *str;     /* 's': the decoded string; 'n': the number's text */
    size_t n;      /* 'o', 'a': members */
    struct jv *v;  /* members */
    char **keys;   /* 'o': member names */
} jv;

typedef struct jp {
    const char *p, *end;
} jp;

static void jv_free(jv *v)
{
    for (size_t i = 0; i < v->n; i++) {
        jv_free(&v->v[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->v);
    free(v->keys);
    free(v->str);
}

static void ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int hex4(const char *s, unsigned *out)
{
    *out = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d == 16)
            return -1;
        *out = *out * 16 + d;
    }
    return 0;
}

static int parse_string(jp *j, char **out)
{
    if (j->p >= j->end || *j->p != '"')
        return -1;
    j->p++;
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        if (c < 0x20)
            goto bad;
        if (c == '\\') {
            if (j->p >= j->end)
                goto bad;
            char e = *j->p++;
            switch (e) {
            case '"': case '\\': case '/': c = (unsigned char)e; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                unsigned u;
                if (j->end - j->p < 4 || hex4(j->p, &u))
                    goto bad;
                j->p += 4;
                c = u < 0x80 ? (unsigned char)u : '?';
                break;
            }
            default: goto bad;
            }
        }
        if (len + 2 > cap)
            s = realloc(s, cap *= 2);
        s[len++] = (char)c;
    }
    if (j->p >= j->end)
        goto bad;
    j->p++;
    s[len] = 0;
    *out = s;
    return 0;
bad:
    free(s);
    return -1;
}

static int parse_value(jp *j, jv *v, int depth);

static int parse_number(jp *j, jv *v)
{
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end)
        return -1;
    if (*j->p == '0') {
        j->p++;
    } else if (*j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    } else {
        return -1;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return -1;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return -1;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    v->type = 'n';
    v->str = strndup(s, (size_t)(j->p - s));
    return 0;
}

static int parse_items(jp *j, jv *v, int depth, char close, int obj)
{
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
    }
    for (;;) {
        v->v = realloc(v->v, (v->n + 1) * sizeof(jv));
        memset(&v->v[v->n], 0, sizeof(jv));
        if (obj) {
            v->keys = realloc(v->keys, (v->n + 1) * sizeof(char *));
            v->keys[v->n] = NULL;
        }
        v->n++;
        ws(j);
        if (obj) {
            if (parse_string(j, &v->keys[v->n - 1]))
                return -1;
            ws(j);
            if (j->p >= j->end || *j->p++ != ':')
                return -1;
        }
        if (parse_value(j, &v->v[v->n - 1], depth + 1))
            return -1;
        ws(j);
        if (j->p >= j->end)
            return -1;
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p++ == close)
            return 0;
        return -1;
    }
}

static int parse_value(jp *j, jv *v, int depth)
{
    if (depth > 64)
        return -1;
    ws(j);
    if (j->p >= j->end)
        return -1;
    switch (*j->p) {
    case '{': v->type = 'o'; return parse_items(j, v, depth, '}', 1);
    case '[': v->type = 'a'; return parse_items(j, v, depth, ']', 0);
    case '"': v->type = 's'; return parse_string(j, &v->str);
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        static const char types[] = {'t', 'f', 'z'};
        for (int k = 0; k < 3; k++) {
            size_t len = strlen(words[k]);
            if ((size_t)(j->end - j->p) >= len && !memcmp(j->p, words[k], len)) {
                j->p += len;
                v->type = types[k];
                return 0;
            }
        }
        return -1;
    }
    default: return parse_number(j, v);
    }
}

/* 0 and the tree, or -1 (not strict JSON, or anything after the value). */
static int json_parse(const char *text, size_t len, jv *out)
{
    memset(out, 0, sizeof(*out));
    jp j = {text, text + len};
    int rc = parse_value(&j, out, 0);
    ws(&j);
    if (rc || j.p != j.end) {
        jv_free(out);
        memset(out, 0, sizeof(*out));
        return -1;
    }
    return 0;
}

static const jv *jget(const jv *o, const char *key)
{
    if (!o || o->type != 'o')
        return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key))
            return &o->v[i];
    return NULL;
}

static int64_t jint(const jv *v, int64_t def)
{
    return v && v->type == 'n' ? strtoll(v->str, NULL, 10) : def;
}

/* "123.456" (microseconds, three decimals at most) as exact nanoseconds. */
static uint64_t jus_ns(const jv *v)
{
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->type, 'n');
    ck_assert_msg(v->str[0] != '-', "negative time %s", v->str);
    char *dot;
    uint64_t ns = strtoull(v->str, &dot, 10) * 1000;
    if (*dot == '.') {
        unsigned mul = 100;
        for (const char *c = dot + 1; *c && mul; c++, mul /= 10)
            ns += (uint64_t)(*c - '0') * mul;
    }
    return ns;
}

/* ---- the trace as events ---- */

typedef struct ev {
    char ph;
    char name[96];
    int pid, tid;
    uint64_t ts, dur; /* ns */
    int64_t epoch, batch, index;
} ev;

typedef struct trace {
    ev *e;
    size_t n;
    int64_t dropped;
    char unit[8];
} trace;

static char *read_text(const char *path, size_t *len)
{
    uint8_t *data = NULL;
    ck_assert_msg(bu_read_file(path, &data, len) == 0, "cannot read %s", path);
    return (char *)data;
}

static void load_trace(const char *path, trace *t)
{
    size_t len;
    char *text = read_text(path, &len);
    jv root;
    ck_assert_msg(json_parse(text, len, &root) == 0, "%s is not valid JSON", path);
    free(text);
    memset(t, 0, sizeof(*t));
    const jv *evs = jget(&root, "traceEvents");
    ck_assert_ptr_nonnull(evs);
    ck_assert_int_eq(evs->type, 'a');
    const jv *unit = jget(&root, "displayTimeUnit");
    ck_assert_ptr_nonnull(unit);
    snprintf(t->unit, sizeof(t->unit), "%s", unit->str);
    const jv *meta = jget(&root, "metadata");
    t->dropped = jint(jget(meta, "feeder_dropped_events"), -1);
    t->e = calloc(evs->n ? evs->n : 1, sizeof(ev));
    for (size_t i = 0; i < evs->n; i++) {
        const jv *o = &evs->v[i];
        ev *e = &t->e[t->n++];
        const jv *ph = jget(o, "ph"), *name = jget(o, "name"), *args = jget(o, "args");
        ck_assert(ph && ph->type == 's' && name && name->type == 's');
        e->ph = ph->str[0];
        e->pid = (int)jint(jget(o, "pid"), -1);
        e->tid = (int)jint(jget(o, "tid"), -1);
        if (e->ph == 'M') {
            /* thread_name / process_name: the name is the value's. */
            const jv *an = jget(args, "name");
            if (an)
                snprintf(e->name, sizeof(e->name), "%s=%s", name->str, an->str);
            else
                snprintf(e->name, sizeof(e->name), "%s", name->str);
            continue;
        }
        ck_assert_int_eq(e->ph, 'X');
        snprintf(e->name, sizeof(e->name), "%s", name->str);
        e->ts = jus_ns(jget(o, "ts"));
        e->dur = jus_ns(jget(o, "dur"));
        e->epoch = jint(jget(args, "epoch"), -1);
        e->batch = jint(jget(args, "batch"), -1);
        e->index = jint(jget(args, "index"), -1);
    }
    jv_free(&root);
}

static size_t count(const trace *t, const char *name, int epoch)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->e[i].ph == 'X' && !strcmp(t->e[i].name, name) && (epoch < 0 || t->e[i].epoch == epoch))
            n++;
    return n;
}

/* The thread name of tid, or NULL. */
static const char *thread_name(const trace *t, int tid)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->e[i].ph == 'M' && t->e[i].tid == tid && !strncmp(t->e[i].name, "thread_name=", 12))
            return t->e[i].name + 12;
    return NULL;
}

static int tid_of(const trace *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->e[i].ph == 'M' && !strncmp(t->e[i].name, "thread_name=", 12) &&
            !strcmp(t->e[i].name + 12, name))
            return t->e[i].tid;
    return -1;
}

static size_t count_on(const trace *t, int tid)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += t->e[i].ph == 'X' && t->e[i].tid == tid;
    return n;
}

/* ---- fixtures ---- */

static void setup(void)
{
    tu_setup();
    feeder__trace_set_cap(0);
}

/* 12 images, 3 batches of 4. */
#define NIMG 12
#define BATCH 4
#define NBATCH 3

static feeder_dataset *folder(void)
{
    tu_folder("imgs", 2, NIMG / 2);
    return tu_open_folder(tu_dir, "imgs");
}

static feeder_loader *loader(feeder_dataset *ds, int workers, const char *trace_path)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, BATCH), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 48), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 64), 0);
    if (trace_path)
        ck_assert_int_eq(feeder_loader_set_trace(ld, trace_path), 0);
    return ld;
}

/* Every batch of one epoch, released at once; the samples' indices into
 * seen[epoch][index]. Returns the number of feeder_next calls. */
static int run_epoch(feeder_loader *ld, int epoch, int seen[2][NIMG])
{
    int calls = 0, batches = 0;
    for (;;) {
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        calls++;
        if (rc == FEEDER_DONE)
            break;
        ck_assert_msg(rc == 0, "feeder_next: %s", feeder_loader_errmsg(ld));
        ck_assert_int_eq((int)b->epoch, epoch);
        for (uint32_t i = 0; i < b->count; i++)
            seen[epoch][b->indices[i]]++;
        batches++;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(batches, NBATCH);
    return calls;
}

/* ---- tests ---- */

START_TEST(test_parser_is_strict)
{
    static const char *const bad[] = {
        "", "{", "{\"a\":1,}", "[1,2,]", "{\"a\" 1}", "{'a':1}", "[01]", "[1.]", "[.5]",
        "[\"a\nb\"]", "[\"\\x\"]", "{\"a\":1} x", "[1e]", "[tru]", "{\"traceEvents\":[{]}",
        "[\"\\u12G4\"]", "{\"a\":1}}", "[-]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        jv v;
        ck_assert_msg(json_parse(bad[i], strlen(bad[i]), &v) == -1, "accepted: %s", bad[i]);
    }
    static const char good[] = " {\"a\":[1,-2.5e+3,0.125,true,false,null,\"q\\\"\\u0041\"],\"b\":{}} ";
    jv v;
    ck_assert_int_eq(json_parse(good, strlen(good), &v), 0);
    const jv *a = jget(&v, "a");
    ck_assert_int_eq((int)a->n, 7);
    ck_assert_str_eq(a->v[6].str, "q\"A");
    ck_assert_str_eq(a->v[1].str, "-2.5e+3");
    jv_free(&v);
}
END_TEST

/* A whole run: 2 workers, 3 batches x 2 epochs, persistent workers. */
START_TEST(test_trace_run)
{
    feeder_dataset *ds = folder();
    char path[512];
    tu_path(path, sizeof(path), "run.json");
    feeder_loader *ld = loader(ds, 2, path);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    uint64_t t_start = feeder__now_ns();
    int seen[2][NIMG] = {{0}};
    int calls = run_epoch(ld, 0, seen);
    int pid0 = feeder_loader_worker_pid(ld, 0), pid1 = feeder_loader_worker_pid(ld, 1);
    ck_assert_int_gt(pid0, 0);
    ck_assert_int_gt(pid1, 0);
    calls += run_epoch(ld, 1, seen);
    ck_assert_int_eq(feeder_loader_worker_pid(ld, 0), pid0);
    feeder_loader_destroy(ld);
    uint64_t t_end = feeder__now_ns();
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ck_assert_int_eq(stat(tmp, &st), -1);

    trace t;
    load_trace(path, &t);
    ck_assert_str_eq(t.unit, "ms");
    ck_assert_int_eq((int)t.dropped, 0);
    /* One process: the loader's. */
    int saw_process = 0;
    for (size_t i = 0; i < t.n; i++) {
        ck_assert_int_eq(t.e[i].pid, (int)getpid());
        saw_process |= t.e[i].ph == 'M' && !strcmp(t.e[i].name, "process_name=feeder loader");
    }
    ck_assert(saw_process);
    char name[64];
    snprintf(name, sizeof(name), "worker 0 (pid %d)", pid0);
    int w0 = tid_of(&t, name);
    snprintf(name, sizeof(name), "worker 1 (pid %d)", pid1);
    int w1 = tid_of(&t, name);
    ck_assert_int_ge(w0, 0);
    ck_assert_int_ge(w1, 0);
    ck_assert_int_ne(w0, w1);
    int consumer = tid_of(&t, "consumer");
    ck_assert_int_ge(consumer, 0);
    /* Exactly one decode and one transform per delivered sample, each sample
     * of each epoch once; a read per task (2 parts per batch). */
    for (int e = 0; e < 2; e++) {
        ck_assert_int_eq((int)count(&t, "decode", e), NBATCH * BATCH);
        ck_assert_int_eq((int)count(&t, "transform", e), NBATCH * BATCH);
        ck_assert_int_eq((int)count(&t, "read", e), NBATCH * 2);
        for (int i = 0; i < NIMG; i++) {
            ck_assert_int_eq(seen[e][i], 1);
            int dec = 0, tr = 0;
            for (size_t k = 0; k < t.n; k++) {
                const ev *x = &t.e[k];
                if (x->ph != 'X' || x->epoch != e || x->index != i)
                    continue;
                dec += !strcmp(x->name, "decode");
                tr += !strcmp(x->name, "transform");
            }
            ck_assert_msg(dec == 1 && tr == 1, "epoch %d sample %d: %d decode, %d transform", e,
                          i, dec, tr);
        }
    }
    ck_assert_int_eq((int)count(&t, "next", -1), calls);
    for (int e = 0; e < 2; e++)
        for (int b = 0; b < NBATCH; b++) {
            snprintf(name, sizeof(name), "batch %d held by user", b);
            ck_assert_int_eq((int)count(&t, name, e), 1);
        }
    /* Spans: where they belong, inside the run, decode right before its
     * transform, and every track named. */
    size_t on_workers = 0;
    for (size_t i = 0; i < t.n; i++) {
        const ev *x = &t.e[i];
        if (x->ph != 'X')
            continue;
        ck_assert_ptr_nonnull(thread_name(&t, x->tid));
        ck_assert_msg(x->ts >= t_start && x->ts + x->dur <= t_end,
                      "%s at %llu+%llu outside [%llu, %llu]", x->name, (unsigned long long)x->ts,
                      (unsigned long long)x->dur, (unsigned long long)t_start,
                      (unsigned long long)t_end);
        int worker_span = !strcmp(x->name, "read") || !strcmp(x->name, "decode") ||
                          !strcmp(x->name, "transform");
        ck_assert_int_eq(worker_span, x->tid == w0 || x->tid == w1);
        on_workers += worker_span;
        if (!strcmp(x->name, "decode")) {
            int adjacent = 0;
            for (size_t k = 0; k < t.n; k++)
                adjacent |= t.e[k].ph == 'X' && !strcmp(t.e[k].name, "transform") &&
                            t.e[k].tid == x->tid && t.e[k].index == x->index &&
                            t.e[k].epoch == x->epoch && t.e[k].ts == x->ts + x->dur;
            ck_assert_msg(adjacent, "decode of sample %lld: no transform right after it",
                          (long long)x->index);
        }
        if (!strcmp(x->name, "next"))
            ck_assert_int_eq(x->tid, consumer);
    }
    ck_assert_int_eq((int)on_workers, (int)(count_on(&t, w0) + count_on(&t, w1)));
    ck_assert_int_gt((int)count_on(&t, w0), 0);
    ck_assert_int_gt((int)count_on(&t, w1), 0);
    free(t.e);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Workers that are not persistent start again each epoch: the track lists
 * every pid it had. num_workers 0 records on the calling thread's track. */
START_TEST(test_trace_pids_and_inline)
{
    feeder_dataset *ds = folder();
    char path[512];
    tu_path(path, sizeof(path), "pids.json");
    feeder_loader *ld = loader(ds, 1, path);
    int seen[2][NIMG] = {{0}};
    int pids[2];
    for (int e = 0; e < 2; e++) {
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        pids[e] = feeder_loader_worker_pid(ld, 0);
        for (uint32_t i = 0; i < b->count; i++)
            seen[e][b->indices[i]]++;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        for (int rc; (rc = feeder_next(ld, &b)) != FEEDER_DONE;) {
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
    }
    ck_assert_int_ne(pids[0], pids[1]);
    feeder_loader_destroy(ld);
    trace t;
    load_trace(path, &t);
    char name[64];
    snprintf(name, sizeof(name), "worker 0 (pid %d, %d)", pids[0], pids[1]);
    ck_assert_int_ge(tid_of(&t, name), 0);
    free(t.e);

    ld = loader(ds, 0, path);
    for (int e = 0; e < 2; e++)
        run_epoch(ld, e, seen);
    feeder_loader_destroy(ld);
    load_trace(path, &t);
    int inl = tid_of(&t, "calling thread (num_workers 0)");
    ck_assert_int_ge(inl, 0);
    ck_assert_int_eq((int)count(&t, "decode", -1), 2 * NIMG);
    ck_assert_int_eq((int)count(&t, "read", -1), 2 * NBATCH);
    ck_assert_int_eq((int)count_on(&t, inl), 2 * NIMG * 2 + 2 * NBATCH);
    free(t.e);
    feeder_dataset_destroy(ds);
}
END_TEST

static uint64_t cb_len(void *user) { return *(uint64_t *)user; }

static int cb_get(void *user, const feeder_sample_ctx *ctx, uint8_t *dst, size_t dst_bytes,
                  int64_t *label, char *err, size_t errlen)
{
    memset(dst, (int)ctx->index, dst_bytes);
    *label = (int64_t)ctx->index;
    return 0;
}

/* A user dataset: one "callback" span per sample, on the workers. */
START_TEST(test_trace_callbacks)
{
    static uint64_t n = 10;
    feeder_dataset_callbacks cb = {.len = cb_len, .get = cb_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
    char path[512];
    tu_path(path, sizeof(path), "cb.json");
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 3), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 4), 0);
    ck_assert_int_eq(feeder_loader_set_trace(ld, path), 0);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_int_eq(rc, FEEDER_DONE);
    feeder_loader_destroy(ld);
    trace t;
    load_trace(path, &t);
    ck_assert_int_eq((int)count(&t, "callback", 0), 10);
    ck_assert_int_eq((int)count(&t, "decode", -1), 0);
    for (int i = 0; i < 10; i++) {
        int k = 0;
        for (size_t j = 0; j < t.n; j++)
            k += t.e[j].ph == 'X' && !strcmp(t.e[j].name, "callback") && t.e[j].index == i;
        ck_assert_int_eq(k, 1);
    }
    free(t.e);
    feeder_dataset_destroy(ds);
}
END_TEST

static int same_event(const ev *a, const ev *b)
{
    return a->ph == b->ph && a->tid == b->tid && a->ts == b->ts && a->dur == b->dur &&
           a->epoch == b->epoch && a->batch == b->batch && a->index == b->index &&
           !strcmp(a->name, b->name);
}

/* Flushes mid-run: each file holds everything the one before did. */
START_TEST(test_trace_flush_superset)
{
    feeder_dataset *ds = folder();
    char path[512];
    tu_path(path, sizeof(path), "flush.json");
    feeder_loader *ld = loader(ds, 2, path);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_int_eq(feeder_loader_trace_flush(ld), 0);
    trace t1, t2;
    load_trace(path, &t1);
    ck_assert_int_ge((int)count(&t1, "decode", 0), BATCH);
    ck_assert_int_eq((int)count(&t1, "next", 0), 1);
    ck_assert_int_eq((int)count(&t1, "batch 0 held by user", 0), 1);
    for (int rc; (rc = feeder_next(ld, &b)) != FEEDER_DONE;) {
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(feeder_loader_trace_flush(ld), 0);
    load_trace(path, &t2);
    ck_assert_int_gt((int)t2.n, (int)t1.n);
    for (size_t i = 0; i < t1.n; i++) {
        int found = 0;
        for (size_t k = 0; k < t2.n && !found; k++)
            found = same_event(&t1.e[i], &t2.e[k]);
        ck_assert_msg(found, "event %zu (%s) of the first flush is gone", i, t1.e[i].name);
    }
    ck_assert_int_eq((int)count(&t2, "decode", 0), NIMG);
    free(t1.e);
    free(t2.e);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_trace_states_and_errors)
{
    feeder_dataset *ds = folder();
    char path[512], tmp[700];
    tu_path(path, sizeof(path), "s.json");
    ck_assert_int_eq(feeder_loader_set_trace(NULL, path), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_loader_trace_flush(NULL), FEEDER_EINVAL);

    /* No trace: flush is a state error; NULL turns a set path off. */
    feeder_loader *ld = loader(ds, 1, path);
    ck_assert_int_eq(feeder_loader_trace_flush(ld), FEEDER_ESTATE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "feeder_loader_trace_flush: the loader has not started");
    ck_assert_int_eq(feeder_loader_set_trace(ld, ""), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "feeder_loader_set_trace: empty path");
    ck_assert_int_eq(feeder_loader_set_trace(ld, NULL), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(feeder_loader_trace_flush(ld), FEEDER_ESTATE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "feeder_loader_trace_flush: no trace was set");
    ck_assert_int_eq(feeder_loader_set_trace(ld, path), FEEDER_ESTATE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "feeder_loader_set_trace: the loader started");
    feeder_loader_destroy(ld);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), -1);

    /* A path that cannot be written fails the start, naming the file. */
    char bad[600];
    tu_path(bad, sizeof(bad), "no-such-dir/t.json");
    ld = loader(ds, 1, bad);
    ck_assert_int_eq(feeder_loader_start(ld), -ENOENT);
    char want[1400];
    snprintf(want, sizeof(want), "trace file %s.tmp: cannot create it: No such file or directory",
             bad);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);

    /* ... and a flush when the directory went away meanwhile. */
    char dir[512];
    tu_path(dir, sizeof(dir), "gone");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(bad, sizeof(bad), "%s/t.json", dir);
    ld = loader(ds, 1, bad);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(stat(bad, &st), 0); /* start wrote the empty trace */
    trace t;
    load_trace(bad, &t);
    ck_assert_int_eq((int)count(&t, "decode", -1), 0);
    free(t.e);
    ck_assert_int_eq(unlink(bad), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_int_eq(feeder_loader_trace_flush(ld), -ENOENT);
    snprintf(want, sizeof(want), "trace file %s.tmp: cannot create it: No such file or directory",
             bad);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);

    /* A rename that fails: the path is a directory. */
    tu_path(bad, sizeof(bad), "isdir");
    ck_assert_int_eq(mkdir(bad, 0755), 0);
    char inside[700];
    snprintf(inside, sizeof(inside), "%s/x", bad);
    ck_assert_int_eq(bu_write_file(inside, "x", 1), 0);
    ld = loader(ds, 1, bad);
    ck_assert_int_lt(feeder_loader_start(ld), 0);
    snprintf(tmp, sizeof(tmp), "%s.tmp", bad);
    snprintf(want, sizeof(want), "trace file %s: rename from %s: ", bad, tmp);
    ck_assert_msg(!strncmp(feeder_loader_errmsg(ld), want, strlen(want)), "%s",
                  feeder_loader_errmsg(ld));
    ck_assert_int_eq(stat(tmp, &st), -1); /* no .tmp left behind */
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* The per-track cap: one worker, cap 5. Every track keeps its first 5 spans;
 * the rest are counted, exactly, in the metadata. */
START_TEST(test_trace_cap)
{
    feeder__trace_set_cap(5);
    feeder_dataset *ds = folder();
    char path[512];
    tu_path(path, sizeof(path), "cap.json");
    feeder_loader *ld = loader(ds, 1, path);
    int seen[2][NIMG] = {{0}};
    int calls = 0;
    for (int e = 0; e < 2; e++)
        calls += run_epoch(ld, e, seen);
    feeder_loader_destroy(ld);
    trace t;
    load_trace(path, &t);
    int w0 = -1;
    for (size_t i = 0; i < t.n; i++)
        if (t.e[i].ph == 'M' && !strncmp(t.e[i].name, "thread_name=worker 0 (pid ", 26))
            w0 = t.e[i].tid;
    ck_assert_int_ge(w0, 0);
    /* worker: 6 reads (one part per batch), 24 decodes, 24 transforms;
     * consumer: `calls` nexts; held: 6 batches (each released before the
     * next call, so one lane). */
    int worker = 2 * NBATCH + 2 * 2 * NIMG;
    int held_tid = tid_of(&t, "batches held by user");
    ck_assert_int_ge(held_tid, 0);
    ck_assert_int_eq((int)count_on(&t, w0), 5);
    ck_assert_int_eq((int)count_on(&t, tid_of(&t, "consumer")), 5);
    ck_assert_int_eq((int)count_on(&t, held_tid), 5);
    ck_assert_int_eq((int)t.dropped, (worker - 5) + (calls - 5) + (2 * NBATCH - 5));
    free(t.e);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A worker killed mid-run, restarted (MAX_RESTARTS 1): the trace is still
 * valid, every delivered sample has its spans, and the worker's track lists
 * both pids. */
START_TEST(test_trace_killed_worker)
{
    feeder_dataset *ds = folder();
    char path[512];
    tu_path(path, sizeof(path), "kill.json");
    feeder_loader *ld = loader(ds, 2, path);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 1), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    int old = feeder_loader_worker_pid(ld, 0);
    ck_assert_int_eq(kill(old, SIGKILL), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    int seen[NIMG] = {0}, rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        for (uint32_t i = 0; i < b->count; i++)
            seen[b->indices[i]]++;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    int now = feeder_loader_worker_pid(ld, 0);
    ck_assert_int_ne(now, old);
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    ck_assert_int_eq((int)st.worker_restarts, 1);
    feeder_loader_destroy(ld);
    trace t;
    load_trace(path, &t);
    char name[64];
    snprintf(name, sizeof(name), "worker 0 (pid %d, %d)", old, now);
    ck_assert_int_ge(tid_of(&t, name), 0);
    for (int i = 0; i < NIMG; i++) {
        if (!seen[i])
            continue;
        int dec = 0;
        for (size_t k = 0; k < t.n; k++)
            dec += t.e[k].ph == 'X' && !strcmp(t.e[k].name, "decode") && t.e[k].index == i;
        ck_assert_int_ge(dec, 1);
    }
    ck_assert_int_ge((int)count(&t, "decode", 0), NIMG - BATCH);
    free(t.e);
    feeder_dataset_destroy(ds);
}
END_TEST

/* The internal API: NULL is a no-op everywhere; names are escaped. */
START_TEST(test_trace_internal)
{
    feeder__trace_span(NULL, 0, "x", 1, 2, 3, 4);
    feeder__trace_worker_span(NULL, 0, FEEDER__SPAN_READ, 1, 2, 0, 0, 0);
    ck_assert_int_eq(feeder__trace_track(NULL, "x"), -1);
    ck_assert_int_eq(feeder__trace_write(NULL, NULL, 0), 0);
    feeder__trace_destroy(NULL);
    char path[512], err[512];
    tu_path(path, sizeof(path), "int.json");
    feeder__trace *tr = feeder__trace_create(path, 1, err, sizeof(err));
    ck_assert_ptr_nonnull(tr);
    int a = feeder__trace_track(tr, "quote \" back \\ tab \t");
    int p0 = feeder__trace_track_next(tr, "pin thread");
    int p1 = feeder__trace_track_next(tr, "pin thread");
    ck_assert_int_ge(a, 0);
    feeder__trace_span(tr, a, "gpu decode", 1000, 2500, 7, -1);
    feeder__trace_span(tr, p1, "pin copy", 3000, 2000, -1, -1); /* t1 < t0: dur 0 */
    feeder__trace_span(tr, 999, "nowhere", 1, 2, -1, -1);
    feeder__trace_worker_span(tr, 5, FEEDER__SPAN_READ, 1, 2, 0, 0, 0); /* no such worker */
    ck_assert_int_eq(feeder__trace_write(tr, err, sizeof(err)), 0);
    trace t;
    load_trace(path, &t);
    ck_assert_str_eq(thread_name(&t, a + 1), "quote \" back \\ tab \t");
    ck_assert_str_eq(thread_name(&t, p0 + 1), "pin thread 0");
    ck_assert_str_eq(thread_name(&t, p1 + 1), "pin thread 1");
    ck_assert_int_eq((int)count(&t, "gpu decode", -1), 1);
    ck_assert_int_eq((int)count(&t, "nowhere", -1), 0);
    for (size_t i = 0; i < t.n; i++) {
        if (t.e[i].ph != 'X')
            continue;
        if (!strcmp(t.e[i].name, "gpu decode")) {
            ck_assert_int_eq((int)t.e[i].ts, 1000);
            ck_assert_int_eq((int)t.e[i].dur, 1500);
            ck_assert_int_eq((int)t.e[i].batch, 7);
        } else {
            ck_assert_str_eq(t.e[i].name, "pin copy");
            ck_assert_int_eq((int)t.e[i].dur, 0);
        }
    }
    free(t.e);
    feeder__trace_destroy(tr);
    ck_assert_ptr_null(feeder__trace_create("", 1, err, sizeof(err)));
    ck_assert_str_eq(err, "trace: no path");
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_add_checked_fixture(tc, setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_parser_is_strict);
    tcase_add_test(tc, test_trace_run);
    tcase_add_test(tc, test_trace_pids_and_inline);
    tcase_add_test(tc, test_trace_callbacks);
    tcase_add_test(tc, test_trace_flush_superset);
    tcase_add_test(tc, test_trace_states_and_errors);
    tcase_add_test(tc, test_trace_cap);
    tcase_add_test(tc, test_trace_killed_worker);
    tcase_add_test(tc, test_trace_internal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(trace_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
