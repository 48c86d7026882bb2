/*
 * feeder-pack --mode fields (tools/pack_fields.c) and the member list under
 * it (feeder__tar_members, dataset/tar_index.c): tar shards of keys with
 * jpg, cls and json members of varying sizes become FIELDS packs whose every
 * field, read back through feeder_dataset_open_packed and a loader, has the
 * members' bytes in key order; an image folder gives jpg and label; a
 * missing member, a bad SPEC, a member over --max-bytes and a truncated tar
 * fail with their message and leave no file. Tars are written byte by byte
 * here, in the fixture's folder.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "dataset/tar.h"
#include "feeder.h"
#include "testutil.h"

#ifndef FEEDER_PACK_TOOL
#define FEEDER_PACK_TOOL ""
#endif

/* ---- a tar writer ---- */

static void tb_write(tu_tar *t, const char *rel, size_t cut)
{
    char p[512];
    tu_path(p, sizeof(p), rel);
    ck_assert_int_eq(bu_write_file(p, t->b, cut ? cut : t->len), 0);
    free(t->b);
    memset(t, 0, sizeof(*t));
}

/* ---- the set: shard s holds keys s/000 .. of jpg, cls and json ---- */

#define SHARDS 2
static const int KEYS[SHARDS] = {3, 2};

/* Key k of shard s's jpg bytes: 100 + 611 * k + 37 * s of (s*31 + k*7 + j). */
static size_t jpg_len(int s, int k) { return 100 + 611 * (size_t)k + 37 * (size_t)s; }
static void jpg_bytes(int s, int k, uint8_t *out)
{
    for (size_t j = 0; j < jpg_len(s, k); j++)
        out[j] = (uint8_t)(s * 31 + k * 7 + j);
}
static int64_t cls_of(int s, int k) { return s * 10 + k; }
static void json_text(int s, int k, char *out, size_t len)
{
    snprintf(out, len, "{\"shard\": %d, \"key\": %d%s}", s, k, k % 2 ? ", \"odd\": true" : "");
}

/* One key's members, in the order jpg, cls, json (skip: one left out). */
static void add_key(tu_tar *t, int s, int k, const char *skip)
{
    char name[64], text[128];
    uint8_t jpg[2048];
    jpg_bytes(s, k, jpg);
    snprintf(name, sizeof(name), "s%d/%03d.jpg", s, k);
    if (!skip || strcmp(skip, "jpg"))
        tu_tar_member(t, name, '0', jpg, jpg_len(s, k));
    snprintf(name, sizeof(name), "s%d/%03d.cls", s, k);
    snprintf(text, sizeof(text), "%lld\n", (long long)cls_of(s, k));
    if (!skip || strcmp(skip, "cls"))
        tu_tar_member(t, name, '0', text, strlen(text));
    snprintf(name, sizeof(name), "s%d/%03d.json", s, k);
    json_text(s, k, text, sizeof(text));
    if (!skip || strcmp(skip, "json"))
        tu_tar_member(t, name, '0', text, strlen(text));
}

/* S-0.tar, S-1.tar; key `skip_key` of shard 1 lacks member `skip`. */
static void make_set(int skip_key, const char *skip)
{
    for (int s = 0; s < SHARDS; s++) {
        tu_tar t = {0};
        tu_tar_member(&t, "s/", '5', NULL, 0); /* a folder: no sample's */
        for (int k = 0; k < KEYS[s]; k++)
            add_key(&t, s, k, s == 1 && k == skip_key ? skip : NULL);
        tu_tar_grow(&t, 1024);
        char rel[32];
        snprintf(rel, sizeof(rel), "S-%d.tar", s);
        tb_write(&t, rel, 0);
    }
}

/* ---- running the tool ---- */

/* feeder-pack `args` (--quiet added); its exit status, its stderr in out. */
static int pack_tool(const char *args, char *out, size_t outlen)
{
    char cmd[4096], errf[512];
    tu_path(errf, sizeof(errf), "tool.err");
    snprintf(cmd, sizeof(cmd), "cd %s && %s %s --quiet 2>%s", tu_dir, FEEDER_PACK_TOOL, args,
             errf);
    int st = system(cmd);
    uint8_t *e;
    size_t n;
    out[0] = 0;
    if (bu_read_file(errf, &e, &n) == 0) {
        snprintf(out, outlen, "%.*s", (int)n, (const char *)e);
        free(e);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Nothing but the inputs and tool.err in the folder: no output, no .tmp. */
static void assert_no_output(void)
{
    DIR *d = opendir(tu_dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)))
        ck_assert_msg(!strstr(e->d_name, ".pack"), "left behind: %s", e->d_name);
    closedir(d);
}

