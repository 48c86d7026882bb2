/*
 * JPEG bytes in, one transformed sample out, written straight into its place
 * in a batch slot. Two decoders:
 *
 * TURBO: tjDecompress2 decodes the whole image to RGBX in the decoder's
 *        scratch, then the resizer samples the crop box out of it.
 * ROI:   the libjpeg API decodes only what the crop needs: a DCT scaling of
 *        1/8, 1/4 or 1/2 (the largest reduction that still leaves the crop at
 *        least 3/4 of the output on both axes, feeder__roi_scale; only these
 *        three are SIMD in libjpeg-turbo, 3/8..7/8 measured slower than a
 *        full decode),
 *        jpeg_crop_scanline for the columns, jpeg_skip_scanlines up to the
 *        first row, the crop's rows, then jpeg_abort_decompress without
 *        reading the rest of the file.
 *
 * Both decode to RGBX (4 bytes a pixel: the resizer's SIMD path reads whole
 * pixels) with the same IDCT (ISLOW) and fancy upsampling, so at scale 1 they
 * produce the same pixels and the outputs differ only where the cropped
 * decode's edge columns differ (chroma upsampling treats the crop edge as the
 * image edge). ROI decodes a margin of (filter support + 1) pixels around the
 * box so the resizer sees the same neighbours in both paths. With DCT scaling
 * the box is carried in scaled pixels as a fractional box (source x M/8), so
 * the geometry stays exact; what differs is the scaled IDCT's own low-pass
 * against the triangle filter and, where the scaled box is under the output
 * size (down to 3/4 of it), the enlargement that follows (tests/test_decode.c
 * states the tolerance; docs/ARCHITECTURE.md shows the difference).
 *
 * Errors: every libjpeg warning is an error (TurboJPEG: TJFLAG_STOPONWARNING;
 * libjpeg: emit_message longjmps on level -1). libjpeg answers a truncated
 * file with a warning and grey rows, and corrupt entropy data with warnings
 * too; a sample must fail, not become a grey picture. The price: a file that
 * only carries a benign warning (an unknown JFIF revision) fails as well, in
 * both decoders alike. The ROI decoder stops after the crop's last row, so
 * damage below it goes unnoticed there (it cannot affect the output).
 *
 * Gray output (t->channels 1) asks libjpeg for JCS_GRAYSCALE / TJPF_GRAY:
 * the Y channel, one byte a pixel, with no chroma decode, upsampling or
 * colour conversion (docs/BENCHMARKS.md measures it against Pillow's L).
 *
 * CMYK and YCCK come out of libjpeg as CMYK; they are converted the way Pillow
 * does: every 4-component JPEG is taken as Adobe-inverted (Photoshop writes
 * them so; Pillow's JpegImagePlugin uses rawmode "CMYK;I" for all of them),
 * then Pillow's cmyk2rgb with its MULDIV255 rounding (and for gray output
 * Pillow's L of that: libjpeg has no CMYK-to-gray conversion).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jerror.h>
#include <jpeglib.h>
/* After jpeglib.h: cinfo->entropy and cinfo->master (see skip_cols). Debian
 * and Ubuntu install libjpeg-turbo's jpegint.h, upstream's install does not;
 * without it the MCUs beside the crop are decoded in full as before. */
#if defined(__has_include)
#if __has_include(<jpegint.h>)
#include <jpegint.h>
#define FEEDER_JPEG_SKIP_COLS 1
#endif
#endif
/* The jumps of the row index (row_jump) write libjpeg-turbo's private
 * Huffman decoder state, whose first fields (jdhuff.c's huff_entropy_decoder)
 * have kept this layout from 1.x through 3.1; other libjpeg builds decode
 * without the index. Each image is also checked at run time (index_plausible). */
#if defined(FEEDER_JPEG_SKIP_COLS) && defined(LIBJPEG_TURBO_VERSION_NUMBER) && \
    LIBJPEG_TURBO_VERSION_NUMBER >= 2000000 && LIBJPEG_TURBO_VERSION_NUMBER < 4000000
