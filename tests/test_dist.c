/*
 * Distributed jobs: rank discovery from every launcher's variables, their
 * precedence, every malformed value with its exact message; and sharding with
 * real loaders, one per rank: equal batch counts on every rank, disjoint
 * shards with drop_last, the documented padding without, the union covering
 * the dataset, and the same global order whatever the workers per rank.
 *
 * Check forks each test, so the setenv/unsetenv calls stay inside one test;
 * every test still starts by clearing every variable feeder reads, so a suite
 * run under mpirun, srun or torchrun sees none of its launcher's values.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "feeder.h"

/* ---- the environment ---- */

static const char *const all_vars[] = {
    "FEEDER_RANK", "FEEDER_WORLD_SIZE", "FEEDER_LOCAL_RANK", "FEEDER_LOCAL_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++)
        ck_assert_int_eq(unsetenv(all_vars[i]), 0);
}

static void set(const char *name, const char *value)
{
    ck_assert_int_eq(setenv(name, value, 1), 0);
}

static void set4(const char *const names[4], const char *r, const char *w, const char *lr,
                 const char *ls)
{
    const char *v[4] = {r, w, lr, ls};
    for (int i = 0; i < 4; i++)
        if (v[i])
            set(names[i], v[i]);
}

static const char *const ompi[4] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
static const char *const pmi[4] = {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
static const char *const torch[4] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
static const char *const slurm[4] = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                     "SLURM_NTASKS_PER_NODE"};
static const char *const feeder_vars[4] = {"FEEDER_RANK", "FEEDER_WORLD_SIZE",
                                           "FEEDER_LOCAL_RANK", "FEEDER_LOCAL_SIZE"};

/* Run feeder_dist_from_env from `preset` and check every field. */
static void expect_ok(feeder_dist preset, int rank, int world, int lrank, int lsize, int device,
                      const char *source)
{
    char err[512] = "junk";
    feeder_dist d = preset;
    int rc = feeder_dist_from_env(&d, err, sizeof(err));
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(d.rank, rank);
    ck_assert_int_eq(d.world_size, world);
    ck_assert_int_eq(d.local_rank, lrank);
    ck_assert_int_eq(d.local_size, lsize);
    ck_assert_int_eq(d.device, device);
    ck_assert_ptr_nonnull(d.source);
    ck_assert_str_eq(d.source, source);
    /* The reserved room is the caller's and stays as it was. */
    ck_assert_int_eq(memcmp(d.reserved_, preset.reserved_, sizeof(d.reserved_)), 0);
}

static void expect_ok_env(int rank, int world, int lrank, int lsize, const char *source)
{
    expect_ok((feeder_dist)FEEDER_DIST_INIT, rank, world, lrank, lsize, lrank, source);
}

