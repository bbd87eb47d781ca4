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
is packed). Slot j of a layer's keys is position kv_offset + j, as in transformers' own masks. When
transformers hands the offsets as device tensors (a static cache keeps its length on the device, so
that a decode step compiles and captures), the mask is made with device ops over all kv_length slots
instead, the slots past the last query marked -1 (_slots_on_device): nothing is read on the host.

Decode steps (causal, at most _DECODE_MAX_QUERIES queries against more keys, a mask over every key slot,
CUDA) run on flashbox_attention_kvcache (custom op flashbox::hf_kvcache_attention) with cache_seqlens /
cache_leftpad computed on the device and tables_trusted = 1: no host read, no synchronisation, so a
static-cache decode step captures in a CUDA graph. Under torch.compile the varlen path (whose plan reads
the mask on the host) runs as one custom op (flashbox::hf_varlen_attention), and the mask function reads
nothing on the host, so torch.compile(fullgraph=True) traces the model without a graph break.

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

import collections
import functools
import inspect
import weakref
from typing import Optional

import torch

try:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"flashbox.integrations.transformers needs Hugging Face transformers with AttentionInterface "
                      f"and masking_utils.AttentionMaskInterface (4.53 or newer): {e}") from e
from transformers import masking_utils as _mu  # noqa: E402

from .. import kvcache as _kv
from ..flash_attn import _call, flash_attn_func, flash_attn_varlen_func
from ..ops import _on_device

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


def _tracing() -> bool:
    """Whether host reads of device values are off limits now: under torch.compile (dynamo would break the
    graph at them) or while the current CUDA stream is being captured into a CUDA graph (a host read there
    is an error)."""
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _known_pattern(mask_function):
    """_pattern, with transformers' two plain patterns recognised by identity first: under torch.compile
    the closures of and_masks are made inside the traced code, and an identity test is all dynamo needs
    for the plain causal / bidirectional masks of a decoder (Llama, Qwen2 and the like)."""
    if mask_function is None or mask_function is getattr(_mu, "causal_mask_function", None):
        return None, True
    if mask_function is getattr(_mu, "bidirectional_mask_function", None):
        return None, False
    return _pattern(mask_function)


def _slots_on_device(batch_size, q_length, kv_length, q_offset, kv_offset, causal, packed, attention_mask, device):
    """The key-slot tensor for offsets that are device tensors (a static cache's seen-token count, which
    transformers keeps on the device so that a decode step compiles and captures): int32 [B, kv_length],
    computed without reading anything on the host. As the host path's, but every slot is kept: a slot
    past the last query (no token yet) is -1, a padding slot 0, a token its packed sequence number + 1."""
    pos = torch.arange(kv_length, device=device) + kv_offset           # slot j is position kv_offset + j
    ids = torch.ones((batch_size, kv_length), dtype=torch.int32, device=device)
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise _unsupported(f"a {attention_mask.dim()}-d attention mask was given; flashbox takes a 2-d padding "
                               f"mask [batch, positions]")
        width = attention_mask.shape[1]
        at = pos.clamp(0, width - 1).unsqueeze(0).expand(attention_mask.shape[0], -1)
        tok = attention_mask.to(device=device, dtype=torch.bool).gather(1, at) & (pos < width)  # past it: no token
        ids = ids * tok.to(torch.int32)
    if packed is not None:
        width = packed.shape[1]
        at = pos.clamp(0, width - 1).unsqueeze(0).expand(packed.shape[0], -1)
        ids = ids * (packed.to(device).gather(1, at).to(torch.int32) + 1)
    if causal:
        ids = torch.where(pos < q_offset + q_length, ids, torch.full_like(ids, -1))
    return ids


