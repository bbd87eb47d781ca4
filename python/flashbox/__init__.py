"""flashbox from Python.

`import flashbox` needs only the standard library: it gives the ctypes layer over the C API
(flashbox._lib: structs, FlashboxError, version(), ...). The PyTorch functions `flashbox.attention`
and `flashbox.flash_attn_func` import torch the first time they are used, and register the custom
ops `flashbox::attention_fwd` / `flashbox::attention_bwd` then. `flashbox.flex_attention`
(FlexAttention's signature; flashbox/flex.py) likewise registers `flashbox::flex_fwd` / `flex_bwd` on
first use.
"""

import importlib

from ._lib import (  # noqa: F401
    AttentionArgs,
    AttentionGradArgs,
    Device,
    DType,
    ErrorCode,
    FlashboxError,
    Impl,
    LibraryNotFoundError,
    cuda_device_count,
    impl_name,
    last_kernel,
    last_scratch_peak_bytes,
    library_path,
    version,
)

_TORCH_NAMES = ("attention", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func")

__all__ = [
    "AttentionArgs", "AttentionGradArgs", "Device", "DType", "ErrorCode", "FlashboxError", "Impl",
    "LibraryNotFoundError", "cuda_device_count", "impl_name", "last_kernel", "last_scratch_peak_bytes",
    "library_path", "version", *_TORCH_NAMES, "flex_attention",
]


def __getattr__(name):
    # PEP 562: the torch half loads on first use, so that the ctypes half works without torch.
    if name in _TORCH_NAMES or name == "ops":
        # import_module, not `from . import ops`: the latter asks this module for "ops" first, which
        # would come straight back here.
        ops = importlib.import_module(".ops", __name__)
        globals().update({n: getattr(ops, n) for n in _TORCH_NAMES})
        globals()["ops"] = ops
        return globals()[name]
    if name == "flex_attention":
        flex = importlib.import_module(".flex", __name__)
        globals()["flex_attention"] = flex.flex_attention
        return flex.flex_attention
    raise AttributeError(f"module 'flashbox' has no attribute {name!r}")
