#!/usr/bin/env python3
"""PyTorch's DataLoader on the same files as bench_loader, timed the same way.

    python3 bench/compare_torch.py --data ~/.cache/feeder/default-2000 \
        --workers 0,1,2,4,8,15 --pipeline both --epochs 3 --json

The dataset is ImageFolder-style (one sub-folder per class, labels from the
sorted class names, every .jpg/.jpeg file in it recursively) or a list file of
"relative/path label" lines, as feeder reads them. Each image is decoded with
torchvision.io.decode_jpeg (PIL when torchvision.io cannot), then

    eval:  Resize(256, antialias=True) + CenterCrop(224)
    train: RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip()

on uint8 CHW tensors. With CUDA the loader pins memory and every batch is
copied to the GPU with non_blocking=True, as a training loop would.

Each epoch is timed from iter(loader) (which starts the workers:
persistent_workers=False) to the end of the loop, after a CUDA synchronize;
the first-batch time runs from iter(loader) until the first batch is held
(on the GPU, synchronized, when CUDA is present). Every epoch is reported,
and the median.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time

try:
    import torch
    import torchvision
    from torch.utils.data import DataLoader, Dataset
    from torchvision import transforms as T
except ImportError as e:  # run_figures.sh checks first; this is for people
    sys.exit(f"compare_torch.py: PyTorch and torchvision are needed: {e}")

JPEG_EXT = (".jpg", ".jpeg")


def folder_samples(root):
    """(path, label) pairs in feeder's order: by class, then by path."""
    # Byte order, as feeder's strcmp: encode before sorting.
    classes = sorted((e.name for e in os.scandir(root) if e.is_dir()), key=os.fsencode)
    if not classes:
        raise SystemExit(f"compare_torch.py: {root}: no class folders")
    samples = []
    for label, name in enumerate(classes):
        paths = []
        for dirpath, _dirs, files in os.walk(os.path.join(root, name), followlinks=True):
            for f in files:
                if f.lower().endswith(JPEG_EXT):
                    paths.append(os.path.join(dirpath, f))
        samples += [(p, label) for p in sorted(paths, key=os.fsencode)]
    if not samples:
        raise SystemExit(f"compare_torch.py: {root}: no .jpg/.jpeg files")
    return samples, classes


