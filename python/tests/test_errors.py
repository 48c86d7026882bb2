"""Every bad input becomes an exception with feeder's message."""
import os
import signal
import time

import pytest

import feeder


def test_missing_folder():
    with pytest.raises(FileNotFoundError, match="/no/such/dir"):
        feeder.ImageFolder("/no/such/dir")


def test_empty_folder(tmp_path):
    with pytest.raises(feeder.DatasetError) as e:
        feeder.ImageFolder(str(tmp_path))
    assert e.value.code_name == "FEEDER_EDATASET"
    assert isinstance(e.value, ValueError)


def test_bad_list_lines(tmp_path, folder):
    lst = tmp_path / "list.txt"
    lst.write_text("class_0/img_0000.jpg 0\nclass_0/img_0001.jpg notalabel\n")
    with pytest.raises(feeder.DatasetError, match="list.txt:2"):
        feeder.FileList(str(lst), folder)
    lst.write_text("../../etc/passwd 0\n")
    with pytest.raises(feeder.DatasetError, match="FEEDER_EPATH"):
        feeder.FileList(str(lst), folder)


def test_not_a_packed_file(tmp_path):
    p = tmp_path / "x.pack"
    p.write_bytes(b"not a pack" * 100)
    with pytest.raises(feeder.DatasetError, match="FEEDER_EFORMAT"):
        feeder.Packed(str(p))


@pytest.mark.parametrize("kw, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(num_workers=-1), "num_workers"),
    (dict(pipeline="bogus"), "pipeline"),
    (dict(layout="HWC"), "layout"),
    (dict(decoder="png"), "decoder"),
    (dict(dtype="float32"), "needs device"),
    (dict(device="tpu:0"), "device"),
    (dict(size=(10, 20, 30)), "size"),
    (dict(mean=(0.5, 0.5)), "mean"),
    (dict(timeout=-1), "timeout"),
    (dict(timeout=float("nan")), "timeout=nan"),
    (dict(timeout=float("inf")), "timeout=inf"),
    (dict(scale=(-1.0, 1.0)), "scale"),
    (dict(max_pixels=-1), "max_pixels"),
    (dict(max_decode_bytes=-1), "max_decode_bytes"),
    (dict(max_side=-5), "max_side"),
    (dict(row_index_bytes=-1), "row_index_bytes"),
    (dict(gpu_prefetch=1), "gpu_prefetch"),
    (dict(gpu_prefetch=65), "gpu_prefetch"),
])
def test_bad_options(dataset, kw, match):
    with pytest.raises(ValueError, match=match):
        feeder.Loader(dataset, **kw)


def test_not_a_dataset():
    with pytest.raises(TypeError):
        feeder.Loader("/some/folder")


def test_corrupt_jpeg_names_the_file(tmp_path, folder):
    import shutil
    root = tmp_path / "bad"
    shutil.copytree(folder, root)
    bad = root / "class_1" / "img_0003.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    ld = feeder.Loader(feeder.ImageFolder(str(root)), batch_size=10, num_workers=2)
    it = iter(ld)
    ok = 0
    failed = []
    while True:
        try:
            next(it)
            ok += 1
        except StopIteration:
            break
        except feeder.SampleError as e:
            failed.append(str(e))
    assert ok == 5 and len(failed) == 1
    assert "img_0003.jpg" in failed[0]
    # on_error="skip" replaces it instead.
    ld = feeder.Loader(feeder.ImageFolder(str(root)), batch_size=10, on_error="skip")
    assert sum(x.shape[0] for x, _ in ld) == 60
    assert ld.stats()["skipped"] == 1
    # on_error="drop" leaves it out: one batch is a sample short.
    ld = feeder.Loader(feeder.ImageFolder(str(root)), batch_size=10, on_error="drop")
    assert sorted(x.shape[0] for x, _ in ld) == [9, 10, 10, 10, 10, 10]
    assert ld.stats()["dropped"] == 1


