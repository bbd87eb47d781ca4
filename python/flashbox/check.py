"""`python -m flashbox check`: a self-test of an installed flashbox, for a wheel on a new machine.

Checks, each printed with its outcome:
  1. the library loads (path, how it was found, version; for an installed wheel, what it needs:
     shared libraries, CUDA runtime and driver, GPU architectures);
  2. the CPU forward and backward of a small GQA case, causal and not, against a plain-Python fp64
     reference (fp32, relative error below 1e-5), with outputs poisoned first;
  3. on each CUDA device the library sees: the bf16 forward and backward of a small case against an
     fp64 reference on the same (bf16-rounded) inputs (relative error below 1e-2), and the kernel that
     ran: through the PyTorch layer (flashbox.attention) where torch with CUDA is installed, else
     through the C API on buffers from the CUDA driver (libcuda.so.1, which any machine with the driver
     has: a fresh virtual environment needs nothing else).
Exits 0 when every check that could run passed, 1 when one failed (the reason printed).
"""

import ctypes
import math
import random
import struct

from . import _lib

_F32_TOL, _BF16_TOL = 1e-5, 1e-2


class _Failed(Exception):
    pass


def _rel_err(got, want):
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    if any(math.isnan(g) or math.isinf(g) for g in got):
        return math.inf
    return math.sqrt(num / max(den, 1e-30))


def _reference(q, k, v, do, B, Tq, Tk, Hq, Hkv, D, causal):
    """fp64 attention and its gradients; tensors are flat lists in [B, T, H, D] order."""
    scale, group = 1.0 / math.sqrt(D), Hq // Hkv
    o, dq = [0.0] * len(q), [0.0] * len(q)
    dk, dv = [0.0] * len(k), [0.0] * len(v)
    at_q = lambda b, t, h: ((b * Tq + t) * Hq + h) * D  # noqa: E731
    at_k = lambda b, t, h: ((b * Tk + t) * Hkv + h) * D  # noqa: E731
    for b in range(B):
        for h in range(Hq):
            hk = h // group
            for i in range(Tq):
                qi = at_q(b, i, h)
                keys = [j for j in range(Tk) if not causal or j <= i + Tk - Tq]
                s = [scale * sum(q[qi + x] * k[at_k(b, j, hk) + x] for x in range(D)) for j in keys]
                if not s:
                    continue  # a row that sees no key: o = 0, no gradient
                m = max(s)
                p = [math.exp(x - m) for x in s]
                z = sum(p)
                p = [x / z for x in p]
                for x in range(D):
                    o[qi + x] = sum(pj * v[at_k(b, j, hk) + x] for pj, j in zip(p, keys))
                dp = [sum(do[qi + x] * v[at_k(b, j, hk) + x] for x in range(D)) for j in keys]
                delta = sum(do[qi + x] * o[qi + x] for x in range(D))
                for pj, dpj, j in zip(p, dp, keys):
                    ds = pj * (dpj - delta)
                    kj = at_k(b, j, hk)
                    for x in range(D):
                        dq[qi + x] += scale * ds * k[kj + x]
                        dk[kj + x] += scale * ds * q[qi + x]
                        dv[kj + x] += pj * do[qi + x]
    return o, dq, dk, dv


def _buffer(values):
    return (ctypes.c_float * len(values))(*values)


def _strides(T, H, D):
    return (T * H * D, H * D, D)


