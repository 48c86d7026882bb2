#!/usr/bin/env bash
# Dependencies between the library's rooms run one way (docs/ARCHITECTURE.md,
# "Rooms"): a file may include the public headers (include/), its own room's
# headers and those of rooms of a lower rank, nothing else. Fails naming the
# file, the line and the rule broken; also fails on an include of a header
# that does not exist.
#   scripts/check_includes.sh [ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
declare -A rank=([common]=0 [io]=1 [decode]=1 [augment]=1 [remote]=1 [sampler]=1 [dataset]=2
                 [collate]=2 [worker]=3 [loader]=4 [cuda]=4 [api]=5)
status=0
checked=0
for room in "${!rank[@]}"; do
  [ -d "$root/$room" ] || continue
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    rel=${file#"$root"/}
    lineno=0
    while IFS= read -r line; do
      lineno=$((lineno + 1))
      [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]+\"([^\"]+)\" ]] || continue
      inc=${BASH_REMATCH[1]}
      target=${inc%%/*}
      if [[ $inc != */* ]]; then
        if [ ! -f "$root/include/$inc" ] && [ ! -f "$(dirname "$file")/$inc" ]; then
          echo "$rel:$lineno: includes \"$inc\", which does not exist" >&2; status=1
        fi
        continue
      fi
      if [ ! -f "$root/$inc" ]; then
        echo "$rel:$lineno: includes \"$inc\", which does not exist" >&2; status=1
        continue
      fi
      [ "$target" = "$room" ] && continue
      if [ -z "${rank[$target]+x}" ]; then
        echo "$rel:$lineno: includes \"$inc\" from $target/, which is no room of the library" >&2
        status=1
      elif (( rank[$target] >= rank[$room] )); then
        echo "$rel:$lineno: $room/ (rank ${rank[$room]}) includes \"$inc\" from $target/ (rank ${rank[$target]}): rooms include only lower ranks" >&2
        status=1
      fi
    done <"$file"
  done < <(find "$root/$room" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0)
done
if [ "$status" -eq 0 ]; then
  echo "check_includes: $checked files, every include points down"
fi
exit $status
