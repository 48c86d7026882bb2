/*
 * feeder/fields.h: fields (samples beyond one image and one label) and batch datasets (the
 * dataset makes whole batches).
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_FIELDS_H
#define FEEDER_PUBLIC_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Fields: samples beyond one image and one label                            */
/* ------------------------------------------------------------------------ */

/* A dataset may declare its samples as named fields (a token sequence, an
 * image and its boxes, an image and its mask). Each field has an element
 * type and a shape of up to FEEDER_FIELD_MAX_DIMS dimensions whose leading
 * one is fixed or variable up to a maximum. A batch holds each field as one
 * tensor in the shared-memory slot; a variable field is either padded to the
 * batch's longest sample (with a lengths tensor) or ragged (the samples'
 * values one after another, with offsets). Folder, list and packed datasets
 * are the built-in schema of two fixed fields, "image" (uint8 [H, W, 3], or
 * [3, H, W] in NCHW) and "label" (int64, a scalar per sample), laid out in
 * the slot exactly as before. */

#define FEEDER_FIELD_MAX_DIMS 4
/* Longest field name, without its NUL. */
#define FEEDER_FIELD_NAME_MAX 31
/* Most fields in a schema. */
#define FEEDER_FIELDS_MAX 16

/* Element types of fields. Numbered, never renumbered. */
typedef enum feeder_elem {
    FEEDER_ELEM_U8 = 0,
    FEEDER_ELEM_I16 = 1,
    FEEDER_ELEM_I32 = 2,
    FEEDER_ELEM_I64 = 3,
    FEEDER_ELEM_F16 = 4,  /* IEEE binary16, as stored bits */
    FEEDER_ELEM_BF16 = 5, /* bfloat16, as stored bits */
    FEEDER_ELEM_F32 = 6
} feeder_elem;

/* How a field's samples make one batch tensor. */
typedef enum feeder_field_batching {
    FEEDER_FIELD_FIXED = 0,  /* every sample has shape[0] rows: [count, shape...] */
    FEEDER_FIELD_PADDED = 1, /* up to shape[0] rows: [count, longest, shape[1:]...], rows past
                                a sample's length are zero; lengths: count int64 */
    FEEDER_FIELD_RAGGED = 2  /* up to shape[0] rows: values [total, shape[1:]...], sample i's
                                rows offsets[i] .. offsets[i + 1]; offsets: count + 1
                                int64 from 0; lengths: count int64 */
} feeder_field_batching;

/* One field of a schema. A scalar per sample is ndim 0 (FIXED only). For
 * PADDED and RAGGED, shape[0] is the maximum number of rows a sample may
 * have; the other dimensions are fixed. Every dimension is at least 1. */
typedef struct feeder_field {
    const char *name;    /* 1 .. FEEDER_FIELD_NAME_MAX characters, unique in the schema;
                            copied by feeder_dataset_create_fields */
    int32_t elem;        /* feeder_elem */
    int32_t batching;    /* feeder_field_batching */
    uint32_t ndim;       /* 0 .. FEEDER_FIELD_MAX_DIMS */
    uint32_t shape[FEEDER_FIELD_MAX_DIMS];
    uint32_t reserved_[3];
} feeder_field;

/* Bytes of one element of `elem`, or 0 for an unknown type. Thread-safe. */
FEEDER_API size_t feeder_elem_size(int elem);
/* Name of `elem` ("u8", "i16", "i32", "i64", "f16", "bf16", "f32"), or NULL. */
FEEDER_API const char *feeder_elem_name(int elem);

/* Where a fields dataset's get callback writes one sample. Entry k is field
 * k of the schema: data[k] is the field's room for this sample (capacity[k]
 * bytes: shape[0] rows of the field's row size, the maximum for variable
 * fields), and rows[k] is the number of rows written, which the callback
 * sets for every variable field (fixed fields come preset to shape[0], and
 * scalars to 1; leaving a variable field unset fails the sample). The worker
 * checks each rows[k] against the field's maximum before anything reads the
 * sample: a longer sample fails (FEEDER_ERANGE) with a message naming the
 * sample index and the field, under FEEDER_ON_ERROR_FAIL, and is replaced
 * or left out under SKIP and DROP. Values past rows[k] need not be written.
 * feeder_sample_put copies with the checks done first. Lifetime: valid
 * during the get call. */
