#!/usr/bin/env python3
"""PyTorch's best on a RAW packed file: whole batches gathered from a numpy memmap.

    python3 bench/compare_torch_packed.py --data val-224.pack --workers 1,2,4,8 --json
    python3 bench/compare_torch_packed.py --check val-224.pack     # numpy only, no torch

The same file bench_loader reads with --data FILE.pack (made by feeder-pack
--mode raw). This is the fastest DataLoader we know for precomputed tensors:
a BatchSampler hands each worker a whole batch of indices, the dataset copies
those records out of a numpy memmap of the record area in one slice (one
fancy-indexed gather when shuffled), pin_memory pins it, and the loop copies
it to the GPU with non_blocking=True. No per-sample Python, no collate.

Each epoch is timed from iter(loader) (which starts the workers unless
--persistent) to the end of the loop, after torch.cuda.synchronize(); the
first-batch time runs until the first batch is on the GPU. GB/s counts the
delivered sample bytes (images x height x width x 3). Every epoch is reported,
and the median. Without CUDA (or with --no-cuda) the batches stay in host
memory, which is what bench_loader measures today.

The header is read with struct, little-endian, at these offsets (docs/FORMAT.md):
    0 magic "FEEDPACK"   8 version u32    12 header_bytes u32   16 kind u32 (1 RAW)
   20 dtype u32 (1 u8)  24 layout u32    28 height u32   32 width u32   36 channels u32
   40 label_type u32    44 flags u32     48 count u64    56 record_bytes u64
   64 index_off u64     72 labels_off u64   80 classes_off u64   88 classes_bytes u64
   96 num_classes u64  104 records_off u64 112 records_bytes u64
  120 shard_index u32  124 shard_count u32 128 shard_first u64  136 total_records u64
 4092 crc32c u32 of bytes [0, 4092)
The index holds count entries of 24 bytes (offset u64, size u64, crc32c u32,
reserved u32); labels are count int64. feeder-pack lays RAW records out back
to back from records_off, which is what lets one memmap cover them all; the
script checks that before it trusts it.

--check needs only python3 and numpy: it verifies the header (magic, version,
crc32c), the index and labels, the crc32c of the records (all of them for a
small file, a sample otherwise), and that the batch gather used for PyTorch
returns exactly the records' bytes and labels, sequential and shuffled.
"""


import argparse
import os
import platform
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchbench  # noqa: E402

try:
    import numpy as np
except ImportError as e:
    sys.exit(f"compare_torch_packed.py: numpy is needed: {e}")

HEADER = struct.Struct("<8s10I9Q2I2Q")
FIELDS = ("magic version header_bytes kind dtype layout height width channels label_type flags "
          "count record_bytes index_off labels_off classes_off classes_bytes num_classes "
          "records_off records_bytes shard_index shard_count shard_first total_records").split()
assert HEADER.size == 144
INDEX = np.dtype([("off", "<u8"), ("size", "<u8"), ("crc", "<u4"), ("reserved", "<u4")])
assert INDEX.itemsize == 24

