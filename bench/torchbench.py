"""What the PyTorch comparison scripts share (compare_torch.py,
compare_torch_packed.py): argument types, a run's figure from its epochs,
Markdown tables, the appended record, the machine, the columns that fail
without stopping the run, and feeder's Python binding as a column.

Standard library only: the --no-torch paths import it without torch.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def parse_workers(s, example="0,1,2,4"):
    """A comma-separated list of worker counts (>= 0), for argparse's type=."""
    try:
        ws = [int(x) for x in s.split(",") if x.strip() != ""]
    except ValueError:
        ws = []
    if not ws or any(w < 0 for w in ws):
        raise argparse.ArgumentTypeError(f"'{s}': expected a list such as {example}")
    return ws


def positive(s):
    """An integer >= 1, for argparse's type=."""
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"'{s}': expected a positive integer")
    return v


def steady(args, rates):
    """A run's figure from its epochs' images/s: the median, of the epochs
    after the first with --skip-first (the first pays start-up: the workers'
    fork, CUDA and nvJPEG set-up, the page cache)."""
    if getattr(args, "skip_first", False) and len(rates) > 1:
        rates = rates[1:]
    return round(statistics.median(rates), 1)


def run_result(pipeline, workers, epochs, figure):
    """The result dict of one timed run: its epochs and its figures."""
    return dict(pipeline=pipeline, workers=workers, median_images_per_s=figure,
                median_first_batch_ms=round(statistics.median(
                    x["first_batch_ms"] for x in epochs), 2),
                epochs=epochs)


def epoch_record(images, secs, first):
    rate = images / secs if secs > 0 else 0.0
    return dict(images=images, seconds=round(secs, 6), images_per_s=round(rate, 1),
                first_batch_ms=round((first or 0.0) * 1e3, 3))


def timed_epoch(torch, loader, cuda):
    """One pass over a DataLoader of (x, y) batches, each copied to the GPU
    with cuda as a training step would take it: (images, seconds, seconds to
    the first batch or None)."""
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
    return images, time.perf_counter() - t0, first


def summarize(runs, rate="median_images_per_s", first="median_first_batch_ms"):
    """The point of several runs: each run's figure (its key `rate`), their
    median, and the median of their first batches (key `first`)."""
    rates = [r[rate] for r in runs]
    return dict(status="ok", runs_images_per_s=rates,
                median_images_per_s=round(statistics.median(rates), 1),
                median_first_batch_ms=round(statistics.median(
                    r[first] for r in runs), 2))


def failed(reason):
    return dict(status="failed", reason=reason)


def guarded(name, fn):
    """fn() for one column; any exception (a file torchvision's GPU decode
    refuses, a missing module, a failed subprocess) becomes that column's
    "failed" result with the reason, and the rest of the run goes on.
    FEEDER_COMPARE_FAIL=NAME[,NAME] fails the named columns on purpose (tests)."""
    try:
        if name in os.environ.get("FEEDER_COMPARE_FAIL", "").split(","):
            raise RuntimeError(f"failure injected by FEEDER_COMPARE_FAIL={name}")
        return fn()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure is the column's
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        reason = f"{type(e).__name__}: {msg}" if isinstance(e, Exception) else msg
        print(f"{name}: failed: {reason}", file=sys.stderr)
        if os.environ.get("FEEDER_COMPARE_TRACEBACK"):
            traceback.print_exc()
        return failed(reason)


def cell(point, fmt="{:.0f}"):
    """A table cell for a column's point: its figure, "-" when not run, or
    "n/a: ..." / "failed: ..." with the reason."""
    if point is None:
        return "-"
    if point.get("status", "ok") != "ok":
        return f"{point['status']}: {point['reason']}"
    return fmt.format(point["median_images_per_s"])


def figure(point):
    """A point's images/s, or None when it did not run or failed."""
    if not point or point.get("status", "ok") != "ok":
        return None
    return point["median_images_per_s"]


def emit(res, as_json, headline, table):
    """A run's result on stdout: its JSON with --json, else a headline and
    the table."""
    if as_json:
        json.dump(res, sys.stdout, indent=2)
        print()
    else:
        print(headline)
        print(table)


def md_table(head, rows, right):
    """A Markdown table whose columns are padded to their widest cell."""
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    out = ["| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |",
           "| " + " | ".join(("-" * (w[i] - 1) + ":") if right[i] else "-" * w[i]
                             for i in range(len(head))) + " |"]
    for r in rows:
        out.append("| " + " | ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i])
                                     for i, c in enumerate(r)) + " |")
    return "\n".join(out)


