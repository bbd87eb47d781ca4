#!/usr/bin/env python3
"""PyTorch's side of `flashbox gpt2 train`'s checks (issue 17), on the same weights and batches.

  grads   one batch's gradients of every parameter, PyTorch autograd in fp32, against a file that
          `flashbox gpt2 train --dump-grads` wrote (same llm.c layout); prints per-tensor relative
          errors ||flashbox - torch|| / ||torch|| and writes JSON
  train   the same training run as `flashbox gpt2 train` (seeded weights saved by --save-init, the
          same sequential batches, AdamW, warm-up + cosine, clipping), bf16 autocast; compares its
          losses (and the final validation loss) with flashbox's JSON log when --flashbox-log is given;
          --log writes a JSON-lines log in flashbox's own events (start, step, val every --val-every
          steps and after the last, summary), which `flashbox gpt2 curves --reference-log` reads
  curves  flashbox's loss curve against PyTorch's bf16 and fp32 curves of the same run (the bound)
  bench   tokens/s of a torch.compile'd GPT-2 training step (SDPA, fused AdamW, bf16 autocast)
          (--profile N: then the CUDA kernels of N more steps by time, torch.profiler)

The model is written here from GPT-2's equations (no transformers needed) with llm.c's parameter
layout, so a flashbox checkpoint loads into it tensor for tensor.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
         "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(L, C, V, maxT):
    return {"wte": (V, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def read_llmc(path):
    """llm.c checkpoint (v3 fp32 / v5 bf16) -> (config dict, {name: fp32 tensor})."""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    assert h[0] == 20240326, f"{path}: not an llm.c checkpoint"
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    cfg = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    bf16 = h[1] == 5
    data = np.frombuffer(raw[1024:], dtype=np.uint16 if bf16 else np.float32)
    out, off = {}, 0
    for name, shp in shapes(L, C, V, maxT).items():
        rows = (Vp, C) if name == "wte" else shp
        n = int(np.prod(rows))
        a = data[off:off + n]
        off += n
        if bf16:
            a = (a.astype(np.uint32) << 16).view(np.float32)
        t = torch.from_numpy(np.array(a, dtype=np.float32)).reshape(rows)
        out[name] = t[:V].contiguous() if name == "wte" else t
    return cfg, out


def read_tokens(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    if h[0] == 20240520:
        return np.frombuffer(raw[1024:], dtype=np.uint16)[: int(h[2])].astype(np.int64)
    return np.frombuffer(raw, dtype=np.uint16).astype(np.int64)


class Gpt2(torch.nn.Module):
    def __init__(self, cfg, tensors):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v.clone()) for k, v in tensors.items()})

    def forward(self, idx, targets):
        c, p = self.cfg, self.p
        B, T = idx.shape
        C, NH = c["C"], c["NH"]
        x = p["wte"][idx] + p["wpe"][:T]
        for l in range(c["L"]):
            h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
            qkv = F.linear(h, p["qkvw"][l], p["qkvb"][l])
            q, k, v = qkv.view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(a, p["attprojw"][l], p["attprojb"][l])
            h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
            h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
            x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
        x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
        logits = F.linear(x, p["wte"])
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def batch(tokens, k, B, T, device):
    """flashbox's rule: micro-batch k is the B*T tokens at (k mod K) * B*T, K = (n - 1) // (B*T)."""
    bt = B * T
    pos = (k % ((len(tokens) - 1) // bt)) * bt
    chunk = torch.from_numpy(tokens[pos:pos + bt + 1].copy()).to(device)
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def lr_at(a, step):
    if a.warmup > 0 and step <= a.warmup:
        return a.lr * step / a.warmup
    lr_min = a.lr * a.min_lr_fraction
    ratio = min(1.0, (step - a.warmup) / max(1, a.steps - a.warmup))
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - lr_min)


def make_optimizer(model, a, fused):
    decay = [p for n, p in model.p.items() if n in DECAY]
    other = [p for n, p in model.p.items() if n not in DECAY]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": other, "weight_decay": 0.0}],
                             lr=a.lr, betas=(a.beta1, a.beta2), eps=1e-8, fused=fused)


