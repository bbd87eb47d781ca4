#!/usr/bin/env python3
"""Brute-force model of the Hopper backward's deterministic dQ order (flash_bwd_sm90_kernel.cuh,
"Deterministic mode"), both schemes: v9's (key block last_n_block(m) first, down; key blocks
descending in the grid; head-by-head walk) and v10's (Cfg::QDESC: key block first_n_block(m)
first, up; key blocks ascending; query blocks descending with the group's heads innermost).

The functions below transcribe the kernel's and the plan's: the window normalisation of the plan,
cuda/common/score_mods.cuh's mods_* bounds, m_range, last_n_block, first_n_block, tile_of (chunks of
chunk_heads (batch, kv head) pairs), and the three walks as the code writes them (the producer's
nested loops, the dQ writer's increments, the consumer's m_next / h_next), for random fixed-length
shapes: causal or not, sliding windows (one- and two-sided), GQA groups 1-8, seqlen_q != seqlen_k,
head_dim 64 (BM 128) and 128 (BM 64), any chunk_heads. Checked for every shape and both schemes:
  0. m_range covers every query block with a row that sees a key of the block (the gradients);
  1. tile_of is a bijection of the grid onto (key block, batch x kv head);
  2. the three walks are the same sequence, visit every (query head of the group, block of m_range)
     once, and have group x |m_range| steps;
  3. the key blocks adding into a query block m are the contiguous range first_n_block(m) ..
     last_n_block(m), and the ranks the writer waits for are 0 .. k-1 over them (each reached);
  4. every wait is for a CTA earlier in the grid (the deadlock-freedom argument's premise);
  5. a simulation with few SMs, the hardware's in-order dispatch and random interleaving of the
     resident CTAs' steps never deadlocks, and every block's adds happen in the scheme's fixed order;
  6. v10 without a left window edge: key block n's walk is a prefix of key block n - 1's (why its
     waits are short; informational, counted not asserted).
  7. (branch convq) the early convert's block order (flash_bwd_sm90.cu, convert_dq_early_kernel) is a
     bijection of its blocks onto (batch x query head, query block), and adders_of(m) (the key
     blocks whose m_range holds m) is the number of writer steps on every (batch, query head, m):
     the count each completion counter, and each deterministic semaphore, reaches (the simulation's
     final semaphores are checked against it).
  python3 bench/sm90_bwd_det_order_model.py [--shapes 3000] [--seed 1]
"""
import argparse
import random
import sys

BN = 128


# cuda/common/score_mods.cuh (window_left / window_right < 0: that side unbounded)
def key_begin(wl, i, shift, sk):
    return 0 if wl < 0 else min(max(i + shift - wl, 0), sk)


def key_end(wr, i, shift, sk):
    return sk if wr < 0 else min(max(i + shift + wr + 1, 0), sk)


def query_begin(wr, j, shift, sq):
    return 0 if wr < 0 else min(max(j - shift - wr, 0), sq)


def query_end(wl, j, shift, sq):
    return sq if wl < 0 else min(max(j - shift + wl + 1, 0), sq)


def visible(wl, wr, i, j, shift):
    d = j - i - shift
    return (wl < 0 or d >= -wl) and (wr < 0 or d <= wr)


