"""flashbox.flex_translate: FlexAttention mask_mods (Python, elementwise torch) to flashbox mods (C++).

Each mod is translated, its source compiled by a host C++ compiler against a host stand-in for
fbx::Aux (the emitted source has no CUDA keyword), and the compiled mod's truth table over a
(b, h, q_idx, kv_idx) grid compared with the Python mod's own on the same grid; the same source is
compiled by NVRTC through flashbox_mod_create (no GPU needed). Needs torch >= 1.13 (make_fx); skips,
with the reason, without torch, a C++ compiler, libflashbox or NVRTC.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="the mod translator needs torch >= 1.13 (make_fx)")
if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (1, 13):   # 1.13.0a0 (Debian's) counts
    pytest.skip(f"the mod translator needs torch >= 1.13 (make_fx), this is {torch.__version__}",
                allow_module_level=True)

import pysupport as S  # noqa: E402
from pysupport import _lib  # noqa: E402
from flashbox import _ext  # noqa: E402
from flashbox import flex_translate as ft  # noqa: E402

B, H, T = 2, 3, 13

_ELEM = {_ext.AuxDType.INT32: ("int", "int32"), _ext.AuxDType.INT64: ("long long", "int64"),
         _ext.AuxDType.UINT8: ("unsigned char", "uint8"), _ext.AuxDType.FLOAT32: ("float", "float32")}

_HOST_PRELUDE = r"""
#include <cstdio>
namespace fbx {
template <class T, int R> struct Tensor {
  const T *data;
  long long sizes[R];
  long long strides[R];
  long long size(int d) const { return sizes[d]; }
  template <class... I> T operator()(I... i) const {
    const long long idx[R] = {static_cast<long long>(i)...};
    long long off = 0;
    for (int d = 0; d < R; ++d) {
      if (static_cast<unsigned long long>(idx[d]) >= static_cast<unsigned long long>(sizes[d])) return T(0);
      off += idx[d] * strides[d];
    }
    return data[off];
  }
};
"""


def _cxx():
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        S.skip("no host C++ compiler to run the translated mods with")
    return cxx


def host_truth_table(tr: ft.Translation, shape=(B, H, T, T)) -> str:
    """The translated mod compiled by the host compiler, evaluated on the grid: a '0'/'1' string in
    (b, h, q, kv) order."""
    lines = [_HOST_PRELUDE, "struct Aux {"]
    for a in tr.aux:
        lines.append(f"  Tensor<{_ELEM[a.dtype][0]}, {a.rank}> {a.name};")
    lines += ["};", "}  // namespace fbx", tr.source]
    inits = []
    for a in tr.aux:
        t = a.tensor.contiguous().cpu()
        ctype = _ELEM[a.dtype][0]
        vals = ", ".join(repr(float(x)) + "f" if a.dtype == _ext.AuxDType.FLOAT32 else str(int(x))
                         for x in t.reshape(-1).tolist()) or "0"
        lines.append(f"static const {ctype} data_{a.name}[] = {{{vals}}};")
        sizes = ", ".join(str(s) for s in t.shape)
        strides = ", ".join(str(s) for s in t.stride())
        inits.append(f"{{data_{a.name}, {{{sizes}}}, {{{strides}}}}}")
    call = f"{tr.function_name}(b, h, q, kv{', aux' if tr.aux else ''})"
    lines += ["int main() {", f"  const fbx::Aux aux{{{', '.join(inits)}}};" if tr.aux else "",
              f"  for (int b = 0; b < {shape[0]}; ++b) for (int h = 0; h < {shape[1]}; ++h)",
              f"  for (int q = 0; q < {shape[2]}; ++q) for (int kv = 0; kv < {shape[3]}; ++kv)",
              f"    std::putchar({call} ? '1' : '0');", "  return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "mod.cpp"), os.path.join(tmp, "mod")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        r = subprocess.run([_cxx(), "-std=c++17", "-O0", src, "-o", exe], capture_output=True, text=True)
        assert r.returncode == 0, f"the translated source does not compile on the host:\n{r.stderr}\n{tr.source}"
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout


def python_truth_table(mod, shape=(B, H, T, T)) -> str:
    """The Python mod on the grid, FlexAttention-style: broadcast index tensors."""
    b = torch.arange(shape[0]).view(-1, 1, 1, 1)
    h = torch.arange(shape[1]).view(1, -1, 1, 1)
    q = torch.arange(shape[2]).view(1, 1, -1, 1)
    kv = torch.arange(shape[3]).view(1, 1, 1, -1)
    out = torch.as_tensor(mod(b, h, q, kv)).to(torch.bool).expand(*shape)
    return "".join("1" if x else "0" for x in out.reshape(-1).tolist())


# ---- the mods -------------------------------------------------------------------------------------

g = torch.Generator().manual_seed(0)
doc_ids = torch.sort(torch.randint(0, 4, (B, T), generator=g), dim=1).values.to(torch.int32)
prefix = torch.tensor([3, 7], dtype=torch.int64)
tree = torch.rand((T, T), generator=g) < 0.4          # an ancestor bitmap (bool, 2-D)
bias_tab = torch.rand((H, 2 * T), generator=g)         # a float table
offsets = torch.tensor([5], dtype=torch.int32)         # a one-element tensor: a literal


def doc_causal(b, h, q_idx, kv_idx):
    return (doc_ids[b, q_idx] == doc_ids[b, kv_idx]) & (q_idx >= kv_idx)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < prefix[b]) | (q_idx >= kv_idx)


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx >= 0) & (q_idx - kv_idx <= 4)


def chunked(b, h, q_idx, kv_idx):
    return (q_idx // 4) == (kv_idx // 4)


def tree_mask(b, h, q_idx, kv_idx):
    return tree[q_idx, kv_idx] | (q_idx == kv_idx)


def arithmetic(b, h, q_idx, kv_idx):
    d = torch.where(q_idx > kv_idx, q_idx - kv_idx, (kv_idx - q_idx) * 2)
    m = torch.maximum(torch.minimum(d, q_idx + 1), torch.abs(h - 2))
    return ((m % 3) != 1) ^ ((-q_idx) % 5 == 0) | ~((kv_idx + h) % 4 > 1)


def per_head_float(b, h, q_idx, kv_idx):
    return bias_tab[h, q_idx + kv_idx] > 0.5


def negative_index(b, h, q_idx, kv_idx):   # doc_ids[b, q - 1]: Python wraps -1 to the last element
    return doc_ids[b, q_idx - 1] == doc_ids[b, kv_idx]


def literal_and_logical(b, h, q_idx, kv_idx):
    return torch.logical_and(torch.logical_not(q_idx < offsets[0]), torch.logical_or(kv_idx <= q_idx, b == 1))


def clamp_and_casts(b, h, q_idx, kv_idx):
    x = torch.clamp(q_idx - kv_idx, min=-2, max=3).to(torch.float32) / 2.0
    return (x.floor() >= 0) & ((kv_idx % 3).bool() | (q_idx.to(torch.int32) - 1 < kv_idx))


def folded_constant(b, h, q_idx, kv_idx):   # an operation on a captured tensor alone: evaluated once
    return (q_idx.float() + bias_tab.sum(dim=0)[kv_idx]) > 14.0


MODS = [folded_constant, doc_causal, prefix_lm, sliding_window, chunked, tree_mask, arithmetic, per_head_float, negative_index,
        literal_and_logical, clamp_and_casts]


@pytest.mark.parametrize("mod", MODS, ids=[m.__name__ for m in MODS])
def test_translated_mod_matches_python(mod):
    tr = ft.translate(mod)
    assert host_truth_table(tr) == python_truth_table(mod), tr.source


def test_aux_names_and_broadcast():
    tr = ft.translate(doc_causal)
    assert [(a.name, a.dtype, a.rank) for a in tr.aux] == [("doc_ids", _ext.AuxDType.INT32, 2)]
    assert tr.aux[0].tensor is doc_ids          # bound by reference: in-place updates are seen
    assert tr.uses_b and not tr.uses_h
    tr = ft.translate(sliding_window)
    assert not tr.aux and not tr.uses_b and not tr.uses_h
    tr = ft.translate(tree_mask)
    assert [(a.name, a.dtype, a.rank) for a in tr.aux] == [("tree", _ext.AuxDType.UINT8, 2)]
    tr = ft.translate(literal_and_logical)
    assert not tr.aux and "5LL" in tr.source    # a one-element captured tensor is a literal


def test_a_wrong_translation_is_caught():
    """The comparison can fail: a deliberately wrong source gives a different truth table."""
    tr = ft.translate(sliding_window)
    tr.source = tr.source.replace("<= 4LL", "< 4LL")
    assert host_truth_table(tr) != python_truth_table(sliding_window)


def _untranslatable(fn, match):
    with pytest.raises(ft.TranslationError, match=match):
        ft.translate(fn)


def test_errors_name_what_could_not_be_translated():
    _untranslatable(lambda b, h, q, kv: torch.sin(q.float()) > 0, "sin")
    _untranslatable(lambda b, h, q, kv: tree[q] .sum() > 0, "index")   # partial indexing: a row, not an element

    def control_flow(b, h, q, kv):
        if q > kv:
            return q >= 0
        return q < 0
    _untranslatable(control_flow, "control flow")
    _untranslatable(lambda b, h, q, kv: torch.stack([q, kv]).amax(0) > 3, "stack")
    big = torch.zeros((2, 2, 2, 2, 2), dtype=torch.int32)
    _untranslatable(lambda b, h, q, kv: big[b, h, q, kv, kv] == 0, "rank 5")


def test_noop_mask_needs_no_mod():
    def noop_mask(b, h, q_idx, kv_idx):
        return q_idx.new_ones((), dtype=torch.bool)
    assert ft.is_noop_mask(noop_mask) and ft.is_noop_mask(None) and not ft.is_noop_mask(doc_causal)


def _create_or_skip(tr):
    S.require_symbol("flashbox_version")
    try:
        return ft.compile_translation(tr)
    except AttributeError as e:
        S.skip(f"the library has no flashbox_mod_create: {e}")
    except _lib.FlashboxError as e:
        if e.code == _lib.ErrorCode.UNSUPPORTED_IMPL:
            S.skip(f"libflashbox cannot compile mods here (no NVRTC): {e.message}")
        raise


@pytest.mark.parametrize("mod", MODS, ids=[m.__name__ for m in MODS])
def test_nvrtc_compiles_the_translation(mod):
    tr = ft.translate(mod)
    h = _create_or_skip(tr)
    assert h
    assert ft.compile_translation(tr) == h     # cached in-process per (source, aux declarations)
    info = _ext.mod_get_info(h)
    assert info.num_archs >= 1 and info.cubin_bytes[0] > 0


def test_nvrtc_compiles_a_score_mod():
    tr = ft.translate(lambda score, b, h, q, kv: torch.where(q >= kv, score + bias_tab[h, q - kv], score * 0.5),
                      kind=_ext.MOD_SCORE)
    assert tr.kind == _ext.MOD_SCORE and [a.name for a in tr.aux] == ["bias_tab"]
    _create_or_skip(tr)
