/*
 * JPEG records (--mode jpeg): each file's bytes as they are, or re-encoded
 * with --max-side (shrink.h), checked before they are written (pack_writer.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "pack_writer.h"
#include "shrink.h"

/* `len` bytes of fd into buf: at offset `off` (pread), or where the file
 * stands when off is negative (read). 0, -errno, or -EIO when the file ends
 * first. */
static int read_fully(int fd, uint8_t *buf, size_t len, int64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = off < 0 ? read(fd, buf + got, len - got)
                            : pread(fd, buf + got, len - got, (off_t)((uint64_t)off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        got += (size_t)k;
    }
    return 0;
}

/* A tar sample's image member, `len` bytes at its offset in its shard. A
 * shard shorter than that now: -EIO, as a file that changed size. */
static int read_member(const feeder_dataset *ds, uint64_t i, uint8_t *buf, size_t len,
                       const char **tar)
{
    uint64_t off;
    feeder_dataset_tar_sample(ds, i, tar, NULL, &off, NULL, NULL);
    int fd = open(*tar, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = read_fully(fd, buf, len, (int64_t)off);
    close(fd);
    return rc;
}

static int read_whole(const char *path, uint8_t *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = read_fully(fd, buf, len, -1);
    if (rc) {
        close(fd);
        return rc;
    }
    /* One more byte: the file must not have grown since it was measured. */
    uint8_t extra;
    ssize_t k = read(fd, &extra, 1);
    close(fd);
    return k == 0 ? 0 : -EIO;
}

/* Sample i's bytes, from its file or its tar member; `name` gets what
 * messages call it (the path, or "SHARD: key KEY"). */
static int read_source(const feeder_dataset *ds, uint64_t i, uint8_t *buf, size_t len,
                       char *name, size_t namelen)
{
    const char *path = feeder_dataset_path(ds, i), *key = NULL;
    if (path) {
        snprintf(name, namelen, "%s", path);
        return read_whole(path, buf, len);
    }
    int rc = read_member(ds, i, buf, len, &path);
    feeder_dataset_tar_sample(ds, i, NULL, &key, NULL, NULL, NULL);
    snprintf(name, namelen, "%s: key %s", path, key);
    return rc;
}

/* Does a JPEG reach its end-of-image marker? The marker segments are walked
 * by their lengths and each scan's entropy-coded data up to the next marker
 * (0xFF followed by 0x00 is a stuffed byte, by 0xD0-0xD7 a restart); bytes
 * after the EOI are allowed (camera trailers). A file cut anywhere has no
 * EOI: caught without decoding, where tjDecompressHeader3 reads only the
 * header. */
static int jpeg_reaches_eoi(const uint8_t *b, size_t n)
{
    if (n < 4 || b[0] != 0xFF || b[1] != 0xD8)
        return 0;
    size_t i = 2;
    int in_scan = 0;
    while (i + 1 < n) {
        if (b[i] != 0xFF) {
            if (!in_scan)
                return 0;
            const uint8_t *ff = memchr(b + i, 0xFF, n - i);
            if (!ff)
                return 0;
            i = (size_t)(ff - b);
            continue;
        }
        uint8_t m = b[i + 1];
        if (m == 0xFF) { /* fill byte before a marker */
            i++;
            continue;
        }
        if (m == 0xD9)
            return 1;
        if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
            if (m == 0x00 && !in_scan)
                return 0;
            i += 2; /* stuffed byte, TEM or restart: no length */
            continue;
        }
        if (i + 3 >= n)
            return 0;
        size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
        if (len < 2)
            return 0;
        i += 2 + len;
        in_scan = m == 0xDA;
    }
    return 0;
}

/* A JPEG file's header, as tjDecompressHeader3 reads it. */
typedef struct jhdr {
    int w, h, ss, cs;
} jhdr;

/* Sample i's bytes (a file, or a tar shard's member; `size` bytes, from the
 * plan) into buf, checked to be a JPEG TurboJPEG can parse that reaches its
 * end-of-image marker; `path` gets the name messages use. 1 when it is not
 * (listed as bad), else 0. */
static int read_jpeg(tjhandle tj, const feeder_dataset *ds, uint64_t i, uint8_t *buf,
                     uint64_t size, jhdr *hd, char *path, size_t pathlen)
{
    int rc = read_source(ds, i, buf, size, path, pathlen);
    if (rc == -EIO) {
        fpk_bad_add(i, "%s: changed size while being packed", path);
        return 1;
    }
    if (rc) {
        fpk_bad_add(i, "%s: %s", path, strerror(-rc));
        return 1;
    }
    /* A stream cut short after its tables "succeeds" without a frame: the
     * size must be set too. */
    hd->w = hd->h = 0;
    if (tjDecompressHeader3(tj, buf, (unsigned long)size, &hd->w, &hd->h, &hd->ss, &hd->cs) != 0 ||
        hd->w <= 0 || hd->h <= 0) {
        fpk_bad_add(i, "%s: not a JPEG TurboJPEG can read: %s", path, tjGetErrorStr2(tj));
        return 1;
    }
    if (!jpeg_reaches_eoi(buf, size)) {
        fpk_bad_add(i,
                    "%s: truncated JPEG: no end-of-image marker (FF D9) after its last scan "
                    "(--verify decodes every record)",
                    path);
        return 1;
    }
    return 0;
}

/* What --max-side did, for the summary. */
uint64_t fpk_shrunk, fpk_shrunk_from, fpk_shrunk_to;

/* The record of sample i's file read into buf: its own bytes, or (sk set,
 * the image larger than --max-side) the re-encoded ones; NULL when it cannot
 * be re-encoded (listed as bad). */
static const uint8_t *record_bytes(fpk_shrinker *sk, uint64_t i, const char *path,
                                   const uint8_t *buf, uint64_t size, const jhdr *hd,
                                   uint64_t *rlen)
{
    *rlen = size;
    if (!sk)
        return buf;
    const uint8_t *out;
    size_t olen;
    char err[1024];
    int rc = fpk_shrink(sk, buf, size, hd->w, hd->h, hd->ss, hd->cs, &out, &olen, err,
                        sizeof(err));
    if (rc < 0) {
        fpk_bad_add(i, "%s: --max-side: %s", path, err);
        return NULL;
    }
    if (rc == 0)
        return buf;
    *rlen = olen;
    return out;
}

static uint8_t *alloc_biggest(const uint64_t *sizes, uint64_t n)
{
    uint64_t biggest = 0;
    for (uint64_t i = 0; i < n; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    uint8_t *buf = malloc(biggest ? biggest : 1);
    if (!buf)
        fpk_die("out of memory for a %llu-byte file", (unsigned long long)biggest);
    return buf;
}

static fpk_shrinker *open_shrinker(const fpk_opts *o)
{
    if (!o->max_side)
        return NULL;
    fpk_shrinker *sk = fpk_shrinker_create(o->max_side, o->quality);
    if (!sk)
        fpk_die("out of memory for the --max-side encoder");
    return sk;
}

/* --max-side: the records' sizes, before the shards are planned. Each large
 * file is re-encoded here and again when written (the encoder is
 * deterministic), so no record is held in memory between the passes. */
void fpk_plan_shrunk(const fpk_opts *o, feeder_dataset *ds, const uint64_t *fsizes,
                     uint64_t *sizes, progress *pg)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        fpk_die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    fpk_shrinker *sk = open_shrinker(o);
    uint64_t n = feeder_dataset_size(ds);
    uint8_t *buf = alloc_biggest(fsizes, n);
    for (uint64_t i = 0; i < n; i++) {
        char path[8400];
        jhdr hd;
        if (fpk_isbad[i] || read_jpeg(tj, ds, i, buf, fsizes[i], &hd, path, sizeof(path)))
            continue;
        const uint8_t *rec = record_bytes(sk, i, path, buf, fsizes[i], &hd, &sizes[i]);
        if (rec && rec != buf) {
            fpk_shrunk++;
            fpk_shrunk_from += fsizes[i];
            fpk_shrunk_to += sizes[i];
        }
        fpk_progress_draw(pg, i + 1, 0, 0);
    }
    free(buf);
    fpk_shrinker_destroy(sk);
    tjDestroy(tj);
}

/* JPEG: each file's bytes as they are (or re-encoded with --max-side),
 * checked to be a JPEG TurboJPEG can parse and to reach its end-of-image
 * marker; record r is keep[r]'s. fsizes are the files' sizes, sizes the
 * records' (the same array without --max-side), both by dataset index. A bad
 * file is listed and its record left a hole (fpk_pack then writes nothing,
 * or packs again without it). */
uint64_t fpk_write_jpeg(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep,
                        uint64_t nk, const uint64_t *fsizes, const uint64_t *sizes, shard *v,
                        uint32_t ns, progress *pg)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        fpk_die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    fpk_shrinker *sk = open_shrinker(o);
    uint64_t n = feeder_dataset_size(ds), bytes = 0;
    uint8_t *buf = alloc_biggest(fsizes, n);
    uint32_t s = 0, cur = UINT32_MAX;
    uint64_t pos = 0; /* where the next record goes in its shard */
    for (uint64_t r = 0; r < nk; r++) {
        uint64_t i = keep[r];
        char path[8400];
        jhdr hd;
        uint64_t rlen;
        const uint8_t *rec = NULL;
        s = fpk_shard_of(v, ns, r, s);
        shard *sh = &v[s];
        if (s != cur) {
            cur = s;
            pos = sh->h.records_off;
        }
        if (!read_jpeg(tj, ds, i, buf, fsizes[i], &hd, path, sizeof(path)))
            rec = record_bytes(sk, i, path, buf, fsizes[i], &hd, &rlen);
        if (rec && rlen != sizes[i])
            fpk_die("%s: re-encoded to %llu bytes, %llu when the pack was planned", path,
                (unsigned long long)rlen, (unsigned long long)sizes[i]);
        if (!rec) {
            pos += sizes[i]; /* a hole: this pass's output is not kept */
            continue;
        }
        uint64_t local = r - sh->first;
        fpk_pwrite_all(sh, rec, rlen, pos);
        feeder__pack_entry_encode(sh->index + local * FEEDER__PACK_ENTRY_BYTES, pos, rlen,
                                  feeder__crc32c(feeder__pack_crc_seed(FEEDER__PACK_VERSION,
                                                                       feeder_dataset_label(ds, i)),
                                                 rec, rlen));
        sh->labels[local] = feeder_dataset_label(ds, i);
        pos += rlen;
        bytes += rlen;
        fpk_progress_draw(pg, r + 1, bytes, 0);
    }
    free(buf);
    fpk_shrinker_destroy(sk);
    tjDestroy(tj);
    return bytes;
}
