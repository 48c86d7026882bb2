#!/usr/bin/env python3
"""PyTorch at its strongest, in as few lines as a user would write it: the
reference that compare_torch.py's torch column must match within 5%.

    python3 bench/torch_reference.py DIR [--workers 4] [--pipeline eval|train]

DIR is an ImageFolder-style tree of JPEGs. torchvision.io.decode_jpeg on
read_file bytes (RGB), transforms.v2 on uint8 tensors, shuffled, persistent
workers, pin_memory and non_blocking copies when CUDA is there. Prints each
epoch's images/s on stderr and one JSON line on stdout: the epochs and the
median of the epochs after the first.
"""
import argparse, json, statistics, sys, time
import torch, torchvision
from torchvision.io import ImageReadMode, decode_jpeg, read_file
try:
    from torchvision.transforms import v2
except ImportError:  # torchvision < 0.15 (Debian 12's): v1's tensor transforms, the same ops
    import torchvision.transforms as v2

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("data")
ap.add_argument("--workers", type=int, default=4)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--prefetch", type=int, default=2)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--pipeline", choices=["eval", "train"], default="eval")
args = ap.parse_args()

tf = (v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)]) if args.pipeline == "eval"
      else v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]))


def load(path):
    try:
        return decode_jpeg(read_file(path), mode=ImageReadMode.RGB)
    except RuntimeError:  # CMYK on torchvision < 0.19: PIL, as compare_torch.py does
        from PIL import Image
        with Image.open(path) as im:
            return torchvision.transforms.functional.pil_to_tensor(im.convert("RGB"))


class Jpegs(torchvision.datasets.DatasetFolder):
    def __init__(self, root):
        super().__init__(root, loader=load, extensions=(".jpg", ".jpeg"), transform=tf)


cuda = torch.cuda.is_available()
loader = torch.utils.data.DataLoader(Jpegs(args.data), batch_size=args.batch, shuffle=True,
                                     num_workers=args.workers,
                                     prefetch_factor=args.prefetch if args.workers else None,
                                     persistent_workers=args.workers > 0, pin_memory=cuda)
rates = []
for epoch in range(args.epochs):
    t0, n = time.perf_counter(), 0
    for x, y in loader:
        if cuda:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        n += len(y)
    if cuda:
        torch.cuda.synchronize()
    rates.append(n / (time.perf_counter() - t0))
    print(f"torch_reference {args.pipeline} workers {args.workers} epoch {epoch + 1}: "
          f"{rates[-1]:.0f} images/s", file=sys.stderr)
print(json.dumps(dict(pipeline=args.pipeline, workers=args.workers, epochs=rates,
                      images_per_s=statistics.median(rates[1:] or rates))))
