/*
 * bench_augment: each augment op's time per image on one core, 224 x 224 x 3
 * uint8, in both layouts, to set beside torchvision's
 * (bench/bench_augment_torch.py times the same ops with the same
 * parameters on a uint8 CHW tensor, torch.set_num_threads(1)).
 *
 *   bench_augment [--seconds S] [--json FILE] [--only OP,OP,...]
 *
 * Ours work in place, so every timed call first copies the pristine image
 * back; that copy is timed alone too (the "restore" rows: one image, and
 * the mixes' batch of 32) and subtracted from the other rows, so a row is the op's own time (torchvision's
 * figures include allocating their output, part of their op). The random pipelines (color jitter, TrivialAugment,
 * RandAugment, erasing) are timed over successive sample indices, so the
 * figure is their mean over the draws. Mixup and cutmix are timed on a
 * batch of 32 and reported per image. Times are the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID; the Python side uses time.thread_time), so
 * other work on a shared machine does not count; each figure is the
 * median of 5 rounds of at least S / 5 seconds (default S = 1).
 *
 * With a CUDA build and a device, a second table times the device augment
 * (FEEDER_OPT_AUGMENT_ON_DEVICE's kernels, cuda/augment.cu) per image on a
 * device batch of 256, in GPU time (CUDA events); bench/augment_gpu.c says
 * how. Without one it says why and prints no GPU rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment/augment.h"
#include "augment_gpu.h"
#include "benchutil.h"
#include "cli.h"

enum { W = 224, H = 224, BYTES = W * H * 3, ROUNDS = 5, MIX_BATCH = 32 };

typedef struct ctx {
    uint8_t *pristine, *img;
    void *scratch;
    feeder__aimg im;
    uint64_t index;
    feeder_augment *aug; /* the op's one-step pipeline, for the random ones */
    uint8_t *batch, *mix_scratch;
    feeder_mix mix[MIX_BATCH];
    feeder__augment_plan mixplan;
} ctx;

typedef void (*op_fn)(ctx *c);

#define OP(name, call)                                                                         \
    static void name(ctx *c) { call; }
OP(b_none, (void)c)
OP(b_hflip, feeder__aug_flip(c->im, 0))
OP(b_vflip, feeder__aug_flip(c->im, 1))
OP(b_rot_n, feeder__aug_rotate(c->im, 30, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE, c->scratch))
OP(b_rot_b, feeder__aug_rotate(c->im, 30, FEEDER_INTERP_BILINEAR, FEEDER_FILL_NONE, c->scratch))
OP(b_aff_b, feeder__aug_affine(c->im, 10, 3, -2, 1.1, 5, -8, NULL, FEEDER_INTERP_BILINEAR, 0,
                               c->scratch))
OP(b_bright, feeder__aug_brightness(c->im, 1.3))
OP(b_contrast, feeder__aug_contrast(c->im, 1.3))
OP(b_sat, feeder__aug_saturation(c->im, 1.3))
OP(b_hue, feeder__aug_hue(c->im, 0.1))
OP(b_gray, feeder__aug_grayscale(c->im))
OP(b_blur, feeder__aug_gaussian_blur(c->im, 9, 2.0, c->scratch))
OP(b_post, feeder__aug_posterize(c->im, 4))
OP(b_sol, feeder__aug_solarize(c->im, 128))
OP(b_autoc, feeder__aug_autocontrast(c->im))
OP(b_equal, feeder__aug_equalize(c->im))
OP(b_sharp, feeder__aug_sharpness(c->im, 1.5, c->scratch))
OP(b_pipe, feeder__augment_apply(&c->aug->plan, c->img, W, H,
                                 c->im.ps == 1 ? FEEDER_LAYOUT_NCHW : FEEDER_LAYOUT_NHWC, 1, 0,
                                 c->index++, c->scratch))
OP(b_mix, feeder__augment_mix(&c->mixplan, c->batch, MIX_BATCH, W, H,
                              c->im.ps == 1 ? FEEDER_LAYOUT_NCHW : FEEDER_LAYOUT_NHWC, 1, 0,
                              c->index++, c->mix, c->mix_scratch))

