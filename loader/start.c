/*
 * Start: the options read once into the plan (feeder__host_resolve), the
 * plan validated and what follows from it decided (the job the workers
 * inherit: read path, decoder in use and why, slots, tasks), the limits
 * checked, the trace started, the slots made.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/nvtx.h"
#include "common/trace.h"
#include "dataset/pack.h"
#include "decode/jpeg_index.h"
#include "loader/host.h"

/* A layout's name from the library's table, in capitals as messages write
 * it ("NHWC"), into `buf`. */
static const char *layout_text(uint32_t layout, char buf[8])
{
    const char *name = feeder_option_value_name(FEEDER_OPT_LAYOUT, (int)layout);
    size_t i = 0;
    for (; name && name[i] && i < 7; i++)
        buf[i] = (char)toupper((unsigned char)name[i]);
    buf[i] = 0;
    return buf;
}

/* A fields dataset's batches are made of its fields alone; on the device
 * they arrive as the workers wrote them (no normalisation). */
static int validate_fields(feeder_loader *ld)
{
    if (!ld->ds->nfields)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_set_collate: the dataset "
                                   "has no fields (feeder_dataset_create_fields)");
    const feeder__plan *p = &ld->plan;
    if (p->device.device >= 0 && p->device.dtype != FEEDER_DTYPE_UINT8)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "dtype %lld: a fields dataset's tensors "
                                   "('%s', ...) reach the device as the dataset wrote them; "
                                   "dtype (and mean, std) apply to image batches only",
                                   (long long)p->device.dtype, ld->ds->fields[0].name);
    if (feeder__augment_has_sample_steps(&ld->job.aug) || feeder__augment_has_mix(&ld->job.aug))
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_set_augment: the pipeline "
                                   "works on images; a fields dataset takes none (transform "
                                   "samples in its get callback)");
    return 0;
}

/* A batch dataset's batches are its own bytes, on the host. */
static int validate_batches(feeder_loader *ld)
{
    if (ld->plan.device.device >= 0)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "device %lld: a batch dataset "
                                   "(feeder_dataset_create_batches) gives host batches only",
                                   (long long)ld->plan.device.device);
    if (feeder__augment_has_sample_steps(&ld->job.aug) || feeder__augment_has_mix(&ld->job.aug))
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_set_augment: the pipeline "
                                   "works on images; a batch dataset takes none");
    if (ld->job.collate)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_set_collate: a batch "
                                   "dataset collates in its own get callback");
    return 0;
}

static int validate(feeder_loader *ld)
{
    const struct feeder__plan_pipeline *pp = &ld->plan.pipeline;
    if (feeder__batch_dataset(ld))
        return validate_batches(ld);
    if (pp->scale_min > pp->scale_max)
        return feeder__loader_fail(ld, FEEDER_ERANGE, "scale_min %g > scale_max %g",
                    pp->scale_min, pp->scale_max);
    if (pp->ratio_min > pp->ratio_max)
        return feeder__loader_fail(ld, FEEDER_ERANGE, "ratio_min %g > ratio_max %g",
                    pp->ratio_min, pp->ratio_max);
    if (ld->ds->n == 0)
        return feeder__loader_fail(ld, FEEDER_EDATASET, "the dataset has no samples");
    if (ld->ds->nfields || ld->job.collate)
        return validate_fields(ld);
    /* RAW records are already cropped: no resize applies to them. */
    if (ld->ds->kind == FEEDER__DS_PACKED && ld->ds->pack->v.h.kind == FEEDER_RECORD_RAW)
        return 0;
    /* The shorter side is resized to RESIZE, and either side may be the
     * shorter one, so the crop fits every image only if RESIZE covers both
     * (torchvision would pad with black; a source box cannot). */
    if (pp->pipeline == FEEDER_PIPELINE_EVAL &&
        (pp->resize < pp->height || pp->resize < pp->width))
        return feeder__loader_fail(ld, FEEDER_ERANGE,
                    "eval pipeline: resize %lld is smaller than the %ux%u crop",
                    (long long)pp->resize, pp->height, pp->width);
    return 0;
}

/* `shape`: the options' (a set one disagrees with the file), or the plan's
 * (the layout disagrees with the slots'). */
