"""feeder.ImageFolder + feeder.transforms through feeder.DataLoader: the
pipeline compiled into feeder.Loader's C pipeline (the same bytes as
feeder.Loader with the same settings and seed), torchvision's ImageFolder
attributes, and the errors for what has no native equivalent."""
import pytest
import torch

import feeder
from feeder import transforms as T

torchvision = pytest.importorskip("torchvision")


def seed_of(s):
    """The seed feeder.DataLoader draws from torch.Generator().manual_seed(s)."""
    return torch.empty((), dtype=torch.int64).random_(
        generator=torch.Generator().manual_seed(s)).item() & ((1 << 53) - 1)


def test_compile_maps_torchvision_names():
    p = T.compile(T.Compose([T.RandomResizedCrop(160, scale=(0.25, 1.0)),
                             T.RandomHorizontalFlip(0.3), T.ColorJitter(0.4, 0.3, 0.2, 0.1),
                             T.RandomGrayscale(0.2), T.GaussianBlur(5, (0.1, 1.5)),
                             T.TrivialAugmentWide(), T.RandomErasing(0.25),
                             T.ToDtype(torch.float32, scale=True),
                             T.Normalize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])]))
    assert p.kw["pipeline"] == "train" and p.kw["size"] == (160, 160)
    assert p.kw["scale"] == (0.25, 1.0) and p.kw["flip_prob"] == 0.3
    assert p.kw["augment"] == [("color_jitter", 0.4, 0.3, 0.2, 0.1), ("grayscale", 0.2),
                               ("blur", 5, 0.1, 1.5), ("trivial", 31, 0, -1),
                               ("erase", 0.25, 0.02, 0.33, 0.3, 3.3, 0)]
    assert p.dtype == torch.float32 and p.mean == [0.5, 0.4, 0.3]
    e = T.compile(T.Compose([T.Resize(256), T.CenterCrop(224)]))
    assert e.kw == {"pipeline": "eval", "resize": 256, "size": (224, 224)}
    r = T.compile(T.Compose([T.Resize((120, 200)), T.RandomHorizontalFlip()]))
    assert r.kw == {"pipeline": "resize", "size": (120, 200), "augment": [("flip", 0, 0.5)]}
    t = T.compile(T.RandomResizedCrop(64))
    assert t.kw["flip_prob"] == 0.0  # no flip asked for: none (feeder's C default is 0.5)


@pytest.mark.parametrize("bad,msg", [
    (T.Compose([T.Resize(256)]), "must be followed by CenterCrop"),
    (T.Compose([T.CenterCrop(224)]), "needs Resize"),
    (T.Compose([T.ColorJitter(0.4)]), "comes before the crop"),
    (T.Compose([T.RandomResizedCrop(64), T.Normalize([0.5] * 3, [0.2] * 3)]), "needs ToDtype"),
    (T.Compose([T.RandomResizedCrop(64), T.ToDtype(torch.float32, scale=True),
                T.ColorJitter(0.1)]), "put it before them"),
    (T.Compose([T.RandomResizedCrop(64), "not a transform"]), "is not a feeder transform"),
])
def test_compile_errors_name_the_transform(bad, msg):
    with pytest.raises(TypeError, match=msg):
        T.compile(bad)
    with pytest.raises(TypeError, match="range symmetric around 1"):
        T.ColorJitter(brightness=(0.5, 1.2))
    with pytest.raises(TypeError, match="interpolation"):
        T.Resize(256, interpolation=T.InterpolationMode.BICUBIC)


