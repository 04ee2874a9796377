"""Behaviours JAX's own test files check (jaxsuite, issue #18) that ourjax lacked: each against
NumPy or JAX's documented semantics."""
import warnings

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


# -- jax_numpy_rank_promotion -----------------------------------------------------------------

def test_rank_promotion_allow_broadcasts_as_numpy():
  with ourjax.numpy_rank_promotion("allow"):
    out = jnp.ones(2) + jnp.ones((1, 2))
  np.testing.assert_array_equal(out, np.ones(2) + np.ones((1, 2)))


def test_rank_promotion_raise_refuses_different_ranks_but_not_scalars():
  with ourjax.numpy_rank_promotion("raise"):
    with pytest.raises(ValueError, match=r"add on shapes \(2,\) \(1, 2\).*"
                                         r"jax_numpy_rank_promotion='raise'"):
      jnp.ones(2) + jnp.ones((1, 2))
    # rank 0 never counts, nor do operands of one rank that broadcast
    np.testing.assert_array_equal(jnp.ones(2) + 3, np.full(2, 4.0))
    np.testing.assert_array_equal(jnp.ones((3, 1)) * jnp.ones((1, 2)), np.ones((3, 2)))
  # the option is part of jit's cache key: a function traced under 'allow' raises under 'raise'
  f = ourjax.jit(lambda a, b: a - b)
  assert f(jnp.ones(2), jnp.ones((1, 2))).shape == (1, 2)
  with ourjax.numpy_rank_promotion("raise"):
    with pytest.raises(ValueError, match="subtract"):
      f(jnp.ones(2), jnp.ones((1, 2)))


def test_rank_promotion_warn_and_decorator_use():
  with ourjax.numpy_rank_promotion("warn"):
    with pytest.warns(UserWarning, match=r"rank promotion for multiply on shapes \(2,\) "
                                         r"\(4, 1, 2\)"):
      out = jnp.ones(2) * jnp.ones((4, 1, 2))
    assert out.shape == (4, 1, 2)
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      jnp.ones(2) + 3.0

  @ourjax.numpy_rank_promotion("raise")
  def g():
    return jnp.ones(2) * jnp.ones((3, 2))
  for _ in range(2):   # the decorator applies on every call
    with pytest.raises(ValueError):
      g()
  with pytest.raises(ValueError, match="allow"):
    ourjax.config.update("jax_numpy_rank_promotion", "sometimes")


# -- jnp.arange: an iota (times the step, plus the start), as JAX ------------------------------

@pytest.mark.parametrize("args,kw", [((5,), {}), ((1, 5), {}), ((1, 9, 2), {}), ((10, 0, -3), {}),
                                     ((1.2, 4.8, 0.24), {}), ((0.0, 1.0, 0.1), {}),
                                     ((5.5,), {}), ((0, 10, 3), {"dtype": np.float16}),
                                     ((0, 5), {"dtype": np.uint8}), ((-3, 7), {})])
def test_arange_values_lengths_and_dtypes(args, kw):
  out = jnp.arange(*args, **kw)
  ref = np.arange(*args)
  assert out.shape == ref.shape
  want = kw.get("dtype", np.int32 if ref.dtype.kind == "i" else np.float32)
  assert out.dtype == want
  # JAX's values: start + step * i in the (at least float32) result dtype
  np.testing.assert_allclose(np.asarray(out, np.float64), ref, rtol=2e-6 if
                             want != np.float16 else 1e-3, atol=1e-6)


def test_arange_is_traced_as_an_iota_not_a_constant():
  prims = lambda f: [e.primitive.name for e in ourjax.make_jaxpr(f)().jaxpr.eqns]
  assert prims(lambda: jnp.arange(5)) == ["iota"]
  assert prims(lambda: jnp.arange(1, 5)) == ["iota", "add"]
  assert prims(lambda: jnp.arange(1.0, 5.0, 0.5)) == ["iota", "mul", "add"]
  with pytest.raises(TypeError, match="iota does not accept dtype bool"):
    jnp.arange(3, dtype=bool)


# -- astype(copy=...) and the messages of tobytes()/tolist() under jit -------------------------

