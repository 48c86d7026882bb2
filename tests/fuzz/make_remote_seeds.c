/*
 * Writes tests/fuzz/corpus_remote/ (committed; rerun only to change it):
 *   cc -O2 tests/fuzz/make_remote_seeds.c -o /tmp/mrs && /tmp/mrs
 * from the repository root. Each seed is fuzz_remote.c's input: a flags
 * byte, then the server's responses in the order the requests come,
 * separated by SEP, made from the packed and tar seeds beside it: honest
 * exchanges for every entry point (and signed, through s3://), and the
 * hostile ones a fuzzer would take long to find: a chunked body, redirects
 * (relative, to another path, a loop, to file://, to another host name),
 * an ETag or size that changes between requests, a short body, an oversize
 * one, a 503 then a retry, a server .idx, a garbage .idx, a 200 to a range,
 * a 206 without a Content-Range.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEP "\n~~next~~\n"

typedef struct buf {
    uint8_t *p;
    size_t n;
} buf;

static buf slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    buf b = {malloc(1 << 20), 0};
    if (!f || !b.p) {
        perror(path);
        exit(1);
    }
    b.n = fread(b.p, 1, 1 << 20, f);
    fclose(f);
    return b;
}

static void add(buf *o, const void *p, size_t n)
{
    o->p = realloc(o->p, o->n + n);
    memcpy(o->p + o->n, p, n);
    o->n += n;
}

static void addf(buf *o, const char *fmt, ...)
{
    char s[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s, sizeof(s), fmt, ap);
    va_end(ap);
    add(o, s, (size_t)n);
}

static void sep(buf *o)
{
    add(o, SEP, strlen(SEP));
}

/* 206 for bytes [lo, hi] of f. */
static void part(buf *o, const buf *f, size_t lo, size_t hi, const char *etag)
{
    addf(o, "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\nContent-Range: bytes "
            "%zu-%zu/%zu\r\nETag: %s\r\n\r\n", hi - lo + 1, lo, hi, f->n, etag);
    add(o, f->p + lo, hi - lo + 1);
}

