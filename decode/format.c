/*
 * The format table: every image format decode/ reads, one row each, and
 * what is derived from it (recognising a file, the extension lists and the
 * messages that name the formats).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/common.h"
#include "decode/format.h"

static const char *const jpeg_ext[] = {"jpg", "jpeg", NULL};
/* JFIF's own extension: folders of downloaded photos hold it; WebDataset's
 * shards do not use it. */
static const char *const jpeg_folder_ext[] = {"jfif", NULL};
static const char *const png_ext[] = {"png", NULL};
static const char *const webp_ext[] = {"webp", NULL};

static const feeder__format formats[] = {
    {"JPEG", jpeg_ext, jpeg_folder_ext, feeder__jpeg_sniff, 1, feeder__jpeg_sample, NULL},
    {"PNG", png_ext, NULL, feeder__png_sniff, 0, NULL, feeder__png_whole},
    {"WebP", webp_ext, NULL, feeder__webp_sniff, 0, NULL, feeder__webp_decode},
};
#define NFORMATS (sizeof(formats) / sizeof(formats[0]))

const feeder__format *feeder__formats(size_t *n)
{
    *n = NFORMATS;
    return formats;
}

const feeder__format *feeder__format_of(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < NFORMATS; i++)
        if (formats[i].sniff(p, len))
            return &formats[i];
    return NULL;
}

/* Call fn for every extension `where` takes, in table order (a format's
 * folder extensions right after its own), with its rank from 1; stops at
 * the first nonzero fn result and returns it. */
static int each_ext(int where, int (*fn)(const char *ext, int rank, void *arg), void *arg)
{
    int rank = 0, rc;
    for (size_t i = 0; i < NFORMATS; i++) {
        for (const char *const *e = formats[i].extensions; *e; e++)
            if ((rc = fn(*e, ++rank, arg)))
                return rc;
        const char *const *more = formats[i].folder_extensions;
        for (; where == FEEDER__EXT_FOLDER && more && *more; more++)
            if ((rc = fn(*more, ++rank, arg)))
                return rc;
    }
    return 0;
}

static int ext_match(const char *ext, int rank, void *arg)
{
    return strcasecmp(ext, (const char *)arg) == 0 ? rank : 0;
}

int feeder__format_ext_rank(const char *ext, int where)
{
    return each_ext(where, ext_match, (void *)ext);
}

/* A list "a, b or c" written one item at a time: each item goes out when
 * the next arrives, so the last one can take " or ". */
typedef struct list_out {
    char *buf;
    size_t n, at;
    const char *prefix;  /* before each item: "." for extensions */
    const char *held;    /* the item not yet written */
    int count;
} list_out;

static void list_put(list_out *o, const char *sep, const char *item)
{
    if (o->at < o->n)
        o->at += (size_t)snprintf(o->buf + o->at, o->n - o->at, "%s%s%s", sep, o->prefix, item);
}

static int list_add(const char *item, int rank, void *arg)
{
    (void)rank;
    list_out *o = arg;
    if (o->held)
        list_put(o, o->count > 1 ? ", " : "", o->held);
    o->held = item;
    o->count++;
    return 0;
}

static void list_end(list_out *o)
{
    if (o->held)
        list_put(o, o->count > 1 ? " or " : "", o->held);
}

void feeder__format_ext_list(int where, char *buf, size_t n)
{
    list_out o = {buf, n, 0, ".", NULL, 0};
    if (n)
        buf[0] = 0;
    each_ext(where, list_add, &o);
    list_end(&o);
}

/* "JPEG, PNG or WebP". */
static void format_names(char *buf, size_t n)
{
    list_out o = {buf, n, 0, "", NULL, 0};
    if (n)
        buf[0] = 0;
    for (size_t i = 0; i < NFORMATS; i++)
        list_add(formats[i].name, 0, &o);
    list_end(&o);
}

/* A name for the formats people mistake for images we read, so the message
 * says what the file is. */
static const char *guess_name(const uint8_t *p, size_t len)
{
    static const struct {
        const char *magic;
        size_t n;
        const char *name;
    } known[] = {
        {"GIF8", 4, "GIF"},           {"BM", 2, "BMP"},
        {"II*\0", 4, "TIFF"},         {"MM\0*", 4, "TIFF"},
        {"\0\0\0\x0c" "jP  ", 8, "JPEG 2000"}, {"RIFF", 4, "RIFF, not WebP"},
        {"8BPS", 4, "Photoshop"},     {"%PDF", 4, "PDF"},
        {"<", 1, "text/markup"},      {"\x1f\x8b", 2, "gzip"},
        {"PK\x03\x04", 4, "zip"},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (len >= known[i].n && memcmp(p, known[i].magic, known[i].n) == 0)
            return known[i].name;
    if (len >= 12 && memcmp(p + 4, "ftyp", 4) == 0) {
        if (memcmp(p + 8, "avif", 4) == 0)
            return "AVIF";
        return memcmp(p + 8, "heic", 4) == 0 ? "HEIC" : "ISO media";
    }
    return "unknown";
}

int feeder__format_unknown(const uint8_t *p, size_t len, char *err, size_t errlen)
{
    char hex[3 * 4 + 1] = "", names[128];
    size_t n = len < 4 ? len : 4, at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(hex + at, sizeof(hex) - at, "%s%02X", i ? " " : "", p[i]);
    format_names(names, sizeof(names));
    return feeder__fail(err, errlen, FEEDER_EDECODE, "not a %s file (starts %s: %s)", names, hex,
                        guess_name(p, len));
}
