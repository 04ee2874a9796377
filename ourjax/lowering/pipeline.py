"""The HLO pass pipeline: one list of passes, run to a fixed point, verified after every pass.

    optimize(module)                 # in place; returns the module

``early_passes`` (the native backends': ``NATIVE_EARLY_PASSES``) run once first. ``PASSES`` run
in order, repeatedly, until none of them changes the module (at most ``MAX_ITERATIONS``
rounds); a pass that changed nothing is not run again until another pass has changed the
module (passes are deterministic: on the same module it would change nothing again). ``LATE_PASSES`` (the native backends': ``NATIVE_LATE_PASSES``) then run once each, in
order: this is where fusion and buffer assignment go (they want the simplified module and must
not be undone by it).
With ``OURJAX_CHECK_PASSES=1`` (the test suite sets it) the module is verified as it comes
and after every pass, so a broken rewrite is caught next to the pass that made it; otherwise
once, at the end (verifying after each of a dozen passes was a tenth of a transformer step's
compile time).

With ``OURJAX_DUMP=dir`` in the environment (or ``dump_dir=``), the module text is written to
``dir/<module>.NN-<pass>.txt``: ``00-input`` first, then one file per pass run that changed
something, each followed by the reasons that pass recorded with ``module.note``.
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

from ourjax import _phases
from ourjax.lowering import hlo
from ourjax.lowering.passes import (attention, barriers, buffer_assignment, constant_folding,
                                    conv_to_dot, cse, dce, dot_layout, fusion,
                                    multi_output_fusion, recompute_outputs, simplify)

#: (name, run) pairs, run in order to a fixed point.
PASSES: list[tuple[str, Callable[[hlo.Module], bool]]] = [
    ("simplify", simplify.run),
    ("constant_folding", constant_folding.run),
    ("cse", cse.run),
    ("dce", dce.run),
]

#: Passes the native backends (CPU, CUDA) run once before ``PASSES``: convolutions become GEMMs
#: (nothing later makes a convolution, so once is enough).  The reference backend keeps them
#: direct (it is the oracle: the simplest faithful evaluation).
NATIVE_EARLY_PASSES: list[tuple[str, Callable[[hlo.Module], bool]]] = [
    ("conv_to_dot", conv_to_dot.run),
]

#: (name, run) pairs run once after the fixed point: optimization barriers go (they only
#: guard against the fixed-point passes), fusion (and its multi-output merges, then cheap
#: outputs recomputed by their readers instead of stored), then buffer assignment.
LATE_PASSES: list[tuple[str, Callable[[hlo.Module], bool]]] = [
    ("barriers", barriers.run),
    ("fusion", fusion.run),
    ("multi_output_fusion", multi_output_fusion.run),
    ("recompute_outputs", recompute_outputs.run),
    ("buffer_assignment", buffer_assignment.run),
]

#: The native backends' ``LATE_PASSES``: attention becomes one instruction where the backend
#: has a kernel for it (``Module.fused_attention``), then dot operands are put in a layout their
#: GEMMs take (after the fixed point, which would fold the transposes back into the dots).
NATIVE_LATE_PASSES: list[tuple[str, Callable[[hlo.Module], bool]]] = [
    ("barriers", barriers.run),
    ("attention", attention.run),
    ("dot_layout", dot_layout.run),
    *LATE_PASSES[1:],
]

#: Rounds of ``PASSES`` before giving up on a fixed point.
MAX_ITERATIONS = 8


class PassError(hlo.VerifyError):
  """The module failed verification right after a pass."""


class _Dumper:
  def __init__(self, dump_dir: str | None, module: hlo.Module):
    self.dir = dump_dir
    self.module = module
    self.count = 0
    self.notes_seen = len(module.notes)
    if dump_dir:
      os.makedirs(dump_dir, exist_ok=True)

  def write(self, tag: str) -> None:
    if not self.dir:
      return
    m = self.module
    text = m.to_string()
    new_notes = m.notes[self.notes_seen:]
    self.notes_seen = len(m.notes)
    if new_notes:
      text += "\n# notes\n" + "\n".join(f"#   {n}" for n in new_notes) + "\n"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in m.name)
    path = os.path.join(self.dir, f"{safe}.{self.count:02d}-{tag}.txt")
    with open(path, "w") as f:
      f.write(text)
    self.count += 1


#: Verify after every pass (see the module docstring).
CHECK_PASSES = os.environ.get("OURJAX_CHECK_PASSES", "").strip().lower() not in (
    "", "0", "false", "off", "no")


def _run_pass(module, name, fn, dumper, check):
  with _phases.phase("pass:" + name):
    changed = bool(fn(module))
  if check:
    try:
      with _phases.phase("verify"):
        hlo.verify(module)
    except hlo.VerifyError as e:
      raise PassError(f"after pass {name}: {e}\n{module.to_string()}") from None
  if changed:
    dumper.write(name)
  return changed


def optimize(module: hlo.Module, dump_dir: str | None = None, *,
             passes: Sequence | None = None, late_passes: Sequence | None = None,
             early_passes: Sequence = (), max_iterations: int | None = None,
             check: bool | None = None) -> hlo.Module:
  """Run ``early_passes`` once, ``passes`` (default ``PASSES``) to a fixed point, then
  ``late_passes`` (default ``LATE_PASSES``) once, verifying after each pass when ``check``
  (default ``CHECK_PASSES``), else at the end. Mutates and returns ``module``."""
  check = CHECK_PASSES if check is None else check
  passes = PASSES if passes is None else passes
  late_passes = LATE_PASSES if late_passes is None else late_passes
  max_iterations = MAX_ITERATIONS if max_iterations is None else max_iterations
  dumper = _Dumper(dump_dir or os.environ.get("OURJAX_DUMP") or None, module)
  if check:
    with _phases.phase("verify"):
      hlo.verify(module)
  dumper.write("input")
  for name, fn in early_passes:
    _run_pass(module, name, fn, dumper, check)
  changes = 0            # pass runs that changed the module so far
  ran_at: dict = {}      # pass -> ``changes`` when it last ran and changed nothing
  for _ in range(max_iterations):
    changed = False
    for name, fn in passes:
      if ran_at.get(name) == changes:
        continue         # the module is as this pass left it, unchanged: it would do nothing
      if _run_pass(module, name, fn, dumper, check):
        changes += 1
        changed = True
        ran_at.pop(name, None)      # (it may find more in what it made: it runs again)
      else:
        ran_at[name] = changes
    if not changed:
      break
  for name, fn in late_passes:
    _run_pass(module, name, fn, dumper, check)
  if not check:
    try:
      with _phases.phase("verify"):
        hlo.verify(module)
    except hlo.VerifyError as e:
      raise PassError(f"after the passes (OURJAX_CHECK_PASSES=1 finds the pass): {e}\n"
                      f"{module.to_string()}") from None
  return module


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