/* ---- reading a pack back ---- */

typedef struct sample {
    uint8_t *v[4];
    size_t len[4];
} sample;

/* Every sample of the pack at tu_dir/rel, in order, each field's bytes;
 * the schema must be `nf` fields named `names`, of `elems`. */
static sample *read_pack(const char *rel, uint32_t nf, const char *const *names,
                         const int *elems, uint64_t *count)
{
    char p[512], err[1024];
    tu_path(p, sizeof(p), rel);
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_packed(p, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder_dataset_field(ds, 0, NULL), (int)nf);
    for (uint32_t k = 0; k < nf; k++) {
        feeder_field f;
        ck_assert_int_eq(feeder_dataset_field(ds, k, &f), (int)nf);
        ck_assert_str_eq(f.name, names[k]);
        ck_assert_int_eq(f.elem, elems[k]);
    }
    uint64_t n = feeder_dataset_size(ds);
    sample *out = calloc(n, sizeof(*out));
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 1), 0);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        for (uint32_t k = 0; k < nf; k++) {
            feeder_tensor t;
            ck_assert_int_eq(feeder_batch_field_at(b, k, &t), 0);
            for (uint32_t j = 0; j < b->count; j++) {
                sample *s = &out[b->indices[j]];
                const uint8_t *src;
                if (t.batching == FEEDER_FIELD_RAGGED) {
                    s->len[k] = (size_t)(t.offsets[j + 1] - t.offsets[j]);
                    src = (const uint8_t *)t.data + t.offsets[j];
                } else if (t.batching == FEEDER_FIELD_PADDED) {
                    s->len[k] = (size_t)t.lengths[j];
                    src = (const uint8_t *)t.data + j * t.shape[1];
                } else {
                    s->len[k] = 8;
                    src = (const uint8_t *)t.data + 8 * j;
                }
                s->v[k] = malloc(s->len[k] + 1);
                memcpy(s->v[k], src, s->len[k]);
            }
        }
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    *count = n;
    return out;
}

static void free_samples(sample *s, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            free(s[i].v[k]);
    free(s);
}

static int64_t as_i64(const sample *s, int k)
{
    int64_t v;
    ck_assert_uint_eq(s->len[k], 8);
    memcpy(&v, s->v[k], 8);
    return v;
}

/* Sample i of the set is key k of shard s, and its fields jpg, cls, json
 * are fields fj, fc, fs of the pack (-1: not packed). */
static void assert_set(const sample *got, uint64_t n, int fj, int fc, int fs)
{
    uint64_t i = 0;
    for (int s = 0; s < SHARDS; s++)
        for (int k = 0; k < KEYS[s]; k++, i++) {
            ck_assert_uint_lt(i, n);
            uint8_t jpg[2048];
            char json[128];
            jpg_bytes(s, k, jpg);
            json_text(s, k, json, sizeof(json));
            ck_assert_uint_eq(got[i].len[fj], jpg_len(s, k));
            ck_assert_int_eq(memcmp(got[i].v[fj], jpg, jpg_len(s, k)), 0);
            ck_assert_int_eq(as_i64(&got[i], fc), cls_of(s, k));
            if (fs >= 0) {
                ck_assert_uint_eq(got[i].len[fs], strlen(json));
                ck_assert_int_eq(memcmp(got[i].v[fs], json, strlen(json)), 0);
            }
        }
    ck_assert_uint_eq(i, n);
}

/* ---- feeder__tar_members ---- */

static long mem_read(void *ctx, uint64_t off, uint8_t *dst, size_t len)
{
    const tu_tar *t = ctx;
    size_t n = off >= t->len ? 0 : t->len - off < len ? t->len - off : len;
    memcpy(dst, t->b + off, n);
    return (long)n;
}

static int members_of(tu_tar *t, size_t size, feeder__tar_index *ix, char *err, size_t errlen)
{
    feeder__tar_src src = {mem_read, t, size};
    return feeder__tar_members(&src, "m.tar", ix, err, errlen);
}

