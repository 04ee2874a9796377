"""Tests of ourjax.dtypes: JAX's dtypes, canonicalisation and type promotion."""
import itertools
import warnings

import ml_dtypes
import numpy as np
import pytest

from ourjax import dtypes
from ourjax.config import config, enable_x64


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def x64(request):
  with enable_x64(request.param):
    yield request.param


@pytest.fixture
def x32():
  with enable_x64(False):
    yield


# ---------------------------------------------------------------------------------------------
# JAX's binary promotion table, copied from the "Type promotion semantics" page of JAX's docs.
# Names are the docs': kind letter + itemsize in bytes (u1 = uint8, f2 = float16, c8 =
# complex64), bf = bfloat16, and i*/f*/c* are Python int/float/complex (weakly typed values).
# A starred entry means the result is weakly typed.

_TABLE_TEXT = """
     b1  u1  u2  u4  u8  i1  i2  i4  i8  bf  f2  f4  f8  c8  c16 i*  f*  c*
b1   b1  u1  u2  u4  u8  i1  i2  i4  i8  bf  f2  f4  f8  c8  c16 i*  f*  c*
u1   u1  u1  u2  u4  u8  i2  i2  i4  i8  bf  f2  f4  f8  c8  c16 u1  f*  c*
u2   u2  u2  u2  u4  u8  i4  i4  i4  i8  bf  f2  f4  f8  c8  c16 u2  f*  c*
u4   u4  u4  u4  u4  u8  i8  i8  i8  i8  bf  f2  f4  f8  c8  c16 u4  f*  c*
u8   u8  u8  u8  u8  u8  f*  f*  f*  f*  bf  f2  f4  f8  c8  c16 u8  f*  c*
i1   i1  i2  i4  i8  f*  i1  i2  i4  i8  bf  f2  f4  f8  c8  c16 i1  f*  c*
i2   i2  i2  i4  i8  f*  i2  i2  i4  i8  bf  f2  f4  f8  c8  c16 i2  f*  c*
i4   i4  i4  i4  i8  f*  i4  i4  i4  i8  bf  f2  f4  f8  c8  c16 i4  f*  c*
i8   i8  i8  i8  i8  f*  i8  i8  i8  i8  bf  f2  f4  f8  c8  c16 i8  f*  c*
bf   bf  bf  bf  bf  bf  bf  bf  bf  bf  bf  f4  f4  f8  c8  c16 bf  bf  c8
f2   f2  f2  f2  f2  f2  f2  f2  f2  f2  f4  f2  f4  f8  c8  c16 f2  f2  c8
f4   f4  f4  f4  f4  f4  f4  f4  f4  f4  f4  f4  f4  f8  c8  c16 f4  f4  c8
f8   f8  f8  f8  f8  f8  f8  f8  f8  f8  f8  f8  f8  f8  c16 c16 f8  f8  c16
c8   c8  c8  c8  c8  c8  c8  c8  c8  c8  c8  c8  c8  c16 c8  c16 c8  c8  c8
c16  c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16 c16
i*   i*  u1  u2  u4  u8  i1  i2  i4  i8  bf  f2  f4  f8  c8  c16 i*  f*  c*
f*   f*  f*  f*  f*  f*  f*  f*  f*  f*  bf  f2  f4  f8  c8  c16 f*  f*  c*
c*   c*  c*  c*  c*  c*  c*  c*  c*  c*  c8  c8  c8  c16 c8  c16 c*  c*  c*
"""

_NAMES = {
    "b1": np.dtype(np.bool_),
    "u1": np.dtype(np.uint8), "u2": np.dtype(np.uint16),
    "u4": np.dtype(np.uint32), "u8": np.dtype(np.uint64),
    "i1": np.dtype(np.int8), "i2": np.dtype(np.int16),
    "i4": np.dtype(np.int32), "i8": np.dtype(np.int64),
    "bf": np.dtype(ml_dtypes.bfloat16), "f2": np.dtype(np.float16),
    "f4": np.dtype(np.float32), "f8": np.dtype(np.float64),
    "c8": np.dtype(np.complex64), "c16": np.dtype(np.complex128),
}
_WEAK_TYPES = {"i*": int, "f*": float, "c*": complex}
# What promote_types reports for a weak result (it does not canonicalise).
_WEAK_AS_DTYPE = {"i*": np.dtype(np.int64), "f*": np.dtype(np.float64),
                  "c*": np.dtype(np.complex128)}