def _check_cpu(causal):
    B, Tq, Tk, Hq, Hkv, D = 2, 9, 13, 4, 2, 16
    rnd = random.Random(20261206 + causal)
    draw = lambda n: [rnd.gauss(0.0, 1.0) for _ in range(n)]  # noqa: E731
    q, k, v, do = draw(B * Tq * Hq * D), draw(B * Tk * Hkv * D), draw(B * Tk * Hkv * D), draw(B * Tq * Hq * D)
    q[3] = 12.0  # an outlier: a row whose softmax is nearly one-hot
    bufs = {n: _buffer(x) for n, x in (("q", q), ("k", k), ("v", v), ("do", do))}
    poison = float("nan")
    o, dq = _buffer([poison] * len(q)), _buffer([poison] * len(q))
    dk, dv = _buffer([poison] * len(k)), _buffer([poison] * len(v))
    lse = _buffer([poison] * (B * Hq * Tq))
    a = _lib.AttentionArgs()
    a.device, a.dtype, a.impl = _lib.Device.CPU, _lib.DType.FLOAT32, _lib.Impl.AUTO
    a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_kv, a.head_dim = B, Tq, Tk, Hq, Hkv, D
    a.q, a.k, a.v, a.o = (ctypes.addressof(x) for x in (bufs["q"], bufs["k"], bufs["v"], o))
    a.lse = ctypes.addressof(lse)
    a.q_stride[:], a.o_stride[:] = _strides(Tq, Hq, D), _strides(Tq, Hq, D)
    a.k_stride[:], a.v_stride[:] = _strides(Tk, Hkv, D), _strides(Tk, Hkv, D)
    a.causal = int(causal)
    _lib.forward(a)
    g = _lib.AttentionGradArgs()
    g.fwd = a
    g.dout, g.dout_stride[:] = ctypes.addressof(bufs["do"]), _strides(Tq, Hq, D)
    g.dq, g.dk, g.dv = (ctypes.addressof(x) for x in (dq, dk, dv))
    g.dq_stride[:], g.dk_stride[:], g.dv_stride[:] = _strides(Tq, Hq, D), _strides(Tk, Hkv, D), _strides(Tk, Hkv, D)
    _lib.backward(g)
    want = _reference(q, k, v, do, B, Tq, Tk, Hq, Hkv, D, causal)
    errors = {name: _rel_err(list(got), w) for name, got, w in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv), want)}
    worst = max(errors, key=errors.get)
    if errors[worst] >= _F32_TOL:
        raise _Failed(f"{worst} relative error {errors[worst]:.2e} >= {_F32_TOL:g} against the fp64 reference")
    return f"B{B} Tq{Tq} Tk{Tk} H{Hq}/{Hkv} D{D} fp32: largest relative error {errors[worst]:.1e} ({worst})"


def _to_bf16_bits(x):
    """fp32 -> bf16 bits, rounded to nearest even (finite inputs)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def _from_bf16_bits(b):
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


class _Driver:
    """The few CUDA driver calls a torch-free check needs, on `device`'s primary context (the one the
    library's runtime uses)."""

    def __init__(self, device):
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise _Failed(f"the library sees a CUDA device but libcuda.so.1 does not load ({e})")
        self.dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        self._ok(self.cu.cuInit(0), "cuInit")
        self._ok(self.cu.cuDeviceGet(ctypes.byref(self.dev), device), "cuDeviceGet")
        self._ok(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self._ok(self.cu.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        self.buffers = []

    def _ok(self, rc, what):
        if rc != 0:
            raise _Failed(f"{what} failed: CUDA driver error {rc}")

    def name(self):
        buf = ctypes.create_string_buffer(256)
        self._ok(self.cu.cuDeviceGetName(buf, 256, self.dev), "cuDeviceGetName")
        return buf.value.decode(errors="replace")

    def upload(self, raw: bytes):
        ptr = ctypes.c_uint64()
        self._ok(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(len(raw))), "cuMemAlloc")
        self.buffers.append(ptr.value)
        self._ok(self.cu.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr.value), raw, ctypes.c_size_t(len(raw))), "cuMemcpyHtoD")
        return ptr.value

    def download(self, ptr, nbytes):
        self._ok(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        out = ctypes.create_string_buffer(nbytes)
        self._ok(self.cu.cuMemcpyDtoH_v2(out, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes)), "cuMemcpyDtoH")
        return out.raw

    def close(self):
        for ptr in self.buffers:
            self.cu.cuMemFree_v2(ctypes.c_uint64(ptr))
        popped = ctypes.c_void_p()
        self.cu.cuCtxPopCurrent_v2(ctypes.byref(popped))
        self.cu.cuDevicePrimaryCtxRelease_v2(self.dev)


