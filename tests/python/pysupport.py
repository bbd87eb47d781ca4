"""Helpers shared by the Python tests, usable with and without pytest.

Skips are unittest.SkipTest (pytest reports them as skips with the reason); `run_standalone` runs a
module's test_* functions without pytest, so the ctypes tests also run where pytest is not installed
(CTest's python_ctypes test does that).
"""

import ctypes
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PYTHON_DIR = os.path.join(REPO, "python")
# FLASHBOX_TEST_INSTALLED=1: test the installed package (pip install ./python), not the source tree's.
INSTALLED = os.environ.get("FLASHBOX_TEST_INSTALLED") == "1"
if not INSTALLED and _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)

import flashbox  # noqa: E402
from flashbox import _lib  # noqa: E402

# The folder the imported package lives in (python/ of the source tree, or site-packages).
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(flashbox.__file__)))
if INSTALLED and os.path.abspath(flashbox.__file__).startswith(_PYTHON_DIR + os.sep):
    raise ImportError(f"FLASHBOX_TEST_INSTALLED=1 but flashbox was imported from the source tree ({flashbox.__file__})")


def skip(reason: str):
    raise unittest.SkipTest(reason)


def assert_struct_layout_matches_c(*structs):
    """Each (ctypes.Structure class, C struct name) of include/flashbox/flashbox.h: the same size and
    every field at the same offset as a C compiler lays it out (skips without a C compiler)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        skip("no C compiler to compare the struct layout with")
    fields = [(f, name, cls) for cls, name in structs for f, _ in cls._fields_]
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "flashbox/flashbox.h"', "int main(void) {"]
    lines += [f'printf("%zu\\n", sizeof({name}));' for _, name in structs]
    lines += [f'printf("%zu\\n", offsetof({name}, {f}));' for f, name, _ in fields]
    lines += ["return 0; }"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        with open(src, "w") as fh:
            fh.write("\n".join(lines))
        subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), src, "-o", exe], check=True)
        out = [int(x) for x in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()]
    sizes, offsets = out[:len(structs)], out[len(structs):]
    assert sizes == [ctypes.sizeof(cls) for cls, _ in structs], (sizes, [name for _, name in structs])
    for (f, name, cls), off in zip(fields, offsets):
        assert getattr(cls, f).offset == off, f"{name}.{f}: ctypes offset {getattr(cls, f).offset}, C {off}"


def require_library():
    try:
        return _lib.library()
    except _lib.LibraryNotFoundError as e:
        skip(f"libflashbox.so not available: {e}")


def require_symbol(name: str):
    lib = require_library()
    if name in lib.missing:
        skip(f"{lib.path} does not export {name} yet")
    return lib


def skip_if_unimplemented(e: "_lib.FlashboxError", what: str):
    """A backend that has not landed reports FLASHBOX_ERR_UNSUPPORTED_IMPL '... not implemented'."""
    if e.code == _lib.ErrorCode.UNSUPPORTED_IMPL and "not implemented" in e.message:
        skip(f"{what}: backend not implemented yet ({e.message})")


class raises:
    """`with raises(FlashboxError, match="head_dim") as r:` like pytest.raises; r.value is the error."""

    def __init__(self, exc_type, match=None):
        self.exc_type, self.match, self.value = exc_type, match, None

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            raise AssertionError(f"expected {self.exc_type.__name__}, nothing was raised")
        if not issubclass(et, self.exc_type):
            return False
        if self.match is not None and not re.search(self.match, str(ev)):
            raise AssertionError(f"{et.__name__} message {str(ev)!r} does not match {self.match!r}")
        self.value = ev
        return True


# ---- host tensors without numpy: ctypes buffers in fp32 / fp16 / bf16, any [b, t, h] layout ----

def round_to(x: float, dtype: int) -> float:
    """x rounded to the dtype (round to nearest even), as a Python float."""
    if dtype == _lib.DType.FLOAT32:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    if dtype == _lib.DType.FLOAT16:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    return _bf16_bits_to_float(_float_to_bf16_bits(x))


def _float_to_bf16_bits(x: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x):
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _bf16_bits_to_float(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


_CTYPE = {_lib.DType.FLOAT32: ctypes.c_float, _lib.DType.FLOAT16: ctypes.c_uint16,
          _lib.DType.BFLOAT16: ctypes.c_uint16}


class HostTensor:
    """A [B, T, H, D] tensor in a ctypes buffer.

    order: the physical order of the b, t, h dimensions, outermost first ("bth" is BTHD, "bht" BHTD);
    pad: extra elements after each head_dim row (a strided, non-packed layout). Padding is filled with a
    sentinel so that a write outside the tensor's elements is detected by `padding_intact`.
    """

    SENTINEL = -12345.0

    def __init__(self, shape, dtype, order="bth", pad=0):
        self.shape, self.dtype, self.order, self.pad = tuple(shape), dtype, order, pad
        B, T, H, D = self.shape
        size = {"b": B, "t": T, "h": H}
        stride, step = {}, D + pad
        for dim in reversed(order):
            stride[dim] = step
            step *= size[dim]
        self.n = step
        self.strides = (stride["b"], stride["t"], stride["h"])
        self.buf = (_CTYPE[dtype] * self.n)()
        for i in range(self.n):
            self._put(i, self.SENTINEL)

    @property
    def ptr(self) -> int:
        return ctypes.addressof(self.buf)

    def offset(self, b, t, h, d):
        return b * self.strides[0] + t * self.strides[1] + h * self.strides[2] + d

    def _put(self, i, x):
        if self.dtype == _lib.DType.FLOAT32:
            self.buf[i] = x
        elif self.dtype == _lib.DType.FLOAT16:
            self.buf[i] = struct.unpack("<H", struct.pack("<e", x))[0]
        else:
            self.buf[i] = _float_to_bf16_bits(x)

    def _get(self, i):
        if self.dtype == _lib.DType.FLOAT32:
            return float(self.buf[i])
        if self.dtype == _lib.DType.FLOAT16:
            return struct.unpack("<e", struct.pack("<H", self.buf[i]))[0]
        return _bf16_bits_to_float(self.buf[i])

    def set(self, b, t, h, d, x):
        self._put(self.offset(b, t, h, d), x)

    def get(self, b, t, h, d):
        return self._get(self.offset(b, t, h, d))

    def fill(self, fn):
        B, T, H, D = self.shape
        for b in range(B):
            for t in range(T):
                for h in range(H):
                    for d in range(D):
                        self.set(b, t, h, d, fn(b, t, h, d))

    def values(self):
        """Nested lists [b][t][h][d] of Python floats (the stored, rounded values)."""
        B, T, H, D = self.shape
        return [[[[self.get(b, t, h, d) for d in range(D)] for h in range(H)] for t in range(T)]
                for b in range(B)]

    def padding_intact(self) -> bool:
        B, T, H, D = self.shape
        inside = {self.offset(b, t, h, d) for b in range(B) for t in range(T) for h in range(H)
                  for d in range(D)}
        return all(self._get(i) == round_to(self.SENTINEL, self.dtype) for i in range(self.n) if i not in inside)


def pseudo_random(seed: int):
    """Deterministic values in [-1, 1) from a tiny LCG (the tests need no numpy)."""
    state = [seed * 2654435761 % 2**32 or 1]

    def next_value(*_):
        state[0] = (1664525 * state[0] + 1013904223) % 2**32
        return state[0] / 2**31 - 1.0
    return next_value


# ---- fp64 reference attention and its gradients, in plain Python ----

def reference_attention(q, k, v, scale, causal):
    """q [B][Tq][Hq][D], k/v [B][Tk][Hkv][D] nested lists -> (o [B][Tq][Hq][D], lse [B][Hq][Tq], p).

    Bottom-right causal; a row that sees no key gets o = 0 and lse = -inf."""
    B, Tq, Hq, D = len(q), len(q[0]), len(q[0][0]), len(q[0][0][0])
    Tk, Hkv = len(k[0]), len(k[0][0])
    group = Hq // Hkv
    o = [[[[0.0] * D for _ in range(Hq)] for _ in range(Tq)] for _ in range(B)]
    lse = [[[-math.inf] * Tq for _ in range(Hq)] for _ in range(B)]
    probs = {}
    for b in range(B):
        for h in range(Hq):
            hk = h // group
            for i in range(Tq):
                end = min(Tk, i + Tk - Tq + 1) if causal else Tk
                if end <= 0:
                    probs[b, h, i] = []
                    continue
                s = [scale * sum(q[b][i][h][d] * k[b][j][hk][d] for d in range(D)) for j in range(end)]
                m = max(s)
                e = [math.exp(x - m) for x in s]
                z = sum(e)
                p = [x / z for x in e]
                probs[b, h, i] = p
                lse[b][h][i] = m + math.log(z)
                for d in range(D):
                    o[b][i][h][d] = sum(p[j] * v[b][j][hk][d] for j in range(end))
    return o, lse, probs


def reference_attention_backward(q, k, v, do, scale, causal):
    """(dq, dk, dv) of sum(o * do) for the reference attention above, in fp64."""
    o, _, probs = reference_attention(q, k, v, scale, causal)
    B, Tq, Hq, D = len(q), len(q[0]), len(q[0][0]), len(q[0][0][0])
    Tk, Hkv = len(k[0]), len(k[0][0])
    group = Hq // Hkv
    dq = [[[[0.0] * D for _ in range(Hq)] for _ in range(Tq)] for _ in range(B)]
    dk = [[[[0.0] * D for _ in range(Hkv)] for _ in range(Tk)] for _ in range(B)]
    dv = [[[[0.0] * D for _ in range(Hkv)] for _ in range(Tk)] for _ in range(B)]
    for b in range(B):
        for h in range(Hq):
            hk = h // group
            for i in range(Tq):
                p = probs[b, h, i]
                if not p:
                    continue
                rowsum = sum(do[b][i][h][d] * o[b][i][h][d] for d in range(D))
                for j, pj in enumerate(p):
                    dp = sum(do[b][i][h][d] * v[b][j][hk][d] for d in range(D))
                    ds = pj * (dp - rowsum) * scale
                    for d in range(D):
                        dv[b][j][hk][d] += pj * do[b][i][h][d]
                        dq[b][i][h][d] += ds * k[b][j][hk][d]
                        dk[b][j][hk][d] += ds * q[b][i][h][d]
    return dq, dk, dv


def max_rel_err(got, want):
    """max |got - want| / max(max |want|, tiny) over nested lists."""
    def flat(x):
        if isinstance(x, list):
            for y in x:
                yield from flat(y)
        else:
            yield x
    g, w = list(flat(got)), list(flat(want))
    assert len(g) == len(w)
    scale = max((abs(x) for x in w if math.isfinite(x)), default=0.0) or 1e-30
    return max((abs(a - b) for a, b in zip(g, w)), default=0.0) / scale


# ---- running without pytest ----

def run_standalone(namespace) -> int:
    """Run the test_* functions of a module namespace; 0 if none failed and one passed, 77 (CTest's skip
    code) if all skipped, 1 on any failure."""
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    passed = skipped = failed = 0
    for name, fn in tests:
        try:
            fn()
        except unittest.SkipTest as e:
            skipped += 1
            print(f"SKIP {name}: {e}")
        except Exception:  # noqa: BLE001 -- report every failure, keep going
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
        else:
            passed += 1
            print(f"PASS {name}")
    print(f"{passed} passed, {skipped} skipped, {failed} failed")
    if failed:
        return 1
    return 0 if passed else 77
