#!/usr/bin/env python3
"""One forward variant of the extension called N times (for Nsight Compute: profile a launch after
the first with `-k regex:flash_fwd_sm90 --launch-skip 1 -c 1`). Same tensors and variants as
compare_masks.py (B, H, T, D, bf16, randn, seed 2000 + T + D).

  python3 bench/fwd_mods_profile.py LIB --variant plain|softcap30|alibi [--no-causal] [--head-dim 128]
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_masks import Ext, ext  # noqa: E402
from compare_sdpa import FLASHBOX_FLASH, AttentionArgs, checked, load_library, make_args  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library")
    ap.add_argument("--variant", default="plain", choices=("plain", "softcap30", "alibi"))
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    lib = load_library(a.library)
    lib.flashbox_attention_forward_ext.argtypes = [ctypes.POINTER(AttentionArgs), ctypes.POINTER(Ext)]
    lib.flashbox_attention_forward_ext.restype = ctypes.c_int
    B, H, T, D = a.batch, a.heads, a.seqlen, a.head_dim
    gen = torch.Generator(device="cuda").manual_seed(2000 + T + D)
    print(f"seed {2000 + T + D}")
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda", dtype=torch.float32)
    args = make_args(q, k, v, o, lse, FLASHBOX_FLASH, not a.no_causal)
    e = ext((-1, -1), 30.0 if a.variant == "softcap30" else 0.0, slopes if a.variant == "alibi" else None)
    for _ in range(a.calls):
        checked(lib, lib.flashbox_attention_forward_ext(ctypes.byref(args), ctypes.byref(e)))
    torch.cuda.synchronize()
    print(a.variant, "D", D, "T", T, "causal", not a.no_causal, "kernel", lib.flashbox_last_kernel().decode(),
          "finite", bool(torch.isfinite(o).all()))


if __name__ == "__main__":
    main()
