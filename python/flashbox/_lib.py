"""ctypes view of include/flashbox/flashbox.h: the structs, the prototypes, the error codes.

No torch here: `import flashbox` gives this layer on any machine with a libflashbox.so. The library is
searched, in order, at $FLASHBOX_LIBRARY (a file, or a folder holding libflashbox.so), beside this
package, and in the repository's build folders (<repo>/build*/libflashbox.so, newest first).

Every field below mirrors the header one for one, in the same order and with the same C type, so the
layout is the compiler's (tests/python/test_ctypes_cpu.py checks the offsets against a C compiler).
The enums are C `int`; pointers whose pointee type does not matter to Python (`const void *`,
`float *lse`, `cudaStream_t`) are `c_void_p`, which has the same size and alignment.
"""

from __future__ import annotations

import ctypes
import enum
import glob
import os
import threading

__all__ = [
    "Device", "DType", "Impl", "ErrorCode", "FlashboxError", "LibraryNotFoundError",
    "AttentionArgs", "AttentionGradArgs", "library", "library_path", "check", "forward", "backward",
    "backward_workspace_size", "version", "cuda_device_count", "impl_name", "last_kernel",
    "last_scratch_peak_bytes", "last_error", "build_info",
]


class DType(enum.IntEnum):
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    FLOAT8_E4M3 = 3  # q, k, v of forward_ext (AttentionExt.out_dtype and the descales); kvcache caches (cache_dtype)


class Device(enum.IntEnum):
    CPU = 0
    CUDA = 1


class Impl(enum.IntEnum):
    AUTO = 0
    NAIVE = 1
    BLOCKED = 2
    FLASH = 3


class ErrorCode(enum.IntEnum):
    OK = 0
    NULL_POINTER = 1
    INVALID_SIZE = 2
    SIZE_OVERFLOW = 3
    HEADS_MISMATCH = 4
    UNSUPPORTED_HEAD_DIM = 5
    UNSUPPORTED_DTYPE = 6
    UNSUPPORTED_IMPL = 7
    BAD_STRIDE = 8
    MISALIGNED = 9
    NO_DEVICE = 10
    OUT_OF_MEMORY = 11
    CUDA = 12
    INVALID_ARGUMENT = 13
    INTERNAL = 14


class FlashboxError(RuntimeError):
    """A failed C API call: `code` is the FLASHBOX_ERR_* value, `message` is flashbox_last_error()."""

    def __init__(self, code: int, message: str):
        self.code = int(code)
        self.message = message
        try:
            self.code_name = "FLASHBOX_ERR_" + ErrorCode(self.code).name
        except ValueError:
            self.code_name = f"flashbox error {self.code}"
        super().__init__(f"{self.code_name}: {message}")

    def __reduce__(self):  # picklable, for multiprocessing and pytest-xdist
        return (type(self), (self.code, self.message))


class LibraryNotFoundError(OSError):
    """No libflashbox.so where the package looks for it; the message lists the places tried."""


_I64x3 = ctypes.c_int64 * 3


class AttentionArgs(ctypes.Structure):
    """flashbox_attention_args."""

    _fields_ = [
        ("device", ctypes.c_int),          # flashbox_device
        ("dtype", ctypes.c_int),           # flashbox_dtype
        ("impl", ctypes.c_int),            # flashbox_impl
        ("batch", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64),
        ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("q", ctypes.c_void_p),            # const void *
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),            # void *
        ("lse", ctypes.c_void_p),          # float *, [batch, heads_q, seqlen_q]; may be NULL
        ("q_stride", _I64x3),              # batch, seq, head (elements)
        ("k_stride", _I64x3),
        ("v_stride", _I64x3),
        ("o_stride", _I64x3),
        ("softmax_scale", ctypes.c_float),  # 0 means 1/sqrt(head_dim)
        ("causal", ctypes.c_int),
        ("stream", ctypes.c_void_p),       # cudaStream_t
    ]


class AttentionGradArgs(ctypes.Structure):
    """flashbox_attention_grad_args."""

    _fields_ = [
        ("fwd", AttentionArgs),
        ("dout", ctypes.c_void_p),
        ("dout_stride", _I64x3),
        ("dq", ctypes.c_void_p),
        ("dk", ctypes.c_void_p),
        ("dv", ctypes.c_void_p),
        ("dq_stride", _I64x3),
        ("dk_stride", _I64x3),
        ("dv_stride", _I64x3),
        ("deterministic", ctypes.c_int),
    ]


_PROTOTYPES = {
    # name: (restype, argtypes)
    "flashbox_attention_forward": (ctypes.c_int, [ctypes.POINTER(AttentionArgs)]),
    "flashbox_last_error": (ctypes.c_char_p, []),
    "flashbox_version": (ctypes.c_char_p, []),
    "flashbox_attention_backward": (ctypes.c_int, [ctypes.POINTER(AttentionGradArgs)]),
    "flashbox_attention_backward_workspace_size": (ctypes.c_int64, [ctypes.POINTER(AttentionGradArgs)]),
    "flashbox_cuda_device_count": (ctypes.c_int, []),
    "flashbox_impl_name": (ctypes.c_char_p, [ctypes.c_int]),
    "flashbox_last_scratch_peak_bytes": (ctypes.c_int64, []),
    "flashbox_last_kernel": (ctypes.c_char_p, []),
}

_LIB_NAME = "libflashbox.so"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_DIR = os.path.dirname(os.path.dirname(_PACKAGE_DIR))  # python/flashbox -> python -> repo


