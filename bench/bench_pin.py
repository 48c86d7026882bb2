#!/usr/bin/env python3
"""Ways of pinning feeder.DataLoader's batches, on one loader.

    python3 bench/bench_pin.py --data DIR [--workers 15] [--epochs 4]

One feeder.DataLoader (feeder.ImageFolder, Resize 256 + CenterCrop 224,
batches of 64, shuffled, persistent workers, pin_memory=False); the loop pins
each batch itself in each of these ways in turn, the epochs of each way one
after another:

    none          no pinning
    torch         torch's pin_memory on this thread, with the process's
                  intra-op threads (one a core by default)
    torch-1       the same with one intra-op thread (what torch's own pin
                  thread runs with)
    feeder        feeder's pin (feeder/_pin.py: one thread's copy, no GIL),
                  what pin_memory=True does

Prints each way's epochs and the median of the epochs after the first, in
images/s; needs CUDA.
"""
import argparse
import json
import statistics
import time

import torch
from torch.utils.data._utils import pin_memory as tpin

import feeder
import feeder.transforms as FT
from feeder import _pin


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="an image folder (one sub-folder per class)")
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    if not torch.cuda.is_available():
        p.error("pinning needs CUDA")
    threads = torch.get_num_threads()
    tf = FT.Compose([FT.Resize(256), FT.CenterCrop(224)])
    dl = feeder.DataLoader(feeder.ImageFolder(a.data, transform=tf), batch_size=a.batch,
                           shuffle=True, num_workers=a.workers, persistent_workers=True,
                           generator=torch.Generator().manual_seed(0))

    ways = {"none": lambda b: b, "torch": tpin.pin_memory, "torch-1": tpin.pin_memory,
            "feeder": _pin.pin}
    out = {"workers": a.workers, "intra_op_threads": threads, "ways": {}}
    for name in ways:
        pin = ways[name]
        if name == "torch-1":
            torch.set_num_threads(1)  # for the whole way: no switch per batch
        rates = []
        for _ in range(a.epochs):
            t0, n = time.perf_counter(), 0
            for b in dl:
                n += len(pin(b)[1])
            rates.append(n / (time.perf_counter() - t0))
        torch.set_num_threads(threads)
        steady = statistics.median(rates[1:]) if len(rates) > 1 else rates[0]
        out["ways"][name] = {"epochs": [round(r) for r in rates], "steady": round(steady)}
        print(f"{name:8s} {steady:9.0f} images/s   epochs {[round(r) for r in rates]}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