static int packed_mismatch(feeder_loader *ld, const feeder__plan *plan)
{
    const struct feeder__pack *pk = ld->ds->pack;
    const feeder__pack_header *h = &pk->v.h;
    char file[8], set[8];
    return feeder__loader_fail(ld, FEEDER_ESHAPE,
                "%s holds %ux%ux%u %s records, but the loader was set to height %u, width "
                "%u, channels %u, layout %s",
                pk->path, h->height, h->width, h->channels, layout_text(h->layout, file),
                plan->pipeline.height, plan->pipeline.width, plan->pipeline.channels,
                layout_text(plan->pipeline.layout ? 1 : 0, set));
}

/* The options, read once into the plan (feeder__options_resolve): the
 * sample's shape is the options' or a RAW packed file's, which also takes
 * no transform. Nothing reads an option after this. */
int feeder__host_resolve(feeder_loader *ld)
{
    if (ld->start_failed)
        return ld->start_failed;
    ld->errmsg[0] = 0;
    feeder__plan p;
    if (feeder__options_resolve(ld, &p))
        return packed_mismatch(ld, &p);
    if (ld->ds->kind == FEEDER__DS_PACKED && ld->ds->pack->v.h.kind == FEEDER_RECORD_RAW &&
        p.pipeline.pipeline_set && p.pipeline.pipeline != FEEDER_PIPELINE_EVAL)
        return feeder__loader_fail(ld, FEEDER_ESHAPE,
                    "%s holds precomputed RAW records: pipeline %s cannot be applied to them "
                    "(pack JPEG records to transform them while loading)", ld->ds->pack->path,
                    p.pipeline.pipeline == FEEDER_PIPELINE_TRAIN ? "train" : "resize");
    /* The one write of the plan: the loader is calloc'd, no object of a
     * const type, and nothing has read the plan yet. */
    memcpy((feeder__plan *)&ld->plan, &p, sizeof(p));
    return 0;
}

/* RAW records land in the slots as they are, so the slots' layout must be
 * the file's. It is LAYOUT, except that float batches made on the GPU come
 * from NHWC slots whatever LAYOUT asks of the device batches. */
static int check_packed_layout(feeder_loader *ld, int slot_layout)
{
    const struct feeder__pack *pk = ld->ds->pack;
    if (pk->v.h.kind != FEEDER_RECORD_RAW || (uint32_t)slot_layout == pk->v.h.layout)
        return 0;
    if (slot_layout == ld->plan.pipeline.layout)
        return packed_mismatch(ld, &ld->plan);
    char file[8], slots[8];
    return feeder__loader_fail(ld, FEEDER_ESHAPE,
                "%s holds %s records, but float batches are made on the GPU from %s slots: "
                "pack the file with --layout nhwc",
                pk->path, layout_text(pk->v.h.layout, file), layout_text(slot_layout, slots));
}

/* Whether the file system takes O_DIRECT reads of fd (Linux 6.1+ says;
 * older kernels do not, and every common disk file system does). */
static int direct_supported(int fd)
{
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN))
        return sx.stx_dio_offset_align != 0;
    return 1;
}

/* FEEDER_OPT_PACKED_READ, with AUTO decided from the file's size against the
 * memory this process may use; why, into packed_read_why. */
static int resolve_packed_read(feeder_loader *ld)
{
    int r = ld->plan.pipeline.packed_read;
    ld->decided.packed_read_why[0] = 0;
    if (r != FEEDER_PACKED_READ_AUTO)
        return r;
    if (ld->ds->kind != FEEDER__DS_PACKED)
        return FEEDER_PACKED_READ_MMAP;
    const struct feeder__pack *pk = ld->ds->pack;
    uint64_t room = feeder__memory_room();
    r = feeder__packed_read_auto(pk->map_len, room, pk->shards != NULL,
                                 !pk->shards && direct_supported(pk->fd));
    if (r != FEEDER_PACKED_READ_MMAP)
        feeder__fmt(ld->decided.packed_read_why, sizeof(ld->decided.packed_read_why),
                    "packed_read auto: %s (%llu bytes) is more than half the memory this process "
                    "may use (%llu bytes)%s",
                    pk->path, (unsigned long long)pk->map_len, (unsigned long long)room,
                    r == FEEDER_PACKED_READ_URING ? "; its file system takes no O_DIRECT" : "");
    return r;
}

