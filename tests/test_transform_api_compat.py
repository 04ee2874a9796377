"""Public-API shapes of the transformations' results, as JAX 0.10 has them (checked against
real JAX by hand): what a program can observe beyond the numbers."""
import functools
import re

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import tree_util


def test_linearize_returns_partial_pytree_over_its_constants():
  # JAX: the linearized function is a tree_util.Partial whose leaves are the linear jaxpr's
  # constants and whose .func.args[0] is the linear jaxpr
  x0 = 0.7
  y, f_lin = ourjax.linearize(lambda x: jnp.sin(jnp.sin(x)), x0)
  assert isinstance(f_lin, tree_util.Partial)
  assert isinstance(f_lin.func, functools.partial)
  jaxpr = f_lin.func.args[0]
  assert " sin " not in str(jaxpr) and " mul " in str(jaxpr)
  leaves = tree_util.tree_leaves(f_lin)
  assert len(leaves) == len(jaxpr.constvars) > 0
  expected = np.cos(np.sin(x0)) * np.cos(x0) * 3.0
  np.testing.assert_allclose(f_lin(3.0), expected, rtol=1e-6)
  # a pytree: it goes through jit (its constants as arguments) and vmap
  np.testing.assert_allclose(ourjax.jit(lambda f, t: f(t))(f_lin, 3.0), expected, rtol=1e-6)
  np.testing.assert_allclose(ourjax.vmap(f_lin)(jnp.array([1.0, 3.0])),
                             np.cos(np.sin(x0)) * np.cos(x0) * np.array([1.0, 3.0]), rtol=1e-6)
  np.testing.assert_allclose(y, np.sin(np.sin(x0)), rtol=1e-6)


def test_linearize_partial_checks_tangents_and_keeps_structure():
  _, f_lin, aux = ourjax.linearize(lambda a, b: ({"p": a * b}, a + 1.0), 2.0, 3.0, has_aux=True)
  np.testing.assert_allclose(aux, 3.0)
  out = f_lin(1.0, 0.5)
  assert set(out) == {"p"}
  np.testing.assert_allclose(out["p"], 3.0 * 1.0 + 2.0 * 0.5)
  msg = "tangent values inconsistent with the original primal values"
  with pytest.raises(ValueError, match=msg):
    f_lin(jnp.ones(2), 1.0)                    # a shape other than the primal's
  with pytest.raises(ValueError, match=msg):
    f_lin(1, 1.0)                              # JAX: an int tangent for a float primal
  _, f_int = ourjax.linearize(lambda x: x, np.ones(2, np.int32))
  f_int(np.zeros(2, ourjax.dtypes.float0))
  with pytest.raises(ValueError, match=msg):
    f_int(np.ones(2, np.int32))                # an integer primal's tangent is float0
  with pytest.raises(TypeError, match="tree structure"):
    f_lin((1.0, 1.0))


def test_jit_test_events_count_traces_compiles_and_slow_calls():
  # ourjax._events reports jit's work under JAX's test-event names: one trace and one
  # compile per new signature, none on a cache hit
  from ourjax import _events
  seen = []
  old, _events.listener = _events.listener, lambda name, *a: seen.append(name)
  try:
    f = ourjax.jit(lambda x: jnp.sin(x) * 2)
    x = np.ones(3, np.float32)
    f(x)
    assert seen.count("trace_to_jaxpr") == 1
    assert seen.count("lower_jaxpr_to_module") == 1
    seen.clear()
    f(x)
    f(x)
    assert "trace_to_jaxpr" not in seen and "lower_jaxpr_to_module" not in seen
    f(np.ones(4, np.float32))                          # a new shape: traced and compiled again
    assert seen.count("trace_to_jaxpr") == 1
    assert seen.count("lower_jaxpr_to_module") == 1
  finally:
    _events.listener = old


def _count_compiles(fn, times):
  from ourjax import _events
  seen = []
  old, _events.listener = _events.listener, lambda name, *a: seen.append(name)
  try:
    counts = []
    for i in range(times):
      seen.clear()
      fn(i)
      counts.append(seen.count("lower_jaxpr_to_module"))
    return counts
  finally:
    _events.listener = old


def test_jitted_function_under_grad_vmap_remat_compiles_once():
  # the pjit rules' transformed jaxprs are cached per jaxpr, so the executables compiled for
  # them are reused (each call used to compile the jvp/known/transposed jaxprs again)
  f = ourjax.jit(lambda x: jnp.sin(x) * x)
  df = lambda x: np.cos(x) * x + np.sin(x)
  vals = []
  counts = _count_compiles(lambda i: vals.append(ourjax.grad(f)(0.5 + i)), 3)
  assert counts[0] >= 1 and counts[1:] == [0, 0]
  np.testing.assert_allclose(vals, [df(0.5 + i) for i in range(3)], rtol=1e-5)

  counts = _count_compiles(lambda i: np.testing.assert_allclose(
      ourjax.vmap(f)(jnp.arange(3.0) + i), np.sin(np.arange(3.0) + i) * (np.arange(3.0) + i),
      rtol=1e-5), 3)
  assert counts[1:] == [0, 0]

  g = ourjax.checkpoint(ourjax.jit(lambda x: 2 * x))

  def vjp_once(i):
    y, f_vjp = ourjax.vjp(g, 1.0 + i)
    np.testing.assert_allclose(y, 2 * (1.0 + i))
    np.testing.assert_allclose(f_vjp(1.0)[0], 2.0)
  assert _count_compiles(vjp_once, 3)[1:] == [0, 0]

  h = ourjax.jit(lambda x: jnp.sum(x ** 3))
  counts = _count_compiles(lambda i: np.testing.assert_allclose(
      ourjax.hessian(h)(jnp.arange(2.0) + i), np.diag(6 * (np.arange(2.0) + i)), rtol=1e-5), 3)
  assert counts[1:] == [0, 0]