def test_image_limits(tmp_path, folder):
    """max_pixels, max_decode_bytes and max_side reach the decoders: an image
    over one fails its batch with the limit named; on_error="skip" replaces it."""
    import shutil
    root = tmp_path / "limits"
    shutil.copytree(folder, root)
    sizes = []
    from PIL import Image
    for p in sorted((root / "class_0").iterdir()):
        with Image.open(p) as im:
            sizes.append(im.size)
    big = max(w * h for w, h in sizes)
    cases = [(dict(max_pixels=big - 1), "over the limit of %d" % (big - 1)),
             (dict(max_side=100), "over the limit of 100 pixels a side"),
             (dict(max_decode_bytes=1000, decoder="turbo"), "over the limit of 1000 ")]
    for kw, match in cases:
        ld = feeder.Loader(feeder.ImageFolder(str(root)), batch_size=60, size=32, resize=40, **kw)
        with pytest.raises(feeder.SampleError, match=match):
            list(ld)
    ld = feeder.Loader(feeder.ImageFolder(str(root)), batch_size=60, size=32, resize=40,
                       max_pixels=big - 1, on_error="skip")
    assert [x.shape[0] for x, _ in ld] == [60] and ld.stats()["skipped"] >= 1
    # 0: no limit, as in C.
    ld = feeder.Loader(feeder.ImageFolder(str(root)), batch_size=60, size=32, resize=40,
                       max_pixels=0, max_side=0, max_decode_bytes=0)
    assert [x.shape[0] for x, _ in ld] == [60]


def test_state_errors(dataset):
    a = feeder.Loader(dataset, batch_size=8)
    next(iter(a))
    sd = a.state_dict()
    with pytest.raises(feeder.StateError, match="new Loader"):
        a.load_state_dict(sd)
    b = feeder.Loader(dataset, batch_size=16)
    with pytest.raises(feeder.StateError, match="batch"):
        b.load_state_dict(sd)
    c = feeder.Loader(dataset, batch_size=8)
    broken = dict(sd, feeder_state=sd["feeder_state"][:-3] + b"xyz")
    with pytest.raises(feeder.StateError):
        c.load_state_dict(broken)
    with pytest.raises(feeder.StateError):
        c.load_state_dict({"nope": 1})


def stalled(loader):
    """An iterator whose workers are stopped (SIGSTOP) after its first batch."""
    it = iter(loader)
    next(it)
    for pid in loader.worker_pids():
        os.kill(pid, signal.SIGSTOP)
    return it


def drain(it):
    """Take batches until the iterator raises, dropping each one at once: the
    worker may finish one more batch before its SIGSTOP lands, and a batch
    kept in a loop variable would hold the only slot (BusyError, not the
    error under test)."""
    while True:
        next(it)


def test_timeout(dataset):
    ld = feeder.Loader(dataset, batch_size=4, num_workers=1, prefetch_factor=1, timeout=0.5)
    it = stalled(ld)
    t = time.monotonic()
    with pytest.raises(feeder.LoaderTimeoutError, match="timeout=0.5"):
        drain(it)
    assert 0.4 < time.monotonic() - t < 3
    pids = ld.worker_pids()
    del it
    ld.close()  # kills the stopped worker
    assert ld.worker_pids() == []
    assert not any(os.path.exists(f"/proc/{p}/exe") for p in pids)


def test_worker_death(dataset):
    ld = feeder.Loader(dataset, batch_size=4, num_workers=1, prefetch_factor=1)
    it = stalled(ld)
    os.kill(ld.worker_pids()[0], signal.SIGKILL)
    with pytest.raises(feeder.WorkerError, match="worker 0"):
        drain(it)


def test_size_and_scale_pairs_named(dataset):
    """size is (height, width), scale and ratio are (min, max): each message
    says which pair it wanted."""
    with pytest.raises(feeder.OptionError,
                       match=r"^size=\(224,\): expected a pair \(height, width\) or an int$"):
        feeder.Loader(dataset, size=(224,))
    with pytest.raises(feeder.OptionError, match=r"^scale=\(0\.5,\): expected a pair \(min, max\)$"):
        feeder.Loader(dataset, scale=(0.5,))
