"""The binding against the C library: same bytes, no copies, no lost slots,
resumable state, epochs."""
import gc
import hashlib
import io
import os
import random

import numpy as np
import pytest
import torch

import feeder
from conftest import c_batches

OPTS = dict(batch_size=8, shuffle=True, seed=7, num_workers=2, pipeline="train", size=96)


def digest(images, labels):
    return (hashlib.sha256(images.contiguous().numpy().tobytes()).hexdigest(),
            labels.tolist())


def test_same_bytes_as_c_loader(folder, dataset):
    ref = c_batches(folder, batch_size=8, shuffle=1, seed=7, num_workers=2, pipeline=1,
                    height=96, width=96, resize=110, layout=1)
    got = [(x.numpy().tobytes(), y.tolist()) for x, y in feeder.Loader(dataset, **OPTS)]
    assert len(got) == len(ref) == 8
    for (gb, gl), (rb, rl) in zip(got, ref):
        assert hashlib.sha256(gb).digest() == hashlib.sha256(rb).digest()
        assert gl == rl


def test_nhwc_layout_and_labels(dataset):
    ld = feeder.Loader(dataset, batch_size=16, size=(64, 80), layout="NHWC")
    x, y = next(iter(ld))
    assert x.shape == (16, 64, 80, 3) and x.dtype == torch.uint8
    assert y.dtype == torch.int64
    assert y.tolist() == [dataset.label(i) for i in range(16)]
    assert len(ld) == 4


def test_zero_copy_torch(dataset):
    ld = feeder.Loader(dataset, **OPTS)
    slots = None
    ptrs = set()
    for x, y in ld:
        last = ld._last_batch
        assert x.data_ptr() == last["data_ptr"]
        assert y.data_ptr() == last["labels_ptr"]
        ptrs.add(x.data_ptr())
        slots = ld.stats()["slots"]
    # Every batch lives in one of the loader's slots: no per-batch buffers.
    assert len(ptrs) <= slots


def test_zero_copy_dlpack_numpy(dataset):
    ld = feeder.Loader(dataset, batch_size=8, as_torch=False)
    x, y = next(iter(ld))
    assert isinstance(x, feeder.Array)
    assert x.__dlpack_device__() == (1, 0)
    a = np.asarray(x)
    t = torch.from_dlpack(x)
    v = np.from_dlpack(x)
    assert a.ctypes.data == t.data_ptr() == v.ctypes.data == x.data_ptr == ld._last_batch["data_ptr"]
    # One memory: a write through one view shows in the others.
    a[0, 0, 0, 0] ^= 0xFF
    assert t[0, 0, 0, 0].item() == v[0, 0, 0, 0]
    assert np.asarray(y).tolist() == t.new_tensor(np.asarray(y)).tolist()
    # DLPack 1.0 when the consumer asks for it.
    cap = x.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(cap)
    with pytest.raises(BufferError):
        x.__dlpack__(copy=True)
    del cap


def test_slot_lives_while_a_view_lives(dataset):
    ld = feeder.Loader(dataset, batch_size=8, num_workers=2, prefetch_factor=1, as_torch=False)
    it = iter(ld)
    x, y = next(it)
    keep = torch.from_dlpack(x)
    first = keep.clone()
    del x, y
    gc.collect()
    assert ld._last_batch["outstanding"] == 1  # the torch view holds the slot
    for _ in range(3):
        next(it)  # other slots cycle
    assert torch.equal(keep, first)
    del keep
    assert ld._last_batch["outstanding"] <= 1


def test_thousand_batches_random_drop_no_slot_lost(dataset):
    rng = random.Random(1)
    ld = feeder.Loader(dataset, batch_size=4, num_workers=2, prefetch_factor=3, size=32)
    held = []
    n = 0
    while n < 1000:
        for x, y in ld:
            held.append((x, y) if rng.random() < 0.5 else (y, x))
            n += 1
            # Keep at most 4 of the 6 slots; drop a random one (images or labels first).
            while len(held) > rng.randint(0, 4):
                pair = held.pop(rng.randrange(len(held)))
                a, b = pair
                del pair
                del a
                del b
            if n == 1000:
                break
        del x, y
    held.clear()
    gc.collect()
    assert ld._last_batch["outstanding"] == 0
    # Every one of the 6 slots can still be held at once, and the 7th is refused.
    it = iter(ld)
    hold = [next(it) for _ in range(6)]
    with pytest.raises(feeder.BusyError, match="slot"):
        next(it)
    del hold
    assert next(it)[0].shape[0] == 4


