"""PyTorch SDPA (cuDNN and FlashAttention-2 backends) on the shapes of bench/sm90_bench.cu, timed the
same way: bf16 random inputs (never zeros), rotated input sets, 3 warm-up calls, median of 10 calls
between CUDA events; FLOPs 4*B*H*T^2*D, halved for causal. Prints a table; --json PATH writes rows.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(4, 12, t, 64, 1) for t in (2048, 4096, 8192, 16384)] + \
         [(4, 16, t, 128, 1) for t in (2048, 4096, 8192, 16384)] + \
         [(4, 16, 16384, 128, 0), (4, 12, 16384, 64, 0)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash2": SDPBackend.FLASH_ATTENTION}


def time_one(b, h, t, d, causal, backend):
    sets = 4 if t <= 4096 else 2
    qkv = [[torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for _ in range(sets)]
    with sdpa_kernel([backend]):
        for i in range(3):
            F.scaled_dot_product_attention(*qkv[i % sets], is_causal=bool(causal))
        torch.cuda.synchronize()
        ms = []
        for i in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            F.scaled_dot_product_attention(*qkv[(i + 1) % sets], is_causal=bool(causal))
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1))
    ms.sort()
    return 0.5 * (ms[4] + ms[5])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}")
    rows = []
    print(f"{'B':<4}{'H':<4}{'T':<7}{'D':<5}{'causal':<8}{'backend':<8}{'ms':>9}{'TFLOP/s':>9}")
    for (b, h, t, d, causal) in SHAPES:
        for name, backend in BACKENDS.items():
            try:
                ms = time_one(b, h, t, d, causal, backend)
                tf = 4.0 * b * h * t * t * d / (2.0 if causal else 1.0) / (ms * 1e-3) / 1e12
            except RuntimeError as e:
                ms, tf = None, None
                print(f"  {name} failed: {str(e).splitlines()[0]}")
            rows.append(dict(batch=b, heads=h, seqlen=t, head_dim=d, causal=causal, backend=name,
                             median_ms=ms, tflops=tf))
            if ms is not None:
                print(f"{b:<4}{h:<4}{t:<7}{d:<5}{causal:<8}{name:<8}{ms:>9.3f}{tf:>9.1f}", flush=True)
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
