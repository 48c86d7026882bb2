/*
 * The smallest useful feeder program: iterate over an image folder (or
 * WebDataset tar shards) for two epochs and print what arrives. Build: see examples/CMakeLists.txt, or
 *   cc iterate_folder.c $(pkg-config --cflags --libs feeder)
 * Run:  ./iterate_folder /path/to/imagefolder
 *       ./iterate_folder 'shards/train-{000000..000127}.tar'
 */
#include <feeder.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s IMAGE_FOLDER|SHARD.tar|'S-{000..127}.tar'\n"
               "Iterates over an image folder (one sub-folder per class) or WebDataset tar\n"
               "shards for two epochs and prints what arrives.\n", prog);
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout, argv[0]);
        return 0;
    }
    /* An option is not a path (a folder named "-x" is "./-x"). */
    if (argc != 2 || argv[1][0] == '-') {
        if (argc == 2)
            fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[1]);
        usage(stderr, argv[0]);
        return 2;
    }
    char err[512];
    feeder_dataset *ds;
    size_t n = strlen(argv[1]);
    int tar = strchr(argv[1], '{') || (n > 4 && strcmp(argv[1] + n - 4, ".tar") == 0);
    int rc = tar ? feeder_dataset_open_tar_pattern(argv[1], &ds, err, sizeof(err))
                 : feeder_dataset_open_folder(argv[1], &ds, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    feeder_loader *ld;
    if ((rc = feeder_loader_create(ds, NULL, &ld)) == 0) {
        feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 32);
        feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 4);
        feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1);
        feeder_loader_set(ld, FEEDER_OPT_SEED, 42);
        feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN);
    }
    for (int epoch = 0; rc == 0 && epoch < 2; epoch++) {
        feeder_batch *b;
        uint64_t images = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            /* b->data: b->count images of b->height x b->width x 3 (NHWC uint8),
             * b->labels: b->count int64 labels. Train on them here. */
            images += b->count;
            feeder_batch_release(b, NULL);
        }
        if (rc == FEEDER_DONE) {
            printf("epoch %d: %llu images\n", epoch, (unsigned long long)images);
            rc = 0;
        }
    }
    if (rc)
        fprintf(stderr, "feeder: %s: %s\n", feeder_strerror(rc), feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    return rc ? 1 : 0;
}
