/*
 * libFuzzer target for the packed format's parser (loader/pack_format.c):
 * whatever the bytes, feeder__pack_parse must return 0 or FEEDER_EFORMAT with
 * a message, never read outside the buffer (ASan watches), and what it
 * accepts must hold: every record, label, class name and field name inside
 * the buffer, and a FIELDS file's schema one the user API takes.
 *
 * Random bytes almost never carry a right header crc32c, which would stop
 * the fuzzer at the first check; so every input is parsed twice, as it is and
 * with its header crc recomputed, to reach the checks behind it.
 */
#include <stdlib.h>
#include <string.h>

#include "dataset/pack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *buf, size_t len)
{
    feeder__pack_view v;
    char err[1024];
    int rc = feeder__pack_parse(buf, len, "fuzz.pack", &v, err, sizeof(err));
    if (rc != 0) {
        if (rc != FEEDER_EFORMAT || strncmp(err, "fuzz.pack: ", 11) != 0)
            abort();
        return;
    }
    /* Accepted: everything it points at is inside the buffer. Touch it all,
     * so a wrong acceptance is an ASan report here. */
    unsigned sum = 0;
    for (uint64_t i = 0; i < v.h.count; i++) {
        uint64_t off, size;
        uint32_t crc;
        feeder__pack_entry(&v, i, &off, &size, &crc);
        if (off > len || size > len - off || size == 0)
            abort();
        sum += buf[off] + buf[off + size - 1];
        int64_t l = feeder__pack_label(&v, i);
        if (l < 0 || (uint64_t)l >= v.num_classes)
            abort();
        if (v.h.kind == FEEDER_RECORD_RAW && size != v.h.record_bytes)
            abort();
    }
    const uint8_t *c = v.classes;
    for (uint64_t k = 0; c && k < v.h.num_classes; k++) {
        size_t n = strlen((const char *)c);
        sum += n;
        c += n + 1;
    }
    /* FIELDS: a schema the user API would take, its names inside the buffer. */
    if ((v.h.kind == FEEDER_RECORD_FIELDS) != (v.nfields > 0) ||
        (v.nfields && feeder__fields_check(v.fields, v.nfields, NULL, 0)))
        abort();
    for (uint32_t k = 0; k < v.nfields; k++) {
        const uint8_t *name = (const uint8_t *)v.fields[k].name;
        if (name < buf || name >= buf + len)
            abort();
        sum += strlen(v.fields[k].name);
    }
    if (sum == 0xdeadbeef) /* keeps the reads */
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size >= FEEDER__PACK_HEADER_BYTES) {
        uint8_t *copy = malloc(size);
        if (!copy)
            return 0;
        memcpy(copy, data, size);
        uint32_t crc = feeder__crc32c(0, copy, FEEDER__PACK_CRC_OFF);
        for (int i = 0; i < 4; i++)
            copy[FEEDER__PACK_CRC_OFF + i] = (uint8_t)(crc >> (8 * i));
        check(copy, size);
        free(copy);
    }
    return 0;
}
