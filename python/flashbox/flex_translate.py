"""FlexAttention mask_mod / score_mod (Python, elementwise torch) -> flashbox mod (CUDA C++ for NVRTC).

A FlexAttention mod is a Python function of 0-dim integer tensors,
    mask_mod(b, h, q_idx, kv_idx) -> bool          score_mod(score, b, h, q_idx, kv_idx) -> score,
built from elementwise torch operations and indexing into tensors it captures (document ids, prefix
lengths, bitmaps, bias tables). `translate(fn)` traces it with make_fx (torch >= 1.13) on one-element
int64 index tensors, so the trace is a graph of aten operations, and emits

  * the CUDA C++ source of the flashbox_mod_create contract, one SSA line per traced operation:
        bool NAME(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux)
  * the auxiliary tensors: every captured tensor that is indexed by a traced value becomes an aux
    tensor (its name: the Python variable it was captured from where there is one), read in the source
    as aux.NAME(i0, ...) and bound per call; a captured tensor of one element becomes a literal;
    operations on captured tensors alone (x[0], x.max()) are evaluated once at translation;
  * whether the function reads b and h (a mod that does not is evaluated once for every batch entry or
    head: flashbox_attention_ext.mask_mod_broadcast).

Taken: comparisons, & | ^ ~, logical and/or/xor/not, + - * / // %, neg, abs, floor / ceil / trunc,
minimum / maximum, clamp, where, casts (.to, .int(), .bool(), ...), full-rank indexing of a captured tensor of rank 1..4 by
traced expressions (a negative index counts from the end, as in Python; an index still outside
[0, size) reads 0, as every aux read does), and constants. Anything else raises TranslationError naming
the operation (and data-dependent Python control flow, `if q_idx > 3:`, fails to trace: use where).

Semantics: integers are computed in 64 bits (FlexAttention's indices are int32: a mod that overflows
int32 differs), floats in fp32 (float64 captured tensors are read as fp32). // and % follow Python
(floor division; the remainder takes the divisor's sign); an integer division or remainder by zero
gives 0 (torch raises on the CPU; on the GPU it is undefined).

The emitted source uses no CUDA keyword (NVRTC compiles mods with --device-as-default-execution-space),
so a test can also compile it with a host C++ compiler (tests/python/test_flex_translate.py).
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch

from . import _ext

__all__ = ["TranslationError", "Translation", "AuxSpec", "translate", "trace", "node_values", "compile_translation",
           "aux_dtype_of", "is_noop_mask"]


class TranslationError(ValueError):
    """A mod that cannot be translated to flashbox's CUDA C++: the message names what could not be."""


@dataclass
class AuxSpec:
    """One auxiliary tensor: its name in the source, its flashbox dtype and rank, and the tensor bound
    to every call (the captured tensor itself, or a one-off copy when its dtype needed converting)."""
    name: str
    dtype: int          # _ext.AuxDType
    rank: int
    tensor: torch.Tensor


@dataclass
class Translation:
    kind: int                      # _ext.MOD_MASK or _ext.MOD_SCORE
    function_name: str
    source: str
    aux: List[AuxSpec] = field(default_factory=list)
    uses_b: bool = True
    uses_h: bool = True

    @property
    def aux_decls(self) -> Tuple[Tuple[str, int, int], ...]:
        return tuple((a.name, a.dtype, a.rank) for a in self.aux)


# ---- helpers emitted before the mod (plain C++: host- and NVRTC-compilable) -----------------------