START_TEST(test_members_listed)
{
    tu_tar t = {0};
    tu_tar_member(&t, "d/", '5', NULL, 0);
    tu_tar_member(&t, "d/a.jpg", '0', "JJJ", 3);
    tu_tar_member(&t, "d/a.cls", '0', "7", 1);
    tu_tar_member(&t, "README", '0', "no key", 6);
    tu_tar_member(&t, "d/.hidden", '0', "x", 1);
    tu_tar_member(&t, "./d/b.seg.png", '0', "PNGPNG", 6);
    tu_tar_member(&t, "d/a.json", '0', "{}", 2);
    tu_tar_grow(&t, 1024);
    feeder__tar_index ix;
    char err[512] = "";
    ck_assert_msg(members_of(&t, t.len, &ix, err, sizeof(err)) == 0, "%s", err);
    static const char *const key[] = {"d/a", "d/a", "d/b", "d/a"};
    static const char *const ext[] = {"jpg", "cls", "seg.png", "json"};
    static const uint64_t off[] = {1024, 2048, 5120, 6144};
    static const uint64_t len[] = {3, 1, 6, 2};
    ck_assert_uint_eq(ix.n, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(feeder__tar_key(&ix, i), key[i]);
        ck_assert_str_eq(feeder__tar_detail(&ix, i), ext[i]);
        ck_assert_uint_eq(ix.e[i].off, off[i]);
        ck_assert_uint_eq(ix.e[i].len, len[i]);
        ck_assert_int_eq(memcmp(t.b + ix.e[i].off, i == 0 ? "JJJ" : i == 1 ? "7"
                                : i == 2 ? "PNGPNG" : "{}", len[i]), 0);
    }
    feeder__tar_index_free(&ix);
    /* Cut inside d/b.seg.png's data: the whole shard fails, named. */
    ck_assert_int_eq(members_of(&t, 5123, &ix, err, sizeof(err)), FEEDER_EDATASET);
    ck_assert_str_eq(err, "m.tar: member d/b.seg.png: its 6 bytes at offset 5120 run past the "
                          "end of the shard (5123 bytes): truncated");
    ck_assert_ptr_null(ix.e);
    /* A bad checksum after the first header. */
    t.b[2560 + 148] ^= 1;
    ck_assert_int_eq(members_of(&t, t.len, &ix, err, sizeof(err)), FEEDER_EDATASET);
    ck_assert_ptr_nonnull(strstr(err, "m.tar: the header at offset 2560 has a bad checksum"));
    /* Not a tar at all. */
    ck_assert_int_eq(members_of(&t, 100, &ix, err, sizeof(err)), FEEDER_EDATASET);
    ck_assert_ptr_nonnull(strstr(err, "m.tar: not a tar file"));
    free(t.b);
    /* A symbolic link with a key is damage too. */
    memset(&t, 0, sizeof(t));
    tu_tar_member(&t, "a.jpg", '0', "J", 1);
    tu_tar_member(&t, "a.json", '2', NULL, 0);
    tu_tar_grow(&t, 1024);
    ck_assert_int_eq(members_of(&t, t.len, &ix, err, sizeof(err)), FEEDER_EDATASET);
    ck_assert_str_eq(err, "m.tar: member a.json is a symbolic link (type '2'), not a regular "
                          "file");
    free(t.b);
}
END_TEST

/* ---- the tool ---- */

START_TEST(test_tar_default_fields)
{
    if (!FEEDER_PACK_TOOL[0])
        return;
    make_set(-1, NULL);
    char msg[2048];
    int st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack --verify --workers 2",
                       msg, sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    ck_assert_str_eq(msg, "");
    static const char *const names[] = {"jpg", "label", "json"};
    static const int elems[] = {FEEDER_ELEM_U8, FEEDER_ELEM_I64, FEEDER_ELEM_U8};
    uint64_t n;
    sample *got = read_pack("F.pack", 3, names, elems, &n);
    assert_set(got, n, 0, 1, 2);
    free_samples(got, n);
    /* The maximum of a bytes field is the largest member: 100 + 611 * 2. */
    char p[512], err[512];
    tu_path(p, sizeof(p), "F.pack");
    feeder_dataset *ds;
    feeder_field f;
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_dataset_field(ds, 0, &f), 3);
    ck_assert_int_eq(f.batching, FEEDER_FIELD_RAGGED);
    ck_assert_uint_eq(f.shape[0], 1322);
    ck_assert_int_eq(feeder_dataset_field(ds, 1, &f), 3);
    ck_assert_uint_eq(f.ndim, 0);
    feeder_dataset_destroy(ds);
    /* An empty first shard (end-of-archive blocks only): the fields come from
     * the first key there is; an empty set fails, named. */
    tu_tar e = {0};
    tu_tar_grow(&e, 1024);
    tb_write(&e, "E.tar", 0);
    st = pack_tool("--mode fields --data '{E,S-0,S-1}.tar' --out E.pack", msg, sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    got = read_pack("E.pack", 3, names, elems, &n);
    assert_set(got, n, 0, 1, 2);
    free_samples(got, n);
    st = pack_tool("--mode fields --data E.tar --out E2.pack", msg, sizeof(msg));
    ck_assert_int_eq(st, 1);
    ck_assert_str_eq(msg, "feeder-pack: E.tar: no member with a key (name.ext) in any shard\n");
    /* --max-bytes sets it instead. */
    st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out M.pack --max-bytes 4K", msg,
                   sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    tu_path(p, sizeof(p), "M.pack");
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_dataset_field(ds, 2, &f), 3);
    ck_assert_uint_eq(f.shape[0], 4096);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_tar_spec)
{
    if (!FEEDER_PACK_TOOL[0])
        return;
    make_set(-1, NULL);
    char msg[2048];
    int st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack --verify "
                       "--fields 'json:u8:padded,image=jpg:u8:ragged,cls:i64'",
                       msg, sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    static const char *const names[] = {"json", "image", "label"};
    static const int elems[] = {FEEDER_ELEM_U8, FEEDER_ELEM_U8, FEEDER_ELEM_I64};
    uint64_t n;
    sample *got = read_pack("F.pack", 3, names, elems, &n);
    assert_set(got, n, 1, 2, 0);
    free_samples(got, n);
    /* Members no field names are left out; cls under its own name. */
    st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out G.pack --fields 'jpg,c=cls'",
                   msg, sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    static const char *const names2[] = {"jpg", "c"};
    got = read_pack("G.pack", 2, names2, elems + 1, &n);
    assert_set(got, n, 0, 1, -1);
    free_samples(got, n);
}
END_TEST

