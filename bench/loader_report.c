/* bench_loader's output: the table, its header and footer, the JSON record,
 * and the record appended with --append-to. */
#include <stdio.h>
#include <stdlib.h>

#include "loader.h"

/* The columns: the common ones, then the GPU batches' and the GPU decoders'. */
static void table_columns(const opts *o, bu_table *t, unsigned *gcol, unsigned *dcol)
{
    static const char *const heads[] = {
        "workers", "pipeline", "decoder", "io", "images/s (steady)", "images/s per epoch",
        "GB/s", "MB/s read", "first batch ms", "read µs/img", "decode µs/img",
        "transform µs/img", "wait ms/epoch", "scaling eff.", "checksum"};
    static const int right[] = {1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    static const char *const gheads[] = {"pin", "dtype", "H2D GB/s", "stall % after 1st",
                                         "GPU idle %", "epoch / compute alone"};
    static const int gright[] = {0, 0, 1, 1, 1, 1};
    unsigned ncols = o->checksum ? 15 : 14;
    bu_table_init(t, 0, NULL, NULL);
    for (unsigned c = 0; c < ncols; c++) {
        t->head[c] = heads[c];
        t->right[c] = right[c];
    }
    *gcol = ncols;
    if (o->device >= 0) {
        for (unsigned c = 0; c < 6; c++) {
            t->head[ncols + c] = gheads[c];
            t->right[ncols + c] = gright[c];
        }
        ncols += 6;
    }
    /* The GPU decoders' own columns (bench/decoders.c says what they are). */
    *dcol = ncols;
    if (o->decoder == FEEDER_DECODER_NVJPEG || o->decoder == FEEDER_DECODER_HYBRID) {
        t->head[ncols] = "GPU decode µs/img";
        t->head[ncols + 1] = "GPU fallback";
        t->head[ncols + 2] = "CPU routes p/c/s/z/x/o/r/f";
        t->head[ncols + 3] = "CPU share %";
        t->right[ncols] = t->right[ncols + 1] = t->right[ncols + 2] = t->right[ncols + 3] = 1;
        ncols += o->decoder == FEEDER_DECODER_HYBRID ? 4 : 3;
    }
    t->ncols = ncols;
}

static void gpu_cells(const opts *o, const run_res *r, char (*row)[BU_TABLE_CELL], unsigned g)
{
    const opt_names nm = opts_names(o);
    snprintf(row[g], 160, "%s", nm.pin);
    snprintf(row[g + 1], 160, "%s", nm.dtype);
    snprintf(row[g + 2], 160, "%.1f", r->h2d_gbps);
    snprintf(row[g + 3], 160, "%.2f", r->med_stall_pct);
    bu_cell_or_dash(row[g + 4], "%.1f", r->med_idle_pct, r->med_idle_pct >= 0);
    bu_cell_or_dash(row[g + 5], "%.3f", r->med_vs_alone, r->med_vs_alone >= 0);
}

static void measured_cells(const opts *o, const run_res *r, char (*row)[BU_TABLE_CELL])
{
    bu_cell_or_dash(row[4], "%.0f", r->steady_rate, r->nep > 1);
    size_t off = 0;
    for (unsigned e = 0; e < r->nep && off < 150; e++)
        off += (size_t)snprintf(row[5] + off, 160 - off, "%s%.0f", e ? " / " : "", r->rate[e]);
    snprintf(row[6], 160, "%.2f", r->gbps);
    snprintf(row[7], 160, "%.1f", r->mbps);
    snprintf(row[8], 160, "%.1f", r->med_first_ms);
    snprintf(row[9], 160, "%.1f", r->read_us);
    snprintf(row[10], 160, "%.1f", r->decode_us);
    snprintf(row[11], 160, "%.1f", r->xform_us);
    snprintf(row[12], 160, "%.1f", r->wait_ms);
    bu_cell_or_dash(row[13], "%.2f", r->eff, r->eff >= 0);
    if (o->checksum)
        snprintf(row[14], 160, "%016llx", (unsigned long long)r->checksum);
}

void make_table(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b)
{
    const opt_names nm = opts_names(o);
    bu_table t;
    unsigned gcol, dcol;
    table_columns(o, &t, &gcol, &dcol);
    int raw = g_pack.kind == FEEDER_RECORD_RAW;
    for (unsigned i = 0; i < n; i++) {
        const run_res *r = &runs[i];
        char(*row)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(row[0], 160, "%d", r->workers);
        snprintf(row[1], 160, "%s", raw ? "raw pack" : nm.pipeline);
        snprintf(row[2], 160, "%s", raw ? "-" : nm.decoder);
        snprintf(row[3], 160, "%s", r->io);
        if (r->na) {
            snprintf(row[4], 160, "%s", r->na_reason);
            bu_cells_dash(row, 5, t.ncols);
            continue;
        }
        if (dcol < t.ncols) {
            snprintf(row[dcol], 160, "%.1f", r->gpu_decode_us);
            snprintf(row[dcol + 1], 160, "%llu", (unsigned long long)r->gpu_fallback);
            bd_routes_cell(row[dcol + 2], 160, r->routed);
            if (o->decoder == FEEDER_DECODER_HYBRID)
                snprintf(row[dcol + 3], 160, "%.1f", r->hybrid_permille / 10.0);
        }
        measured_cells(o, r, row);
        if (o->device >= 0)
            gpu_cells(o, r, row, gcol);
    }
    bu_table_render(&t, b);
    bu_table_free(&t);
}

static void workers_phrase(const opts *o, int workers, bu_sbuf *b)
{
    bu_sb_printf(b, "%d worker%s", workers, workers == 1 ? "" : "s");
    if (o->workers_auto)
        bu_sb_printf(b, " (one per usable CPU; --workers N sets it)");
}

/* The report's first lines: the steady figure, then what the first epoch
 * measured, so the number a reader takes away is not the warm-up's. */
void make_headline(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b)
{
    if (n == 1 && runs[0].na) {
        bu_sb_printf(b, "steady: not measured: %s\n", runs[0].na_reason);
        return;
    }
    unsigned nep = 0;
    for (unsigned i = 0; i < n; i++)
        nep = runs[i].na ? nep : runs[i].nep;
    if (nep < 2)
        bu_sb_printf(b, "steady: not measured (--epochs %u runs only the warm-up epoch; 2 or "
                     "more give a steady figure)\n", o->epochs);
    else if (n == 1) {
        bu_sb_printf(b, "steady: %.0f images/s, %.3f GB/s, the median of epochs 2-%u, with ",
                     runs[0].steady_rate, runs[0].steady_gbps, nep);
        workers_phrase(o, runs[0].workers, b);
        bu_sb_printf(b, "\n");
    } else {
        bu_sb_printf(b, "steady images/s (median of epochs 2-%u), by workers:", nep);
        for (unsigned i = 0; i < n; i++)
            if (!runs[i].na)
                bu_sb_printf(b, "%s %d: %.0f", i ? "," : "", runs[i].workers,
                             runs[i].steady_rate);
        bu_sb_printf(b, "\n");
    }
    const char *why = "includes forking the workers and reading files the page cache did not "
                      "hold yet";
    if (n == 1)
        bu_sb_printf(b, "first epoch: %.0f images/s, first batch after %.1f ms (the warm-up: %s; "
                     "not in the steady figure)\n",
                     runs[0].rate[0], runs[0].ep[0].first_ns / 1e6, why);
    else {
        bu_sb_printf(b, "first epoch images/s (the warm-up: %s), by workers:", why);
        for (unsigned i = 0; i < n; i++)
            if (!runs[i].na)
                bu_sb_printf(b, "%s %d: %.0f", i ? "," : "", runs[i].workers, runs[i].rate[0]);
        bu_sb_printf(b, "\n");
    }
}

void make_header(const opts *o, const context *cx, bu_sbuf *b)
{
    const opt_names nm = opts_names(o);
    if (g_pack.kind) {
        char shape[96] = "";
        if (g_pack.kind == FEEDER_RECORD_RAW)
            snprintf(shape, sizeof(shape), "RAW %ux%ux%u %s", g_pack.height, g_pack.width,
                     g_pack.channels, value_name(FEEDER_OPT_LAYOUT, g_pack.layout));
        bu_sb_printf(b, "feeder %s on %s (%s); packed %s, read by %s%s, batch %u, prefetch %d, "
                     "%s order%s%s\n",
                     feeder_version_string(), cx->m.label, cx->m.cpu,
                     g_pack.kind == FEEDER_RECORD_RAW ? shape : "JPEG",
                     nm.packed_read,
                     o->verify_crc ? " with crc32c checks" : "", o->batch, o->prefetch,
                     o->shuffle ? "shuffled" : "sequential", o->in_order ? "" : ", in_order 0",
                     o->persistent ? ", persistent workers" : "");
        if (g_pack.kind == FEEDER_RECORD_JPEG)
            bu_sb_printf(b, "decoded with the %s pipeline, %s decoder, %ux%u %s\n",
                         nm.pipeline, nm.decoder, o->size, o->size, nm.layout);
        if (o->device >= 0)
            bu_sb_printf(b, "GPU: device %d, %s, gpu_prefetch %d, compute %.2f ms per batch\n",
                         o->device, nm.pin, o->gpu_prefetch, o->compute_ms);
        bu_sb_printf(b, "dataset %s: %llu records, %llu classes, %.1f MB of records (shard %u "
                     "of %u)\n",
                     cx->data, (unsigned long long)cx->images, (unsigned long long)cx->classes,
                     g_pack.data_bytes / 1e6, g_pack.shard_index + 1, g_pack.shard_count);
        return;
    }
    bu_sb_printf(b, "feeder %s on %s (%s); %s, %s decoder, batch %u, prefetch %d, %ux%u %s, "
              "%s order%s%s\n",
              feeder_version_string(), cx->m.label, cx->m.cpu, nm.pipeline,
              nm.decoder, o->batch, o->prefetch, o->size, o->size,
              nm.layout, o->shuffle ? "shuffled" : "sequential",
              o->in_order ? "" : ", in_order 0", o->persistent ? ", persistent workers" : "");
    if (o->device >= 0)
        bu_sb_printf(b, "GPU: device %d, %s, gpu_prefetch %d, compute %.2f ms per batch\n", o->device,
                  nm.pin, o->gpu_prefetch, o->compute_ms);
    if (o->augment)
        bu_sb_printf(b, "augment: %s\n", o->augment);
    bu_sb_printf(b, "dataset %s: %llu images, %llu classes, %.1f MB of JPEG (%.1f KB average)\n",
              cx->data, (unsigned long long)cx->images, (unsigned long long)cx->classes,
              cx->jpeg_bytes / 1e6, cx->images ? cx->jpeg_bytes / 1e3 / cx->images : 0.0);
}

void make_footer(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b)
{
    bu_sb_printf(b, "Steady = the median of the epochs after the first (\"-\" with one epoch); "
              "the first epoch (the warm-up: fork, CUDA, nvJPEG, and the page cache as it was) "
              "is the first figure of \"images/s per epoch\". Epochs are timed from the first request (epoch 0 includes the "
              "start and its fork) to the end of the epoch; per-image stage times are summed "
              "over workers.");
    if (o->sweep)
        bu_sb_printf(b, " Scaling efficiency = images/s / (workers × images/s at workers 0).");
    if (o->checksum)
        bu_sb_printf(b, " With --checksum the rates include hashing every sample in the consumer "
                  "thread (XXH64 over pixels, then label, sample by sample).");
    if (o->device >= 0)
        bu_sb_printf(b, " GPU columns: H2D GB/s = bytes copied / copy time on the copy stream "
                  "(events); stall = time feeder_next blocked after the epoch's first batch, "
                  "as a share of the rest of the epoch; GPU idle = 1 - (time of the step "
                  "kernels on the user's stream) / epoch time; epoch / compute alone = epoch "
                  "time / the same steps run back to back on a resident buffer.");
    bu_sb_printf(b, "\n");
    if (o->device >= 0 && n > 0)
        bu_sb_printf(b, "gpu: %s\n", runs[0].gpu_how);
    if (o->trace && n > 0)
        bu_sb_printf(b, "trace: %s (workers %d; open it in ui.perfetto.dev or chrome://tracing)\n",
                     o->trace, runs[n - 1].workers);
    for (unsigned i = 0; i < n; i++)
        if (runs[i].io_reason[0]) {
            bu_sb_printf(b, "io: %s (%s)\n", runs[i].io, runs[i].io_reason);
            break;
        }
    if (o->checksum && n > 1) {
        int same = 1;
        for (unsigned i = 1; i < n; i++)
            same &= runs[i].checksum == runs[0].checksum;
        if (same)
            bu_sb_printf(b, "checksum %016llx is the same for every worker count.\n",
                      (unsigned long long)runs[0].checksum);
        else
            bu_sb_printf(b, "CHECKSUM MISMATCH between worker counts%s.\n",
                      o->in_order ? " (in_order 1: this is a determinism bug)"
                                  : " (expected with in_order 0)");
    }
}

static void json_str_field(bu_sbuf *b, const char *sep, const char *key, const char *v)
{
    bu_sb_printf(b, "%s\"%s\": ", sep, key);
    bu_sb_json_str(b, v);
}

/* "tool" ... "command": the fields every record starts with. */
static void json_head(const context *cx, const char *mode, bu_sbuf *b)
{
    bu_sb_printf(b, "{\n  \"tool\": \"feeder\",\n");
    if (mode)
        bu_sb_printf(b, "  \"mode\": \"%s\",\n", mode);
    json_str_field(b, "  ", "version", feeder_version_string());
    json_str_field(b, ",\n  ", "label", cx->m.label);
    json_str_field(b, ",\n  ", "cpu", cx->m.cpu);
    bu_sb_printf(b, ",\n  \"cores\": %ld", cx->m.cores);
    json_str_field(b, ",\n  ", "date", cx->m.date);
    json_str_field(b, ",\n  ", "command", cx->cmd.p);
    json_str_field(b, ",\n  \"dataset\": {", "path", cx->data);
    bu_sb_printf(b, ", \"images\": %llu, \"classes\": %llu, \"jpeg_bytes\": %llu",
                 (unsigned long long)cx->images, (unsigned long long)cx->classes,
                 (unsigned long long)cx->jpeg_bytes);
}

static void json_config(const opts *o, bu_sbuf *b)
{
    const opt_names nm = opts_names(o);
    char ahead[16] = "\"default\"";
    if (o->fetch_ahead != FETCH_AHEAD_DEFAULT)
        snprintf(ahead, sizeof(ahead), "%u", o->fetch_ahead);
    bu_sb_printf(b, ", \"packed\": ");
    if (g_pack.kind)
        bu_sb_printf(b, "{\"kind\": \"%s\", \"height\": %u, \"width\": %u, \"layout\": \"%s\", "
                     "\"data_bytes\": %llu, \"read\": \"%s\", \"verify_crc\": %s}},\n",
                     g_pack.kind == FEEDER_RECORD_RAW ? "raw" : "jpeg", g_pack.height,
                     g_pack.width, value_name(FEEDER_OPT_LAYOUT, g_pack.layout),
                     (unsigned long long)g_pack.data_bytes, nm.packed_read,
                     o->verify_crc ? "true" : "false");
    else
        bu_sb_printf(b, "null},\n");
    bu_sb_printf(b, "  \"config\": {\"batch\": %u, \"epochs\": %u, \"prefetch\": %d, "
              "\"pipeline\": \"%s\", \"decoder\": \"%s\", \"io\": \"%s\", \"seed\": %llu, "
              "\"size\": %u, \"resize\": %u, \"layout\": \"%s\", \"shuffle\": %d, "
              "\"in_order\": %d, \"persistent_workers\": %d, \"fetch_ahead\": %s, "
              "\"workers_from\": \"%s\", \"checksum\": %s, \"augment\": ",
              o->batch, o->epochs, o->prefetch, nm.pipeline, nm.decoder, nm.io,
              (unsigned long long)o->seed, o->size, o->resize, nm.layout,
              o->shuffle, o->in_order, o->persistent, ahead,
              o->sweep ? "--threads-sweep" : o->workers_auto ? "usable CPUs" : "--workers",
              o->checksum ? "true" : "false");
    if (o->augment)
        bu_sb_json_str(b, o->augment);
    else
        bu_sb_printf(b, "null");
    bu_sb_printf(b, "},\n");
}

static void json_num_or_null(bu_sbuf *b, const char *fmt, double v, int valid)
{
    if (valid)
        bu_sb_printf(b, fmt, v);
    else
        bu_sb_printf(b, "null");
}

static void json_gpu(const opts *o, const run_res *r, bu_sbuf *b)
{
    const opt_names nm = opts_names(o);
    bu_sb_printf(b, ",\n     \"gpu\": ");
    if (!r->gpu) {
        bu_sb_printf(b, "null");
        return;
    }
    bu_sb_printf(b, "{\"device\": %d, \"pin\": \"%s\", \"dtype\": \"%s\", "
              "\"gpu_prefetch\": %d, \"gpu_room\": %d, \"gpu_decode_threads\": %d, \"compute_ms\": %.3f, \"h2d_gb_per_s\": %.2f, "
              "\"h2d_bytes\": %llu, \"pin_ns\": %llu, \"median_stall_pct_after_first\": %.3f, "
              "\"median_gpu_idle_pct\": %.2f, \"median_epoch_over_compute_alone\": %.4f, "
              "\"status\": ",
              o->device, nm.pin, nm.dtype, o->gpu_prefetch, o->gpu_room,
              o->gpu_decode_threads, o->compute_ms, r->h2d_gbps, (unsigned long long)r->h2d_bytes,
              (unsigned long long)r->pin_ns, r->med_stall_pct, r->med_idle_pct,
              r->med_vs_alone);
    bu_sb_json_str(b, r->gpu_how);
    bu_sb_printf(b, "}");
}

static void json_epochs(const run_res *r, bu_sbuf *b)
{
    bu_sb_printf(b, ",\n     \"epochs\": [");
    for (unsigned e = 0; e < r->nep; e++) {
        const epoch_res *ep = &r->ep[e];
        bu_sb_printf(b, "%s\n       {\"images\": %llu, \"batches\": %llu, \"seconds\": %.6f, "
                  "\"images_per_s\": %.1f, \"first_batch_ms\": %.3f, \"bytes_read\": %llu, "
                  "\"read_ns\": %llu, \"decode_ns\": %llu, \"transform_ns\": %llu, "
                  "\"wait_ns\": %llu, \"skipped\": %llu, \"gpu_decoded\": %llu, "
                  "\"gpu_fallback\": %llu, \"gpu_decode_ns\": %llu, \"cpu_shared\": %llu, "
                  "\"hybrid_cpu_permille\": %llu, \"cpu_ns\": %llu}",
                  e ? "," : "", (unsigned long long)ep->images,
                  (unsigned long long)ep->batches, ep->ns / 1e9, r->rate[e],
                  ep->first_ns / 1e6, (unsigned long long)ep->bytes,
                  (unsigned long long)ep->read_ns, (unsigned long long)ep->decode_ns,
                  (unsigned long long)ep->transform_ns, (unsigned long long)ep->wait_ns,
                  (unsigned long long)ep->skipped, (unsigned long long)ep->gpu_decoded,
                  (unsigned long long)ep->gpu_fallback, (unsigned long long)ep->gpu_decode_ns,
                  (unsigned long long)ep->cpu_shared, (unsigned long long)ep->cpu_permille,
                  (unsigned long long)ep->cpu_ns);
    }
    bu_sb_printf(b, "]}");
}

static void json_run(const opts *o, const run_res *r, bu_sbuf *b)
{
    bu_sb_printf(b, "\n    {\"workers\": %d", r->workers);
    json_str_field(b, ", ", "io_backend", r->io);
    json_str_field(b, ", ", "io_reason", r->io_reason);
    bu_sb_printf(b, ",\n     \"steady_images_per_s\": %.1f, \"first_epoch_images_per_s\": %.1f, "
              "\"first_epoch_first_batch_ms\": %.2f,",
              r->steady_rate, r->rate[0], r->ep[0].first_ns / 1e6);
    bu_sb_printf(b, "\n     \"median_images_per_s\": %.1f, \"median_first_batch_ms\": %.2f, "
              "\"median_mb_per_s\": %.2f, \"median_gb_per_s\": %.3f,\n     "
              "\"read_us_per_image\": %.2f, "
              "\"decode_us_per_image\": %.2f, \"transform_us_per_image\": %.2f, "
              "\"wait_ms_per_epoch\": %.2f,\n     \"scaling_efficiency\": ",
              r->med_rate, r->med_first_ms, r->mbps, r->gbps, r->read_us, r->decode_us,
              r->xform_us, r->wait_ms);
    json_num_or_null(b, "%.4f", r->eff, r->eff >= 0);
    bu_sb_printf(b, ", \"status\": \"ok\", \"reason\": null");
    bu_sb_printf(b, ", \"cpu_cores_busy\": %.3f, \"gpu_busy_pct\": ", r->cpu_cores);
    json_num_or_null(b, "%.3f", r->gpu_busy_pct, r->gpu_busy_pct >= 0);
    bu_sb_printf(b, ", \"gpu_decode_us_per_image\": %.3f, \"gpu_decoded\": %llu, "
                 "\"gpu_fallback\": %llu, \"hybrid_cpu_permille\": %llu",
                 r->gpu_decode_us, (unsigned long long)r->gpu_decoded,
                 (unsigned long long)r->gpu_fallback, (unsigned long long)r->hybrid_permille);
    bd_routes_json(b, r->routed);
    bu_sb_printf(b, ", \"shm_bytes\": %llu, \"slots\": %llu, \"checksum\": ",
              (unsigned long long)r->shm_bytes, (unsigned long long)r->slots);
    if (o->checksum)
        bu_sb_printf(b, "\"%016llx\"", (unsigned long long)r->checksum);
    else
        bu_sb_printf(b, "null");
    json_gpu(o, r, b);
    json_epochs(r, b);
}

void make_json(const opts *o, const context *cx, const run_res *runs, unsigned n, bu_sbuf *b)
{
    json_head(cx, NULL, b);
    json_config(o, b);
    bu_sb_printf(b, "  \"runs\": [");
    for (unsigned i = 0; i < n; i++) {
        const run_res *r = &runs[i];
        if (i)
            bu_sb_printf(b, ",");
        if (r->na) {
            /* Not measured: no figure at all under the GPU decoder's name. */
            bu_sb_printf(b, "\n    {\"workers\": %d, \"status\": \"n/a\", \"reason\": ",
                         r->workers);
            bu_sb_json_str(b, r->na_reason + 5);
            bu_sb_printf(b, "}");
            continue;
        }
        json_run(o, r, b);
    }
    bu_sb_printf(b, "\n  ]\n}\n");
}

/* ------------------------------------------------------------------------ */
/* --decoder all: every backend on the same files, one table                 */
/* ------------------------------------------------------------------------ */

void all_header(const opts *o, const context *cx, const char *pack,
                       const feeder_packed_info *pk, bu_sbuf *b)
{
    const opt_names nm = opts_names(o);
    bu_sb_printf(b, "feeder %s on %s (%s); decode backends on the same files: %s pipeline, "
                 "%ux%u %s, batch %u, workers %d%s, prefetch %d, %u epochs, %s order (raw: "
                 "shuffled and sequential)%s%s\n",
                 feeder_version_string(), cx->m.label, cx->m.cpu, nm.pipeline,
                 o->size, o->size, nm.layout, o->batch, o->workers[0],
                 o->workers_auto ? " (one per usable CPU)" : "", o->prefetch, o->epochs, o->shuffle ? "shuffled" : "sequential",
                 o->in_order ? "" : ", in_order 0", o->persistent ? ", persistent workers" : "");
    if (o->device >= 0)
        bu_sb_printf(b, "GPU: device %d, %s, gpu_prefetch %d, %s batches for every backend\n",
                     o->device, nm.pin, o->gpu_prefetch, nm.dtype);
    else
        bu_sb_printf(b, "host batches (no --device, or no GPU found)\n");
    bu_sb_printf(b, "dataset %s: %llu images, %llu classes, %.1f MB of JPEG (%.1f KB average); "
                 "raw: %s, %.1f MB of uint8 %ux%ux%u records\n",
                 cx->data, (unsigned long long)cx->images, (unsigned long long)cx->classes,
                 cx->jpeg_bytes / 1e6, cx->images ? cx->jpeg_bytes / 1e3 / cx->images : 0.0,
                 pack, pk->data_bytes / 1e6, pk->height, pk->width, pk->channels);
}

void all_json(const opts *o, const context *cx, const char *pack,
              const feeder_packed_info *pk, const bd_row *rows, unsigned n, bu_sbuf *b)
{
    const opt_names nm = opts_names(o);
    json_head(cx, "decoders", b);
    json_str_field(b, "},\n  \"raw_pack\": {", "path", pack);
    bu_sb_printf(b, ", \"data_bytes\": %llu, \"height\": %u, \"width\": %u},\n",
                 (unsigned long long)pk->data_bytes, pk->height, pk->width);
    bu_sb_printf(b, "  \"config\": {\"batch\": %u, \"workers\": %d, \"prefetch\": %d, "
                 "\"epochs\": %u, \"pipeline\": \"%s\", \"size\": %u, \"resize\": %u, "
                 "\"layout\": \"%s\", \"shuffle\": %d, \"persistent_workers\": %d, "
                 "\"device\": %d},\n  \"backends\": ",
                 o->batch, o->workers[0], o->prefetch, o->epochs, nm.pipeline,
                 o->size, o->resize, nm.layout, o->shuffle, o->persistent,
                 o->device);
    bd_json_rows(rows, n, b);
    bu_sb_printf(b, "\n}\n");
}
