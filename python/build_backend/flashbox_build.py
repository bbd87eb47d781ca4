"""The PEP 517 build backend of `pip install ./python`: standard library only, so it needs no network.

pip builds a package in an isolated environment into which it first installs the backend's
requirements from the package index; with setuptools as the backend that needs the network (or
`--no-build-isolation`). This backend requires nothing (pyproject.toml: requires = []), so
`pip install ./python` works offline, isolated or not, with any pip that builds in place (21.3+).

The wheel holds python/flashbox and a copy of libflashbox.so, which the package loads from beside
itself (flashbox/_lib.py). The library is, in order: $FLASHBOX_LIBRARY (a file, or a folder holding
libflashbox.so); the newest <repository>/build*/libflashbox.so (the README's build); else one built
now with CMake into <repository>/build-python (CUDA when nvcc is found), which takes minutes.
flashbox/_build_info.json records which file was copied. `pip install -e ./python` (PEP 660) installs
a path to python/ instead, and the package then finds the library as it does in the source tree.
"""

import base64
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile

NAME = "flashbox"
SUMMARY = "FlashAttention by hand in C++/CUDA: ctypes binding of libflashbox and PyTorch custom ops"
REQUIRES_PYTHON = ">=3.8"
LIB_NAME = "libflashbox.so"

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../python
REPO_DIR = os.path.dirname(PYTHON_DIR)
PACKAGE_DIR = os.path.join(PYTHON_DIR, NAME)


def _log(msg):
    print(f"flashbox build: {msg}", file=sys.stderr, flush=True)


def version():
    """The version of the library's CMake project: one number for the C API and the package."""
    cmake = os.path.join(REPO_DIR, "CMakeLists.txt")
    if os.path.isfile(cmake):
        with open(cmake, encoding="utf-8") as f:
            m = re.search(r"project\(\s*flashbox\s+VERSION\s+([0-9][0-9.]*)", f.read())
        if m:
            return m.group(1)
    info = os.path.join(PYTHON_DIR, "PKG-INFO")  # an sdist carries its version here
    if os.path.isfile(info):
        with open(info, encoding="utf-8") as f:
            m = re.search(r"^Version: (.+)$", f.read(), re.M)
        if m:
            return m.group(1).strip()
    raise RuntimeError(f"cannot find flashbox's version (no project(flashbox VERSION ...) in {cmake})")


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version()}\nSummary: {SUMMARY}\n"
            f"Requires-Python: {REQUIRES_PYTHON}\nProvides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n")


def _tag():
    # A native library inside: any Python 3, this platform (linux_x86_64, linux_aarch64, ...).
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


def _dist_info():
    return f"{NAME}-{version()}.dist-info"


def _find_library():
    """(path, how it was found), or (None, why not)."""
    env = os.environ.get("FLASHBOX_LIBRARY")
    if env:
        path = os.path.join(env, LIB_NAME) if os.path.isdir(env) else env
        if not os.path.isfile(path):
            raise RuntimeError(f"FLASHBOX_LIBRARY={env}: no such file ({path})")
        return path, "FLASHBOX_LIBRARY"
    builds = glob.glob(os.path.join(REPO_DIR, "build*", LIB_NAME))
    if builds:
        return max(builds, key=os.path.getmtime), "the newest build folder"
    return None, f"no {LIB_NAME} in {os.path.join(REPO_DIR, 'build*')}/ and FLASHBOX_LIBRARY is not set"


def _build_library():
    if not os.path.isfile(os.path.join(REPO_DIR, "CMakeLists.txt")):
        raise RuntimeError(f"{LIB_NAME} not found and no flashbox source tree at {REPO_DIR} to build it from; "
                           f"set FLASHBOX_LIBRARY to a built {LIB_NAME}")
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError(f"{LIB_NAME} not found and cmake is not installed to build it; build it "
                           f"(cmake -S . -B build && cmake --build build) or set FLASHBOX_LIBRARY")
    build = os.path.join(REPO_DIR, "build-python")
    configure = [cmake, "-S", REPO_DIR, "-B", build, "-DFLASHBOX_BUILD_TESTS=OFF"]
    # The library's CMake target is `flashbox`, and so is the command-line tool's file name: Ninja
    # takes the name as the file, so it is asked for the library's file instead.
    target = "flashbox"
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
        target = LIB_NAME
    _log(f"no {LIB_NAME} found: building it in {build} (minutes)")
    for cmd in (configure, [cmake, "--build", build, "--target", target, "-j", str(os.cpu_count() or 2)]):
        _log(" ".join(cmd))
        # The build's own output goes to stderr, which pip shows with -v or when the build fails.
        if subprocess.call(cmd, stdout=sys.stderr) != 0:
            raise RuntimeError(f"building {LIB_NAME} failed: {' '.join(cmd)}")
    return os.path.join(build, LIB_NAME), "built by this install"


