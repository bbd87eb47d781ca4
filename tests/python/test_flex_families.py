"""flashbox.flex_families on the CPU: FlexAttention mask_mods recognised as flashbox's built-in mask
families (causal, sliding windows, documents, prefix-LM, chunks).

Recognition: each pattern and its operand-order variants give the right family parameters; near
misses (strict causal, a document read at a shifted index, a window of the wrong sign, a prefix with
<=, ...) either map to exactly equivalent parameters (checked on the whole (b, q, kv) grid) or are not
taken; the equivalence check rejects deliberately wrong parameters. End to end through
flashbox._flex_core on the C API's CPU backend: forward and backward against an fp64 dense reference of
the mask_mod, the route taken, a BlockMask's tables dropped where they add nothing and kept where
they do. Needs torch >= 1.13 (make_fx); the end-to-end tests need libflashbox too. Skips with the
reason otherwise.
"""

import math
import types

import pytest

torch = pytest.importorskip("torch", reason="the mask family recogniser needs torch >= 1.13 (make_fx)")
if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (1, 13):
    pytest.skip(f"the mask family recogniser needs torch >= 1.13 (make_fx), this is {torch.__version__}",
                allow_module_level=True)

from flashbox import _flex_core as core  # noqa: E402
from flashbox import flex_families as ff  # noqa: E402
from test_flex_blockmask_cpu import _lib_or_skip, make_block_mask, reference  # noqa: E402

B, H, T = 2, 2, 40
DOC = torch.tensor([[0] * 10 + [1] * 15 + [2] * 15, [0] * 3 + [1] * 30 + [2] * 7], dtype=torch.int64)
DOC32 = DOC.to(torch.int32)
DOC_T = DOC.t().contiguous()                 # [T, B]
DOC1 = DOC[1].clone()                        # [T]: one packing for every batch entry
PREFIX = torch.tensor([5, 12])
PREFIX1 = torch.tensor([7])                  # one element: a constant


def grid_mask(fn, B=B, Tq=T, Tk=T):
    b = torch.arange(B).view(-1, 1, 1)
    q = torch.arange(Tq).view(1, -1, 1)
    k = torch.arange(Tk).view(1, 1, -1)
    return torch.broadcast_to(fn(b, torch.zeros_like(b), q, k), (B, Tq, Tk))


def grid_rule(p, B=B, Tq=T, Tk=T):
    b = torch.arange(B).view(-1, 1, 1)
    return torch.broadcast_to(ff.rule(p, b, torch.arange(Tq).view(1, -1, 1), torch.arange(Tk).view(1, 1, -1), Tq, Tk),
                              (B, Tq, Tk))


def effective(fn, B=B, Tq=T, Tk=T):
    """The Params the router would run fn with at this shape (resolved and verified), or None; where
    there are Params, they must admit exactly what fn admits on the whole grid."""
    f = ff.recognise(fn)
    if f is None:
        return None
    p, _ = ff.Resolver(fn, f).params(B, H, Tq, Tk, "cpu")
    if p is not None:
        assert torch.equal(grid_mask(fn, B, Tq, Tk), grid_rule(p, B, Tq, Tk)), f"{f.name}: not exact on the grid"
    return p


# ---- recognition -------------------------------------------------------------------------------

