/*
 * The worker processes: spawned per epoch (or kept, persistent_workers),
 * each with a SOCK_SEQPACKET channel and a pidfd; tasks sent, results read,
 * deaths seen through the pidfd or the channel's end, reaped, reported with
 * the worker id, pid and signal, or restarted with their parts re-run
 * (max_restarts). Every wait is a poll with poll_ms as its longest sleep.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/nvtx.h"
#include "common/trace.h"
#include "dataset/pack.h"
#include "loader/host.h"

/* Every parent-side descriptor of every loader in this process (channels,
 * pidfds, slot memfds). A new worker closes them all: a worker holding a copy of another
 * worker's channel would keep that channel open after its owner closed it,
 * and the other worker would never see the end of its channel. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static int *reg_fds;
static size_t reg_len, reg_cap;

void feeder__pool_register_fd(int fd)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&reg_lock);
    if (reg_len == reg_cap) {
        size_t cap = reg_cap ? reg_cap * 2 : 64;
        int *v = realloc(reg_fds, cap * sizeof(*v));
        if (v) {
            reg_fds = v;
            reg_cap = cap;
        }
    }
    if (reg_len < reg_cap)
        reg_fds[reg_len++] = fd;
    pthread_mutex_unlock(&reg_lock);
}

void feeder__pool_close_fd(int *fd)
{
    if (*fd < 0)
        return;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_len; i++) {
        if (reg_fds[i] == *fd) {
            reg_fds[i] = reg_fds[--reg_len];
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    close(*fd);
    *fd = -1;
}

/* Reap one worker that is dead or dying; `how` gets its exit in words. */
static void reap(worker *w, char *how, size_t howlen)
{
    int status = 0;
    pid_t r;
    do
        r = waitpid(w->pid, &status, 0);
    while (r < 0 && errno == EINTR);
    if (r == w->pid && WIFSIGNALED(status))
        feeder__fmt(how, howlen, "was killed by signal %d (%s)", WTERMSIG(status),
                    strsignal(WTERMSIG(status)));
    else if (r == w->pid && WIFEXITED(status))
        feeder__fmt(how, howlen, "exited with status %d", WEXITSTATUS(status));
    else
        feeder__fmt(how, howlen, "ended (%s)", r < 0 ? strerror(errno) : "unknown status");
    feeder__pool_close_fd(&w->pidfd);
    feeder__pool_close_fd(&w->chan);
    w->pid = -1;
}

/* Stop every worker. `hard`: SIGKILL now (destroy, failure); otherwise close
 * the channels so idle workers exit by themselves, and kill only those that
 * have not after a grace period. Always reaps: no zombie is left. */
void feeder__pool_stop(feeder_loader *ld, int hard)
{
    if (!ld->pool.running)
        return;
    for (int i = 0; i < ld->pool.nworkers; i++) {
        worker *w = &ld->pool.workers[i];
        if (w->pid <= 0)
            continue;
        if (hard)
            kill(w->pid, SIGKILL);
        feeder__pool_close_fd(&w->chan);
    }
    for (int i = 0; i < ld->pool.nworkers; i++) {
        worker *w = &ld->pool.workers[i];
        if (w->pid <= 0)
            continue;
        if (!hard && w->pidfd >= 0) {
            struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
            if (poll(&p, 1, 1000) == 0)
                kill(w->pid, SIGKILL);
        } else if (!hard) {
            kill(w->pid, SIGKILL);
        }
        char how[128];
        reap(w, how, sizeof(how));
    }
    ld->pool.running = 0;
    /* Nothing writes to the slots any more; parts in flight are gone. */
    for (uint32_t s = 0; s < ld->shm.nslots; s++)
        if (ld->shm.slots[s].state == SLOT_FILLING || ld->shm.slots[s].state == SLOT_READY)
            ld->shm.slots[s].state = SLOT_FREE;
    ld->flow.q.len = 0;
    ld->flow.ahead.on = 0; /* its batches were in those slots */
}

void feeder__pool_forget(feeder_loader *ld)
{
    for (int i = 0; ld->pool.running && i < ld->pool.nworkers; i++) {
        worker *w = &ld->pool.workers[i];
        feeder__pool_close_fd(&w->chan);
        feeder__pool_close_fd(&w->pidfd);
        w->pid = -1;
    }
    ld->pool.running = 0;
}

