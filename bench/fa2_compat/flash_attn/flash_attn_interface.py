"""The two private names FA2's tests import from flash_attn_interface."""

from . import *  # noqa: F401,F403
from . import flash_attn_with_kvcache  # noqa: F401

USE_TRITON_ROCM = False


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    # Only used by the tests to decode dropout masks; flashbox has no dropout.
    return 64