typedef struct feeder_sample_out {
    uint32_t nfields;
    uint32_t reserved0_;
    void *const *data;
    const size_t *capacity;
    uint64_t *rows;
    const feeder_field *fields; /* the schema, nfields entries */
    /* The first failed feeder_sample_put (the worker fails the sample with
     * it even when the callback ignores the return): */
    int32_t put_error;          /* 0, or the code put returned */
    uint32_t put_field;
    uint64_t put_rows;
    int32_t put_elem;
    uint32_t reserved1_;
    uint64_t reserved_[2];
} feeder_sample_out;

/* Copy `rows` rows of field `field` from `src` (elements of type `elem`,
 * the field's row layout) into the sample and set its rows. Nothing is
 * written, and the sample fails, when the field does not exist
 * (FEEDER_EINVAL), `elem` is not the field's type (FEEDER_EINVAL: "wrong
 * dtype"), or `rows` is more than its maximum, or not shape[0] for a fixed
 * field (FEEDER_ERANGE). Only inside the get callback of `out`. */
FEEDER_API int feeder_sample_put(feeder_sample_out *out, uint32_t field, int elem,
                                 const void *src, uint64_t rows);

/* A dataset of fields given as C callbacks. `get` fills sample ctx->index
 * through `out` and returns 0, or a negative value to fail the sample,
 * optionally leaving a message of at most errlen bytes in `err`; ctx's
 * height, width, channels and layout are 0. It runs where a
 * feeder_dataset_callbacks get runs (worker processes, or the calling thread
 * with num_workers 0) under the same rules. */
typedef struct feeder_fields_callbacks {
    uint64_t (*len)(void *user);
    int (*get)(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
               size_t errlen);
    /* Optional: called once per dataset destroy. */
    void (*destroy)(void *user);
} feeder_fields_callbacks;

/* Wrap callbacks and a schema of `nfields` fields as a dataset. `cb`,
 * `fields` and the names are copied; `user` is borrowed and handed to every
 * callback. Fails with FEEDER_EINVAL when len or get is missing, or when the
 * schema is not valid; `err` (errlen bytes, may be NULL) then names the field
 * and what is wrong ("field 2 ('boxes'): ragged needs ndim >= 1"). Loaders
 * over it take no augment pipeline. With FEEDER_OPT_DEVICE >= 0 every field
 * reaches the device as the dataset wrote it (each field's used bytes,
 * lengths and offsets copied, one ready_event for all); DTYPE must then be
 * FEEDER_DTYPE_UINT8 (the start fails with FEEDER_EINVAL otherwise).
 * Destroy with feeder_dataset_destroy. Thread-safety: any thread. */
FEEDER_API int feeder_dataset_create_fields(const feeder_fields_callbacks *cb,
                                            const feeder_field *fields, uint32_t nfields,
                                            void *user, feeder_dataset **out, char *err,
                                            size_t errlen);

/* The schema of a dataset: its number of fields and, when `out` is not NULL
 * and field < that number, a copy of field `field` (whose name is borrowed
 * from the dataset). Folder, list and packed datasets give the built-in
 * schema: "image" (u8, ndim 3, shape {0, 0, 3}: height and width are the
 * loader's options, unknown here) and "label" (i64, ndim 0). Returns the
 * number of fields, or FEEDER_EINVAL. Thread-safe. */
FEEDER_API int feeder_dataset_field(const feeder_dataset *ds, uint32_t field, feeder_field *out);

/* One field of a batch as a tensor. The batch dimension comes first and
 * counts the batch's samples (feeder_batch.count): FIXED [count, shape...],
 * PADDED [count, padded, shape[1:]...] where padded is the batch's longest
 * sample (or what the collate callback padded it to), RAGGED values
 * [offsets[count], shape[1:]...]. Row-major and contiguous. */
typedef struct feeder_tensor {
    void *data;              /* the values; writable (the slot is the batch's) */
    const char *name;        /* the field's name, borrowed from the dataset */
    int32_t elem;            /* feeder_elem */
    int32_t batching;        /* feeder_field_batching */
    uint32_t ndim;           /* dimensions of shape[] used */
    int32_t device;          /* CUDA device of data, device_lengths and device_offsets;
                                -1: on the host */
    uint64_t shape[FEEDER_FIELD_MAX_DIMS + 1];
    size_t bytes;            /* bytes of data the shape covers */
    int64_t *lengths;        /* PADDED, RAGGED: count rows, one per sample; else NULL.
                                On the host, device batches too */
    int64_t *offsets;        /* RAGGED: count + 1 row offsets from 0; else NULL. On the
                                host, device batches too */
    const int64_t *device_lengths; /* device batches: the same on the device; else NULL */
    const int64_t *device_offsets;
    uint64_t reserved_[2];
} feeder_tensor;