/* The call fails with FEEDER_EINVAL and exactly `msg`, leaving *d as it was. */
static void expect_err_from(feeder_dist preset, const char *msg)
{
    char err[512] = "junk";
    feeder_dist d = preset;
    ck_assert_int_eq(feeder_dist_from_env(&d, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, msg);
    ck_assert_int_eq(memcmp(&d, &preset, sizeof(d)), 0);
}

static void expect_err(const char *msg) { expect_err_from((feeder_dist)FEEDER_DIST_INIT, msg); }

/* ---- sources ---- */

START_TEST(test_default_alone)
{
    clear_env();
    expect_ok_env(0, 1, 0, 1, "default");
}
END_TEST

START_TEST(test_each_launcher)
{
    clear_env();
    set4(ompi, "5", "8", "1", "4");
    expect_ok_env(5, 8, 1, 4, "OMPI");

    clear_env();
    set4(pmi, "2", "3", "2", "3");
    expect_ok_env(2, 3, 2, 3, "PMI");

    clear_env();
    set4(torch, "13", "16", "5", "8");
    expect_ok_env(13, 16, 5, 8, "torchrun");

    clear_env();
    set4(slurm, "6", "12", "2", "4");
    expect_ok_env(6, 12, 2, 4, "SLURM");

    clear_env();
    set4(feeder_vars, "3", "4", "1", "2");
    expect_ok_env(3, 4, 1, 2, "explicit");
}
END_TEST

/* Without local variables a launcher's ranks are taken to share this machine. */
START_TEST(test_local_defaults_to_global)
{
    clear_env();
    set4(pmi, "2", "3", NULL, NULL);
    expect_ok_env(2, 3, 2, 3, "PMI");
    clear_env();
    set4(torch, "1", "2", "0", NULL);
    expect_ok_env(1, 2, 0, 2, "torchrun");
    clear_env();
    set4(feeder_vars, "1", "2", NULL, NULL);
    expect_ok_env(1, 2, 1, 2, "explicit");
}
END_TEST

/* SLURM_TASKS_PER_NODE "2(x3),1": two tasks on each of nodes 0-2, one on 3. */
START_TEST(test_slurm_tasks_per_node)
{
    static const struct {
        const char *tpn, *node;
        int lsize;
    } cases[] = {
        {"2(x3),1", "0", 2}, {"2(x3),1", "2", 2}, {"2(x3),1", "3", 1}, {"4", "0", 4},
        {"1,3,2", "1", 3},   {"1,3,2", "2", 2},   {"8(x2)", "1", 8},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        clear_env();
        set4(slurm, "0", "9", "0", NULL);
        set("SLURM_TASKS_PER_NODE", cases[i].tpn);
        set("SLURM_NODEID", cases[i].node);
        expect_ok_env(0, 9, 0, cases[i].lsize, "SLURM");
        /* --ntasks-per-node, when given, is taken as it is. */
        set("SLURM_NTASKS_PER_NODE", "1");
        expect_ok_env(0, 9, 0, 1, "SLURM");
    }
    /* Without SLURM_NODEID the entry cannot be picked: the default applies. */
    clear_env();
    set4(slurm, "3", "4", "1", NULL);
    set("SLURM_TASKS_PER_NODE", "2(x2)");
    expect_ok_env(3, 4, 1, 4, "SLURM");
}
END_TEST

/* ---- precedence ---- */

START_TEST(test_launcher_order)
{
    clear_env();
    set4(slurm, "0", "2", "0", "2");
    set4(torch, "1", "4", "1", "2");
    set4(pmi, "2", "6", "0", "3");
    set4(ompi, "3", "8", "3", "4");
    expect_ok_env(3, 8, 3, 4, "OMPI");
    for (int i = 0; i < 4; i++)
        unsetenv(ompi[i]);
    expect_ok_env(2, 6, 0, 3, "PMI");
    for (int i = 0; i < 4; i++)
        unsetenv(pmi[i]);
    expect_ok_env(1, 4, 1, 2, "torchrun");
    for (int i = 0; i < 4; i++)
        unsetenv(torch[i]);
    expect_ok_env(0, 2, 0, 2, "SLURM");
    /* The first launcher found supplies every value it has, even where a
     * later one has more: no mixing of launchers. */
    clear_env();
    set4(pmi, "1", "2", NULL, NULL);
    set4(slurm, "1", "2", "0", "1");
    expect_ok_env(1, 2, 1, 2, "PMI");
}
END_TEST

START_TEST(test_explicit_env_wins_per_field)
{
    clear_env();
    set4(ompi, "3", "8", "3", "4");
    set("FEEDER_RANK", "5");
    expect_ok_env(5, 8, 3, 4, "explicit");
    unsetenv("FEEDER_RANK");
    set("FEEDER_WORLD_SIZE", "4");
    expect_ok_env(3, 4, 3, 4, "OMPI");
    set("FEEDER_LOCAL_RANK", "0");
    set("FEEDER_LOCAL_SIZE", "1");
    expect_ok_env(3, 4, 0, 1, "OMPI");
    /* Everything explicit: a broken launcher variable is never read. */
    clear_env();
    set4(feeder_vars, "1", "2", "1", "2");
    set("OMPI_COMM_WORLD_RANK", "garbage");
    set("WORLD_SIZE", "-3");
    expect_ok_env(1, 2, 1, 2, "explicit");
}
END_TEST

START_TEST(test_caller_preset_wins)
{
    clear_env();
    set4(feeder_vars, "1", "10", "1", "2");
    set4(ompi, "3", "8", "3", "4");
    feeder_dist p = FEEDER_DIST_INIT;
    p.rank = 6;
    expect_ok(p, 6, 10, 1, 2, 1, "explicit");
    p.world_size = 7;
    p.local_rank = 0;
    expect_ok(p, 6, 7, 0, 2, 0, "explicit");
    p.local_size = 1;
    p.device = 3;
    p.reserved_[0] = 0xabcd;
    expect_ok(p, 6, 7, 0, 1, 3, "explicit");
    /* A preset world size alone keeps the rank of the environment. */
    p = (feeder_dist)FEEDER_DIST_INIT;
    p.world_size = 16;
    expect_ok(p, 1, 16, 1, 2, 1, "explicit");
    unsetenv("FEEDER_RANK");
    expect_ok(p, 3, 16, 1, 2, 1, "OMPI");
    /* Nothing in the environment: the caller's values alone. */
    clear_env();
    p = (feeder_dist){.rank = 2, .world_size = 3, .local_rank = 0, .local_size = 1,
                      .device = -1, .source = "stale"};
    expect_ok(p, 2, 3, 0, 1, 0, "explicit");
}
END_TEST

START_TEST(test_device)
{
    clear_env();
    set4(ompi, "5", "8", "1", "4");
    feeder_dist d = FEEDER_DIST_INIT;
    ck_assert_int_eq(feeder_dist_from_env(&d, NULL, 0), 0);
    ck_assert_int_eq(d.device, 1);
    /* Four ranks per machine over 4, 2, 1 visible GPUs; none: the CPU path. */
    ck_assert_int_eq(feeder_dist_device(&d, 4), 1);
    ck_assert_int_eq(feeder_dist_device(&d, 2), 1);
    ck_assert_int_eq(feeder_dist_device(&d, 1), 0);
    ck_assert_int_eq(feeder_dist_device(&d, 0), -1);
    ck_assert_int_eq(feeder_dist_device(&d, -1), -1);
    ck_assert_int_eq(feeder_dist_device(NULL, 4), -1);
    d.local_rank = 0;
    d.device = 7;
    ck_assert_int_eq(feeder_dist_device(&d, 8), 7);
    ck_assert_int_eq(feeder_dist_device(&d, 3), 1);
    d.device = -1;
    ck_assert_int_eq(feeder_dist_device(&d, 8), -1);
}
END_TEST

/* ---- malformed values ---- */

/* Every variable of every source, each way of being wrong. */
START_TEST(test_malformed_values)
{
    static const char *const *const groups[] = {feeder_vars, ompi, pmi, torch, slurm};
    static const struct {
        const char *value;
        const char *what; /* for ranks; sizes say the same except for "0" */
    } bad[] = {
        {"abc", "not a number"},      {"", "not a number"},       {"1x", "not a number"},
        {" 1", "not a number"},       {"1 ", "not a number"},     {"+1", "not a number"},
        {"0x10", "not a number"},     {"1.0", "not a number"},    {"--1", "not a number"},
        {"-", "not a number"},        {"-1", "negative"},         {"-17", "negative"},
        {"2147483648", "above 2147483647"}, {"99999999999999999999", "above 2147483647"},
    };
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        for (int f = 0; f < 4; f++) {
            for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
                clear_env();
                /* A valid launcher underneath, so the variable is read. */
                set4(groups[g] == feeder_vars ? ompi : groups[g], "0", "2", "0", "2");
                set(groups[g][f], bad[b].value);
                char msg[256];
                snprintf(msg, sizeof(msg), "feeder_dist_from_env: %s=\"%s\": %s", groups[g][f],
                         bad[b].value, bad[b].what);
                expect_err(msg);
            }
            /* 0 is a rank but not a size. */
            clear_env();
            set4(groups[g] == feeder_vars ? ompi : groups[g], "0", "2", "0", "2");
            set(groups[g][f], "0");
            if (f == 1 || f == 3) {
                char msg[256];
                snprintf(msg, sizeof(msg), "feeder_dist_from_env: %s=\"0\": must be at least 1",
                         groups[g][f]);
                expect_err(msg);
            } else {
                feeder_dist d = FEEDER_DIST_INIT;
                ck_assert_int_eq(feeder_dist_from_env(&d, NULL, 0), 0);
            }
        }
    }
    /* The largest value is accepted. */
    clear_env();
    set4(feeder_vars, "2147483646", "2147483647", "0", "1");
    expect_ok_env(2147483646, 2147483647, 0, 1, "explicit");
}
END_TEST

