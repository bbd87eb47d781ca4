#!/usr/bin/env python3
"""GPT-2 in PyTorch with the attention function chosen on the command line: the source's step 5
(swap attention implementations inside a trained GPT-2 124M, check the loss does not change) in the
source's own language, with flashbox inside.

  python3 examples/gpt2_swap.py --checkpoint model.safetensors --tokens val.bin \
      --attention sdpa,flashbox,naive --count 65536 --seqlen 1024
  python3 examples/gpt2_swap.py --checkpoint model.safetensors --tokens train.bin \
      --attention flashbox --train-steps 20

The model is nanoGPT's GPT-2 (pre-LayerNorm blocks, GELU(tanh) MLP, tied lm_head). The checkpoint is
a Hugging Face-layout gpt2 safetensors file (`flashbox gpt2 init` writes one; HF's gpt2
model.safetensors is one): keys wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
mlp.c_proj}, ln_f, optionally under "transformer."; Conv1D weights are stored [in, out]. The config is
read from config.json beside the checkpoint when there is one, else inferred from the shapes (head_dim
64, as in every GPT-2 size). Token files are llm.c / nanoGPT shards (a 256 x int32 header with magic
20240520, then uint16 tokens) or raw uint16.

Without --checkpoint the weights are random (seeded): the losses are then meaningless as language
modelling but still comparable across attention implementations.

Attention implementations, all on q, k, v of shape [batch, seq, heads, head_dim], causal:
  naive     S = q kᵀ / sqrt(d) materialised in fp32, masked, softmax, P v (the T² baseline)
  sdpa      torch.nn.functional.scaled_dot_product_attention (PyTorch picks its backend)
  flashbox  flashbox.attention (libflashbox through ctypes, as a torch custom op)
"""

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashbox  # noqa: E402  (the ctypes layer; libflashbox loads on first use)

SHARD_MAGIC = 20240520
LOSS_BAR = 2e-4   # flashbox's loss vs SDPA's on GPT-2 124M (issue 8's bar)
SHARD_HEADER_INTS = 256


# ---- attention implementations ----

def naive_attention(q, k, v):
    T = q.shape[1]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))               # [B, H, T, D]
    with torch.autocast(q.device.type, enabled=False):                # S and softmax in fp32, really
        s = (qt.float() @ kt.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).to(v.dtype)
        return (p @ vt).transpose(1, 2)


def sdpa_attention(q, k, v):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2)


def flashbox_attention(q, k, v):
    return flashbox.attention(q, k, v, causal=True)


ATTENTION = {"naive": naive_attention, "sdpa": sdpa_attention, "flashbox": flashbox_attention}


# ---- model (nanoGPT's GPT-2) ----

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50257
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    layer_norm_epsilon: float = 1e-5


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attend = sdpa_attention

    def forward(self, x):
        B, T, C = x.shape
        # [B, T, 3, H, D] sliced into q, k, v: strided [B, T, H, D] views, no copy.
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).unbind(2)
        y = self.attend(q, k, v)
        return self.c_proj(y.reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.apply(self._init)
        for name, p in self.named_parameters():     # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def set_attention(self, fn):
        for block in self.h:
            block.attn.attend = fn

    def forward(self, idx, targets=None):
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds the model's context {self.cfg.block_size}")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)   # lm_head tied to wte
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1), reduction="sum")


# ---- checkpoint ----

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def read_config(path: str, tensors: dict, n_head: int = 0, metadata: dict = None) -> GPTConfig:
    """Sizes from the tensors' shapes. Heads from, first found: n_head; the file's metadata "n_head"
    (`flashbox gpt2 init` writes it); config.json beside the checkpoint (Hugging Face's, whose sizes
    must then agree with the tensors); n_embd / 64 (GPT-2's head_dim)."""
    wte = tensors["wte.weight"]
    cfg = GPTConfig(vocab_size=wte.shape[0], n_embd=wte.shape[1], block_size=tensors["wpe.weight"].shape[0],
                    n_layer=sum(1 for k in tensors if k.startswith("h.") and k.endswith(".ln_1.weight")))
    cfg.n_head = cfg.n_embd // 64
    cfg_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    if metadata and str(metadata.get("n_head", "")).isdigit():
        cfg.n_head = int(metadata["n_head"])
    elif os.path.isfile(cfg_path):
        with open(cfg_path) as fh:
            hf = json.load(fh)
        cfg.n_head = int(hf.get("n_head", cfg.n_head))
        cfg.layer_norm_epsilon = float(hf.get("layer_norm_epsilon", cfg.layer_norm_epsilon))
        for key, ours in (("n_layer", cfg.n_layer), ("n_embd", cfg.n_embd), ("vocab_size", cfg.vocab_size),
                          ("n_positions", cfg.block_size)):
            if key in hf and int(hf[key]) != ours:
                raise ValueError(f"{cfg_path}: {key}={hf[key]} but the checkpoint's tensors say {ours}")
    if n_head:
        cfg.n_head = n_head
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_embd {cfg.n_embd} is not a multiple of n_head {cfg.n_head}")
    return cfg


