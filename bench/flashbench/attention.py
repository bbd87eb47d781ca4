"""One attention row: flashbox and every peer present on the same fresh random tensors, in one process.

A case is a dict: batch, heads_q, heads_kv, seqlen, head_dim, causal, pass ("forward" or "backward"),
and optionally head_dim_v (V's and O's head dim, when it differs), window (left, right), softcap, alibi
(True), cu_seqlens (a list of lengths: varlen).
Peers: PyTorch SDPA's cuDNN / FlashAttention-2 / memory-efficient backends, FlexAttention compiled, and
a torch.compile'd plain formula where the T x T scores fit (masks). A peer that cannot run the case
(no such backend, unsupported shape) is left out of the row with its reason in notes."""
from .timing import rel_error, time_interleaved

BOUND = 2e-2  # bf16 relative error a correct kernel stays well under (rounding alone gives ~4e-3)
REFERENCE_ORDER = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex", "torch_compile_math")
_compiled = {}


def _torch():
    import torch
    return torch


def flashbox_python(ctx):
    """The repository's python/ package on sys.path, bound to the library this run times (--lib)."""
    import os
    import sys
    python_dir = os.path.join(os.path.dirname(ctx.bench_dir), "python")
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    from flashbox import _lib
    if _lib._library is None:  # the library this run times, not another build
        _lib._library = _lib._Library(os.path.abspath(ctx.lib.path), "bench/run.py --lib")


def flops(case):
    """Forward FLOPs: 4 per visible (query, key) pair per head_dim; causal counts half the square
    (2·B·H·T²·D), a window its visible pairs. Backward: 2.5x the forward. With a head_dim_v of its own
    D is the mean (D + Dv) / 2: 2 per pair per column of Q·Kᵀ (D) and of P·V (Dv)."""
    H, lens = case["heads_q"], case.get("cu_seqlens")
    D = (case["head_dim"] + case.get("head_dim_v", case["head_dim"])) / 2
    if lens:
        pairs = sum(visible_pairs(L, case["causal"], case.get("window")) for L in lens)
    else:
        pairs = case["batch"] * visible_pairs(case["seqlen"], case["causal"], case.get("window"))
    return 4.0 * H * D * pairs * (2.5 if case["pass"] == "backward" else 1.0)


def visible_pairs(T, causal, window):
    if window is None:
        return T * T / 2 if causal else T * T
    left, right = window
    right = 0 if causal else right
    return sum(min(T - 1, i + right) - max(0, i - left) + 1 for i in range(T))


def _mods(case, H):
    """FlexAttention's score_mod and mask_mod for the case (None when not needed)."""
    torch = _torch()
    cap, window, causal = case.get("softcap", 0.0), case.get("window"), case["causal"]
    slopes = alibi_slopes(H) if case.get("alibi") else None
    doc = None
    if case.get("cu_seqlens"):
        doc = torch.repeat_interleave(torch.arange(len(case["cu_seqlens"]), device="cuda"),
                                      torch.tensor(case["cu_seqlens"], device="cuda"))

    def score_mod(score, b, h, qi, ki):
        if cap:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            score = score - slopes[h] * (qi - ki).abs()
        return score

    def mask_mod(b, h, qi, ki):
        keep = qi >= ki if causal else qi == qi
        if window is not None:
            keep = keep & (qi - ki <= window[0]) & (ki - qi <= window[1])
        if doc is not None:
            keep = keep & (doc[qi] == doc[ki])
        return keep
    need_mask = causal or window is not None or doc is not None
    return (score_mod if cap or slopes is not None else None), (mask_mod if need_mask else None)


def alibi_slopes(H):
    torch = _torch()
    return torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], device="cuda", dtype=torch.float32)


def _refused(error):
    """A peer that raises error when called: run_case records it in the row's notes."""
    def run(*_):
        raise error
    return run


