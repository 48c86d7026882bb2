#!/usr/bin/env python3
"""feeder.DataLoader beside torch.utils.data.DataLoader, in one run, on the
same files and machine. Three questions, one case each:

  pil     A Python dataset that decodes with PIL and applies torchvision
          transforms (RandomResizedCrop 224, flip, ToTensor, Normalize): the
          same Python code under both loaders.
  small   A Python dataset of many small arrays and a dict per sample (512
          int32 tokens, a 512-byte mask, a str id): what moving a batch costs.
  native  feeder.ImageFolder + feeder.transforms (Resize 256, CenterCrop 224)
          through feeder.DataLoader, beside bench_loader running the same
          pipeline in C (shuffled, NCHW; compared with a feeder.DataLoader
          run without pin_memory, as bench_loader does not pin), and beside
          torch's DataLoader with the equivalent torchvision code at its
          strongest (torchvision.io.decode_jpeg + transforms.v2 on uint8
          tensors).
  float   native, ending in ToDtype(float32, scale=True) + Normalize (ImageNet's
          mean and std) without device=: float32 host batches, as the common
          training script asks for them; torch's side adds the same two v2
          transforms in its workers. "no pin" is the uint8 native loader
          without pin_memory (the float batches' ceiling).

Both loaders: shuffle, persistent workers, pin_memory, the same batch size
and worker count; each epoch's batches are touched and dropped (no compute);
the figure is the median of the epochs after the first. Prints a table and,
with --json, one JSON record; writes a file only with --append-to.

    python3 bench/bench_dataloader.py --data DIR [--workers 4,15] [--epochs 3]
        [--batch 64] [--cases pil,small,native,float] [--bench-loader build/bench/bench_loader]
        [--small-samples 100000] [--json] [--append-to FILE]
"""
import argparse
import datetime
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.utils.data as tud

import feeder
from feeder import transforms as FT


def images_in(root):
    exts = (".jpg", ".jpeg", ".png", ".webp", ".jfif")
    out = []
    for c, cls in enumerate(sorted(d for d in os.listdir(root)
                                   if os.path.isdir(os.path.join(root, d)))):
        for dp, _, fs in sorted(os.walk(os.path.join(root, cls))):
            out += [(os.path.join(dp, f), c) for f in sorted(fs) if f.lower().endswith(exts)]
    return out


