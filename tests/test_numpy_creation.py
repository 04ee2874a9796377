"""Array creation against NumPy: array/asarray (weak types, nested lists, traced elements),
filled constructors, arange/linspace/logspace/geomspace dtype rules, eye/tri/tril/triu/diag,
meshgrid, indices, and the callable scalar types."""
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import ALL, NUMERIC, array_of, bf16, check, shapes

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


# ------------------------------------------------------------------------------------------------
# array / asarray


@pytest.mark.parametrize("value,dtype,weak", [
    (1, I32, True), (1.5, F32, True), (True, np.bool_, False), (1 + 2j, np.complex64, True),
    (np.int8(3), np.int8, False), (np.float64(2.5), F32, False), ([1, 2], I32, False),
    ([1, 2.5], F32, False), ([[True], [False]], np.bool_, False), ((1, 2), I32, False),
    (range(4), I32, False), (np.arange(3, dtype=np.int64), I32, False), ([], F32, False),
])
def test_array_dtypes_and_weak_types(value, dtype, weak):
  for fn in (jnp.array, jnp.asarray):
    out = fn(value)
    check(out, np.asarray(value).astype(dtype), dtype, weak=weak)


def test_array_mixed_list_keeps_strong_dtype():
  out = jnp.array([jnp.asarray(np.ones((), bf16)), 1.0])
  assert out.dtype == bf16
  check(jnp.array([np.float16(1), 2]), np.array([1, 2], np.float16))


@given(x=array_of(ALL), data=st.data())
def test_array_roundtrip(x, data):
  check(jnp.array(x), x)
  dt = data.draw(st.sampled_from(NUMERIC), label="dtype")
  with np.errstate(all="ignore"):
    ref = x.astype(np.float32).astype(dt) if x.dtype == bf16 else x.astype(dt)
  if x.dtype.kind == "f" and dt.kind in "iu" or x.dtype == bf16 and dt.kind in "iu":
    return   # out-of-range float -> int casts are implementation-defined
  check(jnp.array(x, dtype=dt), ref, dt)
  check(jnp.asarray(jnp.asarray(x), dtype=dt), ref, dt)


def test_array_options_and_errors():
  check(jnp.array(3.0, ndmin=2), np.array([[3.0]], np.float32))
  check(jnp.array([1, 2], ndmin=3), np.array([[[1, 2]]], np.int32))
  a = jnp.arange(3)
  assert jnp.asarray(a) is a
  check(jnp.array(a, copy=True), np.arange(3, dtype=np.int32))
  with pytest.raises(OverflowError):
    jnp.array(2 ** 40)
  with pytest.raises(OverflowError):
    jnp.array([2 ** 40])
  with pytest.raises(TypeError):
    jnp.array("hello")
  with pytest.raises(TypeError):
    jnp.array(np.array(["a"]))
  with pytest.raises(ValueError, match="None"):
    jnp.array([1, None])
  with pytest.warns(UserWarning, match="int64"):
    assert jnp.array([1], dtype=np.int64).dtype == np.int32


def test_array_of_traced_elements():
  f = ourjax.jit(lambda x, y: jnp.array([[x, y], [y, 1.0]]))
  check(f(np.float32(2), np.float32(3)), np.array([[2, 3], [3, 1]], np.float32))
  g = ourjax.jit(lambda x: jnp.asarray([x, 2 * x]))
  check(g(np.arange(3, dtype=np.int32)), np.array([np.arange(3), 2 * np.arange(3)], np.int32))


def test_jax_array_protocol():
  class Wrapper:
    def __jax_array__(self):
      return jnp.arange(3)
  check(jnp.asarray(Wrapper()), np.arange(3, dtype=np.int32))
  check(jnp.sin(Wrapper()), np.sin(np.arange(3)).astype(np.float32))


def test_copy():
  check(jnp.copy(np.arange(3.0)), np.arange(3.0, dtype=np.float32))


# ------------------------------------------------------------------------------------------------
# Filled constructors