/* Field `field` (by position in the schema) of a batch, or inside a collate
 * callback the batch it is handed. For a device batch, data (and
 * device_lengths, device_offsets) are device memory of `device`, complete
 * once the batch's ready_event has passed, and lengths and offsets host
 * copies; the image schema's fields of a device batch are its device_data
 * and device_labels (their dtype and layout as the batch says). 0, or
 * FEEDER_EINVAL (NULL arguments, no such field, a float device image batch's
 * "image": its element type is no feeder_elem of uint8).
 * Lifetime: the pointers are the batch's, valid until feeder_batch_release.
 * Thread-safety: as the batch. */
FEEDER_API int feeder_batch_field_at(const feeder_batch *b, uint32_t field, feeder_tensor *out);
/* The same by name; FEEDER_EINVAL when the schema has no such field. */
FEEDER_API int feeder_batch_field(const feeder_batch *b, const char *name, feeder_tensor *out);

/* Inside a collate callback: pad PADDED field `field` of the batch to `rows`
 * rows per sample (from the batch's longest up to the field's maximum; the
 * added rows are zero), e.g. to a multiple of 8. FEEDER_ERANGE outside those
 * bounds, FEEDER_EINVAL for another kind of field or outside a collate
 * callback. */
FEEDER_API int feeder_batch_pad_field(feeder_batch *b, uint32_t field, uint64_t rows);

/* A per-batch collate callback: runs once per batch after all its samples
 * are in and after the variable fields are padded or packed (and samples
 * left out by DROP removed), before the batch is lent. It may read and
 * write every field of `batch` (feeder_batch_field), e.g. build an
 * attention mask field, mix labels, pad (feeder_batch_pad_field);
 * batch->count, epoch, number and indices are set, data and labels are NULL.
 * Non-zero fails the batch (FEEDER_ECALLBACK, with `err`'s text).
 * Where it runs: in the worker process that finishes the batch's last part
 * (parts of one batch go to several workers; a count in the slot says which
 * is last), so never on the user's thread when num_workers > 0; with
 * num_workers 0 in the calling thread, inside feeder_next. Its output must
 * depend only on the batch's contents and (seed, epoch, number): then every
 * worker count gives the same bytes. */
typedef int (*feeder_collate_fn)(void *user, feeder_batch *batch, char *err, size_t errlen);

/* Write every sample of fields dataset `ds`, in order, to a packed file
 * (record kind FEEDER_RECORD_FIELDS, format version 3, docs/FORMAT.md) that
 * feeder_dataset_open_packed opens as a fields dataset of the same schema
 * and samples, read by the workers with pread and checked by each record's
 * crc32c. Samples come from the dataset's get callback, in the calling
 * thread (ctx: index, seed 0, epoch 0, worker_id -1), checked as a loader
 * checks them. The file is written as PATH.tmp and renamed over `path` at
 * the end. Returns 0; FEEDER_EINVAL (NULL arguments, a dataset without
 * fields or samples); a sample's error (FEEDER_ERANGE, FEEDER_EINVAL, the
 * callback's code) naming the sample and field; or -errno naming the file,
 * with the message in `err` (errlen bytes, may be NULL); nothing is left
 * at `path` on failure. Thread-safety: as the dataset's get callback. */
FEEDER_API int feeder_pack_fields(const feeder_dataset *ds, const char *path, char *err,
                                  size_t errlen);

/* Set the collate callback (NULL removes it); `user` is borrowed. Fields
 * datasets only: the start fails with FEEDER_EINVAL for another dataset.
 * Before start only (FEEDER_ESTATE after). Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_set_collate(feeder_loader *ld, feeder_collate_fn fn, void *user);

/* Paired transforms, for a fields dataset's get callback: one random crop
 * and flip drawn per sample and applied alike to its image, its mask
 * (nearest neighbour, so classes stay classes) and its boxes (moved, flipped
 * and clipped). Images and masks are row-major [height, width, channels]
 * uint8. */
typedef struct feeder_pair_crop {
    uint32_t x, y, width, height; /* the box taken from the source, in its pixels */
    uint32_t out_width, out_height;
    int32_t flip;                 /* 1: mirrored left to right after the crop */
    uint32_t reserved_[3];
} feeder_pair_crop;