/* What the workers read of the plan, copied into the job they inherit
 * (and its transform). */
static void resolve_job(feeder_loader *ld)
{
    const feeder__plan *p = &ld->plan;
    feeder__job *job = &ld->job;
    job->ds = ld->ds;
    job->seed = p->sampling.seed;
    job->policy = p->pipeline.error_policy;
    job->num_workers = p->workers.num_workers;
    job->queue_depth = p->pipeline.queue_depth;
    job->packed_read = resolve_packed_read(ld);
    job->verify_crc = p->pipeline.verify_crc;
    feeder__plan_transform(p, &job->t); /* resolve_decoder and layout_slots refine it */
}

/* The read path: decided once so every worker agrees and the user can ask
 * which one runs and why (feeder_loader_io_backend). */
static int resolve_io(feeder_loader *ld)
{
    feeder__job *job = &ld->job;
    int rc = 0;
    int io = ld->plan.pipeline.io;
    int direct = ld->ds->kind == FEEDER__DS_PACKED && job->packed_read == FEEDER_PACKED_READ_DIRECT;
    if (ld->ds->kind == FEEDER__DS_USER) {
        ld->decided.io_backend = "none";
        feeder__fmt(ld->decided.io_reason, sizeof(ld->decided.io_reason),
                    "user dataset: no files to read");
        job->io_mode = FEEDER_IO_PREAD;
    } else if (ld->ds->kind == FEEDER__DS_PACKED && job->packed_read == FEEDER_PACKED_READ_MMAP &&
               ld->plan.workers.num_workers == 0) {
        /* The calling thread never reads a mapping that a file cut in place
         * would turn into SIGBUS in the user's process (worker/packed_read.c). */
        ld->decided.io_backend = "pread";
        feeder__fmt(ld->decided.io_reason, sizeof(ld->decided.io_reason),
                     "num_workers 0: the calling thread reads with pread, never the mapping");
        job->io_mode = FEEDER_IO_PREAD;
    } else if (ld->ds->kind == FEEDER__DS_PACKED && job->packed_read == FEEDER_PACKED_READ_MMAP) {
        ld->decided.io_backend = "mmap";
        feeder__fmt(ld->decided.io_reason, sizeof(ld->decided.io_reason), "%s", "");
        job->io_mode = FEEDER_IO_PREAD;
    } else if (io == FEEDER_IO_PREAD) {
        ld->decided.io_backend = direct ? "pread+O_DIRECT" : "pread";
        feeder__fmt(ld->decided.io_reason, sizeof(ld->decided.io_reason), "forced by option");
        job->io_mode = FEEDER_IO_PREAD;
    } else {
        char why[200];
        rc = feeder__uring_probe(why, sizeof(why));
        if (rc && io == FEEDER_IO_URING)
            return feeder__loader_fail(ld, rc, "io = uring was asked for, but %s", why);
        job->io_mode = rc ? FEEDER_IO_PREAD : FEEDER_IO_URING;
        ld->decided.io_backend = direct ? (rc ? "pread+O_DIRECT" : "io_uring+O_DIRECT")
                                : (rc ? "pread" : "io_uring");
        feeder__fmt(ld->decided.io_reason, sizeof(ld->decided.io_reason), "%s%s%s", rc ? why : "",
                    rc && ld->decided.packed_read_why[0] ? "; " : "", ld->decided.packed_read_why);
        rc = 0;
    }
    return rc;
}

/* The decoder in use: the GPU decoders take JPEG bytes (files, or a packed
 * file's JPEG records); the plan's CPU decoder serves their workers' share. */
