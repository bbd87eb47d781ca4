"""The private names FA2's tests import from flash_attn_interface."""

from . import *  # noqa: F401,F403
from . import flash_attn_with_kvcache  # noqa: F401

USE_TRITON_ROCM = False


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    # Only used by the tests to decode dropout masks; flashbox has no dropout.
    return 64


def _flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                               softmax_scale, causal, window_size_left=-1, window_size_right=-1, softcap=0.0,
                               alibi_slopes=None, return_softmax=False, block_table=None, leftpad_k=None,
                               seqused_k=None, zero_tensors=False, num_splits=0):
    """FA2's private varlen forward, for the paged-KV case its tests call (block_table set): returns
    (out, softmax_lse, None, None). Without a block_table it is flash_attn_varlen_func's forward."""
    import torch
    from flashbox import kvcache

    if dropout_p:
        raise NotImplementedError("flashbox has no dropout")
    window = (window_size_left, window_size_right)
    if block_table is None:
        from flashbox.flash_attn import flash_attn_varlen_func
        out, lse, _ = flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, 0.0,
                                             softmax_scale, causal, window, softcap, alibi_slopes,
                                             return_attn_probs=True)
        return out, lse, None, None
    if seqused_k is None:
        seqused_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
    out, lse = kvcache.varlen_paged_attention(q, k, v, cu_seqlens_q, block_table, seqused_k, softmax_scale, causal,
                                              window, softcap, alibi_slopes, num_splits, return_softmax_lse=True)
    return out, lse, None, None