def append_record(md, label, title, cmd, body):
    """Append "## DATE, LABEL: TITLE", the command and `body` to the file `md`."""
    os.makedirs(os.path.dirname(os.path.abspath(md)), exist_ok=True)
    fresh = not os.path.exists(md) or os.path.getsize(md) == 0
    with open(md, "a", encoding="utf-8") as fh:
        if fresh:
            fh.write("# Benchmarks\n\nRecords appended by the benchmarks in `bench/`, oldest "
                     "first. Each gives the exact command, the date and the machine.\n")
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        fh.write(f"\n## {date}, {label}: {title}\n\n```\n{cmd}\n```\n\n{body}")
    print(f"appended to {md}", file=sys.stderr)


def load_json(folder, name):
    """The JSON document `name` in `folder`, or None when the run left none."""
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def publish_combined(out, md, label, title, cmd, desc, tbl):
    """A figures script's result: `desc` and the Markdown table `tbl` printed,
    written to OUT/combined.md and, with `md`, appended to it as a record."""
    print("\n" + desc + "\n" + tbl)
    with open(os.path.join(out, "combined.md"), "w") as fh:
        fh.write(desc + "\n" + tbl)
    if md:
        append_record(md, label, title, cmd, f"{desc}\n{tbl}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def import_feeder(bench_loader=None):
    """feeder's Python binding: (module, None), or (None, why not). Looks on
    sys.path, then in the build folder beside bench_loader (BUILD/python,
    where tests/python_check.sh builds it)."""
    try:
        import feeder  # noqa: F401
        return sys.modules["feeder"], None
    except ImportError as e:
        first = str(e)
    if bench_loader:
        cand = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(bench_loader))),
                            "python")
        if os.path.isdir(os.path.join(cand, "feeder")):
            sys.path.insert(0, cand)
            try:
                import feeder  # noqa: F401,F811
                return sys.modules["feeder"], None
            except ImportError as e:
                sys.path.remove(cand)
                return None, f"import feeder from {cand}: {e}"
    return None, (f"import feeder: {first} (build it: tests/python_check.sh BUILD . or "
                  "python/setup.py)")


def feeder_python_kwargs(args, pipeline, workers, device):
    """feeder.Loader's arguments for bench_loader's options: the same batch,
    order, workers, prefetch, persistence (--persistent), pipeline, sizes,
    decoder (--python-decoder) and device."""
    shuffle = pipeline == "train" if args.shuffle is None else bool(args.shuffle)
    kw = dict(batch_size=args.batch, shuffle=shuffle, num_workers=workers, seed=args.seed,
              pipeline=pipeline, size=args.size, decoder=args.python_decoder, layout="NHWC",
              as_torch=False, persistent_workers=bool(getattr(args, "persistent", False)))
    if workers > 0:
        kw["prefetch_factor"] = args.prefetch
    if pipeline == "eval":
        kw["resize"] = args.resize
    if device is not None and device >= 0:
        kw["device"] = f"cuda:{device}"
    return kw


def feeder_python_run(args, feeder, data, pipeline, workers, device):
    """One run through the Python binding with bench_loader's options and
    --python-decoder: every epoch timed from iter() (which starts the loader
    and its workers) to the end, doing nothing with the batches. A GPU
    decoder that falls back to the CPU fails the run (with its reason)
    rather than give a figure under its name."""
    ds = feeder.ImageFolder(data) if os.path.isdir(data) else feeder.FileList(data)
    loader = feeder.Loader(ds, **feeder_python_kwargs(args, pipeline, workers, device))
    epochs = []
    ran = None
    for e in range(args.epochs):
        images, first = 0, None
        t0 = time.perf_counter()
        for x, _ in loader:
            if first is None:
                first = time.perf_counter() - t0
            images += x.shape[0]
            del x
            if ran is None:  # the decoder the loader runs, once it has started
                ran = loader.backends()
                if ran["decoder"] != args.python_decoder:
                    raise RuntimeError(f"decoder {args.python_decoder} cannot run here: "
                                       f"{ran['decoder_reason']}")
        epochs.append(epoch_record(images, time.perf_counter() - t0, first))
        print(f"feeder (Python) {pipeline:5s} workers {workers:2d}  epoch {e + 1}/{args.epochs}"
              f"  {epochs[-1]['images_per_s']:8.0f} images/s", file=sys.stderr)
    return run_result(pipeline, workers, epochs,
                      steady(args, [x["images_per_s"] for x in epochs]))