@given(shape=shapes(max_side=3), dt=st.sampled_from([None] + ALL))
def test_zeros_ones_empty_full(shape, dt):
  exp_dt = F32 if dt is None else dt
  check(jnp.zeros(shape, dt), np.zeros(shape, exp_dt), exp_dt, weak=False)
  check(jnp.ones(shape, dt), np.ones(shape, exp_dt), exp_dt)
  assert jnp.empty(shape, dt).shape == shape and jnp.empty(shape, dt).dtype == exp_dt
  check(jnp.full(shape, 3, dt), np.full(shape, 3, exp_dt if dt is not None else I32),
        exp_dt if dt is not None else I32)


def test_shape_forms_and_errors():
  assert jnp.zeros(3).shape == (3,)
  assert jnp.zeros(np.int64(3)).shape == (3,)
  assert jnp.zeros([2, np.int32(3)]).shape == (2, 3)
  assert jnp.zeros(jnp.asarray(2)).shape == (2,)
  assert jnp.ones(()).shape == ()
  with pytest.raises(TypeError, match="data type|shape"):
    jnp.zeros(2, 3)
  with pytest.raises(TypeError):
    jnp.zeros((2, 1.5))
  with pytest.raises(TypeError, match="negative"):
    jnp.ones((-1,))
  # a traced size: JAX's plain TypeError about shapes (not a ConcretizationTypeError), with
  # the hint about jit, for the creation functions, eye/tri sizes and reshape alike
  for f in (lambda n: jnp.zeros(n), lambda n: jnp.ones((n, 2)), lambda n: jnp.eye(n),
            lambda n: jnp.tri(n), lambda n: jnp.zeros((2, 3)).reshape(n, 6)):
    with pytest.raises(TypeError, match=r"Shapes must be 1D sequences of concrete values of "
                       r"integer type.*\nIf using `jit`, try using `static_argnums`") as e:
      ourjax.jit(f)(1)
    assert not isinstance(e.value, ourjax.errors.ConcretizationTypeError)


def test_full_dtypes_and_broadcast():
  check(jnp.full((2,), 1.5), np.full((2,), 1.5, np.float32), weak=True)   # as lax.full
  check(jnp.full((2,), np.float32(1.5)), np.full((2,), 1.5, np.float32), weak=False)
  check(jnp.full((2,), True), np.full((2,), True))
  check(jnp.full((2, 3), np.arange(3, dtype=np.int8)), np.tile(np.arange(3, dtype=np.int8),
                                                              (2, 1)))
  check(jnp.full((2, 3), jnp.arange(3), dtype=jnp.float32), np.tile(np.arange(3.0), (2, 1)),
        np.float32)
  with pytest.raises(ValueError, match="Incompatible shapes"):
    jnp.full((2, 3), np.arange(2))


@given(x=array_of(ALL, lo=-5, hi=5), data=st.data())
def test_like_functions(x, data):
  dt = data.draw(st.sampled_from([None] + ALL), label="dtype")
  shape = data.draw(st.one_of(st.none(), shapes(max_side=3)), label="shape")
  exp_dt = x.dtype if dt is None else dt
  exp_shape = x.shape if shape is None else shape
  check(jnp.zeros_like(x, dt, shape), np.zeros(exp_shape, exp_dt), exp_dt)
  check(jnp.ones_like(x, dt, shape), np.ones(exp_shape, exp_dt), exp_dt)
  check(jnp.full_like(x, 1, dt, shape), np.full(exp_shape, 1, exp_dt), exp_dt)
  e = jnp.empty_like(x, dt, shape)
  assert e.shape == exp_shape and e.dtype == exp_dt


def test_like_weak_types():
  assert jnp.zeros_like(1.0).weak_type and jnp.zeros_like(1.0).dtype == F32
  assert not jnp.zeros_like(np.float32(1)).weak_type
  assert not jnp.ones_like(1.0, dtype=np.float16).weak_type
  check(jnp.full_like(np.zeros((2, 2), np.int8), np.array([1, 2])),
        np.array([[1, 2], [1, 2]], np.int8))


# ------------------------------------------------------------------------------------------------
# arange / linspace / logspace / geomspace