/* Start worker i (at start, or again after its death). */
static int spawn_one(feeder_loader *ld, int i)
{
    worker *w = &ld->pool.workers[i];
    *w = (worker){.pid = -1, .pidfd = -1, .chan = -1};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return feeder__loader_fail(ld, -errno, "socketpair for worker %d: %s", i, strerror(errno));
    /* The worker watches this process (a pidfd of it) and compares its
     * parent with this once the watch is set: a parent that died before
     * then would go unseen. */
    pid_t self = getpid();
    /* Held across fork so no other thread's loader changes the registry
     * between the child's copy of it and the fork itself. */
    if (ld->hooks.prepare)
        ld->hooks.prepare(ld->hooks.user);
    pthread_mutex_lock(&reg_lock);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        if (ld->hooks.child)
            ld->hooks.child(ld->hooks.user);
        /* The child's copy of the lock is held; it only reads the list. */
        feeder__worker_main(&ld->job, i, sv[1], self, reg_fds, (int)reg_len, ld->init,
                            ld->init_user);
    }
    int fork_errno = errno;
    pthread_mutex_unlock(&reg_lock);
    if (ld->hooks.parent)
        ld->hooks.parent(ld->hooks.user);
    if (pid < 0) {
        errno = fork_errno;
        int rc = feeder__loader_fail(ld, -errno, "fork of worker %d: %s", i, strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return rc;
    }
    close(sv[1]);
    w->pid = pid;
    w->chan = sv[0];
    /* A pidfd tells us of a death even when the channel is quiet; without
     * one (kernel < 5.3) the channel's EOF still does. */
    w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    feeder__pool_register_fd(w->chan);
    feeder__pool_register_fd(w->pidfd);
    return 0;
}

int feeder__pool_spawn(feeder_loader *ld)
{
    /* A worker that cannot start would fail the same way on every call:
     * forking again would only churn processes. */
    if (ld->pool.workers_failed)
        return feeder__loader_fail(ld, ld->pool.workers_failed, "%s", ld->pool.workers_why);
    for (int i = 0; i < ld->pool.nworkers; i++)
        ld->pool.workers[i] = (worker){.pid = -1, .pidfd = -1, .chan = -1};
    int rc = 0;
    for (int i = 0; i < ld->pool.nworkers && rc == 0; i++)
        rc = spawn_one(ld, i);
    ld->pool.running = 1;
    if (rc)
        feeder__pool_stop(ld, 1);
    return rc;
}

int feeder__pool_send_task(feeder_loader *ld, worker *w, const feeder__task_msg *t)
{
    for (;;) {
        ssize_t n = send(w->chan, t, sizeof(*t), MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof(*t))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -errno : FEEDER_EPROTO;
    }
}

static void account(feeder_loader *ld, const feeder__result_msg *r)
{
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.bytes_read += r->bytes_read;
    ld->stats.read_ns += r->read_ns;
    ld->stats.decode_ns += r->decode_ns;
    ld->stats.transform_ns += r->transform_ns;
    ld->stats.skipped += r->skipped;
    ld->stats.dropped += r->dropped;
    for (uint32_t k = 0; k < r->nbad && ld->nbad < FEEDER_SKIPPED_MAX; k++) {
        uint32_t j = 0;
        while (j < ld->nbad && ld->bad[j] != r->bad[k])
            j++;
        if (j == ld->nbad)
            ld->bad[ld->nbad++] = r->bad[k];
    }
    for (int k = 0; k < FEEDER_ROUTES; k++)
        ld->stats.cpu_routed[k] += r->routed[k];
    ld->stats.cpu_shared += r->shared;
    pthread_mutex_unlock(&ld->stats_lock);
}

void feeder__pool_complete_part(feeder_loader *ld, const feeder__result_msg *r)
{
    slot_state *ss = &ld->shm.slots[r->slot];
    account(ld, r);
    ss->used = r->used;
    if (r->extra_fd >= 0) { /* a batch dataset's; the slot closes it when it is filled again */
        feeder__pool_close_fd(&ss->extra_fd);
        ss->extra_fd = r->extra_fd;
        feeder__pool_register_fd(ss->extra_fd); /* no worker forked later holds it */
        ss->extra_bytes = r->extra_bytes;
    }
    ss->skipped += r->skipped + r->dropped;
    ss->dropped += r->dropped;
    if (r->status && !ss->status) {
        ss->status = r->status;
        feeder__fmt(ss->errmsg, sizeof(ss->errmsg), "%s", r->errmsg);
    }
    if (--ss->parts_left == 0)
        ss->state = SLOT_READY;
}

