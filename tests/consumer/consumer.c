/*
 * The consumer check's program (scripts/consumer_check.sh): built against an
 * installed feeder the four ways a C user links it (pkg-config shared and
 * static, CMake feeder::feeder and feeder::feeder_static), it iterates one
 * epoch of an image folder with device 0 asked for, and prints what came
 * and, without a device, why not (the GPU plugin's look-up or the probe).
 *   consumer IMAGE_FOLDER
 */
#include <feeder.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s IMAGE_FOLDER\n", argv[0]);
        return 2;
    }
    char err[512];
    feeder_dataset *ds;
    int rc = feeder_dataset_open_folder(argv[1], &ds, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "consumer: %s\n", err);
        return 1;
    }
    feeder_loader *ld = NULL;
    if ((rc = feeder_loader_create(ds, NULL, &ld)) == 0 &&
        (rc = feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4)) == 0 &&
        (rc = feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2)) == 0 &&
        (rc = feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0)) == 0)
        rc = feeder_loader_start(ld);
    unsigned long long batches = 0, images = 0;
    feeder_batch *b;
    while (rc == 0 && (rc = feeder_next(ld, &b)) == 0) {
        batches++;
        images += b->count;
        rc = feeder_batch_release(b, NULL);
    }
    if (rc == FEEDER_DONE) {
        const char *why = "";
        int on_device = feeder_loader_gpu_status(ld, &why);
        printf("feeder %s: %llu batches, %llu images, %s batches (%s)\n",
               feeder_version_string(), batches, images, on_device ? "device" : "host", why);
        rc = 0;
    } else {
        fprintf(stderr, "consumer: %s: %s\n", feeder_strerror(rc),
                ld ? feeder_loader_errmsg(ld) : "");
    }
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    return rc ? 1 : 0;
}
