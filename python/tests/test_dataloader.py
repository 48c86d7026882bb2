"""feeder.DataLoader against torch.utils.data.DataLoader, batch by batch.

Each test runs the same dataset, sampler and arguments through both loaders
and compares every batch exactly (values, dtypes, container types), shuffled
runs included: feeder draws from the generator in torch's order, so the same
seed gives the same batches. Where feeder differs on purpose, the test says
so.
"""
import collections
import gc
import inspect
import itertools
import math
import multiprocessing
import os
import random
import signal
import time

import numpy as np
import pytest
import torch
from torch.utils.data import (BatchSampler, Dataset, DistributedSampler, IterableDataset,
                              RandomSampler, SequentialSampler, SubsetRandomSampler,
                              WeightedRandomSampler)
from torch.utils.data import DataLoader as TorchLoader

import feeder
from feeder import DataLoader

Point = collections.namedtuple("Point", "x y")


def same(a, b, path="batch"):
    """Exact equality of two collated batches."""
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        assert torch.equal(a, b), f"{path}: values differ"
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def both(dataset, epochs=1, **kw):
    """Every batch of `epochs` epochs from torch's loader and feeder's."""
    out = []
    for cls in (TorchLoader, DataLoader):
        loader = cls(dataset, **kw)
        out.append([list(loader) for _ in range(epochs)])
    return out


def check_same(dataset, epochs=1, **kw):
    t, f = both(dataset, epochs, **kw)
    same(f, t)
    return f


class Mixed(Dataset):
    """A sample of every kind default_collate handles."""

    def __init__(self, n=37):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {
            "image": torch.arange(3 * 20 * 20, dtype=torch.uint8).view(3, 20, 20) + i,
            "big": torch.full((40000,), float(i)),
            "tokens": np.arange(512, dtype=np.int32) + i,
            "mask": np.arange(512) % (i + 2) == 0,
            "label": i % 5,
            "weight": i / 7,
            "id": f"sample-{i}",
            "pair": (i, torch.tensor([i, -i])),
            "point": Point(i, np.float32(i) / 2),
            "nested": {"a": [i, i + 1], "b": np.int64(i)},
        }


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (8, False), (8, True), (37, False)])
def test_sequential_equal(workers, batch_size, drop_last):
    check_same(Mixed(), batch_size=batch_size, drop_last=drop_last, num_workers=workers)


def test_signature_has_torch_arguments():
    names = ["dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
             "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
             "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers",
             "pin_memory_device", "in_order"]
    params = inspect.signature(DataLoader).parameters
    for n in names:
        assert n in params, n
    defaults = {"batch_size": 1, "shuffle": None, "num_workers": 0, "pin_memory": False,
                "drop_last": False, "timeout": 0, "prefetch_factor": None,
                "persistent_workers": False, "pin_memory_device": "", "in_order": True}
    for n, d in defaults.items():
        assert params[n].default == d, n
    # Anything torch accepts and feeder cannot honour raises, naming it.
    with pytest.raises(TypeError):
        DataLoader(Mixed(), no_such_argument=1)


@pytest.mark.parametrize("workers", [0, 2])
def test_shuffle_same_as_torch_per_generator(workers):
    kw = dict(batch_size=6, shuffle=True, num_workers=workers)
    t = TorchLoader(Mixed(), generator=torch.Generator().manual_seed(11), **kw)
    f = DataLoader(Mixed(), generator=torch.Generator().manual_seed(11), **kw)
    tb = [list(t) for _ in range(3)]
    fb = [list(f) for _ in range(3)]
    same(fb, tb)
    # Reproducible per generator; another seed gives another order.
    g = DataLoader(Mixed(), generator=torch.Generator().manual_seed(12), **kw)
    labels = [b["label"].tolist() for b in g]
    assert [b["id"] for b in fb[0]] != [b["id"] for b in list(g)]
    assert len(labels) == len(tb[0])


