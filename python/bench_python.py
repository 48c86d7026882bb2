#!/usr/bin/env python3
"""feeder (Python): images/s through the binding against bench_loader (C)
with the same options, and the binding's per-batch cost.

    FEEDER_BUILD_DIR=build python3 python/setup.py build_py -d build/python build_ext -b build/python
    PYTHONPATH=build/python /usr/bin/python3 python/bench_python.py --workers 2 --rounds 5

The C and Python runs alternate (--rounds times, --epochs epochs each) so a
busy shared machine slows both alike; each side's figure is the median epoch.
Epochs are timed as bench_loader times them: from asking for the first batch
(with the fork of the workers) to the end of the epoch, doing nothing with
the batches. The per-batch cost is the whole next() call when the batch is
already waiting in its slot (workers ahead, 30 ms of small torch ops between
calls, as a training step would run): what the
binding adds (the two DLPack views and torch tensors), plus feeder_next's
own hand-over; an upper bound on the binding's overhead.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_here = os.path.dirname(os.path.abspath(__file__))
if not any(n.startswith("_feeder") for n in os.listdir(os.path.join(_here, "feeder"))):
    # python/feeder has no built module here: use the one on PYTHONPATH.
    sys.path = [d for d in sys.path if os.path.abspath(d or ".") != _here]
import feeder  # noqa: E402


def c_run(args, data):
    cmd = [args.bench_loader, "--data", data, "--workers", str(args.workers), "--batch",
           str(args.batch), "--prefetch", str(args.prefetch), "--epochs", str(args.epochs),
           "--pipeline", args.pipeline, "--size", str(args.size), "--layout", args.layout,
           "--decoder", args.decoder, "--shuffle", str(args.shuffle), "--json", "--no-append"]
    if args.persistent:
        cmd.append("--persistent")
    if args.device is not None:
        cmd += ["--device", str(args.device), "--dtype", args.c_dtype]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    run = json.loads(out)["runs"][0]
    return [e["images_per_s"] for e in run["epochs"]], " ".join(cmd)


def loader(args, ds, **kw):
    return feeder.Loader(ds, batch_size=args.batch, num_workers=args.workers,
                         prefetch_factor=args.prefetch, pipeline=args.pipeline, size=args.size,
                         layout=args.layout.upper(), decoder=args.decoder,
                         shuffle=bool(args.shuffle), persistent_workers=args.persistent,
                         device=None if args.device is None else f"cuda:{args.device}",
                         dtype=args.dtype, **kw)


def py_run(args, ds, sync):
    rates = []
    ld = loader(args, ds)
    for _ in range(args.epochs):
        t = time.perf_counter()
        n = 0
        for x, y in ld:
            n += x.shape[0]
        sync()
        rates.append(n / (time.perf_counter() - t))
        del x, y
    return rates


def per_batch_us(args, ds, as_torch, sync):
    # Small batches, so the pause below lets the workers fill every slot; the
    # binding's work per batch does not depend on the batch's size.
    ld = feeder.Loader(ds, batch_size=16, num_workers=args.workers,
                       prefetch_factor=args.prefetch, pipeline=args.pipeline, size=32,
                       layout=args.layout.upper(), as_torch=as_torch, decoder=args.decoder,
                       device=None if args.device is None else f"cuda:{args.device}",
                       dtype=args.dtype, persistent_workers=True)
    import torch
    step_a, step_b = torch.rand(32, 32), torch.rand(32, 32)
    times, inside = [], []
    while len(times) < args.calls:
        it = iter(ld)
        while True:
            # A stand-in training step (small torch ops for 30 ms) while the
            # workers fill every free slot: a sleep would leave torch's code
            # cold, and cold, torch takes ~40 us to make two tensors.
            end = time.perf_counter() + 0.03
            while time.perf_counter() < end:
                step_a = step_a @ step_b
                step_a /= step_a.norm()
            t = time.perf_counter_ns()
            try:
                x, y = next(it)
            except StopIteration:
                break
            times.append((time.perf_counter_ns() - t) / 1000)
            inside.append(ld._last_batch["next_ns"] / 1000)
            del x, y
    sync()
    # The binding's own share: the call less the time inside feeder_next.
    own = sorted(a - b for a, b in zip(times, inside))
    times.sort()
    return (statistics.median(times), times[int(len(times) * 0.9)], statistics.median(own),
            own[int(len(own) * 0.9)])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default=os.environ.get(
        "FEEDER_DATA", os.path.expanduser("~/.cache/feeder/default-2000")),
        help="image folder (bench_loader makes the default one on its first run)")
    p.add_argument("--bench-loader", default=os.path.join(here, "..", "build", "bench",
                                                          "bench_loader"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pipeline", default="eval")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--layout", default="nhwc", choices=["nhwc", "nchw"])
    p.add_argument("--device", type=int, default=None, help="CUDA device (default: host batches)")
    p.add_argument("--decoder", default="roi", choices=["turbo", "roi", "nvjpeg", "hybrid"],
                   help="the decoder on both sides (roi); nvjpeg and hybrid need --device")
    p.add_argument("--shuffle", type=int, default=1, choices=[0, 1],
                   help="1 (default): shuffled on both sides, as training reads")
    p.add_argument("--persistent", action="store_true",
                   help="persistent workers on both sides (each side's epochs after the "
                        "first then show the steady state)")
    p.add_argument("--dtype", default=None, choices=[None, "uint8", "float16", "bfloat16",
                                                      "float32"])
    p.add_argument("--calls", type=int, default=200, help="next() calls timed for the overhead")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.c_dtype = {None: "uint8", "uint8": "uint8", "float16": "fp16", "bfloat16": "bf16",
                    "float32": "fp32"}[args.dtype]
    sync = lambda: None  # noqa: E731
    if args.device is not None:
        import torch
        sync = torch.cuda.synchronize
    if not os.path.isdir(args.data):
        # bench_loader makes the default dataset on its first run.
        subprocess.run([args.bench_loader, "--epochs", "1", "--no-append"], check=True,
                       stdout=subprocess.DEVNULL)
    ds = feeder.ImageFolder(args.data)
    c_rates, py_rates, cmd = [], [], ""
    for r in range(args.rounds):
        rates, cmd = c_run(args, args.data)
        c_rates += rates
        py_rates += py_run(args, ds, sync)
        print(f"round {r + 1}/{args.rounds}: C {statistics.median(rates):.0f} images/s, "
              f"Python {statistics.median(py_rates[-args.epochs:]):.0f} images/s", file=sys.stderr)
    c_med = statistics.median(c_rates) if c_rates else float("nan")
    py_med = statistics.median(py_rates) if py_rates else float("nan")
    us_torch = per_batch_us(args, ds, None, sync)
    us_array = per_batch_us(args, ds, False, sync)
    res = {"bench_loader_images_per_s": round(c_med, 1), "python_images_per_s": round(py_med, 1),
           "python_over_c": round(py_med / c_med, 4),
           "next_us_median_torch": round(us_torch[0], 2), "next_us_p90_torch": round(us_torch[1], 2),
           "next_us_median_array": round(us_array[0], 2), "next_us_p90_array": round(us_array[1], 2),
           "binding_us_median_torch": round(us_torch[2], 2), "binding_us_p90_torch": round(us_torch[3], 2),
           "binding_us_median_array": round(us_array[2], 2), "binding_us_p90_array": round(us_array[3], 2),
           "c_epochs": [round(v, 1) for v in c_rates], "python_epochs": [round(v, 1) for v in py_rates],
           "bench_loader_command": cmd, "dataset": args.data, "images": len(ds)}
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"| loader | images/s (median of {len(c_rates)} epochs) | vs C |")
    print("| --- | ---: | ---: |")
    print(f"| bench_loader (C) | {c_med:.0f} | 1.000 |")
    print(f"| feeder (Python) | {py_med:.0f} | {py_med / c_med:.3f} |")
    print()
    print(f"next() with the batch ready: torch tensors {us_torch[0]:.1f} us median "
          f"({us_torch[1]:.1f} us p90); feeder.Array views {us_array[0]:.1f} us "
          f"({us_array[1]:.1f} us p90)")
    print(f"of which the binding (next() less feeder_next): torch {us_torch[2]:.1f} us median "
          f"({us_torch[3]:.1f} us p90); feeder.Array {us_array[2]:.1f} us ({us_array[3]:.1f} us p90)")
    print(f"C side: {cmd}")


if __name__ == "__main__":
    main()
