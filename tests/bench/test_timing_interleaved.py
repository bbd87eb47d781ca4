"""bench/flashbench/timing.time_interleaved on a simulated GPU (a fake torch module, no GPU needed):
the clock's speed drifts over time, as at the 700 W cap; two identical implementations timed beside
a heavy one must come out equal, every implementation runs once per cycle, and the order in a
cycle changes. Plain Python; exits non-zero on a failed check."""
import math
import os
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bench"))


class Clock:
    now = 0.0  # ms of simulated GPU time

    @classmethod
    def run(cls, work_ms):
        # The clock's speed swings by +-6 % with a 40 ms period: the same work takes longer when slow.
        cls.now += work_ms * (1.0 + 0.06 * math.sin(2 * math.pi * cls.now / 40.0))


class Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.t = Clock.now

    def elapsed_time(self, other):
        return other.t - self.t


class Buffer:
    def zero_(self):
        Clock.run(0.08)  # a 256 MB write


fake = types.ModuleType("torch")
fake.int8 = "int8"
fake.empty = lambda *a, **k: Buffer()
fake.cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None)
sys.modules["torch"] = fake

from flashbench import timing  # noqa: E402

calls = []


def kernel(name, ms):
    def fn():
        calls.append(name)
        Clock.run(ms)
    return fn


fns = {"a": kernel("a", 2.0), "heavy": kernel("heavy", 9.0), "a_again": kernel("a_again", 2.0)}
times = timing.time_interleaved(fns, rounds=3)
failures = []
ratio = times["a"] / times["a_again"]
if abs(ratio - 1.0) > 0.01:
    failures.append(f"two identical implementations differ: {times} (ratio {ratio:.4f})")
if not 4.0 < times["heavy"] / times["a"] < 5.0:
    failures.append(f"the heavy implementation's time is not ~4.5x: {times}")
counts = {n: calls.count(n) for n in fns}
if len(set(counts.values())) != 1:
    failures.append(f"implementations ran unequal numbers of calls: {counts}")
cycles = [tuple(calls[i:i + 3]) for i in range(len(calls) - 3 * 15, len(calls), 3)]
if any(sorted(c) != sorted(fns) for c in cycles):
    failures.append(f"a timed cycle does not call each implementation once: {cycles[:3]}")
if len(set(cycles)) < 3:
    failures.append(f"the order within a cycle does not change: {set(cycles)}")

# The per-implementation sequential timing this replaces, for contrast: the same drift makes two
# identical implementations differ, which is what the check above guards against.
seq = {}
for name in ("a", "a_again"):
    est = timing.bench_estimate_ms(fns[name])
    ev = []
    for _ in range(max(5, int(100 / est))):
        e0, e1 = Event(), Event()
        e0.record()
        fns[name]()
        e1.record()
        ev.append(e0.elapsed_time(e1))
    seq[name] = sorted(ev)[len(ev) // 2]
print(f"interleaved: {times}; sequential a/a_again = {seq['a'] / seq['a_again']:.4f}")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
