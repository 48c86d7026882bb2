#!/usr/bin/env python3
"""PyTorch's DataLoader on the same files as bench_loader, timed the same way.

    python3 bench/compare_torch.py --data ~/.cache/feeder/web-2000 \
        --workers 0,1,2,4,8,15 --pipeline both --epochs 3 --json

The dataset is ImageFolder-style (one sub-folder per class, labels from the
sorted class names, every .jpg/.jpeg file in it recursively) or a list file of
"relative/path label" lines, as feeder reads them. Each image is decoded with
torchvision.io.decode_jpeg (PIL when torchvision.io cannot), then, with
torchvision.transforms.v2,

    eval:  Resize(256, antialias=True) + CenterCrop(224)
    train: RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip()

on uint8 CHW tensors. With CUDA the loader pins memory and every batch is
copied to the GPU with non_blocking=True, as a training loop would. This is
PyTorch at its strongest: shuffled, persistent workers, a run's figure the
median of its epochs after the first (--no-persistent, --shuffle 0 and
--count-first give the other cases). bench/torch_reference.py is the same
loader as a user would write it; --reference runs it beside the column and
says how far apart they are (they must agree within 5%).

Each epoch is timed from iter(loader) to the end of the loop, after a CUDA
synchronize; the first-batch time runs from iter(loader) until the first
batch is held (on the GPU, synchronized, when CUDA is present). Every epoch
is reported, and the figure.

--sweep 1,2,4,8,15 compares, for the eval and the train pipeline at each
worker count, on the same files with the same batch, workers and prefetch:

  torch       the DataLoader above (torchvision.io decode, pin_memory,
              non_blocking .cuda() copies);
  torch PIL   with --pil-column: the classic pipeline (PIL open + convert,
              transforms on the PIL image, PILToTensor), labelled apart;
  torch GPU   torchvision's GPU decode: DataLoader workers only read the
              files (raw bytes, same batch/workers/prefetch), the main process
              decodes each batch with torchvision.io.decode_jpeg(list,
              device="cuda") and resizes/crops on the GPU with
              torchvision.transforms.v2.functional (CUDA only);
  feeder      bench_loader on the same files (--device 0 with CUDA), once per
              backend in --feeder-decoders (roi by default; nvjpeg and hybrid
              are reported as n/a where bench_loader says they cannot run).

Each is run --runs times (a fresh loader each time, --epochs epochs each, the
run's figure its median epoch) and the median run is reported with the ratio
feeder / torch. --json-out writes every run; --append-to FILE appends the table to FILE
(nothing under the checkout changes unless asked). --no-torch runs the
feeder side only (no torch needed: for tests, and machines without it).
bench/plot_compare.py draws the JSON as a PNG.
"""

import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchbench import (  # noqa: E402
    SRC, append_record, cell, cpu_model, emit, epoch_record, feeder_python_run, figure, guarded,
    import_feeder, md_table, parse_workers, positive, run_result, steady, summarize, timed_epoch)

try:
    import torch
    import torchvision
    from torch.utils.data import DataLoader, Dataset
    try:
        from torchvision.transforms import v2 as T
        TRANSFORMS = "transforms.v2"
    except ImportError:  # torchvision < 0.15 (Debian 12's): v1's tensor transforms
        from torchvision import transforms as T
        TRANSFORMS = "transforms (v1: torchvision < 0.15 has no v2)"
    TORCH_ERROR = None
except ImportError as e:  # main() says so unless --no-torch
    TORCH_ERROR = e
    TRANSFORMS = None
    Dataset = object

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
    """use_tvio: torchvision.io decodes to a uint8 tensor; "classic": PIL
    decodes and the transform (which ends in PILToTensor) runs on the PIL
    image; otherwise PIL decodes to a tensor."""

    def __init__(self, samples, transform, use_tvio):
        self.samples = samples
        self.transform = transform
        self.use_tvio = use_tvio

    def __len__(self):
        return len(self.samples)

    def load(self, path):
        if self.use_tvio == "classic":
            from PIL import Image
            with Image.open(path) as im:
                return im.convert("RGB")
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