_HELPERS = """\
static inline long long fbx_floordiv(long long a, long long b) {
  if (b == 0) return 0;
  long long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline long long fbx_mod(long long a, long long b) {
  if (b == 0) return 0;
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline long long fbx_truncdiv(long long a, long long b) { return b == 0 ? 0 : a / b; }
static inline long long fbx_fmod(long long a, long long b) { return b == 0 ? 0 : a % b; }
static inline float fbx_floorf(float x) { long long t = (long long)x; return (float)(x < (float)t ? t - 1 : t); }
static inline float fbx_truncf(float x) { return (float)(long long)x; }
static inline float fbx_fmodf(float a, float b) { return a - b * fbx_truncf(a / b); }
static inline float fbx_pymodf(float a, float b) { return a - b * fbx_floorf(a / b); }
static inline long long fbx_wrap(long long i, long long n) { return i < 0 ? i + n : i; }
"""

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _ctype(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype in _INT_DTYPES:
        return "long long"
    if dtype in _FLOAT_DTYPES:
        return "float"
    raise TranslationError(f"values of dtype {dtype} are not supported in a flashbox mod")


def _kind(dtype: torch.dtype) -> str:
    return {"bool": "b", "long long": "i", "float": "f"}[_ctype(dtype)]


def aux_dtype_of(t: torch.Tensor) -> Tuple[int, torch.Tensor]:
    """The flashbox aux dtype a captured tensor is read as, and the tensor to bind (a bool tensor is
    bound as its bytes; int8/int16 and float64, which the C side has no type for, as an int32 / fp32
    copy made once, at translation)."""
    d = t.dtype
    if d == torch.int32:
        return _ext.AuxDType.INT32, t
    if d == torch.int64:
        return _ext.AuxDType.INT64, t
    if d == torch.uint8:
        return _ext.AuxDType.UINT8, t
    if d == torch.bool:
        return _ext.AuxDType.UINT8, t.view(torch.uint8)
    if d == torch.float32:
        return _ext.AuxDType.FLOAT32, t
    if d == torch.float16:
        return _ext.AuxDType.FLOAT16, t
    if d == torch.bfloat16:
        return _ext.AuxDType.BFLOAT16, t
    if d in (torch.int8, torch.int16):
        return _ext.AuxDType.INT32, t.to(torch.int32)
    if d == torch.float64:
        return _ext.AuxDType.FLOAT32, t.to(torch.float32)
    raise TranslationError(f"a captured tensor of dtype {d} cannot be an aux tensor (int32, int64, uint8, "
                           f"bool, float32, float16, bfloat16 are taken)")


def _literal(x, kind: str) -> str:
    if isinstance(x, torch.Tensor):
        x = x.reshape(-1)[0].item()
    if kind == "b":
        return "true" if bool(x) else "false"
    if kind == "i":
        if isinstance(x, float):
            raise TranslationError(f"the float constant {x} where an integer is needed")
        v = int(x)
        if v == -(2 ** 63):
            return "(-9223372036854775807LL - 1)"
        return f"{v}LL"
    v = float(x)
    if not math.isfinite(v):
        raise TranslationError(f"the constant {v} (not finite) is not supported in a flashbox mod")
    return repr(v) + "f" if ("." in repr(v) or "e" in repr(v)) else repr(v) + ".0f"


def _scalar_kind(x) -> str:
    if isinstance(x, bool):
        return "b"
    if isinstance(x, int):
        return "i"
    if isinstance(x, float):
        return "f"
    raise TranslationError(f"the constant {x!r} is not supported in a flashbox mod")


def _promote(*kinds: str) -> str:
    return "f" if "f" in kinds else ("i" if "i" in kinds else "b")


_CNAME = {"b": "bool", "i": "long long", "f": "float"}


def _captured_names(fn) -> dict:
    """id(tensor) -> the name it is captured under (closure cells, then globals it names, then default
    arguments of functools.partial), for readable aux names."""
    names = {}
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None)
    if code is not None and closure:
        for n, cell in zip(code.co_freevars, closure):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if isinstance(v, torch.Tensor):
                names.setdefault(id(v), n)
    if code is not None:
        g = getattr(fn, "__globals__", {})
        for n in code.co_names:
            v = g.get(n)
            if isinstance(v, torch.Tensor):
                names.setdefault(id(v), n)
    return names


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = {"b", "h", "q_idx", "kv_idx", "score", "aux", "size", "data", "sizes", "strides"} | set(
    "alignas alignof asm auto bool break case catch char char16_t char32_t class const constexpr const_cast "
    "continue decltype default delete do double dynamic_cast else enum explicit export extern false float for "
    "friend goto if inline int long mutable namespace new noexcept nullptr operator private protected public "
    "register reinterpret_cast return short signed sizeof static static_assert static_cast struct switch "
    "template this thread_local throw true try typedef typeid typename union unsigned using virtual void "
    "volatile wchar_t while and or not xor bitand bitor compl and_eq or_eq xor_eq not_eq".split())


