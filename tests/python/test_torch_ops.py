"""flashbox.attention / flash_attn_func through PyTorch: values and gradients against an fp64
reference, GQA/MQA, strided inputs, the CPU path, torch.compile(fullgraph=True), CUDA graph capture,
error translation and the NotImplementedError options.

Skips, with the reason, where torch, libflashbox or a GPU (for the CUDA cases) is missing, and where a
backend reports "not implemented" yet.
"""

import math
import warnings

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="the PyTorch tests need torch >= 2.4")

import pysupport as S  # noqa: E402
from pysupport import _lib, flashbox  # noqa: E402
import flashbox.ops  # noqa: E402,F401  (registers torch.ops.flashbox.*)


def _have_cuda() -> bool:
    if not (torch.cuda.is_available() and _library_ok()):
        return False
    try:
        return flashbox.cuda_device_count() > 0
    except AttributeError:  # a library without flashbox_cuda_device_count
        return False


def _library_ok() -> bool:
    try:
        _lib.library()
        return True
    except _lib.LibraryNotFoundError:
        return False


needs_lib = pytest.mark.skipif(not _library_ok(), reason="libflashbox.so not found (set FLASHBOX_LIBRARY)")
needs_cuda = pytest.mark.skipif(not _have_cuda(),
                                reason="no CUDA GPU visible to torch, or libflashbox built without CUDA")
pytestmark = needs_lib

DEVICES = [pytest.param("cuda", marks=needs_cuda), "cpu"]


def run(fn, *args, **kwargs):
    """Call fn; a backend that has not landed yet turns into a visible skip."""
    try:
        return fn(*args, **kwargs)
    except _lib.FlashboxError as e:
        S.skip_if_unimplemented(e, getattr(fn, "__name__", "flashbox call"))
        raise


def reference(q, k, v, causal, scale=None):
    """fp64 attention with FlashAttention-2's bottom-right causal mask and GQA by head counts."""
    q, k, v = q.double(), k.double(), v.double()
    B, Tq, Hq, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(Hq // Hkv, dim=2)
    v = v.repeat_interleave(Hq // Hkv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * (scale if scale is not None else 1.0 / math.sqrt(D))
    if causal:
        i = torch.arange(Tq, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        s = s.masked_fill(j > i + Tk - Tq, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)   # a row that sees no key: o = 0
    return torch.einsum("bhij,bjhd->bihd", p, v)


def rel_err(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()


def inputs(B, Tq, Tk, Hq, Hkv, D, dtype, device, seed=0, requires_grad=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    q, k, v = make(B, Tq, Hq, D), make(B, Tk, Hkv, D), make(B, Tk, Hkv, D)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v


def dtypes_for(device):
    return [torch.bfloat16, torch.float16] if device == "cuda" else [torch.float32, torch.bfloat16]


TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}

SHAPES = [  # B, Tq, Tk, Hq, Hkv, D
    (2, 128, 128, 4, 4, 64),
    (1, 77, 77, 2, 2, 64),        # not a multiple of the block size
    (2, 64, 200, 4, 4, 64),       # Tq < Tk: the causal diagonal is bottom-right
    (1, 100, 100, 8, 2, 64),      # GQA
    (1, 96, 96, 6, 1, 128),       # MQA, head_dim 128
]


def _shape_id(s):
    return "B{}-Tq{}-Tk{}-Hq{}-Hkv{}-D{}".format(*s)


def _small(device, shape):
    # The CPU implementation is a reference, not a fast path: keep its cases small.
    if device == "cpu":
        B, Tq, Tk, Hq, Hkv, D = shape
        return (1, min(Tq, 40), min(Tk, 60), Hq, Hkv, min(D, 32))
    return shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_forward_matches_fp64_reference(device, causal, shape):
    shape = _small(device, shape)
    for dtype in dtypes_for(device):
        q, k, v = inputs(*shape, dtype, device)
        o = run(flashbox.attention, q, k, v, causal=causal)
        assert o.shape == q.shape and o.dtype == dtype and o.device == q.device
        err = rel_err(o, reference(q, k, v, causal))
        assert err < TOL[dtype], f"{dtype}: rel err {err}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_lse_and_rows_that_see_no_key(device, causal):
    # Tq > Tk with causal: the first Tq - Tk query rows see no key (o = 0, lse = -inf).
    dtype = dtypes_for(device)[0]
    q, k, v = inputs(1, 48, 32, 2, 2, 64, dtype, device)
    o, lse = run(torch.ops.flashbox.attention_fwd, q, k, v, 0.0, causal, False)
    assert lse.shape == (1, 2, 48) and lse.dtype == torch.float32
    s = torch.einsum("bihd,bjhd->bhij", q.double(), k.double()) / 8.0
    if causal:
        i, j = torch.arange(48, device=device)[:, None], torch.arange(32, device=device)[None, :]
        s = s.masked_fill(j > i + 32 - 48, float("-inf"))
    want = torch.logsumexp(s, dim=-1)
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite].double() - want[finite]).abs().max().item() < 1e-2
    assert rel_err(o, reference(q, k, v, causal)) < TOL[dtype]
    if causal:
        assert torch.all(o[:, :16] == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[2], SHAPES[3], SHAPES[4]], ids=_shape_id)
def test_gradients_match_fp64_reference(device, causal, shape):
    shape = _small(device, shape)
    for dtype in dtypes_for(device):
        q, k, v = inputs(*shape, dtype, device, seed=1, requires_grad=True)
        do = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).to(device, dtype)
        o = run(flashbox.attention, q, k, v, causal=causal)
        run(o.backward, do)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        reference(qd, kd, vd, causal).backward(do.double())
        # Same-precision torch math as a yardstick: flashbox may not be more than 2x worse than it.
        qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
        ref_lowp = _lowp_reference(qb, kb, vb, causal)
        ref_lowp.backward(do)
        for name, got, want, yard in (("dq", q.grad, qd.grad, qb.grad), ("dk", k.grad, kd.grad, kb.grad),
                                      ("dv", v.grad, vd.grad, vb.grad)):
            assert got.shape == want.shape and got.dtype == dtype
            err, yard_err = rel_err(got, want), rel_err(yard, want)
            assert err < TOL[dtype] or err <= 2 * yard_err, f"{dtype} {name}: rel err {err} (torch {yard_err})"