def test_shuffle_global_rng_as_torch():
    """Without a generator both draw from torch's global RNG, in the same order."""
    torch.manual_seed(3)
    t = [list(TorchLoader(Mixed(), batch_size=5, shuffle=True, num_workers=2)) for _ in range(2)]
    torch.manual_seed(3)
    f = [list(DataLoader(Mixed(), batch_size=5, shuffle=True, num_workers=2)) for _ in range(2)]
    same(f, t)


@pytest.mark.parametrize("make", [
    lambda ds, g: RandomSampler(ds, replacement=True, num_samples=50, generator=g),
    lambda ds, g: RandomSampler(ds, num_samples=80, generator=g),
    lambda ds, g: SubsetRandomSampler([3, 1, 4, 1, 5, 9, 2, 6, 5, 35], generator=g),
    lambda ds, g: WeightedRandomSampler([i % 4 for i in range(37)], 60, generator=g),
    lambda ds, g: WeightedRandomSampler([1.0] * 37, 20, replacement=False, generator=g),
    lambda ds, g: [36, 0, 12, 12, 7],
    lambda ds, g: SequentialSampler(ds),
], ids=["random-replacement", "random-num-samples", "subset", "weighted", "weighted-noreplace",
        "list", "sequential"])
def test_samplers(make):
    ds = Mixed()
    t = list(TorchLoader(ds, sampler=make(ds, torch.Generator().manual_seed(5)), batch_size=4,
                         num_workers=2))
    f = list(DataLoader(ds, sampler=make(ds, torch.Generator().manual_seed(5)), batch_size=4,
                        num_workers=2))
    same(f, t)


class Buckets:
    """A batch sampler of batches of several lengths, one of them empty."""

    def __iter__(self):
        return iter([[0, 1, 2], [5], list(range(10, 30)), [36, 35], [7, 7, 7, 7]])

    def __len__(self):
        return 5


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_batch_sampler_variable_lengths(workers):
    check_same(Mixed(), batch_sampler=Buckets(), num_workers=workers)

    def shuffled():
        return BatchSampler(RandomSampler(range(37), generator=torch.Generator().manual_seed(1)),
                            7, True)
    t = list(TorchLoader(Mixed(), batch_sampler=shuffled(), num_workers=workers))
    f = list(DataLoader(Mixed(), batch_sampler=shuffled(), num_workers=workers))
    same(f, t)


@pytest.mark.parametrize("workers", [0, 2])
def test_no_auto_batching(workers):
    """batch_size=None: each sample is converted (default_convert), not batched."""
    check_same(Mixed(9), batch_size=None, num_workers=workers)
    check_same(Mixed(9), batch_size=None, sampler=[4, 2, 8], num_workers=workers)


def test_distributed_sampler_ranks():
    ds = Mixed(40)
    seen = []
    for rank in range(3):
        out = []
        for cls in (TorchLoader, DataLoader):
            s = DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=True, seed=9)
            loader = cls(ds, sampler=s, batch_size=4, num_workers=2)
            epochs = []
            for e in range(2):
                s.set_epoch(e)
                epochs.append(list(loader))
            out.append(epochs)
        same(out[1], out[0])
        seen.append([i for b in out[1][0] for i in b["label"].tolist()])
    # The ranks' shares are disjoint and cover the dataset (padded to 42).
    labels = sorted(itertools.chain.from_iterable(seen))
    assert len(labels) == 42


class Stream(IterableDataset):
    """range(start, end), split across workers as torch's docs show; worker w
    yields w extra samples so the streams end at different times."""

    def __init__(self, start, end, uneven=False):
        self.start, self.end, self.uneven = start, end, uneven

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        assert info is feeder.get_worker_info() or feeder.get_worker_info() is None
        if info is None:
            lo, hi = self.start, self.end
        else:
            per = int(math.ceil((self.end - self.start) / info.num_workers))
            lo = self.start + info.id * per
            hi = min(lo + per + (info.id * 3 if self.uneven else 0), self.end + 7)
        for i in range(lo, hi):
            yield {"x": torch.tensor([i, i * i]), "s": str(i)}

    def __len__(self):
        return self.end - self.start


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("batch_size,drop_last", [(4, False), (4, True), (None, False)])
@pytest.mark.parametrize("uneven", [False, True])
def test_iterable_dataset_split(workers, batch_size, drop_last, uneven):
    check_same(Stream(3, 50, uneven), epochs=2, batch_size=batch_size, drop_last=drop_last,
               num_workers=workers)