class PilDataset(tud.Dataset):
    """The common user code: PIL decode + torchvision transforms."""

    def __init__(self, root):
        import torchvision.transforms as T
        self.items = images_in(root)
        self.tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                             T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from PIL import Image
        path, label = self.items[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.tf(img), label


class SmallDataset(tud.Dataset):
    """Many small arrays and a dict per sample."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"tokens": np.arange(i, i + 512, dtype=np.int32),
                "mask": np.ones(512, dtype=np.uint8),
                "id": f"doc-{i:08d}"}


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class TorchVisionIo(tud.Dataset):
    """PyTorch at its strongest on JPEGs: torchvision.io.decode_jpeg and
    transforms.v2 on uint8 tensors (Resize 256 antialiased, CenterCrop 224)."""

    def __init__(self, root, to_float=False):
        try:
            from torchvision.transforms import v2
        except ImportError:  # torchvision < 0.15: v1's tensor transforms, the same ops
            import torchvision.transforms as v2
        self.items = images_in(root)
        tail = []
        if to_float:
            tail = [v2.ToDtype(torch.float32, scale=True) if hasattr(v2, "ToDtype")
                    else v2.ConvertImageDtype(torch.float32), v2.Normalize(MEAN, STD)]
        self.tf = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)] + tail)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from torchvision.io import ImageReadMode, decode_jpeg, read_file
        path, label = self.items[i]
        try:
            img = decode_jpeg(read_file(path), mode=ImageReadMode.RGB)
        except RuntimeError:  # what decode_jpeg cannot (CMYK in older builds, PNG): PIL
            from PIL import Image
            from torchvision.transforms.functional import pil_to_tensor
            with Image.open(path) as im:
                img = pil_to_tensor(im.convert("RGB"))
        return self.tf(img), label


def count(batch):
    if isinstance(batch, dict):
        return len(batch["id"])
    return len(batch[0]) if isinstance(batch, (list, tuple)) else len(batch)


def epochs(loader, n):
    """images/s of each of n epochs."""
    rates = []
    for _ in range(n):
        t0 = time.perf_counter()
        seen = 0
        for b in loader:
            seen += count(b)
        rates.append(seen / (time.perf_counter() - t0))
    return rates


def steady(rates):
    return statistics.median(rates[1:]) if len(rates) > 1 else rates[0]


def loader_kw(a, workers):
    return dict(batch_size=a.batch, shuffle=True, num_workers=workers, persistent_workers=True,
                pin_memory=True, generator=torch.Generator().manual_seed(0))


def run_pair(a, make_ds, workers, what):
    row = {"case": what, "workers": workers}
    for name, cls in (("torch", tud.DataLoader), ("feeder", feeder.DataLoader)):
        loader = cls(make_ds(), **loader_kw(a, workers))
        rates = epochs(loader, a.epochs)
        row[name] = steady(rates)
        row[name + "_epochs"] = [round(r, 1) for r in rates]
        del loader
    row["ratio"] = row["feeder"] / row["torch"]
    return row


def bench_loader(a, workers):
    """bench_loader's steady images/s on the same folder and pipeline."""
    cmd = [a.bench_loader, "--data", a.data, "--workers", str(workers), "--batch", str(a.batch),
           "--epochs", str(a.epochs), "--persistent", "--pipeline", "eval", "--shuffle", "1",
           "--layout", "nchw", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rec = json.loads(out[out.index("{"):])
    return rec["runs"][0]["steady_images_per_s"], " ".join(cmd)


def run_native(a, workers, to_float=False):
    eval_tf = [FT.Resize(256), FT.CenterCrop(224)]
    tail = [FT.ToDtype(torch.float32, scale=True), FT.Normalize(MEAN, STD)] if to_float else []
    tf = FT.Compose(eval_tf + tail)
    loader = feeder.DataLoader(feeder.ImageFolder(a.data, transform=tf), **loader_kw(a, workers))
    rates = epochs(loader, a.epochs)
    del loader
    row = {"case": "float" if to_float else "native", "workers": workers, "feeder": steady(rates),
           "feeder_epochs": [round(r, 1) for r in rates]}
    tl = tud.DataLoader(TorchVisionIo(a.data, to_float), **loader_kw(a, workers))
    trates = epochs(tl, a.epochs)
    del tl
    row["torch"] = steady(trates)
    row["torch_epochs"] = [round(r, 1) for r in trates]
    row["ratio"] = row["feeder"] / row["torch"]
    if a.bench_loader:
        # The same pipeline as bench_loader's: shuffled NCHW uint8 host batches, no pinning.
        kw = dict(loader_kw(a, workers), pin_memory=False)
        loader = feeder.DataLoader(feeder.ImageFolder(a.data, transform=FT.Compose(eval_tf)),
                                   **kw)
        nopin = epochs(loader, a.epochs)
        del loader
        row["feeder_nopin"] = steady(nopin)
        row["feeder_nopin_epochs"] = [round(r, 1) for r in nopin]
        row["bench_loader"], row["bench_loader_cmd"] = bench_loader(a, workers)
        row["of_bench_loader"] = row["feeder_nopin"] / row["bench_loader"]
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="an image folder (one sub-folder per class)")
    p.add_argument("--workers", default="4", help="comma list (4,15)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--cases", default="pil,small,native")
    p.add_argument("--small-samples", type=int, default=100000)
    p.add_argument("--bench-loader", default="", help="bench_loader binary (native case)")
    p.add_argument("--label", default="", help="what the set is, for the record")
    p.add_argument("--json", action="store_true")
    p.add_argument("--append-to", default="")
    a = p.parse_args()
    if a.epochs < 2:
        p.error("--epochs: at least 2 (the first is the warm-up)")
    cases = a.cases.split(",")
    rows = []
    for w in [int(x) for x in a.workers.split(",")]:
        if "pil" in cases:
            rows.append(run_pair(a, lambda: PilDataset(a.data), w, "pil"))
        if "small" in cases:
            rows.append(run_pair(a, lambda: SmallDataset(a.small_samples), w, "small"))
        if "native" in cases:
            rows.append(run_native(a, w))
        if "float" in cases:
            rows.append(run_native(a, w, to_float=True))
    gpu = ""
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    rec = {"date": datetime.date.today().isoformat(), "machine": f"{gpu} {os.cpu_count()} cores".strip(),
           "set": a.label or a.data, "images": len(images_in(a.data)), "batch": a.batch,
           "epochs": a.epochs, "torch": torch.__version__, "python": platform.python_version(),
           "cmd": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "rows": rows}
    buf = io.StringIO()
    print(f"{'case':8} {'workers':>7} {'torch img/s':>12} {'feeder img/s':>13} {'ratio':>6} "
          f"{'no pin':>8} {'bench_loader':>12} {'of it':>6}", file=buf)
    for r in rows:
        bl = f"{r['feeder_nopin']:8.0f} {r['bench_loader']:12.0f} {100 * r['of_bench_loader']:5.1f}%" \
            if "bench_loader" in r else f"{'':8} {'':12} {'':6}"
        print(f"{r['case']:8} {r['workers']:7d} {r['torch']:12.0f} {r['feeder']:13.0f} "
              f"{r['ratio']:5.2f}x {bl}", file=buf)
    sys.stdout.write(buf.getvalue())
    if a.json:
        print(json.dumps(rec))
    if a.append_to:
        with open(a.append_to, "a") as f:
            f.write(f"\n### bench_dataloader, {rec['date']}, {rec['machine']}, {rec['set']}\n\n"
                    f"    {rec['cmd']}\n\n```\n{buf.getvalue()}```\n\n")
            f.write("```json\n" + json.dumps(rec) + "\n```\n")


if __name__ == "__main__":
    main()