typedef struct bench_op {
    const char *name;   /* as bench_augment_torch.py names it */
    const char *params;
    op_fn fn;
    int pipeline;       /* 1: c->aug is built by make_pipeline; 2: mixup, 3: cutmix;
                           4: the batch restore alone */
} bench_op;

static const bench_op ops[] = {
    {"restore", "the copy before each call, subtracted from the rows below", b_none, 0},
    {"restore_batch", "the mixes' copy of 32 images, per image, subtracted from theirs", b_none,
     4},
    {"hflip", "", b_hflip, 0},
    {"vflip", "", b_vflip, 0},
    {"rotate_nearest", "30 deg", b_rot_n, 0},
    {"rotate_bilinear", "30 deg", b_rot_b, 0},
    {"affine_bilinear", "10 deg, (3,-2), 1.1, (5,-8), fill 0", b_aff_b, 0},
    {"brightness", "1.3", b_bright, 0},
    {"contrast", "1.3", b_contrast, 0},
    {"saturation", "1.3", b_sat, 0},
    {"hue", "0.1", b_hue, 0},
    {"grayscale", "3 channels", b_gray, 0},
    {"gaussian_blur", "k 9, sigma 2", b_blur, 0},
    {"posterize", "4 bits", b_post, 0},
    {"solarize", "128", b_sol, 0},
    {"autocontrast", "", b_autoc, 0},
    {"equalize", "", b_equal, 0},
    {"sharpness", "1.5", b_sharp, 0},
    {"color_jitter", "0.4, 0.4, 0.4, 0.1", b_pipe, 1},
    {"random_erasing", "p 1, value 0", b_pipe, 1},
    {"trivial_augment", "31 bins, nearest", b_pipe, 1},
    {"randaugment", "2 ops, magnitude 9", b_pipe, 1},
    {"mixup", "alpha 0.2, batch 32, per image", b_mix, 2},
    {"cutmix", "alpha 1.0, batch 32, per image", b_mix, 3},
};
enum { NOPS = sizeof(ops) / sizeof(ops[0]) };

static void make_pipeline(ctx *c, const char *name)
{
    feeder_augment_destroy(c->aug);
    feeder_augment_create(&c->aug);
    if (!strcmp(name, "color_jitter"))
        feeder_augment_color_jitter(c->aug, 0.4, 0.4, 0.4, 0.1);
    else if (!strcmp(name, "random_erasing"))
        feeder_augment_erase(c->aug, 1.0, 0.02, 0.33, 0.3, 3.3, 0);
    else if (!strcmp(name, "trivial_augment"))
        feeder_augment_trivial(c->aug, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE);
    else
        feeder_augment_randaugment(c->aug, 2, 9, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE);
}

/* The image bench_augment_torch.py makes too: gradients plus a hash's noise. */
static void make_image(uint8_t *hwc)
{
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < W; x++) {
            uint64_t r = feeder_random(5, 0, (uint64_t)y * W + x, 0);
            int v[3] = {(int)x, (int)y, (int)(x + y) / 2};
            for (int ch = 0; ch < 3; ch++) {
                int n = v[ch] + (int)((r >> (8 * ch)) & 63) - 32;
                hwc[((size_t)y * W + x) * 3 + ch] = (uint8_t)(n < 0 ? 0 : n > 255 ? 255 : n);
            }
        }
}

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Median over ROUNDS of the CPU time per image, in microseconds. */
static double time_op(ctx *c, const bench_op *op, double seconds)
{
    double per[ROUNDS];
    int batch = op->pipeline >= 2;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = cpu_ns(), n = 0;
        double elapsed;
        do {
            if (batch) {
                for (int i = 0; i < MIX_BATCH; i++)
                    memcpy(c->batch + (size_t)i * BYTES, c->pristine, BYTES);
            } else {
                memcpy(c->img, c->pristine, BYTES);
            }
            op->fn(c);
            n++;
            elapsed = (double)(cpu_ns() - t0) / 1e9;
        } while (elapsed < seconds / ROUNDS);
        per[r] = elapsed * 1e6 / (double)n / (batch ? MIX_BATCH : 1);
    }
    return bu_median(per, ROUNDS);
}

