"""`pip wheel ./python`, installed into a fresh virtual environment, then the package as a user gets it.

Makes a venv in a temporary folder, builds the wheel and installs it with pip offline (--no-index:
the build backend needs nothing from an index), and checks, from outside the source tree and without
FLASHBOX_LIBRARY: `python -m flashbox` loads the copy of the library placed beside the package,
`python -m flashbox check` (the self-test, with what the library needs) passes,
`import flashbox; flashbox.version()` is the library's version, and the ctypes tests (and with
--pytest, every test under tests/python) pass against the installed package (FLASHBOX_TEST_INSTALLED=1).

  python3 tests/python/install_check.py --library build/libflashbox.so [--pytest] [--site DIR]

--site DIR makes DIR's packages (torch, pytest) visible in the venv through a .pth file, for a
Python whose torch lives in another venv (`python3 -m venv --system-site-packages` sees only the
base interpreter's). Exits 77 (CTest's skip) when this Python cannot make a venv with pip.
"""
import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env, cwd, what):
    print(f"$ {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr)
    if r.returncode != 0:
        sys.exit(f"install_check: {what} failed (exit {r.returncode})")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", required=True, help="the libflashbox.so the install copies")
    ap.add_argument("--pytest", action="store_true", help="also run tests/python with pytest in the venv")
    ap.add_argument("--site", action="append", default=[], help="a site-packages folder to add to the venv")
    ap.add_argument("--keep", action="store_true", help="keep the venv (its path is printed)")
    a = ap.parse_args()
    library = os.path.abspath(a.library)
    if not os.path.isfile(library):
        sys.exit(f"install_check: --library {library}: no such file")

    tmp = tempfile.mkdtemp(prefix="flashbox-install-")
    try:
        venv = os.path.join(tmp, "venv")
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], capture_output=True, text=True)
        pip = None  # the venv's own pip
        if r.returncode != 0:
            # A base interpreter without ensurepip (Debian's python3 without python3-venv): a venv
            # without pip, filled by this interpreter's pip (--python, pip 22.3 and later).
            shutil.rmtree(venv, ignore_errors=True)
            r2 = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
                                capture_output=True, text=True)
            if r2.returncode != 0:
                print(f"SKIP: {sys.executable} cannot make a venv: {r.stderr.strip()[-500:]}")
                sys.exit(77)
            pip = [sys.executable, "-m", "pip", "--python", os.path.join(venv, "bin", "python")]
        py = os.path.join(venv, "bin", "python")
        pip = pip or [py, "-m", "pip"]
        purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        if a.site:
            with open(os.path.join(purelib, "flashbox_check_site.pth"), "w") as f:
                f.write("\n".join(os.path.abspath(s) for s in a.site) + "\n")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHBOX_LIBRARY", "PIP_INDEX_URL")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        # The wheel a user would be given: built by `pip wheel ./python`, installed from its file.
        wheels = os.path.join(tmp, "wheels")
        run(pip + ["wheel", "--no-index", "--no-deps", "--no-cache-dir", "-w", wheels, os.path.join(REPO, "python")],
            dict(env, FLASHBOX_LIBRARY=library), tmp, "pip wheel ./python")
        built = [f for f in os.listdir(wheels) if f.endswith(".whl")]
        assert len(built) == 1, f"pip wheel made {built}"
        run(pip + ["install", "--no-index", "--no-cache-dir", os.path.join(wheels, built[0])], env, tmp,
            "pip install the wheel")

        installed = os.path.join(purelib, "flashbox")
        copy = os.path.join(installed, "libflashbox.so")
        assert os.path.isfile(copy), f"no libflashbox.so beside the installed package ({installed})"
        with open(copy, "rb") as f1, open(library, "rb") as f2:
            assert f1.read() == f2.read(), "the installed libflashbox.so is not the library given"

        out = run([py, "-m", "flashbox"], env, tmp, "python -m flashbox")
        assert f"libflashbox: {copy} (found: beside the package)" in out, out
        assert f"installed copy of {library}" in out, out
        version = run([py, "-c", "import flashbox; print(flashbox.version())"], env, tmp, "import flashbox").strip()
        want = subprocess.run([sys.executable, "-c", "import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); "
                               "l.flashbox_version.restype = ctypes.c_char_p; print(l.flashbox_version().decode())",
                               library], capture_output=True, text=True, check=True).stdout.strip()
        assert version == want, f"flashbox.version() {version!r}, the library says {want!r}"
        print(f"install_check: flashbox {version} installed and loads {copy}")

        out = run([py, "-m", "flashbox", "check"], env, tmp, "python -m flashbox check")
        assert "check: passed" in out and "ok    cpu forward+backward (causal)" in out, out
        assert "needs shared libraries:" in out, out

        test_env = dict(env, FLASHBOX_TEST_INSTALLED="1")
        run([py, os.path.join(REPO, "tests", "python", "test_ctypes_cpu.py")], test_env, tmp,
            "the ctypes tests against the installed package")
        if a.pytest:
            run([py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", os.path.join(REPO, "tests", "python")],
                test_env, tmp, "pytest against the installed package")
        print("install_check: passed")
    finally:
        if a.keep:
            print(f"install_check: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