def test_static_arguments_of_equal_value_but_other_type_are_not_a_cache_hit():
  # JAX keys static arguments by value and type: 1, True and 1.0 are equal in Python
  traces = []

  @functools.partial(ourjax.jit, static_argnums=0)
  def f(k):
    traces.append(k)
    return k

  outs = [f(x) for x in (1, True, 1.0, 1, True)]
  assert [type(t) for t in traces] == [int, bool, float]
  assert [o.dtype for o in outs] == [np.int32, np.bool_, np.float32, np.int32, np.bool_]


def test_vmap_of_function_without_outputs_under_leak_checking():
  with ourjax.checking_leaks():
    def f(x):
      ourjax.lax.scan(lambda c, _: (1.0, None), x, None, length=1)
    assert ourjax.vmap(f)(np.arange(5.0)) is None


def test_shape_dtype_struct_len_and_missing_dtype():
  assert len(ourjax.ShapeDtypeStruct((4, 2), jnp.float32)) == 4
  with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
    len(ourjax.ShapeDtypeStruct((), jnp.float32))
  with pytest.raises(ValueError, match="dtype must be specified"):
    ourjax.ShapeDtypeStruct((), None)


def test_jvp_primals_and_tangents_must_be_the_same_sequence_type():
  with pytest.raises(TypeError, match="must have the same tree structure"):
    ourjax.jvp(lambda x, y: x * y, (np.float32(2),), [np.float32(2)])
  out, tan = ourjax.jvp(lambda x: x * 3.0, [2.0], [1.0])       # both lists: fine
  np.testing.assert_allclose((out, tan), (6.0, 3.0))


def test_linear_transpose_traces_with_weak_types_then_checks_dtypes():
  # JAX: 2. * x of a Python int is traced (a weak float), then refused as int -> float
  with ourjax.numpy_dtype_promotion("strict"):
    with pytest.raises(TypeError, match="linear_transpose only supports"):
      ourjax.linear_transpose(lambda x: 2.0 * x, 1)
    ct, = ourjax.linear_transpose(lambda x: 2.0 * x, 1.0)(3.0)
  assert ct.dtype == np.float32 and not ct.weak_type
  np.testing.assert_allclose(ct, 6.0)


@pytest.mark.parametrize("argnums", [0, (0,)])
def test_grad_argnums_error_shows_argnums_as_given(argnums):
  df = ourjax.grad(lambda x, y: x + y, argnums=argnums)
  with pytest.raises(TypeError, match=rf"argnums={re.escape(str(argnums))} requires at least 1 "):
    functools.partial(df, x=0.0)(y=1.0)


def test_jaxpr_type_error_is_public():
  from ourjax import core, errors
  assert core.JaxprTypeError is errors.JaxprTypeError and issubclass(errors.JaxprTypeError,
                                                                     TypeError)
  v = core.Var(core.ShapedArray((), np.float32))
  with pytest.raises(errors.JaxprTypeError, match="bound twice"):
    core.typecheck_jaxpr(core.Jaxpr([], [v, v], [], [v]))


def test_vmap_axes_prefix_error_has_jax_mismatch_details():
  with pytest.raises(ValueError, match=r"(?s)vmap in_axes specification must be a tree prefix of "
                     r"the corresponding value;.*Mismatch details \(1 found\).*different types at "
                     r"key path\n    vmap in_axes\[0\]"):
    ourjax.vmap(lambda x: x, in_axes=([0],))(jnp.ones(3))
  with pytest.raises(ValueError, match=r"(?s)Mismatch details.*vmap out_axes\n"):
    ourjax.vmap(lambda x: (x, x), out_axes=(0,))(jnp.ones(3))


def test_linear_transpose_cotangent_dtype_must_match_output_dtype():
  # JAX: a Python float cotangent (weak f32) for a complex output is a type mismatch
  with pytest.raises(TypeError, match="cotangent type does not match"):
    ourjax.linear_transpose(lambda x: 1j * x, 1.0)(1.0)
  with pytest.raises(TypeError, match="cotangent type does not match"):
    ourjax.linear_transpose(lambda x: x, 1.0)(1j)
  ct, = ourjax.linear_transpose(lambda x: 2.0 * x, 1.0)(1.0)      # weak f32 for f32: fine
  np.testing.assert_allclose(ct, 2.0)


def test_config_flag_context_managers_have_value_and_get_global():
  # as JAX's config States: jax.numpy_rank_promotion.value / .get_global()
  flag = ourjax.numpy_rank_promotion
  base = flag.get_global()
  with flag("raise"):
    assert flag.value == "raise" and flag.get_global() == base
    with pytest.raises(ValueError):
      jnp.ones((2, 3)) + jnp.ones(3)
  assert flag.value == base

  @ourjax.numpy_dtype_promotion("strict")
  def strict_value():
    return ourjax.numpy_dtype_promotion.value
  assert strict_value() == "strict"