def attention_mask(batch_size, q_length=None, kv_length=None, q_offset=0, kv_offset=0, mask_function=None,
                   attention_mask=None, cache_position=None, **kwargs):
    """transformers' mask interface for "flashbox": None or an int32 [B, n] key-slot tensor (module
    docstring). `attention_mask` is the 2-d padding mask over positions 0.. (True: a token)."""
    if q_length is None:  # transformers 4.5x passes cache_position instead of q_length / q_offset
        q_length, q_offset = cache_position.shape[0], cache_position[0]
    packed, causal = _known_pattern(mask_function)
    if isinstance(q_offset, torch.Tensor) or isinstance(kv_offset, torch.Tensor):
        # A static cache: its length lives on the device. Reading it here (int(q_offset)) would synchronise
        # the host at every decode step, break torch.compile's graph and fail under CUDA graph capture, so
        # the mask keeps every slot and marks the free ones -1 (_slots_on_device).
        device = kwargs.get("device") or (attention_mask.device if attention_mask is not None else q_offset.device
                                          if isinstance(q_offset, torch.Tensor) else kv_offset.device)
        return _slots_on_device(batch_size, int(q_length), int(kv_length), q_offset, kv_offset, causal, packed,
                                attention_mask, device)
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
    # bool(ids.all()) reads the mask on the host: skipped under torch.compile / capture, where an all-ones
    # mask goes to the attention function as it is (same result, through varlen)
    if packed is None and n == kv_length and not _tracing() and bool(ids.all()):
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
        if bool((ids < 0).any()):  # a static cache's free slots (-1, _slots_on_device): common to all rows
            ids = ids[:, :int((ids[0] >= 0).sum())]
        B, n = ids.shape
        self.n = n
        valid = ids > 0
        # Every slot holds a token of the row's one sequence (a static cache's prompt without padding):
        # the dense call on the layer's tensors as they are, no gather of q, k, v and no scatter of o.
        self.dense = n > 0 and bool(((ids == ids[:, :1]) & valid).all())
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
    if key.shape[2] < ids.shape[1]:
        raise ValueError(f"flashbox transformers backend: the mask covers {ids.shape[1]} key slots, the layer has "
                         f"{key.shape[2]} keys")
    p = _plan(ids, Tq, causal, window[0] >= 0)
    n = p.n   # the slots that exist: a static cache's free slots are cut off
    if causal and n < Tq:
        raise ValueError(f"flashbox transformers backend: the mask covers {n} key slots, the layer has {Tq} queries")
    if key.shape[2] > n:  # a static cache's slots past the last token
        key, value = key[:, :, :n], value[:, :, :n]
    if p.dense:  # causal: the queries are the last Tq slots (bottom-right; Tq <= n, checked above)
        return flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), window_size=window,
                               **opts)
    if p.idx_q.numel() == 0:  # no token at all: nothing to attend
        return query.new_zeros((B, Tq, Hq, D))
    dev = query.device   # the mask lives on the first layer's device; a model split over GPUs needs a copy
    idx_q, idx, cu_q, cu = (t.to(dev) for t in (p.idx_q, p.idx, p.cu_q, p.cu))
    q = _gather(query, idx_q, p.q_len)
    k, v = _gather(key, idx, n), _gather(value, idx, n)
    o = flash_attn_varlen_func(q, k, v, cu_q, cu, p.longest_q, p.longest, window_size=window, **opts)
    return o.new_zeros((B, Tq, Hq, o.shape[-1])).index_put((idx_q // p.q_len, idx_q % p.q_len), o)


# ---- decode steps: flashbox_attention_kvcache, no host read (CUDA graphs, torch.compile) ------------

# A layer call with at most this many queries against more keys (a decode step, or a few speculative
# tokens) runs on the KV-cache kernels when the mask covers every key slot.
_DECODE_MAX_QUERIES = 16


@torch.library.custom_op("flashbox::hf_kvcache_attention", mutates_args=())
def _kvcache_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                       cache_leftpad: torch.Tensor, learnable_sink: Optional[torch.Tensor], softmax_scale: float,
                       window_left: int, window_right: int, softcap: float) -> torch.Tensor:
    """q [B, Tq, Hq, D] against k_cache/v_cache [B, n, Hkv, D] (the layer's keys as the Cache returns them,
    transposed: a strided view, no copy), causal, keys cache_leftpad[b] .. cache_seqlens[b] - 1 of row b.
    tables_trusted = 1: the library reads nothing on the host (no copy of the tables, no stream
    synchronisation), which is what makes the call capturable in a CUDA graph. The tables come from
    _decode_tables, which keeps them within the cache (0 <= leftpad <= seqlens <= n) by construction."""
    p = _kv.prepare_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, cache_leftpad=cache_leftpad,
                            softmax_scale=softmax_scale, causal=True, window_size=(window_left, window_right),
                            softcap=softcap, tables_trusted=True)
    if learnable_sink is not None:
        sink = learnable_sink.to(device=q.device, dtype=torch.float32).contiguous()
        p.args.learnable_sink = sink.data_ptr()
        p._keep.append(sink)
    with _on_device(q):
        _call(p.call, who="flashbox transformers backend")
    return p.out


@_kvcache_attention.register_fake
def _kvcache_attention_fake(q, k_cache, v_cache, cache_seqlens, cache_leftpad, learnable_sink, softmax_scale,
                            window_left, window_right, softcap):
    return q.new_empty(q.shape)


# id(mask) -> (weak reference, version, whether every row's tokens are one run): the host's look at a
# mask in eager decode steps, made once per mask rather than once per layer
_RUNS = collections.OrderedDict()


