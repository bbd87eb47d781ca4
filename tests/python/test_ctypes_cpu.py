"""The ctypes layer against libflashbox's CPU path: no torch, no numpy, no GPU.

Runs under pytest, or alone (`python3 tests/python/test_ctypes_cpu.py`, as CTest does when pytest is
missing). Tensors are ctypes buffers (pysupport.HostTensor); the reference is plain-Python fp64.
"""

import ctypes
import math
import os
import shutil
import subprocess
import sys
import tempfile

import pysupport as S
from pysupport import _lib, flashbox

F32, F16, BF16 = _lib.DType.FLOAT32, _lib.DType.FLOAT16, _lib.DType.BFLOAT16
TOL = {F32: 2e-5, F16: 4e-3, BF16: 2e-2}  # relative to max |reference|, outputs rounded to the dtype


def make_args(q, k, v, o, lse=None, causal=False, scale=0.0, impl=_lib.Impl.AUTO, device=_lib.Device.CPU):
    a = _lib.AttentionArgs()
    a.device, a.dtype, a.impl = device, q.dtype, impl
    a.batch, a.seqlen_q, a.heads_q, a.head_dim = q.shape
    a.seqlen_k, a.heads_kv = k.shape[1], k.shape[2]
    a.q, a.k, a.v, a.o = q.ptr, k.ptr, v.ptr, o.ptr
    a.lse = ctypes.addressof(lse) if lse is not None else None
    a.q_stride[:], a.k_stride[:], a.v_stride[:], a.o_stride[:] = q.strides, k.strides, v.strides, o.strides
    a.softmax_scale, a.causal = scale, int(causal)
    return a


def forward_or_skip(a, what="CPU forward"):
    S.require_symbol("flashbox_attention_forward")
    try:
        _lib.forward(a)
    except _lib.FlashboxError as e:
        S.skip_if_unimplemented(e, what)
        raise


def build_case(B, Tq, Tk, Hq, Hkv, D, dtype, order="bth", pad=0, seed=1):
    rnd = S.pseudo_random(seed)
    q = S.HostTensor((B, Tq, Hq, D), dtype, order, pad)
    k = S.HostTensor((B, Tk, Hkv, D), dtype, order, pad)
    v = S.HostTensor((B, Tk, Hkv, D), dtype, order, pad)
    for t in (q, k, v):
        t.fill(rnd)
    return q, k, v


def test_struct_layout_matches_c_compiler():
    from flashbox import _ext
    S.assert_struct_layout_matches_c((_lib.AttentionArgs, "flashbox_attention_args"),
                                     (_lib.AttentionGradArgs, "flashbox_attention_grad_args"),
                                     (_ext.AttentionExt, "flashbox_attention_ext"),
                                     (_ext.BlockMask, "flashbox_block_mask"),
                                     (_ext.AuxDecl, "flashbox_aux_decl"),
                                     (_ext.ModDesc, "flashbox_mod_desc"),
                                     (_ext.AuxTensor, "flashbox_aux_tensor"),
                                     (_ext.ModInfo, "flashbox_mod_info"))
    # bench/flashbench/abi.py keeps its own copies of the structs (it times any build of the library
    # without importing this package); they must match the header too.
    abi_path = os.path.join(S.REPO, "bench", "flashbench", "abi.py")
    if os.path.exists(abi_path):
        import importlib.util
        spec = importlib.util.spec_from_file_location("flashbench_abi", abi_path)
        abi = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(abi)
        S.assert_struct_layout_matches_c((abi.AttentionArgs, "flashbox_attention_args"),
                                         (abi.GradArgs, "flashbox_attention_grad_args"),
                                         (abi.Ext, "flashbox_attention_ext"),
                                         (abi.KvcacheArgs, "flashbox_kvcache_args"))


