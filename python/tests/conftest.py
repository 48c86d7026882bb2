"""Shared fixtures: small JPEG datasets made with Pillow (Debian's python3-pil,
which python3-torchvision depends on), and the C library through ctypes for
comparisons that do not go through the binding."""
import ctypes
import os

import numpy as np
import pytest

import feeder

Image = pytest.importorskip("PIL.Image")


def make_folder(root, classes=3, per_class=20, seed=0):
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = os.path.join(root, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            h, w = (int(v) for v in rng.integers(160, 360, 2))
            y, x = np.mgrid[0:h, 0:w]
            img = np.stack([x * 255 // w, y * 255 // h, np.full((h, w), c * 80)], -1)
            img = (img + rng.integers(0, 50, img.shape)).astype(np.uint8)
            Image.fromarray(img).save(os.path.join(d, f"img_{i:04d}.jpg"), quality=90)
    return root


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    return make_folder(str(tmp_path_factory.mktemp("folder")))


@pytest.fixture(scope="session")
def dataset(folder):
    return feeder.ImageFolder(folder)


class Batch(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.POINTER(ctypes.c_uint8)),
        ("labels", ctypes.POINTER(ctypes.c_int64)),
        ("indices", ctypes.POINTER(ctypes.c_uint64)),
        ("count", ctypes.c_uint32),
        ("height", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("channels", ctypes.c_uint32),
        ("layout", ctypes.c_int),
        ("skipped", ctypes.c_uint32),
        ("sample_bytes", ctypes.c_size_t),
        ("epoch", ctypes.c_uint64),
        ("number", ctypes.c_uint64),
        ("device_data", ctypes.c_void_p),
        ("ready_event", ctypes.c_void_p),
        ("device_labels", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("device_bytes", ctypes.c_size_t),
        ("mix", ctypes.c_void_p),
        ("reserved_", ctypes.c_uint64 * 2),
        ("internal_", ctypes.c_void_p),
    ]


def libfeeder():
    """The libfeeder the binding loaded (found in /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "/libfeeder.so" in path:
                lib = ctypes.CDLL(path)
                lib.feeder_next.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(Batch))]
                lib.feeder_batch_release.argtypes = [ctypes.POINTER(Batch), ctypes.c_void_p]
                lib.feeder_loader_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
                lib.feeder_loader_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                     ctypes.POINTER(ctypes.c_void_p)]
                lib.feeder_loader_destroy.argtypes = [ctypes.c_void_p]
                lib.feeder_loader_set_epoch.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
                lib.feeder_dataset_open_folder.argtypes = [ctypes.c_char_p,
                                                           ctypes.POINTER(ctypes.c_void_p),
                                                           ctypes.c_char_p, ctypes.c_size_t]
                lib.feeder_dataset_destroy.argtypes = [ctypes.c_void_p]
                return lib
    pytest.skip("libfeeder.so is not mapped")


# include/feeder.h's numbers
OPT = dict(batch_size=1, shuffle=2, seed=3, drop_last=4, num_workers=5, prefetch_factor=6,
           pipeline=10, height=11, width=12, resize=13, layout=14)


def c_batches(root, epoch=0, **opts):
    """(bytes, labels) of every batch of one epoch, read through the C API
    with ctypes: the reference the binding's batches must equal."""
    lib = libfeeder()
    ds = ctypes.c_void_p()
    err = ctypes.create_string_buffer(512)
    assert lib.feeder_dataset_open_folder(root.encode(), ctypes.byref(ds), err, 512) == 0, err.value
    ld = ctypes.c_void_p()
    assert lib.feeder_loader_create(ds, None, ctypes.byref(ld)) == 0
    for k, v in opts.items():
        assert lib.feeder_loader_set(ld, OPT[k], v) == 0, k
    assert lib.feeder_loader_set_epoch(ld, epoch) == 0
    out = []
    b = ctypes.POINTER(Batch)()
    while True:
        rc = lib.feeder_next(ld, ctypes.byref(b))
        if rc == 1:
            break
        assert rc == 0, rc
        bb = b.contents
        n = bb.count * bb.sample_bytes
        out.append((ctypes.string_at(bb.data, n),
                    [bb.labels[i] for i in range(bb.count)]))
        lib.feeder_batch_release(b, None)
    lib.feeder_loader_destroy(ld)
    lib.feeder_dataset_destroy(ds)
    return out
