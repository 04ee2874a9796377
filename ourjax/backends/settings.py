"""The module-level settings compiled code follows, for the disk cache's keys, read without
importing the compiler.

    settings.pristine(__name__)      # last line of a module that has settings (the passes'
                                     # package records all of them: lowering/passes/__init__)
    settings.digest()                # what keys hold of them: only what differs from the import

A setting is an upper-case module-level scalar (``KERNELS_PER_MODULE = 8``; ``bool``, ``int``,
``float`` or ``str``) of the modules named in ``MODULES`` or of a pass module
(``ourjax.lowering.passes.*``), and the pipeline's pass lists: tests and users change them,
and the code compiled then differs.  A key holds each setting that differs from what the
module's import left (``pristine``), and the ``OURJAX_*`` environment (where most of those
values come from at import); a module not imported holds what its source says (the sources
are part of every key).  So a warm process whose program is in the disk cache computes its
key without importing the passes, the planner or the emitter (that cost a new process ~20 ms),
and gets the key the compiling process had with everything imported.

A module imported but not recorded (it lacks the ``pristine`` call) adds all its settings:
its programs are keyed apart from those of a process that never imported it (they miss, they
are not wrong); ``tests/test_warm_start.py`` checks that every module with settings records
them.
"""
from __future__ import annotations

import os
import sys

__all__ = ["MODULES", "CUDA_MODULES", "pristine", "digest", "watched"]

#: Modules (besides the passes) whose settings the compiled code follows.
MODULES = ("ourjax.lowering.pipeline", "ourjax.backends.cpu.backend", "ourjax.backends.cpu.entry",
           "ourjax.backends.cpu.waiting",
           "ourjax.backends.llvm.kernels", "ourjax.backends.llvm.emitter",
           "ourjax.backends.llvm.concat", "ourjax.backends.llvm.dots",
           "ourjax.backends.llvm.attention", "ourjax.backends.llvm.planning",
           "ourjax.backends.llvm.elemental", "ourjax.backends.llvm.gemm",
           "ourjax.backends.llvm.gemm_calls", "ourjax.backends.llvm.gemm_im2col",
           "ourjax.backends.llvm.gemm_library", "ourjax.backends.llvm.group_planner",
           "ourjax.backends.llvm.horizontal", "ourjax.backends.llvm.row_cache",
           "ourjax.backends.llvm.schedule")
#: Modules of the CUDA backend whose settings its code follows (besides ``MODULES``: it plans
#: with the shared planner and emits with the shared emitter); only its keys hold them.
CUDA_MODULES = ("ourjax.backends.cuda.codegen", "ourjax.backends.cuda.dots",
                "ourjax.backends.cuda.wgmma", "ourjax.backends.cuda.attention",
                "ourjax.backends.cuda.attention_grad", "ourjax.backends.cuda.horizontal",
                "ourjax.backends.cuda.stencil", "ourjax.backends.cuda.time_blocking",
                "ourjax.backends.cuda.transpose", "ourjax.backends.cuda.reductions")
_PASSES = "ourjax.lowering.passes."

#: Environment variables that change no compiled code (where it is cached, what is logged, how
#: it is loaded).
IGNORED_ENV = frozenset({"OURJAX_CACHE_DIR", "OURJAX_LOG_COMPILES", "OURJAX_DUMP",
                         "OURJAX_CPU_LOADER"})

_pristine: dict = {}


def _values(module) -> dict:
  out = {k: repr(v) for k, v in vars(module).items()
         if k.isupper() and isinstance(v, (bool, int, float, str))}
  if module.__name__ == "ourjax.lowering.pipeline":
    for k, v in vars(module).items():
      if k.isupper() and isinstance(v, (list, tuple)):
        out[k] = ",".join(f"{n}:{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', '')}"
                          for n, f in v)
  return out


def pristine(*names: str) -> None:
  """Record the settings of the modules ``names`` as their import left them (the last line of
  such a module; ``pipeline`` also records the passes it imported)."""
  for name in names:
    module = sys.modules.get(name)
    if module is not None and name not in _pristine:
      _pristine[name] = _values(module)


def watched(modules=MODULES) -> list:
  """The names of the imported modules whose settings count (those of ``modules`` and the
  passes)."""
  return sorted(n for n in list(sys.modules)
                if n in modules or (n.startswith(_PASSES) and n.count(".") == 3))


def digest(passes: bool = True, cuda: bool = False) -> str:
  """The settings that differ from their modules' import, and the ``OURJAX_*`` environment,
  as text for a key (``passes`` False: not those of the pipeline and the passes, which the
  code of an optimised module does not follow; ``cuda``: those of ``CUDA_MODULES`` too)."""
  parts = [f"cpus={os.cpu_count()}"]
  parts += sorted(f"{k}={v}" for k, v in os.environ.items()
                  if k.startswith("OURJAX_") and k not in IGNORED_ENV)
  for name in watched(MODULES + CUDA_MODULES if cuda else MODULES):
    if not passes and (name == "ourjax.lowering.pipeline" or name.startswith(_PASSES)):
      continue
    module = sys.modules.get(name)
    if module is None:
      continue
    now = _values(module)
    base = _pristine.get(name)
    if base is None:
      parts += [f"{name}.{k}={v} (unrecorded)" for k, v in sorted(now.items())]
      continue
    parts += [f"{name}.{k}={v}" for k, v in sorted(now.items()) if base.get(k) != v]
    parts += [f"{name}.{k} deleted" for k in sorted(set(base) - set(now))]
  return "\n".join(parts)