START_TEST(test_inconsistent_values)
{
    clear_env();
    set4(ompi, "4", "4", "0", "1");
    expect_err("feeder_dist_from_env: rank 4 (OMPI_COMM_WORLD_RANK=\"4\") is not below the world "
               "size 4 (OMPI_COMM_WORLD_SIZE=\"4\")");
    clear_env();
    set4(torch, "1", "2", "0", "1");
    set("FEEDER_RANK", "2");
    expect_err("feeder_dist_from_env: rank 2 (FEEDER_RANK=\"2\") is not below the world size 2 "
               "(WORLD_SIZE=\"2\")");
    clear_env();
    set4(pmi, "0", "4", "2", "2");
    expect_err("feeder_dist_from_env: local rank 2 (MPI_LOCALRANKID=\"2\") is not below the "
               "local size 2 (MPI_LOCALNRANKS=\"2\")");
    clear_env();
    set4(slurm, "0", "2", "0", "3");
    expect_err("feeder_dist_from_env: local size 3 (SLURM_NTASKS_PER_NODE=\"3\") is above the "
               "world size 2 (SLURM_NTASKS=\"2\")");
    clear_env();
    set4(slurm, "1", "2", "1", NULL);
    set("SLURM_TASKS_PER_NODE", "4,1");
    set("SLURM_NODEID", "0");
    expect_err("feeder_dist_from_env: local size 4 (SLURM_TASKS_PER_NODE=\"4,1\" at "
               "SLURM_NODEID=\"0\") is above the world size 2 (SLURM_NTASKS=\"2\")");
    /* Defaults named as such. */
    clear_env();
    set("FEEDER_RANK", "1");
    expect_err("feeder_dist_from_env: rank 1 (FEEDER_RANK=\"1\") is not below the world size 1 "
               "(default)");
    clear_env();
    set4(pmi, "3", "4", NULL, "2");
    expect_err("feeder_dist_from_env: local rank 3 (the rank, by default) is not below the local "
               "size 2 (MPI_LOCALNRANKS=\"2\")");
    clear_env();
    set("FEEDER_LOCAL_SIZE", "2");
    expect_err("feeder_dist_from_env: local size 2 (FEEDER_LOCAL_SIZE=\"2\") is above the world "
               "size 1 (default)");
    clear_env();
    set4(torch, "1", "2", "0", NULL);
    set("FEEDER_LOCAL_RANK", "2");
    expect_err("feeder_dist_from_env: local rank 2 (FEEDER_LOCAL_RANK=\"2\") is not below the "
               "local size 2 (the world size, by default)");
    /* Caller values. */
    clear_env();
    feeder_dist p = FEEDER_DIST_INIT;
    p.rank = 3;
    p.world_size = 3;
    expect_err_from(p, "feeder_dist_from_env: rank 3 (set by the caller) is not below the world "
                       "size 3 (set by the caller)");
    /* A zero-initialised struct presets world size 0: say what to use. */
    expect_err_from((feeder_dist){0},
                    "feeder_dist_from_env: world_size 0 set by the caller: must be at least 1 "
                    "(a negative value, as in FEEDER_DIST_INIT, leaves it to the environment)");
    p = (feeder_dist)FEEDER_DIST_INIT;
    p.local_size = 0;
    expect_err_from(p, "feeder_dist_from_env: local_size 0 set by the caller: must be at least 1 "
                       "(a negative value, as in FEEDER_DIST_INIT, leaves it to the environment)");
}
END_TEST

