"""Build feeder's Python module (a CPython extension in C) against libfeeder.

Where libfeeder is found, first match wins:
  FEEDER_BUILD_DIR=/path/to/build   an in-tree CMake build (headers from ../include)
  FEEDER_PREFIX=/usr/local          an installed prefix (include/, lib/ or lib64/)
  pkg-config feeder                 an installed feeder.pc
  ../build                          the checkout's default build folder
Relative paths (FEEDER_BUILD_DIR, FEEDER_PREFIX, and the folders given to
build_py -d, build_ext -b and -t and the like) are taken from the directory
setup.py is run from, as a shell user expects.
The module is linked with an rpath to a build folder or a prefix the dynamic
linker does not search (so it loads without LD_LIBRARY_PATH); a library in a
system folder (/usr/lib, /usr/local/lib, ...) needs none, and an installed
module then carries no RUNPATH to it. A module built from FEEDER_PREFIX or
pkg-config never points into a build folder.

CUDA: when libfeeder's GPU plugin (libfeeder_cuda.so.0) lies next to it and
cuda_runtime_api.h is found (CUDA_HOME, CUDA_PATH, /usr/local/cuda, nvcc on
PATH), the module includes
feeder_cuda.h and links cudart, so __dlpack__(stream=...) makes the consumer's
stream wait on the batch's event. FEEDER_PY_CUDA=0 or 1 forces the choice.

    python3 -m pip install --no-build-isolation ./python
    FEEDER_BUILD_DIR=$PWD/build python3 python/setup.py build_ext --build-lib build/python
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
CALLER = os.getcwd()  # relative paths the user gave are from here

# Options of setup.py's commands whose value is a folder or file.
_PATH_OPTIONS = {"-d", "--build-lib", "-b", "--build-temp", "-t", "--build-base",
                 "--build-platlib", "--build-purelib", "--build-scripts", "--dist-dir",
                 "--install-lib", "--prefix", "--root", "--home", "--record", "--egg-base",
                 "-e"}


def _from_caller(path):
    return os.path.normpath(os.path.join(CALLER, os.path.expanduser(path)))


def _absolute_path_args(argv):
    """argv with the relative paths of _PATH_OPTIONS made absolute from CALLER
    (setup.py changes to its own folder before setuptools reads them)."""
    out, take = [], False
    for a in argv:
        if take:
            a, take = _from_caller(a), False
        elif a in _PATH_OPTIONS:
            take = True
        elif a.startswith("--") and a.split("=", 1)[0] in _PATH_OPTIONS and "=" in a:
            key, value = a.split("=", 1)
            a = f"{key}={_from_caller(value)}"
        out.append(a)
    return out


sys.argv = _absolute_path_args(sys.argv)
os.chdir(HERE)  # setuptools resolves sources and packages from here


def _libdir_has(libdir):
    return any(os.path.exists(os.path.join(libdir, n)) for n in ("libfeeder.so", "libfeeder.so.0"))


def find_feeder():
    """(include dirs, library dir, how it was found)."""
    build = os.environ.get("FEEDER_BUILD_DIR")
    if build:
        build = _from_caller(build)
        if not _libdir_has(build):
            sys.exit(f"FEEDER_BUILD_DIR={build}: no libfeeder.so there (cmake --build it first)")
        return [os.path.join(SOURCE, "include")], build, "FEEDER_BUILD_DIR"
    prefix = os.environ.get("FEEDER_PREFIX")
    if prefix:
        prefix = _from_caller(prefix)
        for sub in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
            if _libdir_has(os.path.join(prefix, sub)):
                return [os.path.join(prefix, "include")], os.path.join(prefix, sub), "FEEDER_PREFIX"
        sys.exit(f"FEEDER_PREFIX={prefix}: no libfeeder.so under lib/ or lib64/")
    pc_error = ""
    if shutil.which("pkg-config"):
        try:
            cflags = subprocess.run(["pkg-config", "--cflags-only-I", "feeder"], check=True,
                                    capture_output=True, text=True).stdout.split()
            libdir = subprocess.run(["pkg-config", "--variable=libdir", "feeder"], check=True,
                                    capture_output=True, text=True).stdout.strip()
            return [f[2:] for f in cflags], os.path.realpath(libdir), "pkg-config"
        except subprocess.CalledProcessError as e:
            pc_error = (e.stderr or "").strip()
    build = os.path.join(SOURCE, "build")
    if _libdir_has(build):
        return [os.path.join(SOURCE, "include")], build, "../build"
    sys.exit("libfeeder not found: set FEEDER_BUILD_DIR (an in-tree build) or FEEDER_PREFIX "
             "(an install), or install feeder.pc where pkg-config looks"
             + (f" (pkg-config feeder: {pc_error})" if pc_error else ""))


def feeder_has_gpu_plugin(libdir):
    """Whether libfeeder was built with CUDA: its GPU plugin lies next to it."""
    return os.path.exists(os.path.join(libdir, "libfeeder_cuda.so.0"))


def find_cuda():
    """(include dir, library dir) of a CUDA toolkit, or None."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    for root in filter(None, roots):
        inc = os.path.join(root, "include")
        if os.path.exists(os.path.join(inc, "cuda_runtime_api.h")):
            for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
                lib = os.path.join(root, sub)
                if os.path.isdir(lib) and any(n.startswith("libcudart.so") for n in os.listdir(lib)):
                    return inc, lib
    if os.path.exists("/usr/include/cuda_runtime_api.h"):
        return "/usr/include", "/usr/lib/x86_64-linux-gnu"
    return None


