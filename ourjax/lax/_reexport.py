"""Collect a family module's public API: its wrappers, its ``*_p`` primitives and its classes,
but not the modules and helpers it imported."""
import types


def reexport(module) -> dict:
  out = {}
  for name, value in vars(module).items():
    if name.startswith("_") or isinstance(value, types.ModuleType):
      continue
    if getattr(value, "__module__", module.__name__) != module.__name__ and not name.endswith("_p"):
      continue
    out[name] = value
  return out
