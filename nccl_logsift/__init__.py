"""nccl-logsift: read NCCL, PyTorch and launcher logs and say why a distributed job hung or failed."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nccl-logsift")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
