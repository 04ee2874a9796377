"""What the CUDA backend's code is made for, known without importing the code generator (an
executable loaded from the disk cache, ``cuda/cache.py``, checks its launches against it).

    info = DeviceInfo(dev.arch, dev.multiprocessor_count)      # defaults: an H100
"""
from __future__ import annotations

__all__ = ["DEFAULT_ARCH", "DeviceInfo"]

DEFAULT_ARCH = "90"


class DeviceInfo:
  """What code generation needs to know about the GPU (defaults: an H100)."""

  def __init__(self, arch: str = DEFAULT_ARCH, sm_count: int = 132):
    self.arch, self.sm_count = arch, sm_count

  @property
  def cc(self) -> int:
    return int(self.arch)