/* Put a dead worker's unanswered parts back at the head of the queue, oldest
 * first, with their slots' index ranges as the loader wrote them (under the
 * skip policy the worker may have replaced some), so that re-running them
 * gives the bytes the first run would have. */
static void requeue(feeder_loader *ld, worker *w)
{
    for (unsigned k = w->outstanding; k-- > 0;) {
        const feeder__task_msg *t = &w->inflight[k];
        slot_state *ss = &ld->shm.slots[t->slot];
        if (ss->state != SLOT_FILLING || ss->batch != t->batch || ss->epoch != t->epoch)
            continue;
        uint8_t *base = feeder__slot_base(&ld->job.layout, ld->shm.mem, t->slot);
        /* A fields batch packed already holds its indices packed too. */
        if (!ld->job.fields.nfields || !feeder__fields_ctrl(&ld->job.fields, base)->packed)
            memcpy(feeder__slot_indices(&ld->job.layout, base) + t->first,
                   feeder__flow_order(ld, t->epoch) + feeder__flow_batch_first(ld, t->batch) +
                       t->first,
                   (size_t)t->count * sizeof(uint64_t));
        ld->flow.q.head = (ld->flow.q.head + ld->flow.q.cap - 1) % ld->flow.q.cap;
        ld->flow.q.v[ld->flow.q.head] = *t;
        ld->flow.q.len++;
    }
    w->outstanding = 0;
}

/* A worker is dead (or its channel is). Under max_restarts (deaths of this
 * epoch), and when `transient` (a death, not a protocol error or a failed
 * worker_init), it is started again and its parts re-run: 0. Otherwise the
 * error names it (and every earlier death of the epoch), the rest are
 * stopped and the epoch is over. */
static int worker_died(feeder_loader *ld, int i, const char *extra, int transient)
{
    worker *w = &ld->pool.workers[i];
    pid_t pid = w->pid;
    uint64_t batch = w->inflight[0].batch;
    int busy = w->outstanding > 0;
    if (w->pidfd >= 0) {
        /* The channel can close a moment before the process is gone. */
        struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
        if (poll(&p, 1, 1000) == 0)
            kill(pid, SIGKILL);
    } else {
        kill(pid, SIGKILL);
    }
    char how[128];
    reap(w, how, sizeof(how));
    char ctx[128] = "";
    if (busy)
        feeder__fmt(ctx, sizeof(ctx), " while loading batch %llu of epoch %llu",
                    (unsigned long long)batch, (unsigned long long)ld->flow.epoch);
    char one[512];
    feeder__fmt(one, sizeof(one), "worker %d (pid %d) %s%s%s%s", i, (int)pid, how, ctx,
                extra && *extra ? ": " : "", extra ? extra : "");
    ld->pool.epoch_deaths++;
    size_t used = strlen(ld->pool.deaths);
    feeder__fmt(ld->pool.deaths + used, sizeof(ld->pool.deaths) - used, "%s%s", used ? "; " : "",
                one);
    uint64_t max = ld->plan.workers.max_restarts;
    if (transient && ld->pool.epoch_deaths <= max && (ld->flow.in_epoch || ld->flow.ahead.on)) {
        requeue(ld, w);
        int rc = spawn_one(ld, i);
        if (rc == 0) {
            pthread_mutex_lock(&ld->stats_lock);
            ld->stats.worker_restarts++;
            pthread_mutex_unlock(&ld->stats_lock);
            ld->errmsg[0] = 0;
            return 0;
        }
        /* Cannot start it again: fail as without restarts, saying why. */
        size_t u = strlen(ld->pool.deaths);
        feeder__fmt(ld->pool.deaths + u, sizeof(ld->pool.deaths) - u, " (restart failed: %s)",
                    ld->errmsg);
    }
    if (ld->pool.epoch_deaths == 1)
        feeder__loader_fail(ld, FEEDER_EWORKER, "%s", ld->pool.deaths);
    else
        feeder__loader_fail(ld, FEEDER_EWORKER, "%llu worker deaths in epoch %llu, more than max_restarts = %llu: %s",
             (unsigned long long)ld->pool.epoch_deaths, (unsigned long long)ld->flow.epoch,
             (unsigned long long)max, ld->pool.deaths);
    feeder__pool_stop(ld, 1);
    ld->flow.in_epoch = 0;
    return FEEDER_EWORKER;
}