def test_astype_copy_true_gives_a_new_buffer():
  x = jnp.arange(5, dtype="int32")
  assert x.astype("int32") is x
  y = x.astype("int32", copy=True)
  assert y is not x
  y.delete()
  assert not x.is_deleted()
  np.testing.assert_array_equal(x, np.arange(5))
  prims = [e.primitive.name for e in
           ourjax.make_jaxpr(lambda a: jnp.astype(a, "float32", copy=True))(x).jaxpr.eqns]
  assert prims == ["convert_element_type", "copy"]


@pytest.mark.parametrize("method", ["tobytes", "tolist"])
def test_concrete_methods_under_jit_say_which_method(method):
  f = ourjax.jit(lambda x: getattr(x, method)())
  with pytest.raises(ourjax.errors.ConcretizationTypeError,
                     match=rf"The {method}\(\) method was called on traced array with shape "
                           r"int32\[3,4\]"):
    f(np.arange(12, dtype=np.int32).reshape(3, 4))


# -- jax_default_matmul_precision takes the dot-algorithm presets' names, as JAX --------------

def test_default_matmul_precision_takes_dot_algorithm_preset_names():
  from ourjax import lax
  rng = np.random.default_rng(0)
  a = rng.standard_normal((3, 4)).astype(np.float32)
  b = rng.standard_normal((4, 5)).astype(np.float32)
  for name in ("F32_F32_F32", "BF16_BF16_F32"):
    with ourjax.default_matmul_precision(name):
      got = lax.dot(a, b)
      want = lax.dot(a, b, precision=name)      # the same as naming the algorithm explicitly
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
      np.testing.assert_allclose(np.asarray(a @ jnp.asarray(b)), a.astype(np.float64) @ b,
                                 rtol=1e-2, atol=1e-2)
  for bad in ("f32_f32_f32", "bogus"):
    with pytest.raises(ValueError, match="new enum value must be None or in .*F32_F32_F32"):
      ourjax.config.update("jax_default_matmul_precision", bad)


def test_traced_python_int_index_is_made_a_strong_int32():
  jaxpr = ourjax.make_jaxpr(lambda x, i: x[i])(jnp.ones((4,)), 2)
  prims = [e.primitive.name for e in jaxpr.jaxpr.eqns]
  assert prims[0] == "convert_element_type" and prims[-2:] == ["dynamic_slice", "squeeze"]
  f = ourjax.jit(lambda x, i: x[i])
  x = np.arange(4.0)
  for i in (0, 3, -1, -4):
    assert float(f(x, i)) == x[i]


def test_custom_vjp_bwd_may_return_another_float_dtype_of_the_right_shape():
  # JAX accepts a bwd cotangent of another dtype for an inexact input of the same shape (its
  # "temporary dtype exception"); here the cotangent is cast to the input's dtype
  @ourjax.custom_vjp
  def f(x):
    return x
  f.defvjp(lambda x: (f(x), ()), lambda res, g: ((3.0 * g).astype(jnp.bfloat16),))
  for dt in (jnp.float32, jnp.float8_e4m3fn):
    x = jnp.arange(8, dtype=dt)
    _, vjp_fn = ourjax.vjp(lambda x: f(x.at[jnp.argsort(x)].get()), x)
    ct, = vjp_fn(jnp.ones((8,), dt))
    np.testing.assert_array_equal(np.asarray(ct, np.float32), np.full(8, 3.0))
  f.defvjp(lambda x: (f(x), ()), lambda res, g: (jnp.ones(3),))
  with pytest.raises(ValueError, match="same shape/dtypes"):
    ourjax.grad(f)(2.0)


def test_live_arrays_lists_the_arrays_alive():
  import gc
  gc.collect()
  before = {id(x) for x in ourjax.live_arrays()}
  a, b = jnp.ones(3), jnp.arange(4)
  new = [x for x in ourjax.live_arrays() if id(x) not in before]
  assert any(x is a for x in new) and any(x is b for x in new)
  assert any(x is a for x in ourjax.live_arrays("cpu"))
  del new
  b.delete()
  assert not any(x is b for x in ourjax.live_arrays())
  del a
  gc.collect()
  assert len([x for x in ourjax.live_arrays() if id(x) not in before]) == 0