/* Draw sample `index`'s crop of a src_width x src_height source for an
 * out_width x out_height output, as RandomResizedCrop does: an area share in
 * [scale_min, scale_max] and an aspect ratio (log-uniform) in [3/4, 4/3],
 * ten tries, else the centre crop of the output's aspect; flipped with
 * probability flip_p. The draws come from feeder_random(seed, epoch, index,
 * ...) alone (counters 0xFFFE << 32 and up), so the same sample gets the same
 * crop in every worker and after a resume. FEEDER_EINVAL for a zero size,
 * NULL out, or scales outside 0 < min <= max <= 1 or flip_p outside [0, 1].
 * Thread-safe. */
FEEDER_API int feeder_pair_crop_draw(uint64_t seed, uint64_t epoch, uint64_t index,
                                     uint32_t src_width, uint32_t src_height,
                                     uint32_t out_width, uint32_t out_height, double scale_min,
                                     double scale_max, double flip_p, feeder_pair_crop *out);

/* Apply `c` to a src_width x src_height x channels image into `dst`
 * (c->out_height x c->out_width x channels): FEEDER_INTERP_BILINEAR (pixel
 * centres, edges clamped) for images, FEEDER_INTERP_NEAREST for masks.
 * FEEDER_EINVAL when the crop does not lie inside the source or an argument
 * is NULL or 0. Thread-safe. */
FEEDER_API int feeder_pair_crop_image(const feeder_pair_crop *c, const uint8_t *src,
                                      uint32_t src_width, uint32_t src_height, uint32_t channels,
                                      int interp, uint8_t *dst);

/* Apply `c` to n boxes (x0, y0, x1, y1, float, source pixels) in place:
 * moved into the crop, scaled to the output, mirrored when c->flip, clipped
 * to [0, out_width] x [0, out_height]. Boxes left with no area are removed,
 * the rest kept in order; `classes` (n int64, may be NULL) is compacted
 * alike. Returns the number kept. Thread-safe. */
FEEDER_API uint64_t feeder_pair_crop_boxes(const feeder_pair_crop *c, float *boxes,
                                           int64_t *classes, uint64_t n);

/* ------------------------------------------------------------------------ */
/* Batch datasets: the dataset makes whole batches                           */
/* ------------------------------------------------------------------------ */

/* A batch dataset hands each batch whole to one worker, which writes it into
 * the batch's slot in a format of the dataset's own choosing (a language
 * binding's objects, serialised; records of any length). The loader moves
 * the indices to the worker and the bytes back, in order, with its usual
 * guarantees (timeouts, worker deaths named, restarts, nothing leaked).
 * The Python binding's DataLoader runs Python datasets this way. */

/* What a batch dataset's get callback is handed for one batch. */
typedef struct feeder_batch_ctx {
    uint64_t epoch;           /* the epoch */
    uint64_t number;          /* the batch's number within the epoch, from 0 */
    uint64_t seed;            /* the loader's seed */
    const uint64_t *indices;  /* the sampler's count dataset indices; borrowed for the call */
    uint32_t count;           /* may be 0 (a batch sampler's empty batch) */
    int32_t worker_id;        /* -1 in the calling thread (num_workers 0) */
    uint32_t num_workers;
    uint32_t reserved_[5];
} feeder_batch_ctx;

/* Where the callback writes the batch: `data` is the slot's room
 * (`capacity` bytes, FEEDER_OPT_BATCH_ROOM rounded up to pages, page
 * aligned); the callback sets `used` to the bytes it wrote there. A batch
 * larger than the room may put the rest in a descriptor of its own (a
 * memfd, sized with ftruncate): `extra_fd` and `extra_bytes`; the loader
 * takes the descriptor (the worker closes its copy once it is sent) and
 * maps it for the batch's borrower (feeder_batch_payload). */
typedef struct feeder_batch_out {
    void *data;
    size_t capacity;
    size_t used;          /* set by the callback, <= capacity */
    int32_t extra_fd;     /* -1 (preset), or a descriptor the loader takes */
    uint32_t reserved0_;
    size_t extra_bytes;   /* bytes of extra_fd to map, > 0 when extra_fd is set */
    uint64_t reserved_[4];
} feeder_batch_out;

/* A batch dataset's callbacks. `len` gives the number of samples (0 for a
 * dataset with no indices, such as a stream each worker reads on its own:
 * its batch sampler then gives empty batches). `get` makes batch
 * ctx->number from ctx->indices into `out` and returns 0, or a negative
 * value to fail the batch (FEEDER_ECALLBACK for a positive one), leaving a
 * message of at most errlen bytes in `err`; the batch's error names the
 * batch and carries that text. `get` runs in worker processes (forked) or,
 * with num_workers 0, in the calling thread; it must not depend on state
 * changed in the parent after the workers were forked. */