def test_import_without_torch_and_prototypes():
    # `import flashbox` must not import torch (checked in a fresh interpreter).
    code = "import sys, flashbox; assert 'torch' not in sys.modules; print(flashbox.FlashboxError.__name__)"
    env = dict(os.environ, PYTHONPATH=S.PACKAGE_PARENT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "FlashboxError", r.stderr
    err = _lib.FlashboxError(5, "head_dim 96 is not supported")
    assert err.code == 5 and err.message == "head_dim 96 is not supported"
    assert str(err) == "FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM: head_dim 96 is not supported"


def test_torch_layer_loads_lazily():
    # flashbox.attention / flash_attn_func come from flashbox.ops on first use. Checked on a copy of the
    # package whose ops.py is a stand-in (so no torch is needed): once importable, once failing.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(S.PACKAGE_PARENT, "flashbox"), os.path.join(tmp, "flashbox"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        ops = os.path.join(tmp, "flashbox", "ops.py")
        env = dict(os.environ, PYTHONPATH=tmp)
        code = ("import flashbox\nprint(flashbox.attention(), flashbox.ops.__name__)\n"
                "from flashbox import flash_attn_func\nprint(flash_attn_func())")
        with open(ops, "w") as fh:
            for name in flashbox._TORCH_NAMES:
                fh.write(f"def {name}():\n    return {name[:2]!r}\n")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.split() == ["at", "flashbox.ops", "fl"], r.stdout + r.stderr
        with open(ops, "w") as fh:
            fh.write("raise ImportError('needs torch')\n")
        code = "import flashbox\ntry:\n    flashbox.attention\nexcept ImportError as e:\n    print(e)"
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == "needs torch", r.stdout + r.stderr[-2000:]


def test_missing_library_is_a_clear_error():
    code = "import flashbox._lib as L\ntry:\n    L.library()\nexcept L.LibraryNotFoundError as e:\n    print(e)"
    env = dict(os.environ, PYTHONPATH=S.PACKAGE_PARENT,
               FLASHBOX_LIBRARY="/nonexistent/libflashbox.so")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "FLASHBOX_LIBRARY=/nonexistent/libflashbox.so" in r.stdout, r.stdout + r.stderr


def test_library_introspection():
    S.require_symbol("flashbox_version")
    assert flashbox.version(), "flashbox_version() is empty"
    S.require_symbol("flashbox_impl_name")
    assert [flashbox.impl_name(i) for i in _lib.Impl] == ["auto", "naive", "blocked", "flash"]
    S.require_symbol("flashbox_cuda_device_count")
    assert flashbox.cuda_device_count() >= 0


def test_tuning_is_private():
    """The private tuning interface: a default build exports no flashbox_private_tuning_* (tuning_set
    says to configure with -DFLASHBOX_TUNING=ON); a benchmark build takes a key and refuses a bad one."""
    lib = S.require_library()
    if not hasattr(lib.cdll, "flashbox_private_tuning_set"):
        try:
            _lib.tuning_set("sm90_tile", "128x176")
        except AttributeError as e:
            assert "FLASHBOX_TUNING=ON" in str(e), str(e)
        else:
            raise AssertionError("tuning_set worked on a library without flashbox_private_tuning_set")
        return
    try:
        _lib.tuning_set("sm90_tile", "128x176")
        try:
            _lib.tuning_set("sm90_tile", "big")
        except _lib.FlashboxError as e:
            assert "sm90_tile" in e.message, e.message
        else:
            raise AssertionError("a bad tuning value was accepted")
    finally:
        _lib.tuning_reset()


def _check_forward(B, Tq, Tk, Hq, Hkv, D, dtype, causal, impl, order="bth", pad=0, scale=0.0, seed=1):
    q, k, v = build_case(B, Tq, Tk, Hq, Hkv, D, dtype, order, pad, seed)
    o = S.HostTensor((B, Tq, Hq, D), dtype, order, pad)
    lse = (ctypes.c_float * (B * Hq * Tq))()
    forward_or_skip(make_args(q, k, v, o, lse, causal, scale, impl), f"CPU {_lib.Impl(impl).name.lower()}")
    want_o, want_lse, _ = S.reference_attention(q.values(), k.values(), v.values(),
                                                scale or 1.0 / math.sqrt(D), causal)
    err = S.max_rel_err(o.values(), want_o)
    case = f"B{B} Tq{Tq} Tk{Tk} Hq{Hq} Hkv{Hkv} D{D} dtype{int(dtype)} causal{causal} impl{int(impl)} {order}+{pad}"
    assert err < TOL[dtype], f"{case}: o rel err {err}"
    assert o.padding_intact(), f"{case}: wrote outside o's elements"
    got_lse = [[[lse[(b * Hq + h) * Tq + i] for i in range(Tq)] for h in range(Hq)] for b in range(B)]
    for b in range(B):
        for h in range(Hq):
            for i in range(Tq):
                g, w = got_lse[b][h][i], want_lse[b][h][i]
                assert (g == w) if math.isinf(w) else abs(g - w) < 1e-4 * max(1.0, abs(w)), \
                    f"{case}: lse[{b},{h},{i}] {g} vs {w}"


def test_cpu_forward_matches_fp64_reference():
    for impl in (_lib.Impl.AUTO, _lib.Impl.NAIVE, _lib.Impl.BLOCKED):
        for causal in (False, True):
            _check_forward(2, 7, 7, 2, 2, 8, F32, causal, impl)
            _check_forward(1, 5, 9, 2, 2, 16, F32, causal, impl)      # Tq < Tk: bottom-right diagonal


def test_cpu_forward_gqa_mqa():
    for causal in (False, True):
        _check_forward(1, 6, 6, 4, 2, 8, F32, causal, _lib.Impl.AUTO)   # GQA
        _check_forward(2, 4, 6, 3, 1, 8, F32, causal, _lib.Impl.AUTO)   # MQA


def test_cpu_forward_strided_layouts():
    _check_forward(2, 6, 6, 3, 3, 8, F32, True, _lib.Impl.AUTO, order="bht")          # BHTD
    _check_forward(2, 6, 6, 2, 1, 8, F32, False, _lib.Impl.AUTO, order="tbh", pad=3)  # T-major, padded rows


def test_cpu_forward_half_types():
    for dtype in (F16, BF16):
        _check_forward(1, 7, 7, 2, 2, 16, dtype, True, _lib.Impl.AUTO)
        _check_forward(1, 5, 5, 2, 1, 8, dtype, False, _lib.Impl.AUTO, scale=0.3)


def test_cpu_causal_rows_that_see_no_key():
    # Tq > Tk, causal: query i sees keys j <= i + Tk - Tq, so the first Tq - Tk rows see nothing.
    _check_forward(1, 6, 3, 2, 2, 8, F32, True, _lib.Impl.AUTO)


def test_errors_become_flashbox_errors():
    S.require_symbol("flashbox_attention_forward")
    q, k, v = build_case(1, 4, 4, 2, 2, 8, F32)
    o = S.HostTensor((1, 4, 2, 8), F32)

    def expect(code, mutate):
        a = make_args(q, k, v, o)
        mutate(a)
        with S.raises(_lib.FlashboxError) as r:
            _lib.forward(a)
        e = r.value
        assert e.code == code, f"expected {code!r}, got {e.code} ({e.message})"
        assert e.message and e.message in str(e), e
        assert all(o.buf[i] == S.HostTensor.SENTINEL for i in range(o.n)), "o written on a failed call"
        return e

    expect(_lib.ErrorCode.INVALID_SIZE, lambda a: setattr(a, "head_dim", 0))
    expect(_lib.ErrorCode.INVALID_SIZE, lambda a: setattr(a, "batch", -1))
    expect(_lib.ErrorCode.NULL_POINTER, lambda a: setattr(a, "q", None))
    expect(_lib.ErrorCode.HEADS_MISMATCH, lambda a: (setattr(a, "heads_q", 3), setattr(a, "heads_kv", 2)))
    expect(_lib.ErrorCode.INVALID_ARGUMENT, lambda a: setattr(a, "causal", 2))
    expect(_lib.ErrorCode.UNSUPPORTED_IMPL, lambda a: setattr(a, "impl", 42))
    expect(_lib.ErrorCode.UNSUPPORTED_IMPL, lambda a: setattr(a, "device", 7))
    if flashbox.cuda_device_count() == 0:   # fp16, head_dim 64: only the GPU is missing
        q, k, v = build_case(1, 4, 4, 2, 2, 64, F16)
        o = S.HostTensor((1, 4, 2, 64), F16)
        a = make_args(q, k, v, o, device=_lib.Device.CUDA)
        with S.raises(_lib.FlashboxError) as r:
            _lib.forward(a)
        assert r.value.code == _lib.ErrorCode.NO_DEVICE, r.value
        assert all(o.buf[i] == o.buf[0] for i in range(o.n)), "o written on a failed call"


def _grads(B, Tq, Tk, Hq, Hkv, D, causal, impl, order="bth", seed=3):
    q, k, v = build_case(B, Tq, Tk, Hq, Hkv, D, F32, order, 0, seed)
    o = S.HostTensor((B, Tq, Hq, D), F32, order)
    lse = (ctypes.c_float * (B * Hq * Tq))()
    forward_or_skip(make_args(q, k, v, o, lse, causal, 0.0, impl))
    do = S.HostTensor((B, Tq, Hq, D), F32, order)
    do.fill(S.pseudo_random(seed + 10))
    dq = S.HostTensor(q.shape, F32, order)
    dk = S.HostTensor(k.shape, F32, order)
    dv = S.HostTensor(v.shape, F32, order)
    g = _lib.AttentionGradArgs()
    g.fwd = make_args(q, k, v, o, lse, causal, 0.0, impl)
    g.dout, g.dout_stride[:] = do.ptr, do.strides
    g.dq, g.dk, g.dv = dq.ptr, dk.ptr, dv.ptr
    g.dq_stride[:], g.dk_stride[:], g.dv_stride[:] = dq.strides, dk.strides, dv.strides
    S.require_symbol("flashbox_attention_backward")
    assert _lib.backward_workspace_size(g) >= 0
    try:
        _lib.backward(g)
    except _lib.FlashboxError as e:
        S.skip_if_unimplemented(e, "CPU backward")
        raise
    want = S.reference_attention_backward(q.values(), k.values(), v.values(), do.values(),
                                          1.0 / math.sqrt(D), causal)
    case = f"B{B} Tq{Tq} Tk{Tk} Hq{Hq} Hkv{Hkv} D{D} causal{causal} impl{int(impl)} {order}"
    for name, got, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        err = S.max_rel_err(got.values(), w)
        assert err < 1e-4, f"{case}: {name} rel err {err}"


def test_backward_workspace_size_errors():
    S.require_symbol("flashbox_attention_backward_workspace_size")
    q, k, v = build_case(1, 4, 4, 2, 2, 8, F32)
    g = _lib.AttentionGradArgs()
    g.fwd = make_args(q, k, v, S.HostTensor(q.shape, F32))
    g.fwd.head_dim = 0
    with S.raises(_lib.FlashboxError) as r:
        _lib.backward_workspace_size(g)
    assert r.value.code == _lib.ErrorCode.INVALID_SIZE and r.value.message, r.value


def test_cpu_backward_matches_fp64_reference():
    for impl in (_lib.Impl.NAIVE, _lib.Impl.BLOCKED):
        for causal in (False, True):
            _grads(1, 5, 5, 2, 2, 8, causal, impl)
            _grads(2, 4, 6, 4, 2, 8, causal, impl, order="bht")   # GQA, Tq < Tk, BHTD


if __name__ == "__main__":
    sys.exit(S.run_standalone(dict(globals())))