# name -> (mask_mod, expected (window_left, window_right, chunk, documents, prefix lengths or None))
RECOGNISED = {
    "causal kv<=q": (lambda b, h, q, kv: kv <= q, (-1, 0, 0, False, None)),
    "causal q>=kv": (lambda b, h, q, kv: q >= kv, (-1, 0, 0, False, None)),
    "causal q-kv>=0": (lambda b, h, q, kv: q - kv >= 0, (-1, 0, 0, False, None)),
    "causal 0<=q-kv": (lambda b, h, q, kv: 0 <= q - kv, (-1, 0, 0, False, None)),
    "causal kv<q+1": (lambda b, h, q, kv: kv < q + 1, (-1, 0, 0, False, None)),
    "window q-kv<=5 & causal": (lambda b, h, q, kv: (q - kv <= 5) & (kv <= q), (5, 0, 0, False, None)),
    "window causal & q-kv<5": (lambda b, h, q, kv: (q >= kv) & (q - kv < 5), (4, 0, 0, False, None)),
    "window kv>q-6 & causal": (lambda b, h, q, kv: (kv > q - 6) & (kv <= q), (5, 0, 0, False, None)),
    "window logical_and": (lambda b, h, q, kv: torch.logical_and(q - kv <= 5, kv <= q), (5, 0, 0, False, None)),
    "window two-sided abs<=3": (lambda b, h, q, kv: torch.abs(q - kv) <= 3, (3, 3, 0, False, None)),
    "window two-sided abs(kv-q)<4": (lambda b, h, q, kv: (kv - q).abs() < 4, (3, 3, 0, False, None)),
    "window two bounds": (lambda b, h, q, kv: (kv - q <= 2) & (q - kv <= 7), (7, 2, 0, False, None)),
    "document": (lambda b, h, q, kv: DOC[b, q] == DOC[b, kv], (-1, -1, 0, True, None)),
    "document kv==q order": (lambda b, h, q, kv: DOC[b, kv] == DOC[b, q], (-1, -1, 0, True, None)),
    "document int32 & causal": (lambda b, h, q, kv: (DOC32[b, q] == DOC32[b, kv]) & (q >= kv),
                                (-1, 0, 0, True, None)),
    "causal & document": (lambda b, h, q, kv: (kv <= q) & (DOC[b, kv] == DOC[b, q]), (-1, 0, 0, True, None)),
    "document [T, B]": (lambda b, h, q, kv: DOC_T[q, b] == DOC_T[kv, b], (-1, -1, 0, True, None)),
    "document [T] & causal": (lambda b, h, q, kv: (DOC1[q] == DOC1[kv]) & (kv <= q), (-1, 0, 0, True, None)),
    "document & window": (lambda b, h, q, kv: (DOC[b, q] == DOC[b, kv]) & (kv <= q) & (q - kv <= 4),
                          (4, 0, 0, True, None)),
    "prefix-lm": (lambda b, h, q, kv: (kv <= q) | (kv < PREFIX[b]), (-1, 0, 0, False, [5, 12])),
    "prefix-lm swapped": (lambda b, h, q, kv: (PREFIX[b] > kv) | (q >= kv), (-1, 0, 0, False, [5, 12])),
    "prefix-lm logical_or": (lambda b, h, q, kv: torch.logical_or(kv < PREFIX[b], kv <= q),
                             (-1, 0, 0, False, [5, 12])),
    "prefix-lm int": (lambda b, h, q, kv: (kv < 9) | (kv <= q), (-1, 0, 0, False, [9, 9])),
    "prefix-lm one-element tensor": (lambda b, h, q, kv: (kv <= q) | (kv < PREFIX1), (-1, 0, 0, False, [7, 7])),
    "prefix-lm one-element [0]": (lambda b, h, q, kv: (kv <= q) | (kv < PREFIX[0]), (-1, 0, 0, False, [5, 5])),
    "prefix-lm with <=": (lambda b, h, q, kv: (kv <= q) | (kv <= PREFIX[b]), (-1, 0, 0, False, [6, 13])),
    "prefix-lm & documents": (lambda b, h, q, kv: (DOC[b, q] == DOC[b, kv]) & ((kv <= q) | (kv < PREFIX[b])),
                              (-1, 0, 0, True, [5, 12])),
    "prefix past the keys clamps": (lambda b, h, q, kv: (kv <= q) | (kv < 100), (-1, 0, 0, False, [40, 40])),
    "chunk & causal": (lambda b, h, q, kv: (q // 8 == kv // 8) & (kv <= q), (-1, 0, 8, False, None)),
    "chunk swapped": (lambda b, h, q, kv: (kv <= q) & (kv // 8 == q // 8), (-1, 0, 8, False, None)),
    "chunk div floor": (lambda b, h, q, kv: torch.div(q, 6, rounding_mode="floor") ==
                        torch.div(kv, 6, rounding_mode="floor"), (-1, -1, 6, False, None)),
    "causal with b, h unused and casts": (lambda b, h, q, kv: kv.to(torch.int32) <= q.int(), (-1, 0, 0, False, None)),
}


def _and_masks(*mods):     # torch's and_masks / or_masks, as FlexAttention writes them
    def f(b, h, q, kv):
        r = b.new_ones((), dtype=torch.bool)
        for m in mods:
            r = r & m(b, h, q, kv)
        return r
    return f


def _or_masks(*mods):
    def f(b, h, q, kv):
        r = b.new_zeros((), dtype=torch.bool)
        for m in mods:
            r = r | m(b, h, q, kv)
        return r
    return f


RECOGNISED["and_masks(document, causal)"] = (
    _and_masks(lambda b, h, q, kv: DOC[b, q] == DOC[b, kv], lambda b, h, q, kv: q >= kv), (-1, 0, 0, True, None))
RECOGNISED["or_masks(causal, prefix)"] = (
    _or_masks(lambda b, h, q, kv: q >= kv, lambda b, h, q, kv: kv < PREFIX[b]), (-1, 0, 0, False, [5, 12]))


@pytest.mark.parametrize("name", list(RECOGNISED))
def test_recognised_with_the_right_parameters(name):
    fn, (wl, wr, chunk, docs, prefix) = RECOGNISED[name]
    p = effective(fn)
    assert p is not None, f"{name} was not recognised"
    assert (p.window_left, p.window_right, p.chunk) == (wl, wr, chunk)
    assert (p.doc_q is not None) == docs and (p.doc_k is not None) == docs
    if docs:
        assert p.doc_q.dtype == torch.int32 and p.doc_q.shape == (B, T) and p.doc_q.is_contiguous()
    assert (p.prefix.tolist() if p.prefix is not None else None) == prefix


# Near misses: each either maps to exactly equivalent parameters (effective() checks that on the whole
# grid) or is not taken (None). "none": must not be taken.
NEAR_MISSES = {
    "strict causal kv<q": (lambda b, h, q, kv: kv < q, "none"),        # window_right would be -1
    "anti-causal kv>=q": (lambda b, h, q, kv: kv >= q, "exact"),        # window_left 0, right unbounded
    "document at a shifted index": (lambda b, h, q, kv: (DOC[b, q + 1] == DOC[b, kv]) & (kv <= q), "none"),
    "document of batch entry 0 for the queries": (lambda b, h, q, kv: DOC[0, q] == DOC[b, kv], "exact"),
    "document read by h": (lambda b, h, q, kv: DOC[h, q] == DOC[h, kv], "none"),
    "document !=": (lambda b, h, q, kv: DOC[b, q] != DOC[b, kv], "none"),
    "document negated": (lambda b, h, q, kv: ~(DOC[b, q] == DOC[b, kv]), "none"),
    "window of the wrong sign": (lambda b, h, q, kv: (kv - q <= 5) & (kv <= q), "exact"),     # = causal
    "window of the wrong sign, other side": (lambda b, h, q, kv: (kv - q >= 5) & (kv <= q), "none"),  # empty
    "window without causal": (lambda b, h, q, kv: q - kv <= 5, "exact"),
    "prefix with <=": (lambda b, h, q, kv: (kv <= q) | (kv <= PREFIX[b]), "exact"),
    "prefix on the wrong side": (lambda b, h, q, kv: (kv <= q) | (kv > PREFIX[b]), "none"),
    "prefix by q_idx": (lambda b, h, q, kv: (kv <= q) | (q < PREFIX[b]), "none"),
    "prefix alone": (lambda b, h, q, kv: kv < PREFIX[b], "none"),
    "prefix outside documents": (lambda b, h, q, kv: ((DOC[b, q] == DOC[b, kv]) & (kv <= q)) | (kv < PREFIX[b]),
                                 "none"),
    "causal outside a prefix": (lambda b, h, q, kv: (kv <= q) & ((kv <= q) | (kv < PREFIX[b])), "none"),
    "chunk of different sizes": (lambda b, h, q, kv: (q // 8 == kv // 4) & (kv <= q), "none"),
    "chunk of a shifted index": (lambda b, h, q, kv: ((q + 1) // 8 == kv // 8) & (kv <= q), "none"),
    "rows that see nothing": (lambda b, h, q, kv: (q >= 5) & (kv <= q), "none"),
    "per head": (lambda b, h, q, kv: (q - kv) % (h + 2) == 0, "none"),
    "where": (lambda b, h, q, kv: torch.where(q >= kv, q >= 0, q < 0), "none"),
    "a float bound": (lambda b, h, q, kv: q - kv <= 2.5, "none"),
    "an overflowing product": (lambda b, h, q, kv: (q - kv) * (2 ** 62) <= 0, "none"),
}


@pytest.mark.parametrize("name", list(NEAR_MISSES))
def test_near_misses_are_exact_or_not_taken(name):
    fn, want = NEAR_MISSES[name]
    p = effective(fn)          # exact on the grid where taken
    if want == "none":
        assert p is None, f"{name} was taken as {p.family.name}"
    else:
        assert p is not None, f"{name}: an exactly equivalent family was expected"


def test_shapes_the_family_cannot_say_keep_the_mod():
    causal = lambda b, h, q, kv: kv <= q                       # noqa: E731
    assert effective(causal, Tq=30, Tk=40) is None            # top-left causal with Tq < Tk: window_right < 0
    p = effective(causal, Tq=40, Tk=30)                        # Tq > Tk: window_right = Tq - Tk
    assert p is not None and p.window_right == 10
    chunk = lambda b, h, q, kv: q // 8 == kv // 8              # noqa: E731
    assert effective(chunk, Tq=30, Tk=40) is None              # chunks need Tq = Tk
    doc = RECOGNISED["document"][0]
    assert effective(doc, Tq=30, Tk=40) is not None            # documents alone: any lengths
    assert effective(doc, Tq=41, Tk=41) is None                # ids shorter than the sequence
    assert effective(doc, B=3) is None                         # ids for fewer batch entries
    big = torch.tensor([[0, 2 ** 40] * 20, [1] * 40])
    assert effective(lambda b, h, q, kv: big[b, q] == big[b, kv]) is None   # ids outside int32


def test_the_equivalence_check_rejects_wrong_parameters():
    for name, change in (("window q-kv<=5 & causal", dict(window_left=6)),
                         ("window q-kv<=5 & causal", dict(window_right=1)),
                         ("chunk & causal", dict(chunk=4)),
                         ("causal kv<=q", dict(window_right=-1))):
        fn = RECOGNISED[name][0]
        p = effective(fn)
        for k, v in change.items():
            setattr(p, k, v)
        why = ff.verify(fn, p, B, H, T, T)
        assert why is not None and "differ" in why, (name, change)
    fn = RECOGNISED["prefix-lm"][0]
    p = effective(fn)
    p.prefix = p.prefix + 1                                     # off by one at the prefix's end
    assert ff.verify(fn, p, B, H, T, T) is not None
    fn = RECOGNISED["document"][0]
    p = effective(fn)
    p.doc_k = torch.roll(p.doc_k, 1, dims=1)                    # a document edge one key late
    assert ff.verify(fn, p, B, H, T, T) is not None


def test_a_false_structural_match_is_refused_by_the_check(monkeypatch):
    """A recogniser bug (here: the causal bound read one key too wide) is caught per call shape."""
    fn = RECOGNISED["causal kv<=q"][0]
    f = ff.recognise(fn)
    f.hi = 1                                                    # as if kv_idx <= q_idx + 1 had been matched
    p, why = ff.Resolver(fn, f).params(B, H, T, T, "cpu")
    assert p is None and "differ" in why


# ---- end to end on the CPU backend ---------------------------------------------------------------

def _check_call(fn, tables=None, qbs=0, kvbs=0, visible=None, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64).float().requires_grad_() for _ in range(3))
    key = core.mask_mod_key(fn)
    scale = 1 / math.sqrt(D)
    o, lse = core.forward(q.detach(), k.detach(), v.detach(), tables or [None] * 8, qbs, kvbs, key, scale)
    route = core.last_route()
    vis = (grid_mask(fn) if visible is None else visible)[:, None].expand(B, H, T, T)
    ref_o, ref_lse = reference(q, k, v, vis, scale)
    torch.testing.assert_close(o.double(), ref_o.detach(), atol=2e-5, rtol=2e-5)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    dout = torch.randn(B, H, T, D, generator=g)
    dq, dk, dv = core.backward(dout, q.detach(), k.detach(), v.detach(), o, lse, tables or [None] * 8, qbs, kvbs,
                               key, scale)
    assert core.last_route("backward") == route
    ref_o.backward(dout.double())
    for name, got, want in (("dq", dq, q.grad), ("dk", dk, k.grad), ("dv", dv, v.grad)):
        torch.testing.assert_close(got.double(), want.double(), atol=5e-5, rtol=5e-5, msg=name)
    return route


@pytest.mark.parametrize("name", [n for n in RECOGNISED if "[T, B]" not in n])
def test_cpu_forward_backward_as_the_family(name):
    _lib_or_skip()
    route = _check_call(RECOGNISED[name][0])
    assert route.kind == "family" and not route.tables, str(route)


def _kinds(fn, qbs, kvbs):
    """[B, 1, nq, nk] block kinds of fn as create_block_mask makes them (0 empty, 1 partial, 2 full)."""
    vis = grid_mask(fn)
    nq, nk = -(-T // qbs), -(-T // kvbs)
    pad = torch.zeros(B, nq * qbs, nk * kvbs, dtype=torch.bool)
    pad[:, :T, :T] = vis
    blocks = pad.view(B, nq, qbs, nk, kvbs)
    valid = torch.zeros_like(pad)
    valid[:, :T, :T] = True
    valid = valid.view(B, nq, qbs, nk, kvbs)
    full = (blocks | ~valid).all(4).all(2)
    anyv = blocks.any(4).any(2)
    return torch.where(full, 2, torch.where(anyv, 1, 0))[:, None]


def _block_mask(kinds, qbs, kvbs):
    bm = make_block_mask(kinds, T, T, qbs, kvbs)
    return core.block_mask_tables(bm, torch.device("cpu"), T, T, B, H)[0]


def test_block_mask_tables_dropped_where_they_add_nothing_and_kept_where_they_do():
    _lib_or_skip()
    fn = RECOGNISED["prefix-lm & documents"][0]
    kinds = _kinds(fn, 8, 8)
    route = _check_call(fn, _block_mask(kinds, 8, 8), 8, 8)
    assert route.kind == "family" and not route.tables, str(route)
    # A block the mask shows listed as skipped, and a partial block listed full: FlexAttention's answer
    # differs from the mask_mod's there, so the tables go with the family.
    sparser = kinds.clone()
    b, r, c = (int(x) for x in (sparser == 1).nonzero()[3][[0, 2, 3]])
    sparser[b, 0, r, c] = 0
    qb, kb = (int(x) for x in (sparser[1, 0] == 1).nonzero()[-1])
    sparser[1, 0, qb, kb] = 2
    listed = sparser.repeat_interleave(8, 2).repeat_interleave(8, 3)[:, 0, :T, :T]
    visible = (listed == 2) | ((listed == 1) & grid_mask(fn))
    route = _check_call(fn, _block_mask(sparser, 8, 8), 8, 8, visible=visible, seed=1)
    assert route.kind == "family" and route.tables, str(route)


def test_tables_add_nothing():
    fn = RECOGNISED["window q-kv<=5 & causal"][0]
    p = effective(fn)
    kinds = _kinds(fn, 8, 8)
    assert ff.tables_add_nothing(p, _block_mask(kinds, 8, 8), 8, 8, B, T, T)
    everything = torch.ones(1, 1, 5, 5, dtype=torch.int64)          # all partial, broadcast: adds nothing
    assert ff.tables_add_nothing(p, _block_mask(everything, 8, 8), 8, 8, B, T, T)
    for qb, kb, kind in ((2, 2, 2), (2, 1, 0), (3, 2, 0)):          # a diagonal block full; a shown block skipped
        k2 = kinds.clone()
        k2[1, 0, qb, kb] = kind
        assert not ff.tables_add_nothing(p, _block_mask(k2, 8, 8), 8, 8, B, T, T), (qb, kb, kind)


def test_cpu_refuses_what_runs_only_as_a_mod():
    _lib_or_skip()
    q = torch.randn(1, 1, 16, 8)
    causal = lambda b, h, q_idx, kv_idx: kv_idx <= q_idx       # noqa: E731
    key = core.mask_mod_key(causal)
    assert isinstance(core.mod_entry(key), core.FamilyEntry) and core.mask_mod_key(causal) == key
    core.forward(q, q, q, [None] * 8, 0, 0, key, 0.0)
    assert core.last_route().kind == "family"
    with ff.disabled():
        with pytest.raises(NotImplementedError, match="only on CUDA"):
            core.forward(q, q, q, [None] * 8, 0, 0, key, 0.0)
    k = torch.randn(1, 1, 20, 8)                                # Tq < Tk: top-left causal is no window
    with pytest.raises(NotImplementedError, match="only on CUDA"):
        core.forward(q, k, k, [None] * 8, 0, 0, key, 0.0)


def test_unrecognised_mods_keep_the_mod_path():
    per_head = NEAR_MISSES["per head"][0]
    assert ff.recognise(per_head) is None
    assert ff.recognise(None) is None
    assert ff.recognise(types.SimpleNamespace(__name__="noop_mask")) is None