def list_samples(list_path):
    """(path, label) pairs from a list file, paths relative to its folder."""
    root = os.path.dirname(os.path.abspath(list_path))
    samples = []
    with open(list_path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rsplit(None, 1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise SystemExit(f"compare_torch.py: {list_path}:{n}: expected 'path label'")
            samples.append((os.path.join(root, parts[0]), int(parts[1])))
    if not samples:
        raise SystemExit(f"compare_torch.py: {list_path}: no samples")
    return samples, sorted({lab for _, lab in samples})


def torchvision_io_works(path):
    try:
        torchvision.io.decode_jpeg(torchvision.io.read_file(path))
        return True
    except Exception as e:  # old builds without libjpeg, or no image extension
        print(f"compare_torch.py: torchvision.io cannot decode ({e}); using PIL",
              file=sys.stderr)
        return False


class JpegDataset(Dataset):
    def __init__(self, samples, transform, use_tvio):
        self.samples = samples
        self.transform = transform
        self.use_tvio = use_tvio

    def __len__(self):
        return len(self.samples)

    def load(self, path):
        if self.use_tvio:
            try:
                return torchvision.io.decode_jpeg(
                    torchvision.io.read_file(path), mode=torchvision.io.ImageReadMode.RGB)
            except Exception:
                pass
        from PIL import Image
        from torchvision.transforms.functional import pil_to_tensor
        with Image.open(path) as im:
            return pil_to_tensor(im.convert("RGB"))

    def __getitem__(self, i):
        path, label = self.samples[i]
        return self.transform(self.load(path)), label


def make_transform(pipeline, size, resize):
    if pipeline == "eval":
        return T.Compose([T.Resize(resize, antialias=True), T.CenterCrop(size)])
    return T.Compose([T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip()])


def run(args, samples, use_tvio, pipeline, workers, cuda):
    ds = JpegDataset(samples, make_transform(pipeline, args.size, args.resize), use_tvio)
    shuffle = pipeline == "train" if args.shuffle is None else bool(args.shuffle)
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    kw = dict(batch_size=args.batch, shuffle=shuffle, num_workers=workers, pin_memory=cuda,
              persistent_workers=False, drop_last=False, generator=gen)
    if workers > 0:  # PyTorch rejects prefetch_factor without workers
        kw["prefetch_factor"] = args.prefetch
    loader = DataLoader(ds, **kw)
    epochs = []
    for e in range(args.epochs):
        images = 0
        first = None
        t0 = time.perf_counter()
        for x, y in loader:  # iter(loader) is here: it starts the workers
            if cuda:
                x = x.to("cuda", non_blocking=True)
                y = y.to("cuda", non_blocking=True)
            if first is None:
                if cuda:
                    torch.cuda.synchronize()
                first = time.perf_counter() - t0
            images += x.shape[0]
        if cuda:
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        rate = images / secs if secs > 0 else 0.0
        epochs.append(dict(images=images, seconds=round(secs, 6),
                           images_per_s=round(rate, 1),
                           first_batch_ms=round((first or 0.0) * 1e3, 3)))
        print(f"torch {pipeline:5s} workers {workers:2d}  epoch {e + 1}/{args.epochs}  "
              f"{rate:8.0f} images/s  first batch {(first or 0) * 1e3:7.1f} ms",
              file=sys.stderr)
        if images != len(ds):
            print(f"compare_torch.py: warning: epoch {e} delivered {images} images, "
                  f"the dataset has {len(ds)}", file=sys.stderr)
    return dict(pipeline=pipeline, workers=workers,
                median_images_per_s=round(statistics.median(
                    x["images_per_s"] for x in epochs), 1),
                median_first_batch_ms=round(statistics.median(
                    x["first_batch_ms"] for x in epochs), 2),
                epochs=epochs)


def parse_workers(s):
    try:
        ws = [int(x) for x in s.split(",") if x.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': expected a list such as 0,1,2,4")
    if not ws or any(w < 0 for w in ws):
        raise argparse.ArgumentTypeError(f"'{s}': expected a list such as 0,1,2,4")
    return ws


def positive(s):
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"'{s}': expected a positive integer")
    return v


def default_data():
    env = os.environ.get("FEEDER_DATA")
    if env:
        return env
    return os.path.join(os.path.expanduser("~"), ".cache", "feeder", "default-2000")


def table(res):
    head = ["pipeline", "workers", "images/s per epoch", "images/s (median)",
            "first batch ms"]
    rows = [[r["pipeline"], str(r["workers"]),
             " / ".join(f"{e['images_per_s']:.0f}" for e in r["epochs"]),
             f"{r['median_images_per_s']:.0f}", f"{r['median_first_batch_ms']:.1f}"]
            for r in res["runs"]]
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    right = [False, True, True, True, True]
    out = ["| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |",
           "| " + " | ".join(("-" * (w[i] - 1) + ":") if right[i] else "-" * w[i]
                             for i in range(len(head))) + " |"]
    for r in rows:
        out.append("| " + " | ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i])
                                     for i, c in enumerate(r)) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None,
                    help="image folder or list file (default: $FEEDER_DATA or "
                         "~/.cache/feeder/default-2000, made by bench_loader)")
    ap.add_argument("--batch", type=positive, default=256)
    ap.add_argument("--workers", type=parse_workers, default=[4],
                    help="comma-separated worker counts, e.g. 0,1,2,4,8,15 (4)")
    ap.add_argument("--prefetch", type=positive, default=2,
                    help="prefetch_factor, used only when workers > 0 (2)")
    ap.add_argument("--epochs", type=positive, default=3)
    ap.add_argument("--pipeline", choices=["eval", "train", "both"], default="eval")
    ap.add_argument("--size", type=positive, default=224)
    ap.add_argument("--resize", type=positive, default=None,
                    help="eval: shorter side before the crop (size*256/224)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shuffle", type=int, choices=[0, 1], default=None,
                    help="default: 1 for train, 0 for eval (as bench_loader)")
    ap.add_argument("--no-cuda", action="store_true", help="do not pin or copy to the GPU")
    ap.add_argument("--pil", action="store_true",
                    help="decode with PIL even where torchvision.io works")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    args = ap.parse_args()
    if args.resize is None:
        args.resize = (args.size * 256 + 112) // 224
    data = args.data or default_data()
    if os.path.isdir(data):
        samples, classes = folder_samples(data)
    elif os.path.isfile(data):
        samples, classes = list_samples(data)
    else:
        ap.error(f"--data '{data}': no such folder or file")

    cuda = torch.cuda.is_available() and not args.no_cuda
    use_tvio = not args.pil and torchvision_io_works(samples[0][0])
    pipelines = ["eval", "train"] if args.pipeline == "both" else [args.pipeline]
    res = dict(tool="torch", torch=torch.__version__, torchvision=torchvision.__version__,
               python=platform.python_version(), host=socket.gethostname(),
               cores=os.cpu_count(), torch_threads=torch.get_num_threads(),
               decoder="torchvision.io.decode_jpeg" if use_tvio else "PIL",
               cuda=cuda, gpu=torch.cuda.get_device_name(0) if cuda else None,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               command=" ".join(["compare_torch.py"] + sys.argv[1:]),
               dataset=dict(path=data, images=len(samples), classes=len(classes)),
               config=dict(batch=args.batch, prefetch=args.prefetch, epochs=args.epochs,
                           size=args.size, resize=args.resize, seed=args.seed,
                           pin_memory=cuda, persistent_workers=False),
               runs=[])
    for p in pipelines:
        for w in args.workers:
            res["runs"].append(run(args, samples, use_tvio, p, w, cuda))
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        print()
    else:
        print(f"torch {res['torch']}, torchvision {res['torchvision']} on {res['host']} "
              f"({res['cores']} cores); decode: {res['decoder']}; "
              f"{'pin + H2D to ' + res['gpu'] if cuda else 'no CUDA'}; batch {args.batch}, "
              f"prefetch {args.prefetch}; {len(samples)} images in {data}")
        print(table(res))


if __name__ == "__main__":
    main()
