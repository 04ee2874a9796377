"""Dtypes and JAX's type promotion rules.

What this module decides:

* which dtypes exist (NumPy's numeric dtypes, ml_dtypes' bfloat16 / float8 / float6 / float4 and
  sub-byte integers, and ``float0``, the tangent dtype of integer and boolean values);
* canonicalisation: with x64 off (the default) the 64-bit dtypes are narrowed to 32 bits;
* promotion: the dtype two or more operands are converted to, following JAX's promotion
  lattice, in which Python scalars (and values derived from them) are *weakly typed* and
  give way to the dtype of a strongly typed operand of the same kind.

Nothing here imports the rest of ourjax except ``ourjax.config`` and ``ourjax._keys`` (the key
dtype classes, which import nothing of ourjax).
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from ourjax._keys import KeyDType, extended, key_issubdtype, prng_key  # noqa: F401

from ourjax.config import config


class InvalidDtypeError(TypeError, ValueError):
  """A value or dtype-like that names no dtype ourjax supports.

  A subclass of both TypeError (what JAX raises) and ValueError, so either handler catches it.
  """


class TypePromotionError(ValueError, TypeError):
  """Two or more dtypes that have no implicit promotion path (e.g. float8 with float32).

  JAX's is a ValueError; it is also a TypeError here, so code written either way catches it.
  """


# ---------------------------------------------------------------------------------------------
# Scalar types.

bool_ = np.bool_
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float16, float32, float64 = np.float16, np.float32, np.float64
complex64, complex128 = np.complex64, np.complex128
bfloat16 = ml_dtypes.bfloat16

# JAX's names for the default (64-bit) scalar types; canonicalise them before use.
int_ = np.int64
uint = np.uint64
float_ = np.float64
complex_ = np.complex128

# Narrow floats and sub-byte integers: only those this ml_dtypes offers.
_SMALL_FLOAT_NAMES = (
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
)
_SUBBYTE_SIGNED_NAMES = ("int1", "int2", "int4")
_SUBBYTE_UNSIGNED_NAMES = ("uint1", "uint2", "uint4")

for _name in _SMALL_FLOAT_NAMES + _SUBBYTE_SIGNED_NAMES + _SUBBYTE_UNSIGNED_NAMES:
  if hasattr(ml_dtypes, _name):
    globals()[_name] = getattr(ml_dtypes, _name)
del _name

_small_float_dtypes = tuple(np.dtype(getattr(ml_dtypes, n)) for n in _SMALL_FLOAT_NAMES
                            if hasattr(ml_dtypes, n))
# ml_dtypes' floats: their NumPy kind is 'V', and their scalar types are not np.floating.
_custom_float_dtypes = frozenset(_small_float_dtypes + (np.dtype(bfloat16),))
_subbyte_signed_dtypes = tuple(np.dtype(getattr(ml_dtypes, n)) for n in _SUBBYTE_SIGNED_NAMES
                               if hasattr(ml_dtypes, n))
_subbyte_unsigned_dtypes = tuple(np.dtype(getattr(ml_dtypes, n))
                                 for n in _SUBBYTE_UNSIGNED_NAMES if hasattr(ml_dtypes, n))
_subbyte_int_dtypes = frozenset(_subbyte_signed_dtypes + _subbyte_unsigned_dtypes)

# The tangent dtype of integer and boolean values: a zero-sized void dtype, as in JAX.
float0 = np.dtype([("float0", np.void, 0)])

# Python scalar types and the (uncanonicalised) dtypes their values take.
python_scalar_dtypes: dict[type, np.dtype] = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
}
_weak_python_types = (int, float, complex)

_signed_dtypes = frozenset(map(np.dtype, (np.int8, np.int16, np.int32, np.int64))) | set(
    _subbyte_signed_dtypes)
_unsigned_dtypes = frozenset(map(np.dtype, (np.uint8, np.uint16, np.uint32, np.uint64))) | set(
    _subbyte_unsigned_dtypes)
_float_dtypes = frozenset(map(np.dtype, (np.float16, np.float32, np.float64))) | \
    _custom_float_dtypes
_complex_dtypes = frozenset(map(np.dtype, (np.complex64, np.complex128)))
_bool_dtypes = frozenset({np.dtype(np.bool_)})

# Every dtype an ourjax array may have.
_valid_dtypes = frozenset({float0}) | _bool_dtypes | _signed_dtypes | _unsigned_dtypes | \
    _float_dtypes | _complex_dtypes


def _kind(dt: np.dtype) -> str:
  """NumPy's one-letter kind, with ml_dtypes' types (kind 'V') given their real kind."""
  if dt in _custom_float_dtypes:
    return "f"
  if dt in _subbyte_int_dtypes:
    return "i" if dt in _subbyte_signed_dtypes else "u"
  return dt.kind


# ---------------------------------------------------------------------------------------------
# Canonicalisation and defaults.

_to_32bit = {
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.float32),
    np.dtype(np.complex128): np.dtype(np.complex64),
}


def _np_dtype(x: Any) -> np.dtype:
  """np.dtype(x), with Python scalar types mapped explicitly and failures as InvalidDtypeError."""
  if isinstance(x, np.dtype):
    return x
  if isinstance(x, type) and x in python_scalar_dtypes:
    return python_scalar_dtypes[x]
  try:
    return np.dtype(x)
  except Exception as e:  # numpy raises TypeError, but some inputs give ValueError/others
    raise InvalidDtypeError(f"dtype {x!r} not understood") from e


@functools.lru_cache(maxsize=512)
def _canonicalize_cached(dtype_like: Any, x64: bool) -> np.dtype:
  dt = _np_dtype(dtype_like)
  return dt if x64 else _to_32bit.get(dt, dt)


def canonicalize_dtype(dtype: Any) -> np.dtype:
  """The dtype ``dtype`` names, narrowed to 32 bits when x64 is off.

  With x64 off: int64 -> int32, uint64 -> uint32, float64 -> float32, complex128 -> complex64.
  Accepts whatever np.dtype accepts, ml_dtypes types and the Python types bool/int/float/complex.
  """
  x64 = config.x64_enabled
  try:
    return _canonicalize_cached(dtype, x64)
  except TypeError as e:
    if isinstance(e, InvalidDtypeError):
      raise
    # Unhashable dtype-like (e.g. a list describing a structured dtype): skip the cache.
    return _canonicalize_cached.__wrapped__(dtype, x64)


def default_int_dtype() -> np.dtype:
  return np.dtype(np.int64 if config.x64_enabled else np.int32)


def default_uint_dtype() -> np.dtype:
  return np.dtype(np.uint64 if config.x64_enabled else np.uint32)


def default_float_dtype() -> np.dtype:
  return np.dtype(np.float64 if config.x64_enabled else np.float32)


def default_complex_dtype() -> np.dtype:
  return np.dtype(np.complex128 if config.x64_enabled else np.complex64)


_default_dtype_of_kind = {
    "b": lambda: np.dtype(np.bool_),
    "i": default_int_dtype,
    "u": default_uint_dtype,
    "f": default_float_dtype,
    "c": default_complex_dtype,
}


# ---------------------------------------------------------------------------------------------
# dtype(), weak types, user dtype arguments.

def _checked(dt: np.dtype, what: Any) -> np.dtype:
  if dt not in _valid_dtypes:
    raise InvalidDtypeError(
        f"Value {what!r} with dtype {dt} is not a valid ourjax array type. "
        "Only arrays of numeric types (and bool) are supported.")
  return dt


def dtype(x: Any, *, canonicalize: bool = False) -> np.dtype:
  """The dtype of a value or dtype-like, optionally canonicalised for the x64 setting.

  Python scalars: bool -> bool, int -> int64, float -> float64, complex -> complex128 (and so
  for the types themselves).  Objects with a ``.dtype`` (arrays, tracers, abstract values,
  NumPy scalars) give that dtype.  Strings and scalar types ('float32', 'bfloat16', np.int8)
  give the dtype they name.
  """
  if x is None:
    raise InvalidDtypeError(f"Invalid argument to dtype: {x}.")
  if isinstance(x, type) and x in python_scalar_dtypes:
    dt = python_scalar_dtypes[x]
  elif type(x) in python_scalar_dtypes:
    dt = python_scalar_dtypes[type(x)]
  elif isinstance(x, (str, np.dtype)) or (isinstance(x, type) and issubclass(x, np.generic)):
    dt = _checked(_np_dtype(x), x)
  elif isinstance(getattr(x, "dtype", None), np.dtype):
    dt = _checked(x.dtype, x)
  else:
    try:
      dt = np.result_type(x)
    except Exception:
      try:  # numpy >= 2.4 reads a list as a structured-dtype spec; treat it as an array
        dt = np.asarray(x).dtype
      except Exception as e:
        raise InvalidDtypeError(f"Cannot determine dtype of {x!r}") from e
    dt = _checked(dt, x)
  return canonicalize_dtype(dt) if canonicalize else dt


def is_weakly_typed(x: Any) -> bool:
  """True for Python int/float/complex values and for values marked ``weak_type``.

  Python bools and NumPy scalars are strongly typed.  Arrays, tracers and abstract values carry
  a ``weak_type`` flag, on themselves or on their ``.aval``.
  """
  if type(x) in _weak_python_types:
    return True
  if isinstance(x, type):
    return False
  w = getattr(x, "weak_type", None)
  if w is None:
    w = getattr(getattr(x, "aval", None), "weak_type", False)
  return bool(w) if isinstance(w, (bool, np.bool_)) else False


def _shape_of(x: Any):
  s = getattr(x, "shape", None)
  if s is None:
    s = getattr(getattr(x, "aval", None), "shape", None)
  return s


def is_python_scalar(x: Any) -> bool:
  """True for Python bool/int/float/complex values, and for weakly typed 0-d values (which is
  what a Python scalar becomes once traced)."""
  if type(x) in python_scalar_dtypes:
    return True
  if isinstance(x, type) or not is_weakly_typed(x):
    return False
  s = _shape_of(x)
  return s is not None and tuple(s) == ()


def check_user_dtype(dtype_like: Any, fname: str | None = None) -> np.dtype:
  """Validate a dtype argument a user passed to ``fname`` and return its canonical form.

  Python types give the default dtype of their kind (``int`` -> int32 with x64 off).  An explicit
  64-bit dtype with x64 off is narrowed, with a UserWarning, as JAX does.
  """
  where = f" in {fname}" if fname else ""
  if dtype_like is None:
    raise InvalidDtypeError(f"dtype must be specified{where}, got None.")
  if isinstance(dtype_like, type) and dtype_like in python_scalar_dtypes:
    return canonicalize_dtype(python_scalar_dtypes[dtype_like])
  if not isinstance(dtype_like, (str, np.dtype, type)) and hasattr(dtype_like, "dtype") \
      and hasattr(dtype_like, "shape"):
    raise InvalidDtypeError(
        f"Passing an array as a dtype argument is not supported{where}; "
        "instead of dtype=arr use dtype=arr.dtype.")
  try:
    dt = _np_dtype(dtype_like)
  except InvalidDtypeError as e:
    raise InvalidDtypeError(f"dtype {dtype_like!r} not understood{where}.") from e
  if dt not in _valid_dtypes:
    raise InvalidDtypeError(
        f"JAX only supports number, bool, and string dtypes (ourjax: number and bool), got "
        f"dtype {dtype_like!r}{where}.")   # JAX's words first: code matches on them
  canonical = canonicalize_dtype(dt)
  if canonical != dt:
    requested = f" requested{where}" if fname else ""
    warnings.warn(
        f"Explicitly requested dtype {dt.name}{requested} is not available, and will be "
        f"truncated to dtype {canonical.name}. To enable more dtypes, set the jax_enable_x64 "
        "configuration option or the OURJAX_ENABLE_X64 environment variable.",
        UserWarning, stacklevel=3)
  return canonical


# ---------------------------------------------------------------------------------------------
# The promotion lattice.

class _Weak:
  """A weak-type node of the lattice: a Python scalar, or a value derived from one."""

  def __init__(self, name: str, pytype: type):
    self.name, self.pytype = name, pytype

  def __repr__(self):
    return self.name


I_WEAK, F_WEAK, C_WEAK = _Weak("i*", int), _Weak("f*", float), _Weak("c*", complex)
_weak_node_of_kind = {"i": I_WEAK, "u": I_WEAK, "f": F_WEAK, "c": C_WEAK}
_weak_node_of_type = {int: I_WEAK, float: F_WEAK, complex: C_WEAK}

_b1 = np.dtype(np.bool_)
_u8, _u16, _u32, _u64 = map(np.dtype, (np.uint8, np.uint16, np.uint32, np.uint64))
_i8, _i16, _i32, _i64 = map(np.dtype, (np.int8, np.int16, np.int32, np.int64))
_bf16, _f16, _f32, _f64 = map(np.dtype, (bfloat16, np.float16, np.float32, np.float64))
_c64, _c128 = map(np.dtype, (np.complex64, np.complex128))

# Each node and the nodes immediately above it; promotion is the join (least upper bound).
# Weak nodes (i*, f*, c*) sit below every strong type of their kind, so a Python scalar takes
# the dtype of the array it meets.  Sub-byte ints and float8/6/4 have nothing above them: they
# promote only with weak types and with what lies below them (bool, i*, and for the floats also
# the integers and f*), never implicitly to a wider type.
_LATTICE: dict[Any, list[Any]] = {
    _b1: [I_WEAK],
    I_WEAK: [_u8, _i8, *_subbyte_int_dtypes],
    _u8: [_u16, _i16],
    _u16: [_u32, _i32],
    _u32: [_u64, _i64],
    _u64: [F_WEAK],
    _i8: [_i16],
    _i16: [_i32],
    _i32: [_i64],
    _i64: [F_WEAK],
    F_WEAK: [_bf16, _f16, C_WEAK, *_small_float_dtypes],
    _bf16: [_f32],
    _f16: [_f32],
    _f32: [_f64, _c64],
    _f64: [_c128],
    C_WEAK: [_c64],
    _c64: [_c128],
    _c128: [],
    **{t: [] for t in (*_subbyte_int_dtypes, *_small_float_dtypes)},
}


@functools.lru_cache(maxsize=None)
def _upper_bounds(x64: bool = True) -> dict[Any, frozenset]:
  """For each node, every node at or above it (the reflexive-transitive closure).

  As JAX's lattice, without x64 no promotion forms a 64-bit type from narrower ones: the only
  such edge, uint32 -> int64, becomes uint32 -> int32 (so ``promote_types(int32, uint32)`` is
  int32; array results are canonicalised to 32 bits anyway)."""
  lattice = dict(_LATTICE)
  if not x64:
    lattice[_u32] = [_i32, _u64]
  out: dict[Any, frozenset] = {}

  def visit(n):
    if n not in out:
      out[n] = frozenset({n}).union(*(visit(m) for m in lattice[n]))
    return out[n]

  for n in lattice:
    visit(n)
  return out


@functools.lru_cache(maxsize=None)
def _strict_upper_bounds() -> dict[Any, frozenset]:
  """The upper bounds under ``jax_numpy_dtype_promotion='strict'``, as JAX's strict lattice: a
  strong type promotes with nothing but itself; a weak int goes to any int, float or complex
  type, a weak float to any float or complex, a weak complex to any complex (bool only with
  itself)."""
  ints = {d for d in _LATTICE if not isinstance(d, _Weak) and _kind(d) in "iu"}
  floats = {d for d in _LATTICE if not isinstance(d, _Weak) and _kind(d) == "f"}
  cplx = {d for d in _LATTICE if not isinstance(d, _Weak) and _kind(d) == "c"}
  out: dict[Any, frozenset] = {d: frozenset({d}) for d in _LATTICE}
  out[C_WEAK] = frozenset({C_WEAK} | cplx)
  out[F_WEAK] = frozenset({F_WEAK} | floats) | out[C_WEAK]
  out[I_WEAK] = frozenset({I_WEAK} | ints) | out[F_WEAK]
  return out


def strict_promotion() -> bool:
  """Whether ``jax_numpy_dtype_promotion`` is 'strict' (in this thread)."""
  return config.jax_numpy_dtype_promotion == "strict"


def _join(nodes: frozenset) -> Any:
  return _join_x64(nodes, config.x64_enabled, strict_promotion())


@functools.lru_cache(maxsize=1024)
def _join_x64(nodes: frozenset, x64: bool, strict: bool = False) -> Any:
  """Least upper bound of a set of lattice nodes (in the strict lattice with ``strict``)."""
  ub = _strict_upper_bounds() if strict else _upper_bounds(x64)
  for n in nodes:
    if n not in ub:
      raise TypePromotionError(f"dtype {n} is not a valid dtype for type promotion.")
  common = frozenset.intersection(*(ub[n] for n in nodes))
  least = [c for c in common if common <= ub[c]]
  if len(least) == 1:
    return least[0]
  names = tuple(str(n) for n in nodes)
  if not least and strict:
    names = tuple(str(n.pytype) if isinstance(n, _Weak) else str(n) for n in nodes)
    raise TypePromotionError(
        f"Input dtypes {names} have no available implicit dtype promotion path when "
        "jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the desired output "
        "type, or set jax_numpy_dtype_promotion=standard.")
  if not least:
    if any(n in _custom_float_dtypes or n in _subbyte_int_dtypes for n in nodes):
      raise TypePromotionError(
          f"Input dtypes {names} have no available implicit dtype promotion path. To avoid "
          "unintended promotion, 8-bit (and narrower) floats and sub-byte integers do not "
          "support implicit promotion; cast explicitly, e.g. x.astype('float32').")
    raise TypePromotionError(
        f"Input dtypes {names} have no available implicit dtype promotion path. "
        "Try explicitly casting inputs to the desired output type.")
  raise AssertionError(f"promotion lattice is ill-formed: {names} join to {least}")


def _node(dt: np.dtype, weak: bool) -> Any:
  if not weak or dt == _b1:
    return dt
  return _weak_node_of_kind.get(_kind(dt), dt)


def _node_dtype(node: Any) -> np.dtype:
  return python_scalar_dtypes[node.pytype] if isinstance(node, _Weak) else node


def promote_types(a: Any, b: Any) -> np.dtype:
  """The dtype a binary operation casts ``a`` and ``b`` to (``jnp.promote_types``).

  The Python types int, float and complex are weak (``promote_types('uint8', int)`` is uint8);
  a weak result is reported as int64/float64/complex128.  The result is not canonicalised.
  """
  na = _weak_node_of_type.get(a) if any(a is t for t in _weak_python_types) else _np_dtype(a)
  nb = _weak_node_of_type.get(b) if any(b is t for t in _weak_python_types) else _np_dtype(b)
  return _node_dtype(_join(frozenset({na, nb})))


#: types whose instances carry an ``aval`` with the (valid, canonical) dtype and the weak type:
#: ``ourjax.array.Array`` registers itself, and ``core.Tracer``'s subclasses are found by MRO.
aval_types: set = set()
_scalar_pairs = {bool: (np.dtype(np.bool_), False), int: (np.dtype(np.int64), True),
                 float: (np.dtype(np.float64), True), complex: (np.dtype(np.complex128), True)}


def _dtype_and_weakness(x: Any) -> tuple[np.dtype, bool]:
  t = type(x)
  pair = _scalar_pairs.get(t)
  if pair is not None:
    return pair
  if t in aval_types:
    a = x.aval
    return a.dtype, a.weak_type
  if t is np.ndarray:
    return _checked(x.dtype, x), False
  weak = any(x is t for t in _weak_python_types) or is_weakly_typed(x)
  return dtype(x), weak


_result_type_cache: dict = {}


def result_type(*args: Any, return_weak_type_flag: bool = False):
  """The dtype of an operation on ``args`` under JAX's promotion rules, canonicalised.

  Each argument (value, array, tracer, dtype-like or Python type) contributes a dtype and a
  weakness: Python int/float/complex values and types, and values flagged ``weak_type``, are
  weak.  ``None`` stands for a (strong) float64.  The result is weak iff every input was weak
  (and it is not bool); a weak result takes the default dtype of its kind.  With
  ``return_weak_type_flag`` the result is ``(dtype, weak_type)``.
  """
  if not args:
    raise ValueError("at least one array or dtype is required")
  try:
    pairs = tuple([_dtype_and_weakness(np.float64 if a is None else a) for a in args])
  except TypeError:
    kd = _key_result_type(args)
    if kd is None:
      raise
    return (kd, False) if return_weak_type_flag else kd
  # the result depends only on the (dtype, weak) pairs and the x64 flag: cache it
  key = (pairs, config.x64_enabled, strict_promotion())
  r = _result_type_cache.get(key)
  if r is None:
    r = _result_type_of_pairs(pairs)
    if len(_result_type_cache) > 4096:
      _result_type_cache.clear()
    _result_type_cache[key] = r
  return r if return_weak_type_flag else r[0]


def _key_result_type(args):
  """The key dtype of ``args`` that are all typed PRNG keys (or key dtypes) of one
  implementation; None when none is; TypeError when keys meet other dtypes."""
  kds = [a if isinstance(a, KeyDType) else getattr(a, "dtype", None) for a in args]
  if not any(isinstance(d, KeyDType) for d in kds):
    return None
  if not all(isinstance(d, KeyDType) for d in kds) or len(set(kds)) != 1:
    raise TypeError("result_type: PRNG key dtypes do not promote with other dtypes; got "
                    f"{', '.join(str(d) for d in kds)}")
  return kds[0]


def _result_type_of_pairs(pairs):
  if strict_promotion() and not config.x64_enabled:
    # as JAX's result_type: strict promotion sees the canonical (32-bit) input dtypes, so a
    # NumPy float64 meets a float32 as float32
    pairs = [(canonicalize_dtype(d), w) for d, w in pairs]
  dts = [d for d, _ in pairs]
  weaks = [w for _, w in pairs]
  if len(pairs) == 1:
    out, weak = pairs[0]
  elif len(set(dts)) == 1 and not all(weaks):
    out, weak = dts[0], False  # same dtype everywhere (this also lets float0 through)
  elif all(weaks):
    # Join the strong counterparts and mark the result weak (weak int16 + weak int32 -> weak
    # int32, not the join of two i* nodes, which would lose the widths).
    # (weak values always promote with each other, also under strict promotion)
    out, weak = _node_dtype(_join_x64(frozenset(dts), config.x64_enabled)), True
  else:
    top = _join(frozenset(_node(d, w) for d, w in pairs))
    out, weak = _node_dtype(top), isinstance(top, _Weak)
  weak = weak and out != _b1
  if weak:
    out = _default_dtype_of_kind[_kind(out)]()
  else:
    out = canonicalize_dtype(out)
  return out, weak


# ---------------------------------------------------------------------------------------------
# Predicates and conversions.

def _scalar_type(x: Any) -> type:
  """The NumPy scalar type (or abstract scalar class, e.g. np.floating) ``x`` stands for."""
  if isinstance(x, type) and issubclass(x, np.generic):
    return x
  if not isinstance(x, (type, str, np.dtype)) and isinstance(getattr(x, "dtype", None), np.dtype):
    return x.dtype.type  # an array, tracer or abstract value
  return _np_dtype(x).type


_custom_float_types = frozenset(d.type for d in _custom_float_dtypes)
_subbyte_signed_types = frozenset(d.type for d in _subbyte_signed_dtypes)
_subbyte_unsigned_types = frozenset(d.type for d in _subbyte_unsigned_dtypes)


@functools.lru_cache(maxsize=1024)
def _issubdtype_types(a: type, b: type) -> bool:
  # ml_dtypes' scalar types do not sit in NumPy's class hierarchy: place them by hand.
  if a in _custom_float_types:
    return b in (a, np.floating, np.inexact, np.number, np.generic)
  if a in _subbyte_signed_types:
    return b in (a, np.signedinteger, np.integer, np.number, np.generic)
  if a in _subbyte_unsigned_types:
    return b in (a, np.unsignedinteger, np.integer, np.number, np.generic)
  return bool(np.issubdtype(a, b))


_issubdtype_of_dtype: dict = {}


def issubdtype(a: Any, b: Any) -> bool:
  """np.issubdtype, with ml_dtypes' floats under np.floating and sub-byte ints under np.integer,
  and PRNG key dtypes under ``prng_key`` and ``extended`` (see ``ourjax._keys``)."""
  if isinstance(a, np.dtype) and not isinstance(b, KeyDType):       # the common case (is_float(aval.dtype)...): one dict lookup
    try:
      return _issubdtype_of_dtype[a, b]
    except KeyError:
      r = _issubdtype_of_dtype[a, b] = _issubdtype_types(_scalar_type(a), _scalar_type(b))
      return r
    except TypeError:   # an unhashable b
      pass
  r = key_issubdtype(a, b)
  if r is not None:
    return r
  return _issubdtype_types(_scalar_type(a), _scalar_type(b))


_isdtype_kinds = {
    "bool": _bool_dtypes,
    "signed integer": _signed_dtypes,
    "unsigned integer": _unsigned_dtypes,
    "integral": _signed_dtypes | _unsigned_dtypes,
    "real floating": _float_dtypes,
    "complex floating": _complex_dtypes,
    "numeric": _signed_dtypes | _unsigned_dtypes | _float_dtypes | _complex_dtypes,
}


def isdtype(dtype_like: Any, kind: Any) -> bool:
  """Array-API ``isdtype``: whether ``dtype_like`` is of ``kind`` (a kind name such as
  'real floating', a dtype, or a tuple of these)."""
  dt = _np_dtype(dtype_like)
  options: set = set()
  for k in kind if isinstance(kind, tuple) else (kind,):
    if isinstance(k, str) and k in _isdtype_kinds:
      options |= _isdtype_kinds[k]
      continue
    try:
      options.add(_np_dtype(k))
    except InvalidDtypeError:
      if isinstance(k, str):
        raise ValueError(f"Unrecognized kind={k!r}; expected one of "
                         f"{list(_isdtype_kinds)} or a dtype") from None
      raise TypeError(f"Expected kind to be a dtype, string, or tuple; got kind={k!r}") from None
  return dt in options


def is_float(d: Any) -> bool:
  """Real floating point, including float16, bfloat16 and float8."""
  return issubdtype(d, np.floating)


def is_integer(d: Any) -> bool:
  """Signed or unsigned integer (not bool)."""
  return issubdtype(d, np.integer)


def is_complex(d: Any) -> bool:
  return issubdtype(d, np.complexfloating)


def is_inexact(d: Any) -> bool:
  return issubdtype(d, np.inexact)


def to_inexact_dtype(d: Any) -> np.dtype:
  """The floating dtype an integer or bool operand of a float-only function is converted to.

  As in JAX: bool and integers up to 32 bits give float32, 64-bit integers float64, then
  canonicalised; so with x64 off this is always the default float.  Inexact dtypes are returned
  unchanged.
  """
  dt = _np_dtype(d)
  if _kind(dt) in "biu":
    wide = dt in (_i64, _u64)
    return canonicalize_dtype(np.float64 if wide else np.float32)
  return dt


def to_complex_dtype(d: Any) -> np.dtype:
  """The complex dtype matching ``d``'s precision (complex128 only for 64-bit inputs)."""
  ft = to_inexact_dtype(d)
  return np.dtype(np.complex128 if ft in (_f64, _c128) else np.complex64)


