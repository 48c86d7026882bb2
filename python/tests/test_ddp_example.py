"""examples/python/train_ddp.py on the CPU with 2 ranks (gloo): one loader
per rank with torch's DistributedSampler, its checks (labels at the
sampler's indices, shares disjoint and covering) passing, and failing when
the labels are wrong. The launcher's variables are set by hand, as torchrun
sets them."""
import json
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "python", "train_ddp.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(folder, tmp_path, *extra, script=EXAMPLE):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")  # 2 ranks on 2 cores
        cmd = [sys.executable, script, "--data", folder, "--workers", "2", "--batch", "8",
               "--size", "32", "--epochs", "2", "--json", str(tmp_path / "out.json"), *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=400)[0])
        except subprocess.TimeoutExpired:
            for q in procs:  # a rank left waiting for the other is killed, not waited for
                q.kill()
            pytest.fail("a rank ran past 400 s: " + " | ".join(q.communicate()[0] for q in procs))
    return [p.returncode for p in procs], outs


@pytest.mark.parametrize("extra", [(), ("--in-order", "0"), ("--model", "small")])
def test_two_ranks_checked(folder, tmp_path, extra):
    codes, outs = run_ranks(folder, tmp_path, *extra)
    assert codes == [0, 0], outs
    out = json.load(open(tmp_path / "out.json"))
    assert out["world_size"] == 2 and out["images"] == 60
    assert out["checks"] == {"labels_match_sampler": True, "covers_dataset": True,
                             "disjoint_but_padding": True}
    assert len(out["images_per_s_per_rank"]) == 2
    # The second epoch began early on every rank: the sampler's next order was guessed right.
    assert len(out["batches_ahead_per_rank"]) == 2 and min(out["batches_ahead_per_rank"]) > 0
    waits = out["loader_wait_per_rank"]
    assert len(waits) == 2, waits
    for w in waits:
        assert 0 <= w["share"] <= 1 and 0 <= w["step_ms_p50"] <= w["step_ms_p90"], w


def test_synthetic_trains_without_a_loader(folder, tmp_path):
    """--synthetic: the same steps and label checks, a batch made on the device, no workers."""
    codes, outs = run_ranks(folder, tmp_path, "--model", "small", "--synthetic")
    assert codes == [0, 0], outs
    out = json.load(open(tmp_path / "out.json"))
    assert out["decoder"] == "synthetic" and out["workers_per_rank"] == 0, out
    assert all(out["checks"].values()), out["checks"]
    assert out["batches_ahead_per_rank"] == [0, 0]
    assert min(out["images_per_s_per_rank"]) > 0


def test_synthetic_needs_a_model(folder):
    r = subprocess.run([sys.executable, EXAMPLE, "--data", folder, "--synthetic"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--synthetic measures a model: it needs --model small" in r.stderr


def test_wrong_labels_fail(folder, tmp_path):
    """The label check can fail: the same program with the labels shifted by one."""
    src = open(EXAMPLE).read()
    bad = src.replace("    classes = len(ds.classes)\n",
                      "    classes = len(ds.classes)\n    targets = targets.roll(1)\n")
    assert bad != src
    bad = bad.replace('_here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", '
                      '"..", "python")', f'_here = {os.path.join(ROOT, "python")!r}')
    script = tmp_path / "train_ddp_bad.py"
    script.write_text(bad)
    codes, outs = run_ranks(folder, tmp_path, script=str(script))
    assert codes[0] != 0 and "a check failed" in outs[0]
    assert json.load(open(tmp_path / "out.json"))["checks"]["labels_match_sampler"] is False