/* Whether `name` is one of the comma-separated `list` (all when NULL). */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
            return 1;
    return !list;
}

static void to_chw(const uint8_t *hwc, uint8_t *chw)
{
    for (size_t i = 0; i < (size_t)W * H; i++)
        for (int ch = 0; ch < 3; ch++)
            chw[(size_t)ch * W * H + i] = hwc[i * 3 + ch];
}

/* The device rows (augment_gpu.h): a table into *out and a "gpu" member
 * into the JSON, or a line saying why there are none. */
static void gpu_rows(const uint8_t *hwc, const uint8_t *chw, double seconds, bu_sbuf *js,
                     bu_sbuf *out)
{
    double us[BENCH_GPU_NOPS][2];
    char dev[256], why[256];
    if (bench_gpu_augment(hwc, chw, W, H, seconds, us, dev, sizeof(dev), why, sizeof(why))) {
        bu_sb_printf(out, "GPU rows: none (%s)\n\n", why);
        return;
    }
    static const char *head[] = {"op", "parameters", "NHWC µs/image", "NCHW µs/image"};
    static const int right[] = {0, 0, 1, 1};
    bu_table t;
    bu_table_init(&t, 4, head, right);
    bu_sb_printf(js, ", \"gpu\": {\"device\": ");
    bu_sb_json_str(js, dev);
    bu_sb_printf(js, ", \"batch\": %d, \"us_per_image\": {", BENCH_GPU_BATCH);
    for (int k = 0; k < BENCH_GPU_NOPS; k++) {
        char(*row)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(row[0], BU_TABLE_CELL, "%s", bench_gpu_names[k]);
        snprintf(row[1], BU_TABLE_CELL, "%s", bench_gpu_params[k]);
        snprintf(row[2], BU_TABLE_CELL, "%.3f", us[k][0]);
        snprintf(row[3], BU_TABLE_CELL, "%.3f", us[k][1]);
        bu_sb_printf(js, "%s\"%s\": {\"nhwc\": %.4f, \"nchw\": %.4f}", k ? ", " : "",
                     bench_gpu_names[k], us[k][0], us[k][1]);
    }
    bu_sb_printf(js, "}}");
    bu_sbuf tab = {0};
    bu_table_render(&t, &tab);
    bu_sb_printf(out,
                 "device augment on %s, batch of %d on the device, GPU time (CUDA events):"
                 "\n\n%s\n",
                 dev, BENCH_GPU_BATCH, tab.p);
    free(tab.p);
    bu_table_free(&t);
}

/* The image and layout the ops run on: l 0 NHWC, 1 NCHW. */
static void set_layout(ctx *c, int l, uint8_t *hwc, uint8_t *chw)
{
    c->pristine = l ? chw : hwc;
    c->im = feeder__aimg_make(c->img, W, H, l ? FEEDER_LAYOUT_NCHW : FEEDER_LAYOUT_NHWC);
    if (l) /* the mixes take the layout from c->im.ps */
        c->im.ps = 1;
}

