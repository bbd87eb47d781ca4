"""pad_input / unpad_input with FlashAttention-2's signatures, written for flashbox's test runs.

unpad_input(x [batch, seqlen, ...], mask [batch, seqlen] bool) -> (x[mask] as [total, ...], indices of
the kept tokens in the flattened [batch * seqlen], cu_seqlens int32 [batch + 1], max_seqlen, the kept
lengths int32 [batch]); pad_input(x [total, ...], indices, batch, seqlen) puts them back, zeros elsewhere.
Both differentiable (plain indexing).
"""

import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    all_masks = attention_mask if unused_mask is None else (attention_mask + unused_mask).bool()
    seqlens = all_masks.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, max_seqlen, used


def pad_input(hidden_states, indices, batch, seqlen):
    out = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    out = out.index_put((indices,), hidden_states)
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