def _lowp_reference(q, k, v, causal):
    B, Tq, Hq, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    kk, vv = k.repeat_interleave(Hq // Hkv, dim=2), v.repeat_interleave(Hq // Hkv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kk).float() / math.sqrt(D)
    if causal:
        i = torch.arange(Tq, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        s = s.masked_fill(j > i + Tk - Tq, float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return torch.einsum("bhij,bjhd->bihd", p, vv)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs(device):
    dtype = dtypes_for(device)[0]
    B, T, H, D = 2, 64, 4, 64 if device == "cuda" else 32
    g = torch.Generator().manual_seed(5)
    # 1. BHTD storage seen as BTHD (transpose): taken as is by the C API.
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(device, dtype).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    assert rel_err(run(flashbox.attention, q, k, v, causal=True), reference(q, k, v, True)) < TOL[dtype]
    # 2. Slices of a fused qkv projection [B, T, 3, H, D], as GPT-2's c_attn produces.
    qkv = torch.randn(B, T, 3, H, D, generator=g).to(device, dtype)
    q, k, v = qkv.unbind(2)
    assert rel_err(run(flashbox.attention, q, k, v), reference(q, k, v, False)) < TOL[dtype]
    # 3. head_dim not contiguous: copied (with a warning), still right.
    wide = torch.randn(B, T, H, 2 * D, generator=g).to(device, dtype)
    q = wide[..., ::2]
    flashbox.ops._copy_warned.clear()
    with pytest.warns(UserWarning, match="head_dim must be contiguous"):
        o = run(flashbox.attention, q, k, v)
    assert rel_err(o, reference(q, k, v, False)) < TOL[dtype]
    # 4. Broadcast (stride 0) kv heads from expand(): copied, still right.
    k1 = torch.randn(B, T, 1, D, generator=g).to(device, dtype)
    ke, ve = k1.expand(B, T, H, D), k1.expand(B, T, H, D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o = run(flashbox.attention, q.contiguous(), ke, ve, causal=True)
    assert rel_err(o, reference(q, ke, ve, True)) < TOL[dtype]
    # Gradients through a strided input land in the input's layout.
    qs = torch.randn(B, H, T, D, generator=g).to(device, dtype).requires_grad_()
    o = run(flashbox.attention, qs.transpose(1, 2), k, v, causal=True)
    run(o.float().sum().backward)
    assert qs.grad.shape == (B, H, T, D) and torch.isfinite(qs.grad).all()


def test_cpu_fp32_forward_and_backward_vs_reference():
    q, k, v = inputs(2, 24, 30, 4, 2, 16, torch.float32, "cpu", seed=7, requires_grad=True)
    o = run(flashbox.attention, q, k, v, causal=True, softmax_scale=0.2)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = reference(*ref_in, True, scale=0.2)
    assert rel_err(o, ref) < 1e-5
    do = torch.randn_like(o)
    run(o.backward, do)
    ref.backward(do.double())
    for got, want in zip((q.grad, k.grad, v.grad), (t.grad for t in ref_in)):
        assert rel_err(got, want) < 1e-4


def test_no_grad_and_inference_mode():
    q, k, v = inputs(1, 16, 16, 2, 2, 16, torch.float32, "cpu", requires_grad=True)
    with torch.no_grad():
        o1 = run(flashbox.attention, q, k, v)
    with torch.inference_mode():
        o2 = run(flashbox.attention, q.detach(), k.detach(), v.detach())
    assert not o1.requires_grad and torch.equal(o1, o2)


# ---- flash_attn_func ----

@pytest.mark.parametrize("device", DEVICES)
def test_flash_attn_func_semantics(device):
    dtype = dtypes_for(device)[0]
    q, k, v = inputs(2, 40, 56, 4, 2, 32 if device == "cpu" else 64, dtype, device)
    for causal in (False, True):
        o = run(flashbox.flash_attn_func, q, k, v, 0.0, None, causal)   # positional, as FA2 callers do
        assert rel_err(o, reference(q, k, v, causal)) < TOL[dtype]
        o = run(flashbox.flash_attn_func, q, k, v, softmax_scale=0.1, causal=causal, deterministic=True)
        assert rel_err(o, reference(q, k, v, causal, scale=0.1)) < TOL[dtype]
    o = run(flashbox.flash_attn_func, q, k, v, causal=True, window_size=(-1, 0))  # == causal in FA2
    assert rel_err(o, reference(q, k, v, True)) < TOL[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_flash_attn_packed_forms(device):
    dtype = dtypes_for(device)[0]
    D = 32 if device == "cpu" else 64
    g = torch.Generator().manual_seed(9)
    qkv = torch.randn(2, 40, 3, 4, D, generator=g).to(device, dtype).requires_grad_()
    o = run(flashbox.flash_attn_qkvpacked_func, qkv, causal=True)
    q, k, v = qkv.detach().unbind(2)
    assert rel_err(o, reference(q, k, v, True)) < TOL[dtype]
    run(o.float().sum().backward)                 # gradients land in the packed tensor
    assert qkv.grad.shape == qkv.shape and torch.isfinite(qkv.grad).all()
    q = torch.randn(2, 24, 4, D, generator=g).to(device, dtype)
    kv = torch.randn(2, 40, 2, 2, D, generator=g).to(device, dtype)   # GQA: 2 kv heads
    o = run(flashbox.flash_attn_kvpacked_func, q, kv, causal=True, softmax_scale=0.2)
    assert rel_err(o, reference(q, kv[:, :, 0], kv[:, :, 1], True, scale=0.2)) < TOL[dtype]
    with pytest.raises(NotImplementedError, match="dropout_p"):
        flashbox.flash_attn_kvpacked_func(q, kv, dropout_p=0.5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dropout_p=0.1), "dropout_p=0.1 is not supported"),
    (dict(window_size=(128, 0)), r"window_size=\(128, 0\)"),
    (dict(window_size=(-1, 0)), r"window_size=\(-1, 0\)"),   # without causal it is a real window
    (dict(alibi_slopes="slopes"), "alibi_slopes is not supported"),
    (dict(softcap=30.0), "softcap=30.0 is not supported"),
    (dict(return_attn_probs=True), "return_attn_probs=True is not supported"),
])
def test_flash_attn_func_unsupported_options_raise(kwargs, match):
    q, k, v = inputs(1, 8, 8, 2, 2, 16, torch.float32, "cpu")
    if "alibi_slopes" in kwargs:
        kwargs["alibi_slopes"] = torch.ones(2)
    with pytest.raises(NotImplementedError, match=match):
        flashbox.flash_attn_func(q, k, v, **kwargs)


# ---- errors ----

@needs_cuda
def test_cuda_errors_carry_the_c_api_message():
    q, k, v = inputs(1, 64, 64, 2, 2, 100, torch.bfloat16, "cuda")
    with pytest.raises(flashbox.FlashboxError) as r:
        flashbox.attention(q, k, v)
    e = r.value
    assert e.code == _lib.ErrorCode.UNSUPPORTED_HEAD_DIM, e
    assert "100" in e.message and e.message in str(e)
    q, k, v = inputs(1, 64, 64, 2, 2, 64, torch.float32, "cuda")
    with pytest.raises(flashbox.FlashboxError) as r:
        flashbox.attention(q, k, v)
    assert r.value.code == _lib.ErrorCode.UNSUPPORTED_DTYPE and r.value.message


def test_errors():
    q, k, v = inputs(1, 8, 8, 3, 2, 16, torch.float32, "cpu")
    with pytest.raises(flashbox.FlashboxError) as r:       # the C API's GQA check
        flashbox.attention(q, k, v)
    assert r.value.code == _lib.ErrorCode.HEADS_MISMATCH and r.value.message
    q, k, v = inputs(1, 8, 8, 2, 2, 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match="same shape"):
        flashbox.attention(q, k, v[:, :4])
    with pytest.raises(ValueError, match="4-D"):
        flashbox.attention(q[0], k, v)
    with pytest.raises(TypeError, match="one dtype"):
        flashbox.attention(q, k.half(), v)
    with pytest.raises(TypeError, match="float64"):
        flashbox.attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="softmax_scale"):
        flashbox.attention(q, k, v, softmax_scale=0.0)


# ---- torch.compile and CUDA graphs ----

class TinyBlock(torch.nn.Module):
    def __init__(self, dim=64, heads=2, kv_heads=1):
        super().__init__()
        self.h, self.kvh, self.d = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.d)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        B, T, C = x.shape
        y = self.norm(x)
        q = self.q(y).view(B, T, self.h, self.d)
        k, v = self.kv(y).view(B, T, 2, self.kvh, self.d).unbind(2)
        a = flashbox.attention(q, k, v, causal=True)
        a = a + flashbox.flash_attn_func(q, k, v, causal=True, softmax_scale=0.5)
        return x + self.proj(a.reshape(B, T, C))