START_TEST(test_folder_fields)
{
    if (!FEEDER_PACK_TOOL[0])
        return;
    tu_folder("imgs", 2, 3);
    char msg[2048];
    int st = pack_tool("--mode fields --data imgs --out F.pack --verify", msg, sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    static const char *const names[] = {"jpg", "label"};
    static const int elems[] = {FEEDER_ELEM_U8, FEEDER_ELEM_I64};
    uint64_t n;
    sample *got = read_pack("F.pack", 2, names, elems, &n);
    ck_assert_uint_eq(n, 6);
    for (uint64_t i = 0; i < n; i++) {
        char p[512];
        snprintf(p, sizeof(p), "%s/imgs/c%d/%03d.jpg", tu_dir, (int)(i / 3), (int)(i % 3));
        uint8_t *b;
        size_t len;
        ck_assert_int_eq(bu_read_file(p, &b, &len), 0);
        ck_assert_uint_eq(got[i].len[0], len);
        ck_assert_int_eq(memcmp(got[i].v[0], b, len), 0);
        ck_assert_int_eq(as_i64(&got[i], 1), (int64_t)(i / 3));
        free(b);
    }
    free_samples(got, n);
    /* A list file: its order, its labels. */
    char list[512];
    tu_path(list, sizeof(list), "l.txt");
    const char *lines = "imgs/c1/000.jpg 5\nimgs/c0/002.jpg 2\n";
    ck_assert_int_eq(bu_write_file(list, lines, strlen(lines)), 0);
    st = pack_tool("--mode fields --data l.txt --out L.pack", msg, sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    got = read_pack("L.pack", 2, names, elems, &n);
    ck_assert_uint_eq(n, 2);
    static const char *const files[] = {"imgs/c1/000.jpg", "imgs/c0/002.jpg"};
    for (uint64_t i = 0; i < n; i++) {
        char p[512];
        tu_path(p, sizeof(p), files[i]);
        uint8_t *b;
        size_t len;
        ck_assert_int_eq(bu_read_file(p, &b, &len), 0);
        ck_assert_uint_eq(got[i].len[0], len);
        ck_assert_int_eq(memcmp(got[i].v[0], b, len), 0);
        ck_assert_int_eq(as_i64(&got[i], 1), i == 0 ? 5 : 2);
        free(b);
    }
    free_samples(got, n);
    /* --fields names tar members only. */
    st = pack_tool("--mode fields --data imgs --out G.pack --fields jpg", msg, sizeof(msg));
    ck_assert_int_eq(st, 2);
    ck_assert_str_eq(msg, "feeder-pack: --fields applies to tar shards only (a folder or list "
                          "file gives the fields jpg and label)\n"
                          "(feeder-pack --help lists the options)\n");
}
END_TEST

START_TEST(test_errors)
{
    if (!FEEDER_PACK_TOOL[0])
        return;
    char msg[2048];
    /* Key s1/001 has no .json: named with its shard; nothing is written. */
    make_set(1, "json");
    int st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack", msg, sizeof(msg));
    ck_assert_int_eq(st, 1);
    ck_assert_str_eq(msg, "feeder-pack: S-1.tar: key s1/001: no .json member (field 'json'; "
                          "the first key has one)\n");
    assert_no_output();
    st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack --fields jpg,json", msg,
                   sizeof(msg));
    ck_assert_int_eq(st, 1);
    ck_assert_str_eq(msg, "feeder-pack: S-1.tar: key s1/001: no .json member (field 'json', "
                          "named by --fields)\n");
    /* Without json in the SPEC that key packs. */
    st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack --fields jpg,cls", msg,
                   sizeof(msg));
    ck_assert_msg(st == 0, "%s", msg);
    char p[512];
    tu_path(p, sizeof(p), "F.pack");
    ck_assert_int_eq(unlink(p), 0);
    /* Bad SPECs: exit 2, the entry named. */
    static const char *const bad[][2] = {
        {"jpg:u16", "extension 'jpg': type 'u16': expected u8 or i64"},
        {"cls:i64:ragged", "extension 'cls': i64 is one integer per key: no batching "
                           "('ragged') after it"},
        {"jpg:u8:fixed", "extension 'jpg': batching 'fixed': expected ragged or padded"},
        {"jpg,,cls", "an empty entry"},
        {"jpg,jpg", "extension 'jpg' named twice"},
        {"a=jpg,a=cls", "extension 'cls': field name 'a' taken by another field"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char args[256], want[1024];
        snprintf(args, sizeof(args), "--mode fields --data 'S-{0..1}.tar' --out F.pack "
                 "--fields '%s'", bad[i][0]);
        ck_assert_int_eq(pack_tool(args, msg, sizeof(msg)), 2);
        snprintf(want, sizeof(want), "feeder-pack: --fields '%s': %s (expected "
                 "[NAME=]EXT[:u8|i64[:ragged|padded]], comma-separated)\n"
                 "(feeder-pack --help lists the options)\n", bad[i][0], bad[i][1]);
        ck_assert_str_eq(msg, want);
    }
    /* A member over --max-bytes: 100 + 611 * 2 = 1322 bytes. */
    make_set(-1, NULL);
    st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack --max-bytes 1000", msg,
                   sizeof(msg));
    ck_assert_int_eq(st, 1);
    ck_assert_str_eq(msg, "feeder-pack: S-0.tar: key s0/002: member .jpg is 1322 bytes, over "
                          "--max-bytes 1000\n");
    /* --shard-size is for RAW and JPEG packs. */
    ck_assert_int_eq(pack_tool("--mode fields --data S-0.tar --out F.pack --shard-size 1M", msg,
                               sizeof(msg)), 2);
    ck_assert_ptr_nonnull(strstr(msg, "--shard-size applies to --mode raw and jpeg only"));
    assert_no_output();
}
END_TEST