static int resolve_decoder(feeder_loader *ld, int gpu_ok)
{
    feeder__job *job = &ld->job;
    feeder__transform *t = &job->t;
    int rc = 0;
    /* The GPU decoders take JPEG bytes: files, or a packed file's JPEG records. */
    int jpeg_records = ld->ds->kind == FEEDER__DS_PACKED &&
                       ld->ds->pack->v.h.kind == FEEDER_RECORD_JPEG;
    if (feeder__decoder_on_gpu(t->decoder) && ld->ds->kind != FEEDER__DS_FOLDER &&
        ld->ds->kind != FEEDER__DS_LIST && ld->ds->kind != FEEDER__DS_TAR && !jpeg_records) {
        feeder__fmt(ld->decided.decoder_reason, sizeof(ld->decided.decoder_reason),
                    "the GPU decoders take JPEG bytes: %s decode on the CPU",
                    ld->ds->kind == FEEDER__DS_PACKED ? "RAW packed records" : "user datasets");
        t->decoder = FEEDER_DECODER_ROI;
    }

    /* Grayscale output (channels 1) stays on the GPU decoders: nvJPEG
     * decodes the Y plane (NVJPEG_OUTPUT_Y, decode/gpu_decode.c), the CPU's
     * JCS_GRAYSCALE; what the workers keep decodes to gray as on the CPU. */

    /* FEEDER_OPT_AUGMENT_ON_DEVICE: the plan's trailing photometric steps
     * and its mixes run on the device batch (cuda/augment.cu), on RGB
     * samples (gray ones stay with the host's ops). */
    ld->gpu.aug_first = feeder__augment_device_first(&job->aug);
    ld->gpu.aug_device = gpu_ok && ld->plan.device.augment_on_device &&
                     feeder__transform_channels(t) == 3 &&
                     (ld->gpu.aug_first < job->aug.nsteps || feeder__augment_has_mix(&job->aug));

    /* The augment pipeline works on pixels in the slot; the GPU decoders
     * leave JPEG bytes there. Steps the device runs after nvJPEG (all of
     * them photometric) do not need the CPU decoders. */
    int host_steps = ld->gpu.aug_device ? ld->gpu.aug_first > 0
                                    : feeder__augment_has_sample_steps(&job->aug);
    if (feeder__decoder_on_gpu(t->decoder) && host_steps) {
        feeder__fmt(ld->decided.decoder_reason, sizeof(ld->decided.decoder_reason),
                    "the augment pipeline (feeder_loader_set_augment) works on decoded pixels "
                    "in the slot: the CPU decodes");
        t->decoder = FEEDER_DECODER_ROI;
    }
    job->cpu_decoder = feeder__decoder_on_gpu(t->decoder) ? FEEDER_DECODER_ROI : t->decoder;
    return rc;
}

/* The GPU decoders' encoded files get room of their own in the slot
 * (collate/slot.h): a 224x224x3 sample is 147 KiB, ImageNet-sized files at
 * quality 90+ are often larger, and a file without room is decoded by its
 * worker (FEEDER_ROUTE_ROOM). */
static int gpu_room(feeder_loader *ld)
{
    feeder__slot_layout *l = &ld->job.layout;
    if (!feeder__decoder_on_gpu(ld->job.t.decoder) || ld->ds->nfields)
        return 0;
    int64_t room = ld->plan.device.gpu_room;
    if (room == 0)
        room = FEEDER__GPU_ROOM;
    if (feeder__slot_layout_room(l, (size_t)room))
        return feeder__loader_fail(ld, FEEDER_EOVERFLOW, "gpu_room %lld x batch_size %u overflows "
                                   "a size", (long long)room, ld->plan.sampling.batch_size);
    return 0;
}

