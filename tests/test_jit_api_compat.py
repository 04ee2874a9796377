"""jit and device_put surface as JAX has it: compiler_options checked when compiling, user
contexts in jit's cache key, static arguments whose __eq__ fails, device_put's device trees and
aliasing, __jax_array__ objects as transformation arguments, allow_f16_reductions, lax.dce_sink,
pmap's static arguments given by keyword, default_matmul_precision, weak types of Jacobians,
Lowered.as_text(dialect="stablehlo"), explain_cache_misses, device.client.live_executables.
Expected errors and messages are JAX 0.10.2's (this file, with ``ourjax`` read as ``jax``, was
run against JAX 0.10.2 too)."""
import logging
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxpr_programs import programs

import ourjax
import ourjax.numpy as jnp
from ourjax import errors, lax



@pytest.fixture(autouse=True, scope="module")
def _plain_default_precision():
  """These tests set the default matmul precision themselves, from None (conftest makes it
  'highest' on a GPU host)."""
  from ourjax.config import config
  old = config.jax_default_matmul_precision
  config.update("jax_default_matmul_precision", None)
  yield
  config.update("jax_default_matmul_precision", old)

def _f(x):
  return jnp.sqrt(x ** 2) + 1.0


# ---- compiler_options --------------------------------------------------------------------------


@pytest.mark.parametrize("opts", [
    {"xla_embed_ir_in_executable": True}, {"xla_dump_to": "/tmp/x"},
    {"xla_backend_optimization_level": 2}, {"exec_time_optimization_effort": 0.0},
    {"memory_fitting_effort": 1}, {"optimization_level": 19}, {"memory_fitting_level": 9}])
def test_accepted_compiler_options_change_no_result(opts):
  x = np.float32(-3.0)
  assert float(ourjax.jit(_f, compiler_options=opts)(x)) == pytest.approx(4.0)
  low = ourjax.jit(_f).lower(x)
  assert float(low.compile(compiler_options=opts)(x)) == pytest.approx(4.0)


@pytest.mark.parametrize("opts, match", [
    ({"invalid_key": "v"}, "No such compile option: 'invalid_key'"),
    ({"exec_time_compilation_effort": 0.0}, "No such compile option"),
    ({"xla_embed_ir_in_executable": "invalid_value"}, "'invalid_value' is not a valid bool value"),
    ({"xla_embed_ir_in_executable": 1}, "'1' is not a valid bool value"),
    ({"xla_backend_optimization_level": 1.5}, "'1.5' is not a valid int32 value"),
    ({"xla_dump_to": 7}, "'7' is not a valid string value")])
def test_refused_compiler_options_raise_when_compiling(opts, match):
  f = ourjax.jit(_f, compiler_options=opts)         # (building the jit object is fine)
  with pytest.raises(errors.JaxRuntimeError, match=match):
    f(1.0)
  with pytest.raises(errors.JaxRuntimeError, match=match):
    ourjax.jit(_f).lower(1.0).compile(compiler_options=opts)


def test_compiler_options_are_part_of_the_cache_key():
  # a function compiled with valid options does not let a later jit with invalid ones through
  assert float(ourjax.jit(_f, compiler_options={"xla_embed_ir_in_executable": True})(1.0)) == 2.0
  with pytest.raises(errors.JaxRuntimeError, match="invalid_key"):
    ourjax.jit(_f, compiler_options={"invalid_key": 1})(1.0)
  low = ourjax.jit(_f).lower(1.0)
  assert low.compile() is not low.compile(compiler_options={"xla_embed_ir_in_executable": True})


def test_exec_time_effort_of_the_wrong_python_type_is_a_type_error():
  with pytest.raises(TypeError):
    ourjax.jit(_f).lower(1.0).compile(compiler_options={"exec_time_optimization_effort": "x"})


# ---- user contexts -----------------------------------------------------------------------------


def test_user_context_values_retrace_and_hit_the_cache():
  ctx = ourjax.make_user_context(default_value=0)
  traces = []

  @ourjax.jit
  def f(x):
    traces.append(ctx.value)
    return x * 2

  x = np.arange(3, dtype=np.float32)
  f(x)
  f(x)
  with ctx(1):
    f(x)
    with ctx(2):
      f(x)
    f(x)                          # (value 1 again: cached)
  f(x)
  assert traces == [0, 1, 2]
  assert ctx.value == 0 and ctx.get_global() == 0
  ctx.set_global(5)
  f(x)
  assert traces == [0, 1, 2, 5]
  np.testing.assert_array_equal(f(x), 2 * x)


# ---- static arguments ----------------------------------------------------------------------------


