"""flashbench: the benchmark harness behind bench/run.py (suites, timing, the JSON schema of
docs/bench-schema.md)."""