def _block_and_input(device):
    torch.manual_seed(0)
    dtype = dtypes_for(device)[0]
    dim = 128 if device == "cuda" else 64      # head_dim 64 on CUDA, 32 on CPU
    m = TinyBlock(dim).to(device, dtype)
    x = torch.randn(2, 48, dim, device=device, dtype=dtype)
    return m, x


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_has_no_graph_break(device):
    m, x = _block_and_input(device)
    run(m, x)  # the backend is there
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(m)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    x1 = x.clone().requires_grad_()
    out = compiled(x1)
    ref = m(x.clone())
    assert rel_err(out, ref) < 1e-2
    out.float().sum().backward()       # the backward op through AOTAutograd
    assert x1.grad is not None and torch.isfinite(x1.grad).all()


@needs_cuda
def test_compile_inductor_matches_eager():
    m, x = _block_and_input("cuda")
    run(m, x)
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    oe, oc = m(xe), compiled(xc)
    assert rel_err(oc, oe) < 2e-2
    oe.float().sum().backward()
    oc.float().sum().backward()
    assert rel_err(xc.grad, xe.grad) < 5e-2


@needs_cuda
def test_cuda_graph_capture_and_replay_equals_eager():
    q, k, v = inputs(2, 256, 256, 4, 2, 64, torch.bfloat16, "cuda", seed=11)
    run(flashbox.attention, q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):          # warm up on a side stream, as torch.cuda.graphs advises
        for _ in range(2):
            flashbox.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_static = flashbox.attention(q, k, v, causal=True)
    for seed in (12, 13):
        q2, k2, v2 = inputs(2, 256, 256, 4, 2, 64, torch.bfloat16, "cuda", seed=seed)
        q.copy_(q2), k.copy_(k2), v.copy_(v2)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(o_static, flashbox.attention(q2, k2, v2, causal=True))