/* The worker holding a part of `batch` (in_order: the batch waited for), or
 * else the busy worker with the oldest batch; -1 when none is busy. */
static int stalled_worker(const feeder_loader *ld, uint64_t batch, int in_order)
{
    int best = -1;
    uint64_t best_batch = UINT64_MAX;
    for (int i = 0; i < ld->pool.nworkers; i++) {
        const worker *w = &ld->pool.workers[i];
        if (w->pid <= 0 || !w->outstanding)
            continue;
        for (unsigned k = 0; k < w->outstanding; k++)
            if (in_order && w->inflight[k].batch == batch && w->inflight[k].epoch == ld->flow.epoch)
                return i;
        if (w->inflight[0].batch < best_batch) {
            best = i;
            best_batch = w->inflight[0].batch;
        }
    }
    return best;
}

int feeder__pool_timed_out(feeder_loader *ld, int64_t timeout_ms)
{
    int in_order = ld->plan.workers.in_order;
    uint64_t want = ld->flow.next_in_order;
    int i = stalled_worker(ld, want, in_order);
    char head[256];
    if (in_order)
        feeder__fmt(head, sizeof(head),
                    "no batch within timeout_ms = %lld (waiting for batch %llu of epoch %llu",
                    (long long)timeout_ms, (unsigned long long)want,
                    (unsigned long long)ld->flow.epoch);
    else
        feeder__fmt(head, sizeof(head), "no batch within timeout_ms = %lld (epoch %llu",
                    (long long)timeout_ms, (unsigned long long)ld->flow.epoch);
    if (i < 0)
        return feeder__loader_fail(ld, FEEDER_ETIMEDOUT, "%s; no worker is loading it)", head);
    worker *w = &ld->pool.workers[i];
    uint64_t held = w->inflight[0].batch;
    for (unsigned k = 0; in_order && k < w->outstanding; k++)
        if (w->inflight[k].batch == want)
            held = want;
    if (ld->plan.workers.max_restarts == 0 || !ld->flow.in_epoch)
        return feeder__loader_fail(ld, FEEDER_ETIMEDOUT,
                                   "%s; worker %d (pid %d) has not finished batch %llu); call "
                                   "again, or set max_restarts to have a stalled worker replaced",
                                   head, i, (int)w->pid, (unsigned long long)held);
    /* Replaced as a dead one is: killed (SIGKILL stops a stopped process
     * too), started again, its parts re-run. */
    char why[128];
    feeder__fmt(why, sizeof(why), "stalled: no answer within timeout_ms = %lld, so the loader killed it",
                (long long)timeout_ms);
    kill(w->pid, SIGKILL);
    return worker_died(ld, i, why, 1);
}

int feeder__pool_settle_timed_out(feeder_loader *ld, int64_t timeout_ms)
{
    char why[160];
    feeder__fmt(why, sizeof(why), "stalled: no answer within timeout_ms = %lld for parts being "
                "dropped, so the loader killed it", (long long)timeout_ms);
    for (int i = 0; i < ld->pool.nworkers; i++) {
        worker *w = &ld->pool.workers[i];
        if (w->pid <= 0 || !w->outstanding)
            continue;
        kill(w->pid, SIGKILL);
        int rc = worker_died(ld, i, why, 1);
        if (rc)
            return rc;
    }
    return 0;
}

/* One message from a worker's channel, without waiting, as recv() returns;
 * a batch dataset's extra descriptor, passed along with it, lands in
 * r->extra_fd (-1 without one; any other descriptor is closed). */