# --augment: bench_loader's names (bench/loader_augment.c) with the same
# torchvision defaults; mixup and cutmix are batch-level (no torch column).
AUGMENTS = {
    "jitter": lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "trivial": lambda: T.TrivialAugmentWide(),
    "randaug": lambda: T.RandAugment(),
    "gray": lambda: T.RandomGrayscale(0.2),
    "blur": lambda: T.GaussianBlur(5, (0.1, 2.0)),
    "erase": lambda: T.RandomErasing(0.25),
}
BATCH_AUGMENTS = ("mixup", "cutmix")


def parse_augment(s):
    names = [x for x in s.split(",") if x]
    bad = [x for x in names if x not in AUGMENTS and x not in BATCH_AUGMENTS]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"'{s}': expected a comma-separated list of "
            f"{', '.join(list(AUGMENTS) + list(BATCH_AUGMENTS))}")
    return s


def make_transform(pipeline, size, resize, augment=None, classic=False):
    """The pipeline's transforms on uint8 tensors (transforms.v2), or with
    classic the v1 transforms on a PIL image, then PILToTensor."""
    if classic:
        from torchvision import transforms as V1
    t = V1 if classic else T
    if pipeline == "eval":
        steps = [t.Resize(resize, antialias=True), t.CenterCrop(size)]
    else:
        steps = [t.RandomResizedCrop(size, antialias=True), t.RandomHorizontalFlip()]
    for name in (augment or "").split(","):
        if name in BATCH_AUGMENTS:
            raise RuntimeError(f"--augment {name}: a batch-level step, not run on PyTorch's side")
        if name:
            steps.append(AUGMENTS[name]())
    if classic:
        steps.append(t.PILToTensor())
    return t.Compose(steps)


def run(args, samples, use_tvio, pipeline, workers, cuda):
    """One timed run of the CPU DataLoader; use_tvio "classic" is the PIL
    column."""
    ds = JpegDataset(samples, make_transform(pipeline, args.size, args.resize,
                                             getattr(args, "augment", None),
                                             classic=use_tvio == "classic"), use_tvio)
    shuffle = pipeline == "train" if args.shuffle is None else bool(args.shuffle)
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    kw = dict(batch_size=args.batch, shuffle=shuffle, num_workers=workers, pin_memory=cuda,
              persistent_workers=False, drop_last=False, generator=gen)
    if workers > 0:  # PyTorch rejects prefetch_factor (and persistence) without workers
        kw["prefetch_factor"] = args.prefetch
        kw["persistent_workers"] = bool(getattr(args, "persistent", False))
    loader = DataLoader(ds, **kw)
    epochs = []
    for e in range(args.epochs):
        images, secs, first = timed_epoch(torch, loader, cuda)
        rate = images / secs if secs > 0 else 0.0
        epochs.append(epoch_record(images, secs, first))
        print(f"torch{' PIL' if use_tvio == 'classic' else ''} {pipeline:5s} workers {workers:2d}  epoch {e + 1}/{args.epochs}  "
              f"{rate:8.0f} images/s  first batch {(first or 0) * 1e3:7.1f} ms",
              file=sys.stderr)
        if images != len(ds):
            print(f"compare_torch.py: warning: epoch {e} delivered {images} images, "
                  f"the dataset has {len(ds)}", file=sys.stderr)
    return run_result(pipeline, workers, epochs,
                      steady(args, [x["images_per_s"] for x in epochs]))


def default_data():
    env = os.environ.get("FEEDER_DATA")
    if env:
        return env
    return os.path.join(os.path.expanduser("~"), ".cache", "feeder", "web-2000")