def test_static_argument_whose_eq_raises_is_a_value_error():
  class HashableWithoutEq:
    def __hash__(self):
      return 1

    def __eq__(self, other):
      raise NotImplementedError("no comparison")

  f = ourjax.jit(lambda x, y: x + 3, static_argnums=1)
  assert int(f(1, 1)) == 4                # a cached static value with the same hash
  with pytest.raises(ValueError, match="static arguments should be comparable using __eq__"):
    f(1, HashableWithoutEq())
    f(1, HashableWithoutEq())      # (a second call could hit the first one's cache entry)


# ---- device_put ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["cpu", 3])
def test_device_put_refuses_values_that_are_not_devices(bad):
  with pytest.raises(ValueError, match="Received invalid value"):
    ourjax.device_put(jnp.arange(8), bad)


def test_device_put_tree_mismatches_are_all_listed():
  x = {"a": jnp.arange(2), "b": jnp.arange(3)}
  with pytest.raises(ValueError, match=r"(?s)Mismatch details \(2 found\).*device\['a'\]"
                                       r".*device\['b'\]"):
    ourjax.device_put(x, device={"a": [None, None], "b": (None, None)})
  with pytest.raises(ValueError, match=r"(?s)must be a tree prefix.*different types"):
    ourjax.device_put(x, device={"a": None, "b": (None, None)})
  with pytest.raises(ValueError, match=r"(?s)\(1 found\).*different numbers of pytree children"):
    ourjax.device_put(x, device={"a": ourjax.devices()[0]})


def test_device_put_device_tree_prefix_broadcasts():
  d = ourjax.devices()[0]
  x = {"a": np.arange(2.0), "b": (np.arange(3), np.ones(2))}
  out = ourjax.device_put(x, {"a": d, "b": d})
  assert ourjax.tree_util.tree_structure(out) == ourjax.tree_util.tree_structure(x)
  for o, v in zip(ourjax.tree_util.tree_leaves(out), ourjax.tree_util.tree_leaves(x)):
    assert isinstance(o, ourjax.Array)
    np.testing.assert_array_equal(o, v.astype(o.dtype))


def test_device_put_aliasing():
  arr = ourjax.device_put(np.arange(8))
  assert ourjax.device_put(arr) is arr
  assert ourjax.device_put(arr, may_alias=True, donate=False) is arr
  out = ourjax.device_put(arr, may_alias=False, donate=False)
  assert out is not arr
  np.testing.assert_array_equal(out, arr)
  with pytest.raises(ValueError, match="may_alias and donate cannot be True at the same time"):
    ourjax.device_put(arr, may_alias=True, donate=True)


# ---- __jax_array__ -------------------------------------------------------------------------------


class _Wrapper:
  def __init__(self, v):
    self.v = v

  def __jax_array__(self):
    return self.v


@pytest.mark.parametrize("call", [
    lambda a: ourjax.jit(lambda x: x)(a),
    lambda a: ourjax.vjp(lambda x: x, a),
    lambda a: ourjax.grad(lambda x: x.sum())(a),
    lambda a: ourjax.device_put(a)])
def test_jax_array_objects_are_refused_as_transformation_arguments(call):
  with pytest.raises(ValueError, match=r"Triggering __jax_array__\(\) during abstractification"):
    call(_Wrapper(jnp.arange(4.0)))


def test_jax_array_objects_still_convert_with_asarray():
  np.testing.assert_array_equal(jnp.asarray(_Wrapper(jnp.arange(4.0))), np.arange(4.0))


# ---- allow_f16_reductions, dce_sink, pmap ----------------------------------------------------------


@settings(max_examples=20)
@given(st.sampled_from(["float16", "bfloat16", "float32"]), st.integers(1, 4),
       st.integers(1, 3))
def test_allow_f16_reductions(dtype, n, m):
  x = jnp.ones((n, m), dtype)
  expected = np.full(m, n, np.float32)
  np.testing.assert_allclose(np.asarray(lax.reduce_sum(x, [0]), np.float32), expected)
  with ourjax.allow_f16_reductions(False):
    if dtype != "float32" and n > 1:
      with pytest.raises(ValueError, match="not allowed when jax_allow_f16_reductions=False"):
        lax.reduce_sum(x, [0])
      with pytest.raises(ValueError, match="not allowed"):
        ourjax.jit(lambda y: lax.reduce_sum(y, [0]))(x)
    else:                          # other dtypes, and singleton axes, are allowed
      np.testing.assert_allclose(np.asarray(lax.reduce_sum(x, [0]), np.float32), expected)
    # jnp.sum sums in float32 and is unaffected
    np.testing.assert_allclose(np.asarray(jnp.sum(x, axis=0), np.float32), expected)