def test_pmap_over_more_lanes_than_devices_raises_under_jit_and_loops_too():
  from ourjax import lax
  n = ourjax.device_count()
  g = ourjax.pmap(lambda z: lax.psum(jnp.sin(z), "i"), axis_name="i")
  x = jnp.ones(2 * n)
  for f in (lambda: g(x), lambda: ourjax.jit(g)(x),
            lambda: lax.fori_loop(0, 3, lambda i, v: g(v) + v, x)):
    with pytest.raises(ValueError, match=f"requires {2 * n} logical devices"):
      f()
  # within the device count it runs, traced or not
  y = jnp.arange(float(n))
  np.testing.assert_allclose(ourjax.jit(g)(y), np.full(n, np.sin(np.arange(n)).sum()),
                             rtol=1e-6)


def test_lowered_as_text_defaults_to_stablehlo_as_jax():
  from ourjax import lax
  x = np.arange(3, dtype=np.float32)
  f = lambda x: lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos)
  low = ourjax.jit(f).lower(x)
  text = low.as_text()
  assert text == low.as_text("stablehlo") and text.startswith("module @jit_")
  from ourjax.backends import default_backend_name     # (a GPU host takes the default branch)
  want, other = ("sine", "cosine") if default_backend_name() == "cpu" else ("cosine", "sine")
  assert f"stablehlo.{want}" in text and f"stablehlo.{other}" not in text
  assert "HloModule" in low.as_text("hlo")
  assert "ENTRY" in low.compile().as_text()          # Compiled.as_text stays the HLO module


class _Duck:
  """Only ``shape`` and ``dtype``: what JAX's eval_shape reads of an argument."""

  def __init__(self, shape, dtype=np.float32):
    self.shape, self.dtype = shape, np.dtype(dtype)


def test_eval_shape_takes_duck_typed_arguments_and_searchsorted_widens_its_index():
  out = ourjax.eval_shape(lambda a, b: jnp.sin(a) @ b, _Duck((2, 3)), _Duck((3,)))
  assert out.shape == (2,) and out.dtype == np.float32
  big = _Duck((np.iinfo(np.int32).max + 1,))
  assert ourjax.eval_shape(jnp.searchsorted, _Duck((np.iinfo(np.int32).max,)),
                           _Duck(())).dtype == np.int32
  with pytest.warns(UserWarning, match="Explicitly requested dtype int64"):
    with pytest.raises(OverflowError, match="2147483648 out of bounds for int32"):
      ourjax.eval_shape(jnp.searchsorted, big, _Duck(()))
  with ourjax.enable_x64(True):
    assert ourjax.eval_shape(jnp.searchsorted, big, _Duck(())).dtype == np.int64
  np.testing.assert_array_equal(jnp.searchsorted(jnp.array([1.0, 2, 3]), jnp.array([2.5, 0.0])),
                                np.searchsorted([1.0, 2, 3], [2.5, 0.0]))



def test_jitted_call_on_shape_dtype_structs_while_staging_is_an_abstract_constant():
  # JAX: inside eval_shape / make_jaxpr, a jitted function may be called on ShapeDtypeStructs
  # (they become constants that have only a type); compiling or running one is a TypeError
  inner = ourjax.jit(lambda x, k: x * k + 1)
  sds = ourjax.ShapeDtypeStruct((2, 3), jnp.float32)
  out = ourjax.eval_shape(lambda: inner(sds, 2))
  assert (out.shape, out.dtype, out.weak_type) == ((2, 3), np.float32, False)
  out = ourjax.eval_shape(lambda y: ourjax.vmap(lambda b: jnp.sin(inner(sds, b)))(y),
                          jnp.ones(4, jnp.int32))
  assert (out.shape, out.dtype) == ((4, 2, 3), np.float32)
  weak = ourjax.eval_shape(lambda: inner(ourjax.ShapeDtypeStruct((), jnp.int32, weak_type=True),
                                         3))
  assert (weak.shape, weak.dtype, weak.weak_type) == ((), np.int32, True)
  closed = ourjax.make_jaxpr(lambda: inner(sds, 2))()
  assert len(closed.jaxpr.constvars) == 1 and not closed.jaxpr.invars
  assert closed.jaxpr.constvars[0].aval.shape == (2, 3)
  with pytest.raises(TypeError, match="does not have a value"):
    ourjax.jit(lambda: inner(sds, 2))()
  with pytest.raises(TypeError, match="as an abstract array"):
    inner(sds, 2)

def test_print_environment_info(capsys):
  text = ourjax.print_environment_info(return_string=True)
  assert capsys.readouterr().out == ""
  assert f"ourjax:   {ourjax.__version__}" in text and f"numpy:    {np.__version__}" in text
  assert f"{len(ourjax.devices())} local devices" in text
  assert ourjax.print_environment_info() is None
  assert capsys.readouterr().out.strip() == text.strip()


