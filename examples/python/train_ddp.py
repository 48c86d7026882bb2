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
(median of the epochs after the first), the time each rank waited for its
loader (the share of the steady epochs spent in next(), and the median and 90th
percentile of one step's wait) and the checks.

--synthetic trains the same model on one batch made on the device, as many
steps as the sampler gives a rank, with no loader: the model's and the
collective's own rate, the ceiling a loader is measured against.
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


class Synthetic:
    """The loader's place with no loader: one batch of random float32 images
    made on the device, and the dataset's labels at the sampler's indices,
    for each step of the epoch."""

    def __init__(self, sampler, batch, size, targets, device):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(batch, 3, size, size, generator=g).to(device)
        self.sampler, self.batch, self.device = sampler, batch, device
        self.targets = torch.tensor(targets)

    def __iter__(self):
        order = list(self.sampler)
        for i in range(0, len(order), self.batch):
            idx = torch.tensor(order[i:i + self.batch])
            yield self.images[:len(idx)], self.targets[idx].to(self.device, non_blocking=True)

    def stats(self):
        return {"batches_ahead": 0}

    def close(self):
        pass


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
    p.add_argument("--synthetic", action="store_true",
                   help="no loader: one batch made on the device, every step (needs --model small)")
    p.add_argument("--json", help="rank 0 writes the figures and checks here")
    a = p.parse_args()
    if not a.data:  # checked here, so that an unknown option is named first
        p.error("the following arguments are required: --data")
    if a.synthetic and a.model != "small":
        p.error("--synthetic measures a model: it needs --model small")

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
    if a.synthetic:
        loader = Synthetic(sampler, a.batch, a.size, ds.targets, device)
    else:
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

    rates, waits, order = [], [], []
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
        it, step_waits = iter(loader), []
        while True:
            w0 = time.perf_counter()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            step_waits.append(time.perf_counter() - w0)
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
        waits.append((sum(step_waits) / dt, step_waits))
        if rank == 0:
            print(f"epoch {epoch}: rank 0 {seen / dt:,.0f} images/s ({seen} in {dt:.2f} s)",
                  flush=True)

    # Every rank's share of the last epoch, and its rate.
    steady = statistics.median(rates[1:] or rates)  # the epochs after the first
    later = waits[1:] or waits  # the same epochs
    steps = sorted(w for _, ws in later for w in ws)
    wait = {"share": round(statistics.median(sh for sh, _ in later), 4),
            "step_ms_p50": round(1e3 * steps[len(steps) // 2], 3) if steps else 0.0,
            "step_ms_p90": round(1e3 * steps[(len(steps) * 9) // 10], 3) if steps else 0.0}
    shares = [None] * world
    dist.all_gather_object(shares, {"rank": rank, "order": order, "rate": steady,
                                    "rates": rates, "wrong": int(wrong.item()), "wait": wait,
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
               "decoder": "synthetic" if a.synthetic else a.decoder, "pipeline": a.pipeline,
               "workers_per_rank": 0 if a.synthetic else a.workers,
               "prefetch_factor": a.prefetch_factor, "gpu_prefetch": a.gpu_prefetch,
               "in_order": a.in_order,
               "batch": a.batch, "images": len(ds), "epochs": a.epochs,
               "device": torch.cuda.get_device_name(device) if cuda else "cpu",
               "images_per_s_per_rank": per_rank, "images_per_s_total": sum(per_rank),
               # time in next() a rank waited for its batches, in the epochs after the first
               "loader_wait_per_rank": [s["wait"] for s in sorted(shares, key=lambda s: s["rank"])],
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
    # DDP's reducer before its process group: the other order can leave a
    # rank hanging in the reducer's destructor on exit (gloo, seen with torch 1.13).
    model = opt = loss = None  # noqa: F841
    dist.destroy_process_group()
    if not ok:
        raise SystemExit("train_ddp: a check failed (see the JSON line)")


if __name__ == "__main__":
    main()