def test_image_folder_attributes_as_torchvision(folder):
    ours = feeder.ImageFolder(folder)
    theirs = torchvision.datasets.ImageFolder(folder)
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.targets == theirs.targets
    assert ours.imgs == theirs.imgs
    assert len(ours) == len(theirs)
    img, target = ours[5]
    assert target == theirs[5][1]
    assert img.size == theirs[5][0].size


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_is_feeder_loader(folder, workers):
    """DataLoader over a native pipeline gives feeder.Loader's batches, for
    the seed it draws from the generator."""
    tf = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.TrivialAugmentWide()])
    dl = feeder.DataLoader(feeder.ImageFolder(folder, transform=tf), batch_size=8, shuffle=True,
                           num_workers=workers, generator=torch.Generator().manual_seed(4))
    ref = feeder.Loader(feeder.ImageFolder(folder), batch_size=8, shuffle=True,
                        num_workers=workers, seed=seed_of(4), pipeline="train", size=96,
                        flip_prob=0.5, augment=[("trivial", 31, 0, -1)], layout="NCHW")
    for epoch in range(2):
        got = list(dl)
        want = [(x.clone(), y.clone()) for x, y in ref]
        assert len(got) == len(want) == len(dl) == 8
        for (x, y), (wx, wy) in zip(got, want):
            assert isinstance(x, torch.Tensor) and x.dtype == torch.uint8
            assert x.shape[1:] == (3, 96, 96) and x.shape == wx.shape
            assert torch.equal(x, wx) and torch.equal(y, wy)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("normalize", [False, True])
def test_host_float_is_normalised_uint8(folder, dtype, normalize):
    """ToDtype / Normalize without device=: the uint8 batch through torch's
    own ops, bit for bit, and what torchvision's v2 transforms make of it."""
    base = [T.Resize(80), T.CenterCrop(64)]
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    tail = [T.ToDtype(dtype, scale=True)] + ([T.Normalize(mean, std)] if normalize else [])
    u8 = feeder.DataLoader(feeder.ImageFolder(folder, transform=T.Compose(base)), batch_size=16,
                           num_workers=2)
    fl = feeder.DataLoader(feeder.ImageFolder(folder, transform=T.Compose(base + tail)),
                           batch_size=16, num_workers=2)
    try:  # torchvision >= 0.16; Debian 12's 0.14 has no v2
        from torchvision.transforms import v2
        theirs = v2.Compose([v2.ToDtype(dtype, scale=True)] +
                            ([v2.Normalize(mean, std)] if normalize else []))
    except ImportError:
        theirs = None
    n = 0
    for (a, la), (b, lb) in zip(u8, fl):
        assert b.dtype == dtype and b.shape == a.shape and b.is_contiguous()
        want = a.to(dtype).div(255)
        if normalize:
            want = want.sub(torch.tensor(mean).view(1, 3, 1, 1).to(dtype)).div(
                torch.tensor(std).view(1, 3, 1, 1).to(dtype))
        assert torch.equal(b, want)
        tol = 1e-6 if dtype == torch.float32 else 2e-2
        assert theirs is None or torch.allclose(b.float(), theirs(a).float(), atol=tol, rtol=tol)
        assert torch.equal(la, lb)
        n += len(a)
    assert n == len(fl.dataset)


def test_host_float_blocks_go_back_when_the_last_view_dies():
    """Unpinned float batches come from convert.c's pool: a block is handed
    out again only once torch freed every view of it, and only for its size."""
    from feeder import _feeder

    def empty(*shape, kind=0):
        return torch.utils.dlpack.from_dlpack(_feeder.empty(*shape, kind))

    a = empty(2, 3, 4, 4)
    assert a.dtype == torch.float32 and a.shape == (2, 3, 4, 4) and a.is_contiguous()
    a.fill_(7.0)
    at, view = a.data_ptr(), a[:, 1]
    del a
    b = empty(2, 3, 4, 4)  # the view still holds the first block
    assert b.data_ptr() != at and torch.equal(view, torch.full((2, 4, 4), 7.0))
    del view
    assert empty(2, 3, 4, 5).data_ptr() != at  # another size: a block of its own
    c = empty(2, 3, 4, 4)
    assert c.data_ptr() == at
    assert empty(1, 1, 2, 2, kind=1).dtype == torch.float16
    assert empty(1, 1, 2, 2, kind=2).dtype == torch.bfloat16
    for bad in ((0, 3, 4, 4, 0), (1, 3, 4, 4, 3), (1 << 62, 4, 4, 4, 0)):
        with pytest.raises(ValueError, match="empty: shape"):
            _feeder.empty(*bad)
    del b, c


