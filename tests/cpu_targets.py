"""CPU-backend test helpers: whether this host can run code generated for another x86-64 CPU
(``OURJAX_CPU``, tested in a child process), and ``cpu_default``, a module fixture that makes
the CPU the default backend even on a host whose default is a GPU (import it into a test
module: it is autouse)."""
import platform

import pytest

from ourjax.config import config


@pytest.fixture(autouse=True, scope="module")
def cpu_default():
  """The CPU backend as the default, even on a host whose default is a GPU."""
  old = config.jax_platforms
  config.update("jax_platforms", "cpu")
  yield
  config.update("jax_platforms", old)


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