def table(res):
    head = ["pipeline", "workers", "images/s per epoch", "images/s (median)",
            "first batch ms"]
    rows = [[r["pipeline"], str(r["workers"]),
             " / ".join(f"{e['images_per_s']:.0f}" for e in r["epochs"]),
             f"{r['median_images_per_s']:.0f}", f"{r['median_first_batch_ms']:.1f}"]
            if r.get("status", "ok") == "ok" else
            [r["pipeline"], str(r["workers"]), cell(r), "-", "-"]
            for r in res["runs"]]
    return md_table(head, rows, [False, True, True, True, True])

# ---------------------------------------------------------------------------
# --sweep: torch, torchvision's GPU decode and feeder at each worker count
# ---------------------------------------------------------------------------



class BytesDataset(Dataset):
    """The files' bytes as uint8 tensors: the GPU decodes them."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return torchvision.io.read_file(path), label


def collate_bytes(batch):
    """One flat uint8 tensor and the lengths: a list of per-file tensors would
    cross from the workers as one shared-memory file descriptor each, and 256
    of them a batch ran the H100 machine's DataLoader into EBADF in
    resource_sharer."""
    lens = torch.tensor([b.numel() for b, _ in batch], dtype=torch.int64)
    return torch.cat([b for b, _ in batch]), lens, torch.tensor([lab for _, lab in batch])


def gpu_transform(imgs, pipeline, size, resize):
    """The CPU pipelines' transforms, on decoded CUDA tensors, image by image
    (the images differ in size), then stacked into one batch."""
    import torchvision.transforms.v2.functional as F
    out = []
    for img in imgs:
        if pipeline == "eval":
            img = F.center_crop(F.resize(img, [resize], antialias=True), [size, size])
        else:
            i, j, h, w = T.RandomResizedCrop.get_params(img, scale=(0.08, 1.0),
                                                        ratio=(3 / 4, 4 / 3))
            img = F.resized_crop(img, i, j, h, w, [size, size], antialias=True)
            if torch.rand(1).item() < 0.5:
                img = F.horizontal_flip(img)
        out.append(img)
    return torch.stack(out)


def run_gpu_decode(args, samples, pipeline, workers):
    """torchvision.io.decode_jpeg(list, device="cuda") on batches of file bytes
    read by DataLoader workers; timed as run() times the CPU pipeline."""
    shuffle = pipeline == "train" if args.shuffle is None else bool(args.shuffle)
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    kw = dict(batch_size=args.batch, shuffle=shuffle, num_workers=workers,
              collate_fn=collate_bytes, persistent_workers=False, drop_last=False,
              generator=gen)
    if workers > 0:
        kw["prefetch_factor"] = args.prefetch
        kw["persistent_workers"] = bool(args.persistent)
    loader = DataLoader(BytesDataset(samples), **kw)
    epochs = []
    for e in range(args.epochs):
        images, first = 0, None
        t0 = time.perf_counter()
        for flat, lens, y in loader:
            datas = list(torch.split(flat, lens.tolist()))
            imgs = torchvision.io.decode_jpeg(datas, device="cuda",
                                              mode=torchvision.io.ImageReadMode.RGB)
            x = gpu_transform(imgs, pipeline, args.size, args.resize)
            y = y.to("cuda", non_blocking=True)
            if first is None:
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
            images += x.shape[0]
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        rate = images / secs if secs > 0 else 0.0
        epochs.append(dict(images=images, seconds=round(secs, 6), images_per_s=round(rate, 1),
                           first_batch_ms=round((first or 0.0) * 1e3, 3)))
        print(f"torch GPU decode {pipeline:5s} workers {workers:2d}  epoch {e + 1}/{args.epochs}"
              f"  {rate:8.0f} images/s", file=sys.stderr)
    return run_result(pipeline, workers, epochs,
                      steady(args, [x["images_per_s"] for x in epochs]))


def run_reference(args, data, pipeline, workers):
    """bench/torch_reference.py on the same files, in its own process: the
    figure the torch column must match."""
    if not os.path.isdir(data):
        return dict(status="n/a", reason="the reference script reads a folder, not a list file")
    if args.size != 224 or args.resize != 256 or args.augment:
        return dict(status="n/a", reason="the reference script is Resize 256 / crop 224, "
                                         "without --augment")
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "torch_reference.py"), data,
           "--workers", str(workers), "--batch", str(args.batch), "--prefetch",
           str(args.prefetch), "--epochs", str(args.epochs), "--pipeline", pipeline]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        raise RuntimeError(f"torch_reference.py failed (exit {p.returncode}): "
                           f"{(p.stderr.strip().splitlines() or ['no message'])[-1]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return run_result(pipeline, workers,
                      [dict(images=0, seconds=0, images_per_s=round(x, 1), first_batch_ms=0.0)
                       for x in r["epochs"]],
                      steady(args, r["epochs"]))


def find_bench_loader(path):
    if path:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"compare_torch.py: --bench-loader '{path}': not an executable")
        return path
    for c in (os.path.join(SRC, "build", "bench", "bench_loader"),
              os.path.join(os.getcwd(), "build", "bench", "bench_loader")):
        if os.access(c, os.X_OK):
            return c
    raise SystemExit("compare_torch.py: no bench_loader in build/bench (build the "
                     "bench_loader target, or pass --bench-loader PATH)")


def run_feeder(args, bench, data, pipeline, workers, decoder, device):
    """One bench_loader run: its median epoch, or n/a with bench_loader's reason."""
    cmd = [bench, "--data", data, "--workers", str(workers), "--pipeline", pipeline,
           "--batch", str(args.batch), "--prefetch", str(args.prefetch),
           "--epochs", str(args.epochs), "--size", str(args.size), "--seed", str(args.seed),
           "--decoder", decoder, "--device", str(device), "--json", "--no-append"]
    if pipeline == "eval":
        cmd += ["--resize", str(args.resize)]
    if args.shuffle is not None:
        cmd += ["--shuffle", str(args.shuffle)]
    if getattr(args, "persistent", False):
        cmd += ["--persistent"]
    if getattr(args, "augment", None):
        cmd += ["--augment", args.augment]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write("".join(f"feeder {decoder}: {line}\n" for line in p.stderr.splitlines()))
    if p.returncode != 0:
        last = p.stderr.strip().splitlines()[-1:] or ["no message"]
        raise SystemExit(f"compare_torch.py: bench_loader failed (exit {p.returncode}): "
                         f"{last[0]}\n  command: {' '.join(cmd)}")
    r = json.loads(p.stdout)["runs"][0]
    if r.get("status") == "n/a":
        return dict(status="n/a", reason=r["reason"])
    return dict(status="ok",
                images_per_s=steady(args, [e["images_per_s"] for e in r["epochs"]]),
                first_batch_ms=r["median_first_batch_ms"],
                cpu_cores_busy=r.get("cpu_cores_busy"))


