"""Context-parallel attention over NCCL: correctness against one GPU, then time, scaling and overlap.

Run with torchrun, one process per GPU (NVLink multicast stays off):

  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
  PYTHONPATH=python FLASHBOX_LIBRARY=build/libflashbox.so \\
  torchrun --standalone --nproc_per_node=N bench/ring_bench.py --json ring_xN.json

1. Check (--check-tokens per GPU): every rank builds the same global q, k, v, dO from one seed and
   takes its shard; the ring (and all-gather) forward and backward over NCCL, gathered back to global
   order, are compared with one flashbox call on the whole sequence on this GPU: rel. error of O,
   dQ, dK, dV < 1e-2 (bf16), for causal zigzag, causal contiguous and non-causal, GQA.
2. Time (--tokens-per-gpu, default 8k, 32k, 128k): forward and forward+backward of the ring
   (median of --repeats after --warmup, CUDA events, ranks aligned by a barrier before each repeat)
   for each mask/variant in --configs.
   Same per-GPU work on one GPU: one flashbox call over N*S tokens costs N times the per-GPU work
   of the N-rank ring (causal: N^2 S^2 / 2 pairs against N S^2 / 2 per rank), so
     scaling efficiency = (t_single(N*S) / N) / t_ring(N, S),
   measured in the same run on each GPU alone (no communication). 1.0 is ideal.
   Overlap: t_comm is the ring's transfers alone (the same bytes through NCCL send/recv, N-1 K/V
   shifts forward; backward adds N fp32 dK/dV shifts), t_compute = t_single(N*S) / N; the hidden
   fraction of the communication is (t_compute + t_comm - t_ring) / min(t_compute, t_comm), 1.0 when
   the ring costs max(compute, comm), 0 when it costs their sum.
Rank 0 prints a table and writes the JSON.

--simulate 2,4 (plain python3, one GPU, no torchrun): the same rank programs for N simulated ranks on
this one GPU (loopback transport, flashbox_cp_*_simulated), all N ranks' work in turn, against one
flashbox call on the N*S tokens. Both do the whole attention, so single / simulated is the cost of
cutting it into the ring's blocks (plus the loopback copies): an upper bound for the scaling
efficiency on N GPUs, measurable where several GPUs are not.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import flashbox  # noqa: E402
from flashbox import ring  # noqa: E402

CONFIGS = {
    "causal_zigzag_ring": dict(causal=True, layout="zigzag", variant="ring"),
    "causal_contiguous_ring": dict(causal=True, layout="contiguous", variant="ring"),
    "causal_zigzag_allgather": dict(causal=True, layout="zigzag", variant="all_gather"),
    "full_ring": dict(causal=False, layout="zigzag", variant="ring"),
}


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def check(args, world, rank, dev):
    """Ring over NCCL vs one flashbox call on the whole sequence."""
    S, T = args.check_tokens, args.check_tokens * world
    rows = []
    for name, cfg in CONFIGS.items():
        g = torch.Generator(device=dev).manual_seed(1234)
        shape_q, shape_kv = (1, T, args.heads, args.head_dim), (1, T, args.kv_heads, args.head_dim)
        q, do = (torch.randn(shape_q, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(shape_kv, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(2))
        lay = cfg["layout"]
        ql, kl, vl, dol = (ring.shard_sequence(t, world, rank, lay).requires_grad_(t is not do) for t in (q, k, v, do))
        o = ring.ring_attention(ql, kl, vl, causal=cfg["causal"], layout=lay, variant=cfg["variant"])
        o.backward(dol)
        got = []
        for t in (o.detach(), ql.grad, kl.grad, vl.grad):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t.contiguous())
            got.append(ring.unshard_sequence(parts, lay))
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        og = flashbox.attention(qg, kg, vg, causal=cfg["causal"])
        og.backward(do)
        errs = {n: rel(a, b) for n, a, b in zip(("o", "dq", "dk", "dv"), got, (og.detach(), qg.grad, kg.grad, vg.grad))}
        ok = all(e < 1e-2 for e in errs.values())
        rows.append(dict(config=name, tokens_per_gpu=S, world=world, **{f"rel_{k}": v for k, v in errs.items()}, ok=ok))
        log(f"check {name:26s} N={world} S={S}: " + " ".join(f"{k} {v:.2e}" for k, v in errs.items()) +
            ("  ok" if ok else "  FAIL"))
    return rows


def timed(fn, warmup, repeats):
    """Median milliseconds of fn() over repeats, every rank starting each repeat together."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    t = torch.tensor(sorted(ts)[len(ts) // 2], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's median: the step's time
    return t.item()


