#!/usr/bin/env bash
# compare_torch_packed.py --check on a RAW pack made by feeder-pack: the
# script's struct/numpy reading of the header, index, labels and record area
# agrees with the C writer (crc32c included). Exit 77 (skipped) when no
# python3 with numpy is found ($PYTHON, python3, /usr/bin/python3).
#   compare_torch_packed_check.sh FEEDER_PACK SOURCE_DIR
set -euo pipefail
tool=$1
src=$2
source "$(dirname "$0")/python_for.sh"
python_for 'import numpy' "with numpy"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
# Paths in a list file stay under its folder (absolute ones are refused).
cp "$src"/bench/photos/*.jpg "$d/"
i=0
for f in "$d"/*.jpg; do
    echo "$(basename "$f") $((i % 3))"
    i=$((i + 1))
done > "$d/list.txt"
for layout in nhwc nchw; do
    "$tool" --data "$d/list.txt" --out "$d/$layout.pack" --size 40x56 --resize 64 \
        --layout "$layout" --workers 1 --quiet
    "$py" "$src/bench/compare_torch_packed.py" --check "$d/$layout.pack" --expect-records "$i"
done
# A damaged record must be caught: flip one byte of record 0.
off=$("$py" -c "import struct,sys; print(struct.unpack_from('<Q', open(sys.argv[1],'rb').read(4096), 104)[0])" "$d/nhwc.pack")
printf '\x55' | dd of="$d/nhwc.pack" bs=1 seek=$((off + 7)) conv=notrunc status=none
if "$py" "$src/bench/compare_torch_packed.py" --check "$d/nhwc.pack" 2> "$d/err"; then
    echo "the check passed a damaged record" >&2
    exit 1
fi
grep -q "record 0 of $d/nhwc.pack: crc32c mismatch" "$d/err" || { cat "$d/err" >&2; exit 1; }
echo "damaged record 0 caught: $(cat "$d/err")"
