"""HLO optimisation passes, one per file; each exposes ``run(module) -> bool`` ("changed").

``simplify``          algebraic rewrites to a fixed point (bit-exact unless fast math)
``constant_folding``  evaluate all-constant instructions with the reference executor
``cse``               structural hashing: merge identical instructions and sub-computations
``dce``               drop unused instructions and unreachable computations
``barriers``          remove optimization barriers (after the fixed point: they guard only it)
``fusion``            loop (kLoop), reduction-input (kInput) and dot-epilogue (kOutput) fusion;
                      each decision noted with its reason; expensive producers never duplicated
``fusion_ir``         not a pass: the fusion instruction (its ops, iteration spaces, each
                      kind's contract) and the helpers that build and edit fusions
``multi_output_fusion``  merge siblings reading the same input, fold producers needed outside
``recompute_outputs`` a multi-output fusion's cheap outputs recomputed by their readers, not
                      stored
``buffer_assignment`` liveness-based slots in one arena (``module.buffer_assignment``)

The order they run in, and the verifier between them, live in ``lowering/pipeline.py``. Passes
record why they changed something with ``module.note(pass_name, reason)``.
"""

# Every pass is imported with the package, and its settings recorded as imported: disk-cache
# keys hold only the settings that differ (backends/settings.py), so a pass imported on its
# own must not be the first to record them.
import importlib as _importlib  # noqa: E402
import pkgutil as _pkgutil  # noqa: E402

_NAMES = [f"{__name__}.{m.name}" for m in _pkgutil.iter_modules(__path__)]
for _name in _NAMES:
  _importlib.import_module(_name)

from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(*_NAMES)
