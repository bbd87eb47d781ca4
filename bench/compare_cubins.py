#!/usr/bin/env python3
"""Whether two builds of a kernel file produce the same machine code, without a GPU or cuobjdump.

Compile the file from both trees to a cubin without line information, e.g.
  nvcc -O3 -DNDEBUG --expt-relaxed-constexpr --use_fast_math -std=c++20 -DFLASHBOX_HAVE_CUDA=1 \\
       -DFLASHBOX_HAVE_SM90=1 -gencode=arch=compute_90a,code=sm_90a -cubin -Iinclude -Isrc FILE.cu -o new.cubin
then `python3 bench/compare_cubins.py old.cubin new.cubin` compares every kernel's .text section byte
for byte (readelf; anonymous-namespace names, which carry a hash of the file path, are normalised).
`--drop TEXT` (repeatable) also removes TEXT from the new file's names: a template argument added
with a default, e.g. `--drop Lb0E` for BwdConfig's QDESC = false, pairs the kernels again;
`--drop OLD=NEW` replaces OLD by NEW instead (`--drop Lb0ELb0E=Lb0E` for DQLAG = false after QDESC,
whose default main's names already spell).
A build's object file (FILE.cu.o) works too: its first embedded cubin (the uncompressed ELF that
nvcc puts in .nv_fatbin for one real architecture, as the 90a builds do) is compared, so two build
trees can be compared without compiling again.
"""
import re
import struct
import subprocess
import sys
import tempfile


def cubin_of(path):
    """path itself, or for a host object the first ELF embedded after its own header, in a temp file."""
    data = open(path, "rb").read()
    hits = [m.start() for m in re.finditer(b"\x7fELF", data) if m.start() > 0]
    if not path.endswith(".o") or not hits:
        return path
    o = hits[0]
    phoff, shoff = struct.unpack_from("<QQ", data, o + 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, o + 0x36)
    end = o + max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    tmp = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False)
    tmp.write(data[o:end])
    tmp.close()
    return tmp.name


def texts(path, drop=()):
    path = cubin_of(path)
    out = subprocess.run(["readelf", "-W", "-S", path], capture_output=True, text=True).stdout
    data = open(path, "rb").read()
    sections = {}
    for line in out.splitlines():
        m = re.search(r"\]\s+(\.text\.\S+)\s+\S+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            name = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+", "ANON", m.group(1))
            for d in drop:
                old, _, new = d.partition("=")
                name = name.replace(old, new)
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            sections[name] = data[off:off + size]
    return sections


def main():
    args, drop = sys.argv[1:], []
    while "--drop" in args:
        i = args.index("--drop")
        drop.append(args[i + 1])
        del args[i:i + 2]
    sys.argv[1:] = args
    a, b = texts(sys.argv[1]), texts(sys.argv[2], drop)
    same = [k for k in a if k in b and a[k] == b[k]]
    diff = [k for k in a if k in b and a[k] != b[k]]
    only = sorted(set(a) ^ set(b))
    print(f"{sys.argv[2]}: {len(same)} kernels byte-identical, {len(diff)} differ, {len(only)} in one file only")
    for k in diff + only:
        print("  ", k[:160])
    sys.exit(0 if not diff and not only else 1)


if __name__ == "__main__":
    main()
