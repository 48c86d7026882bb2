# Sourced by the script tests that run Python. python_for CODE [WHAT] sets
# $py to the first of $PYTHON, python3 and /usr/bin/python3 that runs CODE
# (the first python3 on PATH may lack what Debian's has), or skips the test:
# "no python3 WHAT: skipped", exit 77.
python_for() {
    py=""
    local p
    for p in "${PYTHON:-}" python3 /usr/bin/python3; do
        [[ -n $p ]] && "$p" -c "$1" >/dev/null 2>&1 && { py=$p; return 0; }
    done
    echo "no python3${2:+ $2}: skipped"
    exit 77
}