START_TEST(test_half_a_launcher)
{
    static const char *const *const groups[] = {ompi, pmi, torch, slurm};
    for (size_t g = 0; g < 4; g++) {
        clear_env();
        set(groups[g][0], "0");
        char msg[256];
        snprintf(msg, sizeof(msg), "feeder_dist_from_env: %s is set but %s is not", groups[g][0],
                 groups[g][1]);
        expect_err(msg);
        clear_env();
        set(groups[g][1], "2");
        set(groups[g][2], "0");
        snprintf(msg, sizeof(msg), "feeder_dist_from_env: %s is set but %s is not", groups[g][1],
                 groups[g][0]);
        expect_err(msg);
        /* With the missing half given explicitly, the launcher is complete
         * enough. */
        set(feeder_vars[0], "1");
        expect_ok_env(1, 2, 0, 2, "explicit");
    }
}
END_TEST

START_TEST(test_slurm_tasks_per_node_malformed)
{
    static const char *const bad[] = {"",  "x",    "2(x",  "2(x3",  "2(3)", "2(x0)", "0",
                                      "2,", ",2",  "2;1",  "2(x3)1", "2 ,1", "-1",   "2(x)",
                                      "99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        clear_env();
        set4(slurm, "0", "2", "0", NULL);
        set("SLURM_TASKS_PER_NODE", bad[i]);
        set("SLURM_NODEID", "9");
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "feeder_dist_from_env: SLURM_TASKS_PER_NODE=\"%s\": malformed (expected counts "
                 "such as \"2(x3),1\")",
                 bad[i]);
        expect_err(msg);
    }
    clear_env();
    set4(slurm, "0", "2", "0", NULL);
    set("SLURM_TASKS_PER_NODE", "2(x3),1");
    set("SLURM_NODEID", "4");
    expect_err("feeder_dist_from_env: SLURM_NODEID=\"4\" is beyond the 4 nodes of "
               "SLURM_TASKS_PER_NODE=\"2(x3),1\"");
    set("SLURM_NODEID", "x");
    expect_err("feeder_dist_from_env: SLURM_NODEID=\"x\": not a number");
    set("SLURM_NODEID", "-2");
    expect_err("feeder_dist_from_env: SLURM_NODEID=\"-2\": negative");
}
END_TEST

