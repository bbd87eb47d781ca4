"""flashbox as a Hugging Face transformers attention backend: attn_implementation="flashbox".

    import flashbox.integrations.transformers            # registers "flashbox" (import once)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="flashbox")

Importing registers two functions under the name "flashbox":
  * `attention_forward` in transformers' AttentionInterface (ALL_ATTENTION_FUNCTIONS): the layer's
    attention, called as fn(module, query, key, value, attention_mask, dropout, scaling,
    sliding_window, softcap, **kwargs) with query [B, Hq, Tq, D], key/value [B, Hkv, Tk, D] (the full
    states from the Cache object during generate()); it returns ([B, Tq, Hq, D], None);
  * `attention_mask` in AttentionMaskInterface (ALL_MASK_ATTENTION_FUNCTIONS): what the model's
    create_*_mask hands the layers. Without an entry there, transformers gives an unregistered
    backend no mask at all (padding would be lost), so this one is required.

What runs on flashbox (flashbox.flash_attn's flash_attn_func / flash_attn_varlen_func, the custom ops with
autograd): causal and bidirectional attention; GQA/MQA (fewer key/value heads); sliding windows
(`sliding_window` w keeps the w most recent keys, query included, as transformers' masks do: window
(w - 1, 0)); softcap (Gemma 2); learnable sinks (gpt-oss's `s_aux`, differentiable); padded batches and
packed sequences through the varlen path (the padding tokens are removed, cu_seqlens built, nothing is
computed for them; their output rows are 0); FlashAttention's `cu_seq_lens_q/k`, `max_length_q/k`
kwargs (DataCollatorWithFlattening); dynamic and static caches (a static cache's unused slots are cut
off). Everything else raises NotImplementedError naming what is missing, never a wrong answer:
dropout > 0, head_mask, a 4-d or block mask handed in by the caller, mask patterns other than causal /
bidirectional / sliding window / padding / packing (chunked attention, or_mask/and_mask functions,
bidirectional blocks of image tokens, bidirectional sliding windows), float32 attention on CUDA (the
kernels take fp16/bf16) and a sliding window over a padding mask with holes inside a sequence.

The mask this backend's mask function returns: None (no padding, every key slot holds a token: the
dense path), or an int32 [B, n] tensor over the key slots that exist (n <= kv_length), 0 for a
padding slot and, for a token, the number of its packed sequence in the row plus one (1 when nothing
is packed). Slot j of a layer's keys is position kv_offset + j, as in transformers' own masks.

Transformers' "flash" heuristic: recent transformers (utils.generic.is_flash_attention_requested) treat
every implementation name containing "flash" as a FlashAttention kernel: at model construction they try
to preload a kernel of that name (a failure for "flashbox"), and models that list
`_compatible_flash_implementations` (gpt-oss) would swap the name for their own kernel. `register()`
therefore wraps PreTrainedModel._check_and_adjust_attn_implementation so that a name registered here is
accepted as it is (the only check it skips is that preload). Model code that branches on the heuristic
then uses FlashAttention's conventions (2-d padding masks, cu_seq_lens kwargs), which this backend takes.

The interface followed is huggingface/transformers' masking_utils.py at commit
00c4411cbe15d4c56d54d3b56d4d171e9c289dac (mask functions called with q_length / q_offset; the older
cache_position form of 4.5x is accepted too), with the 5.x modeling_utils.py and
modeling_flash_attention_utils.py (FlashAttention 4 era) for the attention interface, the "flash" name
heuristic and the kwargs (s_aux, cu_seq_lens_q/k, max_length_q/k), and models/gpt_oss (s_aux) as stored
at 00d4b3d2142cb4ced2f51b90614b5d26bc045015.
"""

from __future__ import annotations

import collections
import functools
import inspect
import weakref

import torch

try:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"flashbox.integrations.transformers needs Hugging Face transformers with AttentionInterface "
                      f"and masking_utils.AttentionMaskInterface (4.53 or newer): {e}") from e

from ..flash_attn import flash_attn_func, flash_attn_varlen_func

__all__ = ["NAME", "attention_forward", "attention_mask", "register"]

NAME = "flashbox"


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"flashbox transformers backend: {what}")


# ---- the mask function --------------------------------------------------------------------------

# Building blocks of transformers' mask functions (masking_utils), by the function that makes them.
_COMBINE_AND = "and_masks"
_PATTERNS_OK = {"causal_mask_function", "bidirectional_mask_function", "sliding_window_overlay",
                "padding_mask_function", "packed_sequence_mask_function"}
_PATTERNS_NAMED = {
    "or_masks": "a union of mask patterns (or_mask_function, e.g. bidirectional image-token blocks)",
    "chunked_overlay": "chunked attention (Llama 4's attention_chunk_size)",
    "blockwise_overlay": "bidirectional blocks (block_sequence_ids)",
    "sliding_window_bidirectional_overlay": "a bidirectional sliding window",
}


