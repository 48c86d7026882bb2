#!/usr/bin/env python3
"""A mixed JPEG folder made by Pillow, apart from make_set: another encoder
(Pillow's libjpeg settings, optimised Huffman tables on half the files),
other shares and other sizes, so that a figure measured on make_set's sets
can be checked on files the project's generator never made.

    python3 bench/pillow_set.py --photos bench/photos OUT N [--seed S]

OUT/class_00..09 gets N files. The mix (its defaults are not make_set's):
4:2:0 half, 4:2:2 15 %, 4:4:4 35 %; 6 % progressive, 4 % gray, 1 % CMYK
(Adobe marker), 2 % with an EXIF orientation, 0.02 % PNGs named .jpg;
quality 60-100; short sides 300-600 (70 %), 600-1000 (20 %), 1000-1600
(7 %), 1600-3000 (3 %); photos cropped, flipped and brightened at random.
It prints the mix it made."""
import argparse
import io
import os
import random
import sys
from collections import Counter
from multiprocessing import Pool

from PIL import Image, ImageEnhance

SUB = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}


def short_side(r):
    u = r.random()
    lo, hi = (300, 600) if u < 0.70 else (600, 1000) if u < 0.90 else (1000, 1600) if u < 0.97 else (1600, 3000)
    return r.randint(lo, hi)


def cut(r, photos):
    """A photo cropped at a random place and aspect, scaled to a drawn short
    side, flipped half the time and brightened or darkened."""
    im = Image.open(photos[r.randrange(len(photos))]).convert("RGB")
    w, h = im.size
    area = r.uniform(0.15, 1.0) * w * h
    aspect = r.uniform(0.6, 1.7)
    cw = max(16, min(w, int((area * aspect) ** 0.5)))
    ch = max(16, min(h, int((area / aspect) ** 0.5)))
    x, y = r.randint(0, w - cw), r.randint(0, h - ch)
    im = im.crop((x, y, x + cw, y + ch))
    k = short_side(r) / min(cw, ch)
    im = im.resize((max(8, round(cw * k)), max(8, round(ch * k))), Image.BILINEAR)
    if r.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    return ImageEnhance.Brightness(im).enhance(r.uniform(0.7, 1.3))


def save(r, im, name):
    """im as a PNG (rarely) or a JPEG of a drawn kind, subsampling, quality,
    progression and Huffman tables; (kind, subsampling, progressive, bytes,
    short side)."""
    u = r.random()
    if u < 0.0002:
        im.save(name, "PNG")
        return ("png", "", False, os.path.getsize(name), min(im.size))
    mode = "gray" if u < 0.04 else "cmyk" if u < 0.05 else "rgb"
    im = im.convert({"gray": "L", "cmyk": "CMYK", "rgb": "RGB"}[mode])
    v = r.random()
    sub = 2 if v < 0.5 else 1 if v < 0.65 else 0
    prog = r.random() < 0.06
    kw = dict(quality=r.randint(60, 100), subsampling=sub, progressive=prog,
              optimize=r.random() < 0.5)
    if r.random() < 0.02:
        ex = Image.Exif()
        ex[0x0112] = r.choice([3, 6, 8])
        kw["exif"] = ex.tobytes()
    im.save(name, "JPEG", **kw)
    return (mode, SUB[sub] if mode == "rgb" else "", prog, os.path.getsize(name), min(im.size))


def one(job):
    """File i of the set: a pure function of (seed, i)."""
    i, seed, photos, out, classes = job
    r = random.Random(seed * 1_000_003 + i)
    im = cut(r, photos)
    return save(r, im, os.path.join(out, f"class_{i % classes:02d}", f"p{i:06d}.jpg"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("n", type=int)
    ap.add_argument("--photos", required=True, help="a folder of JPEG photos to crop from")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--classes", type=int, default=10)
    a = ap.parse_args()
    if a.n <= 0:
        sys.exit(f"pillow_set: N must be at least 1, not {a.n}")
    if not os.path.isdir(a.photos):
        sys.exit(f"pillow_set: --photos {a.photos}: no such folder")
    photos = sorted(os.path.join(a.photos, f) for f in os.listdir(a.photos)
                    if f.lower().endswith((".jpg", ".jpeg")))
    if not photos:
        sys.exit(f"pillow_set: no JPEG photos in {a.photos}")
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"class_{c:02d}"), exist_ok=True)
    with Pool() as p:
        made = p.map(one, [(i, a.seed, photos, a.out, a.classes) for i in range(a.n)], chunksize=64)
    kinds = Counter(m if m != "rgb" else s for m, s, _, _, _ in made)
    prog = sum(1 for m in made if m[2])
    large = sum(1 for m in made if m[4] >= 1600)
    mean_kb = sum(m[3] for m in made) / len(made) / 1000
    print(f"made {len(made)} files in {a.out}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
          + f"; progressive {prog}, short side >= 1600: {large}, mean {mean_kb:.1f} KB")


if __name__ == "__main__":
    main()