#define FEEDER_JPEG_ROW_INDEX 1
#endif
#include <turbojpeg.h>

#include "common/common.h"
#include "decode/transform.h"
#include "decode/image.h"
#include "decode/jpeg_index.h"

typedef struct jerr_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jerr_mgr;

struct feeder__decoder {
    tjhandle tj;
    struct jpeg_decompress_struct cinfo;
    jerr_mgr jerr;
    struct jpeg_progress_mgr progress;
    feeder__buf pix;  /* decoded pixels, RGBX or CMYK */
    feeder__buf rows; /* JSAMPROW table for jpeg_read_scanlines */
    feeder__resizer rs;
    /* skip_cols: libjpeg's own MCU decoder, the MCU columns the crop
     * reads [col_lo, col_hi], MCUs a row, the column of the next call. */
    boolean (*decode_mcu)(j_decompress_ptr ci, JBLOCKROW *data);
    JDIMENSION col_lo, col_hi, cols, col;
    /* The row index: the shared table, this image's bytes and key, the rows
     * found for it (jump when `jump`), the MCU row of the next call, a skip
     * waiting for its jump, and the rows this decode records. */
    feeder__jindex *ix;
    const uint8_t *src;
    size_t src_len;
    uint64_t key, sample;
    const feeder__jrow *found;
    uint32_t nfound;
    JDIMENSION row;
    int jump, pending, record;
    feeder__buf rec;
    uint32_t nrec;
    uint64_t jumps; /* decodes that used the index (tests) */
};