_CRC_TABLE = []


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), table-driven; slow, but only --check uses it."""
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    t = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class PackError(Exception):
    pass


def read_pack(path):
    """The header as a dict, the index and the labels; only RAW packs laid
    out back to back (as feeder-pack writes them) are accepted."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        page = f.read(4096)
    if len(page) < 8 or page[:8] != b"FEEDPACK":
        raise PackError(f"{path}: not a feeder packed file (bad magic)")
    if len(page) < 4096:
        raise PackError(f"{path}: truncated header ({len(page)} of 4096 bytes)")
    h = dict(zip(FIELDS, HEADER.unpack_from(page, 0)))
    if h["version"] not in (1, 2):  # 2: record CRCs also cover the label
        raise PackError(f"{path}: unsupported format version {h['version']}")
    stored = struct.unpack_from("<I", page, 4092)[0]
    computed = crc32c(page[:4092])
    if stored != computed:
        raise PackError(f"{path}: header crc32c mismatch (stored 0x{stored:08x}, "
                        f"computed 0x{computed:08x})")
    if h["kind"] != 1:
        raise PackError(f"{path}: holds JPEG records (kind {h['kind']}); this script reads RAW "
                        "packs (feeder-pack --mode raw)")
    if h["dtype"] != 1 or h["channels"] != 3:
        raise PackError(f"{path}: dtype {h['dtype']}, {h['channels']} channels: expected uint8 x 3")
    n, rb = h["count"], h["record_bytes"]
    if rb != h["height"] * h["width"] * h["channels"]:
        raise PackError(f"{path}: record size {rb} is not {h['height']}x{h['width']}x3")
    for name, off, nbytes in (("index", h["index_off"], n * 24), ("labels", h["labels_off"], n * 8),
                              ("record area", h["records_off"], h["records_bytes"])):
        if off < 4096 or off + nbytes > size:
            raise PackError(f"{path}: {name} (offset {off}, {nbytes} bytes) runs past the end "
                            f"of the file ({size} bytes)")
    index = np.fromfile(path, dtype=INDEX, count=n, offset=h["index_off"])
    labels = np.fromfile(path, dtype="<i8", count=n, offset=h["labels_off"])
    want = h["records_off"] + np.arange(n, dtype=np.uint64) * np.uint64(rb)
    if not (np.array_equal(index["off"], want) and np.all(index["size"] == rb)):
        raise PackError(f"{path}: records are not back to back from offset {h['records_off']}; "
                        "one memmap cannot cover them")
    if n * rb > h["records_bytes"]:
        raise PackError(f"{path}: {n} records of {rb} bytes do not fit the record area")
    if labels.size and labels.min() < 0:
        raise PackError(f"{path}: negative label")
    return h, index, labels


def record_shape(h):
    """Shape of one record: (H, W, C) for NHWC, (C, H, W) for NCHW."""
    if h["layout"] == 1:
        return (h["channels"], h["height"], h["width"])
    return (h["height"], h["width"], h["channels"])


def open_records(path, h):
    return np.memmap(path, dtype=np.uint8, mode="r", offset=h["records_off"],
                     shape=(h["count"],) + record_shape(h))


def gather(records, labels, idxs):
    """One batch: a run of consecutive indices is one slice copy, anything
    else one fancy-indexed gather (numpy copies either way)."""
    idxs = np.asarray(idxs, dtype=np.int64)
    if idxs.size and idxs[-1] - idxs[0] == idxs.size - 1 and np.all(np.diff(idxs) == 1):
        x = np.array(records[idxs[0]:idxs[-1] + 1])
    else:
        x = np.asarray(records[idxs])
    return x, labels[idxs]