def peer_fns(case, q, k, v, wanted=None):
    """{name: fn(q, k, v) -> o} for the peers that apply to the case ([B, H, T, D] tensors), those in
    wanted only when it is given."""
    torch = _torch()
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gqa = case["heads_q"] != case["heads_kv"]
    plain = not (case.get("window") or case.get("softcap") or case.get("alibi") or case.get("cu_seqlens"))
    peers = {}
    if plain:
        for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):
            def run(q, k, v, backend=backend):
                with sdpa_kernel(backend):
                    extra = {"enable_gqa": True} if gqa else {}
                    return F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], **extra)
            peers[name] = run
    elif case.get("cu_seqlens"):
        def per_seq(q, k, v):  # each sequence as its own fixed-length cuDNN call
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                outs, s = [], 0
                for L in case["cu_seqlens"]:
                    outs.append(F.scaled_dot_product_attention(q[:, :, s:s + L], k[:, :, s:s + L], v[:, :, s:s + L],
                                                               is_causal=case["causal"]))
                    s += L
                return torch.cat(outs, dim=2)
        peers["sdpa_cudnn_per_seq"] = per_seq
    use = lambda name: wanted is None or name in wanted  # noqa: E731
    peers = {n: f for n, f in peers.items() if use(n)}
    score_mod, mask_mod = _mods(case, case["heads_q"])
    T = q.shape[2]
    if use("flex"):
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            if "flex" not in _compiled:
                torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
                _compiled["flex"] = torch.compile(flex_attention, dynamic=False)
            block = create_block_mask(mask_mod, None, None, T, T, device="cuda") if mask_mod else None
            peers["flex"] = lambda q, k, v, block=block, score_mod=score_mod: _compiled["flex"](
                q, k, v, score_mod=score_mod, block_mask=block, enable_gqa=gqa)
        except Exception as e:  # no FlexAttention in this torch, or it refused the case: the row's note
            peers["flex"] = _refused(e)
    fits = case["batch"] * case["heads_q"] * T * T * 4 <= (8 << 30)  # the fp32 scores, materialised
    if use("torch_compile_math") and not plain and not case.get("cu_seqlens") and fits:
        idx = torch.arange(T, device="cuda")
        keep = mask_mod(0, 0, idx[:, None], idx[None, :]) if mask_mod else None
        heads = torch.arange(case["heads_q"], device="cuda")[:, None, None]

        def formula(q, k, v):
            s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
            if score_mod:
                s = score_mod(s, 0, heads, idx[:, None], idx[None, :])
            if keep is not None:
                s = s.masked_fill(~keep, float("-inf"))
            return (s.softmax(-1) @ v.float()).to(q.dtype)
        peers["torch_compile_math"] = torch.compile(formula, dynamic=False)
    return peers