def load_checkpoint(path: str, n_head: int = 0) -> GPT:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
        raw = {key: f.get_tensor(key) for key in f.keys()}
    tensors = {}
    for key, t in raw.items():
        key = key[len("transformer."):] if key.startswith("transformer.") else key
        if key.endswith((".attn.bias", ".attn.masked_bias")):
            continue   # HF's causal-mask buffers, not weights
        tensors[key] = t
    lm_head = tensors.pop("lm_head.weight", None)
    cfg = read_config(path, tensors, n_head, metadata)
    model = GPT(cfg)
    state = {}
    for key, t in tensors.items():
        t = t.float()
        state[key] = t.t().contiguous() if key.endswith(_CONV1D) else t   # Conv1D [in, out] -> Linear [out, in]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: missing tensors {missing}, unexpected tensors {unexpected}")
    if lm_head is not None and not torch.equal(lm_head.float(), model.wte.weight.detach()):
        raise ValueError(f"{path}: lm_head.weight differs from wte.weight; this GPT-2 ties them")
    return model


# ---- tokens ----

def read_tokens(path: str) -> torch.Tensor:
    """An llm.c / nanoGPT shard (header: magic 20240520, version, token count) or raw uint16 tokens."""
    with open(path, "rb") as fh:
        data = fh.read()
    header = torch.frombuffer(bytearray(data[:SHARD_HEADER_INTS * 4]), dtype=torch.int32) \
        if len(data) >= SHARD_HEADER_INTS * 4 else None
    if header is not None and int(header[0]) == SHARD_MAGIC:
        n = int(header[2])
        body = data[SHARD_HEADER_INTS * 4:]
        if len(body) < 2 * n:
            raise ValueError(f"{path}: header says {n} tokens, the file holds {len(body) // 2}")
        body = body[:2 * n]
    else:
        if len(data) % 2:
            raise ValueError(f"{path}: not a token shard (no magic {SHARD_MAGIC}) and an odd number of bytes")
        body = data
    # uint16 read as int16, then widened: torch's uint16 has few kernels.
    return torch.frombuffer(bytearray(body), dtype=torch.int16).to(torch.int64) & 0xFFFF


# ---- evaluation and training ----

def autocast(device: str, dtype: torch.dtype):
    if dtype == torch.float32:
        return torch.autocast(device_type=device, enabled=False)
    return torch.autocast(device_type=device, dtype=dtype)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def evaluate(model, tokens, count, seqlen, batch, device, dtype):
    n_seq = count // seqlen
    if n_seq == 0:
        raise ValueError(f"--count {count} is smaller than --seqlen {seqlen}")
    if n_seq * seqlen + 1 > tokens.numel():
        raise ValueError(f"need {n_seq * seqlen + 1} tokens for --count {count}, the file has {tokens.numel()}")
    total, n_tok = 0.0, 0
    for s0 in range(0, n_seq, batch):
        nb = min(batch, n_seq - s0)
        chunk = tokens[s0 * seqlen: (s0 + nb) * seqlen + 1].to(device)
        x = chunk[:-1].view(nb, seqlen)
        y = chunk[1:].view(nb, seqlen)
        with autocast(device, dtype):
            total += model(x, y).item()
        n_tok += nb * seqlen
    return total / n_tok, n_tok