def _check_cuda_c_api(device):
    """bf16 forward + backward through the C API on driver-allocated buffers, against the fp64
    reference on the bf16-rounded inputs."""
    B, T, Hq, Hkv, D = 2, 33, 4, 2, 64
    rnd = random.Random(20261206)
    draw = lambda n: [rnd.gauss(0.0, 1.0) for _ in range(n)]  # noqa: E731
    host = {"q": draw(B * T * Hq * D), "k": draw(B * T * Hkv * D), "v": draw(B * T * Hkv * D),
            "do": draw(B * T * Hq * D)}
    host["q"][5] = 12.0  # an outlier
    bits = {n: [_to_bf16_bits(x) for x in xs] for n, xs in host.items()}
    rounded = {n: [_from_bf16_bits(b) for b in bs] for n, bs in bits.items()}
    pack16 = lambda bs: struct.pack(f"<{len(bs)}H", *bs)  # noqa: E731
    poison16 = lambda n: pack16([0x7FC0] * n)  # bf16 NaN  # noqa: E731
    drv = _Driver(device)
    try:
        ptr = {n: drv.upload(pack16(bs)) for n, bs in bits.items()}
        nq, nk = len(bits["q"]), len(bits["k"])
        for n, count in (("o", nq), ("dq", nq), ("dk", nk), ("dv", nk)):
            ptr[n] = drv.upload(poison16(count))
        ptr["lse"] = drv.upload(struct.pack(f"<{B * Hq * T}f", *([float("nan")] * (B * Hq * T))))
        a = _lib.AttentionArgs()
        a.device, a.dtype, a.impl = _lib.Device.CUDA, _lib.DType.BFLOAT16, _lib.Impl.AUTO
        a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_kv, a.head_dim = B, T, T, Hq, Hkv, D
        a.q, a.k, a.v, a.o, a.lse = ptr["q"], ptr["k"], ptr["v"], ptr["o"], ptr["lse"]
        a.q_stride[:], a.o_stride[:] = _strides(T, Hq, D), _strides(T, Hq, D)
        a.k_stride[:], a.v_stride[:] = _strides(T, Hkv, D), _strides(T, Hkv, D)
        a.causal = 1
        _lib.forward(a)
        kernel = _lib.last_kernel()
        g = _lib.AttentionGradArgs()
        g.fwd = a
        g.dout, g.dout_stride[:] = ptr["do"], _strides(T, Hq, D)
        g.dq, g.dk, g.dv = ptr["dq"], ptr["dk"], ptr["dv"]
        g.dq_stride[:], g.dk_stride[:], g.dv_stride[:] = _strides(T, Hq, D), _strides(T, Hkv, D), _strides(T, Hkv, D)
        _lib.backward(g)
        got = {}
        for n, count in (("o", nq), ("dq", nq), ("dk", nk), ("dv", nk)):
            raw = drv.download(ptr[n], 2 * count)
            got[n] = [_from_bf16_bits(b) for b in struct.unpack(f"<{count}H", raw)]
        name = drv.name()
    finally:
        drv.close()
    want = _reference(rounded["q"], rounded["k"], rounded["v"], rounded["do"], B, T, T, Hq, Hkv, D, True)
    errors = {n: _rel_err(got[n], w) for n, w in zip(("o", "dq", "dk", "dv"), want)}
    worst = max(errors, key=errors.get)
    if errors[worst] >= _BF16_TOL:
        raise _Failed(f"{worst} relative error {errors[worst]:.2e} >= {_BF16_TOL:g} against the fp64 reference "
                      f"(kernel {kernel})")
    return (f"{name}: B{B} T{T} H{Hq}/{Hkv} D{D} bf16 causal through the C API (no torch), forward kernel "
            f"{kernel}, largest relative error {errors[worst]:.1e} ({worst})"), None