def is_noop_mask(fn) -> bool:
    """FlexAttention's default mask (every pair visible): torch's noop_mask, or a function named so."""
    return fn is None or getattr(fn, "__name__", "") == "noop_mask"


def trace(fn: Callable, kind: int = _ext.MOD_MASK, device=None):
    """make_fx's graph of a FlexAttention mask_mod (kind MOD_MASK) or score_mod (MOD_SCORE), traced on
    one-element int64 index tensors (and an fp32 score) on `device`: (graph module, sample arguments).
    The graph of aten operations is the IR both the translator and flashbox.flex_families read.
    Raises TranslationError, with the cause, for a function that cannot be traced."""
    from torch.fx.experimental.proxy_tensor import make_fx

    mask = kind == _ext.MOD_MASK
    idx = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(4)]
    args = idx if mask else [torch.zeros(1, dtype=torch.float32, device=device)] + idx
    what = "mask_mod" if mask else "score_mod"
    try:
        gm = make_fx(fn)(*args)
    except TranslationError:
        raise
    except Exception as e:  # noqa: BLE001 - every tracing failure is reported with its cause
        msg = str(e)
        if "value out of a tracing tensor" in msg or "data-dependent" in msg.lower():
            msg = ("it converts a traced value to a Python value (data-dependent Python control flow such "
                   "as `if q_idx > 3:`, int(), .item(), or indexing with a value): write it with torch "
                   "operations, e.g. torch.where")
        raise TranslationError(f"flashbox: the {what} {getattr(fn, '__name__', fn)!r} could not be traced: "
                               f"{type(e).__name__}: {msg}") from e
    return gm, args


def node_values(gm, sample_args) -> dict:
    """The value of every node of a traced graph on its sample arguments (the graph run once): what
    the captured tensors and the operations on them alone evaluate to, and every node's dtype."""
    values = {}

    class _Rec(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n] = out
            return out

    with torch.no_grad():
        _Rec(gm).run(*sample_args)
    return values


def translate(fn: Callable, kind: int = _ext.MOD_MASK, name: Optional[str] = None, device=None) -> Translation:
    """Trace a FlexAttention mask_mod (kind MOD_MASK) or score_mod (MOD_SCORE) and emit its flashbox
    mod. Raises TranslationError for what cannot be translated. device: where the traced index tensors
    live (the device of the tensors the mod captures, so that mixing them is legal; default cpu)."""
    fname = name or ("flashbox_mask_mod" if kind == _ext.MOD_MASK else "flashbox_score_mod")
    gm, args = trace(fn, kind, device)
    return _emit(gm, fn, kind, fname, args)