def test_host_float_table_covers_every_value():
    """The per-channel table convert.c looks pixels up in, against the ops on
    all 256 values laid out as a batch (planes of 1, 3 channels)."""
    from feeder._dataloader import _float_table, _host_float
    plan = T.compile(T.Compose([T.Resize((4, 4)), T.ToDtype(torch.float32, scale=True),
                                T.Normalize([0.1, 0.5, 0.9], [0.3, 0.7, 1.1])]))
    x = torch.arange(256, dtype=torch.uint8).repeat(2, 3, 1).view(2, 3, 16, 16)
    got = _host_float(x, _float_table(plan), False)
    want = x.float().div(255).sub(torch.tensor([0.1, 0.5, 0.9]).view(1, 3, 1, 1)).div(
        torch.tensor([0.3, 0.7, 1.1]).view(1, 3, 1, 1))
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="3 means and stds for batches of 1 channels"):
        _host_float(x[:, :1].contiguous(), _float_table(plan), False)


@pytest.mark.parametrize("threads", [1, 2, 3, 5, 8])
def test_host_float_lookup_threads_split_the_planes(threads):
    """convert.c's lookup over 1-8 threads: every plane written once, with
    its own channel's row, also with fewer planes than threads."""
    from feeder import _feeder
    table = torch.arange(3 * 256, dtype=torch.float32).view(3, 256)
    for n in (1, 7):
        x = torch.randint(0, 256, (n, 3, 5, 7), dtype=torch.uint8)
        out = torch.full(x.shape, -1.0)
        _feeder.lookup(x.data_ptr(), out.data_ptr(), n, 3, 35, table.data_ptr(), 3, 4, threads)
        want = x.long() + torch.tensor([0, 256, 512]).view(1, 3, 1, 1)
        assert torch.equal(out, want.float())
    for bad in (0, 9):
        with pytest.raises(ValueError, match="threads"):
            _feeder.lookup(x.data_ptr(), out.data_ptr(), n, 3, 35, table.data_ptr(), 3, 4, bad)


def test_eval_close_to_torchvision(folder):
    """Same files, same order and labels as torchvision's ImageFolder with
    the same transform; pixels close (another decoder and resampler)."""
    tv = torchvision.transforms
    theirs = torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(
        folder, transform=tv.Compose([tv.Resize(128), tv.CenterCrop(112), tv.PILToTensor()])),
        batch_size=20)
    ours = feeder.DataLoader(feeder.ImageFolder(folder, transform=T.Compose([
        T.Resize(128), T.CenterCrop(112)])), batch_size=20, num_workers=2)
    for (a, la), (b, lb) in zip(ours, theirs):
        assert torch.equal(la, lb)
        assert a.shape == b.shape
        assert (a.float() - b.float()).abs().mean() < 3.0


