"""Where the GEMM's tuned blockings are stored, read without importing the GEMM or its tuner
(``gemm_tune.py`` tunes and chooses; a warm start only checks that a cached program's classes
still have the results it was compiled with: ``cpu/cache.py``).

    mode()            # "off" / "force" / "auto" (OURJAX_GEMM_AUTOTUNE)
    table_path()      # <cache dir>/gemm_tune/<host_key()>.json, or None (no disk cache)
    read(path)        # {class: stored result}
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

__all__ = ["mode", "host_key", "table_path", "read", "results"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def mode() -> str:
  """``"off"``, ``"force"`` or ``"auto"`` (``OURJAX_GEMM_AUTOTUNE`` 0 / 1 / unset)."""
  v = os.environ.get("OURJAX_GEMM_AUTOTUNE", "").strip().lower()
  if v in ("0", "off", "false", "no"):
    return "off"
  if v in ("1", "on", "true", "yes", "force"):
    return "force"
  return "auto"


def host_key() -> str:
  """What the tuned results of this process hold for: LLVM's version, the CPU code is generated
  for (name and features: the host's or ``OURJAX_CPU``'s), its vector ISA (which picks the
  GEMM's vector target: width, FMA, default blocking) and the sources of the GEMM and of the
  tuner."""
  from ourjax.backends import disk_cache
  from ourjax.backends.cpu import host
  h = hashlib.sha256(disk_cache.source_digest(os.path.join(_HERE, "gemm.py"),
                                              os.path.join(_HERE, "gemm_tune.py")).encode())
  h.update(repr((host.tag(), host.target()["isa"])).encode())
  return h.hexdigest()[:32]


def table_path() -> Optional[str]:
  """This host's file of tuned results, or None when the disk cache is off."""
  try:
    from ourjax.backends.disk_cache import cache_dir
    d = cache_dir()
  except Exception:  # noqa: BLE001 - no cache
    return None
  return os.path.join(d, "gemm_tune", f"{host_key()}.json") if d else None


def read(path: Optional[str]) -> dict:
  """The results stored at ``path`` ({} when none or unreadable)."""
  if not path:
    return {}
  try:
    with open(path) as f:
      data = json.load(f)
    return data if isinstance(data, dict) else {}
  except (OSError, ValueError):
    return {}


def results() -> dict:
  """This host's tuned results as this process knows them: the tuner's (``gemm_tune``: the
  file and this process's own) when it is imported, else the file's."""
  import sys
  tune = sys.modules.get("ourjax.backends.llvm.gemm_tune")
  if tune is not None:
    return tune._results()
  return read(table_path())
