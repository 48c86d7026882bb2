"""os.fork() with a live loader: the loader belongs to the process that made
it. A child's next() raises, naming the rule; a child that exits normally
(its interpreter freeing the loader and its iterator) exits 0; the parent's
epoch goes on with every batch, in order, exact. Each case runs in a fresh
interpreter, so pytest's own process is never forked."""
import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    import torch
    import feeder
    folder, kind = sys.argv[1], sys.argv[2]

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 40
        def __getitem__(self, i):
            return torch.full((3,), i * i), i

    def make():
        if kind == "Loader":
            return feeder.Loader(feeder.ImageFolder(folder), batch_size=4, num_workers=2,
                                 shuffle=True, seed=7, size=32)
        if kind == "DataLoader-folder":
            return feeder.DataLoader(feeder.ImageFolder(folder), batch_size=4, num_workers=2,
                                     shuffle=True, generator=torch.Generator().manual_seed(7))
        return feeder.DataLoader(Squares(), batch_size=4, num_workers=2)

    def digest(batch):
        x, y = batch
        return hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest() + str(y.tolist())

    ref = [digest(b) for b in make()]
    ld = make()
    it = iter(ld)
    got = [digest(next(it))]
    held = next(it)   # a batch alive in both processes across the fork
    got.append(digest(held))
    pid = os.fork()
    if pid == 0:
        out = {"next": "not called"}
        try:
            if sys.argv[4] == "next":
                next(it)
                out = {"next": "returned a batch"}
        except Exception as e:
            out = {"next": type(e).__name__, "msg": str(e),
                   "runtime": isinstance(e, RuntimeError)}
        with open(sys.argv[3], "w") as f:
            json.dump(out, f)
        sys.exit(0)   # a normal exit: the interpreter frees the loader, iterator, batch
    _, status = os.waitpid(pid, 0)
    assert digest(held) == got[-1]
    del held
    got += [digest(b) for b in it]
    print(json.dumps({"status": status, "ok": got == ref, "n": len(got), "parent": os.getpid()}))
""")


@pytest.mark.parametrize("child_calls", ["next", "nothing"])
@pytest.mark.parametrize("kind", ["Loader", "DataLoader-folder", "DataLoader-python"])
def test_forked_child_refused_and_parent_goes_on(folder, tmp_path, kind, child_calls):
    child_out = tmp_path / "child.json"
    p = subprocess.run([sys.executable, "-c", SCRIPT, folder, kind, str(child_out), child_calls],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    parent = json.loads(p.stdout.strip().splitlines()[-1])
    assert parent["status"] == 0, f"child status {parent['status']}: {p.stderr}"
    assert parent["ok"] and parent["n"] >= 10, parent
    child = json.loads(child_out.read_text())
    if child_calls == "nothing":
        assert child["next"] == "not called"
        return
    assert child["next"] == "FeederError" and child["runtime"], child
    assert child["msg"] == (
        f"this loader belongs to process {parent['parent']}; a loader cannot be used in a "
        "process forked from the one that created it (make a new loader in the child) "
        "[FEEDER_EFORKED]")