@pytest.mark.parametrize("args,kw,dtype", [
    ((5,), {}, I32), ((5.0,), {}, F32), ((2, 9), {}, I32), ((2, 9, 3), {}, I32),
    ((0, 1, 0.25), {}, F32), ((1.5,), {}, F32), ((-3,), {}, I32), ((10, 2, -3), {}, I32),
    ((5,), {"dtype": np.float16}, np.float16), ((0, 2, 0.5), {"dtype": bf16}, bf16),
    ((np.int8(4),), {}, np.int8), ((np.int16(1), 7), {}, np.int16),
    # the length from Python floats is NumPy's double-precision one (15), from float32 bounds
    # NumPy's float32 one (16)
    ((1.2, 4.8, 0.24), {}, F32), ((np.float32(1.2), np.float32(4.8), np.float32(0.24)), {}, F32),
])
def test_arange(args, kw, dtype):
  if dtype is None:
    with pytest.raises(Exception):
      np.asarray(jnp.arange(*args, **kw))
    return
  got = jnp.arange(*args, **kw)
  ref = np.arange(*args, **({} if "dtype" not in kw else {"dtype": np.float32})).astype(dtype)
  check(got, ref, dtype, weak=False)


_ARANGE_NUM = st.one_of(st.integers(-20, 20), st.integers(-40, 40).map(lambda v: v / 4))


@given(start=_ARANGE_NUM, stop=st.one_of(st.none(), _ARANGE_NUM),
       step=st.one_of(st.none(), _ARANGE_NUM.filter(lambda v: v != 0)),
       form=st.sampled_from(["positional", "keywords", "step_keyword"]))
def test_arange_argument_forms_match_numpy(start, stop, step, form):
  """Every way of passing start/stop/step gives NumPy's values: arange(5, step=2) counts from
  0 to 5 by 2 (start is then the stop), arange(a, stop=b, step=s), arange(a, b, s)."""
  if form == "positional":
    args, kw = tuple(v for v in (start, stop, step) if v is not None), {}
    if stop is None and step is not None:
      args, kw = (start,), {"step": step}
  elif form == "keywords":
    args, kw = (start,), {k: v for k, v in (("stop", stop), ("step", step)) if v is not None}
  else:
    args, kw = ((start,) if stop is None else (start, stop)), ({} if step is None else
                                                               {"step": step})
  ref = np.arange(*args, **kw)
  got = jnp.arange(*args, **kw)
  want_dt = F32 if ref.dtype.kind == "f" else I32
  assert got.dtype == want_dt, (args, kw, got.dtype)
  np.testing.assert_allclose(np.asarray(got), ref.astype(want_dt), rtol=1e-6, atol=1e-6,
                             err_msg=f"arange{args}{kw}")


def test_arange_errors_and_x64(x64):
  assert jnp.arange(3).dtype == np.int64
  assert jnp.arange(3.0).dtype == np.float64
  with pytest.raises(ValueError, match="scalars"):
    jnp.arange(np.arange(3))
  with pytest.raises(ourjax.errors.ConcretizationTypeError):
    ourjax.jit(lambda n: jnp.arange(n))(3)
  # a zero step: the length's division by zero, JAX's ZeroDivisionError ("float division by
  # zero" when a bound or the step is a float; NumPy's, for integer arguments)
  for args in [(0, 3, 0), (0.0, 3.0, 0.0), (-2, 5, 0), (0, 2.5, 0.0)]:
    with pytest.raises(ZeroDivisionError) as jnp_err:
      jnp.arange(*args)
    floats = any(isinstance(a, float) for a in args)
    if not floats:
      with pytest.raises(ZeroDivisionError):
        np.arange(*args)
    assert ("float" in str(jnp_err.value)) == floats
  with pytest.raises(ZeroDivisionError):
    jnp.arange(5, step=0)


@given(num=st.integers(0, 7), endpoint=st.booleans(), data=st.data())
def test_linspace(num, endpoint, data):
  shape = data.draw(shapes(max_dims=2, max_side=3), label="bounds shape")
  start = data.draw(array_of([F32], shape=shape, lo=-10, hi=10), label="start")
  stop = data.draw(array_of([F32], shape=shape[1:] if shape else (), lo=-10, hi=10),
                   label="stop")
  axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="axis")
  got, step = jnp.linspace(start, stop, num, endpoint=endpoint, retstep=True, axis=axis)
  with np.errstate(all="ignore"):
    ref, rstep = np.linspace(start, stop, num, endpoint=endpoint, retstep=True, axis=axis)
  check(got, ref.astype(np.float32), F32, rtol=1e-5, atol=1e-5)
  if num > 1 or not endpoint:
    check(step, np.asarray(rstep).astype(np.float32), F32, rtol=1e-5, atol=1e-5)
  else:
    assert np.isnan(np.asarray(step)).all()


