/*
 * bench_loader: how many images per second feeder delivers, and where the
 * time goes.
 *
 *   bench_loader
 *   bench_loader --workers 4 --prefetch 2
 *   bench_loader --threads-sweep 0,1,2,4,8,15 --pipeline train --json
 *   bench_loader --data /data/imagenet/val --batch 256 --epochs 5 --checksum
 *   bench_loader --data val-224.pack --threads-sweep 1,2,4,8 --packed-read uring
 *
 * --data may name a packed file (feeder-pack; recognised by its magic). A RAW
 * pack sets the sample shape: --size, --resize, --layout and --pipeline are
 * passed on only when given (and must then agree with the file). Every table
 * reports GB/s of delivered samples (count x height x width x 3 per second)
 * beside images/s, the figure that matters for packed tensors.
 *
 * With no --data it first makes the default dataset (2,000 images in 10 class
 * folders cut from bench/photos: the web-like mix of bench/mixset.h, or
 * --set imagenet|uniform) under $FEEDER_DATA or ~/.cache/feeder/SET-2000,
 * and reuses it on later runs.
 *
 * Each configuration (one worker count) gets its own loader and runs
 * --epochs epochs. Every epoch is timed from the moment the consumer asks for
 * its first batch (for epoch 0 that includes feeder_loader_start, i.e. the
 * fork) to the moment it holds FEEDER_DONE, just as compare_torch.py times
 * PyTorch from iter(loader) to the end of the loop. The first epoch pays page
 * cache and fork costs: it is the warm-up, reported on its own line, and the
 * report's first line is the steady figure, the median of the epochs after
 * it (--epochs 3 by default, so two). Without --workers there is one worker
 * per CPU this process may use (sched_getaffinity).
 *
 * The result is a Markdown table on stdout (or JSON with --json) and, with
 * --append-to FILE, the same table with the command line, date and machine
 * appended to FILE; nothing under the checkout changes unless asked.
 * Progress lines go to stderr.
 *
 * --checksum hashes every delivered sample (pixels, then label) in delivery
 * order with XXH64; with in-order delivery it must not change with --workers,
 * --prefetch or --batch, and a sweep that finds it changing exits with 3.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_step.h"
#include "loader.h"
#include "mixset.h"

/* ------------------------------------------------------------------------ */
/* --decoder all: every backend on the same files, one table                 */
/* ------------------------------------------------------------------------ */

static void to_row(const run_res *r, int decoder, int shuffled, bd_row *w)
{
    w->decoder = decoder;
    w->shuffled = shuffled;
    w->na = r->na;
    snprintf(w->reason, sizeof(w->reason), "%s", r->na_reason);
    w->gpu = r->gpu;
    w->nep = r->nep;
    memcpy(w->rate, r->rate, r->nep * sizeof(double));
    w->images_per_s = r->med_rate;
    w->mb_per_s = r->mbps;
    w->cpu_cores = r->cpu_cores;
    w->gpu_busy_pct = r->gpu_busy_pct;
    w->stall_ms = r->wait_ms;
    w->read_us = r->read_us;
    w->decode_us = r->decode_us;
    w->xform_us = r->xform_us;
    w->gpu_decode_us = r->gpu_decode_us;
    w->gpu_decoded = r->gpu_decoded;
    w->gpu_fallback = r->gpu_fallback;
    memcpy(w->routed, r->routed, sizeof(w->routed));
    w->cpu_share_pct = decoder == FEEDER_DECODER_HYBRID ? r->hybrid_permille / 10.0 : -1;
}

/* The table's rows: each decoder in the order --shuffle asks (-1), then the
 * RAW pack shuffled, the order training reads, and in file order. */
static const struct {
    int decoder, shuffle;
} all_rows[BD_NROWS] = {{FEEDER_DECODER_TURBO, -1}, {FEEDER_DECODER_ROI, -1},
                        {FEEDER_DECODER_NVJPEG, -1}, {FEEDER_DECODER_HYBRID, -1},
                        {BD_RAW, 1}, {BD_RAW, 0}};

/* Each row in turn at one worker count, into rows[]; the pack's header into *pk. */
static void measure_backends(const opts *o, context *cx, const char *pack, bd_row *rows,
                             feeder_packed_info *pk)
{
    feeder_dataset *ds = open_dataset(cx->data), *dr = NULL;
    cx->images = feeder_dataset_size(ds);
    cx->classes = feeder_dataset_num_classes(ds);
    run_res *r = calloc(1, sizeof(run_res));
    if (!r)
        die("out of memory");
    for (unsigned i = 0; i < BD_NROWS; i++) {
        opts ob = *o;
        ob.decoder = all_rows[i].decoder;
        if (all_rows[i].shuffle >= 0)
            ob.shuffle = all_rows[i].shuffle;
        fprintf(stderr, "== %s, %s\n", bd_decoder_name(ob.decoder), bd_order_name(ob.shuffle));
        if (ob.decoder == BD_RAW) {
            if (!dr) {
                dr = open_dataset(pack); /* sets g_pack */
                *pk = g_pack;
            }
            ob.shape_given = 0; /* the pack's own shape, made from these options */
            run_config(dr, &ob, o->workers[0], r, pack);
        } else {
            run_config(ds, &ob, o->workers[0], r, cx->data);
        }
        if (ob.decoder == FEEDER_DECODER_TURBO)
            cx->jpeg_bytes = r->ep[0].bytes;
        to_row(r, ob.decoder, ob.shuffle, &rows[i]);
    }
    if (dr)
        feeder_dataset_destroy(dr);
    memset(&g_pack, 0, sizeof(g_pack));
    feeder_dataset_destroy(ds);
    free(r);
}

