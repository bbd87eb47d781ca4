"""A PyTorch reference of FlashAttention-2's apply_rotary_emb (flash_attn.layers.rotary), which its
KV-cache tests use to build their expected outputs; written here from the rotary definition, not
flashbox's kernels (those are what the tests check)."""

import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """x [batch, seqlen, heads, d]; cos/sin [seqlen_ro, rotary_dim / 2]; token t of batch b turns by
    the angles of row t + seqlen_offsets[b]. Pairs (2m, 2m+1) when interleaved, else (m, m + rd/2);
    columns past rotary_dim are unchanged."""
    if cu_seqlens is not None:
        raise NotImplementedError("the reference covers the batched layout only")
    b, s = x.shape[0], x.shape[1]
    rd = 2 * cos.shape[1]
    pos = torch.arange(s, device=x.device).unsqueeze(0)
    if isinstance(seqlen_offsets, torch.Tensor):
        pos = pos + seqlen_offsets.to(x.device, torch.long).view(-1, 1)
    else:
        pos = pos + int(seqlen_offsets)
    pos = pos.expand(b, s)
    c = cos[pos].unsqueeze(2).float()  # [b, s, 1, rd / 2]
    sn = sin[pos].unsqueeze(2).float()
    xf = x.float()
    rot = xf[..., :rd]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        o1, o2 = x1 * c - x2 * sn, x1 * sn + x2 * c
        turned = torch.stack((o1, o2), dim=-1).flatten(-2)
    else:
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
        turned = torch.cat((x1 * c - x2 * sn, x1 * sn + x2 * c), dim=-1)
    out = torch.cat((turned, xf[..., rd:]), dim=-1).to(x.dtype)
    if inplace:
        x.copy_(out)
        return x
    return out