def _emit(gm, fn, kind: int, fname: str, sample_args) -> Translation:
    mask = kind == _ext.MOD_MASK
    what = "mask_mod" if mask else "score_mod"
    names = _captured_names(fn)

    # The dtype of every node, by running the graph once on the sample inputs.
    values = node_values(gm, sample_args)
    dtypes = {n: v.dtype for n, v in values.items() if isinstance(v, torch.Tensor)}

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    arg_names = (["b", "h", "q_idx", "kv_idx"] if mask else ["score", "b", "h", "q_idx", "kv_idx"])
    # expr[node] = (C expression or SSA name, kind) for traced values; const[node] = torch.Tensor for
    # values computed from captured tensors alone.
    expr = {}
    const = {}
    for n, a in zip(placeholders, arg_names):
        expr[n] = (a, "f" if a == "score" else "i")

    aux: List[AuxSpec] = []
    aux_by_id = {}
    lines: List[str] = []
    counter = [0]

    def aux_for(t: torch.Tensor) -> AuxSpec:
        key = id(t)
        if key in aux_by_id:
            return aux_by_id[key]
        if t.dim() < 1 or t.dim() > _ext.AUX_MAX_RANK:
            raise TranslationError(f"flashbox: the {what} indexes a captured tensor of rank {t.dim()} "
                                   f"(1..{_ext.AUX_MAX_RANK} are taken)")
        if len(aux) >= _ext.MOD_MAX_AUX:
            raise TranslationError(f"flashbox: the {what} reads more than {_ext.MOD_MAX_AUX} captured tensors")
        base = names.get(key)
        used = {a.name for a in aux}
        if not base or not _IDENT.match(base) or base in _RESERVED or base.startswith("fbx") or base in used:
            base = f"aux{len(aux)}"
        dt, bound = aux_dtype_of(t)
        spec = AuxSpec(base, dt, t.dim(), bound)
        aux.append(spec)
        aux_by_id[key] = spec
        return spec

    def operand(x, want: Optional[str] = None) -> Tuple[str, str]:
        """(C expression, kind) of an argument: a traced node, a captured one-element tensor, or a
        Python scalar."""
        if isinstance(x, torch.fx.Node):
            if x in expr:
                e, k = expr[x]
            elif x in const:
                t = const[x]
                if t.numel() != 1:
                    raise TranslationError(f"flashbox: the {what} uses a captured tensor of shape "
                                           f"{tuple(t.shape)} elementwise; only one-element tensors and "
                                           f"indexing by the mod's arguments are taken")
                k = _kind(t.dtype)
                e = _literal(t, k)
            else:
                raise TranslationError(f"flashbox: internal: node {x} has no value")
        elif isinstance(x, (bool, int, float)):
            k = _scalar_kind(x)
            e = _literal(x, k)
        else:
            raise TranslationError(f"flashbox: the {what} passes {x!r} where a value is needed")
        if want is not None and want != k:
            e = f"(({_CNAME[want]})({e}))" if not (want == "b") else f"(({e}) != 0)"
            k = want
        return e, k

    def pair(args, want: str) -> Tuple[str, str]:
        """The C expressions of a binary op's two arguments, both as kind `want`."""
        return operand(args[0], want)[0], operand(args[1], want)[0]

    def emit(n, e: str, k: str):
        counter[0] += 1
        v = f"v{counter[0]}"
        lines.append(f"  const {_CNAME[k]} {v} = {e};")
        expr[n] = (v, k)

    def out_kind(n) -> str:
        return _kind(dtypes[n]) if n in dtypes else "i"

    cmp_ops = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    bit_ops = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
    identity = {"alias", "detach", "clone", "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze",
                "expand", "lift_fresh_copy", "lift_fresh", "contiguous", "expand_as", "view_as",
                "broadcast_to", "flatten", "permute", "t", "transpose", "positive"}
    casts = {"_to_copy", "to", "type_as", "_to_dtype"}

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr":
            t = getattr(gm, n.target)
            const[n] = t
            continue
        if n.op == "output":
            out = n.args[0]
            if isinstance(out, (tuple, list)):
                if len(out) != 1:
                    raise TranslationError(f"flashbox: the {what} returns {len(out)} values, not one")
                out = out[0]
            e, k = operand(out)
            if mask:
                ret = e if k == "b" else f"(({e}) != 0)"
            else:
                ret = e if k == "f" else f"((float)({e}))"
            lines.append(f"  return {ret};")
            break
        if n.op != "call_function":
            raise TranslationError(f"flashbox: the {what} has a {n.op} node ({n.target}) that cannot be "
                                   f"translated")
        target = n.target
        packet = getattr(target, "overloadpacket", None)
        opname = packet.__name__ if packet is not None else getattr(target, "__name__", str(target))
        flat_nodes = []
        torch.fx.node.map_arg((n.args, n.kwargs), lambda a: flat_nodes.append(a))

        # Operations on captured tensors alone: evaluated now (x[0], x.max(), torch.tensor(5)).
        if all(a in const for a in flat_nodes):
            v = values.get(n)
            if not isinstance(v, torch.Tensor):
                raise TranslationError(f"flashbox: the {what}'s operation {opname} on captured values "
                                       f"gives {type(v).__name__}, not a tensor")
            const[n] = v
            continue

        args, kwargs = n.args, n.kwargs
        ok = out_kind(n)

        if opname in cmp_ops:
            (a, ka), (b_, kb) = operand(args[0]), operand(args[1])
            k = _promote(ka, kb)
            a, b_ = pair(args, k)
            emit(n, f"({a} {cmp_ops[opname]} {b_})", "b")
        elif opname in bit_ops:
            (a, ka), (b_, kb) = operand(args[0]), operand(args[1])
            if ok == "b":
                a, b_ = pair(args, "b")
                op = {"&": "&&", "|": "||", "^": "!="}[bit_ops[opname]]
                emit(n, f"({a} {op} {b_})", "b")
            elif ok == "i":
                a, b_ = pair(args, "i")
                emit(n, f"({a} {bit_ops[opname]} {b_})", "i")
            else:
                raise TranslationError(f"flashbox: the {what} applies {opname} to floats")
        elif opname == "bitwise_not":
            a, ka = operand(args[0])
            emit(n, f"(!{a})" if ka == "b" else f"(~{a})", ka)
        elif opname in ("logical_and", "logical_or", "logical_xor"):
            a, b_ = pair(args, "b")
            op = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}[opname]
            emit(n, f"({a} {op} {b_})", "b")
        elif opname == "logical_not":
            a, _ = operand(args[0], "b")
            emit(n, f"(!{a})", "b")
        elif opname in ("add", "sub", "rsub", "mul"):
            if ok == "b" and opname in ("add", "mul"):   # bool + bool is or, bool * bool is and
                a, b_ = pair(args, "b")
                emit(n, f"({a} {'||' if opname == 'add' else '&&'} {b_})", "b")
                continue
            if ok == "b":
                raise TranslationError(f"flashbox: the {what} subtracts booleans ({opname})")
            a, b_ = pair(args, ok)
            alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
            if alpha != 1:
                al, _ = operand(alpha, ok)
                b_ = f"({al} * {b_})"
            if opname == "add":
                emit(n, f"({a} + {b_})", ok)
            elif opname == "sub":
                emit(n, f"({a} - {b_})", ok)
            elif opname == "rsub":
                emit(n, f"({b_} - {a})", ok)
            else:
                emit(n, f"({a} * {b_})", ok)
        elif opname in ("div", "floor_divide", "true_divide"):
            mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
            if opname == "floor_divide":
                mode = "floor"
            if mode is None:   # true division: float
                a, b_ = pair(args, "f")
                emit(n, f"({a} / {b_})", "f")
            elif ok == "i":
                a, b_ = pair(args, "i")
                emit(n, f"fbx_{'floordiv' if mode == 'floor' else 'truncdiv'}({a}, {b_})", "i")
            elif ok == "f":
                a, b_ = pair(args, "f")
                emit(n, f"fbx_{'floorf' if mode == 'floor' else 'truncf'}({a} / {b_})", "f")
            else:
                raise TranslationError(f"flashbox: the {what} divides booleans")
        elif opname in ("remainder", "fmod"):
            if ok == "i":
                a, b_ = pair(args, "i")
                emit(n, f"fbx_{'mod' if opname == 'remainder' else 'fmod'}({a}, {b_})", "i")
            else:
                a, b_ = pair(args, "f")
                emit(n, f"fbx_{'pymodf' if opname == 'remainder' else 'fmodf'}({a}, {b_})", "f")
        elif opname in ("floor", "ceil", "trunc"):
            a, ka = operand(args[0])
            if ka != "f":
                expr[n] = (a, ka)          # integers are their own floor
            else:
                f = {"floor": "fbx_floorf({})", "ceil": "(-fbx_floorf(-{}))", "trunc": "fbx_truncf({})"}[opname]
                emit(n, f.format(a), "f")
        elif opname == "neg":
            a, _ = operand(args[0], ok)
            emit(n, f"(-{a})", ok)
        elif opname == "abs":
            a, ka = operand(args[0], ok)
            emit(n, a if ok == "b" else f"({a} < 0 ? -{a} : {a})", ok)
        elif opname in ("minimum", "maximum", "min", "max", "fmin", "fmax"):
            if len(args) != 2 or "dim" in kwargs:
                raise TranslationError(f"flashbox: the {what} uses the reduction {opname}; only the "
                                       f"elementwise two-argument form is taken")
            a, b_ = pair(args, ok)
            op = "<" if opname in ("minimum", "min", "fmin") else ">"
            emit(n, f"({a} {op} {b_} ? {a} : {b_})", ok)
        elif opname in ("clamp", "clamp_min", "clamp_max"):
            a, _ = operand(args[0], ok)
            lo = hi = None
            if opname == "clamp":
                lo = kwargs.get("min", args[1] if len(args) > 1 else None)
                hi = kwargs.get("max", args[2] if len(args) > 2 else None)
            elif opname == "clamp_min":
                lo = args[1]
            else:
                hi = args[1]
            e = a
            if lo is not None:
                lo_e, _ = operand(lo, ok)
                e = f"({e} < {lo_e} ? {lo_e} : {e})"
            if hi is not None:
                hi_e, _ = operand(hi, ok)
                e = f"({e} > {hi_e} ? {hi_e} : {e})"
            emit(n, e, ok)
        elif opname == "where":
            if len(args) != 3:
                raise TranslationError(f"flashbox: the {what} uses where with one argument (nonzero)")
            c, _ = operand(args[0], "b")
            a, _ = operand(args[1], ok)
            b_, _ = operand(args[2], ok)
            emit(n, f"({c} ? {a} : {b_})", ok)
        elif opname in identity:
            src = args[0]
            if src in const:
                raise TranslationError(f"flashbox: internal: {opname} of a captured tensor not folded")
            e, k = operand(src)
            expr[n] = (e, k)
        elif opname in casts or opname in ("ones_like", "zeros_like", "full_like", "new_ones", "new_zeros",
                                           "new_full", "scalar_tensor"):
            if opname in ("ones_like", "new_ones"):
                emit(n, _literal(1, ok), ok)
            elif opname in ("zeros_like", "new_zeros"):
                emit(n, _literal(0, ok), ok)
            elif opname in ("full_like", "new_full"):
                fill = args[1] if opname == "full_like" else args[2]
                e, _ = operand(fill, ok)
                emit(n, e, ok)
            elif opname == "scalar_tensor":
                e, _ = operand(args[0], ok)
                emit(n, e, ok)
            else:
                e, _ = operand(args[0], ok)
                expr[n] = (e, ok)
        elif opname == "index":
            base, indices = args[0], args[1]
            if base not in const:
                raise TranslationError(f"flashbox: the {what} indexes a computed value ({base}); only "
                                       f"captured tensors can be indexed")
            t = const[base]
            if any(i is None for i in indices) or len(indices) != t.dim():
                raise TranslationError(
                    f"flashbox: the {what} indexes a captured tensor of shape {tuple(t.shape)} with "
                    f"{len([i for i in indices if i is not None])} index(es); a mod reads one element: "
                    f"index every dimension (tensor[i0, ..., i{t.dim() - 1}])")
            spec = aux_for(t)
            parts = []
            for d, i in enumerate(indices):
                ie, ik = operand(i)
                if ik == "f":
                    raise TranslationError(f"flashbox: the {what} indexes {spec.name} with a float")
                if ik == "b":
                    raise TranslationError(f"flashbox: the {what} indexes {spec.name} with a boolean "
                                           f"(a mask index); index with integers")
                parts.append(f"fbx_wrap({ie}, aux.{spec.name}.size({d}))")
            k = _kind(t.dtype)
            ce = f"aux.{spec.name}({', '.join(parts)})"
            if k == "b":
                ce = f"(({ce}) != 0)"
            emit(n, ce, k)
        elif opname in ("select", "slice"):
            raise TranslationError(f"flashbox: the {what} takes a {opname} of a traced value; index "
                                   f"captured tensors by the mod's arguments instead")
        else:
            raise TranslationError(f"flashbox: the {what}'s operation {target} cannot be translated to a "
                                   f"flashbox mod (taken: comparisons, & | ^ ~, logical ops, + - * / // %, "
                                   f"abs, neg, floor/ceil/trunc, minimum/maximum, clamp, where, casts, indexing "
                                   f"captured tensors, constants)")

    used = {p.name for p in placeholders if p.users}
    ph = dict(zip(arg_names, placeholders))
    sig_args = "int b, int h, int q_idx, int kv_idx"
    if not mask:
        sig_args = "float score, " + sig_args
    sig = f"{'bool' if mask else 'float'} {fname}({sig_args}, const fbx::Aux &aux)" if aux else \
        f"{'bool' if mask else 'float'} {fname}({sig_args})"
    body = "\n".join(lines)
    source = (f"// Translated by flashbox.flex_translate from the FlexAttention {what} "
              f"{getattr(fn, '__qualname__', getattr(fn, '__name__', 'mod'))}.\n"
              f"{_HELPERS}{sig} {{\n"
              f"  (void)b; (void)h; (void)q_idx; (void)kv_idx;\n{body}\n}}\n")
    return Translation(kind, fname, source, aux, uses_b=ph["b"].name in used, uses_h=ph["h"].name in used)


