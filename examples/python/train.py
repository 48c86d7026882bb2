#!/usr/bin/env python3
"""Train a small torchvision model for a few hundred steps, fed by feeder and
then by torch's DataLoader (ImageFolder + the same transforms), and print
images/s for both and the loss curve. CPU by default; --device cuda:0 on a GPU
machine (feeder then delivers float32 NCHW batches already normalised on the
GPU; DataLoader's batches are pinned and copied).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train.py --steps 300
    PYTHONPATH=build/python python3 examples/python/train.py --device cuda:0 --workers 8 --batch 128

--data defaults to bench_loader's dataset (~/.cache/feeder/web-2000; run
build/bench/bench_loader once to make it). The model is torchvision's
resnet18 at --size 64 by default, small enough for a CPU run in minutes.
"""
import argparse
import os
import sys
import time

import torch
import torchvision
from torchvision import transforms

_here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.append(os.path.abspath(_here))  # after PYTHONPATH: an installed or built module wins
import feeder  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def batches_feeder(args, device):
    ds = feeder.ImageFolder(args.data)
    cuda = device.type == "cuda"
    ld = feeder.Loader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                       pipeline="train", size=args.size, seed=args.seed, drop_last=True,
                       persistent_workers=True, device=str(device) if cuda else None,
                       dtype=torch.float32 if cuda else None, mean=MEAN, std=STD)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD).view(1, 3, 1, 1) * 255
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        for images, labels in ld:
            if not cuda:  # uint8 NCHW in the slot: normalise on the CPU (a new tensor)
                images = (images.float() - mean) / std
            yield images, labels
        epoch += 1


def batches_torch(args, device):
    tf = transforms.Compose([transforms.RandomResizedCrop(args.size),
                             transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize(MEAN, STD)])
    ds = torchvision.datasets.ImageFolder(args.data, tf)
    cuda = device.type == "cuda"
    ld = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                     num_workers=args.workers, drop_last=True,
                                     persistent_workers=args.workers > 0, pin_memory=cuda)
    while True:
        for images, labels in ld:
            yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def train(name, batches, args, device, classes):
    torch.manual_seed(args.seed)
    model = torchvision.models.resnet18(num_classes=classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    losses = []
    it = batches(args, device)
    t0 = None
    seen = 0
    for step in range(args.steps):
        images, labels = next(it)
        if step == args.warmup:  # workers started, caches warm
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, seen = time.perf_counter(), 0
        loss = torch.nn.functional.cross_entropy(model(images), labels.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seen += labels.shape[0]
        losses.append(loss.item())
        del images, labels
        if (step + 1) % args.print_every == 0:
            print(f"  {name:<10} step {step + 1:4d}  loss {sum(losses[-args.print_every:]) / args.print_every:.4f}",
                  flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = seen / (time.perf_counter() - t0)
    it.close()
    return rate, losses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default=os.environ.get(
        "FEEDER_DATA", os.path.expanduser("~/.cache/feeder/web-2000")))
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10, help="steps not timed")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-every", type=int, default=25)
    p.add_argument("--only", choices=["feeder", "torch"], default=None)
    args = p.parse_args()
    device = torch.device(args.device)
    classes = len(feeder.ImageFolder(args.data).classes)
    print(f"resnet18, {classes} classes, batch {args.batch} at {args.size}x{args.size}, "
          f"{args.workers} workers, {args.steps} steps on {device}", flush=True)
    results = {}
    for name, fn in (("feeder", batches_feeder), ("DataLoader", batches_torch)):
        if args.only and args.only != ("feeder" if name == "feeder" else "torch"):
            continue
        results[name] = train(name, fn, args, device, classes)
    print()
    print("| loader | images/s (training) | first 25 steps' loss | last 25 steps' loss |")
    print("| --- | ---: | ---: | ---: |")
    for name, (rate, losses) in results.items():
        print(f"| {name} | {rate:.1f} | {sum(losses[:25]) / 25:.4f} | {sum(losses[-25:]) / 25:.4f} |")


if __name__ == "__main__":
    main()