@pytest.mark.parametrize("workers", [0, 2])
def test_distributed_sampler_as_torch(folder, workers):
    """One loader per rank with torch's DistributedSampler: every rank's
    batches hold the samples torch's DataLoader gives that rank, batch by
    batch, for two epochs (set_epoch on the sampler); the ranks' shares are
    disjoint but for torch's padding, and cover the 60 images (63 for 7 ranks)."""
    tv = torchvision.transforms
    theirs_ds = torchvision.datasets.ImageFolder(folder, transform=tv.Compose([
        tv.Resize(80), tv.CenterCrop(64), tv.PILToTensor()]))
    ours_ds = feeder.ImageFolder(folder, transform=T.Compose([T.Resize(80), T.CenterCrop(64)]))
    plain = feeder.Loader(feeder.ImageFolder(folder), batch_size=1, size=64, resize=80,
                          layout="NCHW")
    by_index = [x[0].clone() for x, _ in plain]  # each sample alone, in file order
    for epoch in range(2):
        seen = []
        for rank in range(7):
            samplers = [torch.utils.data.DistributedSampler(d, num_replicas=7, rank=rank,
                                                            shuffle=True, seed=7)
                        for d in (theirs_ds, ours_ds)]
            for s in samplers:
                s.set_epoch(epoch)
            order = list(samplers[0])
            theirs = torch.utils.data.DataLoader(theirs_ds, batch_size=4, sampler=samplers[0])
            ours = feeder.DataLoader(ours_ds, batch_size=4, sampler=samplers[1],
                                     num_workers=workers)
            got = list(ours)
            assert len(got) == len(ours) == len(theirs) == 3  # 9 samples: 4, 4, 1
            pos = 0
            for (x, y), (_, ty) in zip(got, theirs):
                assert torch.equal(y, ty)
                for k in range(len(y)):  # the pixels of the sampler's index
                    assert torch.equal(x[k], by_index[order[pos + k]])
                pos += len(y)
            assert pos == 9
            seen += order
        assert sorted(set(seen)) == list(range(60)) and len(seen) == 63


def test_sampler_next_epoch_begun_early(folder, monkeypatch):
    """With persistent workers, a DistributedSampler's next epoch is drawn as
    this one begins (a copy set to the next epoch) and begun in the slots the
    ending epoch frees; the batches are kept only when iter() then draws the
    same order. Set or not, every epoch's labels are torch's DataLoader's."""
    ds = feeder.ImageFolder(folder)
    calls = []
    real_iter = torch.utils.data.DistributedSampler.__iter__

    def counted(s):
        calls.append(s.epoch)
        return real_iter(s)

    monkeypatch.setattr(torch.utils.data.DistributedSampler, "__iter__", counted)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    ld = feeder.Loader(ds, batch_size=4, sampler=sampler, num_workers=2, persistent_workers=True,
                       size=32, resize=40)
    ahead = 0
    for epoch, set_it in ((0, True), (1, True), (2, True), (2, False), (5, True)):
        if set_it:
            sampler.set_epoch(epoch)
        calls.clear()
        labels = [int(v) for _, y in ld for v in y]
        assert calls == [epoch, epoch + 1]  # drawn, then the next one guessed
        calls.clear()
        want = [ds.targets[i] for i in sampler]
        assert labels == want
        now = ld.stats()["batches_ahead"]
        if epoch in (1, 2) and set_it:  # the guess was right: its batches were kept
            assert now > ahead
        ahead = now
    # A subclass may draw its order any way: never guessed.

    class Mine(torch.utils.data.DistributedSampler):
        pass

    mine = Mine(ds, num_replicas=2, rank=0, shuffle=True, seed=3)
    ld = feeder.Loader(ds, batch_size=4, sampler=mine, num_workers=2, persistent_workers=True,
                       size=32, resize=40)
    for epoch in range(2):
        mine.set_epoch(epoch)
        calls.clear()
        assert [int(v) for _, y in ld for v in y] == [ds.targets[i] for i in list(mine)]
        assert calls[:1] == [epoch] and len(calls) == 2  # iter(), and the list() above
    assert ld.stats()["batches_ahead"] == 0