class Shape:
    def __init__(self, batch, hkv, group, sq, sk, bm, wl, wr, chunk):
        self.batch, self.hkv, self.group, self.sq, self.sk, self.bm = batch, hkv, group, sq, sk, bm
        reach = max(sq, sk)  # the plan: a side at least as long as both sequences is unbounded
        self.wl = -1 if wl >= reach else wl
        self.wr = -1 if wr >= reach else wr
        self.num_m = (sq + bm - 1) // bm
        self.num_n = (sk + BN - 1) // BN
        self.num_bh = batch * hkv
        self.chunk = chunk
        self.shift = sk - sq

    def __repr__(self):
        return (f"B{self.batch} Hkv{self.hkv} G{self.group} sq{self.sq} sk{self.sk} BM{self.bm} "
                f"window({self.wl},{self.wr}) chunk{self.chunk}")

    # the kernel's m_range
    def m_range(self, n):
        k_first, k_last = n * BN, min(n * BN + BN, self.sk) - 1
        qb = query_begin(self.wr, k_first, self.shift, self.sq)
        qe = query_end(self.wl, k_last, self.shift, self.sq)
        if qb >= qe:
            return (0, 0)
        return (qb // self.bm, (qe + self.bm - 1) // self.bm)

    def last_n_block(self, m):
        num_n = (self.sk + BN - 1) // BN
        if self.wr < 0:
            return num_n - 1
        r_last = min((m + 1) * self.bm, self.sq) - 1
        ke = key_end(self.wr, r_last, self.shift, self.sk)
        return min(num_n - 1, (ke + BN - 1) // BN - 1)

    def first_n_block(self, m):
        if self.wl < 0:
            return 0
        return key_begin(self.wl, m * self.bm, self.shift, self.sk) // BN

    # tile_of<Cfg>: (n, bh) of CTA `linear`; v9's deterministic order flips n
    def tile_of(self, linear, qdesc):
        per_chunk = self.chunk * self.num_n
        c, r = divmod(linear, per_chunk)
        heads_here = min(self.chunk, self.num_bh - c * self.chunk)
        n = r // heads_here
        bh = c * self.chunk + (r - n * heads_here)
        if not qdesc:
            n = self.num_n - 1 - n
        return n, bh

    # The three walks, as the code writes them.
    def producer_walk(self, n, hk, qdesc):
        x, y = self.m_range(n)
        out = []
        if qdesc:
            for m in range(y - 1, x - 1, -1):
                for hi in range(self.group):
                    out.append((hk * self.group + hi, m))
        else:
            for hi in range(self.group):
                for m in range(x, y):
                    out.append((hk * self.group + hi, m))
        return out

    # flash_bwd_sm90_kernel.cuh adders_of
    def adders_of(self, m):
        return sum(1 for n in range(self.num_n) if self.m_range(n)[0] <= m < self.m_range(n)[1])

    # convert_dq_early_kernel: block blk -> (batch * heads_q + h, m); chunk_q_heads = chunk * group
    def convert_block(self, blk, qdesc):
        bhq, mb, cq = self.num_bh * self.group, self.num_m, self.chunk * self.group
        per_chunk = cq * mb
        c, r = divmod(blk, per_chunk)
        pairs = min(cq, bhq - c * cq) // self.group
        hi, r = divmod(r, mb * pairs)
        mi, pair = divmod(r, pairs)
        m = mb - 1 - mi if qdesc else mi
        return (c * (cq // self.group) + pair) * self.group + hi, m

    def writer_walk(self, n, hk, qdesc):
        m_begin, m_end = self.m_range(n)
        steps = self.group * (m_end - m_begin)
        h_begin = hk * self.group
        h, m = h_begin, (m_end - 1 if qdesc else m_begin)
        out = []
        for _ in range(steps):
            out.append((h, m))
            if qdesc:
                h += 1
                if h == h_begin + self.group:
                    h, m = h_begin, m - 1
            else:
                m += 1
                if m == m_end:
                    m, h = m_begin, h + 1
        return out

    def consumer_walk(self, n, hk, qdesc):
        m_begin, m_end = self.m_range(n)
        steps = self.group * (m_end - m_begin)
        h_begin = hk * self.group
        h, m = h_begin, (m_end - 1 if qdesc else m_begin)
        out = []
        for _ in range(steps):
            out.append((h, m))
            if qdesc:
                h_next = h_begin if h + 1 == h_begin + self.group else h + 1
                m_next = m - 1 if h_next == h_begin else m
            else:
                m_next = m_begin if m + 1 == m_end else m + 1
                h_next = h + 1 if m_next == m_begin else h
            h, m = h_next, m_next
        return out

    def rank(self, n, m, qdesc):
        return n - self.first_n_block(m) if qdesc else self.last_n_block(m) - n


def check(s, qdesc, rng, stats):
    grid = s.num_n * s.num_bh
    # 1. bijection
    tiles = [s.tile_of(i, qdesc) for i in range(grid)]
    assert sorted(tiles) == sorted((n, bh) for n in range(s.num_n) for bh in range(s.num_bh)), "tile_of"
    index = {t: i for i, t in enumerate(tiles)}
    # 2. walks
    walks = {}
    for n in range(s.num_n):
        for hk in range(s.hkv):
            w = s.producer_walk(n, hk, qdesc)
            assert w == s.writer_walk(n, hk, qdesc) == s.consumer_walk(n, hk, qdesc), "walks differ"
            x, y = s.m_range(n)
            want = {(hk * s.group + hi, m) for hi in range(s.group) for m in range(x, y)}
            assert len(w) == len(want) == s.group * (y - x) and set(w) == want, "walk coverage"
            walks[(n, hk)] = w
    # 0. m_range holds every query block with a real row that sees a real key of the block (rows as
    # intervals of visible keys, so O(seqlen_q))
    seen = set()
    for i in range(s.sq):
        kb, ke = key_begin(s.wl, i, s.shift, s.sk), key_end(s.wr, i, s.shift, s.sk)
        for n in range(kb // BN, (ke + BN - 1) // BN if ke > kb else 0):
            seen.add((n, i // s.bm))
    for n, m in seen:
        assert s.m_range(n)[0] <= m < s.m_range(n)[1], f"m_range({n}) misses m={m}"
    # 3. adders of each query block, contiguity, ranks
    for m in range(s.num_m):
        adders = [n for n in range(s.num_n) if s.m_range(n)[0] <= m < s.m_range(n)[1]]
        if not adders:
            continue
        lo, hi = s.first_n_block(m), s.last_n_block(m)
        assert adders == list(range(lo, hi + 1)), f"adders of m={m}: {adders} vs [{lo},{hi}]"
        ranks = sorted(s.rank(n, m, qdesc) for n in adders)
        assert ranks == list(range(len(adders))), f"ranks of m={m}: {ranks}"
        # 4. the CTAs of lower rank are earlier in the grid (any bh: same kv head, batch)
        for bh in range(s.num_bh):
            for n in adders:
                for n2 in adders:
                    if s.rank(n2, m, qdesc) < s.rank(n, m, qdesc):
                        assert index[(n2, bh)] < index[(n, bh)], f"m={m}: n={n} waits for later n2={n2}"
    # 7. the early convert: its order is a bijection, adders_of counts the writer steps
    blocks = [s.convert_block(i, qdesc) for i in range(s.num_bh * s.group * s.num_m)]
    assert sorted(blocks) == [(bh, m) for bh in range(s.num_bh * s.group) for m in range(s.num_m)], "convert order"
    steps_on = {}
    for (n, hk), w in walks.items():
        for h, m in w:
            steps_on[(h, m)] = steps_on.get((h, m), 0) + 1
    for h in range(s.hkv * s.group):
        for m in range(s.num_m):
            assert steps_on.get((h, m), 0) == s.adders_of(m), f"adders_of({m}) != steps on (h={h}, m={m})"
    # 6. prefix property (v10, no left edge)
    if qdesc and s.wl < 0:
        for hk in range(s.hkv):
            for n in range(1, s.num_n):
                a, b = walks[(n, hk)], walks[(n - 1, hk)]
                stats["prefix"] += 1
                stats["prefix_ok"] += b[: len(a)] == a
    # 5. simulation: `sms` resident slots, in-order dispatch, random interleaving of the residents
    sms = rng.randint(1, 6)
    sem, order = {}, {}
    nxt, resident, pos = 0, [], {}
    done = 0
    while done < grid:
        while len(resident) < sms and nxt < grid:
            resident.append(nxt)
            pos[nxt] = 0
            nxt += 1
        runnable = []
        for c in resident:
            n, bh = tiles[c]
            b, hk = divmod(bh, s.hkv)
            w = walks[(n, hk)]
            if pos[c] == len(w):
                runnable.append(c)
                continue
            h, m = w[pos[c]]
            if sem.get((b, h, m), 0) == s.rank(n, m, qdesc):
                runnable.append(c)
        assert runnable, f"deadlock with {sms} SMs, residents {resident}"
        c = rng.choice(runnable)
        n, bh = tiles[c]
        b, hk = divmod(bh, s.hkv)
        w = walks[(n, hk)]
        if pos[c] == len(w):
            resident.remove(c)
            done += 1
            continue
        h, m = w[pos[c]]
        sem[(b, h, m)] = sem.get((b, h, m), 0) + 1
        order.setdefault((b, h, m), []).append(n)
        pos[c] += 1
    for b in range(s.batch):
        for h in range(s.hkv * s.group):
            for m in range(s.num_m):
                assert sem.get((b, h, m), 0) == s.adders_of(m), f"final semaphore of {(b, h, m)}"
    for (b, h, m), ns in order.items():
        lo, hi = s.first_n_block(m), s.last_n_block(m)
        assert ns == (list(range(lo, hi + 1)) if qdesc else list(range(hi, lo - 1, -1))), f"order of {(b, h, m)}"
    stats["adds"] += sum(len(v) for v in order.values())


def random_shape(rng):
    bm = rng.choice([64, 128])
    group = rng.randint(1, 8)
    hkv = rng.randint(1, 3)
    batch = rng.randint(1, 2)
    sq = rng.randint(1, 1200)
    sk = rng.choice([sq, rng.randint(1, 1200)])
    kind = rng.choice(["full", "causal", "causal", "left", "right", "both"])
    wl, wr = {"full": (-1, -1), "causal": (-1, 0),
              "left": (rng.randint(0, 700), 0),
              "right": (-1, rng.randint(0, 700)),
              "both": (rng.randint(0, 700), rng.randint(0, 700))}[kind]
    chunk = rng.randint(1, batch * hkv)
    return Shape(batch, hkv, group, sq, sk, bm, wl, wr, chunk)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}, {args.shapes} random shapes, both schemes")
    stats = {"prefix": 0, "prefix_ok": 0, "adds": 0}
    for i in range(args.shapes):
        s = random_shape(rng)
        for qdesc in (False, True):
            try:
                check(s, qdesc, rng, stats)
            except AssertionError as e:
                print(f"FAIL ({'v10 QDESC' if qdesc else 'v9'}) {s}: {e}")
                return 1
    print(f"all held: {args.shapes} shapes x 2 schemes, {stats['adds']} simulated adds; v10 prefix property "
          f"(no left window edge) {stats['prefix_ok']} / {stats['prefix']} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