# x64 off: what each 64-bit result is narrowed to, and the default dtype of a weak result.
_NARROW = {"u8": "u4", "i8": "i4", "f8": "f4", "c16": "c8"}
_WEAK_DEFAULT = {False: {"i*": "i4", "f*": "f4", "c*": "c8"},
                 True: {"i*": "i8", "f*": "f8", "c*": "c16"}}


def _parse_table():
  header, *rows = [line.split() for line in _TABLE_TEXT.strip().splitlines()]
  table = {}
  for row in rows:
    assert len(row) == len(header) + 1
    for col, entry in zip(header, row[1:]):
      table[row[0], col] = entry
  return header, table


_HEADER, _TABLE = _parse_table()


def _as_type_arg(name):
  """A promote_types/result_type argument: a strong dtype, or the Python type for i*/f*/c*."""
  return _WEAK_TYPES.get(name) or _NAMES[name]


def _weak_value(name):
  return {"i*": 3, "f*": 2.5, "c*": 1 + 2j}[name]


class FakeArray:
  """Stands in for an ourjax array or tracer: dtype, shape and weak_type attributes."""

  def __init__(self, dtype, shape=(), weak_type=False):
    self.dtype, self.shape, self.weak_type = np.dtype(dtype), shape, weak_type


class FakeTracer:
  """A value whose weak_type lives on its ``.aval``."""

  def __init__(self, dtype, shape=(), weak_type=False):
    self.aval = FakeArray(dtype, shape, weak_type)
    self.dtype, self.shape = self.aval.dtype, shape


def _expected_result(entry, x64_on):
  """(dtype, weak) that result_type should give for a table entry."""
  if entry in _WEAK_TYPES:
    return _NAMES[_WEAK_DEFAULT[x64_on][entry]], True
  if not x64_on:
    entry = _NARROW.get(entry, entry)
  return _NAMES[entry], False


def test_table_is_symmetric():
  for a, b in itertools.product(_HEADER, repeat=2):
    assert _TABLE[a, b] == _TABLE[b, a], (a, b)


@pytest.mark.parametrize("row", _HEADER)
def test_promote_types_table(row, x64):
  """promote_types is the lattice join (it does not canonicalise).  Without x64 JAX's lattice
  has uint32 -> int32 in place of uint32 -> int64 (no 64-bit type formed from narrower ones), so
  u4 with i1/i2/i4 gives i4 there."""
  bad = []
  for col in _HEADER:
    entry = _TABLE[row, col]
    if not x64 and {row, col} in ({"u4", "i1"}, {"u4", "i2"}, {"u4", "i4"}):
      entry = "i4"
    want = _WEAK_AS_DTYPE.get(entry) or _NAMES[entry]
    got = dtypes.promote_types(_as_type_arg(row), _as_type_arg(col))
    if not (isinstance(got, np.dtype) and got == want):
      bad.append((row, col, got, want))
  assert not bad


@pytest.mark.parametrize("row", _HEADER)
def test_result_type_table(row, x64):
  """result_type: the same join, canonicalised, with the weak flag; weak results take the
  default dtype of their kind.  Weak operands given as Python types, Python values, and weakly
  typed arrays/tracers of the default dtype."""
  bad = []
  for col in _HEADER:
    want = _expected_result(_TABLE[row, col], x64)
    forms = [(_as_type_arg(row), _as_type_arg(col))]
    if row in _WEAK_TYPES or col in _WEAK_TYPES:
      def value(n):
        return _weak_value(n) if n in _WEAK_TYPES else np.zeros((2,), _NAMES[n])

      def weak_array(n, cls):
        if n not in _WEAK_TYPES:
          return cls(_NAMES[n], (2,))
        return cls(_NAMES[_WEAK_DEFAULT[x64][n]], (), weak_type=True)

      forms += [(value(row), value(col)), (weak_array(row, FakeArray), weak_array(col, FakeArray)),
                (weak_array(row, FakeTracer), weak_array(col, FakeTracer))]
    for a, b in forms:
      got = dtypes.result_type(a, b, return_weak_type_flag=True)
      if got != want:
        bad.append((row, col, type(a).__name__, got, want))
  assert not bad


# ---------------------------------------------------------------------------------------------
# result_type: cases spelled out.