def test_loader_sampler_argument(folder):
    ds = feeder.ImageFolder(folder)
    ld = feeder.Loader(ds, batch_size=4, sampler=[5, 3, 59, 0, 5], size=32, resize=40)
    assert len(ld) == 2
    labels = [int(v) for _, y in ld for v in y]
    assert labels == [ds.targets[i] for i in (5, 3, 59, 0, 5)]
    # Drawn anew each epoch, as torch's iterator does: a list changed between epochs counts.
    order = [1, 2]
    ld = feeder.Loader(ds, batch_size=4, sampler=order, size=32, resize=40)
    assert [int(v) for _, y in ld for v in y] == [ds.targets[1], ds.targets[2]]
    order.append(40)
    assert [int(v) for _, y in ld for v in y] == [ds.targets[i] for i in (1, 2, 40)]
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        feeder.Loader(ds, sampler=[1], shuffle=True)
    with pytest.raises(TypeError, match="iterable of dataset indices"):
        feeder.Loader(ds, sampler=5)
    with pytest.raises(IndexError, match="index 60 at position 1 .*0 <= i < 60"):
        list(feeder.Loader(ds, sampler=[0, 60], size=32, resize=40))
    with pytest.raises(IndexError, match="index 'a' at position 0"):
        list(feeder.Loader(ds, sampler=["a"], size=32, resize=40))


def test_loader_batch_sampler_argument(folder):
    """Loader(batch_sampler=): the batches as given (an empty one too), drawn
    anew each epoch; batch_size is the slots' room, taken from the batch
    sampler when it has one; every refusal names what is wrong."""
    ds = feeder.ImageFolder(folder)
    batches = [[5, 3, 59], [], [0], [7, 7, 1, 2]]
    ld = feeder.Loader(ds, batch_sampler=batches, batch_size=4, num_workers=2, size=32,
                       resize=40)
    assert len(ld) == 4
    got = [[int(v) for v in y] for _, y in ld]
    assert got == [[ds.targets[i] for i in b] for b in batches]
    batches.append([9])
    assert [len(y) for _, y in ld] == [3, 0, 1, 4, 1]
    bs = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(60)), 7, False)
    ld = feeder.Loader(ds, batch_sampler=bs, size=32, resize=40)  # batch_size from bs: 7
    assert [len(y) for _, y in ld] == [7] * 8 + [4]
    with pytest.raises(ValueError, match="mutually exclusive with shuffle, sampler, and "
                       "drop_last"):
        feeder.Loader(ds, batch_sampler=bs, drop_last=True)
    with pytest.raises(ValueError, match="batch_sampler: give batch_size"):
        feeder.Loader(ds, batch_sampler=[[1]])

    class Flagged(list):
        batch_size = True  # a bool is no batch size, as in the DataLoader's check

    with pytest.raises(ValueError, match="batch_sampler: give batch_size"):
        feeder.Loader(ds, batch_sampler=Flagged([[1]]))
    with pytest.raises(TypeError, match="iterable of batches of dataset indices"):
        feeder.Loader(ds, batch_sampler=5, batch_size=2)
    with pytest.raises(IndexError, match="index 60 at position 1 of batch 1 .*0 <= i < 60"):
        list(feeder.Loader(ds, batch_sampler=[[0], [1, 60]], batch_size=2, size=32))
    with pytest.raises(TypeError, match="batch 0 is <class 'int'>, not a sequence"):
        list(feeder.Loader(ds, batch_sampler=[3], batch_size=2, size=32))
    with pytest.raises(feeder.OptionError, match="batch 1 of epoch 0 has 3 indices; the slots "
                       "hold at most batch_size = 2"):
        list(feeder.Loader(ds, batch_sampler=[[0], [1, 2, 3]], batch_size=2, size=32))
    with pytest.raises(feeder.OptionError, match="a batch sampler .* has no resume state"):
        feeder.Loader(ds, batch_sampler=[[1]], batch_size=2).state_dict()


def test_native_dataloader_batch_sampler_as_torch(folder):
    """feeder.DataLoader(ImageFolder, batch_sampler=torch's BatchSampler over a
    seeded RandomSampler): torch's batches, index for index, over two epochs
    with persistent workers, each image the one the loader makes alone."""
    tf = T.Compose([T.Resize(40), T.CenterCrop(32)])
    ds = feeder.ImageFolder(folder, transform=tf)
    ref = [x[0].clone() for x, _ in feeder.DataLoader(ds, batch_size=1)]

    def sampler():
        g = torch.Generator().manual_seed(11)
        return torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(60),
                                                                            generator=g), 8, False)

    want = sampler()
    dl = feeder.DataLoader(ds, batch_sampler=sampler(), num_workers=2, persistent_workers=True)
    assert len(dl) == 8
    for _ in range(2):
        order = list(want)
        got = list(dl)
        assert [len(y) for _, y in got] == [len(b) for b in order]
        for (x, y), b in zip(got, order):
            assert [int(v) for v in y] == [ds.targets[i] for i in b]
            assert all(torch.equal(x[k], ref[i]) for k, i in enumerate(b))