@pytest.mark.parametrize("workers", [0, 3])
def test_state_dict_resume_equals_uninterrupted(dataset, workers):
    full = [digest(x, y) for x, y in feeder.Loader(dataset, **OPTS)]
    a = feeder.Loader(dataset, **OPTS)
    it = iter(a)
    head = [digest(*next(it)) for _ in range(3)]
    sd = a.state_dict()
    assert sd["epoch"] == 0 and isinstance(sd["feeder_state"], bytes)
    opts = dict(OPTS, num_workers=workers)
    b = feeder.Loader(dataset, **opts)
    b.load_state_dict(sd)
    tail = [digest(x, y) for x, y in b]
    assert head + tail == full
    # Then the epochs go on: b's next epoch is epoch 1.
    e1 = [digest(x, y) for x, y in b]
    c = feeder.Loader(dataset, **OPTS)
    c.set_epoch(1)
    assert e1 == [digest(x, y) for x, y in c]


def test_state_after_break_and_between_epochs(dataset):
    a = feeder.Loader(dataset, **OPTS)
    for i, _ in enumerate(a):
        if i == 4:
            break
    sd = a.state_dict()  # where the dropped iterator stood
    b = feeder.Loader(dataset, **OPTS)
    b.load_state_dict(sd)
    assert sum(1 for _ in b) == 3
    sd2 = b.state_dict()  # between epochs: epoch 1, nothing delivered
    assert sd2["epoch"] == 1
    c = feeder.Loader(dataset, **OPTS)
    c.load_state_dict(sd2)
    assert sum(1 for _ in c) == 8


def test_epochs_deterministic_and_different(dataset):
    ld = feeder.Loader(dataset, **OPTS)
    e0 = [digest(x, y) for x, y in ld]
    e1 = [digest(x, y) for x, y in ld]
    ld.set_epoch(0)
    again = [digest(x, y) for x, y in ld]
    assert e0 == again and e0 != e1
    assert ld.epoch == 1


@pytest.mark.parametrize("pipeline", ["train", "eval"])
def test_row_index_changes_no_byte(dataset, pipeline):
    """The ROI decoder's shared row index (on by default) only changes where
    the entropy decode starts: every batch of four epochs, with persistent
    workers that each see files another one indexed, equals the batches made
    without it."""
    opts = dict(OPTS, pipeline=pipeline, persistent_workers=True)
    def epochs(**kw):
        ld = feeder.Loader(dataset, **opts, **kw)
        return [[digest(x, y) for x, y in ld] for _ in range(4)]
    off = epochs(row_index_bytes=0)
    assert epochs() == off
    assert epochs(row_index_bytes=4096) == off  # a budget spent at once


def test_stats_and_backends(dataset):
    ld = feeder.Loader(dataset, batch_size=10, num_workers=2)
    assert sum(x.shape[0] for x, _ in ld) == 60
    s = ld.stats()
    assert s["batches"] == 6 and s["samples"] == 60 and s["slots"] == 4
    assert ld.backends()["decoder"] == "roi"
    assert ld.gpu_status()[0] is False


def test_close_and_context_manager(dataset):
    with feeder.Loader(dataset, batch_size=8, num_workers=2) as ld:
        it = iter(ld)
        x, _ = next(it)
        pids = ld.worker_pids()
        assert len(pids) == 2
    # Workers stopped at close; the held batch stays valid until dropped.
    assert ld.worker_pids() == []
    assert int(x.sum()) > 0
    with pytest.raises(RuntimeError, match="closed"):
        iter(ld)
    del x