def test_random_seed_offset_is_added_to_every_seed_and_keys_jit():
  import sys
  cfg = sys.modules["ourjax.config"]
  f = ourjax.jit(lambda s: ourjax.random.PRNGKey(s))
  want = np.asarray(ourjax.random.PRNGKey(20))
  np.testing.assert_array_equal(f(17), np.asarray(ourjax.random.PRNGKey(17)))
  with cfg.random_seed_offset(3):
    np.testing.assert_array_equal(ourjax.random.PRNGKey(17), want)
    np.testing.assert_array_equal(ourjax.random.key_data(ourjax.random.key(17)), want)
    np.testing.assert_array_equal(f(17), want)          # traced again under the new offset
  np.testing.assert_array_equal(f(17), np.asarray(ourjax.random.PRNGKey(17)))
  with pytest.raises(ValueError, match="must be an int"):
    ourjax.config.update("jax_random_seed_offset", 1.5)


# -- lax.composite: one stablehlo.composite op and a private decomposition function ----------

def test_composite_lowers_to_a_stablehlo_composite_and_a_private_function():
  from functools import partial
  from ourjax import lax

  @partial(lax.composite, name="my.square", version=1)
  def square(x):
    return x ** 2

  x = jnp.array(2.0, dtype=jnp.float32)
  text = ourjax.jit(square).lower(x).as_text()
  assert ('%0 = stablehlo.composite "my.square" %arg0 {decomposition = @my.square, '
          'version = 1 : i32} : (tensor<f32>) -> tensor<f32>') in text
  assert "func.func private @my.square(%arg0: tensor<f32>) -> tensor<f32> {" in text
  assert "stablehlo.multiply %arg0, %arg0 : tensor<f32>" in text

  def tangent(x, **_):
    return lax.sin(x) / lax.cos(x)
  f = ourjax.jit(lambda x: lax.composite(tangent, "my.tangent")(
      x, dtype=np.dtype(np.float32), int=1, omit=None, str="bar",
      tensor=np.zeros((1, 2), np.float32)))
  xs = np.array([0.0, 0.3, -1.0], np.float32)
  np.testing.assert_allclose(f(xs), np.tan(xs.astype(np.float64)), rtol=1e-6)
  assert ('{composite_attributes = {dtype = f32, int = 1 : i64, str = "bar", '
          'tensor = dense<0.000000e+00> : tensor<1x2xf32>}, decomposition = @my.tangent} : '
          '(tensor<3xf32>) -> tensor<3xf32>') in f.lower(xs).as_text()

  @partial(lax.composite, name="my.ident")
  def ident(*args):
    return args
  text = ourjax.jit(ident).lower(x, x).as_text()
  assert ('%0:2 = stablehlo.composite "my.ident" %arg0, %arg1 {decomposition = @my.ident} : '
          '(tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)') in text
  assert "return %0#0, %0#1 : tensor<f32>, tensor<f32>" in text
  assert [float(v) for v in ourjax.jit(ident)(x, 3.0)] == [2.0, 3.0]


def test_composite_runs_under_jit_and_vmap_and_refuses_traced_attributes():
  from ourjax import lax
  sq = lax.composite(lambda x, *, scale: x * x * scale, name="my.scaled_square")
  xs = np.arange(4.0, dtype=np.float32)
  np.testing.assert_allclose(ourjax.jit(lambda x: sq(x, scale=2.0))(xs), 2 * xs * xs)
  np.testing.assert_allclose(ourjax.vmap(lambda x: sq(x, scale=3.0))(xs), 3 * xs * xs)
  np.testing.assert_allclose(sq(xs, scale=1.0), xs * xs)                  # eagerly
  with pytest.raises(ourjax.errors.UnexpectedTracerError, match="use numpy arrays instead"):
    ourjax.jit(lambda x: sq(x, scale=jnp.zeros(2)))(xs[:2])
  with pytest.raises(ourjax.errors.UnexpectedTracerError, match="as a constant in the "
                     "decomposition for the composite op 'my.c'"):
    ourjax.jit(lambda x, s: lax.composite(lambda y: y * s, "my.c")(x))(xs, 2.0)


