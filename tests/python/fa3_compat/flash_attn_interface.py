"""FlashAttention-3's module name over flashbox.flash_attn_interface, so that FlashAttention-3's own
hopper/test_flash_attn.py (`from flash_attn_interface import ...`) runs against flashbox (see README.md)."""

from flashbox.flash_attn_interface import *  # noqa: F401,F403
from flashbox.flash_attn_interface import __all__  # noqa: F401
