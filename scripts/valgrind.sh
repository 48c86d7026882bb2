#!/usr/bin/env bash
# Valgrind memcheck on the examples: examples/iterate_folder over a small
# image folder (the bundled photos in two classes), with its 4 workers. The
# loader's process and each forked worker must be clean: no invalid access, no
# use of uninitialised memory, no definite or indirect leak (valgrind follows
# a fork; every process writes its own log). --run-libc-freeres=no: valgrind would otherwise flush the stdio
# buffers a worker inherited when it _exits, printing the parent's lines twice.
# Builds build/ if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/examples/iterate_folder ] || { cmake -S . -B build >/dev/null && cmake --build build -j2 >/dev/null; }
data=$(mktemp -d /tmp/feeder-valgrind-XXXXXX)
trap 'rm -rf "$data"' EXIT
mkdir -p "$data/a" "$data/b"
cp bench/photos/astronaut.jpg bench/photos/chelsea.jpg bench/photos/coffee.jpg "$data/a/"
cp bench/photos/rocket.jpg bench/photos/hubble_deep_field.jpg bench/photos/retina.jpg "$data/b/"
log=$data/valgrind.%p.log
valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect \
  --errors-for-leak-kinds=definite,indirect --track-origins=yes --error-exitcode=99 \
  --run-libc-freeres=no \
  --log-file="$log" build/examples/iterate_folder "$data"
# The exit code covers the loader's process only, and a worker ended by
# SIGKILL or _exit writes no summary: read every log for error records.
status=0
pat='(Invalid (read|write|free)|uninitialised|Mismatched free|Syscall param|overlap|(definitely|indirectly) lost: [1-9])'
for f in "$data"/valgrind.*.log; do
  if grep -Eq "$pat" "$f"; then
    echo "valgrind: errors in $(basename "$f"):"; cat "$f"; status=1
  fi
done
n=$(ls "$data"/valgrind.*.log | wc -l)
echo "valgrind: $n processes checked (the loader's and its workers'), $( [ $status = 0 ] && echo clean || echo NOT clean)"
exit $status
