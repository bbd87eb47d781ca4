#!/usr/bin/env python3
"""Fails when a shared library exports a symbol of flashbox's C++ internals.

Allowed: the C API (flashbox_*), and symbols outside namespace flashbox (the C++ standard library's
weak template instances, which equal libstdc++'s own). Refused: anything mangled in namespace
flashbox (functions, template statics and their guard variables), above all STB_GNU_UNIQUE ('u')
symbols, which the dynamic linker merges across every library of a process even when loaded with
RTLD_LOCAL: two libflashbox versions side by side would then share one initialisation guard.
  check_exports.py LIB [LIB...]
"""
import subprocess
import sys


def exported(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            yield parts[1], parts[2]


def main(paths):
    bad = 0
    for path in paths:
        syms = list(exported(path))
        api = [n for _, n in syms if n.startswith("flashbox_")]
        leaks = [(t, n) for t, n in syms if "8flashbox" in n]  # mangled names in namespace flashbox
        print(f"{path}: {len(syms)} exported, {len(api)} C API functions, {len(leaks)} internal")
        for t, n in leaks[:20]:
            print(f"  leaked ({t}): {n}")
        if not api:
            print("  no flashbox_* function exported: not a flashbox library?")
        bad += bool(leaks) or not api
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else 2)
