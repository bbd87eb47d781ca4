"""FlashAttention-2's import names over flashbox.flash_attn (for running FA2's tests; see README.md)."""

from flashbox.flash_attn import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)
from flashbox.kvcache import flash_attn_with_kvcache  # noqa: F401

__version__ = "2.6.3+flashbox"
