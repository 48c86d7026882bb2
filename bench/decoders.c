#include "decoders.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "pack_fields.h"
#include "packer.h"

const char *const bd_decoder_extras[] = {"raw", "all", NULL};
const int bd_decoder_extra_values[] = {BD_RAW, BD_ALL};

const char *bd_decoder_name(int decoder)
{
    const char *name = feeder_option_value_name(FEEDER_OPT_DECODER, decoder);
    for (int i = 0; !name && bd_decoder_extras[i]; i++)
        if (bd_decoder_extra_values[i] == decoder)
            name = bd_decoder_extras[i];
    return name ? name : "?";
}

/* ------------------------------------------------------------------------ */
/* The RAW pack                                                              */
/* ------------------------------------------------------------------------ */

int bd_is_tar(const char *data)
{
    return strchr(data, '{') || fpk_ustar_magic(data);
}

void bd_raw_pack_path(char *out, size_t len, const char *data, uint32_t size, uint32_t resize,
                      int layout)
{
    /* "dir/" and "dir" name the same dataset and the same pack. A brace
     * pattern's braces go ("s-{0..3}.tar" packs to "s-0..3.tar-..."), and
     * its commas become '+', so the pack's name is no pattern itself. */
    char base[4096];
    size_t l = 0;
    for (const char *c = data; *c && l + 1 < sizeof(base); c++)
        if (*c != '{' && *c != '}')
            base[l++] = *c == ',' ? '+' : *c;
    base[l] = 0;
    while (l > 1 && base[l - 1] == '/')
        base[--l] = 0;
    if (resize == (uint32_t)(((uint64_t)size * 256 + 112) / 224) && layout == FEEDER_LAYOUT_NHWC)
        snprintf(out, len, "%s-%u.pack", base, size);
    else
        snprintf(out, len, "%s-%u-r%u-%s.pack", base, size, resize,
                 feeder_option_value_name(FEEDER_OPT_LAYOUT, layout));
}

static int newer(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec != b->tv_sec ? a->tv_sec > b->tv_sec : a->tv_nsec > b->tv_nsec;
}

/* The newest mtime of a tar shard set: each shard's (a member added,
 * changed or removed rewrites its shard). 0, or -1 with the failure in `bad`. */
static int tar_mtime(const char *data, struct timespec *out, char *bad, size_t badlen)
{
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    int rc = feeder_dataset_open_tar_pattern(data, &ds, err, sizeof(err));
    if (rc) {
        snprintf(bad, badlen, "%s: %s", data, err[0] ? err : feeder_strerror(rc));
        return -1;
    }
    memset(out, 0, sizeof(*out));
    const char *last = NULL; /* a shard's samples come together: stat each once */
    for (uint64_t i = 0; i < feeder_dataset_size(ds); i++) {
        const char *shard = NULL;
        struct stat st;
        if (feeder_dataset_tar_sample(ds, i, &shard, NULL, NULL, NULL, NULL) == FEEDER_EINVAL ||
            !shard || shard == last)
            continue;
        last = shard;
        if (stat(shard, &st) != 0) {
            snprintf(bad, badlen, "%s: %s", shard, strerror(errno));
            feeder_dataset_destroy(ds);
            return -1;
        }
        if (newer(&st.st_mtim, out))
            *out = st.st_mtim;
    }
    feeder_dataset_destroy(ds);
    return 0;
}

/* The newest mtime of the dataset: its root, every sample and every folder
 * holding one (a file removed or added changes its folder's mtime); of a
 * tar shard set, its shards'. 0 on success; the path that failed in `bad`. */
