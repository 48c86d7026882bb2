#!/usr/bin/env python3
"""Draw compare_torch.py --sweep's JSON as a PNG: images/s against workers.

    python3 bench/plot_compare.py sweep.json docs/img/compare_torch.png

One panel per pipeline (eval, train), one line per loader and backend
(PyTorch DataLoader, torchvision GPU decode, feeder with each --feeder-decoders
backend that ran), workers on a log2 axis, the median images/s of the runs,
and the machine and date in the title. Needs matplotlib (Debian:
python3-matplotlib); it is kept out of compare_torch.py so the GPU machine,
which may lack it, can still measure.
"""

import argparse
import json
import sys


def series(doc, pipeline):
    """{line label: [(workers, images/s)]} for one pipeline, in legend order."""
    rows = sorted((r for r in doc["rows"] if r["pipeline"] == pipeline),
                  key=lambda r: r["workers"])
    out = {}

    def add(label, w, point):
        if point and point.get("status", "ok") == "ok" and point.get("median_images_per_s"):
            out.setdefault(label, []).append((w, point["median_images_per_s"]))

    for r in rows:
        add("PyTorch DataLoader", r["workers"], r.get("torch"))
        add("torchvision GPU decode", r["workers"], r.get("torch_gpu_decode"))
        for dec, point in r.get("feeder", {}).items():
            add(f"feeder ({dec})", r["workers"], point)
        add("feeder (Python)", r["workers"], r.get("feeder_python"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="compare_torch.py --sweep --json-out file")
    ap.add_argument("png", help="the chart to write")
    ap.add_argument("--dpi", type=int, default=120)
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot_compare.py: matplotlib is needed (Debian: python3-matplotlib): {e}")
    with open(args.json, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("mode") != "sweep" or not doc.get("rows"):
        sys.exit(f"plot_compare.py: {args.json}: not compare_torch.py --sweep output")
    pipelines = [p for p in doc["config"]["pipelines"]
                 if any(r["pipeline"] == p for r in doc["rows"])]
    fig, axes = plt.subplots(1, len(pipelines), figsize=(6 * len(pipelines), 4.5),
                             squeeze=False)
    styles = {"PyTorch DataLoader": dict(color="tab:orange", marker="s"),
              "torchvision GPU decode": dict(color="tab:red", marker="^", linestyle="--")}
    feeder_colors = ["tab:blue", "tab:green", "tab:purple", "tab:cyan"]
    names = {"eval": "eval: resize 256 + centre crop 224",
             "train": "train: RandomResizedCrop 224 + flip"}
    for ax, p in zip(axes[0], pipelines):
        lines = series(doc, p)
        k = 0
        for label, pts in lines.items():
            st = styles.get(label)
            if st is None:
                st = dict(color=feeder_colors[k % len(feeder_colors)], marker="o")
                k += 1
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=label, linewidth=2, **st)
        ax.set_xscale("log", base=2)
        ws = doc["config"]["workers"]
        ax.set_xticks(ws)
        ax.set_xticklabels([str(w) for w in ws])
        ax.set_xlabel("DataLoader workers / feeder worker processes")
        ax.set_ylabel("images/s (median of runs)")
        ax.set_ylim(bottom=0)
        ax.set_title(names.get(p, p))
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
    m = doc["machine"]
    gpu = f", {m['gpu']}" if m.get("gpu") else ""
    fig.suptitle(f"feeder vs PyTorch, {doc['dataset']['images']} JPEGs, batch "
                 f"{doc['config']['batch']}: {m['label']}{gpu}, {doc['date']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.png, dpi=args.dpi)
    print(f"wrote {args.png}", file=sys.stderr)


if __name__ == "__main__":
    main()