/* The slots' layout, count and the task size. */
static int layout_slots(feeder_loader *ld, int gpu_ok)
{
    feeder__job *job = &ld->job;
    feeder__transform *t = &job->t;
    int rc = 0;
    /* The GPU path is decided before the slots are laid out: the float dtypes
     * are made on the GPU from NHWC uint8 slots. */
    if (gpu_ok && ld->plan.device.dtype != FEEDER_DTYPE_UINT8)
        t->layout = FEEDER_LAYOUT_NHWC;
    if (ld->ds->kind == FEEDER__DS_PACKED &&
        ((rc = check_packed_layout(ld, t->layout)) ||
         (rc = feeder__packed_prepare(ld->ds, job, ld->errmsg, sizeof(ld->errmsg)))))
        return rc;

    const feeder__plan *p = &ld->plan;
    uint32_t batch = p->sampling.batch_size;
    if (feeder__batch_dataset(ld)) /* BATCH_ROOM bytes, as batch x room_bytes */
        rc = feeder__slot_layout_init(&job->layout, batch, 1, 1, 1, FEEDER_LAYOUT_NHWC) ||
             feeder__slot_layout_room(&job->layout,
                                      ((size_t)p->pipeline.batch_room + batch - 1) / batch)
                 ? FEEDER_EOVERFLOW : 0;
    else if (ld->ds->nfields)
        rc = feeder__fields_layout_init(&job->fields, &job->layout, ld->ds->fields,
                                        ld->ds->nfields, batch);
    else
        rc = feeder__slot_layout_init(&job->layout, batch, t->height, t->width,
                                      (uint32_t)feeder__transform_channels(t), t->layout);
    if (rc && ld->ds->nfields)
        return feeder__loader_fail(ld, rc, "batch_size %u x the fields' rooms overflows a size",
                                   batch);
    if (rc)
        return feeder__loader_fail(ld, rc, "batch_size %u x %ux%ux%d overflows a size", batch,
                    t->height, t->width, feeder__transform_channels(t));
    if ((rc = gpu_room(ld)))
        return rc;
    ld->pool.nworkers = (int)p->workers.num_workers;
    uint64_t nslots = (uint64_t)(ld->pool.nworkers ? ld->pool.nworkers : 1) *
                      (uint64_t)p->workers.prefetch_factor;
    if (nslots > 65536 || feeder__slot_total(&job->layout, (uint32_t)nslots, &ld->shm.slots_bytes) ||
        __builtin_add_overflow(ld->shm.slots_bytes, FEEDER__LIVE_BYTES, &ld->shm.shm_bytes))
        return feeder__loader_fail(ld, FEEDER_EOVERFLOW, "%llu slots of %zu bytes overflow a size",
                    (unsigned long long)nslots, job->layout.slot_bytes);
    ld->shm.nslots = (uint32_t)nslots;
    job->live_off = ld->shm.slots_bytes; /* page-aligned: every slot is */
    /* Tasks of about 16 samples by default (at least one per worker): a
     * batch then does not wait for the slowest worker's quarter, and each
     * task's files are still in cache when they are decoded
     * (docs/BENCHMARKS.md, "The CPU pipeline on one core"). */
    uint64_t split = p->workers.split;
    uint64_t autosplit = (batch + FEEDER__TASK_SAMPLES - 1) / FEEDER__TASK_SAMPLES;
    if (autosplit < (uint64_t)ld->pool.nworkers)
        autosplit = (uint64_t)ld->pool.nworkers;
    ld->flow.parts = (uint32_t)(ld->pool.nworkers == 0 || feeder__batch_dataset(ld) ? 1
                           : split ? split : autosplit);
    if (ld->flow.parts > batch)
        ld->flow.parts = batch;
    return rc;
}

/* The skip policy walks each bad sample's class (feeder__dataset_class_next):
 * built once here, inherited by the workers. */
static int skip_order(feeder_loader *ld)
{
    if (ld->job.policy != FEEDER_ON_ERROR_SKIP || ld->job.class_next)
        return 0;
    int rc = feeder__dataset_class_next(ld->ds, &ld->job.class_next);
    if (rc)
        return feeder__loader_fail(ld, rc, "out of memory for the skip policy's order of %llu "
                                   "samples", (unsigned long long)ld->ds->n);
    return 0;
}

/* The ROI decoder's row index (decode/jpeg_index.h): one shared mapping made
 * before the workers fork, kept for the loader's life so every epoch after
 * a sample's first decode jumps. Made only where the workers decode JPEG
 * files with the ROI decoder; failing to map it costs speed, not the run. */
static void row_index(feeder_loader *ld)
{
    feeder__job *job = &ld->job;
    uint64_t budget = ld->plan.pipeline.row_index_bytes;
    if (job->jindex || !budget || job->cpu_decoder != FEEDER_DECODER_ROI || !ld->ds->n ||
        ld->ds->kind == FEEDER__DS_USER || feeder__batch_dataset(ld) ||
        (ld->ds->kind == FEEDER__DS_PACKED && ld->ds->pack->v.h.kind != FEEDER_RECORD_JPEG))
        return;
    (void)feeder__jindex_create(ld->ds->n, budget, &job->jindex);
}

/* Limits the configuration would run into later, checked before anything
 * is allocated (limits.c says why these numbers); a resume blob is checked
 * again against the options as they are now. */
