#!/usr/bin/env python3
"""Where a run's time went, from a feeder trace (feeder_loader_set_trace,
bench_loader --trace FILE): per track and span name, how many spans, their
total and mean length, and the share of the run's wall time they cover.

    python3 bench/trace_summary.py trace.json [--after-ms MS]

--after-ms MS leaves out the first MS milliseconds (spans that start before
them), so the shares are those of the steady part of a run: start-up and the
first epoch (when the GPU decoders' workers decode every image until nvJPEG
is ready) otherwise weigh on every track.

A track's busy share says whether that stage is the bottleneck: a track busy
~100% of the time (the workers' decode, the GPU decoder's track) is the one
everything else waits on; a consumer whose `next` spans cover much of the run
is waiting for the loader.
"""
import json
import sys
from collections import defaultdict


def summarise(path, after_ms=0.0):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    spans = defaultdict(list)  # (tid, name) -> [(ts, dur)]
    t0, t1 = None, None
    first = min((e["ts"] for e in events if e.get("ph") == "X"), default=0.0)
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X" and e["ts"] >= first + after_ms * 1e3:
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
    args = sys.argv[1:]
    after = 0.0
    if len(args) == 3 and args[1] == "--after-ms":
        try:
            after = float(args[2])
        except ValueError:
            print(f"trace_summary: --after-ms wants milliseconds, not '{args[2]}'", file=sys.stderr)
            sys.exit(2)
        args = args[:1]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    wall, rows = summarise(args[0], after)
    rows = merge_workers(rows)
    skipped = f" (after the first {after:g} ms)" if after else ""
    print(f"trace {args[0]}: {wall:.1f} ms from the first span to the last{skipped}")
    print()
    print("| track | span | count | total ms | mean µs | share of wall % |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for track, name, n, tot, mean, share in rows:
        print(f"| {track} | {name} | {n} | {tot:.1f} | {mean:.1f} | {share:.1f} |")


if __name__ == "__main__":
    main()
