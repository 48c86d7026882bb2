#!/usr/bin/env bash
# The documentation is a reference, not a diary: README.md, docs/*.md and docs/api/*.md
# describe the project as it is, never the work history behind it (the words
# `diary` below lists); README.md stays short (at most
# 260 lines); and every relative link in them points to a file that exists.
#
#   bash scripts/check_docs.sh [SOURCE_DIR]
#
# Prints one line per finding (FILE:LINE: what) and exits 1 when there is
# any, 0 otherwise. Needs bash and GNU grep.
set -euo pipefail
src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$src"

files=(README.md)
for f in docs/*.md docs/api/*.md; do [[ -e $f ]] && files+=("$f"); done
[[ -f README.md ]] || { echo "check_docs: no README.md in $src"; exit 1; }

fail=0
finding() { echo "$1"; fail=1; }

# Diary words: work-history references with a number, the tracker's numbers,
# loaned hardware and the local GPU kit's folder. An S3 token or a function
# call is fine.
diary='\bsessions? [0-9]|\bcalls? [0-9]+\b|\bissues? ?#?[0-9]|--issue[0-9]|\(issue ?[0-9]|\.device/|\blent (h100|h200|gpus?|machines?|vms?|hosts?|cards?)\b'
while IFS= read -r hit; do
    finding "$hit: reads as a diary (work history, not the project as it is)"
done < <(grep -HniE "$diary" "${files[@]}" | cut -d: -f1,2 || true)

lines=$(wc -l < README.md)
(( lines <= 260 )) || finding "README.md: $lines lines, more than 260 (move the details to docs/)"

# Relative links: [text](target) and ![alt](target), outside code spans.
for f in "${files[@]}"; do
    dir=$(dirname "$f")
    while IFS=: read -r line target; do
        target=${target%%#*}
        target=${target%% *}
        [[ -z $target ]] && continue
        case $target in
            http://*|https://*|mailto:*|ftp://*) continue ;;
        esac
        if [[ $target == /* ]]; then path=$target; else path=$dir/$target; fi
        [[ -e $path ]] || finding "$f:$line: link to $target, which does not exist"
    done < <(sed 's/`[^`]*`//g' "$f" | grep -noP '\]\(\K[^)]+(?=\))' || true)
done

exit $fail
