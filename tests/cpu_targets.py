"""Tests that run code generated for another x86-64 CPU (``OURJAX_CPU``) in a child process:
whether this host can run it."""
import platform

import pytest


def skip_unless_host_runs(flag):
  """Skip the calling test unless this host runs code for a CPU with ``flag`` (``avx2``: with
  FMA too; None: any x86-64)."""
  if platform.machine() not in ("x86_64", "AMD64"):
    pytest.skip("x86-64 host only")
  if flag:
    try:
      flags = open("/proc/cpuinfo").read().split()
    except OSError:
      pytest.skip("no /proc/cpuinfo")
    if flag not in flags or "fma" not in flags:
      pytest.skip(f"host lacks {flag}/fma")