typedef struct feeder_batches_callbacks {
    uint64_t (*len)(void *user);
    int (*get)(void *user, const feeder_batch_ctx *ctx, feeder_batch_out *out, char *err,
               size_t errlen);
    /* Optional: called once per dataset destroy. */
    void (*destroy)(void *user);
} feeder_batches_callbacks;

/* Wrap callbacks as a batch dataset. `cb` is copied; `user` is borrowed and
 * handed to every callback. A loader over it gives each batch to one
 * worker whole (FEEDER_OPT_SPLIT does not apply), gives host batches only
 * (FEEDER_OPT_DEVICE must stay -1) and takes no augment pipeline or collate
 * callback; its batches have `indices` and `count` and no labels, and
 * their bytes come from feeder_batch_payload. The resume state is not
 * available for it (feeder_loader_state_save returns FEEDER_EINVAL).
 * FEEDER_EINVAL when len or get is missing. Destroy with
 * feeder_dataset_destroy. Thread-safety: any thread. */
FEEDER_API int feeder_dataset_create_batches(const feeder_batches_callbacks *cb, void *user,
                                             feeder_dataset **out);

/* A batch dataset's batch: its bytes in the slot (*data, *len: what the
 * callback wrote) and those of its extra descriptor (*extra, *extra_len;
 * NULL and 0 when it set none), both mapped readable and writable. Any out
 * pointer may be NULL. FEEDER_EINVAL for a batch of another dataset, or a
 * NULL batch. Lifetime: valid until feeder_batch_release. Thread-safety: as
 * the batch. */
FEEDER_API int feeder_batch_payload(const feeder_batch *b, void **data, size_t *len,
                                    void **extra, size_t *extra_len);

/* A batch sampler, over any dataset (a batch dataset's, an image folder's):
 * each epoch is a list of batches of any lengths (each at most
 * FEEDER_OPT_BATCH_SIZE indices, which sizes the slots' index room;
 * empty batches are allowed), and each batch may name the worker that must
 * make it (PyTorch's DataLoader sends batch k to worker k mod num_workers,
 * and a worker that reads a stream of its own must get its own batches).
 * `nbatches` gives the epoch's number of batches and `len` its total number
 * of indices; `fill` writes the indices of every batch one after another
 * (len entries), each batch's length (nbatches entries) and each batch's
 * worker (nbatches entries, -1 for any worker; a worker id >= num_workers
 * fails the epoch), and returns 0 or a negative error. The loader asks once
 * per epoch, when the epoch begins, in the thread that calls feeder_next,
 * and never runs an epoch ahead of time with such a sampler. BATCH_SIZE
 * and DROP_LAST do not cut its batches. `cb` copied, `user` borrowed.
 * feeder_sampler_fill gives the indices alone. The resume state is not
 * available for it. */
typedef struct feeder_batch_sampler_callbacks {
    uint64_t (*nbatches)(void *user, uint64_t epoch);
    uint64_t (*len)(void *user, uint64_t epoch);
    int (*fill)(void *user, uint64_t epoch, uint64_t *indices, uint64_t len, uint32_t *lengths,
                int32_t *workers, uint64_t nbatches);
    void (*destroy)(void *user);
} feeder_batch_sampler_callbacks;
FEEDER_API int feeder_sampler_create_batches(const feeder_batch_sampler_callbacks *cb,
                                             void *user, feeder_sampler **out);

/* Calls around every fork of a worker, for a language runtime that must be
 * in a consistent state when its process is copied (CPython: hold the GIL
 * and call PyOS_BeforeFork, then PyOS_AfterFork_Parent or _Child).
 * `prepare` runs in the thread that forks, before the fork; `parent` in it
 * after the fork (also when the fork failed); `child` in the new worker
 * before anything else, worker_init included. Any may be NULL. Before start
 * only (FEEDER_ESTATE after); `h` is copied, `h->user` borrowed.
 * Thread-safety: as feeder_next. */
typedef struct feeder_fork_hooks {
    void (*prepare)(void *user);
    void (*parent)(void *user);
    void (*child)(void *user);
    void *user;
} feeder_fork_hooks;
FEEDER_API int feeder_loader_set_fork_hooks(feeder_loader *ld, const feeder_fork_hooks *h);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_FIELDS_H */