def cmd_grads(a):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg, w = read_llmc(a.weights)
    _, fb = read_llmc(a.grads)
    dev = "cuda"
    model = Gpt2(cfg, w).to(dev)
    x, y = batch(read_tokens(a.tokens), 0, a.batch, a.seqlen, dev)
    loss = model(x, y)
    loss.backward()
    rows, worst = [], 0.0
    for n in NAMES:
        ref = model.p[n].grad.double().cpu()
        got = fb[n].double()
        rel = float((got - ref).norm() / ref.norm().clamp_min(1e-300))
        worst = max(worst, rel)
        rows.append({"tensor": n, "rel_err": rel, "ref_norm": float(ref.norm())})
        print(f"{n:10s} rel {rel:.3e}  |grad| {float(ref.norm()):.3e}")
    ok = worst < a.bound
    print(f"{a.label}: loss torch {loss.item():.6f}; worst relative gradient error {worst:.3e} "
          f"(bound {a.bound:g}) -> {'PASS' if ok else 'FAIL'}")
    if a.json:
        json.dump({"label": a.label, "loss": loss.item(), "worst": worst, "bound": a.bound, "pass": ok, "rows": rows},
                  open(a.json, "w"), indent=1)
    return 0 if ok else 1


SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")


def use_sdpa_backend(name):
    """Only this SDPA backend (PyTorch's global switches, which torch.compile's graphs follow): a second
    bf16 run that differs from the default one in attention's rounding alone, the noise floor two
    PyTorch runs of the same recipe have between them."""
    for b in SDPA_BACKENDS:
        getattr(torch.backends.cuda, {"cudnn": "enable_cudnn_sdp", "flash": "enable_flash_sdp",
                                      "efficient": "enable_mem_efficient_sdp", "math": "enable_math_sdp"}[b])(b == name)


