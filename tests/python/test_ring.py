"""flashbox.ring: the shard layouts against the C library's, and on a GPU with NCCL the entry with a
one-rank process group (forward and backward against flashbox.attention on the whole sequence).
Several ranks need several GPUs: bench/ring_bench.py under torchrun checks them against one GPU.

Skips, with the reason, where torch, libflashbox_cp, a GPU or NCCL is missing.
"""

import os

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="the PyTorch tests need torch >= 2.4")

import pysupport as S  # noqa: E402,F401  (puts python/ on sys.path)
from flashbox import _lib  # noqa: E402


def _ring():
    try:
        from flashbox import ring
        ring.cp_library()
        return ring
    except (_lib.LibraryNotFoundError, OSError) as e:
        pytest.skip(f"libflashbox_cp.so not available: {e}")


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_global_tokens_match_the_library(layout):
    ring = _ring()
    lib = ring.cp_library()
    for world in (1, 2, 3, 8):
        for rank in range(world):
            got = ring.global_tokens(world, rank, 6, layout).tolist()
            want = [lib.flashbox_cp_global_token(ring.LAYOUTS[layout], world, rank, 6, t) for t in range(6)]
            assert got == want, (layout, world, rank)


def test_shard_then_unshard_is_identity():
    ring = _ring()
    x = torch.randn(2, 48, 3, 8)
    for layout in ("contiguous", "zigzag"):
        shards = [ring.shard_sequence(x, 4, r, layout) for r in range(4)]
        assert torch.equal(ring.unshard_sequence(shards, layout), x)


def _cuda_nccl():
    ring = _ring()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    if not ring.cp_library().flashbox_cp_have_nccl():
        pytest.skip("libflashbox_cp built without NCCL")
    return ring


@pytest.mark.parametrize("variant", ["ring", "all_gather"])
def test_one_rank_equals_flashbox_attention(variant):
    ring = _cuda_nccl()
    import torch.distributed as dist
    import flashbox
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29517", world_size=1, rank=0)
    try:
        torch.manual_seed(0)
        q = torch.randn(1, 512, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, 512, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, 512, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn_like(q)
        o = ring.ring_attention(q, k, v, causal=True, variant=variant)
        o.backward(do)
        got = [o.detach(), q.grad, k.grad, v.grad]
        for t in (q, k, v):
            t.grad = None
        o2 = flashbox.attention(q, k, v, causal=True)
        o2.backward(do)
        want = [o2.detach(), q.grad, k.grad, v.grad]
        for name, a, b in zip(("o", "dq", "dk", "dv"), got, want):
            rel = ((a.float() - b.float()).norm() / b.float().norm()).item()
            assert rel < 1e-2, (name, rel)
    finally:
        if created:
            dist.destroy_process_group()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_simulated_ranks_equal_flashbox_attention(device):
    ring = _ring()
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    import flashbox
    dtype, d, tol = (torch.float32, 16, 1e-5) if device == "cpu" else (torch.bfloat16, 64, 1e-2)
    world, S = 4, 32
    torch.manual_seed(1)
    q = torch.randn(1, world * S, 4, d, device=device, dtype=dtype)
    k, v = (torch.randn(1, world * S, 2, d, device=device, dtype=dtype) for _ in range(2))
    do = torch.randn_like(q)
    for causal in (False, True):
        for variant in ("ring", "all_gather"):
            shards = [[ring.shard_sequence(t, world, r) for r in range(world)] for t in (q, k, v, do)]
            o = ring.unshard_sequence(ring.simulated_ranks(*shards[:3], causal=causal, variant=variant))
            grads = ring.simulated_ranks(*shards[:3], causal=causal, variant=variant, douts=shards[3])
            got = [o] + [ring.unshard_sequence([g[i] for g in grads]) for i in range(3)]
            qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
            og = flashbox.attention(qg, kg, vg, causal=causal)
            og.backward(do)
            for name, a, b in zip(("o", "dq", "dk", "dv"), got, (og.detach(), qg.grad, kg.grad, vg.grad)):
                rel = ((a.double() - b.double()).norm() / b.double().norm()).item()
                assert rel < tol, (device, causal, variant, name, rel)
