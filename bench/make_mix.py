#!/usr/bin/env python3
"""Make a realistic JPEG mix from the bundled photos (Pillow), for the GPU figures.

    python3 bench/make_mix.py PHOTOS OUT N [--imagenet] [--seed S]

Default mix (web-like, the set of issue 14's first report): short side 300-500 with 3 % of
large photos (1,200-2,400 px short side), quality 85-95; 3 % progressive, 2 % grayscale,
1 % CMYK, 30 % 4:4:4, 10 % 4:2:2, the rest 4:2:0. --imagenet: short side 400-800, quality
90-98, 70 % 4:4:4 (ImageNet-sized files). Ten classes (c00..c09). A pure function of
(photos, N, mode, seed); prints the mix it made. Pillow writes CMYK as Adobe-inverted CMYK.
"""
import argparse
import os
import random
from collections import Counter
from multiprocessing import Pool

from PIL import Image

A = None


def one(i):
    r = random.Random(A.seed * 1000003 + i)
    p = PHOTOS[i % len(PHOTOS)]
    if A.imagenet:
        short = r.randint(400, 800)
    else:
        short = r.randint(300, 500) if r.random() > 0.03 else r.randint(1200, 2400)
    w, h = p.size
    ar = r.uniform(0.75, 1.5)
    W, H = (int(short * ar), short) if r.random() < 0.7 else (short, int(short * ar))
    x0 = r.randint(0, max(0, w - W)) if w > W else 0
    y0 = r.randint(0, max(0, h - H)) if h > H else 0
    img = p.resize((W, H)) if (w < W or h < H) else p.crop((x0, y0, x0 + W, y0 + H))
    kind = r.random()
    q = r.randint(90, 98) if A.imagenet else r.randint(85, 95)
    d = os.path.join(A.out, "c%02d" % (i % 10))
    os.makedirs(d, exist_ok=True)
    f = os.path.join(d, "%06d.jpg" % i)
    if kind < 0.03:
        img.save(f, quality=q, progressive=True); k = "progressive"
    elif kind < 0.05:
        img.convert("L").save(f, quality=q); k = "gray"
    elif kind < 0.06:
        img.convert("CMYK").save(f, quality=q); k = "cmyk"
    elif kind < (0.76 if A.imagenet else 0.36):
        img.save(f, quality=q, subsampling=0); k = "4:4:4"
    elif kind < (0.86 if A.imagenet else 0.46):
        img.save(f, quality=q, subsampling=1); k = "4:2:2"
    else:
        img.save(f, quality=q, subsampling=2); k = "4:2:0"
    return k, os.path.getsize(f), short >= 1200


def main():
    global A, PHOTOS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photos")
    ap.add_argument("out")
    ap.add_argument("n", type=int)
    ap.add_argument("--imagenet", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    A = ap.parse_args()
    PHOTOS = [Image.open(os.path.join(A.photos, f)).convert("RGB")
              for f in sorted(os.listdir(A.photos)) if f.endswith(".jpg")]
    with Pool(os.cpu_count()) as pool:
        res = pool.map(one, range(A.n), chunksize=64)
    kinds = Counter(k for k, _, _ in res)
    mean = sum(b for _, b, _ in res) / len(res)
    large = sum(1 for _, _, l in res if l)
    print("made %d JPEGs in %s (%s): %s; %d large; mean %.1f KB" % (
        A.n, A.out, "imagenet-sized" if A.imagenet else "web-like",
        ", ".join("%s %d" % kv for kv in sorted(kinds.items())), large, mean / 1000))


if __name__ == "__main__":
    main()
