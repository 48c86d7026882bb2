/* Writes the PNG and WebP seed corpora (small files, two settings bytes
 * first, as fuzz_decode.h reads them):
 *   cc -O2 tests/fuzz/make_format_seeds.c $(pkg-config --cflags --libs spng libwebp) \
 *      -o /tmp/mfs && /tmp/mfs tests/fuzz */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>
#include <webp/encode.h>

static void put(const char *dir, const char *name, uint8_t s0, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    uint8_t hdr[2] = {s0, 3};
    if (!f || fwrite(hdr, 1, 2, f) != 2 || fwrite(p, 1, n, f) != n || fclose(f))
        exit(1);
}

static void png(const char *dir, const char *name, uint8_t s0, int w, int h, int bits,
                int ctype)
{
    static uint8_t px[64 * 64 * 8];
    for (size_t i = 0; i < sizeof(px); i++)
        px[i] = (uint8_t)(i * 37 + i / 64);
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ih = {.width = (uint32_t)w, .height = (uint32_t)h,
                           .bit_depth = (uint8_t)bits, .color_type = (uint8_t)ctype};
    spng_set_ihdr(e, &ih);
    if (ctype == SPNG_COLOR_TYPE_INDEXED) {
        struct spng_plte pl = {.n_entries = 16};
        for (int i = 0; i < 16; i++)
            pl.entries[i] =
                (struct spng_plte_entry){(uint8_t)(i * 16), (uint8_t)(255 - i * 16), 7, 255};
        for (size_t i = 0; i < sizeof(px); i++)
            px[i] &= bits == 8 ? 15 : (uint8_t)((1 << bits) - 1) * 0x11;
        spng_set_plte(e, &pl);
    }
    static const int chans[7] = {1, 0, 3, 1, 2, 0, 4};
    size_t bytes = (size_t)h * (((size_t)w * chans[ctype] * bits + 7) / 8);
    int rc = spng_encode_image(e, px, bytes, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    size_t n = 0;
    void *p = rc ? NULL : spng_get_png_buffer(e, &n, &rc);
    if (!p) {
        fprintf(stderr, "%s: %s\n", name, spng_strerror(rc));
        exit(1);
    }
    put(dir, name, s0, p, n);
    free(p);
    spng_ctx_free(e);
}

int main(int argc, char **argv)
{
    char d[512];
    snprintf(d, sizeof(d), "%s/corpus_png", argc > 1 ? argv[1] : ".");
    png(d, "rgb8.bin", 0x00, 24, 16, 8, SPNG_COLOR_TYPE_TRUECOLOR);
    png(d, "rgba8_train.bin", 0x01, 17, 9, 8, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA);
    png(d, "rgb16_nchw.bin", 0x02, 13, 11, 16, SPNG_COLOR_TYPE_TRUECOLOR);
    png(d, "gray8.bin", 0x24, 20, 20, 8, SPNG_COLOR_TYPE_GRAYSCALE);
    png(d, "gray1.bin", 0x44, 33, 7, 1, SPNG_COLOR_TYPE_GRAYSCALE);
    png(d, "ga16.bin", 0x45, 9, 12, 16, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA);
    png(d, "pal4.bin", 0x64, 15, 10, 4, SPNG_COLOR_TYPE_INDEXED);
    png(d, "pal8.bin", 0x65, 31, 8, 8, SPNG_COLOR_TYPE_INDEXED);
    snprintf(d, sizeof(d), "%s/corpus_webp", argc > 1 ? argv[1] : ".");
    static uint8_t rgb[32 * 24 * 4];
    for (size_t i = 0; i < sizeof(rgb); i++)
        rgb[i] = (uint8_t)(i * 13 + i / 96);
    uint8_t *p;
    size_t n = WebPEncodeRGB(rgb, 32, 24, 96, 60, &p);
    put(d, "lossy.bin", 0x00, p, n);
    WebPFree(p);
    n = WebPEncodeLosslessRGB(rgb, 32, 24, 96, &p);
    put(d, "lossless.bin", 0x01, p, n);
    WebPFree(p);
    n = WebPEncodeRGBA(rgb, 20, 12, 80, 50, &p);
    put(d, "lossy_alpha.bin", 0x25, p, n);
    WebPFree(p);
    n = WebPEncodeLosslessRGBA(rgb, 9, 30, 36, &p);
    put(d, "lossless_alpha_nchw.bin", 0x46, p, n);
    WebPFree(p);
    return 0;
}