def test_a_jaxpr_equation_prints_as_in_a_jaxpr():
  jaxpr = ourjax.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0)
  assert str(jaxpr.eqns[0]) == repr(jaxpr.eqns[0]) == "a:f32[] = sin b"
  assert str(jaxpr.eqns[1]) == "a:f32[] = mul b 2.0:f32[]"
  pr = ourjax.make_jaxpr(lambda x: ourjax.debug.print("{}", x) or x)(1.0)
  assert str(pr.eqns[0]).startswith("debug_print[")


# -- make_jaxpr's name; take_along_axis's index dtype -------------------------------------------

def test_make_jaxpr_is_named_after_the_traced_function():
  import functools

  def foo(x):
    """doc of foo"""
    return x + 1

  mf = ourjax.make_jaxpr(foo)
  assert mf.__name__ == "make_jaxpr(foo)"
  assert mf.__qualname__.startswith("make_jaxpr(") and mf.__qualname__.endswith("foo)")
  assert mf.__doc__ == foo.__doc__ and mf.__wrapped__ is foo and mf.__module__ == "ourjax"
  assert ourjax.make_jaxpr(lambda x: x).__name__ == "make_jaxpr(<lambda>)"
  # a partial has no __name__: it keeps its function's; a callable object is unnamed
  assert ourjax.make_jaxpr(functools.partial(foo)).__name__ == "foo"

  class Callable:
    def __call__(self, x):
      return x
  assert ourjax.make_jaxpr(Callable()).__name__ == "<unnamed function>"
  assert len(mf(1.0).eqns) == 1


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_take_along_axis_unwrapped_indices_keep_their_dtype(dtype):
  arr = np.arange(200, dtype=np.float32) * 0.5
  idx = np.array([1, 7, 120], dtype=dtype)

  def f(i):
    return jnp.take_along_axis(arr, i, axis=0, mode="promise_in_bounds",
                               wrap_negative_indices=False)
  gathers = [e for e in ourjax.make_jaxpr(f)(idx).eqns if e.primitive.name == "gather"]
  assert len(gathers) == 1 and gathers[0].invars[1].aval.dtype == np.dtype(dtype)
  np.testing.assert_array_equal(f(idx), np.take_along_axis(arr, idx, axis=0))
  np.testing.assert_array_equal(ourjax.jit(f)(idx), np.take_along_axis(arr, idx, axis=0))
  # wrapping adds the axis size, so the indices are widened first (int8 -1 -> 199)
  def g(i):
    return jnp.take_along_axis(arr, i, axis=0, mode="promise_in_bounds",
                               wrap_negative_indices=True)
  [ge] = [e for e in ourjax.make_jaxpr(g)(idx).eqns if e.primitive.name == "gather"]
  assert ge.invars[1].aval.dtype == np.dtype(np.int32)
  if np.issubdtype(dtype, np.signedinteger):
    neg = np.array([-1, 3], dtype=dtype)
    np.testing.assert_array_equal(g(neg), arr[[199, 3]])


# -- int4 / uint4 under jit -----------------------------------------------------------------

def _wrap4(n, signed):
  n &= 0xF
  return (n ^ 8) - 8 if signed else n