/* 200 with the whole of f, Content-Length `clen` and `n` bytes of body. */
static void whole_n(buf *o, const buf *f, size_t clen, size_t n, const char *etag)
{
    addf(o, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nETag: %s\r\n\r\n", clen, etag);
    add(o, f->p, n < f->n ? n : f->n);
    for (size_t i = f->n; i < n; i++)
        add(o, "\0", 1);
}

static void whole(buf *o, const buf *f, const char *etag)
{
    whole_n(o, f, f->n, f->n, etag);
}

static void chunked(buf *o, const buf *f, const char *etag)
{
    addf(o, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: %s\r\n\r\n", etag);
    for (size_t at = 0; at < f->n; at += 5000) {
        size_t k = f->n - at < 5000 ? f->n - at : 5000;
        addf(o, "%zx\r\n", k);
        add(o, f->p + at, k);
        addf(o, "\r\n");
    }
    addf(o, "0\r\n\r\n");
}

static void redirect(buf *o, int status, const char *where)
{
    addf(o, "HTTP/1.1 %d Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n", status, where);
}

static void status(buf *o, int code)
{
    addf(o, "HTTP/1.1 %d Whatever\r\nContent-Length: 0\r\n\r\n", code);
}

static void put(const char *name, uint8_t flags, const buf *o)
{
    char p[256];
    snprintf(p, sizeof(p), "tests/fuzz/corpus_remote/%s", name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(&flags, 1, 1, f) != 1 || fwrite(o->p, 1, o->n, f) != o->n || fclose(f)) {
        perror(p);
        exit(1);
    }
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

enum { PACKED = 0, SHARDS = 1, TAR_SHARDS = 2, TAR = 3, S3 = 4, RETRY = 8 };

int main(void)
{
    buf pk = slurp("tests/fuzz/corpus_packed/raw4.pack");
    buf jp = slurp("tests/fuzz/corpus_packed/jpeg3.pack");
    buf ta = slurp("tests/fuzz/corpus_tar/ustar.tar");
    buf gt = slurp("tests/fuzz/corpus_tar/gnu.tar");
    buf gi = slurp("tests/fuzz/corpus_tar/gnu.idx");
    const char *e1 = "\"e1\"", *e2 = "\"e2\"";
    buf o;

#define SEED(name, flags, ...) \
    do { \
        o = (buf){NULL, 0}; \
        __VA_ARGS__; \
        put(name, flags, &o); \
        free(o.p); \
    } while (0)

    /* feeder_dataset_open_packed: the header page, then the whole file. */
    SEED("packed_ok", PACKED, part(&o, &pk, 0, 4095, e1); sep(&o); whole(&o, &pk, e1));
    SEED("packed_jpeg_ok", PACKED, part(&o, &jp, 0, 4095, e1); sep(&o); whole(&o, &jp, e1));
    SEED("packed_chunked", PACKED, part(&o, &pk, 0, 4095, e1); sep(&o); chunked(&o, &pk, e1));
    SEED("packed_redirects", PACKED,
         redirect(&o, 302, "/d/b.pack"); sep(&o); part(&o, &pk, 0, 4095, e1); sep(&o);
         redirect(&o, 301, "http://%H/elsewhere/a.pack"); sep(&o); whole(&o, &pk, e1));
    SEED("packed_redirect_loop", PACKED,
         for (int i = 0; i < 12; i++) {
             redirect(&o, 302, "/d/a.pack?again");
             sep(&o);
         });
    SEED("packed_redirect_file", PACKED,
         part(&o, &pk, 0, 4095, e1); sep(&o); redirect(&o, 302, "file:///etc/passwd"));
    SEED("packed_redirect_host", PACKED,
         part(&o, &pk, 0, 4095, e1); sep(&o); redirect(&o, 307, "http://%L/d/a.pack");
         sep(&o); whole(&o, &pk, e1));
    SEED("packed_etag_changed", PACKED,
         part(&o, &pk, 0, 4095, e1); sep(&o); whole(&o, &pk, e2));
    SEED("packed_short_body", PACKED,
         part(&o, &pk, 0, 4095, e1); sep(&o); whole_n(&o, &pk, pk.n, pk.n / 2, e1));
    SEED("packed_oversize_body", PACKED,
         part(&o, &pk, 0, 4095, e1); sep(&o); whole_n(&o, &pk, pk.n + 100, pk.n + 100, e1));
    SEED("packed_length_under_body", PACKED,
         part(&o, &pk, 0, 4095, e1); sep(&o); whole_n(&o, &pk, pk.n - 100, pk.n, e1));
    SEED("packed_200_to_range", PACKED, whole(&o, &pk, e1));
    SEED("packed_503_retried", PACKED | RETRY,
         status(&o, 503); sep(&o); part(&o, &pk, 0, 4095, e1); sep(&o); status(&o, 500);
         sep(&o); whole(&o, &pk, e1));
    SEED("packed_404", PACKED, status(&o, 404));
    SEED("packed_probe_no_size", PACKED,
         addf(&o, "HTTP/1.1 206 Partial Content\r\nContent-Length: 4096\r\n\r\n");
         add(&o, pk.p, 4096); sep(&o); addf(&o, "HTTP/1.1 200 OK\r\n\r\n"); add(&o, pk.p, pk.n));

    /* Signed (s3://): a redirect home is followed, one to another host name
     * is refused by hand. */
    SEED("s3_packed_ok", PACKED | S3, part(&o, &pk, 0, 4095, e1); sep(&o); whole(&o, &pk, e1));
    SEED("s3_redirect_home", PACKED | S3,
         redirect(&o, 307, "http://%H/bkt/b.pack"); sep(&o); part(&o, &pk, 0, 4095, e1);
         sep(&o); whole(&o, &pk, e1));
    SEED("s3_redirect_away", PACKED | S3,
         part(&o, &pk, 0, 4095, e1); sep(&o); redirect(&o, 302, "http://%L/bkt/a.pack"));

    /* feeder_dataset_open_shards of a pack: the header page, the index's
     * range, then (at the first batch) the whole file. */
    size_t rec = (size_t)le64(pk.p + 104);
    SEED("shards_ok", SHARDS,
         part(&o, &pk, 0, 4095, e1); sep(&o); part(&o, &pk, 4096, rec - 1, e1); sep(&o);
         whole(&o, &pk, e1));
    SEED("shards_index_changed", SHARDS,
         part(&o, &pk, 0, 4095, e1); sep(&o); part(&o, &pk, 4096, rec - 1, e2); sep(&o);
         whole(&o, &pk, e1));
    SEED("shards_whole_changed", SHARDS | S3,
         part(&o, &pk, 0, 4095, e1); sep(&o); part(&o, &pk, 4096, rec - 1, e1); sep(&o);
         whole_n(&o, &pk, pk.n + 4096, pk.n + 4096, e1));

    /* Tar shards: the first block (size, ETag), <url>.idx, then the whole
     * shard (walked at open when there is no index, else at the first
     * batch). */
    SEED("tar_walk", TAR_SHARDS,
         part(&o, &ta, 0, 511, e1); sep(&o); status(&o, 404); sep(&o); whole(&o, &ta, e1));
    SEED("tar_open_tar", TAR,
         part(&o, &ta, 0, 511, e1); sep(&o); status(&o, 404); sep(&o); chunked(&o, &ta, e1));
    SEED("tar_server_index", TAR_SHARDS,
         part(&o, &gt, 0, 511, e1); sep(&o); whole(&o, &gi, "\"i\""); sep(&o);
         whole(&o, &gt, e1));
    SEED("tar_garbage_index", TAR_SHARDS,
         part(&o, &ta, 0, 511, e1); sep(&o); whole(&o, &pk, "\"i\""); sep(&o);
         whole(&o, &ta, e1));
    SEED("tar_s3_changed", TAR | S3,
         part(&o, &ta, 0, 511, e1); sep(&o); status(&o, 404); sep(&o); whole(&o, &ta, e2));
    return 0;
}