static int dataset_mtime(const char *data, struct timespec *out, char *bad, size_t badlen)
{
    if (bd_is_tar(data))
        return tar_mtime(data, out, bad, badlen);
    struct stat st;
    if (stat(data, &st) != 0) {
        snprintf(bad, badlen, "%s: %s", data, strerror(errno));
        return -1;
    }
    *out = st.st_mtim;
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    int rc = S_ISDIR(st.st_mode) ? feeder_dataset_open_folder(data, &ds, err, sizeof(err))
                                 : feeder_dataset_open_list(data, NULL, &ds, err, sizeof(err));
    if (rc) {
        snprintf(bad, badlen, "%s: %s", data, err[0] ? err : feeder_strerror(rc));
        return -1;
    }
    char last_dir[4096] = "";
    for (uint64_t i = 0; i < feeder_dataset_size(ds); i++) {
        const char *p = feeder_dataset_path(ds, i);
        if (!p)
            continue;
        if (stat(p, &st) != 0) {
            snprintf(bad, badlen, "%s: %s", p, strerror(errno));
            feeder_dataset_destroy(ds);
            return -1;
        }
        if (newer(&st.st_mtim, out))
            *out = st.st_mtim;
        const char *slash = strrchr(p, '/');
        if (!slash)
            continue;
        /* Samples come folder by folder: stat each folder once. */
        size_t dl = (size_t)(slash - p);
        if (dl < sizeof(last_dir) && (strncmp(last_dir, p, dl) != 0 || last_dir[dl] != 0)) {
            memcpy(last_dir, p, dl);
            last_dir[dl] = 0;
            if (stat(last_dir, &st) == 0 && newer(&st.st_mtim, out))
                *out = st.st_mtim;
        }
    }
    feeder_dataset_destroy(ds);
    return 0;
}