def cmd_train(a):
    if a.fp32:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if a.sdpa_backend != "default":
        use_sdpa_backend(a.sdpa_backend)
    cfg, w = read_llmc(a.weights)
    dev = "cuda"
    model = Gpt2(cfg, w).to(dev)
    opt = make_optimizer(model, a, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    tokens = read_tokens(a.train)
    val = read_tokens(a.val) if a.val else None
    accum = a.total_batch // (a.batch * a.seqlen) if a.total_batch else 1
    total_batch = a.batch * a.seqlen * accum
    losses = []
    t_start = time.time()
    last = a.stop or a.steps   # the schedule runs over --steps; --stop ends the run early
    log = open(a.log, "w") if a.log else None

    def emit(event, **fields):
        if log:
            log.write(json.dumps({"event": event, **fields}) + "\n")
            log.flush()

    def validate():
        """flashbox's validation: whole micro-batches of the validation shard, at most --val-tokens."""
        n = max(1, min((len(val) - 1) // (a.batch * a.seqlen), a.val_tokens // (a.batch * a.seqlen)))
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=not a.fp32):
            v = sum(model(*batch(val, k, a.batch, a.seqlen, dev)).item() for k in range(n)) / n   # eager: no recompile
        model.train()
        return v, n * a.batch * a.seqlen

    emit("start", trainer="pytorch", torch=torch.__version__, layers=cfg["L"], heads=cfg["NH"], channels=cfg["C"],
         device=dev, dtype="fp32" if a.fp32 else "bf16 autocast", batch=a.batch, seqlen=a.seqlen,
         total_batch=total_batch, accum=accum, steps=a.steps, lr=a.lr, warmup=a.warmup,
         min_lr_fraction=a.min_lr_fraction, weight_decay=a.weight_decay, grad_clip=a.grad_clip, weights=a.weights,
         train=a.train, val=a.val, start_step=0, sdpa=a.sdpa_backend)
    for step in range(1, last + 1):
        t_step = time.time()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for j in range(accum):
            x, y = batch(tokens, (step - 1) * accum + j, a.batch, a.seqlen, dev)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not a.fp32):
                loss = step_fn(x, y)
            (loss / accum).backward()
            total += loss.item() / accum
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        lr = lr_at(a, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(total)
        emit("step", step=step, loss=total, lr=lr, grad_norm=float(norm), ms=(time.time() - t_step) * 1e3)
        if val is not None and a.val_every > 0 and step % a.val_every == 0 and step != last:
            v, vt = validate()
            emit("val", step=step, val_loss=v, val_tokens=vt)
        if step % 10 == 0 or step == last:
            print(f"torch step {step}/{last} loss {total:.4f} norm {float(norm):.3f} lr {lr:.2e} "
                  f"({time.time() - t_start:.0f} s)", flush=True)
    val_loss = None
    if val is not None:
        val_loss, val_tokens = validate()
        emit("val", step=last, val_loss=val_loss, val_tokens=val_tokens)
        print(f"torch val loss after {last} steps: {val_loss:.4f} ({val_tokens} tokens)")
    emit("summary", steps=last, tokens=last * total_batch, first_loss=losses[0], last_loss=losses[-1], val_loss=val_loss)
    if log:
        log.close()
    result = {"steps": last, "schedule_steps": a.steps, "losses": losses, "val_loss": val_loss,
              "total_batch": total_batch, "batch": a.batch, "seqlen": a.seqlen, "torch": torch.__version__}
    if a.flashbox_log:
        fb = {}
        fb_val = {}
        for line in open(a.flashbox_log):
            j = json.loads(line)
            if j["event"] == "step":
                fb[j["step"]] = j["loss"]
            elif j["event"] == "val":
                fb_val[j["step"]] = j["val_loss"]
        diffs = [abs(fb[s] - losses[s - 1]) for s in range(1, last + 1) if s in fb]
        result["flashbox_losses"] = [fb.get(s) for s in range(1, last + 1)]
        result["max_abs_loss_diff"] = max(diffs) if diffs else None
        result["mean_abs_loss_diff"] = sum(diffs) / len(diffs) if diffs else None
        print(f"loss curves over {len(diffs)} steps: max |flashbox - torch| {max(diffs):.4f}, "
              f"mean {sum(diffs) / len(diffs):.4f}; step {last}: flashbox {fb.get(last, float('nan')):.4f} "
              f"torch {losses[-1]:.4f}")
        if val_loss is not None and last in fb_val:
            result["flashbox_val_loss"] = fb_val[last]
            result["val_loss_diff"] = fb_val[last] - val_loss
            print(f"val loss at step {last}: flashbox {fb_val[last]:.4f} torch {val_loss:.4f} "
                  f"diff {fb_val[last] - val_loss:+.4f} (bar 0.03)")
    if a.json:
        json.dump(result, open(a.json, "w"), indent=1)
    return 0


def bench_step(a):
    """The benchmarked step: seeded 124M weights, torch.compile, SDPA, fused AdamW, bf16 autocast."""
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = dict(maxT=1024, V=50257, L=12, NH=12, C=768, Vp=50304)
    g = torch.Generator().manual_seed(0)
    w = {n: torch.randn(s, generator=g) * 0.02 for n, s in shapes(12, 768, 50257, 1024).items()}
    for n in ("ln1w", "ln2w", "lnfw"):
        w[n] = torch.ones_like(w[n])
    model = Gpt2(cfg, w).cuda()
    opt = make_optimizer(model, a, fused=True)
    step_fn = torch.compile(model)
    x = torch.randint(0, 50257, (a.batch, a.seqlen), device="cuda")
    y = torch.randint(0, 50257, (a.batch, a.seqlen), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def profile_step(step, steps, json_path):
    """Where the benchmarked step's GPU time goes: torch.profiler's CUDA kernels over a few steps."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
        if t > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((t / steps / 1e3, e.count // steps, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"torch step: CUDA kernel time {total:.3f} ms per step over {steps} steps")
    for ms, n, key in rows[:45]:
        print(f"  {ms:8.3f} ms {100 * ms / total:5.1f}% x{n:4d}  {key[:110]}")
    if json_path:
        json.dump({"kernel_ms_per_step": total, "rows": [{"ms": r[0], "count": r[1], "kernel": r[2]} for r in rows]},
                  open(json_path, "w"), indent=1)


def cmd_bench(a):
    step = bench_step(a)
    t0 = time.time()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    t0 = time.time()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    dt = time.time() - t0
    tps = a.steps * a.batch * a.seqlen / dt
    print(f"torch.compile GPT-2 124M B={a.batch} T={a.seqlen}: {tps:.0f} tokens/s ({dt / a.steps * 1e3:.1f} ms/step, "
          f"warm-up incl. compile {compile_s:.0f} s), torch {torch.__version__}")
    if a.json:
        json.dump({"tokens_per_second": tps, "ms_per_step": dt / a.steps * 1e3, "batch": a.batch, "seqlen": a.seqlen,
                   "steps": a.steps, "compile_seconds": compile_s, "torch": torch.__version__}, open(a.json, "w"))
    if a.profile > 0:
        profile_step(step, a.profile, a.profile_json)
    return 0


def cmd_curves(a):
    """The bound for flashbox's loss curve: how far PyTorch's own bf16 run strays from its fp32 run on
    the same weights and batches is what bf16 arithmetic legitimately does to the curve; flashbox
    (bf16 as well) passes when it stays within twice that of the PyTorch bf16 run at every step
    (floor 0.02 nats, for the first steps where both references sit on top of each other)."""
    fb = {}
    for line in open(a.flashbox_log):
        j = json.loads(line)
        if j["event"] == "step":
            fb[j["step"]] = j["loss"]
    tb = json.load(open(a.torch_bf16))["losses"]
    tf = json.load(open(a.torch_fp32))["losses"]
    n = min(len(tb), len(tf), len(fb))
    noise = max(abs(tb[i] - tf[i]) for i in range(n))
    bound = max(2 * noise, 0.02)
    diff = [abs(fb[i + 1] - tb[i]) for i in range(n)]
    ok = max(diff) <= bound
    for i in range(0, n, max(1, n // 10)):
        print(f"step {i + 1:4d}: flashbox {fb[i + 1]:.4f}  torch bf16 {tb[i]:.4f}  torch fp32 {tf[i]:.4f}")
    print(f"{n} steps: max |flashbox - torch bf16| {max(diff):.4f}, mean {sum(diff) / n:.4f}; "
          f"bf16 noise max |torch bf16 - torch fp32| {noise:.4f}; bound {bound:.4f} -> {'PASS' if ok else 'FAIL'}")
    if a.json:
        json.dump({"steps": n, "max_diff": max(diff), "mean_diff": sum(diff) / n, "bf16_noise": noise, "bound": bound,
                   "pass": ok, "flashbox": [fb[i + 1] for i in range(n)], "torch_bf16": tb[:n], "torch_fp32": tf[:n]},
                  open(a.json, "w"), indent=1)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("grads", "train", "bench"):
        s = sub.add_parser(name)
        s.add_argument("--batch", type=int, default=4)
        s.add_argument("--seqlen", type=int, default=1024)
        s.add_argument("--json")
        s.add_argument("--steps", type=int, default=50)
        s.add_argument("--lr", type=float, default=6e-4)
        s.add_argument("--min-lr-fraction", type=float, default=0.1)
        s.add_argument("--warmup", type=int, default=0)
        s.add_argument("--weight-decay", type=float, default=0.1)
        s.add_argument("--beta1", type=float, default=0.9)
        s.add_argument("--beta2", type=float, default=0.95)
        s.add_argument("--grad-clip", type=float, default=1.0)
        if name in ("grads", "train"):
            s.add_argument("--weights", required=True)
        if name == "bench":
            s.add_argument("--profile", type=int, default=0, help="profile this many steps after the timed ones")
            s.add_argument("--profile-json")
        if name == "grads":
            s.add_argument("--tokens", required=True)
            s.add_argument("--grads", required=True)
            s.add_argument("--bound", type=float, default=1e-3)
            s.add_argument("--label", default="gradients")
        if name == "train":
            s.add_argument("--train", required=True)
            s.add_argument("--val")
            s.add_argument("--val-tokens", type=int, default=1 << 20)
            s.add_argument("--total-batch", type=int, default=0)
            s.add_argument("--stop", type=int, default=0, help="stop after this step (the schedule still spans --steps)")
            s.add_argument("--compile", action="store_true")
            s.add_argument("--fp32", action="store_true", help="no bf16 autocast (the fp32 reference curve)")
            s.add_argument("--sdpa-backend", choices=("default",) + SDPA_BACKENDS, default="default",
                           help="only this SDPA backend (default: PyTorch's choice, cuDNN's on Hopper)")
            s.add_argument("--flashbox-log")
            s.add_argument("--log", help="JSON-lines log in flashbox's events (flashbox gpt2 curves --reference-log)")
            s.add_argument("--val-every", type=int, default=0, help="validate every N steps (and after the last)")
    c = sub.add_parser("curves")
    c.add_argument("--flashbox-log", required=True)
    c.add_argument("--torch-bf16", required=True)
    c.add_argument("--torch-fp32", required=True)
    c.add_argument("--json")
    a = ap.parse_args()
    sys.exit({"grads": cmd_grads, "train": cmd_train, "bench": cmd_bench, "curves": cmd_curves}[a.cmd](a))


if __name__ == "__main__":
    main()