START_TEST(test_bad_arguments)
{
    char err[128] = "junk";
    ck_assert_int_eq(feeder_dist_from_env(NULL, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_dist_from_env: d must not be NULL");
    ck_assert_int_eq(feeder_dist_from_env(NULL, NULL, 0), FEEDER_EINVAL);
    /* A short buffer gets a truncated, terminated message. */
    clear_env();
    set("RANK", "x");
    set("WORLD_SIZE", "2");
    feeder_dist d = FEEDER_DIST_INIT;
    char small[16];
    memset(small, 'z', sizeof(small));
    ck_assert_int_eq(feeder_dist_from_env(&d, small, sizeof(small)), FEEDER_EINVAL);
    ck_assert_str_eq(small, "feeder_dist_fro");
    ck_assert_int_eq(feeder_dist_from_env(&d, NULL, 0), FEEDER_EINVAL);
    ck_assert_int_eq(d.rank, -1);
}
END_TEST

/* ---- sharding, with real loaders ---- */

#define H 4
#define W 4
#define SAMPLE (H * W * 3)
#define SEED 11

/* A user dataset whose pixels are a function of (seed, epoch, index). */
static uint64_t ds_len(void *u) { return *(uint64_t *)u; }

static void pixels(uint64_t seed, uint64_t epoch, uint64_t index, uint8_t *dst)
{
    for (size_t i = 0; i < SAMPLE; i++)
        dst[i] = (uint8_t)(feeder_random(seed, epoch, index, i / 8) >> (8 * (i % 8)));
}

static int ds_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                  int64_t *label, char *err, size_t errlen)
{
    if (bytes != SAMPLE)
        return -22;
    pixels(ctx->seed, ctx->epoch, ctx->index, dst);
    *label = (int64_t)(ctx->index % 7);
    return 0;
}

/* One rank's loader over its distributed sampler. */
static feeder_loader *rank_loader(feeder_dataset *ds, feeder_sampler *s, uint32_t batch,
                                  int drop_last, int workers, int prefetch)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, s, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DROP_LAST, drop_last), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, prefetch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, SEED), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, H), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, W), 0);
    return ld;
}