@needs_cuda
def test_cuda_graph_capture_forward_backward():
    q, k, v = inputs(1, 128, 128, 4, 4, 64, torch.bfloat16, "cuda", seed=21, requires_grad=True)
    do = torch.randn_like(q)

    def step():
        for t in (q, k, v):
            t.grad = None
        o = flashbox.attention(q, k, v, causal=True)
        o.backward(do)
        return q.grad, k.grad, v.grad

    run(step)
    eager = [g.clone() for g in step()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for t in (q, k, v):
        t.grad = None
    with torch.cuda.graph(graph):
        o = flashbox.attention(q, k, v, causal=True)
        o.backward(do)
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip((q.grad, k.grad, v.grad), eager):
        assert rel_err(got, want) < 1e-2


@needs_cuda
def test_no_host_sync_through_torch():
    # torch raises on any synchronising call it makes (allocations, .item(), copies to the host); the
    # library's own CUDA calls are covered by the graph-capture tests, where a sync fails the capture.
    q, k, v = inputs(2, 128, 128, 4, 4, 64, torch.bfloat16, "cuda", seed=41, requires_grad=True)
    do = torch.randn_like(q)
    run(lambda: flashbox.attention(q, k, v, causal=True).backward(do))
    torch.cuda.set_sync_debug_mode("error")
    try:
        o = flashbox.attention(q, k, v, causal=True)
        o.backward(do)
        o = flashbox.flash_attn_func(q, k, v, causal=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_cuda
def test_deterministic_backward_is_bitwise_reproducible():
    q, k, v = inputs(2, 256, 256, 8, 2, 64, torch.bfloat16, "cuda", seed=31, requires_grad=True)
    do = torch.randn_like(q)
    grads = []
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        o = run(flashbox.flash_attn_func, q, k, v, causal=True, deterministic=True)
        run(o.backward, do)
        grads.append([t.grad.clone() for t in (q, k, v)])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_op_registration_and_fake_shapes():
    # The fake (meta) kernels: o like q (contiguous), lse [B, H, Tq] fp32; grads shaped like q/k/v.
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 10, 8, 64, dtype=torch.bfloat16, device="cuda" if torch.cuda.is_available() else "cpu")
        k = torch.empty(2, 12, 2, 64, dtype=q.dtype, device=q.device)
        o, lse = torch.ops.flashbox.attention_fwd(q, k, k, 0.0, True, False)
        assert o.shape == q.shape and o.dtype == q.dtype and o.is_contiguous()
        assert lse.shape == (2, 8, 10) and lse.dtype == torch.float32
        dq, dk, dv = torch.ops.flashbox.attention_bwd(o, q, k, k, o, lse, 0.0, True, False)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
    qm = torch.empty(2, 10, 8, 64, dtype=torch.bfloat16, device="meta")   # the fake kernel is the meta one
    km = torch.empty(2, 12, 2, 64, dtype=torch.bfloat16, device="meta")
    o, lse = torch.ops.flashbox.attention_fwd(qm, km, km, 0.0, False, False)
    assert o.device.type == "meta" and o.shape == qm.shape and lse.shape == (2, 8, 10)
    # torch's own checks of a custom op: schema, autograd registration, fake vs real, AOT dispatch.
    run(torch.library.opcheck, torch.ops.flashbox.attention_fwd.default,
        inputs(1, 8, 8, 2, 2, 16, torch.float32, "cpu", requires_grad=True) + (0.0, True, False))