static ssize_t recv_result(int chan, feeder__result_msg *r)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } c;
    struct iovec io = {.iov_base = r, .iov_len = sizeof(*r)};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = c.buf,
                       .msg_controllen = sizeof(c.buf)};
    ssize_t n = recvmsg(chan, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    int fd = -1;
    for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < nfd; k++) {
            int got;
            memcpy(&got, CMSG_DATA(h) + k * sizeof(int), sizeof(int));
            if (fd < 0)
                fd = got;
            else
                close(got);
        }
    }
    if (n == (ssize_t)sizeof(*r))
        r->extra_fd = fd;
    else if (fd >= 0)
        close(fd);
    return n;
}

/* Read every message waiting on worker i's channel. 0, or an error (death,
 * failed worker start). */
static int drain_channel(feeder_loader *ld, int i)
{
    worker *w = &ld->pool.workers[i];
    int reset_seen = 0;
    for (;;) {
        feeder__result_msg r;
        ssize_t n = recv_result(w->chan, &r);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        /* A worker that exits with tasks unread makes the kernel report
         * ECONNRESET once, ahead of the messages it sent before: read on. */
        if (n < 0 && errno == ECONNRESET && !reset_seen) {
            reset_seen = 1;
            continue;
        }
        if (n <= 0)
            return worker_died(ld, i, NULL, 1);
        if ((size_t)n != sizeof(r))
            return worker_died(ld, i, "malformed message", 0);
        if (r.kind == FEEDER__MSG_READY) {
            if (r.status) {
                ld->pool.workers_failed = r.status;
                feeder__fmt(ld->pool.workers_why, sizeof(ld->pool.workers_why),
                            "%s; workers that cannot start are not started again", r.errmsg);
                worker_died(ld, i, NULL, 0);
                return feeder__loader_fail(ld, r.status, "%s", ld->pool.workers_why);
            }
            w->ready = 1;
            continue;
        }
        if (r.kind != FEEDER__MSG_RESULT || r.slot >= ld->shm.nslots ||
            ld->shm.slots[r.slot].state != SLOT_FILLING) {
            if (r.extra_fd >= 0)
                close(r.extra_fd);
            return worker_died(ld, i, "result for a slot that is not being filled", 0);
        }
        if (w->outstanding) {
            w->outstanding--;
            memmove(w->inflight, w->inflight + 1, w->outstanding * sizeof(w->inflight[0]));
        }
        feeder__pool_complete_part(ld, &r);
    }
}

/* Wait up to `ms` for worker traffic and handle it. */
int feeder__pool_wait(feeder_loader *ld, int ms, int wake_fd)
{
    struct pollfd p[2 * 1024 + 3];
    int idx[2 * 1024 + 3];
    int np = 0;
    for (int i = 0; i < ld->pool.nworkers; i++) {
        worker *w = &ld->pool.workers[i];
        if (w->pid <= 0)
            continue;
        if (w->chan < 0)
            return worker_died(ld, i, "its channel broke", 0);
        p[np] = (struct pollfd){.fd = w->chan, .events = POLLIN};
        idx[np++] = i;
        if (w->pidfd >= 0) {
            p[np] = (struct pollfd){.fd = w->pidfd, .events = POLLIN};
            idx[np++] = -1 - i;
        }
    }
    int nw = np; /* the workers' descriptors; the wake_fd after them */
    if (wake_fd >= 0)
        p[np++] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    int n = poll(p, (nfds_t)np, ms);
    if (n < 0)
        return errno == EINTR ? 0 : feeder__loader_fail(ld, -errno, "poll: %s", strerror(errno));
    np = nw;
    /* Messages first: a worker that answered and then died still counts its
     * answer. */
    for (int k = 0; k < np; k++) {
        if (idx[k] >= 0 && p[k].revents) {
            int rc = drain_channel(ld, idx[k]);
            if (rc)
                return rc;
        }
    }
    for (int k = 0; k < np; k++) {
        if (idx[k] < 0 && p[k].revents) {
            int i = -1 - idx[k];
            int rc = drain_channel(ld, i);
            if (rc)
                return rc;
            /* drain_channel may have seen the EOF and restarted it already. */
            if (ld->pool.workers[i].pid > 0 && ld->pool.workers[i].pidfd >= 0) {
                struct pollfd q = {.fd = ld->pool.workers[i].pidfd, .events = POLLIN};
                if (poll(&q, 1, 0) == 0)
                    return 0;
            }
            return worker_died(ld, i, NULL, 1);
        }
    }
    return 0;
}