START_TEST(test_truncated_and_bad_text)
{
    if (!FEEDER_PACK_TOOL[0])
        return;
    char msg[2048];
    /* S-1.tar cut inside key s1/001's jpg data (its header at 3072). */
    tu_tar t = {0};
    for (int k = 0; k < 2; k++)
        add_key(&t, 1, k, NULL);
    tb_write(&t, "S-1.tar", 3584 + 300);
    t = (tu_tar){0};
    add_key(&t, 0, 0, NULL);
    tu_tar_grow(&t, 1024);
    tb_write(&t, "S-0.tar", 0);
    int st = pack_tool("--mode fields --data 'S-{0..1}.tar' --out F.pack", msg, sizeof(msg));
    ck_assert_int_eq(st, 1);
    ck_assert_str_eq(msg, "feeder-pack: S-1.tar: member s1/001.jpg: its 748 bytes at offset "
                          "3584 run past the end of the shard (3884 bytes): truncated\n");
    assert_no_output();
    /* A .cls that holds no integer fails its sample, named. */
    t = (tu_tar){0};
    tu_tar_member(&t, "a.jpg", '0', "J", 1);
    tu_tar_member(&t, "a.cls", '0', "dog", 3);
    tu_tar_grow(&t, 1024);
    tb_write(&t, "S-1.tar", 0);
    st = pack_tool("--mode fields --data S-1.tar --out F.pack", msg, sizeof(msg));
    ck_assert_int_eq(st, 1);
    ck_assert_str_eq(msg, "feeder-pack: S-1.tar: key a: member .cls holds 'dog', not an integer "
                          "(field 'label' is i64)\n");
    assert_no_output();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pack_tool_fields");
    TCase *tc = tcase_create("fields");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_members_listed);
    tcase_add_test(tc, test_tar_default_fields);
    tcase_add_test(tc, test_tar_spec);
    tcase_add_test(tc, test_folder_fields);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_truncated_and_bad_text);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