@pytest.mark.parametrize("name", ["int4", "uint4"])
def test_int4_casts_arithmetic_and_bit_ops_follow_4bit_twos_complement(name):
  import ml_dtypes
  dt = np.dtype(getattr(ml_dtypes, name))
  signed = name == "int4"
  vals = list(range(-8, 8)) if signed else list(range(16))
  x = np.array(vals, dtype=dt)
  # casts: to int8 exact; from int8/float32 as NumPy (ml_dtypes) casts them
  wide = np.array([1, -2, 9, -9, 100, 7, 15, 16], np.int8)
  np.testing.assert_array_equal(ourjax.jit(lambda a: a.astype(jnp.int8))(x), x.astype(np.int8))
  got = ourjax.jit(lambda a: a.astype(name))(wide)
  assert got.dtype == dt
  np.testing.assert_array_equal(np.asarray(got).astype(np.int8),
                                wide.astype(dt).astype(np.int8))
  # arithmetic wraps in 4 bits
  y = x[::-1].copy()
  add = ourjax.jit(lambda a, b: a + b)(x, y)
  mul = ourjax.jit(lambda a, b: a * b)(x, y)
  assert add.dtype == dt and mul.dtype == dt
  np.testing.assert_array_equal(np.asarray(add).astype(int),
                                [_wrap4(a + b, signed) for a, b in zip(vals, vals[::-1])])
  np.testing.assert_array_equal(np.asarray(mul).astype(int),
                                [_wrap4(a * b, signed) for a, b in zip(vals, vals[::-1])])
  # shifts, population count and leading zeros on the 4-bit pattern (as StableHLO specifies
  # them; XLA's CPU popcnt counts the sign-extended byte of an int4)
  for amount in range(6):
    a = np.array(amount, dtype=dt)
    shl = [_wrap4(v << amount, signed) if amount < 4 else 0 for v in vals]
    lsr = [_wrap4((v & 0xF) >> amount, signed) if amount < 4 else 0 for v in vals]
    asr = [_wrap4(_wrap4(v, True) >> min(amount, 3), signed) for v in vals]
    for f in (lambda u: u, ourjax.jit):
      np.testing.assert_array_equal(np.asarray(f(lax.shift_left)(x, a)).astype(int), shl)
      np.testing.assert_array_equal(np.asarray(f(lax.shift_right_logical)(x, a)).astype(int),
                                    lsr)
      np.testing.assert_array_equal(
          np.asarray(f(lax.shift_right_arithmetic)(x, a)).astype(int), asr)
  for f in (lambda u: u, ourjax.jit):
    np.testing.assert_array_equal(np.asarray(f(lax.population_count)(x)).astype(int),
                                  [bin(v & 0xF).count("1") for v in vals])
    np.testing.assert_array_equal(np.asarray(f(lax.clz)(x)).astype(int),
                                  [4 - (v & 0xF).bit_length() for v in vals])
  np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda u, v: u & v)(x, y)).astype(int),
                                [_wrap4(a & b, signed) for a, b in zip(vals, vals[::-1])])


def test_create_token_passes_through_transformations():
  import ourjax as jax
  import ourjax.numpy as jnp
  tok = jax.lax.create_token()
  assert isinstance(tok, jax.core.Token)

  @jax.jit
  def noop(arr, token):
    return arr, token
  arr, out = noop(jnp.ones(3), tok)
  assert isinstance(out, jax.core.Token) and out is not tok
  np.testing.assert_array_equal(arr, np.ones(3))
  assert isinstance(jax.jit(jax.lax.create_token)(1.0), jax.core.Token)
  y, t2 = jax.jit(lambda x: (x + 2, tok))(7)           # closed over
  assert int(y) == 9 and isinstance(t2, jax.core.Token)
  with pytest.raises(RuntimeError, match="token-shape buffer"):
    tok._buf._value


def test_make_jaxpr_takes_objects_with_shape_and_dtype():
  import types
  import ourjax as jax
  spec = types.SimpleNamespace(shape=(2, 3), dtype=np.dtype(np.float32))
  jaxpr = jax.make_jaxpr(lambda x: x + 2.)(spec)
  assert jaxpr.in_avals[0].shape == (2, 3) and jaxpr.in_avals[0].dtype == np.float32
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(jax.core.jaxpr_as_fun(jaxpr)(x)[0], x + 2)


def test_jit_needs_a_weakly_referenceable_function():
  import operator
  import ourjax as jax

  class CallableWithSlots:
    __slots__ = []

    def __call__(self, x):
      return x + 1
  f = jax.jit(CallableWithSlots())          # building it is fine, as JAX
  with pytest.raises(TypeError, match="cannot create weak reference"):
    f(3)
  with pytest.raises(TypeError, match="cannot create weak reference"):
    jax.jit(np.sin)(1.)
  assert int(jax.jit(operator.add)(1, 2)) == 3


def test_jit_closure_constants_are_freed_with_the_function():
  # a jitted closure over a device array, under cond with an inner jit: once the jitted
  # function is cleared and dropped, no cache keeps the array alive
  import gc
  import ourjax as jax

  def run():
    data = jax.device_put(np.zeros(1024, np.float32) + 1)

    def g():
      return jax.lax.cond(True, jax.jit(lambda: data[0]), lambda: data[1])
    jg = jax.jit(g)
    assert float(jg()) == 1.0
    assert float(jax.grad(lambda x: jax.jit(lambda y: y * data[2])(x))(2.0)) == 1.0
    jg.clear_cache()

  gc.collect()
  base = len(jax.live_arrays())
  run()
  gc.collect()
  assert len(jax.live_arrays()) <= base
