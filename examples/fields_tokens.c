/*
 * Variable-length token sequences, as a language model reads them: a corpus
 * of int32 tokens in memory (as a tokenised shard would be mapped) cut into
 * documents of 16 to MAX tokens; each batch pads its documents to the
 * longest one, with a lengths tensor and an attention mask field, and a
 * collate callback pads both to a multiple of 8 (what tensor cores like).
 *
 *   fields_tokens [--workers N] [--docs N] [--max N] [--batch N] [--epochs N] [--check]
 *                 [--pack FILE]
 *
 * With --pack the corpus is first written to FILE with feeder_pack_fields
 * (a fields packed file) and the loader reads the documents from it.
 *
 * Prints the token bytes delivered and GB/s per worker; with --check it
 * verifies every token, length and mask value of every batch against the
 * corpus, that each document arrives once an epoch, and prints a checksum of
 * every field of every batch (the same for any worker count).
 */
#define _POSIX_C_SOURCE 200809L
#include <feeder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct corpus {
    int32_t *tokens;
    uint64_t *start; /* docs + 1 offsets into tokens */
    uint64_t docs;
    uint32_t max;
} corpus;

/* Document lengths and tokens from feeder's counter-based random numbers:
 * the same corpus for every run with the same arguments. */
static int make_corpus(corpus *c, uint64_t docs, uint32_t max)
{
    c->docs = docs;
    c->max = max;
    c->start = malloc((docs + 1) * sizeof(*c->start));
    if (!c->start)
        return -1;
    c->start[0] = 0;
    for (uint64_t d = 0; d < docs; d++)
        c->start[d + 1] = c->start[d] + 16 + feeder_random(7, 0, d, 0) % (max - 15);
    c->tokens = malloc(c->start[docs] * sizeof(*c->tokens));
    if (!c->tokens)
        return -1;
    for (uint64_t t = 0; t < c->start[docs]; t++)
        c->tokens[t] = (int32_t)((t * 2654435761u) % 50257); /* a GPT-2-sized vocabulary */
    return 0;
}

static uint64_t doc_len(const corpus *c, uint64_t d) { return c->start[d + 1] - c->start[d]; }

static uint64_t corpus_len(void *user) { return ((corpus *)user)->docs; }

/* Field 0: the tokens; field 1: the attention mask (1 per token). */
static int corpus_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out,
                      char *err, size_t errlen)
{
    const corpus *c = user;
    uint64_t n = doc_len(c, ctx->index);
    int rc = feeder_sample_put(out, 0, FEEDER_ELEM_I32, c->tokens + c->start[ctx->index], n);
    if (rc) {
        snprintf(err, errlen, "document %llu of %llu tokens", (unsigned long long)ctx->index,
                 (unsigned long long)n);
        return rc;
    }
    memset(out->data[1], 1, n);
    out->rows[1] = n;
    return 0;
}

static int pad_to_8(void *user, feeder_batch *b, char *err, size_t errlen)
{
    const corpus *c = user;
    feeder_tensor t;
    if (feeder_batch_field_at(b, 0, &t)) {
        snprintf(err, errlen, "no token field");
        return -1;
    }
    uint64_t rows = (t.shape[1] + 7) / 8 * 8;
    if (rows > c->max)
        rows = c->max;
    int rc = feeder_batch_pad_field(b, 0, rows);
    return rc ? rc : feeder_batch_pad_field(b, 1, rows);
}

typedef struct args {
    int workers, batch, epochs, check;
    uint64_t docs;
    uint32_t max;
    const char *pack;
} args;

static int parse(int argc, char **argv, args *a)
{
    *a = (args){.workers = 1, .batch = 64, .epochs = 3, .docs = 20000, .max = 2048};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--check"))
            a->check = 1;
        else if (!strcmp(argv[i], "--workers") && v && ++i)
            a->workers = atoi(v);
        else if (!strcmp(argv[i], "--docs") && v && ++i)
            a->docs = strtoull(v, NULL, 10);
        else if (!strcmp(argv[i], "--max") && v && ++i)
            a->max = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(argv[i], "--batch") && v && ++i)
            a->batch = atoi(v);
        else if (!strcmp(argv[i], "--epochs") && v && ++i)
            a->epochs = atoi(v);
        else if (!strcmp(argv[i], "--pack") && v && ++i)
            a->pack = v;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
        else {
            fprintf(stderr, "%s: unknown option or missing value '%s'\n", argv[0], argv[i]);
            return -1;
        }
    }
    return a->docs && a->max >= 16 && a->batch > 0 && a->epochs > 0 ? 0 : -1;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Every value of a batch against the corpus; 0 or -1 with a message. */
static int check_batch(const corpus *c, const feeder_batch *b, uint8_t *seen, uint64_t *sum)
{
    feeder_tensor t, m;
    if (feeder_batch_field(b, "tokens", &t) || feeder_batch_field(b, "mask", &m))
        return -1;
    uint64_t rows = t.shape[1];
    if (m.shape[1] != rows || (rows % 8 && rows != c->max))
        return fprintf(stderr, "batch %llu: padded to %llu\n", (unsigned long long)b->number,
                       (unsigned long long)rows), -1;
    for (uint32_t s = 0; s < b->count; s++) {
        uint64_t d = b->indices[s], n = doc_len(c, d);
        const int32_t *row = (const int32_t *)t.data + s * rows;
        const uint8_t *mrow = (const uint8_t *)m.data + s * rows;
        if (seen[d]++ || (uint64_t)t.lengths[s] != n || (uint64_t)m.lengths[s] != n)
            return fprintf(stderr, "document %llu: twice or wrong length\n",
                           (unsigned long long)d), -1;
        for (uint64_t j = 0; j < rows; j++)
            if (row[j] != (j < n ? c->tokens[c->start[d] + j] : 0) || mrow[j] != (j < n))
                return fprintf(stderr, "document %llu, token %llu differs\n",
                               (unsigned long long)d, (unsigned long long)j), -1;
    }
    *sum = fnv(*sum, t.data, t.bytes);
    *sum = fnv(*sum, t.lengths, b->count * 8);
    *sum = fnv(*sum, m.data, m.bytes);
    *sum = fnv(*sum, b->indices, b->count * 8);
    return 0;
}

