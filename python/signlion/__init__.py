"""signlion: Distributed Lion's sign all-reduce (libnccl-sign.so) from Python.

signlion.capi: the C ABI through ctypes (no dependency);
signlion.torch: DistributedLion, a torch.optim.Optimizer (needs PyTorch).
"""
from .capi import Comm, Lion, SignError, get_unique_id, library_path, version  # noqa: F401

__version__ = "0.1.0"