static int check_limits(feeder_loader *ld)
{
    feeder__job *job = &ld->job;
    int rc;
    if ((rc = feeder__check_slot_memory(ld->shm.nslots, job->layout.slot_bytes, ld->errmsg,
                                        sizeof(ld->errmsg))))
        return rc;
    uint32_t batch = ld->plan.sampling.batch_size;
    uint32_t files =
        ld->ds->kind == FEEDER__DS_USER ? 0 : (batch + ld->flow.parts - 1) / ld->flow.parts;
    if (ld->pool.nworkers == 0 && files > FEEDER__INLINE_FILES)
        files = FEEDER__INLINE_FILES; /* the calling thread reads in groups (flow.c) */
    if ((rc = feeder__check_nofile(ld->ds, ld->pool.nworkers, files, ld->errmsg,
                                    sizeof(ld->errmsg))))
        return rc;
    if (ld->flow.resume &&
        (rc = feeder__resume_check(ld, ld->flow.resume, ld->flow.resume_len, &ld->flow.resume_st)))
        return rc;
    return 0;
}

/* The trace's worker areas exist before the workers fork; writing the
 * (still empty) file now finds an unwritable path at start, not at destroy,
 * which cannot report it. */
static int start_trace(feeder_loader *ld)
{
    feeder__job *job = &ld->job;
    int rc = 0;
    feeder__trace_destroy(ld->trace); /* of a start that failed later: sized for then */
    ld->trace = job->trace = NULL;
    if (ld->trace_path) {
        char err[512];
        if (!(ld->trace = feeder__trace_create(ld->trace_path, ld->pool.nworkers, err, sizeof(err))))
            return feeder__loader_fail(ld, -ENOMEM, "%s", err);
        if ((rc = feeder__trace_write(ld->trace, err, sizeof(err)))) {
            feeder__trace_destroy(ld->trace);
            ld->trace = NULL;
            return feeder__loader_fail(ld, rc, "%s", err);
        }
        job->trace = ld->trace;
        ld->tr_startup = feeder__trace_track(ld->trace, "loader start-up (loader thread)");
    }
    return rc;
}

/* One memfd for every slot, sized once (invariant 7), with no name in
 * /dev/shm: nothing outlives the last process that maps it. */
static int map_slots(feeder_loader *ld)
{
    feeder__job *job = &ld->job;
    int rc = 0;
    job->memfd = memfd_create("feeder-slots", MFD_CLOEXEC);
    if (job->memfd < 0)
        return feeder__loader_fail(ld, -errno, "memfd_create: %s", strerror(errno));
    feeder__pool_register_fd(job->memfd);
    job->shm_bytes = ld->shm.shm_bytes;
    if (ftruncate(job->memfd, (off_t)ld->shm.shm_bytes) < 0) {
        rc = -errno;
        feeder__pool_close_fd(&job->memfd);
        return feeder__loader_fail(ld, rc, "cannot size the batch slots to %zu bytes (%u slots): %s",
                    ld->shm.shm_bytes, ld->shm.nslots, strerror(-rc));
    }
    ld->shm.mem = mmap(NULL, ld->shm.shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, job->memfd, 0);
    if (ld->shm.mem == MAP_FAILED) {
        rc = -errno;
        ld->shm.mem = NULL;
        feeder__pool_close_fd(&job->memfd);
        return feeder__loader_fail(ld, rc, "mmap of %zu bytes of batch slots: %s", ld->shm.shm_bytes,
                    strerror(-rc));
    }
    /* No worker inherits this mapping (its own map the memfd after fork):
     * a worker of another loader would otherwise keep these slots' memory
     * alive after this loader is destroyed. */
    (void)madvise(ld->shm.mem, ld->shm.shm_bytes, MADV_DONTFORK);
    ld->shm.live = (feeder__live *)(ld->shm.mem + ld->shm.slots_bytes); /* a new memfd: share 0 */
    ld->shm.slots = calloc(ld->shm.nslots, sizeof(*ld->shm.slots));
    ld->pool.workers =
        calloc(ld->pool.nworkers ? (size_t)ld->pool.nworkers : 1, sizeof(*ld->pool.workers));
    ld->flow.q.cap = (size_t)ld->shm.nslots * ld->flow.parts;
    ld->flow.q.v = calloc(ld->flow.q.cap, sizeof(*ld->flow.q.v));
    if (!ld->shm.slots || !ld->pool.workers || !ld->flow.q.v)
        return feeder__loader_fail(ld, -ENOMEM, "out of memory");
    for (uint32_t s = 0; s < ld->shm.nslots; s++) {
        ld->shm.slots[s].ld = ld;
        ld->shm.slots[s].extra_fd = -1;
    }
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.shm_bytes = ld->shm.shm_bytes;
    ld->stats.slots = ld->shm.nslots;
    pthread_mutex_unlock(&ld->stats_lock);
    return rc;
}