static int run(feeder_loader *ld, const corpus *c, const args *a, uint64_t *token_bytes)
{
    uint64_t bytes = 0, batches = 0, sum = 0xcbf29ce484222325ull;
    uint8_t *seen = calloc(c->docs, 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    for (int e = 0; e < a->epochs && rc == 0 && seen; e++) {
        memset(seen, 0, c->docs);
        feeder_batch *b;
        while ((rc = feeder_next(ld, &b)) == 0) {
            feeder_tensor t;
            feeder_batch_field_at(b, 0, &t);
            for (uint32_t s = 0; s < b->count; s++)
                bytes += (uint64_t)t.lengths[s] * 4;
            batches++;
            if (a->check && check_batch(c, b, seen, &sum))
                rc = -1;
            feeder_batch_release(b, NULL);
            if (rc)
                break;
        }
        for (uint64_t d = 0; rc == FEEDER_DONE && a->check && d < c->docs; d++)
            if (!seen[d]) {
                fprintf(stderr, "document %llu missing\n", (unsigned long long)d);
                rc = -1;
            }
        rc = rc == FEEDER_DONE ? 0 : rc;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(seen);
    if (rc)
        return fprintf(stderr, "%s\n", rc == -1 ? "check failed" : feeder_loader_errmsg(ld)), 1;
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    int w = a->workers ? a->workers : 1;
    printf("%llu batches, %.1f MB of tokens in %.3f s: %.2f GB/s per worker (%d workers)\n",
           (unsigned long long)batches, (double)bytes / 1e6, s, (double)bytes / s / 1e9 / w,
           a->workers);
    *token_bytes = bytes;
    if (a->check)
        printf("checked: every token, length and mask; checksum %016llx\n",
               (unsigned long long)sum);
    return 0;
}

/* The workers' own CPU time (reaped by feeder_loader_destroy): the rate a
 * worker reaches whatever else shares the cores. */
static void print_worker_cpu(uint64_t bytes)
{
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru))
        return;
    double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    printf("workers' CPU time %.3f s: %.2f GB/s of tokens per worker CPU-second\n", cpu,
           (double)bytes / cpu / 1e9);
}

int main(int argc, char **argv)
{
    args a;
    corpus c = {0};
    int pr = parse(argc, argv, &a);
    if (pr) {
        fprintf(pr == 1 ? stdout : stderr,
                "usage: %s [--workers N] [--docs N] [--max N] [--batch N] [--epochs N] "
                "[--check] [--pack FILE]\n", argv[0]);
        if (pr == 1)
            printf("Loads variable-length token sequences, padded per batch with a lengths\n"
                   "tensor and an attention mask; --check verifies every value.\n");
        return pr == 1 ? 0 : 2;
    }
    if (make_corpus(&c, a.docs, a.max)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    feeder_field fields[2] = {
        {"tokens", FEEDER_ELEM_I32, FEEDER_FIELD_PADDED, 1, {a.max}, {0}},
        {"mask", FEEDER_ELEM_U8, FEEDER_FIELD_PADDED, 1, {a.max}, {0}},
    };
    feeder_fields_callbacks cb = {.len = corpus_len, .get = corpus_get};
    feeder_dataset *ds = NULL;
    feeder_loader *ld = NULL;
    uint64_t bytes = 0;
    char err[256];
    int rc = feeder_dataset_create_fields(&cb, fields, 2, &c, &ds, err, sizeof(err));
    if (!rc && a.pack) { /* the same documents, from a fields packed file */
        struct timespec p0, p1;
        clock_gettime(CLOCK_MONOTONIC, &p0);
        rc = feeder_pack_fields(ds, a.pack, err, sizeof(err));
        feeder_dataset_destroy(ds);
        ds = NULL;
        if (!rc)
            rc = feeder_dataset_open_packed(a.pack, &ds, err, sizeof(err));
        clock_gettime(CLOCK_MONOTONIC, &p1);
        if (!rc)
            printf("packed %llu documents into %s in %.3f s\n", (unsigned long long)c.docs,
                   a.pack, (double)(p1.tv_sec - p0.tv_sec) + (p1.tv_nsec - p0.tv_nsec) * 1e-9);
    }
    if (rc)
        fprintf(stderr, "%s\n", err);
    if (!rc && !(rc = feeder_loader_create(ds, NULL, &ld))) {
        feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, a.batch);
        feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, a.workers);
        feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1);
        feeder_loader_set(ld, FEEDER_OPT_SEED, 42);
        feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1);
        feeder_loader_set_collate(ld, pad_to_8, &c);
        rc = run(ld, &c, &a, &bytes);
    }
    feeder_loader_destroy(ld);
    if (!rc && a.workers)
        print_worker_cpu(bytes);
    feeder_dataset_destroy(ds);
    free(c.tokens);
    free(c.start);
    return rc ? 1 : 0;
}
