#!/usr/bin/env python3
"""Where a run's time went, from a feeder trace (feeder_loader_set_trace,
bench_loader --trace FILE): per track and span name, how many spans, their
total and mean length, and the share of the run's wall time they cover.

    python3 bench/trace_summary.py trace.json [--after-ms MS] [--until-ms MS] [--epoch N]

--after-ms MS leaves out the first MS milliseconds (spans that start before
them), so the shares are those of the steady part of a run: start-up and the
first epoch (when the GPU decoders' workers decode every image until nvJPEG
is ready) otherwise weigh on every track. --until-ms MS leaves out the spans
that start after MS (at or after it). --epoch N keeps
the spans that start while epoch N runs: from the first span tagged with
epoch N (a worker's read or decode, the consumer's next) to the end of the
last one, so two epochs of one run can be set side by side.

A track's busy share says whether that stage is the bottleneck: a track busy
~100% of the time (the workers' decode, the GPU decoder's track) is the one
everything else waits on; a consumer whose `next` spans cover much of the run
is waiting for the loader.
"""
import argparse
import json
import sys
from collections import defaultdict


def epoch_window(events, epoch):
    """(start, end) in µs of the spans tagged with `epoch`; None if none are."""
    tagged = [e for e in events
              if e.get("ph") == "X" and e.get("args", {}).get("epoch") == epoch]
    if not tagged:
        return None
    return (min(e["ts"] for e in tagged), max(e["ts"] + e["dur"] for e in tagged))


def summarise(path, after_ms=0.0, until_ms=None, epoch=None):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    spans = defaultdict(list)  # (tid, name) -> [(ts, dur)]
    t0, t1 = None, None
    first = min((e["ts"] for e in events if e.get("ph") == "X"), default=0.0)
    lo, hi = first + after_ms * 1e3, float("inf")
    if until_ms is not None:
        hi = first + until_ms * 1e3
    if epoch is not None:
        w = epoch_window(events, epoch)
        if w is None:
            raise ValueError(f"no span of epoch {epoch} in {path}")
        lo, hi = max(lo, w[0]), min(hi, w[1])
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X" and lo <= e["ts"] < hi:
            spans[(e["tid"], e["name"])].append((e["ts"], e["dur"]))
            t0 = e["ts"] if t0 is None else min(t0, e["ts"])
            t1 = e["ts"] + e["dur"] if t1 is None else max(t1, e["ts"] + e["dur"])
    wall = (t1 - t0) if t0 is not None else 0.0
    rows = []
    for (tid, name), v in spans.items():
        total = sum(d for _, d in v)
        rows.append((names.get(tid, str(tid)), name, len(v), total / 1e3, total / len(v),
                     100.0 * total / wall if wall else 0.0, tid))
    rows.sort(key=lambda r: (r[6], r[1]))
    return wall / 1e3, rows


def merge_workers(rows):
    """All 'worker N (pid ...)' tracks as one line per span name, busy % averaged."""
    out, acc = [], defaultdict(lambda: [0, 0.0, 0.0, 0])
    for track, name, n, tot, mean, share, tid in rows:
        if track.startswith("worker "):
            a = acc[name]
            a[0] += n
            a[1] += tot
            a[2] += share
            a[3] += 1
        else:
            out.append((track, name, n, tot, mean, share))
    for name, (n, tot, share, k) in sorted(acc.items()):
        out.append((f"workers (x{k}, mean busy per worker)", name, n, tot, tot * 1e3 / n,
                    share / k))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="trace_summary.py trace.json [--after-ms MS] "
                                       "[--until-ms MS] [--epoch N]")
    ap.add_argument("trace")
    ap.add_argument("--after-ms", type=float, default=0.0)
    ap.add_argument("--until-ms", type=float, default=None)
    ap.add_argument("--epoch", type=int, default=None)
    a = ap.parse_args()
    try:
        wall, rows = summarise(a.trace, a.after_ms, a.until_ms, a.epoch)
    except (OSError, ValueError) as err:
        print(f"trace_summary: {err}", file=sys.stderr)
        sys.exit(2)
    rows = merge_workers(rows)
    parts = []
    if a.after_ms:
        parts.append(f"after the first {a.after_ms:g} ms")
    if a.until_ms is not None:
        parts.append(f"until {a.until_ms:g} ms")
    if a.epoch is not None:
        parts.append(f"epoch {a.epoch}")
    skipped = f" ({', '.join(parts)})" if parts else ""
    print(f"trace {a.trace}: {wall:.1f} ms from the first span to the last{skipped}")
    print()
    print("| track | span | count | total ms | mean µs | share of wall % |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for track, name, n, tot, mean, share in rows:
        print(f"| {track} | {name} | {n} | {tot:.1f} | {mean:.1f} | {share:.1f} |")


if __name__ == "__main__":
    main()
