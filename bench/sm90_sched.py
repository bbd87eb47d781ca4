#!/usr/bin/env python3
"""Hopper forward variants (environment settings of the sm90 kernel) against cuDNN, interleaved.

Same method as compare_sdpa.py (ctypes, the same torch tensors, triton do_bench median with the L2
flushed), but every variant and cuDNN are timed in turn, ROUNDS times over, and each one's median
of rounds is reported: clock or power drift during the run then hits all of them alike, which
back-to-back rows of sm90_bench do not guarantee (v3's measurement saw two identical kernels 10% apart).
  python3 bench/sm90_sched.py libflashbox.so [--json PATH] [--rounds 3] [--lib NAME=PATH ...]
Variants are lists of FLASHBOX_SM90_* settings, passed as flashbox_options (a build without them
runs its defaults); "default" is the library's own choice. --lib adds
another build of the library as one more variant (its defaults), e.g. an older commit, so that two
versions of the kernel are compared in one process on the same tensors.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_sdpa as cs  # noqa: E402

# Sets by the sm90 forward version they measured (bench/NOTES.md). v4-sweep: grid / persistent with
# 32, 8 and 0 MB sections (and, non-causal, the 128 x 128 tile); v4: the defaults chosen from it
# against one CTA per tile.
VARIANT_SETS = {
    "v4-sweep": ({
        "default": {},
        "grid": {"FLASHBOX_SM90_SCHED": "grid"},
        "pers32": {"FLASHBOX_SM90_SCHED": "persistent"},
        "pers8": {"FLASHBOX_SM90_SCHED": "persistent", "FLASHBOX_SM90_L2MB": "8"},
        "pers0": {"FLASHBOX_SM90_SCHED": "persistent", "FLASHBOX_SM90_L2MB": "0"},
    }, {
        "t128grid": {"FLASHBOX_SM90_TILE": "128x128", "FLASHBOX_SM90_SCHED": "grid"},
        "t128pers0": {"FLASHBOX_SM90_TILE": "128x128", "FLASHBOX_SM90_SCHED": "persistent",
                      "FLASHBOX_SM90_L2MB": "0"},
    }),
    # v4 also timed FLASHBOX_SM90_SCHED=dynamic (an atomic tile counter), no faster: removed in v5.
    "v4": ({"default": {}, "grid": {"FLASHBOX_SM90_SCHED": "grid"}}, {}),
    # v5: the defaults against one CTA per tile (older builds come in with --lib).
    "v5": ({"default": {}, "grid": {"FLASHBOX_SM90_SCHED": "grid"}}, {}),
    # v5, after its check run: the schedule table again, and 128 x 128 (Q in registers) for
    # non-causal head_dim 128 (the other rows time the then default 128 x 176 twice).
    "v5-table": ({"default": {}, "grid": {"FLASHBOX_SM90_SCHED": "grid"},
                  "persistent": {"FLASHBOX_SM90_SCHED": "persistent"}},
                 {"t128": {"FLASHBOX_SM90_TILE": "128x128"},
                  "t128pers": {"FLASHBOX_SM90_TILE": "128x128", "FLASHBOX_SM90_SCHED": "persistent"}}),
    # v6: the defaults alone (older builds come in with --lib).
    "v6": ({"default": {}}, {}),
}
VARIANTS, EXTRA_NONCAUSAL = VARIANT_SETS["v5"]
SHAPES = [(64, 12, t, True) for t in (2048, 4096, 8192, 16384)] + \
         [(128, 16, t, True) for t in (2048, 4096, 8192, 16384)] + [(128, 16, 16384, False)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("library")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--set", choices=sorted(VARIANT_SETS), default="v5")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH", help="another library build")
    ap.add_argument("--shapes", help="only these shapes, e.g. 128:16384:0,128:16384:1 (head_dim:T:causal)")
    args = ap.parse_args()
    global VARIANTS, EXTRA_NONCAUSAL
    VARIANTS, EXTRA_NONCAUSAL = VARIANT_SETS[args.set]
    lib = cs.load_library(args.library)
    libs = {}  # variant name -> library, for the --lib builds
    for spec in args.lib:
        name, path = spec.split("=", 1)
        libs[name] = cs.load_library(path)
        VARIANTS = dict(VARIANTS, **{name: {}})
    shapes = SHAPES
    if args.shapes:
        want = {tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")}
        shapes = [sh for sh in SHAPES if (sh[0], sh[2], int(sh[3])) in want]
    B, rows = 4, []
    print(f"{'D':>4} {'H':>3} {'T':>6} {'causal':>6} | " + " ".join(f"{n:>14}" for n in list(VARIANTS) + ["cudnn"]))
    for D, H, T, causal in shapes:
        torch.cuda.empty_cache()
        gen = torch.Generator(device="cuda").manual_seed(1000 + T + D)
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
        fargs = cs.make_args(q, k, v, o, lse, cs.FLASHBOX_FLASH, causal)
        ref = cs.sdpa(cs.SDPBackend.FLASH_ATTENTION, causal)(q, k, v)
        cudnn = cs.sdpa(cs.SDPBackend.CUDNN_ATTENTION, causal)
        variants = dict(VARIANTS, **({} if causal else EXTRA_NONCAUSAL))
        times = {n: [] for n in list(variants) + ["cudnn"]}
        kernels, errors = {}, {}
        for _ in range(args.rounds):
            for name, settings in variants.items():
                vlib = libs.get(name, lib)
                call = cs.forward_call(vlib, fargs, cs.options("sm90", settings))
                o.fill_(float("nan"))  # an unwritten element fails the error check
                cs.checked(vlib, call())
                torch.cuda.synchronize()
                kernels[name] = vlib.flashbox_last_kernel().decode()
                errors[name] = max(errors.get(name, 0.0), cs.rel_error(o, ref))
                times[name].append(cs.bench(call))
            times["cudnn"].append(cs.bench(lambda: cudnn(q, k, v)))
        fl = cs.flops(B, H, T, D, causal, False)
        med = {n: statistics.median(t) for n, t in times.items()}
        print(f"{D:>4} {H:>3} {T:>6} {int(causal):>6} | " +
              " ".join(f"{med[n]:7.3f}ms{fl / (med[n] * 1e-3) / 1e12:4.0f}T" for n in med) +
              ("" if causal or not EXTRA_NONCAUSAL else "  (then " + ", ".join(EXTRA_NONCAUSAL) + ", cudnn)"),
              flush=True)
        for n, t in times.items():
            rows.append(dict(head_dim=D, heads=H, batch=B, seqlen=T, causal=causal, variant=n,
                             settings=variants.get(n), kernel=kernels.get(n, "cudnn"), ms_rounds=t,
                             ms=med[n], tflops=fl / (med[n] * 1e-3) / 1e12, rel_error_vs_sdpa=errors.get(n)))
        bad = {n: e for n, e in errors.items() if not e < 1e-2}
        if bad:
            print("ERROR: relative error too large:", bad)
        del q, k, v, o, lse, ref
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