# ---- compiled mods, cached per (kind, source, aux declarations) in this process -------------------

_compiled = {}
_compiled_lock = threading.Lock()


def compile_translation(tr: Translation, arch: int = 0) -> int:
    """flashbox_mod_create for a translation (the handle, an int), once per (kind, source, aux
    declarations, arch) in this process; the library also caches the CUBIN on disk. Handles live until
    the process ends."""
    key = (tr.kind, tr.function_name, tr.source, tr.aux_decls, arch)
    with _compiled_lock:
        h = _compiled.get(key)
        if h is None:
            h = _ext.mod_create(tr.kind, tr.source, tr.function_name, tr.aux_decls, arch)
            _compiled[key] = h
        return h


# ---- translations per Python function ------------------------------------------------------------

_translations = weakref.WeakKeyDictionary()
_translations_lock = threading.Lock()


def translate_cached(fn: Callable, kind: int = _ext.MOD_MASK, device=None) -> Translation:
    """translate(fn), once per function object (the captured tensors are bound by reference, so an
    in-place update of one is seen by later calls; rebinding a captured name is not)."""
    with _translations_lock:
        try:
            tr = _translations.get(fn)
        except TypeError:   # not weak-referenceable: translate every time
            return translate(fn, kind, device=device)
        if tr is None or tr.kind != kind:
            tr = translate(fn, kind, device=device)
            try:
                _translations[fn] = tr
            except TypeError:
                pass
        return tr