def test_linspace_dtypes():
  check(jnp.linspace(0, 10, 5), np.linspace(0, 10, 5).astype(np.float32), F32)
  check(jnp.linspace(0, 10, 4, dtype=int), np.floor(np.linspace(0, 10, 4)).astype(np.int32))
  check(jnp.linspace(-10, 0, 4, dtype=np.int32), np.linspace(-10, 0, 4, dtype=np.int32))
  check(jnp.linspace(np.float16(0), 1, 3), np.linspace(0, 1, 3).astype(np.float16))
  check(jnp.linspace(0, 1, 1), np.array([0.0], np.float32))
  assert jnp.linspace(0, 1, 0).shape == (0,)
  # endpoints are exact
  out = np.asarray(jnp.linspace(0.1, 0.7, 7))
  assert out[0] == np.float32(0.1) and out[-1] == np.float32(0.7)
  with pytest.raises(ValueError, match="non-negative"):
    jnp.linspace(0, 1, -1)
  g = ourjax.grad(lambda s: jnp.sum(jnp.linspace(s, 2.0, 5)))(np.float32(0))
  check(g, np.float32(2.5))


@given(num=st.integers(0, 6), endpoint=st.booleans(), base=st.sampled_from([2.0, 10.0, 3.5]))
def test_logspace_geomspace(num, endpoint, base):
  check(jnp.logspace(-1, 2, num, endpoint=endpoint, base=base),
        np.logspace(-1, 2, num, endpoint=endpoint, base=base).astype(np.float32), rtol=1e-5)
  check(jnp.geomspace(2, 250, num, endpoint=endpoint),
        np.geomspace(2, 250, num, endpoint=endpoint).astype(np.float32), rtol=1e-5)
  check(jnp.geomspace(-1, -1000, num, endpoint=endpoint),
        np.geomspace(-1, -1000, num, endpoint=endpoint).astype(np.float32), rtol=1e-5)
  start, stop = np.array([1.0, 1000.0]), np.array([27.0, 1.0])
  check(jnp.geomspace(start, stop, 4, axis=1), np.geomspace(start, stop, 4, axis=1)
        .astype(np.float32), rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# eye / tri / tril / triu / diag


@given(n=st.integers(0, 5), m=st.one_of(st.none(), st.integers(0, 5)), k=st.integers(-6, 6),
       dt=st.sampled_from([None] + ALL))
def test_eye_tri(n, m, k, dt):
  exp_dt = F32 if dt is None else dt
  check(jnp.eye(n, m, k, dt), np.eye(n, m, k, dtype=exp_dt), exp_dt)
  check(jnp.tri(n, m, k, dt), np.tri(n, m, k, dtype=exp_dt), exp_dt)
  if m is None:
    check(jnp.identity(n, dt), np.identity(n, exp_dt), exp_dt)


def test_eye_traced_k():
  f = ourjax.jit(lambda k: jnp.eye(4, k=k))
  check(f(1), np.eye(4, k=1, dtype=np.float32))
  check(f(-2), np.eye(4, k=-2, dtype=np.float32))


@given(x=array_of(ALL, min_dims=2, max_dims=4, lo=-9, hi=9), k=st.integers(-4, 4))
def test_tril_triu(x, k):
  check(jnp.tril(x, k), np.tril(x, k))
  check(jnp.triu(x, k), np.triu(x, k))


@pytest.mark.parametrize("k", [-2 ** 33, 2 ** 33, -2 ** 31, 2 ** 31 - 1, 2 ** 31, -3, 2])
def test_tri_offsets_past_int32_with_x64(x64, k):
  # JAX: with x64 a Python int offset is int64 and the positions are compared in int64 (an
  # int32 sum overflowed at 2**31 - 1); a traced int64 offset too (eye's also)
  a = np.arange(12.0).reshape(3, 4)
  check(jnp.tri(4, 3, k), np.tri(4, 3, k, dtype=np.float32))
  check(jnp.tril(a, k), np.tril(a, k))
  check(jnp.triu(a, k), np.triu(a, k))
  check(ourjax.jit(lambda k: jnp.tri(4, 3, k))(np.int64(k)), np.tri(4, 3, k, dtype=np.float32))
  check(ourjax.jit(lambda k: jnp.eye(4, 3, k))(np.int64(k)), np.eye(4, 3, k, dtype=np.float64))


def test_tri_offset_past_int32_without_x64_is_an_overflow_error():
  for k in (-2 ** 33, 2 ** 31):        # (JAX's: the offset does not fit the default int)
    with pytest.raises(OverflowError):
      jnp.tri(4, 3, k)
  check(jnp.tri(4, 3, 2 ** 31 - 10), np.tri(4, 3, 2 ** 31 - 10, dtype=np.float32))


def test_tril_needs_2d():
  with pytest.raises(ValueError, match="tril.*2D"):
    jnp.tril(np.ones(3))


@given(x=array_of(NUMERIC, min_dims=1, max_dims=2, lo=-9, hi=9), k=st.integers(-4, 4))
def test_diag_diagflat(x, k):
  check(jnp.diag(x, k), np.diag(x, k))
  check(jnp.diagflat(x, k), np.diagflat(x, k))


def test_diag_errors():
  with pytest.raises(ValueError, match="1d or 2d"):
    jnp.diag(np.ones((2, 2, 2)))


# ------------------------------------------------------------------------------------------------
# meshgrid, indices, fromfunction


@given(sizes=st.lists(st.integers(0, 4), min_size=0, max_size=3),
       indexing=st.sampled_from(["xy", "ij"]), sparse=st.booleans())
def test_meshgrid(sizes, indexing, sparse):
  xs = [np.arange(n, dtype=np.float32) + i for i, n in enumerate(sizes)]
  got = jnp.meshgrid(*xs, indexing=indexing, sparse=sparse)
  ref = np.meshgrid(*xs, indexing=indexing, sparse=sparse)
  assert len(got) == len(ref)
  for g, r in zip(got, ref):
    check(g, r)


def test_meshgrid_errors():
  with pytest.raises(ValueError, match="1D"):
    jnp.meshgrid(np.ones((2, 2)))
  with pytest.raises(ValueError, match="indexing"):
    jnp.meshgrid(np.ones(2), indexing="xx")


@given(dims=st.lists(st.integers(0, 4), max_size=3), sparse=st.booleans())
def test_indices(dims, sparse):
  got = jnp.indices(dims, sparse=sparse)
  ref = np.indices(dims, sparse=sparse)
  if sparse:
    for g, r in zip(got, ref):
      check(g, r.astype(np.int32))
  else:
    check(got, ref.astype(np.int32))


def test_fromfunction():
  check(jnp.fromfunction(lambda i, j: i * 10 + j, (3, 4)),
        np.fromfunction(lambda i, j: i * 10 + j, (3, 4)).astype(np.float32))
  check(jnp.fromfunction(lambda i: i % 2 == 0, (5,), dtype=int),
        np.fromfunction(lambda i: i % 2 == 0, (5,), dtype=int))


# ------------------------------------------------------------------------------------------------
# Scalar types


def test_scalar_types():
  check(jnp.float32(3), np.float32(3), weak=False)
  check(jnp.int8(300 - 256), np.int8(44))
  check(jnp.bfloat16(1.5), np.array(1.5, bf16))
  check(jnp.bool_(1), np.bool_(True))
  check(jnp.float16([1, 2]), np.array([1, 2], np.float16))
  assert jnp.float32 == np.float32 and np.dtype(jnp.float32) == np.float32
  assert jnp.zeros(2, jnp.uint8).dtype == np.uint8
  assert isinstance(np.float32(1), jnp.float32)
  assert jnp.issubdtype(jnp.float32, jnp.floating)
  assert jnp.issubdtype(jnp.bfloat16, jnp.inexact)
  assert jnp.dtype(jnp.int16) == np.int16
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert jnp.int64(1).dtype == np.int32
    assert jnp.float_(1).dtype == np.float32


def test_dtype_functions(x64):
  assert jnp.result_type(np.int8, 1) == np.int8
  assert jnp.result_type(np.int8, np.uint8) == np.int16
  assert jnp.promote_types(np.int8, np.float16) == np.float16
  assert jnp.promote_types(bf16, np.float16) == np.float32
  assert jnp.can_cast(np.int8, np.int16) and not jnp.can_cast(np.float32, np.int32)
  assert jnp.finfo(jnp.bfloat16).bits == 16
  assert jnp.iinfo(jnp.int8).max == 127
  assert jnp.finfo(jnp.float32).eps == np.finfo(np.float32).eps


def test_subbyte_int_types_and_numpy_aliases():
  for name, lo, hi in (("int4", -8, 7), ("uint4", 0, 15), ("int2", -2, 1), ("uint2", 0, 3)):
    t = getattr(jnp, name)
    assert np.dtype(t).name == name and jnp.issubdtype(t, jnp.integer)
    assert (jnp.iinfo(t).min, jnp.iinfo(t).max) == (lo, hi)
    x = t(1)
    assert x.dtype == np.dtype(t) and not x.weak_type
    np.testing.assert_array_equal(np.asarray(jnp.array([1, 0], t), np.int32), [1, 0])
  with pytest.raises(ourjax.dtypes.TypePromotionError):
    jnp.int4(1) + jnp.float32(1)
  assert jnp.array_str(jnp.array([1.5, 2.0])) == "[1.5 2. ]"
  assert jnp.array_repr(jnp.arange(3)).endswith("([0, 1, 2], dtype=int32)")
  assert jnp.ComplexWarning is np.exceptions.ComplexWarning


# -- device= / out_sharding= place the result (as JAX's) -------------------------------------

def test_creation_functions_place_their_result(monkeypatch):
  monkeypatch.setenv("OURJAX_NUM_CPU_DEVICES", "2")
  monkeypatch.setitem(ourjax.config._values, "jax_platforms", "cpu")
  from ourjax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding
  d1 = ourjax.devices()[1]
  cases = [
      (lambda **kw: jnp.arange(5, **kw), np.arange(5)),
      (lambda **kw: jnp.zeros((2, 3), **kw), np.zeros((2, 3))),
      (lambda **kw: jnp.ones(3, **kw), np.ones(3)),
      (lambda **kw: jnp.full(2, 7.0, **kw), np.full(2, 7.0)),
      (lambda **kw: jnp.array([1, 2], **kw), np.array([1, 2])),
      (lambda **kw: jnp.asarray([1.5], **kw), np.array([1.5])),
      (lambda **kw: jnp.full_like(np.ones(2), 3, **kw), np.full(2, 3.0)),
      (lambda **kw: jnp.zeros_like(np.ones(2), **kw), np.zeros(2)),
      (lambda **kw: jnp.eye(2, **kw), np.eye(2)),
      (lambda **kw: jnp.linspace(0, 1, 3, **kw), np.linspace(0, 1, 3)),
      (lambda **kw: jnp.astype(jnp.ones(2), np.int32, **kw), np.ones(2, np.int32)),
      (lambda **kw: jnp.fft.fftfreq(4, **kw), np.fft.fftfreq(4)),
  ]
  for make, want in cases:
    for where in (d1, SingleDeviceSharding(d1)):
      out = make(device=where)
      assert out.devices() == {d1}
      np.testing.assert_allclose(out, want)
    assert make().devices() == {ourjax.devices()[0]}
    # under jit the keyword changes nothing (device_put passes tracers through)
    np.testing.assert_allclose(ourjax.jit(lambda: make(device=d1))(), want)
  # a Sharding over both devices splits the array
  sh = NamedSharding(ourjax.make_mesh((2,), ("x",)), P("x"))
  out = jnp.zeros((4, 3), device=sh)
  assert out.sharding == sh and len(out.addressable_shards) == 2
  np.testing.assert_array_equal(out, np.zeros((4, 3)))