/* The whole job's order before it is dealt out: the shuffled permutation of
 * 0..n-1 for (SEED, epoch), as feeder_sampler_distributed documents. */
static uint64_t *global_order(uint64_t n, uint64_t epoch)
{
    uint64_t *o = malloc((n ? n : 1) * sizeof(*o));
    ck_assert_ptr_nonnull(o);
    if (n) {
        feeder_sampler *r;
        ck_assert_int_eq(feeder_sampler_random(n, 0, 0, SEED, &r), 0);
        ck_assert_int_eq(feeder_sampler_fill(r, epoch, o, n), 0);
        feeder_sampler_destroy(r);
    }
    return o;
}

/* Run every rank of a `world`-rank job for one epoch and check it; returns
 * the batch count every rank had. */
static uint64_t check_job(feeder_dataset *ds, uint64_t n, uint32_t world, uint32_t batch,
                          int sdrop, int ldrop, uint64_t epoch)
{
    uint64_t *order = global_order(n, epoch);
    uint64_t per = sdrop ? n / world : (n + world - 1) / world;
    uint64_t want_batches = feeder_batch_count(per, batch, ldrop);
    /* What each rank keeps of its share once the batch sampler dropped its
     * short tail. */
    uint64_t kept = ldrop ? want_batches * batch : per;
    uint32_t *seen = calloc(n ? n : 1, sizeof(*seen));
    ck_assert_ptr_nonnull(seen);
    uint8_t want_px[SAMPLE];
    for (uint32_t r = 0; r < world; r++) {
        feeder_sampler *s;
        ck_assert_int_eq(feeder_sampler_distributed(n, r, world, 1, SEED, sdrop, &s), 0);
        feeder_loader *ld = rank_loader(ds, s, batch, ldrop, 0, 2);
        ck_assert_int_eq(feeder_loader_set_epoch(ld, epoch), 0);
        feeder_batch *b;
        uint64_t nb = 0, t = 0;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_eq(b->number, nb);
            ck_assert_uint_eq(b->epoch, epoch);
            uint32_t want_count = (uint32_t)(per - t < batch ? per - t : batch);
            ck_assert_uint_eq(b->count, want_count);
            for (uint32_t i = 0; i < b->count; i++, t++) {
                /* Rank r's t-th sample is position r + t*world of the padded
                 * order order[k % n]. */
                uint64_t idx = order[(r + t * world) % n];
                ck_assert_msg(b->indices[i] == idx,
                              "n %llu world %u batch %u sdrop %d ldrop %d rank %u pos %llu",
                              (unsigned long long)n, world, batch, sdrop, ldrop, r,
                              (unsigned long long)t);
                ck_assert_int_eq(b->labels[i], (int64_t)(idx % 7));
                pixels(SEED, epoch, idx, want_px);
                ck_assert_int_eq(memcmp(b->data + (size_t)i * b->sample_bytes, want_px, SAMPLE),
                                 0);
                seen[idx]++;
            }
            nb++;
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
        /* Every rank has the same number of batches: no rank waits alone at
         * a collective. */
        ck_assert_uint_eq(nb, want_batches);
        ck_assert_uint_eq(t, kept);
        feeder_loader_destroy(ld);
        feeder_sampler_destroy(s);
    }
    /* The union, position by position of the dealt order: the job read
     * positions 0 .. world*kept-1 of order[k % n]. */
    uint64_t total = (uint64_t)world * kept, sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t idx = order[k];
        uint64_t want = total / n + (k < total % n);
        ck_assert_uint_eq(seen[idx], want);
        sum += seen[idx];
    }
    ck_assert_uint_eq(sum, total);
    if (sdrop) {
        /* Disjoint shards: no sample twice, and what is missing is the tail of
         * the order (n % world by the sampler, the short batches by the batch
         * sampler). */
        for (uint64_t i = 0; i < n; i++)
            ck_assert_uint_le(seen[i], 1);
    } else if (!ldrop) {
        /* Padding: every sample at least once, the first world*per - n of the
         * order twice (once when the pad is shorter than the dataset). */
        for (uint64_t i = 0; i < n; i++)
            ck_assert_uint_ge(seen[i], 1);
    }
    if (!ldrop && sdrop)
        ck_assert_uint_eq(sum, n - n % world);
    free(seen);
    free(order);
    return want_batches;
}