def _maker(fn) -> str:
    """The name of the function that built `fn` ("sliding_window_overlay" for its inner_mask closure)."""
    return getattr(fn, "__qualname__", repr(fn)).split(".<locals>")[0]


def _closure(fn) -> dict:
    cells = getattr(fn, "__closure__", None) or ()
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in cells)))


def _pattern(mask_function):
    """Checks the mask pattern is one this backend expresses. Returns (packed, causal): the packed-sequence
    ids tensor [B, T] when the pattern packs sequences (transformers' find_packed_sequence_indices) or
    None, and whether the pattern is causal."""
    if mask_function is None:  # transformers' default mask_function is the causal one
        return None, True
    maker = _maker(mask_function)
    if maker == _COMBINE_AND:
        found = [_pattern(f) for f in _closure(mask_function).get("mask_functions", ())]
        packed = [p for p, _ in found if p is not None]
        return (packed[0] if packed else None), any(c for _, c in found)
    if maker in _PATTERNS_OK:
        if maker == "packed_sequence_mask_function":
            return _closure(mask_function)["packed_sequence_mask"], False
        return None, maker == "causal_mask_function"
    what = _PATTERNS_NAMED.get(maker, f"the mask pattern {maker!r} (a custom mask function)")
    raise _unsupported(f"{what} is not supported; flashbox takes causal or bidirectional attention, a sliding "
                       f"window, padding and packed sequences. Use attn_implementation='sdpa' for this model.")


def attention_mask(batch_size, q_length=None, kv_length=None, q_offset=0, kv_offset=0, mask_function=None,
                   attention_mask=None, cache_position=None, **kwargs):
    """transformers' mask interface for "flashbox": None or an int32 [B, n] key-slot tensor (module
    docstring). `attention_mask` is the 2-d padding mask over positions 0.. (True: a token)."""
    if q_length is None:  # transformers 4.5x passes cache_position instead of q_length / q_offset
        q_length, q_offset = cache_position.shape[0], cache_position[0]
    packed, causal = _pattern(mask_function)
    q_offset, kv_offset, kv_length = int(q_offset), int(kv_offset), int(kv_length)
    n = kv_length
    if causal:  # key slots past the last query's position hold no token yet (a static cache's free slots)
        n = max(0, min(kv_length, q_offset + q_length - kv_offset))
    ids = None
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise _unsupported(f"a {attention_mask.dim()}-d attention mask was given; flashbox takes a 2-d padding "
                               f"mask [batch, positions]")
        valid = attention_mask[:, kv_offset:kv_offset + n].to(torch.bool)
        if valid.shape[1] < n:  # positions the 2-d mask does not cover are not tokens (as in sdpa_mask)
            valid = torch.nn.functional.pad(valid, (0, n - valid.shape[1]), value=False)
        ids = valid.to(torch.int32)
    if packed is not None:
        seq = packed[:, kv_offset:kv_offset + n].to(torch.int32) + 1
        ids = seq if ids is None else ids * seq
    if ids is None:
        if n == kv_length:
            return None
        device = kwargs.get("device") or (cache_position.device if cache_position is not None else "cpu")
        return torch.ones((batch_size, n), dtype=torch.int32, device=device)
    if packed is None and n == kv_length and bool(ids.all()):
        return None
    return ids


# ---- the attention function ---------------------------------------------------------------------

def _segments(ids):
    """Flat token indices of the nonzero slots of ids [B, n] (row-major), cu_seqlens over runs of equal
    (row, id) and the longest run: one sequence per packed sequence of each row."""
    B, n = ids.shape
    flat = ids.reshape(-1)
    idx = torch.nonzero(flat, as_tuple=False).flatten()
    if idx.numel() == 0:
        return idx, None, 0
    key = (idx // n) * (int(flat.max()) + 1) + flat[idx]
    new = torch.ones_like(key, dtype=torch.bool)
    new[1:] = key[1:] != key[:-1]
    starts = torch.nonzero(new, as_tuple=False).flatten()
    cu = torch.cat([starts, starts.new_tensor([idx.numel()])]).to(torch.int32)
    return idx, cu, int((cu[1:] - cu[:-1]).max())


def _rows(valid):
    """Flat token indices of valid [B, n], cu_seqlens with one (possibly empty) sequence per row, longest."""
    lengths = valid.sum(-1, dtype=torch.int32)
    idx = torch.nonzero(valid.reshape(-1), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))
    return idx, cu, int(lengths.max())


