#!/usr/bin/env python3
"""Where a run's time went, from a feeder trace (feeder_loader_set_trace,
bench_loader --trace FILE): per track and span name, how many spans, their
total and mean length, and the share of the run's wall time they cover.

    python3 bench/trace_summary.py trace.json [--md]

A track's busy share says whether that stage is the bottleneck: a track busy
~100% of the time (the workers' decode, the GPU decoder's track) is the one
everything else waits on; a consumer whose `next` spans cover much of the run
is waiting for the loader.
"""
import json
import sys
from collections import defaultdict


def summarise(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    spans = defaultdict(list)  # (tid, name) -> [(ts, dur)]
    t0, t1 = None, None
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
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
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    wall, rows = summarise(sys.argv[1])
    rows = merge_workers(rows)
    print(f"trace {sys.argv[1]}: {wall:.1f} ms from the first span to the last")
    print()
    print("| track | span | count | total ms | mean µs | share of wall % |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for track, name, n, tot, mean, share in rows:
        print(f"| {track} | {name} | {n} | {tot:.1f} | {mean:.1f} | {share:.1f} |")


if __name__ == "__main__":
    main()
