/*
 * Rank discovery: where this process stands in a data-parallel job, read from
 * the variables its launcher exported. feeder starts no job and talks to no
 * other rank; it only reads what mpirun, Hydra, torchrun or srun already put
 * in the environment, so it fits whatever launcher the job uses.
 *
 * Each of rank, world size, local rank and local size is taken from the first
 * of: the caller's preset value, the FEEDER_* variable, the launcher found
 * first, a default (include/feeder.h gives the table and the reasons for the
 * order). Every value keeps a note of where it came from, so an inconsistent
 * combination is reported with the variables and values that made it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

enum { F_RANK, F_WORLD, F_LRANK, F_LSIZE, F_COUNT };

/* The names used in messages for fields set by the caller. */
static const char *const field_names[F_COUNT] = {"rank", "world_size", "local_rank",
                                                 "local_size"};
/* ... and in the consistency messages. */
static const char *const field_words[F_COUNT] = {"rank", "world size", "local rank",
                                                 "local size"};

static const char *const explicit_vars[F_COUNT] = {"FEEDER_RANK", "FEEDER_WORLD_SIZE",
                                                   "FEEDER_LOCAL_RANK", "FEEDER_LOCAL_SIZE"};

/* A launcher's variables, innermost launcher first (see feeder.h for why). A
 * NULL local-size name means the launcher has its own rule (Slurm). */
typedef struct launcher {
    const char *source;
    const char *vars[F_COUNT];
} launcher;

static const launcher launchers[] = {
    {"OMPI",
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE"}},
    {"PMI", {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}},
    {"torchrun", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}},
    {"SLURM", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL}},
};
#define NLAUNCHERS (sizeof(launchers) / sizeof(launchers[0]))

/* A value and a note of where it came from, for messages. */
typedef struct value {
    int32_t v;
    int set;
    char origin[160];
} value;

#define PFX "feeder_dist_from_env: "

static int is_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* A decimal count from variable `name`: digits only (no sign, no blanks),
 * at most INT32_MAX, at least `min`. */
static int parse_count(const char *name, const char *s, int32_t min, int32_t *out, char *err,
                       size_t errlen)
{
    if (!is_digits(s)) {
        if (s[0] == '-' && is_digits(s + 1))
            feeder__fmt(err, errlen, PFX "%s=\"%s\": negative", name, s);
        else
            feeder__fmt(err, errlen, PFX "%s=\"%s\": not a number", name, s);
        return FEEDER_EINVAL;
    }
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        v = v * 10 + (*p - '0');
        if (v > INT32_MAX) {
            feeder__fmt(err, errlen, PFX "%s=\"%s\": above %d", name, s, INT32_MAX);
            return FEEDER_EINVAL;
        }
    }
    if (v < min) {
        feeder__fmt(err, errlen, PFX "%s=\"%s\": must be at least %d", name, s, (int)min);
        return FEEDER_EINVAL;
    }
    *out = (int32_t)v;
    return 0;
}

/* Read variable `name` into `val` if it is set: 1 when read, 0 when unset, or
 * an error. */
static int from_var(const char *name, int32_t min, value *val, char *err, size_t errlen)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    int rc = parse_count(name, s, min, &val->v, err, errlen);
    if (rc)
        return rc;
    val->set = 1;
    feeder__fmt(val->origin, sizeof(val->origin), "%s=\"%s\"", name, s);
    return 1;
}

/* One "N" or "N(xM)" entry of SLURM_TASKS_PER_NODE at *p: tasks per node N
 * for M nodes. Advances *p past it. */