def test_tar_shards_same_bytes_as_file_list(folder, tmp_path):
    """Shards made with Python's tarfile (WebDataset's own writer's format)
    give the batches of a list file over the same images in the same order."""
    import tarfile
    files = sorted(os.path.join(c, f) for c in sorted(os.listdir(folder))
                   for f in os.listdir(os.path.join(folder, c)))
    classes = sorted(os.listdir(folder))
    lines = []
    for s in range(2):
        with tarfile.open(tmp_path / f"s-{s}.tar", "w") as tar:
            for i, rel in enumerate(files[s::2]):
                key = f"k{s}/{i:06d}"
                label = classes.index(os.path.dirname(rel))
                tar.add(os.path.join(folder, rel), arcname=f"{key}.jpg")
                info = tarfile.TarInfo(f"{key}.cls")
                info.size = len(str(label))
                tar.addfile(info, io.BytesIO(str(label).encode()))
                lines.append(f"{rel} {label}\n")
    (tmp_path / "list.txt").write_text("".join(lines))
    shards = feeder.TarShards(str(tmp_path / "s-{0..1}.tar"))
    flist = feeder.FileList(str(tmp_path / "list.txt"), root=folder)
    assert len(shards) == len(flist) == len(files)
    assert shards.path(0) is None
    assert repr(shards).startswith("<feeder.TarShards ")
    got = [digest(x, y) for x, y in feeder.Loader(shards, **OPTS)]
    want = [digest(x, y) for x, y in feeder.Loader(flist, **OPTS)]
    assert got == want
    with pytest.raises(FileNotFoundError, match="s-2.tar: cannot open tar shard"):
        feeder.TarShards(str(tmp_path / "s-{0..2}.tar"))


def test_iter_mid_epoch_ends_the_old_epoch_with_a_warning(dataset):
    """iter() during an epoch starts the next epoch; the older iterator warns
    once (RuntimeWarning) and stops; one that finished its epoch, or whose
    loop ended, stops quietly."""
    import warnings
    ld = feeder.Loader(dataset, batch_size=10, num_workers=2, size=32)
    old = iter(ld)
    x, _ = next(old)
    del x
    new = iter(ld)
    assert ld.epoch == 1
    with pytest.warns(RuntimeWarning, match=r"^feeder: a newer iter\(loader\) ended this "
                      r"iterator's epoch 0 early, so it stops here \(a Loader runs one epoch at "
                      r"a time; finish or drop an iterator before starting the next\)$"):
        with pytest.raises(StopIteration):
            next(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(StopIteration):
            next(old)  # said once
        assert sum(x.shape[0] for x, _ in new) == 60  # epoch 1 whole
        with pytest.raises(StopIteration):
            next(new)  # finished: quiet
        for x, _ in ld:  # epoch 2, left by break
            break
        del x
        assert sum(x.shape[0] for x, _ in ld) == 60  # epoch 3
        with pytest.raises(StopIteration):
            next(new)  # superseded after it finished: quiet too


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_raw_pack_with_default_arguments(folder, tmp_path, layout):
    """feeder.Loader(feeder.Packed(p)) with no shape arguments delivers the
    pack's records as stored (its shape and layout), as C does; layout= still
    asks for one, and disagreeing with the pack is an error naming it."""
    import subprocess
    tool = os.path.join(os.environ.get("FEEDER_BUILD_DIR", ""), "tools", "feeder-pack")
    if not os.access(tool, os.X_OK):
        pytest.skip("no feeder-pack (tests/python_check.sh sets FEEDER_BUILD_DIR)")
    p = str(tmp_path / "raw.pack")
    subprocess.run([tool, "--data", folder, "--out", p, "--size", "40x48", "--layout", layout,
                    "--workers", "0", "--quiet"], check=True)
    want = (4, 40, 48, 3) if layout == "nhwc" else (4, 3, 40, 48)
    ld = feeder.Loader(feeder.Packed(p), batch_size=4)
    x, y = next(iter(ld))
    assert tuple(x.shape) == want and x.dtype == torch.uint8
    # The bytes the folder gives with the pack's transform.
    ref = feeder.Loader(feeder.ImageFolder(folder), batch_size=4, size=(40, 48), resize=55,
                        layout=layout.upper())
    r, ry = next(iter(ref))
    assert torch.equal(x, r) and torch.equal(y, ry)
    del r, ry, ref
    same = feeder.Loader(feeder.Packed(p), batch_size=4, layout=layout.upper())
    assert tuple(next(iter(same))[0].shape) == want
    other = "NCHW" if layout == "nhwc" else "NHWC"
    with pytest.raises(feeder.FeederError, match="layout"):
        next(iter(feeder.Loader(feeder.Packed(p), batch_size=4, layout=other)))
