"""The mask-families suite: flashbox's masks as data (document ids, prefix lengths, windows, block
tables), as code (an NVRTC mask mod) and its sinks, against torch.compile'd FlexAttention on the same
BlockMask, at B·T = 32k tokens, 16 heads of 128, bf16, forward and backward.

Rows (each timed in one process, interleaved call by call):
  document 8 / 32      causal, 8 or 32 documents of random lengths per sequence (document_ids_q/k)
  prefix-LM            causal with a bidirectional prefix of random length per sequence (prefix_lengths)
  window 1024          causal sliding window of 1,024 keys
  mod document+causal  the same mask as document 8, as a CUDA C++ mask mod (flashbox_mod_create), timed
                       beside the built-in family ("flashbox_builtin": the 3 % rule of the issue)
  block-sparse 50 %    random full key blocks, half of each query block's row (FlexAttention's BlockMask
                       from_kv_blocks, no mask_mod)
  sinks                plain causal with a learnable sink per head, beside the same call without it
                       ("flashbox_nosink"), and cuDNN
The work is 4·D per visible (query, key) pair per head (2.5x in the backward), counted from the mask,
so TFLOP/s compare across rows; the error is against FlexAttention's output (rows without it: none).
The mod row also reports flashbox_mod_create's seconds with a fresh disk cache and again from it."""
import ctypes
import os
import tempfile

from . import abi
from .attention import finish_row, flashbox_python, peer_call
from .timing import rel_error, time_interleaved

B, T, H, D = 4, 8192, 16, 128
BLOCK = 128
MOD_SAME_HEADS = 2  # FLASHBOX_MOD_SAME_HEADS
DOC_MOD = """
__device__ bool doc_causal(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux) {
  return kv_idx <= q_idx && aux.doc(b, q_idx) == aux.doc(b, kv_idx);
}
"""
_flex = {}


def _doc_ids(torch, gen, docs, T):
    """int32 [B, T]: each row cut at docs - 1 distinct random points."""
    rows = []
    for _ in range(B):
        cuts = torch.randperm(T - 1, generator=gen, device="cpu")[:docs - 1] + 1
        marks = torch.zeros(T, dtype=torch.int32)
        marks[cuts] = 1
        rows.append(marks.cumsum(0).to(torch.int32))
    return torch.stack(rows).cuda()


def _pairs(torch, keep_row):
    """Visible (query, key) pairs summed over the batch: keep_row(b, qi [T, 1], ki [1, T]) -> bool."""
    idx = torch.arange(T, device="cuda")
    return float(sum(int(keep_row(b, idx[:, None], idx[None, :]).sum()) for b in range(B)))


def _flex_fn(torch, mask_mod, block_mask):
    from torch.nn.attention.flex_attention import flex_attention
    if "fn" not in _flex:
        _flex["fn"] = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: _flex["fn"](q, k, v, block_mask=block_mask)