def check(path, expect_records):
    t0 = time.perf_counter()
    h, index, labels = read_pack(path)
    n, rb = h["count"], h["record_bytes"]
    if expect_records is not None and n != expect_records:
        raise PackError(f"{path}: {n} records, expected {expect_records}")
    if h["num_classes"] and labels.size and labels.max() >= h["num_classes"]:
        raise PackError(f"{path}: label {labels.max()} outside [0, {h['num_classes']})")
    records = open_records(path, h)
    # Every record's crc for a small file; the first, the last and a spread otherwise.
    if n * rb <= 8 << 20:
        sample = range(n)
    else:
        sample = sorted({0, n - 1, *range(0, n, max(1, n // 8))})
    for i in sample:
        # Version 2: the crc starts from the crc of the label's 8 bytes.
        seed = crc32c(int(labels[i]).to_bytes(8, "little", signed=True)) if h["version"] >= 2 else 0
        c = crc32c(records[i].tobytes(), seed)
        if c != int(index["crc"][i]):
            raise PackError(f"record {i} of {path}: crc32c mismatch (stored "
                            f"0x{int(index['crc'][i]):08x}, computed 0x{c:08x})")
    rng = np.random.default_rng(0)
    batch = max(1, min(5, n))
    checked = min(n, 200)
    for order in (np.arange(n), rng.permutation(n)):
        for s in range(0, checked, batch):
            idxs = order[s:s + batch]
            x, y = gather(records, labels, idxs)
            if x.shape != (idxs.size,) + record_shape(h) or x.dtype != np.uint8:
                raise PackError(f"gather: shape {x.shape} {x.dtype}")
            for k, i in enumerate(idxs):
                with open(path, "rb") as f:
                    f.seek(int(index["off"][i]))
                    raw = f.read(rb)
                if x[k].tobytes() != raw or y[k] != labels[i]:
                    raise PackError(f"gather: record {i} differs from the file's bytes")
    layout = "nchw" if h["layout"] == 1 else "nhwc"
    print(f"check ok: {path}: {n} RAW records of {h['height']}x{h['width']}x3 {layout}, "
          f"{h['num_classes']} classes, shard {h['shard_index'] + 1} of {h['shard_count']}; "
          f"header crc32c, index, labels, {len(sample)} record crc32c and "
          f"{2 * -(-checked // batch)} gathered batches agree ({time.perf_counter() - t0:.2f} s)")


# ---- the PyTorch side (imported only when measuring) ----

def drop_cache(path):
    """Evict the file's pages before an epoch (untimed), as bench_loader
    --drop-cache does; pages a live process still maps stay (persistent
    workers), so use it without --persistent."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class PackedBatches:
    """A map-style dataset whose item is a list of record indices (a whole
    batch, from a BatchSampler) and which returns that batch as two tensors.
    Module-level and holding only plain data, so it pickles where workers are
    spawned rather than forked."""

    def __init__(self, path, h, labels):
        self.path, self.h, self.labels = path, h, labels
        self.records = None  # mapped in each worker, on first use

    def __len__(self):
        return self.h["count"]

    def __getstate__(self):
        return dict(self.__dict__, records=None)

    def __getitem__(self, idxs):
        import torch
        if self.records is None:
            self.records = open_records(self.path, self.h)
        x, y = gather(self.records, self.labels, idxs)
        return torch.from_numpy(x), torch.from_numpy(y)


def run(args, torch, h, labels, workers, cuda):
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

    gen = torch.Generator()
    gen.manual_seed(args.seed)
    base = RandomSampler(range(h["count"]), generator=gen) if args.shuffle \
        else SequentialSampler(range(h["count"]))
    kw = dict(sampler=BatchSampler(base, args.batch, drop_last=False), batch_size=None,
              num_workers=workers, pin_memory=cuda,
              persistent_workers=args.persistent and workers > 0)
    if workers > 0:
        kw["prefetch_factor"] = args.prefetch
    loader = DataLoader(PackedBatches(args.data, h, labels), **kw)
    epochs = []
    for e in range(args.epochs):
        if args.drop_cache:
            drop_cache(args.data)
        images, secs, first = torchbench.timed_epoch(torch, loader, cuda)
        gbps = images * h["record_bytes"] / secs / 1e9 if secs > 0 else 0.0
        epochs.append(dict(images=images, seconds=round(secs, 6),
                           images_per_s=round(images / secs if secs > 0 else 0.0, 1),
                           gb_per_s=round(gbps, 3), first_batch_ms=round((first or 0) * 1e3, 3)))
        print(f"torch packed workers {workers:2d}  epoch {e + 1}/{args.epochs}  {gbps:6.2f} GB/s  "
              f"{images / secs if secs > 0 else 0:8.0f} images/s  first batch "
              f"{(first or 0) * 1e3:7.1f} ms", file=sys.stderr)
        if images != h["count"]:
            print(f"compare_torch_packed.py: warning: epoch {e} delivered {images} images, the "
                  f"file has {h['count']}", file=sys.stderr)
    return dict(workers=workers,
                median_gb_per_s=round(statistics.median(x["gb_per_s"] for x in epochs), 3),
                median_images_per_s=round(statistics.median(x["images_per_s"] for x in epochs), 1),
                median_first_batch_ms=round(statistics.median(x["first_batch_ms"] for x in epochs),
                                            2),
                epochs=epochs)


def table(res):
    head = ["workers", "GB/s per epoch", "GB/s (median)", "images/s (median)", "first batch ms"]
    rows = [[str(r["workers"]), " / ".join(f"{e['gb_per_s']:.2f}" for e in r["epochs"]),
             f"{r['median_gb_per_s']:.2f}", f"{r['median_images_per_s']:.0f}",
             f"{r['median_first_batch_ms']:.1f}"] for r in res["runs"]]
    w = [max(len(hh), *(len(r[i]) for r in rows)) for i, hh in enumerate(head)]
    out = ["| " + " | ".join(hh.ljust(w[i]) for i, hh in enumerate(head)) + " |",
           "| " + " | ".join("-" * (w[i] - 1) + ":" for i in range(len(head))) + " |"]
    for r in rows:
        out.append("| " + " | ".join(c.rjust(w[i]) for i, c in enumerate(r)) + " |")
    return "\n".join(out)


def parse_workers(s):
    return torchbench.parse_workers(s, "1,2,4,8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="RAW packed file (feeder-pack --mode raw)")
    ap.add_argument("--check", metavar="FILE",
                    help="check FILE and the batch gather with numpy alone, then exit")
    ap.add_argument("--expect-records", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=torchbench.positive, default=256)
    ap.add_argument("--workers", type=parse_workers, default=[1, 2, 4, 8],
                    help="comma-separated worker counts (1,2,4,8)")
    ap.add_argument("--prefetch", type=torchbench.positive, default=2)
    ap.add_argument("--epochs", type=torchbench.positive, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shuffle", type=int, choices=[0, 1], default=0,
                    help="random batches (a fancy-indexed gather per batch); default 0")
    ap.add_argument("--persistent", action="store_true", help="persistent_workers=True")
    ap.add_argument("--drop-cache", action="store_true",
                    help="evict the file from the page cache before every epoch (cold figures)")
    ap.add_argument("--no-cuda", action="store_true", help="do not pin or copy to the GPU")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    args = ap.parse_args()
    try:
        if args.check:
            check(args.check, args.expect_records)
            return
        if not args.data:
            ap.error("--data FILE.pack is required (or --check FILE)")
        h, _index, labels = read_pack(args.data)
    except (PackError, OSError) as e:
        sys.exit(f"compare_torch_packed.py: {e}")
    try:
        import torch
    except ImportError as e:
        sys.exit(f"compare_torch_packed.py: PyTorch is needed to measure (--check needs only "
                 f"numpy): {e}")
    cuda = torch.cuda.is_available() and not args.no_cuda
    res = dict(tool="torch-packed", torch=torch.__version__, numpy=np.__version__,
               python=platform.python_version(), host=socket.gethostname(), cores=os.cpu_count(),
               cuda=cuda, gpu=torch.cuda.get_device_name(0) if cuda else None,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               command=" ".join(["compare_torch_packed.py"] + sys.argv[1:]),
               dataset=dict(path=args.data, records=h["count"], height=h["height"],
                            width=h["width"], layout="nchw" if h["layout"] == 1 else "nhwc",
                            record_bytes=h["record_bytes"]),
               config=dict(batch=args.batch, prefetch=args.prefetch, epochs=args.epochs,
                           shuffle=args.shuffle, persistent_workers=args.persistent,
                           pin_memory=cuda, drop_cache=args.drop_cache),
               runs=[])
    for w in args.workers:
        res["runs"].append(run(args, torch, h, labels, w, cuda))
    torchbench.emit(res, args.json,
                    f"torch {res['torch']} on {res['host']} ({res['cores']} cores); "
                    f"{'pin + H2D to ' + res['gpu'] if cuda else 'no CUDA: host memory only'}; "
                    f"{h['count']} records of {h['height']}x{h['width']}x3 from {args.data}; "
                    f"batch {args.batch}, prefetch {args.prefetch}, "
                    f"{'shuffled' if args.shuffle else 'sequential'}", table(res))


if __name__ == "__main__":
    main()