/* libjpeg's error hooks: keep the text, never print, never exit. */
static void jerr_exit(j_common_ptr ci)
{
    jerr_mgr *e = (jerr_mgr *)ci->err;
    ci->err->format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

static void jerr_emit(j_common_ptr ci, int level)
{
    /* level -1 is a warning: corrupt or truncated data. Trace levels are
     * ignored. */
    if (level < 0)
        jerr_exit(ci);
}

static void jerr_output(j_common_ptr ci)
{
    jerr_mgr *e = (jerr_mgr *)ci->err;
    ci->err->format_message(ci, e->msg);
}

/* A progressive JPEG may hold thousands of tiny scans, each one a pass over
 * the whole coefficient buffer: a few kilobytes that take minutes to decode
 * (libjpeg-turbo's own fuzzers and tjbench cap it the same way). TurboJPEG's
 * TJFLAG_LIMITSCANS is the same limit for the TURBO decoder. */
#define FEEDER__MAX_SCANS 500

static void scan_limit(j_common_ptr ci)
{
    if (ci->is_decompressor && ((j_decompress_ptr)ci)->input_scan_number > FEEDER__MAX_SCANS) {
        jerr_mgr *e = (jerr_mgr *)ci->err;
        snprintf(e->msg, sizeof(e->msg), "progressive JPEG has more than %d scans",
                 FEEDER__MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

int feeder__decoder_create(feeder__decoder **out)
{
    feeder__decoder *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->tj = tjInitDecompress();
    if (!d->tj) {
        free(d);
        return -ENOMEM;
    }
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = jerr_exit;
    d->jerr.pub.emit_message = jerr_emit;
    d->jerr.pub.output_message = jerr_output;
    if (setjmp(d->jerr.jb)) {
        /* jpeg_create_decompress fails only when out of memory. */
        tjDestroy(d->tj);
        free(d);
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->cinfo);
    d->progress.progress_monitor = scan_limit;
    d->cinfo.progress = &d->progress;
    *out = d;
    return 0;
}

void feeder__decoder_destroy(feeder__decoder *d)
{
    if (!d)
        return;
    jpeg_destroy_decompress(&d->cinfo);
    if (d->tj)
        tjDestroy(d->tj);
    feeder__buf_free(&d->pix);
    feeder__buf_free(&d->rows);
    feeder__buf_free(&d->rec);
    feeder__resizer_free(&d->rs);
    free(d);
}

void feeder__decoder_set_index(feeder__decoder *d, feeder__jindex *ix)
{
    d->ix = ix;
}

uint64_t feeder__decoder_index_jumps(const feeder__decoder *d) { return d->jumps; }

/* Pillow: "CMYK;I" unpacking (inversion), then cmyk2rgb. In place, 4 bytes a
 * pixel; the 4th byte is left as is. */
static void cmyk_to_rgbx(uint8_t *p, size_t w, size_t h, size_t stride)
{
    for (size_t y = 0; y < h; y++) {
        uint8_t *q = p + y * stride;
        for (size_t x = 0; x < w; x++, q += 4) {
            int nk = q[3]; /* 255 - (255 - raw K) */
            for (int c = 0; c < 3; c++) {
                int v = 255 - q[c], tmp = v * nk + 128;
                int r = nk - (((tmp >> 8) + tmp) >> 8);
                q[c] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
            }
        }
    }
}

/* A CMYK decode as the output wants it: RGBX (Pillow's conversion), then
 * for gray output Pillow's L of that, since libjpeg converts no CMYK to
 * gray. Returns the channels the resizer is handed (4 or 1). */
static int to_output_pixels(uint8_t *p, uint32_t w, uint32_t h, size_t stride, int gray)
{
    cmyk_to_rgbx(p, w, h, stride);
    if (!gray)
        return 4;
    feeder__rgb_to_gray(p, w, h, stride, 4);
    return 1;
}

/* TurboJPEG 2.1's tjDecompressHeader3 leaves its libjpeg object mid-header
 * when it fails (no jpeg_abort), and the next image on that handle is then
 * misread (seen here: a stream cut inside its header, then a good image read
 * as "tables only"). After any failure the handle is replaced; failures are
 * rare, so the cost does not matter. */
static int turbo_failed(feeder__decoder *d, char *err, size_t errlen)
{
    feeder__fail(err, errlen, FEEDER_EDECODE, "%s", tjGetErrorStr2(d->tj));
    tjDestroy(d->tj);
    d->tj = tjInitDecompress();
    return FEEDER_EDECODE;
}

/* The whole-image coefficient buffer libjpeg allocates, zeroed, in
 * jpeg_start_decompress for a multi-scan file (progressive, or sequential
 * with components in separate scans): each component's blocks, padded to
 * its sampling factors, 128 bytes each (jdcoefct.c). A single-scan file is
 * decoded a row of MCUs at a time and needs none of it. Read after
 * jpeg_read_header, which sets the components' sizes in blocks. */
static uint64_t multi_scan_bytes(struct jpeg_decompress_struct *ci)
{
    if (!jpeg_has_multiple_scans(ci))
        return 0;
    uint64_t n = 0;
    for (int i = 0; i < ci->num_components; i++) {
        const jpeg_component_info *c = &ci->comp_info[i];
        uint64_t hs = (uint64_t)c->h_samp_factor, vs = (uint64_t)c->v_samp_factor;
        uint64_t w = (c->width_in_blocks + hs - 1) / hs * hs;
        uint64_t h = (c->height_in_blocks + vs - 1) / vs * vs;
        n += w * h * sizeof(JBLOCK);
    }
    return n;
}

#define MULTI_SCAN_WHAT "a progressive or multi-scan JPEG's coefficients, kept for the whole image"

/* multi_scan_bytes of a stream TurboJPEG is about to decode, read with the
 * ROI decoder's libjpeg object (a header read: microseconds). 0 when the
 * header does not read: TurboJPEG then names what is wrong. */
static uint64_t turbo_multi_scan_bytes(feeder__decoder *d, const uint8_t *jpeg, size_t len)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    volatile uint64_t n = 0;
    if (!setjmp(d->jerr.jb)) {
        jpeg_mem_src(ci, jpeg, (unsigned long)len);
        if (jpeg_read_header(ci, TRUE) == JPEG_HEADER_OK)
            n = multi_scan_bytes(ci);
    }
    jpeg_abort_decompress(ci);
    return n;
}

static int decode_turbo(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                        size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                        uint8_t *dst, uint64_t t0, feeder__decode_times *times, char *err,
                        size_t errlen)
{
    if (!d->tj && !(d->tj = tjInitDecompress()))
        return feeder__fail(err, errlen, -ENOMEM, "TurboJPEG: tjInitDecompress failed");
    int w = 0, h = 0, ss = 0, cs = 0;
    if (tjDecompressHeader3(d->tj, jpeg, (unsigned long)len, &w, &h, &ss, &cs) != 0)
        return turbo_failed(d, err, errlen);
    /* TurboJPEG 2.x answers a tables-only stream, or one cut before the
     * frame header, with success and no size. */
    if (w <= 0 || h <= 0)
        return feeder__fail(err, errlen, FEEDER_EDECODE,
                            "no image in the JPEG stream (tables only, or cut "
                            "before the frame header)");
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    int gray = feeder__transform_channels(t) == 1, ch = gray && !cmyk ? 1 : 4;
    size_t stride = (size_t)w * (size_t)ch;
    uint64_t coef = t->max_decode_bytes ? turbo_multi_scan_bytes(d, jpeg, len) : 0;
    int rc = feeder__check_image(t, (uint32_t)w, (uint32_t)h,
                                 (uint64_t)stride * (uint64_t)h + coef,
                                 coef ? "the whole decoded image, and " MULTI_SCAN_WHAT
                                      : "the whole decoded image: TURBO decodes every pixel",
                                 err, errlen);
    if (rc)
        return rc;
    feeder__crop c;
    feeder__crop_compute(t, (uint32_t)w, (uint32_t)h, seed, epoch, index, &c);
    if ((rc = feeder__buf_reserve(&d->pix, stride * (size_t)h)))
        return feeder__fail(err, errlen, rc, "out of memory for a %dx%d image", w, h);
    int pf = cmyk ? TJPF_CMYK : ch == 1 ? TJPF_GRAY : TJPF_RGBX;
    if (tjDecompress2(d->tj, jpeg, (unsigned long)len, d->pix.p, w, (int)stride, h, pf,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        return turbo_failed(d, err, errlen);
    if (cmyk)
        ch = to_output_pixels(d->pix.p, (uint32_t)w, (uint32_t)h, stride, gray);
    uint64_t t1 = feeder__now_ns();
    rc = feeder__resize(&d->rs, d->pix.p, (uint32_t)w, (uint32_t)h, stride, ch, c.fx, c.fy, c.fw,
                        c.fh, dst, t->width, t->height, c.flip, t->layout);
    if (rc)
        return feeder__fail(err, errlen, rc, "resize of a %dx%d image failed", w, h);
    times->decode_ns = t1 - t0;
    times->transform_ns = feeder__now_ns() - t1;
    return 0;
}

/* The ROI decoder's DCT scaling: the smallest of 1/8, 1/4 and 1/2 whose
 * scaled crop box is still at least 3/4 of the output on both axes (the
 * resizer enlarges it by up to 4/3), else 8/8. Only these three have SIMD
 * IDCTs in libjpeg-turbo; the scalar 3/8, 5/8, 3/4 and 7/8 measured slower
 * than the 8/8 decode they would replace (docs/ARCHITECTURE.md, "The CPU
 * decode on one core"). fw * m / 8 >= 3/4 * width is fw * m >= 6 * width. */
unsigned feeder__roi_scale(const feeder__crop *c, const feeder__transform *t)
{
    for (unsigned m = 1; m < 8; m *= 2)
        if (c->fw * m >= 6.0 * t->width && c->fh * m >= 6.0 * t->height)
            return m;
    return 8;
}

/* One axis of the region to decode, in scaled pixels: the box plus the
 * resizer's reach (its triangle's support, 1 output pixel wide in input
 * pixels, or 1 when enlarging) plus one, clamped to the image. */
void feeder__roi_axis(double b0, double blen, uint32_t out, uint32_t n, uint32_t *r0,
                      uint32_t *r1)
{
    double reach = blen / out > 1.0 ? blen / out : 1.0;
    double m = ceil(reach) + 1.0;
    double lo = floor(b0) - m, hi = ceil(b0 + blen) + m;
    *r0 = lo < 0 ? 0 : (uint32_t)lo;
    *r1 = hi > n ? n : (uint32_t)hi;
    if (*r1 <= *r0)
        *r1 = *r0 + 1 <= n ? *r0 + 1 : n;
}

/* libjpeg decodes every MCU of a row in full (its coefficients stored) and
 * then runs the IDCT only on the columns jpeg_crop_scanline kept. The MCUs
 * left and right of those are needed for the bit position and the DC
 * predictors only, which is what the decoder does when handed no block
 * (jpeg_skip_scanlines relies on it): this hook hands it none there. */
#ifdef FEEDER_JPEG_SKIP_COLS
#ifdef FEEDER_JPEG_ROW_INDEX
/* The leading fields of libjpeg-turbo's huff_entropy_decoder (jdhuff.c and
 * jdhuff.h): the bit buffer and the DC predictors at the start of the next
 * MCU, each in its own struct as there (the bit buffer's is padded to 16
 * bytes). */
typedef struct huff_bits {
    size_t get_buffer; /* bit_buf_type */
    int bits_left;
} huff_bits;
typedef struct huff_saved {
    int last_dc_val[MAX_COMPS_IN_SCAN];
} huff_saved;
typedef struct huff_state {
    struct jpeg_entropy_decoder pub;
    huff_bits bitstate;
    huff_saved saved;
    unsigned int restarts_to_go;
} huff_state;

/* Right after jpeg_start_decompress of a single-scan file the bit buffer,
 * the restart count and the scan's components' DC predictors are zero
 * (start_pass_huff_decoder); anything else means the layout is not the one
 * above, and the image is decoded without the index. */
static int index_plausible(j_decompress_ptr ci)
{
    const huff_state *h = (const huff_state *)(const void *)ci->entropy;
    if (h->bitstate.get_buffer || h->bitstate.bits_left || h->restarts_to_go != ci->restart_interval)
        return 0;
    for (int i = 0; i < ci->comps_in_scan; i++) /* the others are left as they were */
        if (h->saved.last_dc_val[i])
            return 0;
    return 1;
}

/* Row r's start, recorded before its first MCU is decoded. */
static void row_record(feeder__decoder *d, j_decompress_ptr ci)
{
    const huff_state *h = (const huff_state *)(const void *)ci->entropy;
    if (ci->unread_marker || h->bitstate.bits_left < 0 || h->bitstate.bits_left > 64 ||
        (d->nrec + 1) * sizeof(feeder__jrow) > d->rec.cap) {
        d->record = 0;
        return;
    }
    feeder__jrow *e = (feeder__jrow *)(void *)d->rec.p + d->nrec++;
    *e = (feeder__jrow){.bits = h->bitstate.get_buffer,
                        .off = (uint32_t)(ci->src->next_input_byte - d->src),
                        .nbits = (uint8_t)h->bitstate.bits_left};
    for (int i = 0; i < 3; i++)
        e->dc[i] = (int16_t)h->saved.last_dc_val[i];
}

/* Put the entropy decoder where row r begins. */
static void row_jump(feeder__decoder *d, j_decompress_ptr ci, JDIMENSION r)
{
    huff_state *h = (huff_state *)(void *)ci->entropy;
    const feeder__jrow *e = &d->found[r];
    ci->src->next_input_byte = d->src + e->off;
    ci->src->bytes_in_buffer = d->src_len - e->off;
    h->bitstate.get_buffer = (size_t)e->bits;
    h->bitstate.bits_left = e->nbits;
    for (int i = 0; i < 3; i++)
        h->saved.last_dc_val[i] = e->dc[i];
}
#endif

/* libjpeg decodes every MCU of a row in full (its coefficients stored) and
 * then runs the IDCT only on the columns jpeg_crop_scanline kept. The MCUs
 * left and right of those are needed for the bit position and the DC
 * predictors only, which is what the decoder does when handed no block
 * (jpeg_skip_scanlines relies on it): this hook hands it none there.
 *
 * With the row index, an MCU whose block is not wanted is not decoded at
 * all while the next row's start is recorded: the next MCU decoded, in row
 * r at column c, first jumps to row r's recorded start and decodes the c
 * MCUs before it. So the rows above the crop and the columns right of it
 * cost nothing. */
static boolean decode_mcu_cropped(j_decompress_ptr ci, JBLOCKROW *data)
{
    feeder__decoder *d = (feeder__decoder *)(void *)((char *)ci -
                                                     offsetof(feeder__decoder, cinfo));
    JDIMENSION c = d->col, r = d->row;
    if (c + 1 == d->cols) {
        d->col = 0;
        d->row = r + 1;
    } else {
        d->col = c + 1;
    }
    JBLOCKROW *use = c >= d->col_lo && c <= d->col_hi ? data : NULL;
#ifdef FEEDER_JPEG_ROW_INDEX
    if (d->jump) {
        /* Skipped only while the next row's start is known: from the last
         * recorded row on, every MCU is decoded, so the rows libjpeg reads
         * below the recorded ones (fancy upsampling's context) follow on. */
        if (!use && r + 1 < d->nfound) {
            d->pending = 1;
            return TRUE;
        }
        if (d->pending) {
            if (r >= d->nfound) { /* not reached: skip_cols checked the rows */
                snprintf(d->jerr.msg, sizeof(d->jerr.msg),
                         "row index: MCU row %u of the image was not recorded", (unsigned)r);
                longjmp(d->jerr.jb, 1);
            }
            row_jump(d, ci, r);
            d->pending = 0;
            for (JDIMENSION k = 0; k < c; k++)
                if (!d->decode_mcu(ci, NULL))
                    return FALSE;
        }
    } else if (d->record && c == 0 && r == d->nrec) {
        row_record(d, ci);
    }
#endif
    return d->decode_mcu(ci, use);
}

/* Install decode_mcu_cropped after jpeg_crop_scanline (when the crop is
 * narrower than the image), which set the MCU columns the IDCT will see
 * (cinfo->master), on a single scan only: there every call decodes the next
 * MCU of the row, left to right. A multi-scan file was entropy-decoded
 * whole in jpeg_start_decompress. `y1` is the end of the rows read, in
 * output rows: with the row index the image's recorded rows are used when
 * they reach the MCU row of the last row output, else this decode records
 * them. */
static void skip_cols(feeder__decoder *d, int cropped, uint32_t y1)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    d->jump = d->pending = d->record = 0;
    d->nrec = 0;
    if (jpeg_has_multiple_scans(ci) || !ci->entropy->decode_mcu)
        return;
    d->col_lo = cropped ? ci->master->first_iMCU_col : 0;
    d->col_hi = cropped ? ci->master->last_iMCU_col : ci->MCUs_per_row - 1;
    d->cols = ci->MCUs_per_row;
    d->col = 0;
    d->row = 0;
#ifdef FEEDER_JPEG_ROW_INDEX
    if (d->ix && !ci->restart_interval && ci->comps_in_scan <= 3 && d->src_len < UINT32_MAX &&
        index_plausible(ci)) {
#if JPEG_LIB_VERSION >= 70
        uint32_t mh = (uint32_t)ci->max_v_samp_factor * (uint32_t)ci->min_DCT_v_scaled_size;
#else
        uint32_t mh = (uint32_t)ci->max_v_samp_factor * (uint32_t)ci->min_DCT_scaled_size;
#endif
        /* The MCU row of the last row output. */
        uint32_t last = (y1 - 1) / mh;
        d->key = feeder__jindex_key(d->src, d->src_len);
        d->found = feeder__jindex_find(d->ix, d->sample, d->key, &d->nfound);
        d->jump = d->found && d->nfound > last;
        d->jumps += (uint64_t)d->jump;
        /* Room for every row first: feeder__buf_reserve does not keep the
         * contents when it grows. */
        d->record = !d->jump && feeder__buf_reserve(&d->rec, (size_t)ci->MCU_rows_in_scan *
                                                                 sizeof(feeder__jrow)) == 0;
    }
#else
    (void)y1;
#endif
    if (!cropped && !d->jump && !d->record)
        return; /* every column wanted and nothing to index: libjpeg's own path */
    d->decode_mcu = ci->entropy->decode_mcu;
    ci->entropy->decode_mcu = decode_mcu_cropped;
}

/* After a whole decode: publish the rows it recorded. */
static void index_publish(feeder__decoder *d)
{
#ifdef FEEDER_JPEG_ROW_INDEX
    if (d->record && d->nrec)
        feeder__jindex_put(d->ix, d->sample, d->key, (const feeder__jrow *)(void *)d->rec.p,
                           d->nrec);
#endif
    d->record = 0;
}
#else
static void skip_cols(feeder__decoder *d, int cropped, uint32_t y1)
{
    (void)d;
    (void)cropped;
    (void)y1;
}
static void index_publish(feeder__decoder *d) { (void)d; }
#endif

/* Everything that can longjmp; decode_roi holds the setjmp. */
static int roi_run(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                   size_t len, uint64_t seed, uint64_t epoch, uint64_t index, uint8_t *dst,
                   uint64_t t0, feeder__decode_times *times, char *err, size_t errlen)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    jpeg_mem_src(ci, jpeg, (unsigned long)len);
    d->src = jpeg;
    d->src_len = len;
    d->sample = index;
    d->record = 0;
    if (jpeg_read_header(ci, TRUE) != JPEG_HEADER_OK)
        return feeder__fail(err, errlen, FEEDER_EDECODE,
                            "no image in the JPEG stream (tables only, or cut "
                            "before the frame header)");
    uint32_t W = ci->image_width, H = ci->image_height;
    /* The region decoded is at most a few output sizes; what can be large
     * is the coefficient buffer of a multi-scan file, made at full size
     * whatever the DCT scale. */
    int rc = feeder__check_image(t, W, H, multi_scan_bytes(ci), MULTI_SCAN_WHAT, err, errlen);
    if (rc)
        return rc;
    feeder__crop c;
    feeder__crop_compute(t, W, H, seed, epoch, index, &c);
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    int gray = feeder__transform_channels(t) == 1, ch = gray && !cmyk ? 1 : 4;
    unsigned sn = feeder__roi_scale(&c, t);
    ci->out_color_space = cmyk ? JCS_CMYK : ch == 1 ? JCS_GRAYSCALE : JCS_EXT_RGBX;
    ci->scale_num = sn;
    ci->scale_denom = 8;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(ci);

    double f = sn / 8.0;
    double bx = c.fx * f, by = c.fy * f, bw = c.fw * f, bh = c.fh * f;
    uint32_t x0, x1, y0, y1;
    feeder__roi_axis(bx, bw, t->width, ci->output_width, &x0, &x1);
    feeder__roi_axis(by, bh, t->height, ci->output_height, &y0, &y1);
    JDIMENSION xoff = x0, cw = x1 - x0;
    if (cw < ci->output_width) {
        /* Moves xoff down to an iMCU boundary and widens cw to match. */
        jpeg_crop_scanline(ci, &xoff, &cw);
        skip_cols(d, 1, y1);
    } else {
        xoff = 0;
        cw = ci->output_width;
        skip_cols(d, 0, y1);
    }
    size_t stride = (size_t)cw * (size_t)ch, nrows = y1 - y0;
    if ((rc = feeder__buf_reserve(&d->pix, stride * nrows)) ||
        (rc = feeder__buf_reserve(&d->rows, nrows * sizeof(JSAMPROW))))
        return feeder__fail(err, errlen, rc, "out of memory for a %ux%u region", (unsigned)cw,
                            (unsigned)nrows);
    JSAMPROW *rows = (JSAMPROW *)(void *)d->rows.p;
    for (size_t i = 0; i < nrows; i++)
        rows[i] = d->pix.p + i * stride;
    if (y0 > 0 && jpeg_skip_scanlines(ci, y0) != y0)
        return feeder__fail(err, errlen, FEEDER_EDECODE, "could not skip to row %u", y0);
    while (ci->output_scanline < y1) {
        JDIMENSION got = jpeg_read_scanlines(ci, rows + (ci->output_scanline - y0),
                                             y1 - ci->output_scanline);
        if (got == 0)
            return feeder__fail(err, errlen, FEEDER_EDECODE, "decoder returned no rows at row %u",
                                (unsigned)ci->output_scanline);
    }
    if (cmyk)
        ch = to_output_pixels(d->pix.p, cw, (uint32_t)nrows, stride, gray);
    uint64_t t1 = feeder__now_ns();
    rc = feeder__resize(&d->rs, d->pix.p, cw, (uint32_t)nrows, stride, ch, bx - xoff, by - y0,
                        bw, bh, dst, t->width, t->height, c.flip, t->layout);
    if (rc)
        return feeder__fail(err, errlen, rc, "resize of a %ux%u region failed", (unsigned)cw,
                            (unsigned)nrows);
    times->decode_ns = t1 - t0;
    times->transform_ns = feeder__now_ns() - t1;
    return 0;
}

static int decode_roi(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                      size_t len, uint64_t seed, uint64_t epoch, uint64_t index, uint8_t *dst,
                      uint64_t t0, feeder__decode_times *times, char *err, size_t errlen)
{
    if (setjmp(d->jerr.jb)) {
        /* Back to the state after jpeg_create_decompress, ready for the next
         * image. */
        jpeg_abort_decompress(&d->cinfo);
        return feeder__fail(err, errlen, FEEDER_EDECODE, "%s", d->jerr.msg);
    }
    int rc = roi_run(d, t, jpeg, len, seed, epoch, index, dst, t0, times, err, errlen);
    if (rc == 0)
        index_publish(d);
    /* Also the normal end: the rows below the crop are never read. */
    jpeg_abort_decompress(&d->cinfo);
    return rc;
}

/* Scratch is kept for the next image while it is at most 32 MiB, glibc's
 * largest dynamic mmap threshold: a block above it is always mmap'd, so
 * freeing it unmaps it. A worker that met one large image thus goes back to
 * its usual size instead of keeping the image's buffers for good. Measured
 * with a 6000 x 6000 PNG (tests/test_bombs.c): a persistent worker's RSS
 * was 16 MB before it, 122 MB at the peak, and stayed at 122 MB when the
 * scratch was kept; with it freed, 17 MB after, the same with or without a
 * malloc_trim after the image, so none is made: what libspng and libwebp
 * allocate for a large image is mmap'd and unmapped by glibc itself. */
#define FEEDER__SCRATCH_KEEP (32u << 20)

static void shed(feeder__buf *b)
{
    if (b->cap > FEEDER__SCRATCH_KEEP)
        feeder__buf_free(b);
}

void feeder__decoder_shed(feeder__decoder *d)
{
    shed(&d->pix);
    shed(&d->rows);
    shed(&d->rs.coef);
    shed(&d->rs.tmp);
    shed(&d->rs.row);
}

void feeder__decoder_scratch(feeder__decoder *d, feeder__buf **pix, feeder__resizer **rs)
{
    *pix = &d->pix;
    *rs = &d->rs;
}

int feeder__jpeg_sniff(const uint8_t *p, size_t len)
{
    return len >= 2 && p[0] == 0xff && p[1] == 0xd8;
}

int feeder__jpeg_sample(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                        size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                        uint8_t *dst, feeder__decode_times *times, char *err, size_t errlen)
{
    uint64_t t0 = feeder__now_ns();
    feeder__decode_times tm = {0, 0};
    int rc;
    if (t->decoder == FEEDER_DECODER_TURBO)
        rc = decode_turbo(d, t, jpeg, len, seed, epoch, index, dst, t0, &tm, err, errlen);
    else if (t->decoder == FEEDER_DECODER_ROI)
        rc = decode_roi(d, t, jpeg, len, seed, epoch, index, dst, t0, &tm, err, errlen);
    else
        return feeder__fail(err, errlen, FEEDER_EINVAL, "unknown decoder %d", t->decoder);
    if (times)
        *times = tm;
    return rc;
}