def feeder_point(args, bench, data, pipeline, workers, decoder, device):
    runs = []
    for _ in range(args.runs):
        r = run_feeder(args, bench, data, pipeline, workers, decoder, device)
        if r["status"] != "ok":
            return dict(status="n/a", reason=r["reason"])  # it will not run the next time either
        runs.append(r)
    return summarize(runs, "images_per_s", "first_batch_ms")


def sweep_table(res):
    decs = res["config"]["feeder_decoders"]
    pil = res["config"].get("pil_column")
    ref = res["config"].get("reference")
    head = (["workers", "pipeline", "torch img/s"]
            + (["torch reference img/s", "column / reference"] if ref else [])
            + (["torch PIL img/s"] if pil else [])
            + ["torch GPU-decode img/s"]
            + [f"feeder {d} img/s" for d in decs]
            + [f"feeder (Python, {res['config']['python_decoder']}) img/s"]
            + [f"{d} / torch" for d in decs]
            + ([f"{d} / torch PIL" for d in decs] if pil else []))

    def ratio(x):
        return "-" if x is None else f"{x:.2f}"
    rows = []
    for r in res["rows"]:
        row = [str(r["workers"]), r["pipeline"], cell(r["torch"])]
        if ref:
            row += [cell(r.get("torch_reference")), ratio(r.get("torch_vs_reference"))]
        if pil:
            row.append(cell(r.get("torch_pil")))
        row.append(cell(r["torch_gpu_decode"]))
        row += [cell(r["feeder"][d]) for d in decs] + [cell(r.get("feeder_python"))]
        row += [ratio(r["ratio"].get(d)) for d in decs]
        if pil:
            row += [ratio(r.get("ratio_pil", {}).get(d)) for d in decs]
        rows.append(row)
    return md_table(head, rows, [True, False] + [True] * (len(head) - 2)) + "\n"