def test_result_type_examples(x32):
  rt = lambda *a: dtypes.result_type(*a, return_weak_type_flag=True)
  f32, i32 = np.dtype("float32"), np.dtype("int32")
  assert rt(np.zeros(3, np.float32), 1.0) == (f32, False)
  assert rt(np.zeros(3, np.int32), 1.0) == (f32, True)
  assert rt(np.zeros(3, ml_dtypes.bfloat16), 1) == (np.dtype(ml_dtypes.bfloat16), False)
  assert rt(np.zeros(3, np.uint8), 1) == (np.dtype("uint8"), False)
  assert rt(np.zeros(3, np.float16), 1j) == (np.dtype("complex64"), False)
  assert rt(np.bool_(True), 1) == (i32, True)
  assert rt(True, False) == (np.dtype(bool), False)   # Python bool is not weak
  assert rt(True, 1) == (i32, True)
  assert rt(1, 2.0) == (f32, True)
  assert rt(3) == (i32, True)
  assert rt(np.float64(1.0)) == (f32, False)           # NumPy scalars are strong
  assert rt(np.int16(1), 1) == (np.dtype("int16"), False)
  assert rt(np.int16(1), np.array(1)) == (i32, False)  # a NumPy array is strong int64
  assert rt("float32", "int32") == (f32, False)
  assert rt(np.uint16, np.dtype("int32")) == (i32, False)
  assert rt(None) == (f32, False)                      # None stands for float64, canonicalised
  assert rt(None, np.float16) == (f32, False)
  assert dtypes.result_type(np.float32) == f32
  assert rt("uint32", "int32") == (i32, False)         # joins to int64, narrowed
  assert rt("uint64", "int64") == (f32, True)          # the join is f*


def test_result_type_x64(x64):
  rt = lambda *a: dtypes.result_type(*a, return_weak_type_flag=True)
  f, i = dtypes.default_float_dtype(), dtypes.default_int_dtype()
  assert rt(1) == (i, True)
  assert rt(1.0) == (f, True)
  assert rt("float64") == (f, False)
  assert rt("uint32", "int32") == (np.dtype("int64" if x64 else "int32"), False)
  assert rt(np.zeros(2, np.float16), 1.0) == (np.dtype("float16"), False)


def test_result_type_all_weak_keeps_width_of_strong_counterparts(x32):
  # weak int16 + weak int32: join of the strong dtypes (int32), then weak -> default int.
  a = FakeArray("int16", weak_type=True)
  b = FakeArray("int32", weak_type=True)
  assert dtypes.result_type(a, b, return_weak_type_flag=True) == (np.dtype("int32"), True)
  # A lone weak bfloat16 value: weak, so the default float (as JAX's result_type does).
  w = FakeArray(ml_dtypes.bfloat16, weak_type=True)
  assert dtypes.result_type(w, return_weak_type_flag=True) == (np.dtype("float32"), True)
  # ...but a weak bfloat16 meeting a strong float16 is an f* meeting f16.
  assert dtypes.result_type(w, np.float16) == np.dtype("float16")


def test_result_type_weak_bool_is_strong(x32):
  b = FakeArray(bool, weak_type=True)
  assert dtypes.result_type(b, return_weak_type_flag=True) == (np.dtype(bool), False)
  assert dtypes.result_type(b, 1, return_weak_type_flag=True) == (np.dtype("int32"), True)


def test_result_type_errors(x32):
  with pytest.raises(ValueError):
    dtypes.result_type()
  f0 = np.zeros((2,), dtypes.float0)
  assert dtypes.result_type(f0) == dtypes.float0
  assert dtypes.result_type(f0, f0) == dtypes.float0
  for other in (np.float32, 1.0, np.int32, bool):
    with pytest.raises(TypeError):
      dtypes.result_type(f0, other)
    with pytest.raises(ValueError):
      dtypes.result_type(f0, other)
  with pytest.raises(dtypes.InvalidDtypeError):
    dtypes.result_type(np.array(["a"]), 1)
  with pytest.raises(dtypes.InvalidDtypeError):
    dtypes.result_type(object(), 1)


# ---------------------------------------------------------------------------------------------
# Narrow floats, sub-byte ints, float0.