static int run_all(const opts *o, context *cx)
{
    char pack[4096];
    bd_raw_pack_path(pack, sizeof(pack), cx->data, o->size, o->resize, o->layout);
    /* Packed before anything is timed, so packing competes with nothing. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    bd_ensure_raw_pack(PROG, cx->data, pack, o->size, o->resize, o->layout,
                       cores > 0 ? (int)cores : 1, o->io);
    bd_row *rows = calloc(BD_NROWS, sizeof(bd_row));
    if (!rows)
        die("out of memory");
    feeder_packed_info pk;
    memset(&pk, 0, sizeof(pk));
    measure_backends(o, cx, pack, rows, &pk);

    bu_machine_init(&cx->m, o->label);
    bu_report r = {0};
    all_header(o, cx, pack, &pk, &r.header);
    bd_table(rows, BD_NROWS, &r.table);
    bd_notes(rows, BD_NROWS, pack, &r.footer);
    if (o->json)
        all_json(o, cx, pack, &pk, rows, BD_NROWS, &r.json);
    char title[96];
    snprintf(title, sizeof(title), PROG " --decoder all, %s", opts_names(o).pipeline);
    bu_report_finish(&r, o->json, o->append_to, PROG, &cx->m, title, cx->cmd.p);
    free(rows);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* One decoder, one or more worker counts                                    */
/* ------------------------------------------------------------------------ */

/* --data, or the default set (made on the first run). */
static void resolve_data(const opts *o, context *cx)
{
    if (o->data) {
        snprintf(cx->data, sizeof(cx->data), "%s", o->data);
        return;
    }
    bm_default_dir(cx->data, sizeof(cx->data), set_names[o->set], o->make_images);
    char err[1024];
    if (bm_ensure_set(cx->data, set_names[o->set], o->make_images, FEEDER_BENCH_PHOTOS, err,
                      sizeof(err)))
        die("%s", err);
}

/* Every worker count of the sweep, with the scaling efficiency against workers 0. */
static run_res *run_sweep(opts *o, context *cx)
{
    feeder_dataset *ds = open_dataset(cx->data);
    cx->images = feeder_dataset_size(ds);
    cx->classes = feeder_dataset_num_classes(ds);
    run_res *runs = calloc(o->nworkers, sizeof(run_res));
    if (!runs)
        die("out of memory");
    for (unsigned i = 0; i < o->nworkers; i++)
        run_config(ds, o, o->workers[i], &runs[i], cx->data);
    feeder_dataset_destroy(ds);
    /* One epoch reads every file once. Taken from the loader rather than by
     * stat()ing every path up front, which would warm the dentry cache
     * before the first, cold epoch. */
    cx->jpeg_bytes = runs[0].ep[0].bytes;
    double rate0 = -1;
    for (unsigned i = 0; i < o->nworkers; i++)
        if (runs[i].workers == 0)
            rate0 = runs[i].med_rate;
    if (o->sweep && rate0 > 0)
        for (unsigned i = 0; i < o->nworkers; i++)
            if (runs[i].workers > 0)
                runs[i].eff = runs[i].med_rate / (runs[i].workers * rate0);
    return runs;
}

/* The table (or JSON) on stdout, and the record with --append-to. */
static void report(const opts *o, context *cx, const run_res *runs)
{
    bu_machine_init(&cx->m, o->label);
    bu_report r = {0};
    make_headline(o, runs, o->nworkers, &r.header);
    make_header(o, cx, &r.header);
    make_table(o, runs, o->nworkers, &r.table);
    make_footer(o, runs, o->nworkers, &r.footer);
    if (o->json)
        make_json(o, cx, runs, o->nworkers, &r.json);
    char title[64];
    snprintf(title, sizeof(title), PROG ", %s", opts_names(o).pipeline);
    bu_report_finish(&r, o->json, o->append_to, PROG, &cx->m, title, cx->cmd.p);
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    context cx;
    memset(&cx, 0, sizeof(cx));
    bu_command_line(&cx.cmd, PROG, argc, argv);
    resolve_data(&o, &cx);
    /* The GPU decoders need a device: the first one, when there is one. */
    if ((o.decoder == FEEDER_DECODER_NVJPEG || o.decoder == FEEDER_DECODER_HYBRID ||
         o.decoder == BD_ALL) && !o.device_given && bg_device_count() > 0)
        o.device = 0;
    if (o.decoder == BD_ALL) {
        int rc = run_all(&o, &cx);
        free(cx.cmd.p);
        return rc;
    }
    if (o.decoder == BD_RAW) {
        char pack[4096];
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        bd_raw_pack_path(pack, sizeof(pack), cx.data, o.size, o.resize, o.layout);
        bd_ensure_raw_pack(PROG, cx.data, pack, o.size, o.resize, o.layout,
                           cores > 0 ? (int)cores : 1, o.io);
        snprintf(cx.data, sizeof(cx.data), "%s", pack);
        o.shape_given = 0; /* the pack's own shape, made from these options */
    }
    run_res *runs = run_sweep(&o, &cx);
    report(&o, &cx, runs);
    int mismatch = 0;
    if (o.checksum && o.in_order)
        for (unsigned i = 1; i < o.nworkers; i++)
            mismatch |= runs[i].checksum != runs[0].checksum;
    free(cx.cmd.p);
    free(runs);
    /* A sweep whose in-order checksums differ has found a bug: say so in the
     * exit status too, so scripts notice. */
    return mismatch ? 3 : 0;
}