def sweep_description(res):
    c = res["config"]
    m = res["machine"]
    d = (f"{m['label']} ({m['cpu']}{', ' + m['gpu'] if m['gpu'] else ''}); dataset "
         f"{res['dataset']['path']}: {res['dataset']['images']} images; batch {c['batch']}, "
         f"prefetch {c['prefetch']}, {c['epochs']} epoch(s) per run, median of {c['runs']} "
         f"runs.\n")
    if res["torch"]:
        t = res["torch"]
        d += (f"torch {t['torch']}, torchvision {t['torchvision']}, decode {t['decoder']}, "
              f"{t.get('transforms', 'transforms')} on uint8 tensors, "
              + ("pin_memory + non_blocking .cuda() copies" if t["cuda"] else "no CUDA")
              + "; torch GPU-decode: DataLoader workers read the files, "
              "torchvision.io.decode_jpeg(list, device='cuda') + v2.functional resize/crop "
              "on the GPU (\"-\": no CUDA)"
              + ("; torch PIL: PIL decode, v1 transforms on the PIL image, PILToTensor"
                 if c.get("pil_column") else "")
              + ("; torch reference: bench/torch_reference.py in its own process"
                 if c.get("reference") else "") + ".\n")
    else:
        d += "PyTorch not run (--no-torch): torch columns empty.\n"
    d += (f"feeder: bench_loader --device {c['feeder_device']} per backend; n/a = the backend "
          "cannot run here (bench_loader's reason). Each run times its epochs from the first "
          "request (iter(loader) for torch) to the end; a run's figure is its median epoch"
          + (" after the first (--skip-first: steady state)" if c.get("skip_first") else "")
          + ("; persistent workers on both sides" if c.get("persistent")
             else "; workers forked again every epoch on both sides (--no-persistent)")
          + ("; shuffled" if c.get("shuffle", 1) else "; in order (--shuffle 0)")
          + (f"; augment {c['augment']} after the crop on both sides" if c.get("augment")
             else "")
          + ". ratio = feeder / torch (CPU DataLoader).\n")
    return d