def to_numeric_dtype(d: Any) -> np.dtype:
  """bool -> int32; any other dtype unchanged."""
  dt = _np_dtype(d)
  return _i32 if dt == _b1 else dt


def scalar_type_of(x: Any) -> type:
  """The Python scalar type (bool, int, float, complex) matching the dtype of ``x``."""
  k = _kind(dtype(x))
  try:
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[k]
  except KeyError:
    raise InvalidDtypeError(f"Invalid scalar value {x!r}") from None


def supports_inf(d: Any) -> bool:
  """Whether the dtype can represent infinity (the 'fn'/'fnuz' float8s and e8m0 cannot)."""
  dt = _np_dtype(d)
  if dt in _custom_float_dtypes and dt != _bf16:
    return not (dt.name.endswith("fn") or dt.name.endswith("fnuz") or dt.name.endswith("fnu"))
  return is_inexact(dt)


def _info_arg(x: Any):
  if isinstance(x, (str, type, np.dtype)):
    return x
  d = getattr(x, "dtype", None)
  return d if isinstance(d, np.dtype) else x


def finfo(d: Any):
  """Machine limits of a floating dtype (ml_dtypes.finfo, which covers bfloat16/float8 too)."""
  return ml_dtypes.finfo(_np_dtype(_info_arg(d)))


def iinfo(d: Any):
  """Machine limits of an integer dtype (ml_dtypes.iinfo, which covers int4 too)."""
  return ml_dtypes.iinfo(_np_dtype(_info_arg(d)))


def bit_width(d: Any) -> int:
  """Bits of one element: 8 x itemsize, except the sub-byte types (int4, uint2, float4_e2m1fn,
  ...), which NumPy stores one to a byte."""
  dt = np.dtype(d)
  if dt in _subbyte_int_dtypes:
    return int(ml_dtypes.iinfo(dt).bits)
  if dt in _custom_float_dtypes:
    return int(ml_dtypes.finfo(dt).bits)
  return 8 * dt.itemsize


@functools.lru_cache(maxsize=256)
def _short_name(dt: np.dtype) -> str:
  if dt == float0:
    return "float0"
  return (dt.name.replace("float", "f").replace("uint", "u").replace("int", "i")
          .replace("complex", "c"))


def short_name(d: Any) -> str:
  """Compact dtype name for printing jaxprs: f32, bf16, i8, u32, c64, bool, float0, f8_e4m3fn."""
  return _short_name(_np_dtype(d))
