#!/usr/bin/env python3
"""Protocol model of the Hopper backward's deterministic dQ writers (bench/NOTES.md, sm90 backward v18).

The QDESC kernels (v10's order, flash_bwd_sm90_qdesc.cu) have two dQ writer warps, warps 1 and 2 of
the producer warpgroup, taking alternate steps of the CTA's walk (writer 0 the even steps, writer 1
the odd ones), so that step s + 1's bulk reduce-add can be issued while step s's completion is
awaited (one writer: every step's add waited for the previous step's completion, a serial chain per
CTA). This model runs that protocol warp by warp under random interleavings and checks it:

  consumer w (4 warps, each its own actor), step s:  bar.sync   EMPTY[s % 2] + w   (staging free)
                                                      write its quarter of staging buffer w
                                                      bar.arrive FULL[s % 2] + w    (staged)
  writer s % 2, step s, for w = 0, 1:                 bar.sync   FULL[s % 2] + w
                                                      spin until sem(h, m, w) == rank
                                                      issue the bulk reduce-add (reads staging w
                                                      later, applies, completes later)
                     then:                            wait until its adds' staging was read
                                                      bar.arrive EMPTY[(s + 1) % 2] + w, w = 0, 1
                                                      (if s + 1 < steps)
                                                      wait until its adds completed
                                                      sem(h, m, w) += 1, w = 0, 1 (red.release)
  writer 0 first arrives on EMPTY[0] + w (step 0's buffers).

Named barriers as the hardware counts them: per warp, an instance completes when 5 warps (160
threads: the consumer's 4 and one writer) have arrived, whoever they are. Checked:
  - every completed barrier instance is one step's: all its arrivals carry the same step
    (a mixed instance would let a consumer overwrite a buffer not yet read, or a writer read one
    not yet written);
  - a bulk add reads staging buffer w when all 4 quarters hold its own step's chunk;
  - determinism: when a CTA of rank r issues its add into chunk (h, m, w), exactly r adds into it
    have completed and none is in flight (so every element sees the adds in rank order);
  - every chunk got its adds in rank order 0..k-1, k the key blocks that see it;
  - no deadlock (CTAs dispatched in grid order onto 1..N SMs, one resident per SM).
The CTAs are the key blocks of one kv head (causal, seqlen_q = seqlen_k, BN = 128, BM = 64 or 128,
query heads per kv head 1-4; v10's walk: query blocks descending, the group's heads innermost,
rank = n - first_n_block = n). --mutate shows that the checks bite: same_ids (both writers on the
same barrier ids), one_writer_parity (the consumer alternates ids, one writer does every step on
ids 0), release_on_read (the semaphore released once the staging was read, before completion),
no_sem (no semaphore wait). --writers 1 is the kernel before v18 (one writer, ids of parity 0).
  python3 bench/sm90_bwd_det_writers_model.py [--cases 2000] [--seed 1] [--writers 2] [--mutate X]
"""
import argparse
import random

WARPS_PER_BARRIER = 5  # kDqBarrierThreads = 128 + 32


class Fail(Exception):
    pass


class Barrier:
    def __init__(self, name):
        self.name, self.arrivals, self.gen = name, [], 0

    def arrive(self, tag):
        """Counts one warp; returns the generation the arrival belongs to."""
        g = self.gen
        self.arrivals.append(tag)
        if len(self.arrivals) == WARPS_PER_BARRIER:
            if len(set(self.arrivals)) != 1:
                raise Fail(f"barrier {self.name}: one instance mixes steps {sorted(self.arrivals)}")
            self.arrivals, self.gen = [], self.gen + 1
        return g


