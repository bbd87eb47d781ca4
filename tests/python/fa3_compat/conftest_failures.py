"""Copied as conftest.py beside FlashAttention-3's test file by run_fa3_tests.sh: prints each failed
case's reason (the exception's last line) the moment it fails, so a group that the time limit cuts
off still says why its cases failed (pytest prints tracebacks only once every case has run)."""


def pytest_runtest_logreport(report):
    if report.failed and report.when == "call":
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = crash.message if crash is not None else str(report.longrepr).splitlines()[-1:]
        print(f"\nFAILREASON {report.nodeid}: {str(reason).splitlines()[0][:300] if reason else '?'}", flush=True)