def test_dce_sink_returns_none_and_changes_nothing():
  def f(x):
    assert lax.dce_sink(x * 2) is None
    return x + 1
  x = np.arange(3.0, dtype=np.float32)
  np.testing.assert_array_equal(ourjax.vmap(f)(x), x + 1)
  np.testing.assert_array_equal(ourjax.jit(f)(x), x + 1)
  assert float(ourjax.grad(lambda y: f(y).sum())(x).sum()) == 3.0


def test_pmap_static_argument_passed_by_keyword():
  g = ourjax.pmap(lambda a, b: a + b, static_broadcasted_argnums=(1,))
  with pytest.raises(ValueError, match=r"pmapped function has static_broadcasted_argnums=\(1,\) "
                                       r"but was called with only 1 positional argument"):
    g(jnp.ones((1, 1)), b=1)
  np.testing.assert_array_equal(g(jnp.ones((1, 1)), 1), np.full((1, 1), 2.0))


# ---- default_matmul_precision, weak types of Jacobians ------------------------------------------


@pytest.mark.parametrize("name, want", [
    (None, None), ("bfloat16", "DEFAULT"), ("default", "DEFAULT"), ("tensorfloat32", "HIGH"),
    ("high", "HIGH"), ("float32", "HIGHEST"), ("highest", "HIGHEST")])
def test_default_matmul_precision_is_recorded_on_dots(name, want):
  x = jnp.ones((2, 2))
  with ourjax.default_matmul_precision(name):
    eqn = ourjax.make_jaxpr(jnp.dot)(x, x).jaxpr.eqns[0]
    explicit = ourjax.make_jaxpr(lambda a, b: jnp.dot(a, b, precision=lax.Precision.HIGHEST))(
        x, x).jaxpr.eqns[0]
  prec = eqn.params["precision"]
  assert (prec is None) if want is None else (
      [p.name for p in prec] == [want, want] and f"Precision.{want}" in str(eqn))
  assert [p.name for p in explicit.params["precision"]] == ["HIGHEST", "HIGHEST"]
  # jit traces again under another precision, and reuses the trace under the same one
  traces = []

  @ourjax.jit
  def f(a):
    traces.append(1)
    return a @ a
  f(x)
  with ourjax.default_matmul_precision(name):
    f(x)
    f(x)
  assert len(traces) == (1 if name is None else 2)


def test_default_matmul_precision_refuses_unknown_names():
  with pytest.raises(ValueError, match="new enum value must be None or in"):
    with ourjax.default_matmul_precision("fastest"):
      pass


@pytest.mark.parametrize("transform", [ourjax.grad, ourjax.jacfwd, ourjax.jacrev])
def test_derivatives_at_a_python_scalar_are_weakly_typed(transform):
  out = transform(lambda x: x * 3)(1.0)
  assert out.weak_type and out.dtype == np.float32 and float(out) == 3.0
  strong = transform(lambda x: x * 3)(np.float32(1.0))
  assert not strong.weak_type and float(strong) == 3.0


# ---- Lowered.as_text(dialect="stablehlo") --------------------------------------------------------


def test_stablehlo_text_has_jax_module_header_and_ops():
  low = ourjax.jit(lambda x, y: (x * y, x > 0)).lower(np.ones(3, np.float32),
                                                      np.ones(3, np.float32))
  text = low.as_text(dialect="stablehlo")
  # (the lines JAX 0.10.2 prints for this function, up to value names and result attributes)
  assert text.startswith("module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, "
                         "mhlo.num_replicas = 1 : i32} {\n")
  assert re.search(r"func.func public @main\(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>\) -> "
                   r"\(tensor<3xf32>( \{[^}]*\})?, tensor<3xi1>( \{[^}]*\})?\) \{", text)
  assert "= stablehlo.multiply %arg0, %arg1 : tensor<3xf32>" in text
  assert re.search(r"= stablehlo.compare GT, %arg0, %\d+, FLOAT : \(tensor<3xf32>, "
                   r"tensor<3xf32>\) -> tensor<3xi1>", text)
  assert re.search(r"return %\d+, %\d+ : tensor<3xf32>, tensor<3xi1>\n  }\n}\n$", text)
  assert "mhlo.num_replicas = 1" in str(low.compiler_ir(dialect="stablehlo"))
  with pytest.raises(ValueError, match="unknown dialect 'mlir'"):
    low.as_text(dialect="mlir")