START_TEST(test_shards_equal_disjoint_covering)
{
    for (uint32_t world = 1; world <= 5; world++) {
        static const uint32_t batches[] = {1, 3, 4};
        for (size_t bi = 0; bi < 3; bi++) {
            uint32_t batch = batches[bi];
            uint64_t base = (uint64_t)world * batch;
            uint64_t sizes[] = {base - 1, base, base + 1, 2 * base - 1, 2 * base,
                                2 * base + 1, 3 * base + world - 1, world - 1 ? world - 1 : 1};
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
                uint64_t n = sizes[si];
                if (n == 0)
                    continue;
                feeder_dataset_callbacks cb = {.len = ds_len, .get = ds_get};
                feeder_dataset *ds;
                ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
                for (int sdrop = 0; sdrop <= 1; sdrop++)
                    for (int ldrop = 0; ldrop <= 1; ldrop++)
                        check_job(ds, n, world, batch, sdrop, ldrop, si % 3);
                feeder_dataset_destroy(ds);
            }
        }
    }
}
END_TEST

/* Some exact figures, so the checks above cannot all agree on a wrong count. */
START_TEST(test_shard_batch_counts)
{
    /* 25 samples, 3 ranks, batch 4: dropping, 8 each, 2 full batches with or
     * without the batch drop; padding, 9 each, 3 batches, or 2 with the batch
     * drop. */
    uint64_t n = 25;
    feeder_dataset_callbacks cb = {.len = ds_len, .get = ds_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
    ck_assert_uint_eq(check_job(ds, n, 3, 4, 1, 0, 0), 2);
    ck_assert_uint_eq(check_job(ds, n, 3, 4, 1, 1, 0), 2);
    ck_assert_uint_eq(check_job(ds, n, 3, 4, 0, 0, 0), 3);
    ck_assert_uint_eq(check_job(ds, n, 3, 4, 0, 1, 0), 2);
    feeder_dataset_destroy(ds);
    /* Fewer samples than ranks: dropping leaves every rank empty (0 batches,
     * FEEDER_DONE at once); padding gives each rank one sample. */
    n = 3;
    ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
    ck_assert_uint_eq(check_job(ds, n, 5, 2, 1, 0, 1), 0);
    ck_assert_uint_eq(check_job(ds, n, 5, 2, 0, 0, 1), 1);
    ck_assert_uint_eq(check_job(ds, n, 5, 2, 0, 1, 1), 0);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Every delivered sample of one rank, in delivery order, for two epochs. */
static uint64_t rank_run(feeder_dataset *ds, uint64_t n, uint32_t rank, uint32_t world,
                         int workers, int prefetch, uint64_t *indices, uint64_t *count)
{
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_distributed(n, rank, world, 1, SEED, 1, &s), 0);
    feeder_loader *ld = rank_loader(ds, s, 4, 0, workers, prefetch);
    uint64_t h = 0, c = 0;
    for (int e = 0; e < 2; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            h = bu_hash64(h, b->data, (size_t)b->count * b->sample_bytes);
            h = bu_hash64(h, b->labels, b->count * sizeof(int64_t));
            h = bu_hash64(h, b->indices, b->count * sizeof(uint64_t));
            for (uint32_t i = 0; i < b->count; i++)
                indices[c++] = b->indices[i];
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    }
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(s);
    *count = c;
    return h;
}

START_TEST(test_global_order_any_workers)
{
    uint64_t n = 61;
    const uint32_t world = 3;
    feeder_dataset_callbacks cb = {.len = ds_len, .get = ds_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
    /* Per-rank worker counts (and prefetch), mixed across ranks as a job on
     * unequal machines might be. The first row is the reference. */
    static const int cfg[][3][2] = {
        {{0, 2}, {0, 2}, {0, 2}},
        {{1, 1}, {2, 2}, {3, 1}},
        {{3, 4}, {0, 2}, {2, 1}},
    };
    uint64_t ref_hash[3], ref_idx[3][2 * 21];
    for (size_t c = 0; c < 3; c++) {
        uint64_t idx[3][2 * 21];
        for (uint32_t r = 0; r < world; r++) {
            uint64_t cnt;
            uint64_t h = rank_run(ds, n, r, world, cfg[c][r][0], cfg[c][r][1], idx[r], &cnt);
            ck_assert_uint_eq(cnt, 2 * 20);
            if (c == 0) {
                ref_hash[r] = h;
                memcpy(ref_idx[r], idx[r], sizeof(idx[r]));
            } else {
                ck_assert_msg(h == ref_hash[r], "rank %u with %d workers differs", r,
                              cfg[c][r][0]);
            }
        }
        /* Dealt back together, the ranks' samples are the global order. */
        for (uint64_t e = 0; e < 2; e++) {
            uint64_t *order = global_order(n, e);
            for (uint64_t t = 0; t < 20; t++)
                for (uint32_t r = 0; r < world; r++)
                    ck_assert_uint_eq(idx[r][e * 20 + t], order[r + t * world]);
            free(order);
        }
    }
    feeder_dataset_destroy(ds);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *env = tcase_create("env");
    tcase_set_timeout(env, 30);
    tcase_add_test(env, test_default_alone);
    tcase_add_test(env, test_each_launcher);
    tcase_add_test(env, test_local_defaults_to_global);
    tcase_add_test(env, test_slurm_tasks_per_node);
    tcase_add_test(env, test_launcher_order);
    tcase_add_test(env, test_explicit_env_wins_per_field);
    tcase_add_test(env, test_caller_preset_wins);
    tcase_add_test(env, test_device);
    tcase_add_test(env, test_malformed_values);
    tcase_add_test(env, test_inconsistent_values);
    tcase_add_test(env, test_half_a_launcher);
    tcase_add_test(env, test_slurm_tasks_per_node_malformed);
    tcase_add_test(env, test_bad_arguments);
    suite_add_tcase(s, env);
    TCase *shard = tcase_create("shard");
    tcase_set_timeout(shard, 120);
    tcase_add_test(shard, test_shards_equal_disjoint_covering);
    tcase_add_test(shard, test_shard_batch_counts);
    tcase_add_test(shard, test_global_order_any_workers);
    suite_add_tcase(s, shard);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dist_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
