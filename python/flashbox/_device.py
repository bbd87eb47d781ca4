"""The CUDA device of a call's tensors as the current one while the C API runs (it launches on the
current device). Shared by flashbox.ops (torch >= 2.4) and flashbox._flex_core (torch >= 1.13)."""
import torch


class on_device:
    """Makes t's GPU the current one for the call, and the previous one current again after it."""

    def __init__(self, t: torch.Tensor):
        self.switch = t.device.type == "cuda" and t.device.index is not None and \
            t.device.index != torch.cuda.current_device()
        self.index = t.device.index

    def __enter__(self):
        if self.switch:
            self.prev = torch.cuda.current_device()
            torch.cuda.set_device(self.index)

    def __exit__(self, *exc):
        if self.switch:
            torch.cuda.set_device(self.prev)