static int slurm_entry(const char **p, int64_t *tasks, int64_t *nodes)
{
    const char *s = *p;
    int64_t n = 0, m = 1;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((n = n * 10 + (*s - '0')) > INT32_MAX)
            return -1;
    if (s[0] == '(' && s[1] == 'x') {
        s += 2;
        if (*s < '0' || *s > '9')
            return -1;
        for (m = 0; *s >= '0' && *s <= '9'; s++)
            if ((m = m * 10 + (*s - '0')) > INT32_MAX)
                return -1;
        if (*s++ != ')')
            return -1;
    }
    if (n < 1 || m < 1)
        return -1;
    *tasks = n;
    *nodes = m;
    *p = s;
    return 0;
}

/* Slurm's local size: SLURM_NTASKS_PER_NODE (set only with --ntasks-per-node),
 * else this node's entry of SLURM_TASKS_PER_NODE ("2(x3),1": two tasks on each
 * of the first three nodes, one on the fourth), picked by SLURM_NODEID. 1 when
 * read, 0 when neither is there, or an error. */
static int slurm_local_size(value *val, char *err, size_t errlen)
{
    int rc = from_var("SLURM_NTASKS_PER_NODE", 1, val, err, errlen);
    if (rc)
        return rc;
    const char *tpn = getenv("SLURM_TASKS_PER_NODE");
    const char *nid = getenv("SLURM_NODEID");
    if (!tpn || !nid)
        return 0;
    int32_t node;
    if ((rc = parse_count("SLURM_NODEID", nid, 0, &node, err, errlen)))
        return rc;
    /* The whole value is checked, not only up to this node's entry, so a
     * malformed one fails on every node alike. */
    const char *p = tpn;
    int64_t seen = 0, tasks = 0, nodes = 0, mine = 0;
    for (;;) {
        if (slurm_entry(&p, &tasks, &nodes) || (*p != ',' && *p != '\0')) {
            feeder__fmt(err, errlen,
                        PFX "SLURM_TASKS_PER_NODE=\"%s\": malformed (expected counts such as "
                            "\"2(x3),1\")",
                        tpn);
            return FEEDER_EINVAL;
        }
        if (!mine && node < seen + nodes)
            mine = tasks;
        seen += nodes;
        if (*p++ == '\0')
            break;
    }
    if (!mine) {
        feeder__fmt(err, errlen,
                    PFX "SLURM_NODEID=\"%s\" is beyond the %lld nodes of "
                        "SLURM_TASKS_PER_NODE=\"%s\"",
                    nid, (long long)seen, tpn);
        return FEEDER_EINVAL;
    }
    val->v = (int32_t)mine;
    val->set = 1;
    feeder__fmt(val->origin, sizeof(val->origin),
                "SLURM_TASKS_PER_NODE=\"%s\" at SLURM_NODEID=\"%s\"", tpn, nid);
    return 1;
}

/* The first launcher whose rank or size variable is set, or NULL. */
static const launcher *find_launcher(void)
{
    for (size_t i = 0; i < NLAUNCHERS; i++)
        if (getenv(launchers[i].vars[F_RANK]) || getenv(launchers[i].vars[F_WORLD]))
            return &launchers[i];
    return NULL;
}

static int check_below(const value *a, int fa, const value *b, int fb, char *err, size_t errlen)
{
    if (a->v < b->v)
        return 0;
    feeder__fmt(err, errlen, PFX "%s %d (%s) is not below the %s %d (%s)", field_words[fa],
                (int)a->v, a->origin, field_words[fb], (int)b->v, b->origin);
    return FEEDER_EINVAL;
}

/* One field from the caller, the explicit variable or the launcher's.
 * 0 (found or not: val->set says), or an error. `l`: the launcher, looked
 * for only when a value is wanted from it, so a job that names everything
 * explicitly never trips over a stale launcher variable. */
