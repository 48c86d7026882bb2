/*
 * The packer behind feeder-pack (tools/feeder-pack.c) and bench_loader's
 * --decoder raw cache (bench/decoders.c): an image folder or list file in, a
 * packed file out (docs/FORMAT.md). See packer.h; feeder-pack.c's comment
 * describes the modes, the temporary files and the signals.
 *
 * This file runs a pack: the source opened, each record planned, the passes
 * that write it (--skip-bad), --mode fields, the summary. The records of
 * each mode are written by pack_raw.c and pack_jpeg.c, the shards and all
 * the modes share by pack_writer.c (pack_writer.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack_fields.h"
#include "pack_writer.h"
#include "packer.h"

/* ------------------------------------------------------------------------ */
/* The source dataset                                                        */
/* ------------------------------------------------------------------------ */

static feeder_dataset *open_source(const char *path, int allow_escape)
{
    struct stat st;
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    int rc;
    /* WebDataset shards: a brace range of them, or one. */
    if (strchr(path, '{') || (stat(path, &st) == 0 && S_ISREG(st.st_mode) && fpk_ustar_magic(path))) {
        if ((rc = feeder_dataset_open_tar_pattern(path, &ds, err, sizeof(err))))
            fpk_die("%s", err[0] ? err : feeder_strerror(rc));
        return ds;
    }
    if (stat(path, &st) != 0)
        fpk_usage_die("--data '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        rc = feeder_dataset_open_folder(path, &ds, err, sizeof(err));
    else if (S_ISREG(st.st_mode))
        rc = feeder_dataset_open_list2(path, NULL, allow_escape ? FEEDER_LIST_ALLOW_ESCAPE : 0,
                                       &ds, err, sizeof(err));
    else
        fpk_usage_die("--data '%s': neither a folder nor a list file", path);
    /* The library's message names its flag; this tool's user has an option. */
    const char *flag = "FEEDER_LIST_ALLOW_ESCAPE allows it";
    char *at = rc == FEEDER_EPATH ? strstr(err, flag) : NULL;
    if (at)
        fpk_die("%.*s--allow-escape allows it%s", (int)(at - err), err, at + strlen(flag));
    if (rc)
        fpk_die("%s", err[0] ? err : feeder_strerror(rc));
    return ds;
}

/* Class names of a folder dataset, back to back with their NULs. */
static char *class_block(const feeder_dataset *ds, uint64_t *bytes, uint64_t *count)
{
    uint64_t n = feeder_dataset_num_classes(ds), len = 0;
    *bytes = *count = 0;
    if (!n || !feeder_dataset_class_name(ds, 0))
        return NULL;
    for (uint64_t k = 0; k < n; k++)
        len += strlen(feeder_dataset_class_name(ds, k)) + 1;
    char *b = malloc(len);
    if (!b)
        fpk_die("out of memory");
    char *p = b;
    for (uint64_t k = 0; k < n; k++) {
        size_t l = strlen(feeder_dataset_class_name(ds, k)) + 1;
        memcpy(p, feeder_dataset_class_name(ds, k), l);
        p += l;
    }
    *bytes = len;
    *count = n;
    return b;
}

/* The fields of a --mode fields pack, for the summary. */
static char g_fields_desc[400];

/* A tar sample's image member size; 0 for a bad sample (listed). */
static uint64_t tar_member_size(const feeder_dataset *ds, uint64_t i)
{
    const char *tar, *key, *problem;
    uint64_t size;
    if (feeder_dataset_tar_sample(ds, i, &tar, &key, NULL, &size, &problem))
        fpk_bad_add(i, "%s: key %s: %s", tar, key, problem);
    else if (size == 0)
        fpk_bad_add(i, "%s: key %s: empty image member", tar, key);
    return fpk_isbad[i] ? 0 : size;
}

/* The header every shard starts from, and each sample's record size (JPEG:
 * its file's, which decides the shards up front; RAW: one tensor). A file
 * that is missing, empty or not a regular file is listed as bad. Returns the
 * RAW record size (0 for JPEG). */
static uint64_t plan_records(const fpk_opts *o, feeder_dataset *ds, uint64_t n,
                             uint64_t num_classes, feeder__pack_header *proto, uint64_t *sizes)
{
    memset(proto, 0, sizeof(*proto));
    proto->version = FEEDER__PACK_VERSION;
    proto->header_bytes = FEEDER__PACK_HEADER_BYTES;
    proto->dtype = FEEDER__PACK_DTYPE_UINT8;
    proto->label_type = FEEDER__PACK_LABEL_INT64;
    proto->num_classes = num_classes;
    if (o->jpeg) {
        proto->kind = FEEDER_RECORD_JPEG;
        for (uint64_t i = 0; i < n; i++) {
            struct stat st;
            const char *p = feeder_dataset_path(ds, i);
            if (!p) {
                sizes[i] = tar_member_size(ds, i);
                continue;
            }
            sizes[i] = 0;
            if (stat(p, &st) != 0)
                fpk_bad_add(i, "%s: %s", p, strerror(errno));
            else if (!S_ISREG(st.st_mode))
                fpk_bad_add(i, "%s: not a regular file", p);
            else if (st.st_size == 0)
                fpk_bad_add(i, "%s: empty file", p);
            else
                sizes[i] = (uint64_t)st.st_size;
        }
        return 0;
    }
    uint64_t rb = (uint64_t)o->height * o->width * fpk_raw_channels(o);
    proto->kind = FEEDER_RECORD_RAW;
    proto->layout = (uint32_t)o->layout;
    proto->height = o->height;
    proto->width = o->width;
    proto->channels = fpk_raw_channels(o);
    proto->record_bytes = rb;
    for (uint64_t i = 0; i < n; i++)
        sizes[i] = rb;
    return rb;
}

static void summary(const fpk_opts *o, const shard *v, uint32_t ns, uint64_t n, uint64_t t0)
{
    uint64_t total = 0;
    for (uint32_t s = 0; s < ns; s++)
        total += v[s].file_bytes;
    double secs = (fpk_now_ns() - t0) / 1e9;
    char what[512];
    if (o->fields)
        snprintf(what, sizeof(what), "fields: %s", g_fields_desc);
    else if (o->jpeg && o->max_side)
        snprintf(what, sizeof(what), "JPEG; %llu re-encoded at max side %u, quality %d: "
                 "%.1f MB to %.1f MB",
                 (unsigned long long)fpk_shrunk, o->max_side, o->quality, fpk_shrunk_from / 1e6,
                 fpk_shrunk_to / 1e6);
    else if (o->jpeg)
        snprintf(what, sizeof(what), "JPEG");
    else
        snprintf(what, sizeof(what), "RAW %ux%ux%u %s", o->height, o->width, fpk_raw_channels(o),
                 o->layout ? "nchw" : "nhwc");
    fprintf(stderr, "%s: %s: %llu records (%s) in %u file%s, %.1f MB, %.1f s (%.0f %s/s)%s\n",
            fpk_prog, ns == 1 ? v[0].name : o->out, (unsigned long long)n, what, ns,
            ns == 1 ? "" : "s", total / 1e6, secs, secs > 0 ? n / secs : 0.0,
            o->fields ? "samples" : "images", o->verify ? "; verified" : "");
}

/* The bytes --mode fields has read, for the progress bar's last line. */
static uint64_t g_fields_bytes;

static void tick(void *user, uint64_t done, uint64_t bytes)
{
    g_fields_bytes = bytes;
    fpk_progress_draw(user, done, bytes, 0);
}

/* --mode fields' output: OUT.tmp.PID, and the OUT.tmp.PID.tmp that
 * feeder_pack_fields writes first; both removed on a signal or an error. */
static shard fields_output(const fpk_opts *o, uint64_t n)
{
    shard one = {.count = n, .fd = -1, .name = fpk_strdup_printf("%s", o->out)};
    one.tmp = fpk_strdup_printf("%s.tmp.%d", o->out, (int)getpid());
    if (!(fpk_tmp_names = calloc(2, sizeof(char *))))
        fpk_die("out of memory");
    fpk_tmp_names[0] = one.tmp;
    fpk_tmp_names[1] = fpk_strdup_printf("%s.tmp", one.tmp);
    fpk_tmp_count = 2;
    return one;
}

/* --mode fields: the library's feeder_pack_fields writes the file, --verify
 * reads it back, then it gets its name. */
static void pack_fields(const fpk_opts *o)
{
    uint64_t t0 = fpk_now_ns();
    progress pg = {.on = o->progress, .what = "packing fields", .t0 = t0};
    fpk_fields_opts fo = {.data = o->data, .spec = o->fields_spec, .max_bytes = o->max_bytes,
                          .allow_escape = o->allow_escape, .tick = tick, .tick_user = &pg};
    char err[2048];
    fpk_fields *f;
    int rc = fpk_fields_open(&fo, &f, err, sizeof(err));
    if (rc == 2)
        fpk_usage_die("%s", err);
    if (rc)
        fpk_die("%s", err);
    uint64_t n = fpk_fields_count(f);
    pg.total = n;
    shard one = fields_output(o, n);
    if (feeder_pack_fields(fpk_fields_dataset(f), one.tmp, err, sizeof(err)))
        fpk_die("%s", fpk_fields_last_error(f) ? fpk_fields_last_error(f) : err);
    fpk_progress_draw(&pg, n, g_fields_bytes, 1);
    if (o->verify && fpk_fields_verify(f, one.tmp, o->out, o->workers, o->batch, err,
                                       sizeof(err)))
        fpk_die("verify: %s", err);
    struct stat st;
    one.file_bytes = stat(one.tmp, &st) == 0 ? (uint64_t)st.st_size : 0;
    fpk_tmp_count = 1;
    free(fpk_tmp_names[1]);
    fpk_publish(o, &one, 1);
    fpk_fields_describe(f, g_fields_desc, sizeof(g_fields_desc));
    if (!o->quiet)
        summary(o, &one, 1, n, t0);
    fpk_fields_close(f);
    free(one.name);
    free(one.tmp);
    free(fpk_tmp_names);
    fpk_tmp_names = NULL;
}

/* The samples not listed as bad, in dataset order, into keep; how many. */
static uint64_t keep_list(uint64_t n, uint64_t *keep)
{
    uint64_t nk = 0;
    for (uint64_t i = 0; i < n; i++)
        if (!fpk_isbad[i])
            keep[nk++] = i;
    return nk;
}

/* Plan, open and write the shards of keep[0..nk); a bad file found while
 * writing is listed (fpk_nbad grows). */
static shard *write_pass(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep, uint64_t nk,
                         const uint64_t *fsizes, const uint64_t *sizes, uint64_t rb,
                         const feeder__pack_header *proto, uint64_t classes_bytes, uint32_t *ns)
{
    uint64_t *rsizes = malloc((nk ? nk : 1) * sizeof(*rsizes));
    if (!rsizes)
        fpk_die("out of memory");
    for (uint64_t r = 0; r < nk; r++)
        rsizes[r] = sizes[keep[r]];
    shard *v = fpk_plan_shards(rsizes, nk, o->shard_size, classes_bytes, ns);
    free(rsizes);
    fpk_name_shards(o, v, *ns);
    fpk_open_shards(v, *ns, proto, classes_bytes, nk);
    progress pg = {.on = o->progress, .what = o->jpeg ? "packing JPEG" : "packing RAW",
                   .total = nk, .t0 = fpk_now_ns()};
    uint64_t bytes = o->jpeg ? fpk_write_jpeg(o, ds, keep, nk, fsizes, sizes, v, *ns, &pg)
                             : fpk_write_raw(o, ds, keep, nk, v, *ns, rb, &pg);
    fpk_progress_draw(&pg, nk, bytes, 1);
    return v;
}

/* The bad files: without --skip-bad every one is listed and nothing is
 * written (exit 1); with it, an empty remainder is an error too. */
static void bad_verdict(const fpk_opts *o, uint64_t n)
{
    if (!fpk_nbad)
        return;
    if (!o->skip_bad) {
        fpk_bad_list("");
        fpk_die("%llu bad file%s (listed above): nothing written; --skip-bad packs the others",
                (unsigned long long)fpk_nbad, fpk_nbad == 1 ? "" : "s");
    }
    if (fpk_nbad == n) {
        fpk_bad_list("skipped ");
        fpk_die("every one of the %llu files is bad (listed above): nothing to pack",
                (unsigned long long)n);
    }
}

void fpk_pack(const char *prog, const fpk_opts *op)
{
    fpk_prog = prog;
    const fpk_opts o = *op;
    fpk_install_handlers();
    if (o.fields) {
        pack_fields(&o);
        return;
    }
    uint64_t t0 = fpk_now_ns();
    feeder_dataset *ds = open_source(o.data, o.allow_escape);
    uint64_t n = feeder_dataset_size(ds);
    uint64_t classes_bytes, num_classes;
    char *classes = class_block(ds, &classes_bytes, &num_classes);
    uint64_t *sizes = malloc((n ? n : 1) * sizeof(*sizes));
    uint64_t *keep = malloc((n ? n : 1) * sizeof(*keep));
    if (!sizes || !keep || !(fpk_isbad = calloc(n ? n : 1, 1)))
        fpk_die("out of memory");
    feeder__pack_header proto;
    uint64_t rb = plan_records(&o, ds, n, num_classes, &proto, sizes);
    uint64_t *fsizes = sizes;
    if (o.jpeg && o.max_side) {
        if (!(fsizes = malloc((n ? n : 1) * sizeof(*fsizes))))
            fpk_die("out of memory");
        memcpy(fsizes, sizes, n * sizeof(*fsizes));
        progress pp = {.on = o.progress, .what = "sizing --max-side", .total = n,
                       .t0 = fpk_now_ns()};
        fpk_plan_shrunk(&o, ds, fsizes, sizes, &pp);
        fpk_progress_draw(&pp, n, 0, 1);
    }
    /* A bad file found while writing leaves a hole: with --skip-bad the
     * shards are planned and written again without it. The second pass finds
     * none unless a file changes meanwhile. */
    uint32_t ns = 0;
    shard *v = NULL;
    uint64_t nk = 0;
    for (int pass = 0;; pass++) {
        uint64_t before = fpk_nbad;
        nk = keep_list(n, keep);
        if (nk == 0)
            break;
        v = write_pass(&o, ds, keep, nk, fsizes, sizes, rb, &proto, classes_bytes, &ns);
        if (fpk_nbad == before || !o.skip_bad)
            break;
        if (pass == 1)
            fpk_die("%s (it went bad between two passes over the files)",
                    fpk_bad[fpk_nbad - 1].line);
        fpk_discard_shards(v, ns);
        v = NULL;
        ns = 0;
    }
    bad_verdict(&o, n);
    for (uint32_t s = 0; s < ns; s++)
        fpk_finish_shard(&v[s], classes, classes_bytes);
    fpk_publish(&o, v, ns);
    if (o.verify)
        fpk_verify(&o, v, ns, o.jpeg);
    if (fpk_nbad) {
        fpk_bad_list("skipped ");
        fprintf(stderr, "%s: skipped %llu bad file%s (--skip-bad); packed the other %llu\n",
                fpk_prog, (unsigned long long)fpk_nbad, fpk_nbad == 1 ? "" : "s",
                (unsigned long long)nk);
    }
    if (!o.quiet)
        summary(&o, v, ns, nk, t0);
    fpk_free_shards(v, ns);
    if (fsizes != sizes)
        free(fsizes);
    free(sizes);
    free(keep);
    free(classes);
    fpk_bad_free();
    feeder_dataset_destroy(ds);
}
