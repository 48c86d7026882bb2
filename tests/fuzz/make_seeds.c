/*
 * Writes the fuzz seed corpora (committed; rerun only to change them):
 *   cc -O2 tests/fuzz/make_seeds.c -o /tmp/make_seeds -lturbojpeg && /tmp/make_seeds
 * from the repository root. Tiny JPEGs cut from bench/photos: 4:2:0, 4:2:2,
 * 4:4:4, grayscale, progressive, CMYK (TurboJPEG writes it as YCCK) and a
 * truncated one, each behind the two settings bytes fuzz_decode.h reads; and
 * a few list files behind fuzz_list.c's flags byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

static void put(const char *dir, const char *name, const unsigned char *pre, size_t plen,
                const unsigned char *data, size_t len)
{
    char p[512];
    snprintf(p, sizeof(p), "tests/fuzz/%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fwrite(pre, 1, plen, f);
    fwrite(data, 1, len, f);
    fclose(f);
}

int main(void)
{
    mkdir("tests/fuzz/corpus_jpeg_full", 0755);
    mkdir("tests/fuzz/corpus_jpeg_roi", 0755);
    mkdir("tests/fuzz/corpus_list", 0755);
    FILE *f = fopen("bench/photos/chelsea.jpg", "rb");
    if (!f) {
        perror("bench/photos/chelsea.jpg");
        return 1;
    }
    static unsigned char src[1 << 22];
    size_t slen = fread(src, 1, sizeof(src), f);
    fclose(f);
    tjhandle dh = tjInitDecompress(), ch = tjInitCompress();
    int w, h, ss, cs;
    tjDecompressHeader3(dh, src, slen, &w, &h, &ss, &cs);
    /* 1/8 scale: about 56 x 38 for the cat. */
    int sw = (w + 7) / 8, sh = (h + 7) / 8;
    unsigned char *rgb = malloc((size_t)sw * sh * 3), *cmyk = malloc((size_t)sw * sh * 4);
    if (tjDecompress2(dh, src, slen, rgb, sw, 0, sh, TJPF_RGB, 0)) {
        fprintf(stderr, "%s\n", tjGetErrorStr2(dh));
        return 1;
    }
    for (int i = 0; i < sw * sh; i++) {
        int r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
        int k = 255 - (r > g ? (r > b ? r : b) : (g > b ? g : b));
        cmyk[4 * i] = (unsigned char)(255 - r - k > 0 ? 255 - r - k : 0);
        cmyk[4 * i + 1] = (unsigned char)(255 - g - k > 0 ? 255 - g - k : 0);
        cmyk[4 * i + 2] = (unsigned char)(255 - b - k > 0 ? 255 - b - k : 0);
        cmyk[4 * i + 3] = (unsigned char)k;
    }
    struct {
        const char *name;
        int samp, flags, quality, pf, cw, chh;
        unsigned char pre0, pre1;
    } v[] = {
        {"420_q30", TJSAMP_420, 0, 30, TJPF_RGB, 0, 0, 0x00 | (3 << 2) | (3 << 5), 1},
        {"422_q50", TJSAMP_422, 0, 50, TJPF_RGB, 0, 0, 0x01 | (2 << 2) | (4 << 5), 2},
        {"444_q60_nchw", TJSAMP_444, 0, 60, TJPF_RGB, 0, 0, 0x03 | (1 << 2) | (1 << 5), 3},
        {"gray_q40", TJSAMP_GRAY, 0, 40, TJPF_RGB, 0, 0, 0x01 | (3 << 2) | (2 << 5), 4},
        {"progressive_q40", TJSAMP_420, TJFLAG_PROGRESSIVE, 40, TJPF_RGB, 0, 0,
         0x01 | (4 << 2) | (4 << 5), 5},
        {"cmyk_q50", TJSAMP_444, 0, 50, TJPF_CMYK, 0, 0, 0x00 | (3 << 2) | (3 << 5), 6},
        {"tiny_9x7_q20", TJSAMP_420, 0, 20, TJPF_RGB, 9, 7, 0x01 | (0 << 2) | (2 << 5), 7},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        unsigned char *jpeg = NULL;
        unsigned long jlen = 0;
        int cw = v[i].cw ? v[i].cw : sw, chh = v[i].chh ? v[i].chh : sh;
        const unsigned char *px = v[i].pf == TJPF_CMYK ? cmyk : rgb;
        int pitch = sw * tjPixelSize[v[i].pf];
        if (tjCompress2(ch, px, cw, pitch, chh, v[i].pf, &jpeg, &jlen, v[i].samp, v[i].quality,
                        v[i].flags)) {
            fprintf(stderr, "%s: %s\n", v[i].name, tjGetErrorStr2(ch));
            return 1;
        }
        unsigned char pre[2] = {v[i].pre0, v[i].pre1};
        char name[64];
        snprintf(name, sizeof(name), "%s.bin", v[i].name);
        put("corpus_jpeg_full", name, pre, 2, jpeg, jlen);
        put("corpus_jpeg_roi", name, pre, 2, jpeg, jlen);
        if (i == 0) {
            put("corpus_jpeg_full", "truncated.bin", pre, 2, jpeg, jlen / 2);
            put("corpus_jpeg_roi", "truncated.bin", pre, 2, jpeg, jlen / 2);
        }
        tjFree(jpeg);
    }
    static const struct {
        const char *name;
        unsigned char flags;
        const char *text;
    } lists[] = {
        {"plain.bin", 0, "a/1.jpg 0\nb/2.jpg 1\n"},
        {"comments_crlf.bin", 0, "# header\n\n  c/x y.jpg\t3\r\nd/./e.jpg 12\n"},
        {"escape_refused.bin", 0, "a/1.jpg 0\n../up.jpg 1\n"},
        {"escape_allowed.bin", 1, "/abs/1.jpg 0\na/../../b.jpg 2\n"},
        {"bad_label.bin", 0, "a.jpg -1\n"},
        {"big_label.bin", 0, "a.jpg 9223372036854775807\n"},
    };
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        put("corpus_list", lists[i].name, &lists[i].flags, 1,
            (const unsigned char *)lists[i].text, strlen(lists[i].text));
    free(rgb);
    free(cmyk);
    tjDestroy(dh);
    tjDestroy(ch);
    return 0;
}
