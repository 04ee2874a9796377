"""Collect a family module's public API: its wrappers, its ``*_p`` primitives and its classes,
but not the modules and helpers it imported."""
import types


def reexport(module) -> dict:
  """The names above; also those the module lists in ``_REEXPORT`` though another module
  defines them (``control_flow`` wraps ``_scan``'s ``scan``)."""
  out = {}
  extra = set(getattr(module, "_REEXPORT", ()))
  for name, value in vars(module).items():
    if name.startswith("_") or isinstance(value, types.ModuleType):
      continue
    if getattr(value, "__module__", module.__name__) != module.__name__ and \
       not name.endswith("_p") and name not in extra:
      continue
    out[name] = value
  return out
