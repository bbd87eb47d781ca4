"""`python3 -m flashbox`: where the package is, which libflashbox it loads and how it found it (for an
installed package: the file `pip install ./python` copied), its version and CUDA devices; whether the
PyTorch layer is usable here (and if not, why).

`python3 -m flashbox check`: a self-test (flashbox/check.py): CPU and, on each GPU, CUDA forward and
backward against an fp64 reference; exit status 0 when it passed."""

import os
import sys

from . import _lib


def main() -> int:
    if sys.argv[1:] == ["check"]:
        from . import check
        return check.run()
    if sys.argv[1:]:
        print(f"usage: python -m flashbox [check]  (got {' '.join(sys.argv[1:])!r})", file=sys.stderr)
        return 2
    try:
        lib = _lib.library()
    except _lib.LibraryNotFoundError as e:
        print(f"libflashbox: not found: {e}")
        return 1
    print(f"package:     {os.path.dirname(os.path.abspath(__file__))}")
    print(f"libflashbox: {lib.path} (found: {lib.found_by})")
    info = _lib.build_info()
    if info and lib.found_by == "beside the package":
        print(f"             installed copy of {info.get('library_source')} ({info.get('found_by')}, {info.get('built_at')})")
    print(f"version:     {_lib.version()}")
    print(f"cuda devices: {_lib.cuda_device_count()}")
    if lib.missing:
        print(f"missing symbols (an older build?): {', '.join(lib.missing)}")
    try:
        from . import ops  # noqa: F401
        import torch
        print(f"torch layer: available (torch {torch.__version__}, "
              f"cuda {'yes' if torch.cuda.is_available() else 'no'})")
    except ImportError as e:
        print(f"torch layer: unavailable ({e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