def test_iterable_persistent_workers_restart_stream():
    check_same(Stream(0, 30, True), epochs=3, batch_size=4, num_workers=2,
               persistent_workers=True)


def test_len_equals_torch():
    cases = [dict(dataset=Mixed(), batch_size=5), dict(dataset=Mixed(), batch_size=5,
                                                       drop_last=True),
             dict(dataset=Mixed(), batch_sampler=Buckets()),
             dict(dataset=Stream(0, 23), batch_size=4), dict(dataset=Stream(0, 23),
                                                             batch_size=4, drop_last=True),
             dict(dataset=Mixed(), batch_size=None)]
    for kw in cases:
        assert len(DataLoader(**kw)) == len(TorchLoader(**kw)), kw


class Seeds(Dataset):
    """What each worker's random state and info give."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return {"worker": info.id if info else -1, "seed": info.seed if info else -1,
                "num_workers": info.num_workers if info else 0,
                "random": random.random(), "numpy": float(np.random.rand()),
                "torch": torch.rand(1), "initial": torch.initial_seed(),
                "inited": float(os.environ.get("FEEDER_TEST_INIT", "0"))}


def _init_fn(worker_id):
    os.environ["FEEDER_TEST_INIT"] = str(worker_id + 100)


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_seeds_info_and_init_as_torch(persistent):
    """Same generator: the same base seed, so every worker's random, numpy and
    torch draws, its WorkerInfo and what worker_init_fn did are torch's."""
    kw = dict(batch_size=3, num_workers=3, worker_init_fn=_init_fn,
              persistent_workers=persistent)
    t = TorchLoader(Seeds(), generator=torch.Generator().manual_seed(21), **kw)
    f = DataLoader(Seeds(), generator=torch.Generator().manual_seed(21), **kw)
    same([list(f) for _ in range(2)], [list(t) for _ in range(2)])
    assert feeder.get_worker_info() is None


class Fails(Dataset):
    def __init__(self, bad, exc):
        self.bad, self.exc = bad, exc

    def __len__(self):
        return 20

    def __getitem__(self, i):
        if i == self.bad:
            raise self.exc
        return i


class NeedsTwo(Exception):
    def __init__(self, a, b):
        super().__init__(a, b)


@pytest.mark.parametrize("workers", [0, 2])
def test_exception_reraised_with_type_and_loader_goes_on(workers):
    loader = DataLoader(Fails(7, ValueError("seven is bad")), batch_size=4, num_workers=workers)
    it = iter(loader)
    assert next(it).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError) as e:
        next(it)
    assert "seven is bad" in str(e.value)
    if workers:
        # torch's text, plus the batch and the sample index (feeder's addition).
        assert "Caught ValueError in DataLoader worker process 1 (batch 1, index 7)" in str(e.value)
        assert "Traceback" in str(e.value)
    # The loader goes on with the next batch, as torch's does.
    assert next(it).tolist() == [8, 9, 10, 11]
    assert [b.tolist() for b in it] == [[12, 13, 14, 15], [16, 17, 18, 19]]


def test_exception_types_as_torch():
    for exc, cls in [(KeyError("k"), KeyError), (NeedsTwo(1, 2), RuntimeError),
                     (IndexError("i"), IndexError)]:
        for loader_cls in (TorchLoader, DataLoader):
            with pytest.raises(cls):
                list(loader_cls(Fails(2, exc), batch_size=4, num_workers=2))