def candidate_paths() -> list[str]:
    """Where the library is looked for, in order (existing or not)."""
    paths = []
    env = os.environ.get("FLASHBOX_LIBRARY")
    if env:
        paths.append(os.path.join(env, _LIB_NAME) if os.path.isdir(env) else env)
    paths.append(os.path.join(_PACKAGE_DIR, _LIB_NAME))
    builds = glob.glob(os.path.join(_REPO_DIR, "build*", _LIB_NAME))
    builds.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    paths.extend(builds)
    return paths


class _Library:
    """The loaded CDLL with its prototypes. A symbol the library does not export (a build from before
    the function existed) raises AttributeError naming the library when it is used, not at load."""

    def __init__(self, path: str, found_by: str = ""):
        self.path = path
        self.found_by = found_by
        self.cdll = ctypes.CDLL(path)
        self.missing = []
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(self.cdll, name)
            except AttributeError:
                self.missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def __getattr__(self, name):  # only reached for names not bound in __init__
        if name in _PROTOTYPES:
            raise AttributeError(f"{self.path} does not export {name} (a build older than flashbox.h?)")
        raise AttributeError(name)


_lock = threading.Lock()
_library: _Library | None = None


def library() -> _Library:
    """The loaded libflashbox (loaded on first use)."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            env = os.environ.get("FLASHBOX_LIBRARY")
            paths = candidate_paths()
            if env and not os.path.isfile(paths[0]):
                # An explicit FLASHBOX_LIBRARY that does not exist is a mistake, not a hint.
                raise LibraryNotFoundError(f"FLASHBOX_LIBRARY={env}: no such file ({paths[0]})")
            found = next((p for p in paths if os.path.isfile(p)), None)
            if found is None:
                raise LibraryNotFoundError(
                    f"{_LIB_NAME} not found: build it (e.g. cmake -S . -B build && cmake --build build) or "
                    f"set FLASHBOX_LIBRARY. Looked beside the package ({_PACKAGE_DIR}) and in "
                    f"{os.path.join(_REPO_DIR, 'build*')}/")
            if env:
                how = "FLASHBOX_LIBRARY"
            elif os.path.dirname(found) == _PACKAGE_DIR:
                how = "beside the package"
            else:
                how = "the newest build folder of the source tree"
            _library = _Library(found, how)
    return _library


def build_info() -> dict:
    """What `pip install ./python` recorded about the library it copied beside the package ({} when
    the package is not an installed copy)."""
    import json

    try:
        with open(os.path.join(_PACKAGE_DIR, "_build_info.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def library_path() -> str:
    return library().path


def _str(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b is not None else ""


def last_error() -> str:
    return _str(library().flashbox_last_error())


def check(rc: int) -> None:
    """Raise FlashboxError(rc, flashbox_last_error()) when rc is not FLASHBOX_OK."""
    if rc != 0:
        raise FlashboxError(rc, last_error())


def forward(args: AttentionArgs) -> None:
    """flashbox_attention_forward(&args); raises FlashboxError on failure."""
    lib = library()
    rc = lib.flashbox_attention_forward(ctypes.byref(args))
    if rc != 0:
        raise FlashboxError(rc, _str(lib.flashbox_last_error()))


def backward(args: AttentionGradArgs) -> None:
    """flashbox_attention_backward(&args); raises FlashboxError on failure."""
    lib = library()
    rc = lib.flashbox_attention_backward(ctypes.byref(args))
    if rc != 0:
        raise FlashboxError(rc, _str(lib.flashbox_last_error()))


def backward_workspace_size(args: AttentionGradArgs) -> int:
    """Bytes the backward allocates internally; raises FlashboxError on invalid arguments."""
    lib = library()
    n = int(lib.flashbox_attention_backward_workspace_size(ctypes.byref(args)))
    if n < 0:
        code = -n if -n in ErrorCode._value2member_map_ else ErrorCode.INVALID_ARGUMENT
        raise FlashboxError(code, _str(lib.flashbox_last_error()) or "invalid arguments")
    return n


def version() -> str:
    return _str(library().flashbox_version())


def cuda_device_count() -> int:
    return int(library().flashbox_cuda_device_count())


def impl_name(impl: int) -> str:
    return _str(library().flashbox_impl_name(int(impl)))


def last_kernel() -> str:
    return _str(library().flashbox_last_kernel())


def last_scratch_peak_bytes() -> int:
    return int(library().flashbox_last_scratch_peak_bytes())



def _private(name: str, restype, argtypes):
    """A symbol of the private tuning interface (src/api/tuning_private.h), which only a benchmark
    build (-DFLASHBOX_TUNING=ON) exports; not in _PROTOTYPES, so a default build lists nothing missing."""
    lib = library()
    try:
        fn = getattr(lib.cdll, name)
    except AttributeError:
        raise AttributeError(f"{lib.path} does not export {name}: tuning needs a build configured with "
                             f"-DFLASHBOX_TUNING=ON") from None
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def tuning_set(key: str, value: str | None) -> None:
    """Overrides one kernel choice of the tile policies, for benchmarks (src/api/tuning.hpp lists the
    keys: forward_family, backward_family, sm90_tile, sm90_schedule, sm90_max_ctas,
    sm90_l2_section_mb, sm80_bwd_block_q, kvcache_prefill_rows; None or "" is the policy's choice).
    Not public API: only a library built with -DFLASHBOX_TUNING=ON exports it (AttributeError
    otherwise); raises FlashboxError on a bad key or value."""
    fn = _private("flashbox_private_tuning_set", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p])
    check(fn(key.encode(), value.encode() if value else None))


def tuning_reset() -> None:
    """Every tuning override back to the policy's choice (a FLASHBOX_TUNING=ON build only)."""
    _private("flashbox_private_tuning_reset", None, [])()
