"""Dot algorithms: ``lax.DotAlgorithm`` and ``lax.DotAlgorithmPreset``, JAX's way of asking a
contraction for given operand storage types and an accumulation type (``precision=`` of
``dot``/``dot_general``, as the algorithm object or a preset's name).

ourjax carries no algorithm into the compiled program: ``_apply`` turns it into converts
around an ordinary ``dot_general``.  An operand whose dtype the algorithm does not take is
converted to the algorithm's (first) input type; the product accumulates in the accumulation
type; the result has the dtype it would have without the algorithm (``preferred_element_type``
or the operands' dtype).  The multi-pass presets (``BF16_BF16_F32_X3``/``_X6``/``_X9``,
``TF32_TF32_F32_X3``), which emulate float32 products with narrower passes, compute float32
products directly; ``BF16_BF16_*`` and ``TF32_TF32_F32`` take float32 operands as they are, as
XLA does on the CPU.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

from ourjax import dtypes


class DotAlgorithm(NamedTuple):
  """A contraction's storage types for each operand and its accumulation type (the component
  counts and number of primitive operations describe multi-pass emulations)."""
  lhs_precision_type: object
  rhs_precision_type: object
  accumulation_type: object
  lhs_component_count: int = 1
  rhs_component_count: int = 1
  num_primitive_operations: int = 1
  allow_imprecise_accumulation: bool = False

  @property
  def supported_lhs_types(self):
    return (self.lhs_precision_type,)

  @property
  def supported_rhs_types(self):
    return (self.rhs_precision_type,)


_F16, _BF16, _F32, _F64 = np.float16, dtypes.bfloat16, np.float32, np.float64


class DotAlgorithmPreset(enum.Enum):
  """The named algorithms (JAX's): ``<lhs type>_<rhs type>_<accumulation type>``, ``ANY_F8``
  for any float8 operand, ``_X<n>`` for an emulation with n passes, ``DEFAULT`` for none."""
  DEFAULT = enum.auto()
  ANY_F8_ANY_F8_F32 = enum.auto()
  ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
  ANY_F8_ANY_F8_ANY = enum.auto()
  ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
  F16_F16_F16 = enum.auto()
  F16_F16_F32 = enum.auto()
  BF16_BF16_BF16 = enum.auto()
  BF16_BF16_F32 = enum.auto()
  BF16_BF16_F32_X3 = enum.auto()
  BF16_BF16_F32_X6 = enum.auto()
  BF16_BF16_F32_X9 = enum.auto()
  TF32_TF32_F32 = enum.auto()
  TF32_TF32_F32_X3 = enum.auto()
  F32_F32_F32 = enum.auto()
  F64_F64_F64 = enum.auto()

  def __repr__(self):
    return f"{type(self).__name__}.{self.name}"

  def __str__(self):
    return self.name

  @property
  def supported_lhs_types(self):
    return _PRESET_TYPES[self][0]

  @property
  def supported_rhs_types(self):
    return _PRESET_TYPES[self][0]

  @property
  def accumulation_type(self):
    return _PRESET_TYPES[self][1]


_PRESET_TYPES = {   # preset -> (operand types it takes, or None for any; accumulation type)
    DotAlgorithmPreset.DEFAULT: (None, None),
    DotAlgorithmPreset.ANY_F8_ANY_F8_F32: (None, _F32),
    DotAlgorithmPreset.ANY_F8_ANY_F8_F32_FAST_ACCUM: (None, _F32),
    DotAlgorithmPreset.ANY_F8_ANY_F8_ANY: (None, None),
    DotAlgorithmPreset.ANY_F8_ANY_F8_ANY_FAST_ACCUM: (None, None),
    DotAlgorithmPreset.F16_F16_F16: ((_F16,), _F16),
    DotAlgorithmPreset.F16_F16_F32: ((_F16,), _F32),
    DotAlgorithmPreset.BF16_BF16_BF16: ((_BF16, _F32), _BF16),
    DotAlgorithmPreset.BF16_BF16_F32: ((_BF16, _F32), _F32),
    DotAlgorithmPreset.BF16_BF16_F32_X3: ((_F32,), _F32),
    DotAlgorithmPreset.BF16_BF16_F32_X6: ((_F32,), _F32),
    DotAlgorithmPreset.BF16_BF16_F32_X9: ((_F32,), _F32),
    DotAlgorithmPreset.TF32_TF32_F32: ((_F32,), _F32),
    DotAlgorithmPreset.TF32_TF32_F32_X3: ((_F32,), _F32),
    DotAlgorithmPreset.F32_F32_F32: ((_F32,), _F32),
    DotAlgorithmPreset.F64_F64_F64: ((_F64,), _F64),
}


def _from_any(precision):
  """The algorithm ``precision`` names (an algorithm, a preset, or a preset's name), or None
  when it is not one (a ``Precision`` or its aliases)."""
  if isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)):
    return precision
  if isinstance(precision, str) and precision in DotAlgorithmPreset.__members__:
    return DotAlgorithmPreset[precision]
  return None


def _storage(dt, supported):
  if supported is None or any(np.dtype(t) == dt for t in supported):
    return dt
  return np.dtype(supported[0])


def _apply(algorithm, lhs, rhs, preferred_element_type, dot):
  """``dot(lhs, rhs, preferred_element_type)`` as ``algorithm`` asks (see the module's
  docstring)."""
  from ourjax.core import get_aval
  from ourjax.lax.elementwise import convert_element_type
  if algorithm == DotAlgorithmPreset.DEFAULT:
    return dot(lhs, rhs, preferred_element_type)
  ld, rd = get_aval(lhs).dtype, get_aval(rhs).dtype
  out_dt = (np.dtype(preferred_element_type) if preferred_element_type is not None
            else dtypes.result_type(ld, rd))
  lt = _storage(ld, algorithm.supported_lhs_types)
  rt = _storage(rd, algorithm.supported_rhs_types)
  if lt != ld:
    lhs = convert_element_type(lhs, lt)
  if rt != rd:
    rhs = convert_element_type(rhs, rt)
  acc = algorithm.accumulation_type
  acc = dtypes.canonicalize_dtype(acc) if acc is not None else None
  if acc is not None and not (dtypes.is_inexact(lt) and dtypes.is_inexact(rt)):
    acc = None                       # (integer products keep their own accumulation)
  out = dot(lhs, rhs, acc)
  return out if get_aval(out).dtype == out_dt else convert_element_type(out, out_dt)
