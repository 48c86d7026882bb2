#!/usr/bin/env bash
# bench_loader's decode-backend options, end to end on a 40-image dataset:
# --decoder parsing and its messages, the RAW pack cache (made once, reused,
# remade when the dataset is newer), the "n/a: reason" row of a GPU decoder
# that falls back (forced with --device -1, so it holds on any machine), the
# RAW pack of tar shards (a brace pattern, and one shard), the --decoder all
# table (raw in both orders) appended with --append-to, and its JSON read back with
# python3's json module (exit 77 when there is no python3); nothing written
# anywhere without --append-to.
#   bench_cli_check.sh BENCH_LOADER
set -euo pipefail
bench=$1
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
d=$(mktemp -d /tmp/feeder-bench-cli-XXXXXX)
trap 'rm -rf "$d"' EXIT
export FEEDER_DATA=$d/data
small=(--images 40 --size 32 --batch 8 --workers 1 --epochs 2 --device -1)

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_exact() { # expect_exact FILE TEXT
    [[ $(cat "$1") == "$2" ]] || { echo "--- got:"; cat "$1"; echo "--- want:"; echo "$2"; fail "$1"; } >&2
}

# Parsing: a bad value names --decoder and lists the choices; exit 2.
rc=0; "$bench" --decoder gpu 2> "$d/err" || rc=$?
[[ $rc == 2 ]] || fail "--decoder gpu exited $rc, want 2"
expect_exact "$d/err" "bench_loader: --decoder 'gpu': expected one of turbo|roi|nvjpeg|hybrid|raw|all
(bench_loader --help lists the options)"
rc=0; "$bench" --decoder all --threads-sweep 1,2 2> "$d/err" || rc=$?
[[ $rc == 2 ]] || fail "--decoder all --threads-sweep exited $rc, want 2"
expect_exact "$d/err" "bench_loader: --decoder all and --threads-sweep exclude each other (all runs every backend at one worker count)
(bench_loader --help lists the options)"
"$bench" --help | grep -q -- "--decoder turbo|roi|nvjpeg|hybrid|raw|all" || fail "--help lacks --decoder"

# Without --workers: one worker per usable CPU (under taskset -c 0, one). The
# report starts with the steady figure (median of the epochs after the
# first), then what the warm-up epoch measured, and the table's first figure
# is the steady one; --epochs 1 has no steady figure and says so.
usable=(--images 40 --size 32 --batch 8 --device -1)
taskset -c 0 "$bench" "${usable[@]}" > "$d/out" 2> "$d/err" || { cat "$d/err" >&2; fail "default workers run"; }
grep -q "^workers  1  epoch 3/3 " "$d/err" || { cat "$d/err" >&2; fail "taskset -c 0 did not give 1 worker"; }
[[ $(grep -m1 . "$d/out") =~ ^"steady: "[0-9]+" images/s, "[0-9.]+" GB/s, the median of epochs 2-3, with 1 worker (one per usable CPU; --workers N sets it)"$ ]] ||
    { cat "$d/out" >&2; fail "first line is not the steady figure"; }
[[ $(grep -m2 . "$d/out" | tail -1) =~ ^"first epoch: "[0-9]+" images/s, first batch after "[0-9.]+" ms (the warm-up: includes forking the workers and reading files the page cache did not hold yet; not in the steady figure)"$ ]] ||
    { cat "$d/out" >&2; fail "second line is not the first epoch's"; }
grep -qE "^\| workers \| pipeline \| decoder \| io +\| images/s \(steady\) \| images/s per epoch \|" "$d/out" ||
    { cat "$d/out" >&2; fail "steady is not the table's first figure"; }
taskset -c 0 "$bench" "${usable[@]}" --epochs 1 --workers 1 > "$d/out" 2> "$d/err"
[[ $(grep -m1 . "$d/out") == "steady: not measured (--epochs 1 runs only the warm-up epoch; 2 or more give a steady figure)" ]] ||
    { cat "$d/out" >&2; fail "--epochs 1 headline"; }