# Folders the dynamic linker searches without being told (Debian's
# /etc/ld.so.conf.d and the built-in ones): a library there needs no rpath.
SYSTEM_LIBDIRS = {"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
                  "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                  "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"}

include_dirs, libdir, how = find_feeder()
include_dirs = [os.path.join(HERE, "src")] + include_dirs
library_dirs = [libdir]
libraries = ["feeder"]
rpaths = [] if os.path.realpath(libdir) in SYSTEM_LIBDIRS else [libdir]
macros = []
force = os.environ.get("FEEDER_PY_CUDA")
cuda = None
if force != "0" and (force == "1" or feeder_has_gpu_plugin(libdir)):
    cuda = find_cuda()
    if cuda is None and force == "1":
        sys.exit("FEEDER_PY_CUDA=1 but no cuda_runtime_api.h found (set CUDA_HOME)")
if cuda:
    include_dirs.append(cuda[0])
    library_dirs.append(cuda[1])
    libraries.append("cudart")
    if os.path.realpath(cuda[1]) not in SYSTEM_LIBDIRS:
        rpaths.append(cuda[1])
    macros.append(("FEEDER_PY_CUDA", "1"))
print(f"feeder: libfeeder from {how}: {libdir}; CUDA {'ON (' + cuda[0] + ')' if cuda else 'OFF'}",
      file=sys.stderr)

# python/src: one concern a file (feederpy.h lists them).
SOURCES = ["errors.c", "dataset.c", "loader_state.c", "augment.c", "options.c", "batch.c", "fields.c", "iter.c",
           "loader.c", "batches.c", "sampler.c", "convert.c", "module.c"]
ext = Extension(
    "feeder._feeder",
    sources=[os.path.join("src", f) for f in SOURCES],
    include_dirs=include_dirs,
    library_dirs=library_dirs,
    libraries=libraries,
    runtime_library_dirs=rpaths,
    define_macros=macros,
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type",
                        # only PyInit__feeder is exported (PyMODINIT_FUNC), as when the
                        # module was one file: calls between its files stay direct
                        "-fvisibility=hidden"],
)


class build_ext_for_config(build_ext):
    """Rebuild when the configuration changed: the sources do not say whether
    FEEDER_PY_CUDA or the library folder differ from the last build, so
    setuptools would reuse objects of the other kind from build/."""

    def run(self):
        config = repr((macros, include_dirs, library_dirs, libraries, rpaths))
        stamp = os.path.join(self.build_temp, "feeder-config")
        try:
            with open(stamp) as f:
                self.force = self.force or f.read() != config
        except OSError:
            self.force = True
        super().run()
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(config)


setup(
    name="feeder",
    version="0.1.0",
    description="Python binding of feeder, a C data loader: zero-copy batches through DLPack",
    packages=["feeder"],
    ext_modules=[ext],
    cmdclass={"build_ext": build_ext_for_config},
    python_requires=">=3.9",
)
