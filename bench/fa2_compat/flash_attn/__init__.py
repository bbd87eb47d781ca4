"""FlashAttention-2's import names over flashbox.flash_attn (for running FA2's tests; see README.md)."""

from flashbox.flash_attn import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)

__version__ = "2.6.3+flashbox"


def flash_attn_with_kvcache(*args, **kwargs):
    raise NotImplementedError("flashbox: flash_attn_with_kvcache (KV cache / decode) is not part of "
                              "flashbox.flash_attn")
