/*
 * cuda/register.c: the batch slots registered with the driver
 * (FEEDER_PIN_REGISTER) one slot at a time, once the workers are forked and
 * have their first tasks (feeder__gpu_finish_start: a registration holds the
 * memory map a fork needs, and the driver). The first slot is registered on
 * the loader's thread, which tells whether registration works here at all
 * (if not, the layer copies through pinned buffers, or pageable memory with
 * a GPU decoder); the others on a thread of their own while the workers fill
 * the first batches, after the device ring is allocated (a cudaMalloc waits
 * for a cudaHostRegister in flight). Registering the whole slot area at once
 * (its pages faulted in and pinned) held the first batch back by hundreds of
 * milliseconds at 15 workers (docs/ARCHITECTURE.md, "The first batch"). A slot
 * not registered yet is copied from pageable memory meanwhile: the same
 * bytes, through the driver's staging buffer.
 */
#include <time.h>

#include "cuda/layer.h"

static uint8_t *slot_at(const feeder__gpu *gpu, uint32_t s)
{
    return gpu->cfg.slot_mem + (size_t)s * gpu->l->slot_bytes;
}

/* Slot s's bytes; the last takes any tail of the area. */
static size_t slot_len(const feeder__gpu *gpu, uint32_t s)
{
    return s + 1 < gpu->cfg.nslots ? gpu->l->slot_bytes
                                   : gpu->cfg.slot_mem_bytes - (size_t)s * gpu->l->slot_bytes;
}

void feeder__cuda_copies_begin(feeder__gpu *gpu) { atomic_fetch_add(&gpu->copying, 1); }

void feeder__cuda_copies_end(feeder__gpu *gpu) { atomic_fetch_sub(&gpu->copying, 1); }

/* Until no batch's copies are being enqueued, for at most 50 ms (a copy
 * section lasts well under a millisecond; the bound keeps the registrations
 * going whatever happens to one). */
static void wait_copies(feeder__gpu *gpu)
{
    const struct timespec nap = {0, 100000};
    for (int i = 0; i < 500 && atomic_load(&gpu->copying) > 0 && !atomic_load(&gpu->reg_stop); i++)
        nanosleep(&nap, NULL);
}

/* With a GPU decoder, until nvJPEG's start-up thread is done (for at most
 * 5 s): its hundreds of CUDA calls waited for one registration after
 * another, and nvJPEG was ready 0.4-0.8 s later with the slots registered
 * beside it than without (15 workers; docs/ARCHITECTURE.md, "The first
 * batch"). The slots are copied from pageable memory meanwhile, which the
 * warm-up's batches can afford. */
static void wait_decoder(feeder__gpu *gpu)
{
    const struct timespec nap = {0, 1000000};
    for (int i = 0; gpu->decodes && i < 5000 && atomic_load(&gpu->dec_state) == 0 &&
                    !atomic_load(&gpu->reg_stop);
         i++)
        nanosleep(&nap, NULL);
}

static void *register_rest(void *arg)
{
    feeder__gpu *gpu = arg;
    pthread_setname_np(pthread_self(), "feeder-register"); /* for ps, top -H and gdb */
    if (cudaSetDevice(gpu->cfg.device) != cudaSuccess) /* per thread */
        return NULL;
    wait_decoder(gpu);
    for (uint32_t s = 1; s < gpu->cfg.nslots && !atomic_load(&gpu->reg_stop); s++) {
        wait_copies(gpu);
        uint64_t t0 = feeder__now_ns();
        cudaError_t e = cudaHostRegister(slot_at(gpu, s), slot_len(gpu, s), cudaHostRegisterPortable);
        feeder__trace_span(gpu->cfg.trace, gpu->tr_start, "slot registered (thread)", t0,
                           feeder__now_ns(), -1, (int64_t)s);
        if (e != cudaSuccess) {
            cudaGetLastError();
            break; /* the rest stay pageable: slower copies, the same bytes */
        }
        atomic_store(&gpu->reg_done, s + 1);
    }
    return NULL;
}

/* FEEDER_GPU_REGISTER_FAIL=1: the first slot's registration counts as
 * failed without being tried, so the tests take the path of the machines
 * where cudaHostRegister does not work. */
static int registration_refused(void)
{
    const char *v = getenv("FEEDER_GPU_REGISTER_FAIL");
    return v && !strcmp(v, "1");
}

void feeder__cuda_register_first(feeder__gpu *gpu)
{
    if (gpu->pin_mode != FEEDER_PIN_REGISTER || gpu->cfg.nslots == 0)
        return;
    cudaError_t e = registration_refused()
                        ? cudaErrorNotSupported
                        : cudaHostRegister(slot_at(gpu, 0), slot_len(gpu, 0), cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        feeder__fmt(gpu->pin_note, sizeof(gpu->pin_note),
                    " (cudaHostRegister of a %zu-byte slot failed: %s)", slot_len(gpu, 0),
                    feeder__cuda_errtext(e));
        gpu->pin_mode = gpu->decodes ? FEEDER_PIN_NONE : FEEDER_PIN_COPY;
        return;
    }
    atomic_store(&gpu->reg_done, 1);
    gpu->pinned_bytes += gpu->cfg.slot_mem_bytes;
}

void feeder__cuda_register_rest(feeder__gpu *gpu)
{
    if (gpu->pin_mode != FEEDER_PIN_REGISTER || atomic_load(&gpu->reg_done) != 1 ||
        gpu->cfg.nslots < 2)
        return;
    if (pthread_create(&gpu->reg_thread, NULL, register_rest, gpu) == 0)
        gpu->reg_thread_live = 1;
    feeder__fmt(gpu->reg_note, sizeof(gpu->reg_note), "%s",
                gpu->reg_thread_live ? ", slots registered one by one on a thread" : "");
}

void feeder__cuda_unregister_slots(feeder__gpu *gpu)
{
    atomic_store(&gpu->reg_stop, 1);
    if (gpu->reg_thread_live) {
        pthread_join(gpu->reg_thread, NULL);
        gpu->reg_thread_live = 0;
    }
    uint32_t done = atomic_load(&gpu->reg_done);
    for (uint32_t s = 0; s < done; s++)
        cudaHostUnregister(slot_at(gpu, s));
    atomic_store(&gpu->reg_done, 0);
}