F8 = [np.dtype(getattr(ml_dtypes, n)) for n in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz")]


def test_float8_names_exist():
  for d in F8:
    assert np.dtype(getattr(dtypes, d.name)) == d
  for n in ("float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "int4", "uint4"):
    if hasattr(ml_dtypes, n):
      assert getattr(dtypes, n) is getattr(ml_dtypes, n)


@pytest.mark.parametrize("f8", F8, ids=lambda d: d.name)
def test_float8_promotion(f8, x32):
  # f8 sits just above f*: Python scalars, bool and every integer give way to it ...
  for other in (float, int, np.bool_, np.int8, np.uint64, np.int64):
    assert dtypes.promote_types(f8, other) == f8
    assert dtypes.promote_types(other, f8) == f8
  assert dtypes.result_type(np.zeros(2, f8), 1.0) == f8
  assert dtypes.promote_types(f8, f8) == f8
  # ... but nothing is above it: no implicit promotion to another float.
  for other in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, complex):
    with pytest.raises(dtypes.TypePromotionError, match="8-bit"):
      dtypes.promote_types(f8, other)
  for g in F8:
    if g != f8:
      with pytest.raises(dtypes.TypePromotionError):
        dtypes.promote_types(f8, g)


def test_subbyte_int_promotion():
  i4 = np.dtype(ml_dtypes.int4)
  assert dtypes.promote_types(i4, int) == i4
  assert dtypes.promote_types(i4, bool) == i4
  with pytest.raises(dtypes.TypePromotionError):
    dtypes.promote_types(i4, np.int8)
  with pytest.raises(dtypes.TypePromotionError):
    dtypes.promote_types(i4, ml_dtypes.uint4)


def test_float0():
  assert dtypes.float0 == np.dtype([("float0", np.void, 0)])
  assert dtypes.float0.itemsize == 0
  assert dtypes.dtype(dtypes.float0) == dtypes.float0
  assert dtypes.canonicalize_dtype(dtypes.float0) == dtypes.float0
  for other in (np.float32, np.int32, int, float, bool, dtypes.float0):
    with pytest.raises(TypeError):
      dtypes.promote_types(dtypes.float0, other)
  assert not dtypes.is_float(dtypes.float0)
  assert not dtypes.is_integer(dtypes.float0)


_ALL_NODES = ([*_NAMES.values(), int, float, complex, *F8, np.dtype(ml_dtypes.int4)])


def test_join_laws():
  """Commutative, idempotent, an upper bound, and associative wherever both sides exist."""
  def join(a, b):
    try:
      return dtypes.promote_types(a, b)
    except dtypes.TypePromotionError:
      return None

  for a, b in itertools.product(_ALL_NODES, repeat=2):
    assert join(a, b) == join(b, a)
  for a in _ALL_NODES:
    if not isinstance(a, type):
      assert join(a, a) == a
  # Associativity over strong dtypes, skipping triples where an intermediate join is weak (it
  # comes back from promote_types as a 64-bit dtype, which would be strong if fed back in);
  # both orders also agree with the n-ary result_type.
  strong = [n for n in _ALL_NODES if not isinstance(n, type)]

  def weak(a, b):
    return dtypes.result_type(a, b, return_weak_type_flag=True)[1]

  with enable_x64(True):
    for a, b, c in itertools.product(strong, repeat=3):
      ab, bc = join(a, b), join(b, c)
      if ab is None or bc is None or weak(a, b) or weak(b, c):
        continue
      left, right = join(ab, c), join(a, bc)
      assert left == right, (a, b, c)
      if left is not None:
        assert dtypes.result_type(a, b, c) == left, (a, b, c)


# ---------------------------------------------------------------------------------------------
# Canonicalisation and defaults.

_CANON = [
    ("int64", "int32", "int64"), ("uint64", "uint32", "uint64"),
    ("float64", "float32", "float64"), ("complex128", "complex64", "complex128"),
    ("int32", "int32", "int32"), ("uint8", "uint8", "uint8"), ("float16", "float16", "float16"),
    ("bool", "bool", "bool"), ("complex64", "complex64", "complex64"),
    (int, "int32", "int64"), (float, "float32", "float64"), (complex, "complex64", "complex128"),
    (bool, "bool", "bool"), (np.float64, "float32", "float64"), (np.dtype("int64"), "int32", "int64"),
    (ml_dtypes.bfloat16, "bfloat16", "bfloat16"), ("bfloat16", "bfloat16", "bfloat16"),
    ("float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn"),
]


@pytest.mark.parametrize("src,off,on", _CANON, ids=lambda v: getattr(v, "__name__", str(v)))
def test_canonicalize_dtype(src, off, on):
  with enable_x64(False):
    got = dtypes.canonicalize_dtype(src)
    assert isinstance(got, np.dtype) and got == np.dtype(off)
  with enable_x64(True):
    assert dtypes.canonicalize_dtype(src) == np.dtype(on)


def test_canonicalize_follows_config_update():
  old = config.read("jax_enable_x64")
  try:
    config.update("jax_enable_x64", True)
    assert dtypes.canonicalize_dtype("float64") == np.dtype("float64")
    assert dtypes.default_int_dtype() == np.dtype("int64")
    config.update("jax_enable_x64", False)
    assert dtypes.canonicalize_dtype("float64") == np.dtype("float32")
    assert dtypes.default_int_dtype() == np.dtype("int32")
  finally:
    config.update("jax_enable_x64", old)


def test_canonicalize_invalid():
  with pytest.raises(dtypes.InvalidDtypeError, match="not_a_dtype"):
    dtypes.canonicalize_dtype("not_a_dtype")


def test_defaults(x64):
  w = 64 if x64 else 32
  assert dtypes.default_int_dtype() == np.dtype(f"int{w}")
  assert dtypes.default_uint_dtype() == np.dtype(f"uint{w}")
  assert dtypes.default_float_dtype() == np.dtype(f"float{w}")
  assert dtypes.default_complex_dtype() == np.dtype(f"complex{2 * w}")


# ---------------------------------------------------------------------------------------------
# dtype(), weak types, Python scalars.

def test_dtype_of_python_scalars(x32):
  for v, want in [(True, "bool"), (1, "int64"), (1.5, "float64"), (1j, "complex128"),
                  (bool, "bool"), (int, "int64"), (float, "float64"), (complex, "complex128")]:
    assert dtypes.dtype(v) == np.dtype(want)
  for v, want in [(True, "bool"), (1, "int32"), (1.5, "float32"), (1j, "complex64")]:
    assert dtypes.dtype(v, canonicalize=True) == np.dtype(want)
  with enable_x64(True):
    assert dtypes.dtype(1, canonicalize=True) == np.dtype("int64")


def test_dtype_of_arrays_and_dtype_likes(x32):
  cases = [
      (np.float32(1), "float32"), (np.float64(1), "float64"), (np.int8(1), "int8"),
      (np.zeros(2, np.uint16), "uint16"), (np.zeros(2, ml_dtypes.bfloat16), "bfloat16"),
      (FakeArray("float16"), "float16"), (FakeTracer("int64", weak_type=True), "int64"),
      ("float32", "float32"), ("bfloat16", "bfloat16"), ("float8_e5m2", "float8_e5m2"),
      (np.float32, "float32"), (ml_dtypes.bfloat16, "bfloat16"), (np.dtype("c8"), "complex64"),
      ([1.0, 2.0], "float64"),
  ]
  for x, want in cases:
    assert dtypes.dtype(x) == np.dtype(want), x
  assert dtypes.dtype(np.float64(1), canonicalize=True) == np.dtype("float32")
  assert dtypes.dtype("int64", canonicalize=True) == np.dtype("int32")
  assert dtypes.dtype(FakeArray("int64"), canonicalize=True) == np.dtype("int32")


@pytest.mark.parametrize("bad", ["not_a_dtype", np.array(["x"]), np.dtype("U3"), object(),
                                 np.dtype(object), None, np.datetime64(1, "D")],
                         ids=["str", "strarray", "U", "object", "O", "None", "datetime"])
def test_dtype_invalid(bad):
  with pytest.raises(dtypes.InvalidDtypeError) as info:
    dtypes.dtype(bad)
  assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
  if isinstance(bad, str):
    assert bad in str(info.value)


def test_is_weakly_typed():
  for v in (1, 2.0, 3j):
    assert dtypes.is_weakly_typed(v)
  for v in (True, np.float64(1.0), np.int32(1), np.array(1), np.array(1.0), "x", int, float,
            FakeArray("float32")):
    assert not dtypes.is_weakly_typed(v), v
  assert dtypes.is_weakly_typed(FakeArray("float32", weak_type=True))
  assert dtypes.is_weakly_typed(FakeTracer("int32", weak_type=True))
  assert not dtypes.is_weakly_typed(FakeTracer("int32", weak_type=False))


def test_is_python_scalar():
  for v in (True, 1, 1.0, 1j):
    assert dtypes.is_python_scalar(v)
  for v in (np.float32(1), np.float64(1), np.array(1.0), FakeArray("float32"),
            FakeArray("float32", (2,), weak_type=True), int):
    assert not dtypes.is_python_scalar(v)
  assert dtypes.is_python_scalar(FakeArray("float32", (), weak_type=True))
  assert dtypes.is_python_scalar(FakeTracer("int32", (), weak_type=True))


def test_python_scalar_dtypes():
  assert dtypes.python_scalar_dtypes == {bool: np.bool_, int: np.int64, float: np.float64,
                                         complex: np.complex128}


def test_scalar_type_names():
  pairs = {"bool_": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32,
           "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
           "uint64": np.uint64, "float16": np.float16, "float32": np.float32,
           "float64": np.float64, "complex64": np.complex64, "complex128": np.complex128,
           "bfloat16": ml_dtypes.bfloat16}
  for name, t in pairs.items():
    assert getattr(dtypes, name) is t


# ---------------------------------------------------------------------------------------------
# User dtype arguments.

def test_check_user_dtype(x32):
  assert dtypes.check_user_dtype(int, "zeros") == np.dtype("int32")
  assert dtypes.check_user_dtype(float, "zeros") == np.dtype("float32")
  assert dtypes.check_user_dtype(bool, "zeros") == np.dtype("bool")
  assert dtypes.check_user_dtype("bfloat16", "zeros") == np.dtype(ml_dtypes.bfloat16)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert dtypes.check_user_dtype(np.int16, "zeros") == np.dtype("int16")
  with pytest.warns(UserWarning, match="float64.*zeros.*float32"):
    assert dtypes.check_user_dtype("float64", "zeros") == np.dtype("float32")
  with enable_x64(True), warnings.catch_warnings():
    warnings.simplefilter("error")
    assert dtypes.check_user_dtype("float64", "zeros") == np.dtype("float64")
    assert dtypes.check_user_dtype(int, "zeros") == np.dtype("int64")


@pytest.mark.parametrize("bad", ["not_a_dtype", "U5", object, np.dtype("datetime64[s]"), None])
def test_check_user_dtype_invalid(bad):
  with pytest.raises(dtypes.InvalidDtypeError) as info:
    dtypes.check_user_dtype(bad, "my_fun")
  assert "my_fun" in str(info.value)
  if bad is not None:
    assert str(bad if isinstance(bad, str) else bad) in str(info.value) or \
        repr(bad) in str(info.value)


def test_check_user_dtype_rejects_arrays():
  with pytest.raises(dtypes.InvalidDtypeError, match=r"arr\.dtype"):
    dtypes.check_user_dtype(np.zeros(2), "ones")


# ---------------------------------------------------------------------------------------------
# Predicates, info, names.

def test_issubdtype_custom_floats():
  for t in (ml_dtypes.bfloat16, np.dtype(ml_dtypes.bfloat16), "bfloat16", *F8):
    assert dtypes.issubdtype(t, np.floating)
    assert dtypes.issubdtype(t, np.inexact)
    assert dtypes.issubdtype(t, np.number)
    assert dtypes.issubdtype(t, np.generic)
    assert dtypes.issubdtype(t, t)
    assert not dtypes.issubdtype(t, np.integer)
    assert not dtypes.issubdtype(t, np.complexfloating)
    assert not dtypes.issubdtype(t, np.float32)
  assert not dtypes.issubdtype(ml_dtypes.bfloat16, np.float16)
  assert not dtypes.issubdtype(np.float32, ml_dtypes.bfloat16)
  assert dtypes.issubdtype(np.zeros(2, ml_dtypes.bfloat16), np.floating)
  assert dtypes.issubdtype(FakeArray(ml_dtypes.bfloat16), np.floating)
  assert dtypes.issubdtype(ml_dtypes.int4, np.signedinteger)
  assert dtypes.issubdtype(ml_dtypes.uint4, np.unsignedinteger)
  assert not dtypes.issubdtype(ml_dtypes.uint4, np.signedinteger)


def test_issubdtype_matches_numpy():
  types = [np.bool_, np.int8, np.uint32, np.int64, np.float16, np.float32, np.float64,
           np.complex64, np.complex128]
  abstract = [np.generic, np.number, np.integer, np.signedinteger, np.unsignedinteger,
              np.inexact, np.floating, np.complexfloating, np.bool_, float, int, complex]
  for a in types:
    for b in types + abstract:
      assert dtypes.issubdtype(a, b) == np.issubdtype(a, b), (a, b)


def test_kind_predicates():
  for d in ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", float):
    assert dtypes.is_float(d) and dtypes.is_inexact(d)
    assert not dtypes.is_integer(d) and not dtypes.is_complex(d)
  for d in ("int8", "uint8", "int64", "uint64", "int4", int):
    assert dtypes.is_integer(d) and not dtypes.is_float(d) and not dtypes.is_inexact(d)
  for d in ("complex64", "complex128", complex):
    assert dtypes.is_complex(d) and dtypes.is_inexact(d) and not dtypes.is_float(d)
  for d in ("bool", bool, np.bool_):
    assert not (dtypes.is_integer(d) or dtypes.is_float(d) or dtypes.is_complex(d))


def test_isdtype():
  assert dtypes.isdtype(np.float32, "real floating")
  assert dtypes.isdtype(ml_dtypes.bfloat16, "real floating")
  assert dtypes.isdtype(np.int8, ("bool", "signed integer"))
  assert not dtypes.isdtype(np.uint8, "signed integer")
  assert dtypes.isdtype(np.uint8, "integral") and dtypes.isdtype(np.uint8, "numeric")
  assert not dtypes.isdtype(np.bool_, "numeric")
  assert dtypes.isdtype(np.complex64, "complex floating")
  assert dtypes.isdtype(np.float32, np.float32) and not dtypes.isdtype(np.float32, np.float64)
  with pytest.raises(ValueError):
    dtypes.isdtype(np.float32, "floaty")


def test_to_inexact_dtype(x64):
  f = "float64" if x64 else "float32"
  for d, want in [("bool", "float32"), ("int8", "float32"), ("uint16", "float32"),
                  ("int32", "float32"), ("int64", f), ("uint64", f), ("float16", "float16"),
                  ("bfloat16", "bfloat16"), ("float32", "float32"), ("complex64", "complex64")]:
    assert dtypes.to_inexact_dtype(d) == np.dtype(want), d
  with enable_x64(False):
    for d in ("bool", "int8", "int32", "int64", "uint64"):
      assert dtypes.to_inexact_dtype(d) == dtypes.default_float_dtype()


def test_finfo_iinfo():
  fi = dtypes.finfo(ml_dtypes.bfloat16)
  assert fi.bits == 16 and fi.eps == 2.0 ** -7 and fi.nmant == 7
  assert float(fi.max) == pytest.approx(3.3895313892515355e38)
  assert dtypes.finfo("bfloat16").eps == fi.eps
  assert dtypes.finfo(np.zeros(2, ml_dtypes.bfloat16)).bits == 16
  assert dtypes.finfo(FakeArray(ml_dtypes.bfloat16)).bits == 16
  assert float(dtypes.finfo(ml_dtypes.float8_e4m3fn).max) == 448.0
  assert dtypes.finfo(np.float32).eps == np.finfo(np.float32).eps
  assert dtypes.finfo(float).bits == 64
  assert dtypes.iinfo(np.int8).max == 127 and dtypes.iinfo(np.uint32).max == 2 ** 32 - 1
  assert dtypes.iinfo(ml_dtypes.int4).min == -8


def test_short_name():
  cases = {np.float32: "f32", np.float64: "f64", np.float16: "f16", ml_dtypes.bfloat16: "bf16",
           np.int8: "i8", np.int32: "i32", np.uint8: "u8", np.uint32: "u32",
           np.complex64: "c64", np.complex128: "c128", np.bool_: "bool",
           dtypes.float0: "float0", ml_dtypes.float8_e4m3fn: "f8_e4m3fn",
           ml_dtypes.float8_e5m2: "f8_e5m2", "int64": "i64", "uint64": "u64"}
  for d, want in cases.items():
    assert dtypes.short_name(d) == want
    assert dtypes.short_name(np.dtype(d)) == want