def _case(torch, name, gen):
    """(ext fields dict, flex BlockMask or None, visible pairs, extra notes) of a mask family."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask
    if name.startswith("document") or name == "mod document+causal":
        docs = 8 if name in ("document 8", "mod document+causal") else 32
        doc = _doc_ids(torch, gen, docs, T)

        def mm(b, h, qi, ki):
            return (ki <= qi) & (doc[b, qi] == doc[b, ki])
        bm = create_block_mask(mm, B, None, T, T, device="cuda")
        return dict(doc=doc), bm, _pairs(torch, lambda b, qi, ki: mm(b, 0, qi, ki))
    if name == "prefix-LM":
        prefix = torch.randint(T // 8, T // 2, (B,), generator=gen, device="cpu").to(torch.int32).cuda()

        def mm(b, h, qi, ki):
            return (ki <= qi) | (ki < prefix[b])
        bm = create_block_mask(mm, B, None, T, T, device="cuda")
        return dict(prefix=prefix), bm, _pairs(torch, lambda b, qi, ki: mm(b, 0, qi, ki))
    if name == "window 1024":
        def mm(b, h, qi, ki):
            return (ki <= qi) & (qi - ki <= 1024)
        bm = create_block_mask(mm, None, None, T, T, device="cuda")
        return dict(window=(1024, 0)), bm, _pairs(torch, lambda b, qi, ki: mm(b, 0, qi, ki))
    if name == "block-sparse 50%":
        nb = T // BLOCK
        keys = torch.rand(B, H, nb, nb, generator=gen, device="cpu").argsort(-1)[..., :nb // 2]
        full_idx = torch.zeros(B, H, nb, nb, dtype=torch.int32)
        full_idx[..., :nb // 2] = keys.sort(-1).values.to(torch.int32)
        full_num = torch.full((B, H, nb), nb // 2, dtype=torch.int32)
        kv_num = torch.zeros(B, H, nb, dtype=torch.int32)
        kv_idx = torch.zeros(B, H, nb, nb, dtype=torch.int32)
        full_num, full_idx, kv_num, kv_idx = (x.cuda() for x in (full_num, full_idx, kv_num, kv_idx))
        bm = BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=BLOCK)
        pairs = float(full_num.sum()) * BLOCK * BLOCK / H
        return dict(tables=(kv_num, kv_idx, full_num, full_idx)), bm, pairs
    if name == "sinks":
        return dict(sinks=True), None, B * T * (T + 1) / 2
    raise ValueError(name)


def _ext(lib, torch, fields, mod=None):
    """The flashbox_attention_ext of a family (and what it points at, kept alive in ext._keep)."""
    e = lib.ext(window=fields.get("window", (-1, -1)))
    keep = []
    if "doc" in fields and mod is None:
        e.document_ids_q = e.document_ids_k = fields["doc"].data_ptr()
    if "prefix" in fields:
        e.prefix_lengths = fields["prefix"].data_ptr()
    if "tables" in fields:
        kv_num, kv_idx, full_num, full_idx = fields["tables"]
        t = abi.BlockMaskTables()
        t.struct_size, t.batch, t.heads = ctypes.sizeof(t), B, H
        t.q_block_size = t.kv_block_size = BLOCK
        t.max_kv_blocks = t.max_q_blocks = kv_idx.shape[-1]
        t.kv_num_blocks, t.kv_indices = kv_num.data_ptr(), kv_idx.data_ptr()
        t.full_kv_num_blocks, t.full_kv_indices = full_num.data_ptr(), full_idx.data_ptr()
        e.block_mask = ctypes.addressof(t)
        keep.append(t)
    if mod is not None:
        aux = (abi.AuxTensor * 1)(lib.aux_int32(fields["doc"]))
        e.mask_mod, e.mask_mod_aux = mod, ctypes.addressof(aux)
        e.mask_mod_broadcast = MOD_SAME_HEADS  # the mod reads b, not h: its tiles are built once per batch entry
        keep.append(aux)
    if fields.get("sinks"):
        sink = torch.randn(H, device="cuda", dtype=torch.float32, generator=fields["gen"]) + 2.0
        dsink = torch.empty_like(sink)
        e.learnable_sink, e.dsink = sink.data_ptr(), dsink.data_ptr()
        keep += [sink, dsink]
    e._keep = keep
    return e


def _row(ctx, name, pas, seed):
    import torch
    gen = torch.Generator(device="cpu").manual_seed(seed)
    fields, block_mask, pairs = _case(torch, name, gen)
    fields["gen"] = torch.Generator(device="cuda").manual_seed(seed)
    backward = pas == "backward"
    rnd = lambda: torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=fields["gen"])  # noqa: E731
    q, k, v = rnd(), rnd(), rnd()
    do = rnd() if backward else None
    lib = ctx.lib
    notes, extra = {}, {}
    mod = None
    if name == "mod document+causal":
        cache = tempfile.mkdtemp(prefix="flashbox-mods-")
        os.environ["XDG_CACHE_HOME"] = cache  # a fresh disk cache: the first create compiles
        mod, first = lib.mask_mod(DOC_MOD, "doc_causal", [("doc", 2)])
        lib.mod_destroy(mod)
        mod, again = lib.mask_mod(DOC_MOD, "doc_causal", [("doc", 2)])
        extra["mod_create_s"] = {"first": first["seconds"], "again": again["seconds"],
                                 "again_from_cache": again["from_cache"]}

    def flashbox(ext_fields, mod_handle=None):
        o = torch.empty_like(q)
        lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
        causal = "tables" not in ext_fields and mod_handle is None
        args = lib.attention_args(q, k, v, o, lse, causal)
        ext = _ext(lib, torch, ext_fields, mod_handle)
        fwd = lib.forward(args, ext)
        keep = (q, k, v, o, lse, args, ext)
        if not backward:
            return (lambda: fwd() or keep), (lambda: o)
        fwd()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        bwd = lib.backward(args, do, dq, dk, dv, "bhtd", ext)
        return (lambda: bwd() or keep), (lambda: (dq, dk, dv))

    impls = {"flashbox": (fields, mod)}
    if mod is not None:
        impls["flashbox_builtin"] = (fields, None)
    if fields.get("sinks"):
        impls["flashbox_nosink"] = ({}, None)
    fns, outs, kernel = {}, {}, None
    for impl, (f, m) in impls.items():
        try:
            fn, result = flashbox(f, m)
            fn()
            if impl == "flashbox":
                kernel = lib.last_kernel()
            fns[impl], outs[impl] = fn, result()
        except Exception as e:  # an unsupported case is the row's note
            notes[impl] = str(e).splitlines()[0][:200]
    peers = {}
    if block_mask is not None and (ctx.peers is None or "flex" in ctx.peers):
        peers["flex"] = _flex_fn(torch, None, block_mask)
    if block_mask is not None:  # the same BlockMask through flashbox's Python layer (a family where recognised)
        try:
            flashbox_python(ctx)
            from flashbox.flex import flex_attention as flashbox_flex
            peers["flashbox_flex"] = lambda q, k, v: flashbox_flex(q, k, v, block_mask=block_mask)
        except Exception as e:  # torch < 2.5, or the package not importable: the row says so
            notes["flashbox_flex"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if fields.get("sinks") and (ctx.peers is None or "sdpa_cudnn" in ctx.peers):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def cudnn(q, k, v):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        peers["sdpa_cudnn"] = cudnn
    for pname, peer in peers.items():
        try:
            fns[pname], outs[pname] = peer_call(peer, q, k, v, do if backward else None)
        except Exception as e:
            notes[pname] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if "flashbox_flex" in fns:   # how flashbox.flex_attention ran the mask: a built-in family, or the mod
        from flashbox.flex import last_route
        extra["flashbox_flex_route"] = str(last_route("backward" if backward else "forward"))
    times = time_interleaved(fns, ctx.rounds)
    ref = "flex" if "flex" in outs else None
    err = (lambda a, b: max(rel_error(x, y) for x, y in zip(a, b))) if backward else rel_error
    error = err(outs["flashbox"], outs[ref]) if ref and "flashbox" in outs else None
    work = 4.0 * H * D * pairs * (2.5 if backward else 1.0)
    shape = dict(family=name, batch=B, heads_q=H, heads_kv=H, seqlen=T, head_dim=D, dtype="bf16", **{"pass": pas})
    row = finish_row(shape, seed, "TFLOP/s", work, times, error, ref, notes, kernel)
    if ref:
        row["errors"] = {n: err(o, outs[ref]) for n, o in outs.items() if n != ref}
        row["errors"] = {n: (e if e != float("inf") else None) for n, e in row["errors"].items()}
    row.update(extra)
    if mod is not None:
        lib.mod_destroy(mod)
    return row


FAMILIES = ("document 8", "document 32", "prefix-LM", "window 1024", "mod document+causal", "block-sparse 50%",
            "sinks")


def mask_families(ctx):
    fams = ("document 8", "mod document+causal") if ctx.quick else FAMILIES
    return [(f"{pas} {fam} B{B} T{T} H{H} D{D}", lambda fam=fam, pas=pas, i=i: _row(ctx, fam, pas, ctx.seed + i))
            for i, (pas, fam) in enumerate((p, f) for p in ("forward", "backward") for f in fams)]
