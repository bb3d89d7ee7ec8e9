"""signlion: Distributed Lion's sign all-reduce (libnccl-sign.so) from Python.

signlion.capi: the C ABI through ctypes (no dependency): Comm, a host
communicator with sign_all_reduce; Lion, the optimizer on flat buffers.
signlion.torch: DistributedLion, a torch.optim.Optimizer (needs PyTorch).
The top level re-exports the names most programs need (__all__).
"""
from .capi import Comm, Lion, SignError, get_unique_id, library_path, net_plugin_path, version  # noqa: F401

__all__ = ["Comm", "Lion", "SignError", "get_unique_id", "library_path", "net_plugin_path", "version", "__version__"]

try:  # written by the wheel build from the CMake project version
    from ._version import __version__
except ImportError:  # a source checkout: read that version where it is written
    from .capi import _source_tree_version

    __version__ = _source_tree_version()