/* A start-up step of the loader's thread, as a span of the trace (what the
 * first batch waits for before the workers read: docs/ARCHITECTURE.md). */
static void startup_span(feeder_loader *ld, const char *what, uint64_t t0)
{
    if (ld->trace)
        feeder__trace_span(ld->trace, ld->tr_startup, what, t0, feeder__now_ns(), -1, -1);
}

int feeder__host_prepare(feeder_loader *ld, int gpu_ok)
{
    if (ld->start_failed)
        return ld->start_failed;
    ld->errmsg[0] = 0;
    ld->prepare_ns = feeder__now_ns();
    int rc = 0;
    if ((rc = validate(ld)))
        return rc;
    if (!ld->sampler) {
        if ((rc = feeder__loader_default_sampler(ld, &ld->plan, &ld->own_sampler)))
            return rc;
        ld->sampler = ld->own_sampler;
    }
    resolve_job(ld);
    if ((rc = resolve_io(ld)) || (rc = resolve_decoder(ld, gpu_ok)) ||
        (rc = layout_slots(ld, gpu_ok)) || (rc = check_limits(ld)) || (rc = start_trace(ld)) ||
        (rc = skip_order(ld)) || (rc = map_slots(ld)))
        return rc;
    row_index(ld);
    startup_span(ld, "prepare (options, order, slots mapped)", ld->prepare_ns);
    return 0;
}

void feeder__host_start_failed(feeder_loader *ld, int rc) { ld->start_failed = rc; }

int feeder__loader_augment_device(const feeder_loader *ld, uint32_t *first)
{
    *first = ld->gpu.aug_first;
    return ld->gpu.aug_device;
}

void feeder__host_augment_taken(feeder_loader *ld)
{
    feeder__augment_plan *p = &ld->job.aug;
    p->nsteps = ld->gpu.aug_first;
    p->mixup_alpha = p->cutmix_alpha = 0;
}

int feeder__host_commit(feeder_loader *ld, int gpu_decodes, const char *decode_why,
                        int packed_direct)
{
    feeder__job *job = &ld->job;
    feeder__transform *t = &job->t;
    /* A GPU decoder with no GPU layer, or one that could not start nvJPEG:
     * the workers decode on the CPU (they fork below, with this job). With one, the GPU layer has set HYBRID's first share
     * and moves it from what both sides do. */
    if (feeder__decoder_on_gpu(t->decoder) && !gpu_decodes) {
        feeder__fmt(ld->decided.decoder_reason, sizeof(ld->decided.decoder_reason), "%s",
                    decode_why);
        t->decoder = job->cpu_decoder;
        feeder__loader_set_cpu_share(ld, 0);
    }
    /* Before the workers fork: they inherit it. */
    job->packed_direct = packed_direct;
    /* Records that go from the file to the GPU leave the workers only the
     * labels (microseconds a batch): one part a batch then, not one per ~16
     * samples, whose messages cost the loader's thread more than the work
     * (docs/ARCHITECTURE.md, "Packed RAW straight to the GPU"). With
     * VERIFY_CRC the parts stay: the checksums are the work to share. */
    if (packed_direct && !job->verify_crc && !ld->plan.workers.split)
        ld->flow.parts = 1;
    ld->started = 1;
    uint64_t t0 = feeder__now_ns();
    int rc = ld->pool.nworkers ? feeder__pool_spawn(ld) : 0;
    if (rc || !ld->pool.nworkers)
        return rc;
    startup_span(ld, "workers forked", t0);
    t0 = feeder__now_ns();
    feeder__host_kick(ld);
    startup_span(ld, "first tasks sent", t0);
    return 0;
}
