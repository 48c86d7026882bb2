"""channels=1: grayscale batches, against Pillow's own gray images."""
import os

import numpy as np
import pytest

import feeder

Image = pytest.importorskip("PIL.Image")

H, W = 48, 64


def picture(seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([x * 4, y * 5, 128 + (x * y) % 50], -1) + rng.integers(0, 60, (H, W, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def gray_folder(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("gray"))
    for c, ext in enumerate(["png", "webp", "jpg"]):
        os.makedirs(os.path.join(root, f"c{c}"))
        for i in range(3):
            img = Image.fromarray(picture(c * 10 + i))
            kw = {"lossless": True} if ext == "webp" else {"quality": 90} if ext == "jpg" else {}
            img.save(os.path.join(root, f"c{c}", f"{i}.{ext}"), **kw)
    return root


def pil_gray(path):
    img = Image.open(path)
    if img.format == "JPEG":
        img.draft("L", img.size)  # libjpeg's own gray decode: the Y channel
    return np.asarray(img.convert("L"))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("workers", [0, 2])
def test_gray_is_pillows(gray_folder, layout, workers):
    # "resize" to the image's own size is the identity: the bytes are the
    # decoder's gray image itself.
    ds = feeder.ImageFolder(gray_folder)
    ld = feeder.Loader(ds, batch_size=9, pipeline="resize", size=(H, W), layout=layout,
                       num_workers=workers, channels=1)
    x, y = next(iter(ld))
    assert x.shape == ((9, 1, H, W) if layout == "NCHW" else (9, H, W, 1))
    for k in range(9):
        want = pil_gray(ds.path(k))
        got = x[k].numpy().reshape(H, W)
        assert np.array_equal(got, want), (k, int(np.abs(got.astype(int) - want).max()))
    assert y.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_channels_bounds(gray_folder):
    ds = feeder.ImageFolder(gray_folder)
    for bad in (0, 2, 4):
        with pytest.raises(feeder.OptionError, match="channels"):
            feeder.Loader(ds, channels=bad)