def run_case(ctx, case, seed):
    """The row of one case: times, perf (TFLOP/s), ratios, error against the first reference peer."""
    torch = _torch()
    B, Hq, Hkv, T, D = case["batch"], case["heads_q"], case["heads_kv"], case["seqlen"], case["head_dim"]
    Dv = case.get("head_dim_v", D)
    backward = case["pass"] == "backward"
    lens = case.get("cu_seqlens")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    Bt, Tt = (1, sum(lens)) if lens else (B, T)
    rnd = lambda h, d=D: torch.randn(Bt, h, Tt, d, device="cuda", dtype=torch.bfloat16, generator=gen)  # noqa: E731
    q, k, v = rnd(Hq), rnd(Hkv), rnd(Hkv, Dv)
    do = rnd(Hq, Dv) if backward else None
    fns, outs, notes, kernel = {}, {}, {}, {}

    def flashbox_fn(lib):
        o = torch.empty(Bt, Hq, Tt, Dv, device="cuda", dtype=q.dtype)
        lse = torch.empty(Bt, Hq, Tt, device="cuda", dtype=torch.float32)
        if lens:  # packed: one [total, H, D] view per tensor, batch = number of sequences
            cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
            view = lambda t: t.permute(0, 2, 1, 3)  # noqa: E731  [1, total, H, D] strided view
            args = lib.attention_args(view(q), view(k), view(v), view(o), lse, case["causal"], "bthd", batch=len(lens))
            ext = lib.ext(cu_q=cu, cu_k=cu, max_q=max(lens), max_k=max(lens))
            ext._keep = cu
        else:
            args = lib.attention_args(q, k, v, o, lse, case["causal"])
            window = case.get("window")
            if window and case["causal"]:
                window = (window[0], 0)
            slopes = alibi_slopes(Hq) if case.get("alibi") else None
            ext = lib.ext(window=window or (-1, -1), softcap=case.get("softcap", 0.0), alibi=slopes, head_dim_v=Dv) \
                if (window or case.get("softcap") or slopes is not None or Dv != D) else None
            if ext is not None:
                ext._keep = slopes
        fwd = lib.forward(args, ext)
        # args holds raw pointers: the closures keep every tensor it names alive (a freed o or lse
        # would be handed to the next allocation while the library still writes or reads it).
        keep = (q, k, v, o, lse, args, ext)
        if not backward:
            return (lambda: fwd() or keep), (lambda: o)
        fwd()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        layout = "bthd" if lens else "bhtd"
        if lens:
            view = lambda t: t.permute(0, 2, 1, 3)  # noqa: E731
            bwd = lib.backward(args, view(do), view(dq), view(dk), view(dv), layout, ext)
        else:
            bwd = lib.backward(args, do, dq, dk, dv, layout, ext)
        return (lambda: bwd() or keep), (lambda: (dq, dk, dv))

    for name, lib in [("flashbox", ctx.lib)] + ([("flashbox_baseline", ctx.baseline)] if ctx.baseline else []):
        try:
            fn, result = flashbox_fn(lib)
            fn()
            kernel[name] = lib.last_kernel()
            outs[name] = result()
            fns[name] = fn
        except Exception as e:  # an unsupported case is a row's note, not the end of the suite
            notes[name] = str(e).splitlines()[0][:200]
    for name, peer in peer_fns(case, q, k, v, ctx.peers).items():
        try:
            fns[name], outs[name] = peer_call(peer, q, k, v, do if backward else None)
        except Exception as e:
            notes[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    times = time_interleaved(fns, ctx.rounds)
    # The reference is the first of REFERENCE_ORDER that ran; when --peers left them all out, the
    # first that can run is computed here, untimed.
    refs = {n: o for n, o in outs.items() if n in REFERENCE_ORDER}
    if not any(n in refs for n in REFERENCE_ORDER[:2]):
        for name, peer in peer_fns(case, q, k, v, set(REFERENCE_ORDER[:2])).items():
            try:
                if backward:
                    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
                    refs[name] = torch.autograd.grad(peer(qg, kg, vg), (qg, kg, vg), do)
                else:
                    refs[name] = peer(q, k, v)
                break
            except Exception:
                continue
    ref = next((n for n in REFERENCE_ORDER if n in refs), None)
    err = lambda a, b: max(rel_error(x, y) for x, y in zip(a, b)) if backward else rel_error(a, b)  # noqa: E731
    error = err(outs["flashbox"], refs[ref]) if "flashbox" in outs and ref else None
    row = finish_row(case, seed, "TFLOP/s", flops(case), times, error, ref, notes, kernel.get("flashbox"))
    if ref:  # every implementation's error against the same reference
        row["errors"] = {n: err(o, refs[ref]) for n, o in outs.items() if n != ref}
        row["errors"] = {n: (e if e != float("inf") else None) for n, e in row["errors"].items()}
    return row


def peer_call(peer, q, k, v, do=None):
    """(the timed callable, its first output) of a peer: peer(q, k, v), or with do the gradients of
    q, k, v through autograd (the graph built once, outside the timing). Each callable binds its own
    peer and tensors (defaults): a plain closure made in a loop would see the loop's last peer."""
    import torch
    if do is None:
        fn = lambda peer=peer: peer(q, k, v)  # noqa: E731
    else:
        qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
        out = peer(qg, kg, vg)
        fn = lambda out=out, inputs=(qg, kg, vg): torch.autograd.grad(out, inputs, do, retain_graph=True)  # noqa: E731
    return fn, fn()


def finish_row(shape, seed, metric, work, times, error, ref, notes, kernel=None, scale=1e12, bound=BOUND):
    """perf = work / time in the metric's unit, ratio = flashbox's perf / each peer's (>1: flashbox faster)."""
    perf = {n: work / (t * 1e-3) / scale for n, t in times.items() if t}
    ratio = {n: perf["flashbox"] / p for n, p in perf.items() if n != "flashbox" and "flashbox" in perf and p}
    if error is not None and error == float("inf"):  # JSON has no inf: the row says it instead
        error, notes = None, {**notes, "flashbox": "output not finite (NaN or inf)"}
        status = "fail"
    elif "flashbox" not in times:
        status = "skip"
    elif error is not None and not error <= bound:
        status = "fail"
    else:
        status = "ok"
    return {"shape": shape, "seed": seed, "metric": metric, "work": work, "time_ms": times, "perf": perf,
            "ratio": ratio, "error": error, "error_vs": ref, "error_bound": bound, "kernel": kernel,
            "status": status, "notes": notes}