/* The op's pipeline or batch mix, and its draws from the start. */
static void set_op(ctx *c, const bench_op *o)
{
    memset(&c->mixplan, 0, sizeof(c->mixplan));
    if (o->pipeline == 1)
        make_pipeline(c, o->name);
    else if (o->pipeline == 2)
        c->mixplan.mixup_alpha = 0.2, c->mixplan.mixup_p = 1.0;
    else if (o->pipeline == 3)
        c->mixplan.cutmix_alpha = 1.0, c->mixplan.cutmix_p = 1.0;
    c->index = 0;
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    const char *json_path = NULL, *only = NULL;
    cli_opt opts[] = {
        CLI_DOUBLE("seconds", "S", seconds, 0.01, 600, "time per op and layout (1)"),
        CLI_STRING("json", "FILE", json_path, "also write the figures as JSON to FILE"),
        CLI_STRING("only", "OPS", only, "time only these ops (comma-separated names)"),
        CLI_END,
    };
    cli_spec spec = {.prog = "bench_augment", .opts = opts,
                     .usage = "usage: bench_augment [--seconds S] [--json FILE] [--only OPS]\n"
                              "Times each augment op on one 224x224x3 image, one core.\n"};
    cli_parse(&spec, argc, argv);
    ctx c;
    memset(&c, 0, sizeof(c));
    uint8_t *hwc = malloc(BYTES), *chw = malloc(BYTES);
    c.img = malloc(BYTES);
    c.scratch = malloc(feeder__augment_scratch_bytes(W, H));
    c.batch = malloc((size_t)MIX_BATCH * BYTES);
    c.mix_scratch = malloc(BYTES);
    if (!hwc || !chw || !c.img || !c.scratch || !c.batch || !c.mix_scratch)
        cli_die("bench_augment", "out of memory");
    make_image(hwc);
    to_chw(hwc, chw);
    double us[NOPS][2];
    /* Each op's two layouts one after the other, so a host whose speed
     * drifts during the run moves an op's NHWC and NCHW rows alike. */
    for (int k = 0; k < NOPS; k++) {
        for (int l = 0; l < 2; l++) {
            if (k >= 2 && !listed(only, ops[k].name)) {
                us[k][l] = -1.0; /* not asked for: left out of the output */
                continue;
            }
            set_layout(&c, l, hwc, chw);
            set_op(&c, &ops[k]);
            us[k][l] = time_op(&c, &ops[k], seconds);
            if (ops[k].pipeline >= 2 && ops[k].pipeline <= 3)
                us[k][l] -= us[1][l]; /* the batch's restore, per image */
            else if (k >= 2)
                us[k][l] -= us[0][l];
        }
    }
    bu_machine m;
    bu_machine_init(&m, NULL);
    static const char *head[] = {"op", "parameters", "NHWC µs/image", "NCHW µs/image"};
    static const int right[] = {0, 0, 1, 1};
    bu_table t;
    bu_table_init(&t, 4, head, right);
    bu_sbuf js = {0};
    bu_sb_printf(&js, "{\"machine\": ");
    bu_sb_json_str(&js, m.label);
    bu_sb_printf(&js, ", \"cpu\": ");
    bu_sb_json_str(&js, m.cpu);
    bu_sb_printf(&js, ", \"width\": %d, \"height\": %d, \"us_per_image\": {", W, H);
    for (int k = 0, first = 1; k < NOPS; k++) {
        if (us[k][0] < 0.0)
            continue;
        char(*row)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(row[0], BU_TABLE_CELL, "%s", ops[k].name);
        snprintf(row[1], BU_TABLE_CELL, "%s", ops[k].params);
        snprintf(row[2], BU_TABLE_CELL, "%.1f", us[k][0]);
        snprintf(row[3], BU_TABLE_CELL, "%.1f", us[k][1]);
        bu_sb_printf(&js, "%s\"%s\": {\"nhwc\": %.2f, \"nchw\": %.2f}", first ? "" : ", ",
                     ops[k].name, us[k][0], us[k][1]);
        first = 0;
    }
    bu_sb_printf(&js, "}");
    bu_sbuf gout = {0};
    gpu_rows(hwc, chw, seconds, &js, &gout);
    bu_sb_printf(&js, "}\n");
    bu_sbuf out = {0};
    bu_table_render(&t, &out);
    printf("bench_augment: %s (%s), %dx%dx3 uint8, one core\n\n%s\n%s%s", m.label, m.cpu, W, H,
           out.p, gout.p ? gout.p : "", js.p);
    free(gout.p);
    if (json_path && bu_write_file(json_path, js.p, js.len))
        cli_die("bench_augment", "cannot write %s", json_path);
    bu_table_free(&t);
    free(out.p);
    free(js.p);
    feeder_augment_destroy(c.aug);
    free(hwc);
    free(chw);
    free(c.img);
    free(c.scratch);
    free(c.batch);
    free(c.mix_scratch);
    return 0;
}
