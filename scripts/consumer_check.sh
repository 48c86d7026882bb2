#!/usr/bin/env bash
# Install a build into a temporary prefix and link tests/consumer/consumer.c
# against it the four ways a C user links feeder, then run each program:
#   pkg-config, shared     cc ... $(pkg-config --cflags --libs feeder) -Wl,-rpath,LIBDIR
#   pkg-config, static     cc ... $(pkg-config --static --cflags --libs feeder), libfeeder.a named
#   CMake feeder::feeder          project(x C), the CUDA toolkit hidden
#   CMake feeder::feeder_static   the same
# The programs run without the build tree on LD_LIBRARY_PATH; the shared ones must resolve
# libfeeder from the prefix (and, where the build made the GPU plugin, load
# it from there), the static ones must not need libfeeder at all. Also checks
# what the installed libraries export and link: libfeeder only feeder_*, no
# CUDA library; the plugin only its table.
#   scripts/consumer_check.sh [BUILD_DIR [SOURCE_DIR]]
set -euo pipefail
src=$(realpath "${2:-$(dirname "$0")/..}")
build=$(realpath "${1:-$src/build}")
[ -f "$build/CMakeCache.txt" ] || { echo "consumer_check: $build is no CMake build" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/feeder-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "consumer_check: FAIL: $*" >&2; exit 1; }
unset FEEDER_CUDA_PLUGIN
# The install's own RPATH must find libfeeder: the build tree leaves the
# loader's path. Dependencies the environment points at (a machine with them
# outside the system folders, as the GPU machine's /opt/deps) stay found.
build_abs=$(realpath "$build")
LD_LIBRARY_PATH=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | { grep -v "^$build_abs" || true; } | paste -sd: -)
[ -n "$LD_LIBRARY_PATH" ] && export LD_LIBRARY_PATH || unset LD_LIBRARY_PATH

echo "== install into $prefix =="
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
pc=$(find "$prefix" -name feeder.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no feeder.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
libdir=$(realpath "$(pkg-config --variable=libdir feeder)")
[ -f "$libdir/libfeeder.so.0" ] && [ -f "$libdir/libfeeder.a" ] || fail "no libfeeder.so.0 or libfeeder.a in $libdir"
plugin=""
[ -e "$libdir/libfeeder_cuda.so.0" ] && plugin=$libdir/libfeeder_cuda.so.0

echo "== what the installed libraries export and need =="
bad=$(nm -D --defined-only "$libdir/libfeeder.so.0" | awk '{print $3}' | grep -v '^feeder_[a-z]' || true)
[ -z "$bad" ] || fail "libfeeder.so exports more than feeder_*: $bad"
if ldd "$libdir/libfeeder.so.0" | grep -Ei 'cuda|nvjpeg|stdc\+\+'; then
  fail "libfeeder.so.0 needs a CUDA or C++ library"
fi
if [ -n "$plugin" ]; then
  exports=$(nm -D --defined-only "$plugin" | awk '{print $3}')
  [ "$exports" = feeder__cuda_plugin_v1 ] || fail "the plugin exports more than its table: $exports"
  echo "plugin: $plugin, exports $exports"
else
  echo "plugin: none (a build without CUDA)"
fi

# A folder dataset: two classes from bench/photos.
data=$tmp/data
mkdir -p "$data/a" "$data/b"
photos=("$src"/bench/photos/*.jpg)
n=${#photos[@]}
for ((i = 0; i < n; i++)); do
  if ((i % 2)); then cp "${photos[$i]}" "$data/b/"; else cp "${photos[$i]}" "$data/a/"; fi
done

# run NAME PROGRAM KIND: runs it (the build tree off LD_LIBRARY_PATH) and checks its line.
run() {
  local name=$1 prog=$2 kind=$3
  local out
  out=$("$prog" "$data") || fail "$name: the program failed: $out"
  echo "$name: $out"
  [[ $out == *", $n images, "* ]] || fail "$name: expected $n images"
  if [ "$kind" = shared ]; then
    local got
    got=$(ldd "$prog" | awk '$1 == "libfeeder.so.0" {print $3}')
    [ -n "$got" ] && [ "$(realpath "$got")" = "$(realpath "$libdir/libfeeder.so.0")" ] ||
      { ldd "$prog"; fail "$name: libfeeder.so.0 is not resolved from $libdir"; }
    # Next to libfeeder: the plugin loads (then only the device can be missing).
    if [ -n "$plugin" ] && [[ $out == *"plugin did not load"* ]]; then
      fail "$name: the GPU plugin beside libfeeder did not load"
    fi
  else
    if ldd "$prog" | grep -E 'libfeeder|cuda|stdc\+\+'; then
      fail "$name: a static program needs libfeeder, CUDA or C++ at run time"
    fi
  fi
}

cd "$tmp"
echo "== pkg-config, shared =="
# shellcheck disable=SC2046
cc -std=c11 -o pc_shared "$src/tests/consumer/consumer.c" $(pkg-config --cflags --libs feeder) \
  -Wl,-rpath,"$(pkg-config --variable=libdir feeder)"
run "pkg-config shared" ./pc_shared shared

echo "== pkg-config, static =="
# pkg-config --static adds what libfeeder.a needs; the linker would still take
# libfeeder.so when both lie in libdir, so the archive is named.
libs=$(pkg-config --static --libs feeder | sed 's/-lfeeder\b/-l:libfeeder.a/')
# shellcheck disable=SC2046,SC2086
cc -std=c11 -o pc_static "$src/tests/consumer/consumer.c" $(pkg-config --static --cflags feeder) $libs
run "pkg-config static" ./pc_static static
if [ -n "$plugin" ]; then
  out=$(FEEDER_CUDA_PLUGIN=$plugin ./pc_static "$data")
  echo "pkg-config static, FEEDER_CUDA_PLUGIN=$plugin: $out"
  [[ $out != *"plugin did not load"* ]] || fail "FEEDER_CUDA_PLUGIN did not load the plugin"
fi

# CMake consumers: C only, and no CUDA toolkit to be found.
nocuda_path=$(tr : '\n' <<<"$PATH" | grep -vi cuda | paste -sd: -)
for target in feeder::feeder feeder::feeder_static; do
  kind=shared
  [ "$target" = feeder::feeder_static ] && kind=static
  echo "== CMake $target =="
  dir=$tmp/cmake-$kind
  env -u CUDACXX -u CUDA_PATH -u CUDA_HOME PATH="$nocuda_path" \
    cmake -S "$src/tests/consumer" -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DFEEDER_TARGET=$target >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "CMake $target: configure"; }
  env PATH="$nocuda_path" cmake --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; fail "CMake $target: build"; }
  run "CMake $target" "$dir/consumer" $kind
done
echo "consumer_check: all four ways link and run"