def _decode_tables(ids):
    """cache_seqlens and cache_leftpad (int32 [B]) of a key-slot mask, and the rows it cannot express,
    all on the device: row b's slots that exist (>= 0) end at cache_seqlens[b] (its last query's slot + 1);
    its tokens (> 0) must be the run cache_leftpad[b] .. cache_seqlens[b] - 1 (left padding only), else
    the row is in `holes`."""
    n = ids.shape[1]
    valid = ids > 0
    seqlens = (ids >= 0).sum(-1, dtype=torch.int32)
    pos = torch.arange(n, device=ids.device, dtype=torch.int32)
    first = torch.where(valid, pos, torch.full_like(pos, n)).amin(-1)
    leftpad = torch.minimum(first, seqlens)
    count = valid.sum(-1, dtype=torch.int32)
    holes = (count > 0) & (seqlens - leftpad != count)
    return seqlens, leftpad, holes


def _rows_are_runs(ids, holes):
    """Eager only: whether no row has holes (read on the host once per mask)."""
    entry = _RUNS.get(id(ids))
    if entry is not None and entry[0]() is ids and entry[1] == ids._version:
        return entry[2]
    ok = not bool(holes.any())
    _RUNS[id(ids)] = (weakref.ref(ids), ids._version, ok)
    while len(_RUNS) > _PLANS_KEPT:
        _RUNS.popitem(last=False)
    return ok


def _takes_decode_path(query, key, ids, causal):
    """A decode step: causal, a few queries against more keys, a mask over every key slot, on CUDA with
    head dims the kernels take as they are (multiples of 8 up to 256; others go to varlen, which pads)."""
    Tq, n, D = query.shape[2], ids.shape[1], query.shape[3]
    return (causal and query.device.type == "cuda" and Tq <= _DECODE_MAX_QUERIES and Tq < n and key.shape[2] == n
            and D % 8 == 0 and D <= 256 and query.dtype in (torch.float16, torch.bfloat16))


def _decode(query, key, value, ids, tables, window, opts):
    """A decode step on flashbox_attention_kvcache with the tables computed on the device: nothing is read
    on the host, so the step captures in a CUDA graph and traces in torch.compile as one op. A row whose
    tokens are not one run (_decode_tables) goes to varlen in eager mode (_masked); where the host cannot
    look (capture, compile) its output is NaN, never a plausible wrong answer."""
    seqlens, leftpad, holes = tables
    scale = opts["softmax_scale"]
    o = torch.ops.flashbox.hf_kvcache_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                                seqlens, leftpad, opts["learnable_sink"],
                                                0.0 if scale is None else float(scale), int(window[0]),
                                                int(window[1]), float(opts["softcap"]))
    return torch.where(holes[:, None, None, None], torch.full_like(o, float("nan")), o)


# ---- padded batches under torch.compile: the varlen path as one opaque op -------------------------

@torch.library.custom_op("flashbox::hf_varlen_attention", mutates_args=())
def _varlen_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, ids: torch.Tensor,
                      learnable_sink: Optional[torch.Tensor], softmax_scale: float, causal: bool, window_left: int,
                      window_right: int, softcap: float) -> torch.Tensor:
    """_varlen_from_mask as a custom op: making its plan reads the mask on the host (nonzero, max), which
    dynamo cannot trace; inside an op it is opaque, so a compiled model has no graph break there. Forward
    only (no autograd formula: a backward through it raises)."""
    opts = dict(softmax_scale=softmax_scale or None, causal=causal, softcap=softcap, learnable_sink=learnable_sink)
    return _varlen_from_mask(query, key, value, ids, (window_left, window_right), opts).contiguous()


@_varlen_attention.register_fake
def _varlen_attention_fake(query, key, value, ids, learnable_sink, softmax_scale, causal, window_left, window_right,
                           softcap):
    B, Hq, Tq, D = query.shape
    return query.new_empty((B, Tq, Hq, D))


def _masked(query, key, value, ids, window, opts):
    """Attention under a key-slot mask: the decode path, else varlen (as one op under torch.compile)."""
    if _takes_decode_path(query, key, ids, opts["causal"]):
        tables = _decode_tables(ids)
        # eager: a mask with padding inside a row (right padding before the new tokens) goes to varlen,
        # which removes the padding; under capture / compile the host cannot look (see _decode)
        if _tracing() or _rows_are_runs(ids, tables[2]):
            return _decode(query, key, value, ids, tables, window, opts)
    if torch.compiler.is_compiling():
        scale = opts["softmax_scale"]
        return torch.ops.flashbox.hf_varlen_attention(query, key, value, ids, opts["learnable_sink"],
                                                      0.0 if scale is None else float(scale), opts["causal"],
                                                      int(window[0]), int(window[1]), float(opts["softcap"]))
    return _varlen_from_mask(query, key, value, ids, window, opts)


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
    return _masked(query, key, value, attention_mask, window, opts), None


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
