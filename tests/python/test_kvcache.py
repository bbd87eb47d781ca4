"""flashbox.kvcache (flash_attn_with_kvcache): the ctypes struct against a C compiler (no torch), and
with torch: CPU and CUDA against a float64 computation on the gathered cache, paged and contiguous,
new k/v appended in place."""


import pysupport as S
from flashbox import kvcache


def test_kvcache_struct_layout_matches_c_compiler():
    S.assert_struct_layout_matches_c((kvcache.KvcacheArgs, "flashbox_kvcache_args"))


def _torch():
    try:
        import torch
    except ImportError:
        S.skip("torch is not installed")
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 4):   # flashbox.kvcache's tensor path goes through flashbox.ops
        S.skip(f"flashbox.kvcache with tensors needs torch >= 2.4 (torch.library.custom_op); "
               f"this is {torch.__version__}")
    return torch


def _reference(torch, q, k_cache, v_cache, seqlens, block_table, causal):
    """float64 attention of each batch entry over its gathered keys (bottom-right causal)."""
    B, Sq, H, D = q.shape
    Hk = k_cache.shape[2]
    out = torch.zeros(B, Sq, H, D, dtype=torch.float64)
    for b in range(B):
        L = int(seqlens[b])
        if block_table is not None:
            P = k_cache.shape[1]
            idx = [int(block_table[b, j // P]) * P + j % P for j in range(L)]
            k = k_cache.reshape(-1, Hk, D)[idx].double().cpu()
            v = v_cache.reshape(-1, Hk, D)[idx].double().cpu()
        else:
            k, v = k_cache[b, :L].double().cpu(), v_cache[b, :L].double().cpu()
        k = k.repeat_interleave(H // Hk, dim=1)
        v = v.repeat_interleave(H // Hk, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[b].double().cpu(), k) / D ** 0.5
        if causal:
            i = torch.arange(Sq)[:, None]
            j = torch.arange(L)[None, :]
            s = s.masked_fill(j > i + L - Sq, float("-inf"))
        out[b] = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)
    return out


def _case(torch, device, paged, dtype, D=64):
    g = torch.Generator().manual_seed(1234)
    B, Sq, H, Hk, cap, page = 3, 1, 8, 2, 96, 16
    q = torch.randn(B, Sq, H, D, generator=g).to(dtype)
    seqlens = torch.tensor([cap - 1, 1, 40], dtype=torch.int32)
    k_new = torch.randn(B, 1, Hk, D, generator=g).to(dtype)
    v_new = torch.randn(B, 1, Hk, D, generator=g).to(dtype)
    if paged:
        nblk = B * cap // page + 2
        k_cache = torch.randn(nblk, page, Hk, D, generator=g).to(dtype)
        v_cache = torch.randn(nblk, page, Hk, D, generator=g).to(dtype)
        block_table = torch.randperm(nblk, generator=g)[: B * cap // page].reshape(B, cap // page).to(torch.int32)
    else:
        k_cache = torch.randn(B, cap, Hk, D, generator=g).to(dtype)
        v_cache = torch.randn(B, cap, Hk, D, generator=g).to(dtype)
        block_table = None
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return [to(t) for t in (q, k_cache, v_cache, k_new, v_new, seqlens, block_table)]


def _check(device, dtype_name, D=64):
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    for paged in (False, True):
        for causal in (False, True):
            q, kc, vc, kn, vn, sl, bt = _case(torch, device, paged, dtype, D)
            out, lse = kvcache.flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=sl, block_table=bt,
                                                       causal=causal, return_softmax_lse=True)
            ref = _reference(torch, q, kc, vc, sl.cpu() + 1, None if bt is None else bt.cpu(), causal)
            err = (out.double().cpu() - ref).norm() / ref.norm()
            assert err < (1e-5 if dtype == torch.float32 else 1e-2), (paged, causal, float(err))
            assert torch.isfinite(lse).all()
            # The appended key sits in the cache at cache_seqlens.
            b, pos = 2, int(sl[2])
            if bt is None:
                assert torch.equal(kc[b, pos], kn[b, 0])
            else:
                P = kc.shape[1]
                assert torch.equal(kc[int(bt[b, pos // P]), pos % P], kn[b, 0])


def test_cpu_flash_attn_with_kvcache():
    S.require_symbol("flashbox_attention_forward")
    _check("cpu", "float32")


def test_cuda_flash_attn_with_kvcache():
    torch = _torch()
    if not torch.cuda.is_available() or _lib_cuda_count() == 0:
        S.skip("no CUDA device (or a flashbox without CUDA)")
    _check("cuda", "bfloat16")


def test_cuda_head_dim_not_a_multiple_of_8():
    # head_dim 59 (one of FlashAttention-2's test sizes): padded to 64 in Python, the appended key
    # written back into the caller's 59-wide cache (checked in _check).
    torch = _torch()
    if not torch.cuda.is_available() or _lib_cuda_count() == 0:
        S.skip("no CUDA device (or a flashbox without CUDA)")
    _check("cuda", "bfloat16", D=59)


def _lib_cuda_count():
    from flashbox import _lib
    return _lib.cuda_device_count()