def test_sampler_resume_mid_epoch(folder):
    """state_dict() mid-epoch with a DistributedSampler, loaded into a new
    Loader with the same sampler: the rest of the epoch, batch for batch."""
    ds = feeder.ImageFolder(folder)
    s = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    s.set_epoch(4)
    make = lambda: feeder.Loader(ds, batch_size=4, sampler=s, size=32, resize=40,
                                 num_workers=2)
    ld = make()
    it = iter(ld)
    first = [next(it)[1].clone() for _ in range(3)]
    sd = ld.state_dict()
    rest = [y.clone() for _, y in it]
    assert len(first) + len(rest) == 8
    again = make()
    again.load_state_dict(sd)
    rest2 = [y.clone() for _, y in again]
    assert len(rest2) == len(rest) and all(torch.equal(a, b) for a, b in zip(rest, rest2))


def test_timeout_inf_waits_forever(folder):
    """timeout=inf is accepted on the native path as with a Python dataset
    (no deadline); feeder.Loader itself names 0 for that."""
    ds = feeder.ImageFolder(folder, transform=T.Compose([T.Resize(40), T.CenterCrop(32)]))
    assert len(list(feeder.DataLoader(ds, batch_size=8, timeout=float("inf")))) == 8
    with pytest.raises(feeder.OptionError, match="0: wait forever"):
        feeder.Loader(feeder.ImageFolder(folder), timeout=float("inf"))


def test_native_refusals(folder):
    ds = feeder.ImageFolder(folder, transform=T.RandomResizedCrop(64))
    with pytest.raises(ValueError, match="batch_sampler= with ImageFolder.*needs an int "
                       "batch_size attribute.*got batch_size=None"):
        feeder.DataLoader(ds, batch_sampler=[[1, 2, 3]])
    with pytest.raises(ValueError, match="collate_fn= with ImageFolder"):
        feeder.DataLoader(ds, collate_fn=lambda b: b)
    with pytest.raises(TypeError, match="feeder's own arguments"):
        feeder.DataLoader([1, 2, 3], decoder="roi")
    with pytest.raises(ValueError, match="target_transform"):
        feeder.DataLoader(feeder.ImageFolder(folder, transform=T.RandomResizedCrop(64),
                                             target_transform=str))


def test_loader_seed_none_draws_and_augment_steps_checked(folder):
    # seed=None is "not given": a seed drawn from the system, as when it is left out.
    a = feeder.Loader(feeder.ImageFolder(folder), seed=None, size=64, resize=80)
    b = feeder.Loader(feeder.ImageFolder(folder), seed=None, size=64, resize=80)
    ia = [int(x) for _, y in a for x in y]
    assert sorted(ia) == sorted(int(x) for _, y in b for x in y)
    with pytest.raises(feeder.OptionError, match="no step named 'sharpen'"):
        feeder.Loader(feeder.ImageFolder(folder), augment=[("sharpen", 1.0)])
    with pytest.raises(feeder.OptionError, match="augment step 'color_jitter'"):
        feeder.Loader(feeder.ImageFolder(folder), augment=[("color_jitter", -1.0, 0.0, 0.0, 0.0)])


def test_migrate_example_runs_both_loaders_alike():
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "examples", "python", "migrate.py")
    r = subprocess.run([sys.executable, script, "--epochs", "1", "--workers", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the same batches, step by step" in r.stdout