def train(model, tokens, steps, seqlen, batch, device, dtype, lr, log):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    span = batch * seqlen + 1
    if tokens.numel() < span:
        raise ValueError(f"training needs {span} tokens per step, the file has {tokens.numel()}")
    pos, losses = 0, []
    model.train()
    for step in range(steps):
        if pos + span > tokens.numel():
            pos = 0
        chunk = tokens[pos: pos + span].to(device)
        pos += span - 1
        x, y = chunk[:-1].view(batch, seqlen), chunk[1:].view(batch, seqlen)
        t0 = time.perf_counter()
        with autocast(device, dtype):
            loss = model(x, y) / y.numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync(device)
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"step {step}: loss is {losses[-1]}")
        log(f"step {step + 1:4d}/{steps}  loss {losses[-1]:.6f}  grad norm {norm.item():.4f}  "
            f"{dt * 1e3:.1f} ms  {y.numel() / dt:,.0f} tok/s")
    model.eval()
    return losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="HF-layout gpt2 .safetensors (default: random weights)")
    ap.add_argument("--tokens", help="llm.c shard or raw uint16 token file (default: random tokens)")
    ap.add_argument("--attention", default="sdpa,flashbox",
                    help="comma-separated list of naive, sdpa, flashbox (default: sdpa,flashbox)")
    ap.add_argument("--count", type=int, default=65536, help="tokens to evaluate (default 65536)")
    ap.add_argument("--seqlen", type=int, default=1024, help="sequence length (default 1024)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per batch (default 8)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                    help="autocast dtype (default bf16 on CUDA, fp32 on CPU)")
    ap.add_argument("--train-steps", type=int, default=0, help="then run N AdamW steps with each attention")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) the model")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--n-head", type=int, default=0, help="override the number of heads")
    ap.add_argument("--n-layer", type=int, default=12, help="random weights only: layers (default 12)")
    ap.add_argument("--n-embd", type=int, default=768, help="random weights only: width (default 768)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.attention.split(",") if n.strip()]
    for n in names:
        if n not in ATTENTION:
            ap.error(f"unknown attention {n!r}; choose from {', '.join(ATTENTION)}")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        args.dtype or ("bf16" if args.device == "cuda" else "fp32")]
    torch.manual_seed(args.seed)

    if args.checkpoint:
        model = load_checkpoint(args.checkpoint, args.n_head)
        source = args.checkpoint
    else:
        cfg = GPTConfig(n_layer=args.n_layer, n_embd=args.n_embd,
                        n_head=args.n_head or max(1, args.n_embd // 64), block_size=max(1024, args.seqlen))
        model = GPT(cfg)
        source = f"random weights (seed {args.seed})"
    cfg = model.cfg
    if args.tokens:
        tokens = read_tokens(args.tokens)
        if tokens.numel() and int(tokens.max()) >= cfg.vocab_size:
            raise SystemExit(f"{args.tokens}: token {int(tokens.max())} >= vocab_size {cfg.vocab_size}")
    else:
        g = torch.Generator().manual_seed(args.seed)
        need = max(args.count, args.train_steps and args.batch * args.seqlen) + 1
        tokens = torch.randint(0, cfg.vocab_size, (need,), generator=g)
    print(f"model: {source}: {cfg.n_layer} layers, {cfg.n_head} heads, n_embd {cfg.n_embd}, vocab "
          f"{cfg.vocab_size}, context {cfg.block_size}, {sum(p.numel() for p in model.parameters()):,} "
          f"parameters")
    print(f"tokens: {args.tokens or 'random'} ({tokens.numel():,}); device {args.device}, autocast "
          f"{dtype}, seqlen {args.seqlen}, batch {args.batch}")
    if "flashbox" in names:
        flashbox.attention   # noqa: B018  load the torch layer now, not first inside a torch.compile trace
        print(f"flashbox {flashbox.version()} from {flashbox.library_path()}")

    initial_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.to(args.device).eval()
    results = []
    for name in names:
        model.load_state_dict(initial_state)
        model.set_attention(ATTENTION[name])
        runner = torch.compile(model, fullgraph=True) if args.compile else model
        sync(args.device)
        t0 = time.perf_counter()
        loss, n_tok = evaluate(runner, tokens, args.count, args.seqlen, args.batch, args.device, dtype)
        sync(args.device)
        dt = time.perf_counter() - t0
        row = {"attention": name, "loss": loss, "tokens": n_tok, "seconds": dt}
        print(f"{name:9s} loss {loss:.6f} over {n_tok:,} tokens  ({dt:.2f} s, {n_tok / dt:,.0f} tok/s)")
        if args.train_steps:
            print(f"{name}: training {args.train_steps} steps (AdamW, lr {args.lr})")
            row["train_losses"] = train(runner, tokens, args.train_steps, args.seqlen, args.batch, args.device,
                                        dtype, args.lr, lambda s: print("  " + s))
        results.append(row)

    if len(results) > 1:
        base = results[0]
        print(f"\n{'attention':9s}  {'loss':>10s}  {'|diff| vs ' + base['attention']:>18s}")
        for r in results:
            r["abs_diff_vs_" + base["attention"]] = abs(r["loss"] - base["loss"])
            print(f"{r['attention']:9s}  {r['loss']:10.6f}  {abs(r['loss'] - base['loss']):18.2e}")
    losses = {r["attention"]: r["loss"] for r in results}
    if "flashbox" in losses and "sdpa" in losses:
        diff = abs(losses["flashbox"] - losses["sdpa"])
        print(f"flashbox vs sdpa: |loss difference| {diff:.2e} (bar < {LOSS_BAR:.0e}: "
              f"{'met' if diff < LOSS_BAR else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"model": source, "config": vars(cfg), "device": args.device, "dtype": str(dtype),
                       "seqlen": args.seqlen, "count": args.count, "results": results}, fh, indent=2)
        print(f"wrote {args.json}")
    return results


if __name__ == "__main__":
    main()