def measure_row(args, row, samples, use_tvio, cuda, bench, data, device, have_torch, fdr):
    """Every column of one (pipeline, workers) point; a column that fails is
    reported as failed with its reason, and the others still run."""
    p, w = row["pipeline"], row["workers"]
    if have_torch:
        # The column's and the reference's runs alternate: the machine's
        # speed drifts by 10-25% over minutes, which one after the other
        # would read as a difference between them.
        col, ref = [], []

        def column_and_reference():
            col.append(run(args, samples, use_tvio, p, w, cuda))
            if args.reference:
                ref.append(guarded("torch reference", lambda: run_reference(args, data, p, w)))
        row["torch"] = guarded("torch", lambda: (
            [column_and_reference() for _ in range(args.runs)], summarize(col))[1])
        if args.pil_column:
            row["torch_pil"] = guarded("torch PIL", lambda: summarize(
                [run(args, samples, "classic", p, w, cuda) for _ in range(args.runs)]))
        if args.reference:
            bad = [r for r in ref if r.get("status", "ok") != "ok"]
            ref = bad[0] if bad else (summarize(ref) if ref else
                                      dict(status="failed", reason="the torch column failed"))
            row["torch_reference"] = ref
            t, f = figure(row["torch"]), figure(ref)
            row["torch_vs_reference"] = round(t / f, 3) if t and f else None
            if t and f and abs(t / f - 1) > 0.05:
                print(f"compare_torch.py: warning: the torch column ({t:.0f} images/s) is "
                      f"{t / f:.2f}x bench/torch_reference.py ({f:.0f}), more than 5% apart "
                      f"({p}, {w} workers)", file=sys.stderr)
        if cuda and args.no_gpu_decode:
            row["torch_gpu_decode"] = None
        elif cuda and args.augment:
            row["torch_gpu_decode"] = dict(status="n/a",
                                           reason="--augment runs on the CPU DataLoader only")
        elif cuda:
            row["torch_gpu_decode"] = guarded("torch GPU decode", lambda: summarize(
                [run_gpu_decode(args, samples, p, w) for _ in range(args.runs)]))
    for d in args.feeder_decoders:
        f = guarded(d, lambda: feeder_point(args, bench, data, p, w, d, device))
        row["feeder"][d] = f
        t = figure(row["torch"])
        row["ratio"][d] = round(f["median_images_per_s"] / t, 3) if figure(f) and t else None
        t = figure(row.get("torch_pil"))
        if t:
            row.setdefault("ratio_pil", {})[d] = (round(f["median_images_per_s"] / t, 3)
                                                  if figure(f) else None)
    if fdr is not None and args.augment:
        row["feeder_python"] = dict(status="n/a", reason="--augment: bench_loader only")
    elif fdr is not None:
        row["feeder_python"] = guarded("feeder (Python)", lambda: summarize(
            [feeder_python_run(args, fdr, data, p, w, device) for _ in range(args.runs)]))


def sweep(args, data, samples, have_torch, cuda, use_tvio):
    bench = find_bench_loader(args.bench_loader)
    device = args.feeder_device if args.feeder_device is not None else (0 if cuda else -1)
    pipelines = ["eval", "train"] if args.pipeline in (None, "both") else [args.pipeline]
    res = dict(tool="compare_torch", mode="sweep",
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               command=" ".join(["compare_torch.py"] + sys.argv[1:]),
               machine=dict(label=args.label or f"{socket.gethostname()} ({os.cpu_count()} cores)",
                            host=socket.gethostname(), cores=os.cpu_count(), cpu=cpu_model(),
                            gpu=torch.cuda.get_device_name(0) if cuda else None),
               torch=(dict(torch=torch.__version__, torchvision=torchvision.__version__,
                           decoder="torchvision.io.decode_jpeg" if use_tvio else "PIL",
                           transforms=TRANSFORMS, cuda=cuda, python=platform.python_version())
                      if have_torch else None),
               dataset=dict(path=data, images=len(samples)),
               config=dict(workers=args.sweep, pipelines=pipelines, batch=args.batch,
                           prefetch=args.prefetch, epochs=args.epochs, runs=args.runs,
                           size=args.size, resize=args.resize, seed=args.seed,
                           feeder_decoders=args.feeder_decoders, feeder_device=device, skip_first=args.skip_first,
                           python_decoder=args.python_decoder,
                           augment=args.augment, persistent=args.persistent,
                           shuffle=args.shuffle, pil_column=args.pil_column,
                           reference=args.reference, bench_loader=bench),
               rows=[])
    fdr, why = import_feeder(bench)
    if fdr is None:
        print(f"feeder (Python): unavailable: {why}", file=sys.stderr)
    res["feeder_python"] = dict(available=fdr is not None, reason=why)
    for p in pipelines:
        for w in args.sweep:
            row = dict(pipeline=p, workers=w, torch=None, torch_pil=None, torch_reference=None,
                       torch_vs_reference=None, torch_gpu_decode=None, feeder={},
                       feeder_python=None if fdr else dict(status="unavailable", reason=why),
                       ratio={})
            measure_row(args, row, samples, use_tvio, cuda, bench, data, device, have_torch,
                        fdr)
            res["rows"].append(row)
    tbl = sweep_table(res)
    desc = sweep_description(res)
    print("\n" + desc + "\n" + tbl)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=2)
            fh.write("\n")
        print(f"wrote {args.json_out}", file=sys.stderr)
    if args.append_to and not args.no_append:
        md = args.append_to
        append_record(md, res["machine"]["label"], "feeder vs PyTorch, worker sweep",
                      res["command"], desc + "\n" + tbl)


