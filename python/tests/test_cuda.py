"""Device batches (run on the GPU machine; skipped without CUDA)."""
import pytest
import torch

import feeder

pytestmark = pytest.mark.skipif(
    not (feeder.cuda and torch.cuda.is_available()),
    reason="needs a CUDA build of the module and a GPU (feeder.cuda=%s)" % feeder.cuda)


def test_device_uint8_equals_host(dataset):
    host = [x.clone() for x, _ in feeder.Loader(dataset, batch_size=8, num_workers=2)]
    ld = feeder.Loader(dataset, batch_size=8, num_workers=2, device="cuda:0")
    dev = []
    for x, y in ld:
        assert x.is_cuda and y.is_cuda and x.dtype == torch.uint8
        assert x.data_ptr() == ld._last_batch["data_ptr"]
        dev.append(x.cpu())
    assert ld.gpu_status()[0]
    assert all(torch.equal(a, b) for a, b in zip(host, dev))


def test_gpu_prefetch_holds_that_many_batches(dataset):
    """gpu_prefetch=4: the two batches before the current one stay alive in
    their own device buffers while the loader goes on (the fourth buffer
    takes the next batch), unchanged."""
    host = [x.clone() for x, _ in feeder.Loader(dataset, batch_size=8, num_workers=2)]
    ld = feeder.Loader(dataset, batch_size=8, num_workers=2, device="cuda:0", gpu_prefetch=4)
    held, n = [], 0
    for x, _ in ld:
        held = (held + [(n, x)])[-3:]
        assert len({t.data_ptr() for _, t in held}) == len(held)
        for k, t in held:
            assert torch.equal(t.cpu(), host[k])
        n += 1
    assert n == len(host) > 4


def test_device_float32_normalised_on_a_side_stream(dataset):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    host = [x.clone() for x, _ in feeder.Loader(dataset, batch_size=8, num_workers=2)]
    ld = feeder.Loader(dataset, batch_size=8, num_workers=2, device="cuda:0", dtype=torch.float32,
                       mean=mean, std=std)
    s = torch.cuda.Stream()
    m = torch.tensor(mean).view(1, 3, 1, 1)
    sd = torch.tensor(std).view(1, 3, 1, 1)
    with torch.cuda.stream(s):
        for i, (x, _) in enumerate(ld):
            assert x.dtype == torch.float32
            got = (x * 2).cpu()  # runs on s, after the batch's event
            want = (host[i].float() / 255 - m) / sd * 2
            assert torch.allclose(got, want, atol=1e-4)


def test_device_thousand_batches(dataset):
    ld = feeder.Loader(dataset, batch_size=4, num_workers=2, size=32, device="cuda:0",
                       dtype="float16")
    n = 0
    while n < 1000:
        for x, y in ld:
            n += 1
            if n == 1000:
                break
    torch.cuda.synchronize()
    del x, y
    assert ld._last_batch["outstanding"] == 0


def test_fields_batches_on_the_device(tmp_path):
    from test_fields import write_pack
    p = str(tmp_path / "f.pack")
    write_pack(p, 11)
    host = [{k: v.clone() for k, v in b.items()}
            for b in feeder.Loader(feeder.Packed(p), batch_size=4, num_workers=2, shuffle=True,
                                   seed=3)]
    ld = feeder.Loader(feeder.Packed(p), batch_size=4, num_workers=2, shuffle=True, seed=3,
                       device="cuda:0")
    dev = [{k: v.cpu() for k, v in b.items() if v.is_cuda or k.endswith("_lengths")}
           for b in ld]
    assert ld.gpu_status()[0]
    assert len(dev) == len(host) == 3
    for h, d in zip(host, dev):
        assert set(d) == set(h)
        assert all(torch.equal(h[k], d[k]) for k in h)


class _Squares(torch.utils.data.Dataset):
    """A Python dataset that never touches CUDA (what runs in the workers)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.full((3, 64, 64), float(i)), i


def test_dataloader_forks_after_cuda_is_initialised():
    """feeder.DataLoader forks its workers after this process made a CUDA
    context; workers that never touch CUDA are unaffected, and pin_memory
    gives pinned tensors, as torch's DataLoader does."""
    x = torch.ones(4, device="cuda") * 2  # a context in the parent
    loader = feeder.DataLoader(_Squares(), batch_size=8, num_workers=2, pin_memory=True,
                               persistent_workers=True)
    for _ in range(2):
        got = [(b.clone(), y) for b, y in loader]
        assert [y.tolist() for _, y in got] == [list(range(k, k + 8)) for k in range(0, 40, 8)]
        assert all(torch.equal(b, torch.stack([torch.full((3, 64, 64), float(i)) for i in y]))
                   for b, y in got)
    for b, y in loader:
        assert b.is_pinned() and y.is_pinned()
        assert torch.equal(b.cuda(non_blocking=True).sum(dim=(1, 2, 3)).cpu(),
                           torch.tensor([float(i) * 3 * 64 * 64 for i in y]))
    assert float(x.sum()) == 8.0


def test_native_dataloader_on_the_device(folder):
    """feeder.ImageFolder + feeder.transforms with device=: float batches made
    on the GPU equal the host's float batches."""
    from feeder import transforms as T
    tf = T.Compose([T.Resize(80), T.CenterCrop(64), T.ToDtype(torch.float32, scale=True),
                    T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])])
    host = list(feeder.DataLoader(feeder.ImageFolder(folder, transform=tf), batch_size=16))
    dev = list(feeder.DataLoader(feeder.ImageFolder(folder, transform=tf), batch_size=16,
                                 device="cuda:0"))
    assert len(host) == len(dev)
    for (a, la), (b, lb) in zip(host, dev):
        assert b.is_cuda and b.dtype == torch.float32
        assert torch.allclose(a, b.cpu(), atol=1e-5)
        assert torch.equal(la, lb.cpu())


@pytest.mark.parametrize("host_float", [False, True])
def test_native_dataloader_pin_memory(folder, host_float):
    """feeder.ImageFolder with pin_memory=True: every batch pinned and equal
    to the unpinned loader's, also while every batch is kept (the pinned copy
    lets each slot go), and a non_blocking copy to the GPU carries it whole;
    uint8 batches and host float ones (ToDtype + Normalize, no device=)."""
    from feeder import transforms as T
    tail = [T.ToDtype(torch.float32, scale=True), T.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])]
    tf = T.Compose([T.Resize(80), T.CenterCrop(64)] + (tail if host_float else []))

    def batches(**kw):
        dl = feeder.DataLoader(feeder.ImageFolder(folder, transform=tf), batch_size=4,
                               num_workers=2, prefetch_factor=2, **kw)
        return list(dl)

    plain = [(x.clone(), y.clone()) for x, y in batches()]
    kept = batches(pin_memory=True)  # more batches than the 4 slots, all alive
    assert len(kept) == len(plain) > 4
    for (a, la), (b, lb) in zip(plain, kept):
        assert b.is_pinned() and lb.is_pinned()
        assert torch.equal(a, b) and torch.equal(la, lb)
        assert torch.equal(b.cuda(non_blocking=True).cpu(), a)