def _check_cuda(device):
    try:
        import torch
    except ImportError:
        return _check_cuda_c_api(device)
    if not torch.cuda.is_available():
        return _check_cuda_c_api(device)
    from . import ops

    dev = torch.device("cuda", device)
    gen = torch.Generator(device="cpu").manual_seed(20261206)
    B, T, Hq, Hkv, D = 2, 257, 8, 2, 128
    make = lambda H: torch.randn(B, T, H, D, generator=gen, dtype=torch.float64)  # noqa: E731
    q64, k64, v64, do64 = make(Hq), make(Hkv), make(Hkv), make(Hq)
    q64[0, 5, 1, :4] = 20.0  # outliers
    q, k, v = (t.to(dev, torch.bfloat16).requires_grad_() for t in (q64, k64, v64))
    out = ops.attention(q, k, v, causal=True)
    kernel = _lib.last_kernel()
    out.backward(do64.to(dev, torch.bfloat16))
    torch.cuda.synchronize(dev)
    # The reference takes the bf16-rounded inputs, in fp64 on the CPU.
    qr, kr, vr = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    group = Hq // Hkv
    kx, vx = kr.repeat_interleave(group, dim=2), vr.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qr, kx) / math.sqrt(D)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), vx)
    ref.backward(do64)
    errors = {}
    for name, got, want in (("o", out, ref), ("dq", q.grad, qr.grad), ("dk", k.grad, kr.grad), ("dv", v.grad, vr.grad)):
        got = got.detach().double().cpu()
        errors[name] = math.inf if not bool(torch.isfinite(got).all()) else \
            float((got - want.detach()).norm() / want.detach().norm().clamp_min(1e-30))
    worst = max(errors, key=errors.get)
    if errors[worst] >= _BF16_TOL:
        raise _Failed(f"{worst} relative error {errors[worst]:.2e} >= {_BF16_TOL:g} against the fp64 reference "
                      f"(kernel {kernel})")
    return (f"{torch.cuda.get_device_name(dev)}: B{B} T{T} H{Hq}/{Hkv} D{D} bf16 causal, forward kernel {kernel}, "
            f"largest relative error {errors[worst]:.1e} ({worst})"), None


def run() -> int:
    failed = 0

    def report(name, fn):
        nonlocal failed
        try:
            line = fn()
        except (_Failed, _lib.FlashboxError, RuntimeError, ValueError) as e:
            failed += 1
            print(f"FAIL  {name}: {e}")
            return
        print(f"ok    {name}: {line}")

    try:
        lib = _lib.library()
    except _lib.LibraryNotFoundError as e:
        print(f"FAIL  library: {e}")
        return 1
    print(f"ok    library: {lib.path} (found: {lib.found_by}), flashbox {_lib.version()}")
    needs = _lib.build_info().get("needs")
    if needs:
        for key, value in needs.items():
            print(f"      needs {key.replace('_', ' ')}: {', '.join(value) if isinstance(value, list) else value}")
    for causal in (False, True):
        report(f"cpu forward+backward ({'causal' if causal else 'not causal'})", lambda c=causal: _check_cpu(c))
    devices = _lib.cuda_device_count()
    if devices == 0:
        print("skip  cuda: the library sees no CUDA device (built without CUDA, no GPU, or no driver)")
    for d in range(devices):
        try:
            line, why_not = _check_cuda(d)
        except (_Failed, _lib.FlashboxError, RuntimeError, ValueError) as e:
            failed += 1
            print(f"FAIL  cuda:{d} forward+backward: {e}")
            continue
        print(f"ok    cuda:{d} forward+backward: {line}" if line else f"skip  cuda:{d}: {why_not}")
    print("check: " + (f"{failed} check(s) failed" if failed else "passed"))
    return 1 if failed else 0
