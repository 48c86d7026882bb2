"""Ctrl-C during iteration: KeyboardInterrupt at once, no worker left."""
import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent("""
    import json, os, signal, sys, time
    import feeder
    folder, catch = sys.argv[1], sys.argv[2] == "catch"
    ds = feeder.ImageFolder(folder)
    ld = feeder.Loader(ds, batch_size=4, num_workers=3, prefetch_factor=1)
    it = iter(ld)
    x, y = next(it)
    for pid in ld.worker_pids():
        os.kill(pid, signal.SIGSTOP)   # no more batches: the loop waits in feeder
    print(json.dumps({"pids": ld.worker_pids()}), flush=True)
    try:
        for x, y in it:
            pass
    except KeyboardInterrupt:
        if not catch:
            raise
        t = time.monotonic()
        print(json.dumps({"caught": True, "left": ld.worker_pids()}), flush=True)
        del it, x, y   # no batch alive: close() kills the workers at once
        ld.close()
        print(json.dumps({"closed": time.monotonic() - t}), flush=True)
""")


def read_line(p, timeout):
    """The child's first line, or a failure naming what it said: a child stuck
    before it prints is killed, not waited for."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    ready = sel.select(timeout)
    sel.close()
    if not ready:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"the child printed nothing in {timeout} s: {out} {err}")
    return p.stdout.readline()


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("mode", ["catch", "raise"])
def test_sigint_mid_iteration(tmp_path, folder, mode):
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", CHILD, folder, mode],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    line = read_line(p, 60)
    pids = json.loads(line)["pids"]
    assert len(pids) == 3 and all(alive(q) for q in pids)
    time.sleep(0.3)
    t = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    out, err = p.communicate(timeout=20)
    took = time.monotonic() - t
    assert took < 5, took
    if mode == "catch":
        assert p.returncode == 0, err
        assert '"caught": true' in out
    else:
        assert "KeyboardInterrupt" in err
        assert p.returncode != 0
    deadline = time.monotonic() + 5
    while any(alive(q) for q in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(q) for q in pids)