int bd_ensure_raw_pack(const char *prog, const char *data, const char *pack, uint32_t size,
                       uint32_t resize, int layout, int workers, int io)
{
    struct timespec dmt;
    char bad[4200];
    if (dataset_mtime(data, &dmt, bad, sizeof(bad)) != 0)
        cli_die(prog, "--decoder raw: %s", bad);
    struct stat st;
    const char *what = "packing";
    if (stat(pack, &st) == 0) {
        if (!newer(&dmt, &st.st_mtim)) {
            fprintf(stderr, "%s: reusing the RAW pack %s (not older than %s)\n", prog, pack,
                    data);
            return 1;
        }
        what = "rebuilding (the dataset is newer)";
    }
    fprintf(stderr, "%s: %s the RAW pack %s from %s (%ux%u, resize %u, %s)\n", prog, what, pack,
            data, size, size, resize, feeder_option_value_name(FEEDER_OPT_LAYOUT, layout));
    fpk_opts po;
    memset(&po, 0, sizeof(po));
    po.data = data;
    po.out = pack;
    po.height = po.width = size;
    po.resize = resize;
    po.layout = layout;
    po.workers = workers;
    po.batch = 64;
    po.io = io;
    po.allow_escape = 1; /* the dataset bench_loader reads anyway */
    fpk_pack(prog, &po);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* CPU time                                                                  */
/* ------------------------------------------------------------------------ */

static int live_pids(const feeder_loader *ld, int workers, int *pid)
{
    int n = 0;
    for (int i = 0; i < workers && i < BD_MAX_WORKERS; i++) {
        int p = feeder_loader_worker_pid(ld, i);
        if (p > 0)
            pid[n++] = p;
    }
    return n;
}

void bd_cpu_begin(bd_cpu *c, const feeder_loader *ld, int workers)
{
    c->self = bu_rusage_cpu_ns(0);
    c->children = bu_rusage_cpu_ns(1);
    c->n = live_pids(ld, workers, c->pid);
    for (int i = 0; i < c->n; i++)
        c->ns[i] = bu_proc_cpu_ns(c->pid[i]);
}

uint64_t bd_cpu_end(const bd_cpu *c, const feeder_loader *ld, int workers)
{
    uint64_t total = (bu_rusage_cpu_ns(0) - c->self) + (bu_rusage_cpu_ns(1) - c->children);
    int pid[BD_MAX_WORKERS];
    int n = live_pids(ld, workers, pid);
    for (int i = 0; i < n; i++) {
        int64_t now = bu_proc_cpu_ns(pid[i]);
        if (now < 0)
            continue;
        int64_t before = 0;
        for (int k = 0; k < c->n; k++)
            if (c->pid[k] == pid[i] && c->ns[k] >= 0)
                before = c->ns[k];
        if (now > before)
            total += (uint64_t)(now - before);
    }
    return total;
}

int bd_decoder_fell_back(const feeder_loader *ld, int asked, char *why, size_t len)
{
    if (asked != FEEDER_DECODER_NVJPEG && asked != FEEDER_DECODER_HYBRID)
        return 0;
    const char *reason = NULL;
    int runs = feeder_loader_decoder(ld, &reason);
    if (runs == asked)
        return 0;
    snprintf(why, len, "n/a: %s", reason && *reason ? reason
                                      : runs >= 0 && runs < BD_RAW ? bd_decoder_name(runs)
                                                                   : "another decoder runs");
    return 1;
}

/* ------------------------------------------------------------------------ */
/* --decoder all                                                             */
/* ------------------------------------------------------------------------ */

const char *bd_order_name(int shuffled)
{
    return shuffled ? "shuffled" : "sequential";
}

/* The GPU columns of a backend that decodes on the CPU only say "-". */
static int gpu_decoder(const bd_row *r)
{
    return r->decoder == FEEDER_DECODER_NVJPEG || r->decoder == FEEDER_DECODER_HYBRID;
}

static const char *const route_names[FEEDER_ROUTES] = {"progressive", "cmyk", "subsampling",
                                                        "size", "corrupt", "other", "room",
                                                        "format"};

void bd_routes_cell(char *cell, size_t cap, const uint64_t *routed)
{
    size_t at = 0;
    cell[0] = 0;
    for (int r = 0; r < FEEDER_ROUTES && at < cap; r++)
        at += (size_t)snprintf(cell + at, cap - at, "%s%llu", r ? "/" : "",
                               (unsigned long long)routed[r]);
}

void bd_routes_json(bu_sbuf *b, const uint64_t *routed)
{
    bu_sb_printf(b, ", \"cpu_routed\": {");
    for (int r = 0; r < FEEDER_ROUTES; r++)
        bu_sb_printf(b, "%s\"%s\": %llu", r ? ", " : "", route_names[r],
                     (unsigned long long)routed[r]);
    bu_sb_printf(b, "}");
}

void bd_table(const bd_row *rows, unsigned n, bu_sbuf *b)
{
    static const char *const head[] = {"backend", "order", "images/s", "MB/s",
                                       "CPU cores busy", "GPU busy %", "stall ms/epoch",
                                       "read µs/img", "decode µs/img", "transform µs/img",
                                       "GPU decode µs/img", "GPU fallback",
                                       "CPU routes p/c/s/z/x/o/r/f", "CPU share %"};
    static const int right[] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    bu_table t;
    bu_table_init(&t, 14, head, right);
    for (unsigned i = 0; i < n; i++) {
        const bd_row *r = &rows[i];
        char(*row)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(row[0], BU_TABLE_CELL, "%s", bd_decoder_name(r->decoder));
        snprintf(row[1], BU_TABLE_CELL, "%s", bd_order_name(r->shuffled));
        char(*c)[BU_TABLE_CELL] = row + 1; /* the figures, from c[1] */
        if (r->na) {
            snprintf(c[1], BU_TABLE_CELL, "%s", r->reason);
            bu_cells_dash(c, 2, 13);
            continue;
        }
        snprintf(c[1], BU_TABLE_CELL, "%.0f", r->images_per_s);
        snprintf(c[2], BU_TABLE_CELL, "%.1f", r->mb_per_s);
        snprintf(c[3], BU_TABLE_CELL, "%.2f", r->cpu_cores);
        bu_cell_or_dash(c[4], "%.1f", r->gpu_busy_pct, r->gpu_busy_pct >= 0);
        snprintf(c[5], BU_TABLE_CELL, "%.1f", r->stall_ms);
        snprintf(c[6], BU_TABLE_CELL, "%.1f", r->read_us);
        snprintf(c[7], BU_TABLE_CELL, "%.1f", r->decode_us);
        snprintf(c[8], BU_TABLE_CELL, "%.1f", r->xform_us);
        if (gpu_decoder(r)) {
            snprintf(c[9], BU_TABLE_CELL, "%.1f", r->gpu_decode_us);
            snprintf(c[10], BU_TABLE_CELL, "%llu", (unsigned long long)r->gpu_fallback);
            bd_routes_cell(c[11], BU_TABLE_CELL, r->routed);
        } else {
            bu_cells_dash(c, 9, 12);
        }
        bu_cell_or_dash(c[12], "%.1f", r->cpu_share_pct, r->cpu_share_pct >= 0);
    }
    bu_table_render(&t, b);
    bu_table_free(&t);
}

void bd_notes(const bd_row *rows, unsigned n, const char *raw_pack, bu_sbuf *b)
{
    static const char *const legend[] = {
        "images/s = the median epoch's images / wall seconds, from the first request (epoch 0 "
        "includes the start and its fork) to the end of the epoch",
        "MB/s = bytes read per second, median epoch (JPEG files; packed records for raw)",
        "CPU cores busy = CPU seconds of the loader process and its workers / wall seconds",
        "GPU busy % = GPU-timed copies plus GPU decode / wall time (\"-\": host batches)",
        "stall ms/epoch = feeder_next's wait (feeder_stats.wait_ns) per epoch",
        "read, decode, transform µs/img = worker time per delivered image, summed over workers",
        "GPU decode µs/img = GPU decode + resize, timed on the GPU, per delivered image",
        "GPU fallback = images of GPU-decoded batches decoded on the CPU instead",
        "CPU routes p/c/s/z/x/o/r/f = images the workers decoded because their header sends them to "
        "the CPU: progressive, CMYK/YCCK, a sampling the engine refuses, size (over 2 MP or the "
        "pixel limit), corrupt header, other (12-bit, arithmetic, lossless), room (the file did "
        "not fit its task's room in the slot, FEEDER_OPT_GPU_ROOM), format (not a JPEG: PNG, WebP)",
        "CPU share % = HYBRID's share of each batch the workers decode",
        "n/a = the GPU decoder did not run here (ROI would have), so nothing is reported",
        "order = the sampler's: shuffled, or sequential (file order); the decoders run in the "
        "order --shuffle asks, raw in both, shuffled first (the order training reads)",
    };
    bu_sb_printf(b, "Columns: %s\n", legend[0]);
    for (size_t i = 1; i < sizeof(legend) / sizeof(legend[0]); i++)
        bu_sb_printf(b, "- %s\n", legend[i]);
    if (raw_pack)
        bu_sb_printf(b, "- raw = %s: the images decoded once by feeder-pack's packer (EVAL "
                     "crops, also under --pipeline train), read through the mapping\n",
                     raw_pack);
    (void)rows;
    (void)n;
}

static void json_num(bu_sbuf *b, const char *key, double v, int valid)
{
    if (valid)
        bu_sb_printf(b, ", \"%s\": %.10g", key, v);
    else
        bu_sb_printf(b, ", \"%s\": null", key);
}

void bd_json_rows(const bd_row *rows, unsigned n, bu_sbuf *b)
{
    bu_sb_printf(b, "[");
    for (unsigned i = 0; i < n; i++) {
        const bd_row *r = &rows[i];
        bu_sb_printf(b, "%s\n    {\"backend\": ", i ? "," : "");
        bu_sb_json_str(b, bd_decoder_name(r->decoder));
        bu_sb_printf(b, ", \"order\": \"%s\", \"status\": \"%s\", \"reason\": ",
                     bd_order_name(r->shuffled), r->na ? "n/a" : "ok");
        if (r->na) {
            bu_sb_json_str(b, r->reason + (strncmp(r->reason, "n/a: ", 5) == 0 ? 5 : 0));
            bu_sb_printf(b, "}");
            continue;
        }
        bu_sb_printf(b, "null, \"device_batches\": %s", r->gpu ? "true" : "false");
        bu_sb_printf(b, ",\n     \"images_per_s\": %.1f, \"mb_per_s\": %.2f", r->images_per_s,
                     r->mb_per_s);
        bu_sb_printf(b, ", \"cpu_cores_busy\": %.3f", r->cpu_cores);
        json_num(b, "gpu_busy_pct", r->gpu_busy_pct, r->gpu_busy_pct >= 0);
        bu_sb_printf(b, ", \"stall_ms_per_epoch\": %.3f,\n     \"read_us_per_image\": %.3f, "
                     "\"decode_us_per_image\": %.3f, \"transform_us_per_image\": %.3f",
                     r->stall_ms, r->read_us, r->decode_us, r->xform_us);
        json_num(b, "gpu_decode_us_per_image", r->gpu_decode_us, gpu_decoder(r));
        json_num(b, "gpu_decoded", (double)r->gpu_decoded, gpu_decoder(r));
        json_num(b, "gpu_fallback", (double)r->gpu_fallback, gpu_decoder(r));
        if (gpu_decoder(r))
            bd_routes_json(b, r->routed);
        json_num(b, "hybrid_cpu_share_pct", r->cpu_share_pct, r->cpu_share_pct >= 0);
        bu_sb_printf(b, ", \"images_per_s_per_epoch\": [");
        for (unsigned e = 0; e < r->nep; e++)
            bu_sb_printf(b, "%s%.1f", e ? ", " : "", r->rate[e]);
        bu_sb_printf(b, "]}");
    }
    bu_sb_printf(b, "\n  ]");
}
