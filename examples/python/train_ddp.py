#!/usr/bin/env python3
"""Data-parallel training under torchrun with one feeder loader per rank.

Each rank opens the image folder, takes torch's DistributedSampler (its share
of every epoch, set_epoch as usual) and a feeder.Loader that delivers float32
NCHW batches normalised on the rank's GPU (uint8 host batches without a GPU). --model none only consumes the
batches (the loader is the bound); --model small trains a small convolutional
network under DistributedDataParallel (NCCL). Every batch's labels are checked
against the dataset's labels at the sampler's indices (with --in-order 0, each
epoch's labels as a whole), and at the end the
ranks' shares of the last epoch are gathered and checked: disjoint (but for
DistributedSampler's padding) and covering the dataset.

    torchrun --standalone --nproc_per_node 2 examples/python/train_ddp.py \
        --data DIR --workers 7 --decoder roi --model small --epochs 4 --json out.json

Rank 0 prints a line per epoch and, with --json, writes every rank's images/s
(median of the epochs after the first) and the checks.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

_here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.append(os.path.abspath(_here))  # after PYTHONPATH: an installed or built module wins
import feeder  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def small_model(classes):
    c = torch.nn.Conv2d
    return torch.nn.Sequential(
        c(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(inplace=True),
        c(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(inplace=True),
        c(64, 128, 3, stride=2, padding=1), torch.nn.ReLU(inplace=True),
        c(128, 128, 3, stride=2, padding=1), torch.nn.ReLU(inplace=True),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, classes))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="an image folder (class sub-folders); required")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=256, help="per rank")
    p.add_argument("--workers", type=int, default=7, help="per rank")
    p.add_argument("--prefetch-factor", type=int, default=2, help="batches in flight per worker")
    p.add_argument("--gpu-prefetch", type=int, default=2, help="batches the device ring holds")
    p.add_argument("--in-order", type=int, default=1, choices=(0, 1),
                   help="0: batches as they are ready (each epoch's labels checked as a whole)")
    p.add_argument("--decoder", default="roi", help="feeder's decoder (roi, turbo, nvjpeg, hybrid)")
    p.add_argument("--pipeline", default="train", choices=("train", "eval"))
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--model", default="none", choices=("none", "small"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="rank 0 writes the figures and checks here")
    a = p.parse_args()
    if not a.data:  # checked here, so that an unknown option is named first
        p.error("the following arguments are required: --data")

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)

    ds = feeder.ImageFolder(a.data)
    sampler = torch.utils.data.DistributedSampler(ds, shuffle=True, seed=a.seed)
    gpu = dict(device=str(device), dtype=torch.float32, mean=MEAN, std=STD,
               gpu_prefetch=a.gpu_prefetch) if cuda else {}
    loader = feeder.Loader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                           prefetch_factor=a.prefetch_factor, persistent_workers=True,
                           in_order=bool(a.in_order),
                           pipeline=a.pipeline, size=a.size, decoder=a.decoder, seed=a.seed,
                           **gpu)
    targets = torch.tensor(ds.targets, device=device)
    classes = len(ds.classes)
    model = None
    if a.model == "small":
        torch.manual_seed(a.seed)
        net = small_model(len(ds.classes)).to(device)
        model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local] if cuda else None)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD).view(1, 3, 1, 1) * 255
    sink = torch.zeros((), device=device)
    wrong = torch.zeros((), dtype=torch.int64, device=device)

    rates, order = [], []
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        want = torch.tensor(order, device=device)
        pos, seen = 0, 0
        got = torch.zeros(classes, dtype=torch.int64, device=device)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for images, labels in loader:
            n = labels.shape[0]
            labels = labels.to(device, non_blocking=True)
            if not cuda:  # host batches are uint8: normalise here
                images = (images.float() - mean) / std
            if a.in_order:
                wrong += (labels != targets[want[pos:pos + n]]).sum()
            else:
                got += torch.bincount(labels, minlength=classes)
            if model is None:
                sink += images[:, 0, 0, 0].sum()  # touch the batch on the device
            else:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            pos += n
            seen += n
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if not a.in_order:  # the epoch's labels, as a whole, are the sampler's
            wrong += (got - torch.bincount(targets[want], minlength=classes)).abs().sum()
        if pos != len(order):
            raise SystemExit(f"rank {rank}: epoch {epoch} delivered {pos} samples, the sampler "
                             f"gave {len(order)}")
        rates.append(seen / dt)
        if rank == 0:
            print(f"epoch {epoch}: rank 0 {seen / dt:,.0f} images/s ({seen} in {dt:.2f} s)",
                  flush=True)

    # Every rank's share of the last epoch, and its rate.
    steady = statistics.median(rates[1:]) if len(rates) > 1 else rates[0]
    shares = [None] * world
    dist.all_gather_object(shares, {"rank": rank, "order": order, "rate": steady,
                                    "rates": rates, "wrong": int(wrong.item()),
                                    "ahead": loader.stats()["batches_ahead"]})
    if rank == 0:
        union = set()
        for s in shares:
            union.update(s["order"])
        total = sum(len(s["order"]) for s in shares)
        pad = total - len(ds)
        checks = {
            "labels_match_sampler": all(s["wrong"] == 0 for s in shares),
            "covers_dataset": union == set(range(len(ds))),
            "disjoint_but_padding": total - len(union) == pad and 0 <= pad < world,
        }
        per_rank = [round(s["rate"]) for s in sorted(shares, key=lambda s: s["rank"])]
        out = {"program": "train_ddp", "world_size": world, "model": a.model,
               "decoder": a.decoder, "pipeline": a.pipeline, "workers_per_rank": a.workers,
               "prefetch_factor": a.prefetch_factor, "gpu_prefetch": a.gpu_prefetch,
               "in_order": a.in_order,
               "batch": a.batch, "images": len(ds), "epochs": a.epochs,
               "device": torch.cuda.get_device_name(device) if cuda else "cpu",
               "images_per_s_per_rank": per_rank, "images_per_s_total": sum(per_rank),
               # batches each rank began before its epoch's iter() (the next epoch
               # run ahead from the sampler's guessed order, and kept)
               "batches_ahead_per_rank": [s["ahead"] for s in sorted(shares, key=lambda s: s["rank"])],
               "checks": checks}
        print(json.dumps(out), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        ok = all(checks.values())
    else:
        ok = True
    loader.close()
    dist.destroy_process_group()
    if not ok:
        raise SystemExit("train_ddp: a check failed (see the JSON line)")


if __name__ == "__main__":
    main()
