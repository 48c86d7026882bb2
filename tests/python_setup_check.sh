#!/usr/bin/env bash
# python/setup.py, each way of finding libfeeder, checked with readelf -d:
#  - README's "use it without installing" command as written, with relative
#    FEEDER_BUILD_DIR, build_py -d and build_ext -b, run from the checkout:
#    the module lands where asked, imports, and its RUNPATH is the build
#    folder (what using it without installing needs);
#  - FEEDER_PREFIX and pkg-config over `cmake --install` into a temporary
#    prefix: no RUNPATH into the build folder, and the module loads the
#    prefix's libfeeder.
# 77 (skipped) without Debian's python3 with setuptools, or without readelf.
#   tests/python_setup_check.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1"); src=$(realpath "$2")
py=${FEEDER_PYTHON:-/usr/bin/python3}
"$py" -c "import setuptools" 2>/dev/null || { echo "skipped: $py lacks setuptools"; exit 77; }
command -v readelf >/dev/null || { echo "skipped: no readelf"; exit 77; }
d=$(mktemp -d /tmp/feeder-setup-XXXXXX)
trap 'rm -rf "$d" "$build/python-setup-check"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
runpath() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'; }
module() { ls "$1"/feeder/_feeder*.so 2>/dev/null | head -1; }

# README's command, relative paths from the checkout (the build folder as
# seen from there; python/ is where setup.py used to resolve them).
rel=$(realpath --relative-to="$src" "$build")
out=$rel/python-setup-check
(cd "$src" && FEEDER_BUILD_DIR=$rel "$py" python/setup.py -q build_py -d "$out" \
    build_ext -b "$out" -t "$out/temp" > "$d/log" 2>&1) || { cat "$d/log" >&2; fail "README's command failed"; }
so=$(module "$build/python-setup-check")
[[ -n $so ]] || { cat "$d/log" >&2; ls -R "$src/python" | head -20 >&2; fail "no module in $out"; }
[[ ! -e $src/python/$rel ]] || fail "the module went under python/"
[[ :$(runpath "$so"): == *:$build:* ]] || fail "FEEDER_BUILD_DIR build: RUNPATH $(runpath "$so") lacks $build"
(cd "$d" && PYTHONPATH=$build/python-setup-check "$py" -c "import feeder; assert feeder.library_version") ||
    fail "the FEEDER_BUILD_DIR module does not import"

# An installed prefix, found through FEEDER_PREFIX and through pkg-config.
cmake --install "$build" --prefix "$d/prefix" > "$d/install.log" 2>&1 || { cat "$d/install.log" >&2; fail "cmake --install"; }
for how in prefix pkg-config; do
    o=$d/mod-$how
    if [[ $how == prefix ]]; then
        (cd "$d" && FEEDER_PREFIX=prefix "$py" "$src/python/setup.py" -q build_ext -b "mod-$how" \
            -t "mod-$how/temp" > "$d/log" 2>&1) || { cat "$d/log" >&2; fail "FEEDER_PREFIX build"; }
    else
        (cd "$d" && PKG_CONFIG_PATH=$d/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} "$py" "$src/python/setup.py" -q \
            build_ext -b "mod-$how" -t "mod-$how/temp" > "$d/log" 2>&1) || { cat "$d/log" >&2; fail "pkg-config build"; }
    fi
    grep -q "libfeeder from $([[ $how == prefix ]] && echo FEEDER_PREFIX || echo pkg-config): $d/prefix/lib" "$d/log" ||
        { cat "$d/log" >&2; fail "$how: not the prefix's libfeeder"; }
    so=$(module "$o")
    [[ -n $so ]] || fail "$how: no module in $o"
    rp=$(runpath "$so")
    [[ $rp != *"$build"* ]] || fail "$how: RUNPATH into the build folder: $rp"
    [[ :$rp: == *:$d/prefix/lib:* ]] || fail "$how: RUNPATH $rp lacks the prefix's lib"
    cp -r "$src/python/feeder/__init__.py" "$o/feeder/"
    (cd "$d" && PYTHONPATH=$o "$py" -c "
import feeder
maps = open('/proc/self/maps').read()
assert '$d/prefix/lib/libfeeder.so' in maps, [l for l in maps.splitlines() if 'libfeeder' in l]
") || fail "$how: the module does not load the prefix's libfeeder"
    echo "$how: RUNPATH $rp"
done
echo "python/setup.py: relative paths from the caller; RUNPATH build folder only for FEEDER_BUILD_DIR"