def run_case(rng, args):
    bm = rng.choice([64, 128])
    bn = 128
    nb = rng.randint(1, 5)
    nm = nb * bn // bm
    group = rng.randint(1, 4)
    sms = rng.randint(1, nb)
    writers = args.writers
    mut = args.mutate
    sem, completed_n, inflight, order = {}, {}, {}, {}
    actors = []  # generators yielding a predicate (runnable when true)
    ctas_done = [0]

    def cta(n):
        m0 = n * bn // bm
        walk = [(hi, m) for m in range(nm - 1, m0 - 1, -1) for hi in range(group)]
        steps = len(walk)
        rank = n  # causal, no window: first_n_block(m) = 0
        bars = {}

        def bar(kind, par, w):
            if mut == "same_ids":
                par = 0
            key = (kind, par, w)
            if key not in bars:
                bars[key] = Barrier(f"cta{n} {kind}[{par}]+{w}")
            return bars[key]

        staging = [[None] * 4 for _ in range(2)]
        live = [0]

        def wait_bar(b, tag):  # bar.sync: arrive, then wait for the instance to complete
            g = b.arrive(tag)
            yield lambda: b.gen > g

        def consumer_warp(w, k):
            for s in range(steps):
                yield lambda: True  # the step's products
                par = s % 2 if (writers == 2 or mut == "one_writer_parity") else 0
                yield from wait_bar(bar("EMPTY", par, w), s)
                staging[w][k] = s
                yield lambda: True
                bar("FULL", par, w).arrive(s)
            live[0] -= 1

        def writer(wi):
            if wi == 0 and steps > 0:
                for w in range(2):
                    bar("EMPTY", 0, w).arrive(0)
            for s in range(wi, steps, writers):
                hi, m = walk[s]
                par = s % 2 if writers == 2 else 0
                par_next = (s + 1) % 2 if (writers == 2 or mut == "one_writer_parity") else 0
                ops = []
                for w in range(2):
                    yield from wait_bar(bar("FULL", par, w), s)
                    key = (hi, m, w)
                    if mut != "no_sem":
                        yield lambda key=key: sem.get(key, 0) == rank
                    if completed_n.get(key, 0) != rank or inflight.get(key):
                        raise Fail(f"cta{n} step {s}: add of rank {rank} into {key} issued after "
                                   f"{completed_n.get(key, 0)} completed adds, {inflight.get(key, 0)} in flight")
                    inflight[key] = 1
                    op = {"read": False, "done": False}
                    ops.append(op)
                    actors.append(bulk_op(op, w, s, key))
                yield lambda: all(o["read"] for o in ops)
                if s + 1 < steps:
                    for w in range(2):
                        bar("EMPTY", par_next, w).arrive(s + 1)
                if mut == "release_on_read":
                    for w in range(2):
                        sem[(hi, m, w)] = sem.get((hi, m, w), 0) + 1
                yield lambda: all(o["done"] for o in ops)
                if mut != "release_on_read":
                    for w in range(2):
                        sem[(hi, m, w)] = sem.get((hi, m, w), 0) + 1
            live[0] -= 1

        def bulk_op(op, w, s, key):
            yield lambda: True
            if staging[w] != [s] * 4:
                raise Fail(f"cta{n} step {s}: bulk add read staging {w} = {staging[w]}")
            op["read"] = True
            yield lambda: True
            order.setdefault(key, []).append(rank)
            completed_n[key] = completed_n.get(key, 0) + 1
            inflight[key] = 0
            op["done"] = True

        def finisher():
            yield lambda: live[0] == 0
            ctas_done[0] += 1

        live[0] = 8 + writers
        return [consumer_warp(w, k) for w in range(2) for k in range(4)] + \
               [writer(wi) for wi in range(writers)] + [finisher()]

    dispatched = 0
    pending = []  # (generator, predicate)
    while True:
        while dispatched < nb and dispatched - ctas_done[0] < sms:
            actors.extend(cta(dispatched))
            dispatched += 1
        for g in actors:
            try:
                pending.append([g, next(g)])
            except StopIteration:
                pass
        actors.clear()
        if not pending:
            if dispatched < nb:
                continue
            break
        ready = [i for i, (g, pred) in enumerate(pending) if pred()]
        if not ready:
            raise Fail(f"deadlock: {len(pending)} actors blocked, {ctas_done[0]}/{nb} CTAs done")
        i = rng.choice(ready)
        g = pending[i][0]
        try:
            pending[i][1] = next(g)
        except StopIteration:
            pending.pop(i)
    for m in range(nm):
        k = sum(1 for n in range(nb) if n * bn // bm <= m)
        for hi in range(group):
            for w in range(2):
                got = order.get((hi, m, w), [])
                if got != list(range(k)):
                    raise Fail(f"chunk {(hi, m, w)}: adds in order {got}, want 0..{k - 1}")
    return nb, group, sum(len(v) for v in order.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writers", type=int, default=2, choices=[1, 2])
    ap.add_argument("--mutate", default="", choices=["", "same_ids", "one_writer_parity", "release_on_read", "no_sem"])
    args = ap.parse_args()
    rng = random.Random(args.seed)
    adds = 0
    for c in range(args.cases):
        try:
            _, _, a = run_case(rng, args)
        except Fail as e:
            print(f"FAIL (case {c}, writers {args.writers}, mutate '{args.mutate}'): {e}")
            return 1
        adds += a
    print(f"ok: {args.cases} cases, writers {args.writers}, mutate '{args.mutate}', {adds} adds checked")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
