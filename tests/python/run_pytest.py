"""CTest's entry to pytest: runs tests/python with pytest, or exits 77 (CTest's skip) saying why not."""

import os
import sys

try:
    import pytest
except ImportError:
    print(f"SKIP: pytest is not installed for {sys.executable}; the ctypes tests still run in python_ctypes. "
          f"Install it (pip install pytest, or apt-get install python3-pytest) to run tests/python.")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
# -rs prints every skip with its reason; -p no:cacheprovider keeps the source tree clean.
rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", here] + sys.argv[1:])
sys.exit(77 if rc == pytest.ExitCode.NO_TESTS_COLLECTED else int(rc))
