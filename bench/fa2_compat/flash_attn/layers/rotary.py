"""Rotary embeddings are not part of flashbox; FA2's tests import this name only for the KV-cache tests."""


def apply_rotary_emb(*args, **kwargs):
    raise NotImplementedError("flashbox: apply_rotary_emb is not part of flashbox.flash_attn")