taskset -c 0 "$bench" "${usable[@]}" --epochs 2 --json > "$d/w.json" 2> "$d/err"
python3 - "$d/w.json" <<'EOF2'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["config"]["workers_from"] == "usable CPUs", d["config"]
assert [r["workers"] for r in d["runs"]] == [1], d["runs"]
EOF2
"$bench" --help | grep -q "per usable CPU" || fail "--help does not say the default worker count"

# The RAW pack: made beside the dataset on the first run...
"$bench" "${small[@]}" --decoder raw --no-append > "$d/out" 2> "$d/err"
pack=$d/data-32.pack
grep -qx "bench_loader: packing the RAW pack $pack from $d/data (32x32, resize 37, nhwc)" "$d/err" ||
    { cat "$d/err" >&2; fail "first raw run did not pack"; }
[[ -s $pack ]] || fail "no $pack"
grep -q "packed RAW 32x32x3 nhwc, read by auto" "$d/out" || { cat "$d/out" >&2; fail "raw run did not read the pack"; }
grep -qE "^\|  +1 \| raw pack \| -  +\| mmap \|" "$d/out" || { cat "$d/out" >&2; fail "raw row"; }
m1=$(stat -c %Y.%y "$pack")
# ...reused while it is not older than the dataset...
"$bench" "${small[@]}" --decoder raw --no-append > "$d/out" 2> "$d/err"
grep -qx "bench_loader: reusing the RAW pack $pack (not older than $d/data)" "$d/err" ||
    { cat "$d/err" >&2; fail "second raw run did not reuse the pack"; }
[[ $(stat -c %Y.%y "$pack") == "$m1" ]] || fail "the reused pack was rewritten"
# ...and made again when a sample file is newer.
touch -d "+10 seconds" "$d/data/class_03/img_00002.jpg"
"$bench" "${small[@]}" --decoder raw --no-append > "$d/out" 2> "$d/err"
grep -qx "bench_loader: rebuilding (the dataset is newer) the RAW pack $pack from $d/data (32x32, resize 37, nhwc)" "$d/err" ||
    { cat "$d/err" >&2; fail "a newer dataset did not rebuild the pack"; }
touch -d "+20 seconds" "$pack"  # now newer than the touched file again
"$bench" "${small[@]}" --decoder raw --no-append > /dev/null 2> "$d/err"
grep -q "reusing the RAW pack" "$d/err" || fail "rebuilt pack not reused"