static int read_field(int f, int32_t preset, value *val, const launcher **l, int *looked,
                      char *err, size_t errlen)
{
    /* Sizes count processes, so 0 is as wrong as a negative rank. */
    int32_t min = (f == F_WORLD || f == F_LSIZE) ? 1 : 0;
    if (preset >= 0) {
        if (preset < min) {
            feeder__fmt(err, errlen,
                        PFX "%s %d set by the caller: must be at least %d (a negative "
                            "value, as in FEEDER_DIST_INIT, leaves it to the environment)",
                        field_names[f], (int)preset, (int)min);
            return FEEDER_EINVAL;
        }
        val->v = preset;
        val->set = 1;
        feeder__fmt(val->origin, sizeof(val->origin), "set by the caller");
        return 0;
    }
    int rc = from_var(explicit_vars[f], min, val, err, errlen);
    if (rc)
        return rc < 0 ? rc : 0;
    if (!*looked) {
        *l = find_launcher();
        *looked = 1;
    }
    if (!*l)
        return 0;
    rc = (*l)->vars[f] ? from_var((*l)->vars[f], min, val, err, errlen)
                       : slurm_local_size(val, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0 && (f == F_RANK || f == F_WORLD)) {
        /* One without the other cannot place this process. */
        feeder__fmt(err, errlen, PFX "%s is set but %s is not", (*l)->vars[f ^ 1], (*l)->vars[f]);
        return FEEDER_EINVAL;
    }
    return 0;
}

static void set_default(value *val, int32_t v, const char *origin)
{
    if (val->set)
        return;
    val->v = v;
    feeder__fmt(val->origin, sizeof(val->origin), "%s", origin);
}

/* Defaults: a process on its own is rank 0 of 1, and a launcher that does
 * not say how ranks are spread over machines is taken to have put them all
 * on this one. Then the fields must fit together. */
static int complete_fields(value *val, char *err, size_t errlen)
{
    set_default(&val[F_RANK], 0, "default");
    set_default(&val[F_WORLD], 1, "default");
    set_default(&val[F_LRANK], val[F_RANK].v, "the rank, by default");
    set_default(&val[F_LSIZE], val[F_WORLD].v, "the world size, by default");
    int rc;
    if ((rc = check_below(&val[F_RANK], F_RANK, &val[F_WORLD], F_WORLD, err, errlen)) ||
        (rc = check_below(&val[F_LRANK], F_LRANK, &val[F_LSIZE], F_LSIZE, err, errlen)))
        return rc;
    if (val[F_LSIZE].v > val[F_WORLD].v) {
        feeder__fmt(err, errlen, PFX "local size %d (%s) is above the world size %d (%s)",
                    (int)val[F_LSIZE].v, val[F_LSIZE].origin, (int)val[F_WORLD].v,
                    val[F_WORLD].origin);
        return FEEDER_EINVAL;
    }
    return 0;
}

int feeder_dist_from_env(feeder_dist *d, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!d) {
        feeder__fmt(err, errlen, PFX "d must not be NULL");
        return FEEDER_EINVAL;
    }
    const int32_t preset[F_COUNT] = {d->rank, d->world_size, d->local_rank, d->local_size};
    value val[F_COUNT];
    memset(val, 0, sizeof(val));
    const launcher *l = NULL;
    int looked = 0, rc;
    for (int f = 0; f < F_COUNT; f++)
        if ((rc = read_field(f, preset[f], &val[f], &l, &looked, err, errlen)))
            return rc;
    if ((rc = complete_fields(val, err, errlen)))
        return rc;
    const char *source = "default";
    if (preset[F_RANK] >= 0 || getenv(explicit_vars[F_RANK]))
        source = "explicit";
    else if (val[F_RANK].set && l)
        source = l->source;
    d->rank = val[F_RANK].v;
    d->world_size = val[F_WORLD].v;
    d->local_rank = val[F_LRANK].v;
    d->local_size = val[F_LSIZE].v;
    if (d->device < 0)
        d->device = d->local_rank;
    d->source = source;
    return 0;
}

int feeder_dist_device(const feeder_dist *d, int device_count)
{
    if (!d || d->device < 0 || device_count <= 0)
        return -1;
    return d->device % device_count;
}