def test_stablehlo_text_prints_barriers_and_regions():
  g = ourjax.checkpoint(lambda x, w: jnp.sin(x @ w) + jnp.array([1.0, 2.0, 3.0]))
  f = lambda x, w: g(x, w).sum()
  args = np.ones(3, np.float32), np.ones((3, 3), np.float32)
  text = ourjax.jit(ourjax.grad(f, (0, 1))).lower(*args).as_text(dialect="stablehlo")
  assert re.search(r"optimization_barrier (%[a-z0-9#]+, )+%[a-z0-9#]+ :", text)
  # loops, reductions and sorts print their computations as regions
  text = ourjax.jit(lambda x: (jnp.sum(x, 0), lax.fori_loop(0, 3, lambda i, c: c * 2, x),
                               jnp.sort(x[0]))).lower(np.ones((2, 3), np.float32)).as_text(
                                   dialect="stablehlo")
  for op in ("stablehlo.reduce", "stablehlo.while", "stablehlo.sort", "stablehlo.return"):
    assert op in text


@settings(max_examples=15, deadline=None)
@given(programs(max_ops=8))
def test_stablehlo_text_prints_random_programs(prog):
  text = ourjax.jit(prog).lower(*prog.inputs).as_text(dialect="stablehlo")
  assert text.startswith("module @jit_") and text.rstrip().endswith("}")
  assert text.count("{") == text.count("}")


# ---- explain_cache_misses (the substrings JAX 0.10.2's own tests check) -------------------------


def _miss_logs(caplog):
  return [r.getMessage() for r in caplog.records if "TRACING CACHE MISS" in r.getMessage()]


def test_explain_cache_misses_first_miss_and_hits(caplog):
  caplog.set_level(logging.WARNING)
  f = ourjax.jit(lambda x: x)
  with ourjax.explain_cache_misses(True):
    f(np.float32(1.0))
    f(np.float32(1.0))
  (msg,) = _miss_logs(caplog)
  assert "never seen function" in msg and os.path.basename(__file__) in msg
  f(np.float32(2.0)[None])                   # off again: nothing logged
  assert len(_miss_logs(caplog)) == 1


@pytest.mark.parametrize("first, second, want", [
    ((np.float32(0), np.float32(1)), (np.float32(0), np.int32(1)),
     ["different input types", "at y, now i32[] and before f32[]"]),
    ((np.float32(0), np.arange(1, dtype=np.float32)), (np.float32(0), np.arange(2, dtype=np.float32)),
     ["different input types", "at y, now f32[2] and before f32[1]"]),
    ((np.float32(0), np.float32(1)), (0.0, np.float32(1)),
     ["at x, now f32[]{weak_type=True} and before f32[]{weak_type=False}",
      "https://docs.jax.dev/en/latest/type_promotion.html#weak-types"]),
    ((np.float32(0), (np.float32(1), np.float32(2))), ((np.float32(0), np.float32(1)), np.float32(2)),
     ["different input pytree"])])
def test_explain_cache_misses_names_the_difference(caplog, first, second, want):
  caplog.set_level(logging.WARNING)

  @ourjax.jit
  def f(x, y):
    return ourjax.tree_util.tree_leaves(x)[0]
  f(*first)
  with ourjax.explain_cache_misses(True):
    f(*second)
  (msg,) = _miss_logs(caplog)
  for w in want:
    assert w in msg, msg
  assert "explanation unavailable" not in msg


def test_explain_cache_misses_context_and_redefinitions(caplog):
  caplog.set_level(logging.WARNING)
  f = ourjax.jit(lambda x, y: jnp.sin(x) + y)
  f(0.0, 1.0)
  with ourjax.explain_cache_misses(True):
    with ourjax.default_matmul_precision("high"):
      f(0.0, 1.0)
    for _ in range(2):
      ourjax.jit(lambda x: 2 * x)(3)
    for i in range(2):                        # ourjax's own functions are not reported
      jnp.sin(jnp.arange(i + 1, dtype=np.float32))
  ctx, first, again = _miss_logs(caplog)
  assert "racing context" in ctx and "now high and before None" in ctx
  assert "another function defined on the same line" not in first
  assert "another function defined on the same line" in again


# ---- device.client.live_executables ----------------------------------------------------------------


def test_client_live_executables_follow_the_jit_cache():
  import gc
  client = ourjax.devices()[0].client
  assert client.platform == ourjax.devices()[0].platform

  @ourjax.jit
  def f(x, y):
    return x + y
  gc.collect()
  n0 = len(client.live_executables())
  f(1, 2).block_until_ready()
  gc.collect()
  assert len(client.live_executables()) == n0 + 1
  f(1, 2)                                     # (a cache hit makes nothing new)
  assert len(client.live_executables()) == n0 + 1
  f.clear_cache()
  gc.collect()
  assert len(client.live_executables()) <= n0