def _library():
    path, how = _find_library()
    if path is None:
        path, how = _build_library()
    _log(f"{LIB_NAME}: {path} ({how})")
    return path, how


def _elf_needed(data):
    """The DT_NEEDED entries (shared libraries) of a little-endian ELF64 file's dynamic section."""
    import struct
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 6:  # SHT_DYNAMIC; its sh_link is the string table of the names
            continue
        strtab = sections[link][4]
        for at in range(offset, offset + size, entsize or 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", strtab + value)
                out.append(data[strtab + value:end].decode())
    return out


# The oldest Linux driver branch of each CUDA major version (CUDA's minor-version compatibility: a
# runtime of 13.x runs on any driver of the 580 branch or later).
_DRIVER_OF_CUDA_MAJOR = {12: "525.60.13", 13: "580.65.06"}


def _needs(lib, lib_bytes):
    """What the copied library needs on the machine that installs the wheel: its shared libraries
    (from the ELF file) and, for a CUDA build found in its build folder, the CUDA runtime it links
    statically (CMake's compiler record), the driver that runtime needs and the GPU architectures
    built (the CMake cache)."""
    needs = {"shared_libraries": [n for n in _elf_needed(lib_bytes) if not n.startswith(("libc.", "libm.", "ld-linux"))]}
    if not any(n.startswith("libcublas") for n in needs["shared_libraries"]):  # a CUDA build links cuBLAS
        needs["cuda_runtime"] = "none (a build without CUDA: the CPU path only)"
        return needs
    build = os.path.dirname(os.path.abspath(lib))
    for path in sorted(glob.glob(os.path.join(build, "CMakeFiles", "*", "CMakeCUDACompiler.cmake"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            m = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([0-9]+)\.([0-9]+)', f.read())
        if m:
            major = int(m.group(1))
            needs["cuda_runtime"] = f"{major}.{m.group(2)} (linked into libflashbox.so)"
            if major in _DRIVER_OF_CUDA_MAJOR:
                needs["cuda_driver"] = f">= {_DRIVER_OF_CUDA_MAJOR[major]} (NVIDIA's Linux driver for CUDA {major}.x)"
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.isfile(cache):
        with open(cache, encoding="utf-8", errors="replace") as f:
            m = re.search(r"^FLASHBOX_CUDA_ARCHS:[A-Z]+=(.*)$", f.read(), re.M)
        if m:
            needs["gpu_architectures"] = m.group(1)
    return needs



def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files):
    """files: [(name in the wheel, bytes)]; adds the dist-info and returns the wheel's file name."""
    dist = _dist_info()
    files = list(files) + [
        (f"{dist}/METADATA", _metadata().encode()),
        (f"{dist}/WHEEL", f"Wheel-Version: 1.0\nGenerator: flashbox_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n".encode()),
        (f"{dist}/top_level.txt", f"{NAME}\n".encode()),
    ]
    record = [_record_line(n, d) for n, d in files] + [f"{dist}/RECORD,,"]
    files.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"{NAME}-{version()}-{_tag()}.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, date_time=time.localtime()[:6])
            info.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


def _package_files():
    """The package's .py files, subpackages included, as paths relative to python/ ("flashbox/...")."""
    out = []
    for root, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(root, PYTHON_DIR).replace(os.sep, "/")
        out += [f"{rel}/{n}" for n in sorted(files) if n.endswith(".py")]
    return out


def _package_sources():
    out = []
    for rel in _package_files():
        with open(os.path.join(PYTHON_DIR, rel), "rb") as f:
            out.append((rel, f.read()))
    return out


# ---- PEP 517 / PEP 660 hooks --------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist = os.path.join(metadata_directory, _dist_info())
    os.makedirs(dist, exist_ok=True)
    with open(os.path.join(dist, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib, how = _library()
    with open(lib, "rb") as f:
        lib_bytes = f.read()
    info = {"library_source": os.path.abspath(lib), "found_by": how, "version": version(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "needs": _needs(lib, lib_bytes)}
    files = _package_sources() + [(f"{NAME}/{LIB_NAME}", lib_bytes),
                                  (f"{NAME}/_build_info.json", (json.dumps(info, indent=1) + "\n").encode())]
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth line puts python/ on sys.path: the package is the source tree's, library search included.
    return _write_wheel(wheel_directory, [(f"_{NAME}_editable.pth", (PYTHON_DIR + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{version()}"
    name = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "build_backend/flashbox_build.py"] + _package_files():
            tar.add(os.path.join(PYTHON_DIR, rel), arcname=f"{base}/{rel}")
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return name