class _Finalised:
    """A reference cycle whose finaliser writes the pid it ran in."""

    def __init__(self, path):
        self.path, self.me = path, self

    def __del__(self):
        try:
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()}\n")
        except OSError:  # run late, after the test's folder went
            pass


class CollectsInWorker(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        gc.collect()
        return i


def test_parents_garbage_is_not_finalised_in_workers(tmp_path):
    """A difference on purpose: torch's workers collect the garbage the
    parent had not collected yet at the fork, running its finalisers there;
    feeder's never do (the fork freezes the collector's objects). Such a
    finaliser, an abandoned torch iterator's, hung a worker on a lock the
    fork copied held."""
    path = tmp_path / "finalised"
    gc.disable()
    try:
        _Finalised(str(path))  # garbage the collector has not seen yet
        batches = [b.tolist() for b in DataLoader(CollectsInWorker(), batch_size=2, num_workers=2)]
    finally:
        gc.enable()
    assert batches == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # No worker ran its finaliser (this process will, when it next
    # collects: not here, where a full collection would also finalise the
    # torch iterators earlier tests abandoned, 5 s a worker).
    assert not path.exists()


class PutsToQueue(Dataset):
    def __init__(self, q):
        self.q = q

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.q.put(i)
        return i


@pytest.mark.parametrize("loader_cls", [TorchLoader, DataLoader])
def test_multiprocessing_queue_in_dataset(loader_cls):
    # The parent's queue has a thread of its own (started by its put); the
    # workers' puts reach the parent all the same, as from torch's workers.
    q = multiprocessing.get_context("fork").Queue()
    q.put(-1)
    assert q.get(timeout=10) == -1
    got = []
    for b in loader_cls(PutsToQueue(q), batch_size=2, num_workers=2):
        got += [q.get(timeout=10) for _ in b.tolist()]
    assert sorted(got) == list(range(8))


def test_collate_fn_exception():
    def collate(batch):
        raise ZeroDivisionError("collate said no")
    with pytest.raises(ZeroDivisionError, match="collate said no") as e:
        list(DataLoader(Mixed(), batch_size=4, num_workers=2, collate_fn=collate))
    assert "in collate_fn" in str(e.value)


def test_worker_init_exception_reraised():
    def init(worker_id):
        raise OSError(f"init {worker_id} failed")
    with pytest.raises(OSError, match="init 0 failed"):
        list(DataLoader(Mixed(), batch_size=4, num_workers=2, worker_init_fn=init))


class Slow(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 4:
            time.sleep(30)
        return i


def test_timeout_raises():
    loader = DataLoader(Slow(), batch_size=2, num_workers=2, timeout=1)
    it = iter(loader)
    assert next(it).tolist() == [0, 1]
    assert next(it).tolist() == [2, 3]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 1 seconds \(waiting for "
                       r"batch 2 of epoch 0; worker 0 \(pid \d+\) has not finished batch 2\)"):
        next(it)
    assert time.monotonic() - t0 < 10
    del it, loader


class Killer(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i == 6 and feeder.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


def test_worker_killed_is_named_and_next_epoch_works():
    loader = DataLoader(Killer(), batch_size=2, num_workers=2)
    with pytest.raises(RuntimeError) as e:
        list(loader)
    assert "killed by signal 9" in str(e.value)
    assert isinstance(e.value, feeder.WorkerError)
    # A new epoch forks new workers; the same sample kills again, named again.
    with pytest.raises(feeder.WorkerError):
        list(loader)


class Pids(Dataset):
    calls = 0

    def __len__(self):
        return 6

    def __getitem__(self, i):
        Pids.calls += 1  # the worker's copy of the dataset keeps its state
        return torch.tensor([os.getpid(), Pids.calls])


def test_persistent_workers_keep_processes_and_dataset_copies():
    loader = DataLoader(Pids(), batch_size=3, num_workers=2, persistent_workers=True)
    e0 = torch.cat(list(loader))
    e1 = torch.cat(list(loader))
    assert set(e0[:, 0].tolist()) == set(e1[:, 0].tolist())
    assert e1[:, 1].min() > e0[:, 1].max() - 3  # counts go on in each worker
    assert os.getpid() not in e0[:, 0].tolist()
    loader2 = DataLoader(Pids(), batch_size=3, num_workers=2)
    p0 = set(torch.cat(list(loader2))[:, 0].tolist())
    p1 = set(torch.cat(list(loader2))[:, 0].tolist())
    assert not p0 & p1  # new workers each epoch


def tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_in(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_in(v)]
    return []


def test_pin_memory_as_torch():
    """On a machine without CUDA both ignore pin_memory (torch's rule); with
    CUDA every tensor of the batch is pinned, the named tuple's too."""
    t, f = both(Mixed(), batch_size=8, num_workers=2, pin_memory=True)
    same(f, t)
    if torch.cuda.is_available():
        assert all(x.is_pinned() for b in f[0] for x in tensors_in(b))
        assert all(x.is_pinned() for b in t[0] for x in tensors_in(b))


@pytest.mark.filterwarnings("ignore:Named tensors")
def test_pin_walk_copies_plain_tensors_and_leaves_the_rest_to_torch():
    """pin_memory's own walk (feeder/_pin.py), with an unpinned allocator so
    it runs without CUDA: plain contiguous CPU tensors are copied byte for
    byte into new memory, lists, tuples and dicts keep their types, and what
    torch's pin_memory must handle is handed back as it was."""
    from feeder import _pin
    made = []

    def empty(t):
        made.append(tuple(t.shape))
        return torch.empty(t.shape, dtype=t.dtype)

    base = torch.arange(48, dtype=torch.int16).view(2, 3, 8)
    view = base[1]  # contiguous, at an offset in its storage
    batch = [base, {"ids": ["a", "b"], "w": (1.5, None, True), "v": view,
                    "e": torch.empty(0, 5)}, b"x", 7]
    out, whole = _pin.walk(batch, empty)
    assert whole and made == [(2, 3, 8), (3, 8), (0, 5)]
    assert type(out) is list and type(out[1]) is dict and type(out[1]["w"]) is tuple
    assert torch.equal(out[0], base) and out[0].data_ptr() != base.data_ptr()
    assert torch.equal(out[1]["v"], view) and out[1]["v"].data_ptr() != view.data_ptr()
    assert out[1]["e"].shape == (0, 5)
    assert out[1]["ids"] == ["a", "b"] and out[1]["w"] == (1.5, None, True)
    assert out[2:] == [b"x", 7]
    for odd in (base.transpose(0, 2), Point(1, 2), np.zeros(3),
                torch.ones(2, requires_grad=True), torch.ones(2, names=("n",)),
                torch.ones(2, dtype=torch.complex64).conj()):
        got, whole = _pin.walk({"k": [base, odd]}, empty)
        assert not whole and got["k"][1] is odd and torch.equal(got["k"][0], base)
    # The copy out of a slot: the same bytes in new memory, whatever the tensor.
    for t in (base, view, base.transpose(0, 2), torch.empty(0, 3), torch.ones(2, names=("n",))):
        c = _pin.clone(t)
        assert c.dtype == t.dtype and c.shape == t.shape and c.names == t.names
        assert torch.equal(c.rename(None), t.rename(None))
        assert c.numel() == 0 or c.data_ptr() != t.data_ptr()


class Boxes:
    def __init__(self, boxes, names):
        self.boxes, self.names = boxes, names

    def __eq__(self, other):
        return torch.equal(self.boxes, other.boxes) and self.names == other.names


def _boxes_collate(batch):
    return Boxes(torch.stack([b["image"] for b in batch]), [b["id"] for b in batch])


def test_custom_collate_object():
    check_same(Mixed(), batch_size=6, num_workers=2, collate_fn=_boxes_collate)


def test_getitems_used_as_torch_does():
    class Batched(Mixed):
        def __getitems__(self, indices):
            return [self[i] for i in indices]
    check_same(Batched(), batch_size=5, num_workers=2)


class Big(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.arange(300000, dtype=torch.int64) * (i + 1), f"id{i}"


def test_batches_larger_than_the_room():
    """A batch past batch_room goes through the worker's memfd (feeder's path;
    the batches are still torch's)."""
    t = list(TorchLoader(Big(), batch_size=3, num_workers=2))
    f = list(DataLoader(Big(), batch_size=3, num_workers=2, batch_room=64 * 1024))
    same(f, t)


def test_keep_and_drop_1000_batches():
    """Tensors kept and dropped at random: every batch arrives, kept ones keep
    their values, and no slot is lost (never BusyError)."""
    rng = random.Random(4)
    loader = DataLoader(Mixed(2000), batch_size=2, num_workers=2, persistent_workers=True)
    kept = {}
    n = 0
    for b in loader:
        n += 1
        k = int(b["label"][0]) * 0 + int(b["id"][0][7:])
        if rng.random() < 0.3:
            kept[k] = b["big"]
        if kept and rng.random() < 0.3:
            kept.pop(rng.choice(list(kept)))
    assert n == 1000
    for k, big in kept.items():
        assert torch.equal(big[0], torch.full((40000,), float(k)))
    engine = loader._engine
    del kept, b
    gc.collect()
    assert engine.outstanding == 0


def test_small_leaves_hold_no_slot():
    loader = DataLoader(Mixed(), batch_size=4, num_workers=2, persistent_workers=True)
    labels = [b["label"] for b in loader]
    gc.collect()
    assert loader._engine.outstanding == 0
    assert torch.equal(torch.cat(labels), torch.tensor([i % 5 for i in range(37)]))


class Endless:
    def __iter__(self):
        return itertools.cycle(range(37))


def test_sampler_without_length_is_drawn_lazily():
    f = list(itertools.islice(DataLoader(Mixed(), sampler=Endless(), batch_size=3,
                                         num_workers=2), 600))
    t = list(itertools.islice(TorchLoader(Mixed(), sampler=Endless(), batch_size=3,
                                          num_workers=2), 600))
    same(f, t)


def test_in_order_false_gives_every_batch():
    f = list(DataLoader(Mixed(), batch_size=3, num_workers=3, in_order=False))
    assert sorted(i for b in f for i in b["label"].tolist()) == sorted(i % 5 for i in range(37))
    assert sorted(x for b in f for x in b["id"]) == sorted(f"sample-{i}" for i in range(37))


def test_argument_errors_as_torch():
    ds = Mixed()
    for kw in [dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2),
               dict(persistent_workers=True), dict(shuffle=True, sampler=[1]),
               dict(batch_sampler=Buckets(), batch_size=3),
               dict(batch_size=None, drop_last=True)]:
        with pytest.raises(ValueError):
            DataLoader(ds, **kw)
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(ds, timeout=float("nan"))
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        DataLoader(Stream(0, 3), shuffle=True)
    loader = DataLoader(ds, batch_size=2)
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3


def test_spawn_says_why_not():
    with pytest.raises(ValueError, match="'spawn' is not supported: feeder's workers are forked"):
        DataLoader(Mixed(), num_workers=2, multiprocessing_context="spawn")
    assert DataLoader(Mixed(), num_workers=2, multiprocessing_context="fork") is not None
    with pytest.raises(ValueError, match="only be used with multi-process"):
        DataLoader(Mixed(), multiprocessing_context="fork")


def test_non_integer_indices_named():
    with pytest.raises(TypeError, match="the sampler yielded"):
        list(DataLoader(Mixed(), sampler=["a", "b"], num_workers=2))


def test_new_iterator_mid_epoch_starts_over():
    loader = DataLoader(Mixed(), batch_size=4, num_workers=2, persistent_workers=True)
    it = iter(loader)
    next(it)
    again = list(loader)
    assert len(again) == len(loader)
    same(again, list(TorchLoader(Mixed(), batch_size=4)))