# Tar shards: the same 40 images as two shards (GNU tar, key nnnnnn with its
# .jpg and a .cls of its class), packed under a name without the braces,
# reused, remade when a shard is newer; a missing shard is an error naming it.
i=0
for f in $(cd "$d/data" && ls */*.jpg | sort); do
    s=$((i / 20)); k=$(printf %06d $i); c=${f%%/*}
    mkdir -p "$d/stage/s$s"
    cp "$d/data/$f" "$d/stage/s$s/$k.jpg"
    printf '%d' $((10#${c#class_})) > "$d/stage/s$s/$k.cls"
    i=$((i + 1))
done
for s in 0 1; do tar -C "$d/stage" --sort=name -cf "$d/s-$s.tar" "s$s"; done
tpack=$d/s-0..1.tar-32.pack
"$bench" "${small[@]}" --data "$d/s-{0..1}.tar" --decoder raw --no-append > "$d/out" 2> "$d/err" ||
    { cat "$d/err" >&2; fail "--decoder raw on tar shards failed"; }
grep -qx "bench_loader: packing the RAW pack $tpack from $d/s-{0..1}.tar (32x32, resize 37, nhwc)" "$d/err" ||
    { cat "$d/err" >&2; fail "first tar raw run did not pack"; }
grep -q "^dataset $tpack: 40 records, 10 classes" "$d/out" || { cat "$d/out" >&2; fail "tar raw run did not read the pack"; }
"$bench" "${small[@]}" --data "$d/s-{0..1}.tar" --decoder raw --no-append > /dev/null 2> "$d/err"
grep -qx "bench_loader: reusing the RAW pack $tpack (not older than $d/s-{0..1}.tar)" "$d/err" ||
    { cat "$d/err" >&2; fail "second tar raw run did not reuse the pack"; }
touch -d "+10 seconds" "$d/s-1.tar"
"$bench" "${small[@]}" --data "$d/s-{0..1}.tar" --decoder raw --no-append > /dev/null 2> "$d/err"
grep -qx "bench_loader: rebuilding (the dataset is newer) the RAW pack $tpack from $d/s-{0..1}.tar (32x32, resize 37, nhwc)" "$d/err" ||
    { cat "$d/err" >&2; fail "a newer shard did not rebuild the pack"; }
rc=0; "$bench" "${small[@]}" --data "$d/s-{0..2}.tar" --decoder raw --no-append > /dev/null 2> "$d/err" || rc=$?
[[ $rc == 1 ]] || fail "a missing shard exited $rc, want 1"
expect_exact "$d/err" "bench_loader: --decoder raw: $d/s-{0..2}.tar: $d/s-2.tar: cannot open tar shard: No such file or directory"
# One shard named as a file is tar too.
"$bench" "${small[@]}" --data "$d/s-0.tar" --decoder raw --no-append > "$d/out" 2> "$d/err"
grep -qx "bench_loader: packing the RAW pack $d/s-0.tar-32.pack from $d/s-0.tar (32x32, resize 37, nhwc)" "$d/err" ||
    { cat "$d/err" >&2; fail "one shard did not pack"; }
grep -q "^dataset $d/s-0.tar-32.pack: 20 records" "$d/out" || { cat "$d/out" >&2; fail "one shard's pack"; }

# A GPU decoder that cannot run is a row saying why, with no figure.
"$bench" "${small[@]}" --decoder nvjpeg --no-append > "$d/out" 2> "$d/err"
grep -qE "^\|  +1 \| eval  +\| nvjpeg  +\| [a-z_]+ +\| n/a: no GPU path: device = -1(: [^|]*)? +\|( +- \|)+$" "$d/out" ||
    { cat "$d/out" >&2; fail "nvjpeg fallback row"; }
grep -q "images/s" "$d/err" && { cat "$d/err" >&2; fail "the fallback was measured"; }

# --decoder all: the table, appended where --append-to says.
"$bench" "${small[@]}" --decoder all --shuffle 0 --append-to "$d/B.md" --label testbox > "$d/out" 2> "$d/err"
grep -q "^## .*, testbox: bench_loader --decoder all, eval$" "$d/B.md" || fail "no record in B.md"
# The decoders in the order asked (--shuffle 0: sequential), raw in both orders,
# shuffled first; the rows in that order.
for row in "turbo +\| sequential" "roi +\| sequential" "raw +\| shuffled" "raw +\| sequential"; do
    grep -qE "^\| $row +\| +[0-9]+ \|" "$d/B.md" || { cat "$d/B.md" >&2; fail "no $row row"; }
done
for b in nvjpeg hybrid; do
    grep -qE "^\| $b +\| sequential +\| n/a: no GPU path: device = -1" "$d/B.md" || { cat "$d/B.md" >&2; fail "no $b n/a row"; }
done
[[ $(grep -E "^\| (turbo|roi|nvjpeg|hybrid|raw) " "$d/B.md" | cut -d'|' -f2,3 | tr -d ' ') == \
   $'turbo|sequential\nroi|sequential\nnvjpeg|sequential\nhybrid|sequential\nraw|shuffled\nraw|sequential' ]] ||
    { cat "$d/B.md" >&2; fail "rows out of order"; }
grep -q "^| backend | " "$d/out" || fail "no table on stdout"
grep -q "^Columns: images/s = " "$d/out" || fail "no column notes"

# ...and as JSON, parsed back.
"$bench" "${small[@]}" --decoder all --shuffle 0 --json --no-append > "$d/all.json" 2> "$d/err"
# By default the decoders read shuffled, eval included (the order training
# reads); raw still runs both orders.
"$bench" "${small[@]}" --decoder all --json --no-append > "$d/all1.json" 2> "$d/err"
grep -q "^== raw, shuffled$" "$d/err" && grep -q "^== raw, sequential$" "$d/err" &&
    grep -q "^== turbo, shuffled$" "$d/err" || { cat "$d/err" >&2; fail "--shuffle 1 orders"; }
python3 - "$d/all1.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows = [(b["backend"], b["order"]) for b in d["backends"]]
assert rows == [("turbo", "shuffled"), ("roi", "shuffled"), ("nvjpeg", "shuffled"),
                ("hybrid", "shuffled"), ("raw", "shuffled"), ("raw", "sequential")], rows
assert d["config"]["shuffle"] == 1, d["config"]
EOF
python3 - "$d/all.json" "$pack" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["mode"] == "decoders", d["mode"]
for k in ("command", "label", "date", "cpu", "version"):
    assert isinstance(d[k], str) and d[k], k
assert d["command"].startswith("bench_loader --images 40 "), d["command"]
assert d["dataset"]["images"] == 40 and d["dataset"]["classes"] == 10, d["dataset"]
assert d["raw_pack"]["path"] == sys.argv[2], d["raw_pack"]
assert d["raw_pack"]["data_bytes"] == 40 * 32 * 32 * 3, d["raw_pack"]
assert d["config"]["workers"] == 1 and d["config"]["batch"] == 8, d["config"]
rows = [(b["backend"], b["order"]) for b in d["backends"]]
assert rows == [("turbo", "sequential"), ("roi", "sequential"), ("nvjpeg", "sequential"),
                ("hybrid", "sequential"), ("raw", "shuffled"), ("raw", "sequential")], rows
num = (int, float)
for b in d["backends"]:
    if b["backend"] in ("nvjpeg", "hybrid"):
        assert b["status"] == "n/a", b
        assert b["reason"].startswith("no GPU path: device = -1"), b
        assert set(b) == {"backend", "order", "status", "reason"}, b  # no figure at all
        continue
    assert b["status"] == "ok" and b["reason"] is None, b
    for k in ("images_per_s", "mb_per_s", "cpu_cores_busy", "stall_ms_per_epoch",
              "read_us_per_image", "decode_us_per_image", "transform_us_per_image"):
        assert isinstance(b[k], num) and not isinstance(b[k], bool), (b["backend"], k, b[k])
    assert b["images_per_s"] > 0 and b["mb_per_s"] > 0, b
    # The loader and one worker: some CPU, and no more than this machine's
    # cores plus scheduling slack.
    assert 0 < b["cpu_cores_busy"] < 64, b
    assert b["gpu_busy_pct"] is None and b["device_batches"] is False, b
    assert b["gpu_decode_us_per_image"] is None and b["gpu_fallback"] is None, b
    assert b["hybrid_cpu_share_pct"] is None, b
    assert len(b["images_per_s_per_epoch"]) == 2, b
    if b["backend"] == "raw":
        assert b["decode_us_per_image"] == 0, b
    else:
        assert b["decode_us_per_image"] > 0, b
print("bench_loader --decoder all JSON: 5 backends in 6 rows (raw in both orders), 2 n/a, "
      "numbers are numbers")
EOF
# Nothing is written but stdout unless asked: a plain run (table) and a --json
# run leave the checkout's docs/BENCHMARKS.md and the working directory as
# they were, and print no "appended to" line.
src=$(cd "$(dirname "$0")/.." && pwd)
before=$(sha256sum "$src/docs/BENCHMARKS.md")
mkdir "$d/cwd"
(cd "$d/cwd" && "$bench" "${small[@]}" > "$d/out" 2> "$d/err" &&
   "$bench" "${small[@]}" --json > "$d/out.json" 2>> "$d/err")
[[ $(sha256sum "$src/docs/BENCHMARKS.md") == "$before" ]] || fail "a run without --append-to changed docs/BENCHMARKS.md"
[[ -z $(ls -A "$d/cwd") ]] || fail "a run wrote into its working directory: $(ls -A "$d/cwd")"
! grep -q "appended to" "$d/err" || fail "a run without --append-to appended: $(cat "$d/err")"
echo "bench_loader CLI checks passed"