def bench_decoders(bench):
    """The decoders bench_loader --decoder takes, as its --help lists them: the
    library's names, then bench_loader's own rows raw (a RAW pack, no decode)
    and all (every backend), which are left out here."""
    out = subprocess.run([bench, "--help"], stdout=subprocess.PIPE, text=True).stdout
    m = re.search(r"^ *--decoder (\S+)", out, re.M)
    return [d for d in (m.group(1).split("|") if m else []) if d not in ("raw", "all")]


def parse_decoders(s):
    ds = [x for x in s.split(",") if x]
    if not ds:
        raise argparse.ArgumentTypeError(f"'{s}': expected a comma-separated list of decoders")
    return ds


def check_decoders(ap, args, bench):
    """--feeder-decoders and --python-decoder against bench_loader's decoders."""
    known = bench_decoders(bench)
    bad = [d for d in args.feeder_decoders if d not in known]
    if bad:
        ap.error(f"--feeder-decoders '{','.join(args.feeder_decoders)}': expected a "
                 f"comma-separated list of {', '.join(known)}")
    if args.python_decoder not in known:
        ap.error(f"--python-decoder '{args.python_decoder}': expected one of {', '.join(known)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None,
                    help="image folder or list file (default: $FEEDER_DATA or "
                         "~/.cache/feeder/web-2000, made by bench_loader)")
    ap.add_argument("--batch", type=positive, default=256)
    ap.add_argument("--workers", type=parse_workers, default=[4],
                    help="comma-separated worker counts, e.g. 0,1,2,4,8,15 (4)")
    ap.add_argument("--prefetch", type=positive, default=2,
                    help="prefetch_factor, used only when workers > 0 (2)")
    ap.add_argument("--epochs", type=positive, default=3)
    ap.add_argument("--pipeline", choices=["eval", "train", "both"], default=None,
                    help="eval (default), train or both; --sweep: both unless given")
    ap.add_argument("--size", type=positive, default=224)
    ap.add_argument("--resize", type=positive, default=None,
                    help="eval: shorter side before the crop (size*256/224)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shuffle", type=int, choices=[0, 1], default=1,
                    help="1 (default): shuffled, as training reads; 0: in order")
    ap.add_argument("--no-cuda", action="store_true", help="do not pin or copy to the GPU")
    ap.add_argument("--persistent", action="store_true", default=True,
                    help="persistent_workers=True on both sides (the default)")
    ap.add_argument("--no-persistent", dest="persistent", action="store_false",
                    help="workers forked again every epoch (PyTorch's own default)")
    ap.add_argument("--pil", action="store_true",
                    help="decode with PIL even where torchvision.io works")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    ap.add_argument("--augment", type=parse_augment, default=None, metavar="LIST",
                    help="augmentations after the pipeline's crop, on both sides, e.g. "
                         "jitter,trivial (bench_loader --augment has the list)")
    sw = ap.add_argument_group("--sweep (torch, torch GPU decode and feeder side by side)")
    sw.add_argument("--sweep", type=parse_workers, default=None, metavar="LIST",
                    help="worker counts, e.g. 1,2,4,8,15")
    sw.add_argument("--runs", type=positive, default=3, help="runs per point, median (3)")
    sw.add_argument("--skip-first", action="store_true", default=True,
                    help="a run's figure is the median of its epochs after the first "
                         "(steady state; the default, with --epochs >= 2)")
    sw.add_argument("--count-first", dest="skip_first", action="store_false",
                    help="a run's figure is the median of all its epochs")
    sw.add_argument("--pil-column", action="store_true",
                    help="add the classic PIL pipeline (PIL decode, transforms on the PIL "
                         "image, PILToTensor) as a labelled column")
    sw.add_argument("--reference", action="store_true",
                    help="run bench/torch_reference.py beside the torch column and report "
                         "column / reference (it must be within 5%%)")
    sw.add_argument("--feeder-decoders", type=parse_decoders, default=["roi"],
                    help="bench_loader --decoder values, e.g. roi,nvjpeg,hybrid (roi)")
    sw.add_argument("--python-decoder", default="roi",
                    help="the decoder of the feeder (Python) column (roi)")
    sw.add_argument("--feeder-device", type=int, default=None,
                    help="bench_loader --device (default: 0 with CUDA, else -1)")
    sw.add_argument("--bench-loader", default=None,
                    help="the bench_loader binary (default: build/bench/bench_loader)")
    sw.add_argument("--json-out", default=None, help="write every result as JSON to FILE")
    sw.add_argument("--append-to", default=None,
                    help="append the table to FILE (without it nothing is written but stdout "
                         "and --json-out)")
    sw.add_argument("--no-append", action="store_true",
                    help="the default (kept so older command lines run)")
    sw.add_argument("--label", default=None, help="machine name (default: hostname + cores)")
    sw.add_argument("--no-gpu-decode", action="store_true",
                    help="leave out the torch GPU-decode column (a shorter run)")
    sw.add_argument("--no-torch", action="store_true",
                    help="run the feeder side only (no torch import needed)")
    args = ap.parse_args()
    if args.no_torch and args.sweep is None:
        ap.error("--no-torch needs --sweep (the other modes measure torch only)")
    if args.sweep is not None:
        check_decoders(ap, args, find_bench_loader(args.bench_loader))
    have_torch = not args.no_torch
    if have_torch and TORCH_ERROR is not None:
        sys.exit(f"compare_torch.py: PyTorch and torchvision are needed (or --no-torch): "
                 f"{TORCH_ERROR}")
    if args.resize is None:
        args.resize = (args.size * 256 + 112) // 224
    data = args.data or default_data()
    if os.path.isdir(data):
        samples, classes = folder_samples(data)
    elif os.path.isfile(data):
        samples, classes = list_samples(data)
    else:
        ap.error(f"--data '{data}': no such folder or file")

    cuda = have_torch and torch.cuda.is_available() and not args.no_cuda
    use_tvio = have_torch and not args.pil and torchvision_io_works(samples[0][0])
    if args.sweep is not None:
        sweep(args, data, samples, have_torch, cuda, use_tvio)
        return
    if args.pipeline is None:
        args.pipeline = "eval"
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
                           pin_memory=cuda,
                           persistent_workers=bool(getattr(args, "persistent", False))),
               runs=[])
    for p in pipelines:
        for w in args.workers:
            r = guarded("torch", lambda: run(args, samples, use_tvio, p, w, cuda))
            if r.get("status") == "failed":
                r.update(pipeline=p, workers=w)
            res["runs"].append(r)
    emit(res, args.json,
         f"torch {res['torch']}, torchvision {res['torchvision']} on {res['host']} "
         f"({res['cores']} cores); decode: {res['decoder']}; "
         f"{'pin + H2D to ' + res['gpu'] if cuda else 'no CUDA'}; batch {args.batch}, "
         f"prefetch {args.prefetch}; {len(samples)} images in {data}", table(res))


if __name__ == "__main__":
    main()