def comm_alone(nbytes, shifts, world, rank, dev, warmup, repeats):
    """`shifts` ring steps of nbytes each (send to rank+1, receive from rank-1), nothing else."""
    if world == 1 or shifts == 0:
        return 0.0
    send = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    recv = torch.empty_like(send)

    def run():
        for _ in range(shifts):
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
            for r in dist.batch_isend_irecv(ops):
                r.wait()
    return timed(run, warmup, repeats)


def bench(args, world, rank, dev):
    rows = []
    H, Hkv, D = args.heads, args.kv_heads, args.head_dim
    for S in args.tokens_per_gpu:
        T = S * world
        # One flashbox call over N*S tokens on this GPU alone (no communication): N x the per-GPU work.
        qs, dos = (torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
        ks, vs = (torch.randn(1, T, Hkv, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
        single = {}
        for causal in (True, False):
            if not any(CONFIGS[c]["causal"] == causal for c in args.configs):
                continue
            qg, kg, vg = (t.clone().requires_grad_() for t in (qs, ks, vs))
            f = timed(lambda: flashbox.attention(qg, kg, vg, causal=causal), args.warmup, args.repeats)
            fb = timed(lambda: flashbox.attention(qg, kg, vg, causal=causal).backward(dos), args.warmup, args.repeats)
            single[causal] = (f, fb)
            del qg, kg, vg
        del qs, ks, vs, dos
        torch.cuda.empty_cache()
        kv_bytes = 2 * S * Hkv * D * 2
        t_comm_f = comm_alone(kv_bytes, world - 1, world, rank, dev, args.warmup, args.repeats)
        t_comm_b = t_comm_f + comm_alone(2 * kv_bytes, world, world, rank, dev, args.warmup, args.repeats)
        for name in args.configs:
            cfg = CONFIGS[name]
            q, do = (torch.randn(1, S, H, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
            k, v = (torch.randn(1, S, Hkv, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
            q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
            kw = dict(causal=cfg["causal"], layout=cfg["layout"], variant=cfg["variant"])
            try:
                tf = timed(lambda: ring.ring_attention(q, k, v, **kw), args.warmup, args.repeats)
                tfb = timed(lambda: ring.ring_attention(q, k, v, **kw).backward(do), args.warmup, args.repeats)
            except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                log(f"{name} S={S}: {e}")
                continue
            sf, sfb = single[cfg["causal"]]
            row = dict(config=name, world=world, tokens_per_gpu=S, heads=H, kv_heads=Hkv, head_dim=D,
                       fwd_ms=tf, fwdbwd_ms=tfb, fwd_ns_per_token=tf * 1e6 / S, fwdbwd_ns_per_token=tfb * 1e6 / S,
                       single_fwd_ms=sf, single_fwdbwd_ms=sfb,
                       efficiency_fwd=(sf / world) / tf, efficiency_fwdbwd=(sfb / world) / tfb,
                       comm_fwd_ms=t_comm_f, comm_fwdbwd_ms=t_comm_b)
            for p, t, c, s in (("fwd", tf, t_comm_f, sf / world), ("fwdbwd", tfb, t_comm_b, sfb / world)):
                row[f"hidden_{p}"] = None if c == 0 else max(0.0, min(1.0, (s + c - t) / min(s, c)))
            rows.append(row)
            hid = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
            log(f"{name:26s} N={world} S={S:6d}  fwd {tf:8.2f} ms ({row['fwd_ns_per_token']:7.1f} ns/tok, eff "
                f"{row['efficiency_fwd']:.2f}, comm {t_comm_f:6.2f} ms hidden {hid(row['hidden_fwd'])})  fwd+bwd "
                f"{tfb:8.2f} ms ({row['fwdbwd_ns_per_token']:7.1f} ns/tok, eff {row['efficiency_fwdbwd']:.2f}, comm "
                f"{t_comm_b:6.2f} ms hidden {hid(row['hidden_fwdbwd'])})")
            del q, k, v, do
            torch.cuda.empty_cache()
    return rows


def timed_local(fn, warmup, repeats):
    """Median milliseconds of fn() on this GPU (host-synchronised around each call)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return sorted(ts)[len(ts) // 2]


def simulate(args):
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    H, Hkv, D = args.heads, args.kv_heads, args.head_dim
    rows = []
    print(f"ring_bench --simulate: {torch.cuda.get_device_name(dev)}, flashbox {flashbox.version()}", flush=True)
    for N in args.simulate:
        for S in args.tokens_per_gpu:
            T = N * S
            q, do = (torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
            k, v = (torch.randn(1, T, Hkv, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
            for name in args.configs:
                cfg = CONFIGS[name]
                lay, causal = cfg["layout"], cfg["causal"]
                qs, ks, vs, dos = ([ring.shard_sequence(t, N, r, lay) for r in range(N)] for t in (q, k, v, do))
                kw = dict(causal=causal, layout=lay, variant=cfg["variant"])
                tf = timed_local(lambda: ring.simulated_ranks(qs, ks, vs, **kw), args.warmup, args.repeats)
                tfb = timed_local(lambda: ring.simulated_ranks(qs, ks, vs, douts=dos, **kw), args.warmup, args.repeats)
                qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
                sf = timed_local(lambda: flashbox.attention(qg, kg, vg, causal=causal), args.warmup, args.repeats)
                sfb = timed_local(lambda: flashbox.attention(qg, kg, vg, causal=causal).backward(do), args.warmup,
                                  args.repeats)
                row = dict(config=name, simulated_world=N, tokens_per_gpu=S, heads=H, kv_heads=Hkv, head_dim=D,
                           sim_fwd_ms=tf, sim_fwdbwd_ms=tfb, single_fwd_ms=sf, single_fwdbwd_ms=sfb,
                           bound_fwd=sf / tf, bound_fwdbwd=sfb / tfb)
                rows.append(row)
                print(f"{name:26s} simulated N={N} S={S:6d}: fwd {tf:8.2f} ms vs one call {sf:8.2f} ms ({sf / tf:.3f})"
                      f"  fwd+bwd {tfb:8.2f} ms vs {sfb:8.2f} ms ({sfb / tfb:.3f})", flush=True)
                del qs, ks, vs, dos, qg, kg, vg
                torch.cuda.empty_cache()
            del q, k, v, do
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens-per-gpu", type=lambda s: [int(x) for x in s.split(",")], default=[8192, 32768, 131072])
    p.add_argument("--check-tokens", type=int, default=2048, help="tokens per GPU of the correctness check (0: none)")
    p.add_argument("--configs", type=lambda s: s.split(","), default=list(CONFIGS))
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default="")
    p.add_argument("--simulate", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="N simulated ranks on this one GPU instead of torchrun ranks (e.g. 2,4)")
    args = p.parse_args()
    for c in args.configs:
        if c not in CONFIGS:
            p.error(f"unknown config {c}; known: {', '.join(CONFIGS)}")

    if args.simulate:
        out = dict(device=torch.cuda.get_device_name(0), date=time.strftime("%Y-%m-%d"), simulated=simulate(args))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
            print(f"wrote {args.json}")
        return

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    world, rank = dist.get_world_size(), dist.get_rank()
    log(f"ring_bench: {world} GPU(s) ({torch.cuda.get_device_name(dev)}), NCCL {torch.cuda.nccl.version()}, "
        f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}, flashbox {flashbox.version()}")
    t0 = time.time()
    out = dict(world=world, device=torch.cuda.get_device_name(dev), nccl=".".join(map(str, torch.cuda.nccl.version())),
               date=time.strftime("%Y-%m-%d"), checks=[], rows=[])
    if args.check_tokens:
        out["checks"] = check(args, world, rank, dev)
    out["rows"] = bench(args, world, rank, dev)
    out["seconds"] = time.time() - t0
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")
    ok = all(c["ok"] for c in out["checks"])
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