def _gather(x, idx, n):
    """Rows idx (flat over [B, n]) of x [B, H, n, D] as [len(idx), H, D]: one gather, differentiable."""
    return x[idx // n, :, idx % n]


def _has_holes(valid):
    """Whether some row's tokens are not one contiguous run (padding between tokens)."""
    n = valid.shape[1]
    pos = torch.arange(n, device=valid.device)
    first = torch.where(valid, pos, n).min(-1).values
    last = torch.where(valid, pos, -1).max(-1).values
    count = valid.sum(-1)
    return bool(((count > 0) & (last - first + 1 != count)).any())


class _Plan:
    """What varlen needs from one mask: the flat token indices of the keys and the queries, cu_seqlens and
    the longest sequence of each. Making it reads values on the host (nonzero, max), so it is made once
    per mask tensor and query length and reused by every layer that gets the same mask."""

    def __init__(self, ids, Tq, causal, window):
        B, n = ids.shape
        valid = ids != 0
        if window and _has_holes(valid):
            raise _unsupported("a sliding window with padding between a sequence's tokens: the window would count "
                               "positions differently from transformers' masks; pad on the left or the right only")
        if causal and Tq == n:  # queries and keys are the same slots: one sequence per packed sequence of a row
            self.idx, self.cu, self.longest = _segments(ids)
            self.idx_q, self.cu_q, self.longest_q, self.q_len = self.idx, self.cu, self.longest, n
            return
        top = ids.max(-1, keepdim=True).values   # one sequence per row
        if bool((torch.where(valid, ids, top) != top).any()):
            raise _unsupported("packed sequences with queries and keys of different lengths (a cache)")
        self.idx, self.cu, self.longest = _rows(valid)
        # causal (generation with a cache): the queries are the last Tq key slots; otherwise (cross-attention)
        # the mask says nothing of the queries, and every query is kept
        valid_q = valid[:, n - Tq:] if causal else torch.ones((B, Tq), dtype=torch.bool, device=valid.device)
        self.idx_q, self.cu_q, self.longest_q = _rows(valid_q)
        self.q_len = Tq


# id(mask) -> (weak reference to the mask, its version counter, {(Tq, causal, window): _Plan}); the
# reference and the version (bumped by any in-place change) make sure a plan is only used for the
# very mask, unchanged, that it was made from.
_PLANS = collections.OrderedDict()
_PLANS_KEPT = 8   # a forward has a mask or two (full, sliding); older ones are dropped


def _plan(mask, Tq, causal, window):
    entry = _PLANS.get(id(mask))
    if entry is None or entry[0]() is not mask or entry[1] != mask._version:
        entry = (weakref.ref(mask), mask._version, {})
        _PLANS[id(mask)] = entry
        while len(_PLANS) > _PLANS_KEPT:
            _PLANS.popitem(last=False)
    key = (Tq, causal, window)
    if key not in entry[2]:
        entry[2][key] = _Plan(mask.to(torch.int32), Tq, causal, window)
    return entry[2][key]


def _varlen_from_mask(query, key, value, ids, window, opts):
    """Attention over the tokens the key-slot mask `ids` names (module docstring), through varlen."""
    B, Hq, Tq, D = query.shape
    causal = opts["causal"]
    if ids.dim() != 2 or ids.shape[0] != B:
        raise _unsupported(f"a mask of shape {tuple(ids.shape)} was given; flashbox takes the 2-d [batch, key slots] "
                           f"mask its own mask function makes (batch {B})")
    n = ids.shape[1]
    if key.shape[2] < n or (causal and n < Tq):
        raise ValueError(f"flashbox transformers backend: the mask covers {n} key slots, the layer has "
                         f"{key.shape[2]} keys and {Tq} queries")
    if key.shape[2] > n:  # a static cache's slots past the last token
        key, value = key[:, :, :n], value[:, :, :n]
    p = _plan(ids, Tq, causal, window[0] >= 0)
    if p.idx_q.numel() == 0:  # no token at all: nothing to attend
        return query.new_zeros((B, Tq, Hq, D))
    dev = query.device   # the mask lives on the first layer's device; a model split over GPUs needs a copy
    idx_q, idx, cu_q, cu = (t.to(dev) for t in (p.idx_q, p.idx, p.cu_q, p.cu))
    q = _gather(query, idx_q, p.q_len)
    k, v = _gather(key, idx, n), _gather(value, idx, n)
    o = flash_attn_varlen_func(q, k, v, cu_q, cu, p.longest_q, p.longest, window_size=window, **opts)
    return o.new_zeros((B, Tq, Hq, o.shape[-1])).index_put((idx_q // p.q_len, idx_q % p.q_len), o)


def _explicit_varlen(query, key, value, kwargs, window, opts):
    """FlashAttention's kwargs path: tokens of all rows flattened, sequences given by cu_seq_lens_q/k."""
    B, Hq, Tq, D = query.shape
    cu_q = kwargs["cu_seq_lens_q"].to(device=query.device, dtype=torch.int32)
    cu_k = kwargs["cu_seq_lens_k"].to(device=query.device, dtype=torch.int32)
    q = query.transpose(1, 2).reshape(B * Tq, Hq, D)
    k = key.transpose(1, 2).reshape(-1, key.shape[1], key.shape[3])
    v = value.transpose(1, 2).reshape(-1, value.shape[1], value.shape[3])
    o = flash_attn_varlen_func(q, k, v, cu_q, cu_k, int(kwargs["max_length_q"]), int(kwargs["max_length_k"]),
                               window_size=window, **opts)
    return o.view(B, Tq, Hq, o.shape[-1])


def _dtype_for_kernels(query, key, value):
    """The CUDA kernels take fp16/bf16; fp32 states under autocast (e.g. PEFT's fp32 layer norms) are cast
    to the autocast dtype, as transformers' FlashAttention backend does; plain fp32 is refused."""
    if query.device.type != "cuda" or query.dtype != torch.float32:
        return query, key, value
    if torch.is_autocast_enabled("cuda"):
        dt = torch.get_autocast_dtype("cuda")
        return query.to(dt), key.to(dt), value.to(dt)
    raise _unsupported("float32 attention on CUDA (flashbox's CUDA kernels take float16 or bfloat16); load the "
                       "model with dtype=torch.bfloat16 or torch.float16, or run it under torch.autocast")


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, **kwargs):
    """transformers' attention interface for "flashbox" (module docstring). Returns (attn_output
    [B, Tq, Hq, D], None): flashbox never forms the attention weights."""
    if dropout and float(dropout) > 0.0:
        raise _unsupported(f"attention dropout (p = {dropout}) in training: flashbox has no dropout; set the "
                           f"config's attention_dropout to 0.0 or call model.eval()")
    if kwargs.get("head_mask") is not None:
        raise _unsupported("head_mask")
    is_causal = kwargs.pop("is_causal", None)
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    window = (-1, -1)
    if sliding_window is not None:
        if not is_causal:
            raise _unsupported("a sliding window without causal masking (a bidirectional sliding window)")
        window = (int(sliding_window) - 1, 0)
    if query.shape[-1] != value.shape[-1]:
        raise _unsupported(f"a value head dim ({value.shape[-1]}) other than the query's ({query.shape[-1]})")
    sink = kwargs.get("s_aux")
    if sink is None:
        sink = kwargs.get("learnable_sink")
    query, key, value = _dtype_for_kernels(query, key, value)
    opts = dict(softmax_scale=scaling, causal=bool(is_causal), softcap=float(softcap or 0.0), learnable_sink=sink)

    if attention_mask is None:
        if all(kwargs.get(n) is not None for n in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")):
            return _explicit_varlen(query, key, value, kwargs, window, opts), None
        out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), window_size=window,
                              **opts)
        return out, None
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        shape = tuple(attention_mask.shape) if hasattr(attention_mask, "shape") else type(attention_mask).__name__
        raise _unsupported(f"an attention mask of shape {shape} (a 4-d, float or block mask made outside this "
                           f"backend's mask function); flashbox takes causal / sliding-window attention with a 2-d "
                           f"padding mask, which `import flashbox.integrations.transformers` arranges")
    return _varlen_from_mask(query, key, value, attention_mask, window, opts), None


# ---- registration -------------------------------------------------------------------------------

_ACCEPTED_NAMES = set()


def _accept_name_as_is(name: str) -> None:
    """See the module docstring ("Transformers' "flash" heuristic")."""
    try:
        from transformers import modeling_utils
        from transformers.utils.generic import is_flash_attention_requested
        flashy = is_flash_attention_requested(requested_attention_implementation=name)
    except (ImportError, TypeError):  # an older transformers without the heuristic: nothing to do
        return
    cls = modeling_utils.PreTrainedModel
    current = cls.__dict__.get("_check_and_adjust_attn_implementation")
    if not flashy or not inspect.isfunction(current):
        return
    _ACCEPTED_NAMES.add(name)
    if getattr(current, "_flashbox_wrapper", False):
        return

    @functools.wraps(current)
    def _check_and_adjust_attn_implementation(self, attn_implementation, *args, **kwargs):
        if isinstance(attn_implementation, str) and attn_implementation in _ACCEPTED_NAMES:
            return attn_implementation
        return current(self, attn_implementation, *args, **kwargs)

    _check_and_adjust_attn_implementation._flashbox_wrapper = True
    cls._check_and_adjust_attn_implementation = _check_and_adjust_attn_implementation


def register(name: str = NAME) -> None:
    """Registers the backend under `name` (done for "flashbox" on import; idempotent)."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    _accept_name_as_is(name)


register()
