"""Regression tests for JAX-compatibility differences found by ``tools/jaxdiff.py`` (the same
small programs run with JAX and with ourjax).  Expected values are NumPy's or written out by
hand from JAX's documented behaviour; nothing here imports JAX."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def same(x, value, dtype, weak=False):
  """``x`` is an ourjax array with this value, dtype and weak type."""
  assert isinstance(x, ourjax.Array), type(x)
  assert x.dtype == np.dtype(dtype), (x.dtype, dtype)
  assert x.weak_type == weak, (x.weak_type, weak)
  np.testing.assert_allclose(np.asarray(x, np.float64) if x.dtype.kind != "c" else np.asarray(x),
                             value, rtol=1e-6)


# --- promotion ---------------------------------------------------------------------------------

def test_python_int_wraps_into_narrow_int_dtypes():
  same(jnp.ones(2, jnp.int8) + 300, [45, 45], jnp.int8)
  same(jnp.uint8(3) + (-1), 2, jnp.uint8)
  same(jnp.ones(2, jnp.uint32) + (-1), [0, 0], jnp.uint32)
  same(ourjax.jit(lambda x: x * 300)(jnp.ones(2, jnp.int8)), [44, 44], jnp.int8)
  with pytest.raises(OverflowError):      # must still fit the default int dtype
    jnp.ones(2, jnp.int8) + 2 ** 31
  with pytest.raises(OverflowError):
    jnp.ones(2, jnp.uint32) + (2 ** 32 - 1)


def test_binary_shape_mismatch_is_type_error():
  with pytest.raises(TypeError, match="incompatible shapes"):
    jnp.ones(3) + jnp.ones(4)
  with pytest.raises(TypeError):
    jnp.multiply(jnp.ones((2, 3)), jnp.ones((3, 2)))
  with pytest.raises(ValueError):         # jnp.where broadcasts explicitly: a ValueError
    jnp.where(jnp.ones(2) > 0, jnp.ones(3), 0)


_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


@settings(max_examples=40, deadline=None)
@given(_shapes, _shapes, st.sampled_from(["add", "multiply", "maximum", "less", "arctan2"]))
def test_binary_shape_mismatch_error_type_follows_ranks(a, b, name):
  # as JAX: shapes of different ranks are rank-promoted by a NumPy broadcast (a ValueError
  # when they do not broadcast); equal ranks reach the lax op, which raises a TypeError
  f = getattr(jnp, name)
  x, y = np.ones(a, np.float32), np.ones(b, np.float32)
  try:
    want = getattr(np, name)(x, y)
  except ValueError:
    err = ValueError if len(a) != len(b) else TypeError
    with pytest.raises(err, match="ncompatible shapes for broadcasting"):
      f(jnp.asarray(x), jnp.asarray(y))
    with pytest.raises(err, match="ncompatible shapes for broadcasting"):
      ourjax.jit(f)(x, y)
  else:
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), jnp.asarray(y))), want, rtol=1e-6)


# --- weak types of elementwise results ---------------------------------------------------------

def test_comparisons_and_dtype_changing_ops_keep_weak_type():
  # lax's rule: weakly typed operands give a weakly typed result, bool and real results too
  same(jnp.equal(1, 1.0), True, bool, weak=True)
  same(jnp.arange(3) < 1.5, [True, True, False], bool, weak=True)   # int32 + weak float: weak
  same(jnp.asarray(1.0) > 0, True, bool, weak=True)
  same(jnp.abs(1j), 1.0, np.float32, weak=True)
  same(jnp.real(1 + 2j), 1.0, np.float32, weak=True)
  same(jnp.isnan(1.0), False, bool, weak=True)
  same(jnp.logical_not(0), True, bool, weak=True)
  same(lax.eq(1.0, 2.0), False, bool, weak=True)
  same(jnp.ones(2) > 0, [True, True], bool)                         # strong stays strong


def test_constants_keep_weak_scalars_weak():
  same(jnp.deg2rad(180), np.pi, np.float32, weak=True)
  same(jnp.hypot(3, 4), 5.0, np.float32, weak=True)
  same(jnp.sinc(0.0), 1.0, np.float32, weak=True)
  same(jnp.reciprocal(2.0), 0.5, np.float32, weak=True)
  same(jnp.floor_divide(7, 2), 3, np.int32, weak=True)
  same(jnp.floor_divide(7.5, 2), 3.0, np.float32, weak=True)
  same(jnp.heaviside(1.0, 0.5), 1.0, np.float32, weak=True)
  same(jnp.iscomplex(1.0), False, bool, weak=True)
  # a weak array (not a scalar) meets strongly typed constants, as in JAX
  same(jnp.heaviside(jnp.array([-1, 2]), 0.5), [0.0, 1.0], np.float32)
  same(jnp.logical_and(jnp.array([1, 0]), 1.0), [True, False], bool)
  # functions whose constants are strongly typed in JAX (jnp's _constant_like)
  same(jnp.log2(8.0), 3.0, np.float32)
  same(jnp.log10(100.0), 2.0, np.float32)
  same(jnp.isinf(1.0), False, bool)
  same(jnp.signbit(-3), True, bool)
  # so a weak scalar result does not narrow an array it meets, and a strong one widens it
  assert (jnp.log2(2.0) * jnp.ones(2, jnp.float16)).dtype == np.float32
  assert (jnp.deg2rad(1.0) * jnp.ones(2, jnp.float16)).dtype == np.float16


def test_power_float_and_bool_cases():
  same(2.0 ** jnp.arange(3), [1.0, 2.0, 4.0], np.float32)           # strong int exponent
  same(2.0 ** jnp.asarray(2), 4.0, np.float32, weak=True)
  same(jnp.array([True, False]) ** jnp.array([True, True]), [1, 0], np.int32)
  same(jnp.float_power(jnp.array([2.0], jnp.float16), 3), [8.0], np.float16)
  same(jnp.float_power(jnp.array([1j], jnp.complex64), 2.0), [-1.0 + 0j], np.complex64)
  same(jnp.float_power(2, 3), 8.0, np.float32, weak=True)


def test_rint_nan_to_num_angle_polyval_dtypes():
  same(jnp.rint(3), 3.0, np.float32)                                 # int -> strong float
  same(jnp.nan_to_num(jnp.asarray(np.nan, dtype=jnp.float32) * 1.0), 0.0, np.float32)
  same(jnp.nan_to_num(2.0), 2.0, np.float32)
  same(jnp.angle(1.0), 0.0, np.float32)
  same(jnp.angle(jnp.float16(-1)), np.pi, np.float32)                # 0-d float -> float32
  same(jnp.angle(jnp.array([-1.0], jnp.float16)), [np.float16(np.pi)], np.float16)
  same(jnp.polyval(jnp.array([1, 2]), 3), 5, np.int32)
  same(jnp.polyval(jnp.array([1, 2]), jnp.array([2.0])), [4.0], np.float32)
  same(jnp.polyval(jnp.atleast_1d(jnp.asarray(7.0)), 2), 7.0, np.float32)


def test_integer_division_by_zero_as_jax():
  x = jnp.array([7, -7])
  same(x // 0, [-2, -2], np.int32)
  same(x % 0, [0, 0], np.int32)
  same(ourjax.jit(lambda a, b: a // b)(x, 0), [-2, -2], np.int32)
  same(jnp.array([7.5, -7.5]) // 0.0, [np.inf, -np.inf], np.float32)
  np.testing.assert_array_equal(np.asarray(jnp.array([7.5, -7.5, 7.5]) // jnp.array([2.0, 2.0,
                                                                                     -2.0])),
                                np.array([7.5, -7.5, 7.5]) // np.array([2.0, 2.0, -2.0]))


# --- API behaviours ----------------------------------------------------------------------------

def test_promote_types_not_canonicalised():
  assert jnp.promote_types(jnp.int32, jnp.int64) == np.int64
  assert jnp.promote_types(jnp.uint64, jnp.int64) == np.float64
  assert jnp.promote_types(jnp.float32, int) == np.float32
  # without x64, JAX's lattice forms no 64-bit type from narrower ones
  assert jnp.promote_types(jnp.int32, jnp.uint32) == np.int32
  assert jnp.promote_types(jnp.int8, jnp.uint32) == np.int32
  with ourjax.enable_x64(True):
    assert jnp.promote_types(jnp.int32, jnp.uint32) == np.int64


def test_array_constructor_errors_and_ranges():
  with pytest.raises(OverflowError):
    jnp.array(300, jnp.int8)
  same(jnp.array(2 ** 31, jnp.uint32), 2 ** 31, np.uint32)
  with pytest.raises(ValueError):
    jnp.array(None)
  with pytest.raises(TypeError, match="one unknown"):
    jnp.arange(6).reshape(-1, -1)


def test_small_api_results():
  counts, edges = jnp.histogram(jnp.array([0, 1, 1, 2]), bins=2)
  same(counts, [1.0, 3.0], np.float32)
  out = lax.top_k(jnp.array([1.0, 3.0, 2.0]), 2)
  assert type(out) is list
  same(lax.select(jnp.array([True, False]), jnp.ones(2), jnp.zeros(2)), [1.0, 0.0], np.float32)
  assert ourjax.random.normal(ourjax.random.PRNGKey(0), 3).shape == (3,)


def test_printing_as_jax():
  assert repr(jnp.zeros((0,))) == "Array([], shape=(0,), dtype=float32)"
  aval = ourjax.make_jaxpr(lambda x: x)(1.0).out_avals[0]
  assert str(aval) == "~float32[]"
  assert str(ourjax.make_jaxpr(lambda x: x)(jnp.ones((2, 3))).in_avals[0]) == "float32[2,3]"
  import collections
  NT = collections.namedtuple("NT", ["x", "y"])
  assert str(ourjax.tree_util.tree_structure(NT(1, 2))) == \
      "PyTreeDef(CustomNode(namedtuple[NT], [*, *]))"
  with ourjax.default_matmul_precision(None):     # (conftest's default on a GPU host)
    dot_jaxpr = str(ourjax.make_jaxpr(jnp.dot)(jnp.ones((2, 3)), jnp.ones(3)))
  assert dot_jaxpr == (
      "{ lambda ; a:f32[2,3] b:f32[3]. let\n"
      "    c:f32[2] = dot_general[\n"
      "      dimension_numbers=(([1], [0]), ([], []))\n"
      "      preferred_element_type=float32\n"
      "    ] a b\n"
      "  in (c,) }")
  assert str(ourjax.make_jaxpr(lambda x: jnp.max(x, axis=1))(jnp.ones((2, 3)))) == (
      "{ lambda ; a:f32[2,3]. let b:f32[2] = reduce_max[axes=(1,)] a in (b,) }")
  assert str(ourjax.make_jaxpr(lambda: jnp.arange(4))()) == (
      "{ lambda ; . let\n"
      "    a:i32[4] = iota[dimension=0 dtype=int32 shape=(4,) sharding=None] \n"
      "  in (a,) }")
  text = str(ourjax.make_jaxpr(lambda xs: lax.scan(lambda c, x: (c + x, c), 0.0, xs))(
      jnp.ones(3)))
  assert "linear" not in text and "num_carry=1" in text


# --- loops: weakly typed initial carries (JAX's two-pass tracing) -------------------------------

def test_weak_initial_carry_promoted_when_the_body_changes_its_dtype():
  same(lax.while_loop(lambda c: c < 5, lambda c: c + 1.5, 0), 6.0, np.float32)
  c, ys = lax.scan(lambda c, x: (c + x, c), 0, jnp.arange(3.0))
  same(c, 3.0, np.float32)
  same(ys, [0.0, 0.0, 1.0], np.float32)
  with pytest.raises(TypeError, match="must have equal types"):  # a strong carry stays
    lax.while_loop(lambda c: c < 5, lambda c: c + 1.5, jnp.int32(0))


def test_weak_initial_carry_stays_weak_in_the_body():
  # the body sees the weak carry (ys computed from it are weak); the final carry has the type of
  # the body's output (strong here)
  c, ys = lax.scan(lambda c, x: (c + x, c), 0.0, jnp.arange(3.0))
  same(c, 3.0, np.float32)
  same(ys, [0.0, 0.0, 1.0], np.float32, weak=True)
  c, ys = lax.scan(lambda c, x: (c + x, c), 0, jnp.arange(3))
  same(c, 3, np.int32)
  same(ys, [0, 0, 1], np.int32, weak=True)
  same(lax.while_loop(lambda c: c < 3, lambda c: c + jnp.int32(1), 0), 3, np.int32)
  same(lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0), 3, np.int32, weak=True)


def test_fori_loop_index_is_a_weak_python_int():
  same(lax.fori_loop(np.int32(0), np.int32(3), lambda i, c: c + i, 0), 3, np.int32, weak=True)
  same(lax.fori_loop(0.0, 3.0, lambda i, c: c + i, 0), 3, np.int32, weak=True)
  same(lax.fori_loop(0, 3, lambda i, c: c + i, 0.5), 3.5, np.float32, weak=True)
  same(ourjax.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c + 1, 0))(4), 4, np.int32,
       weak=True)


def test_isinstance_array_holds_for_tracers():
  assert isinstance(jnp.ones(2), ourjax.Array) and isinstance(jnp.ones(2), jnp.ndarray)
  assert not isinstance(np.ones(2), ourjax.Array) and not isinstance(1.0, ourjax.Array)
  assert ourjax.jit(lambda x: isinstance(x, ourjax.Array))(1.0)
  seen = []
  ourjax.grad(lambda x: seen.append(isinstance(x, jnp.ndarray)) or x)(1.0)
  ourjax.vmap(lambda x: seen.append(isinstance(x, ourjax.Array)) or x)(jnp.ones(2))
  assert seen == [True, True]
  assert isinstance(ourjax.Array(np.ones(2)), ourjax.Array)    # still makes concrete arrays


def test_builtin_round_gives_int32():
  same(round(jnp.array(2.6)), 3, np.int32)
  same(round(jnp.array([2.5, 3.5])), [2, 4], np.int32)
  same(round(jnp.array(2.66), 1), 2.7, np.float32, weak=True)


def test_weak_literals_stay_weak_when_a_jaxpr_is_reevaluated():
  # vmap re-evaluates the loop body's jaxpr: its weak literal (``+ 1``) must stay weak
  out = ourjax.vmap(lambda a: lax.while_loop(lambda c: c[1] < 3,
                                             lambda c: (c[0] + a, c[1] + 1), (0.0, 0)))(
      jnp.ones(2))
  same(out[0], [3.0, 3.0], np.float32)
  same(out[1], [3, 3], np.int32, weak=True)
  f = lambda a: lax.while_loop(lambda c: c[0] < a, lambda c: (c[0] + 1.0, c[1] + 1), (0.0, 0))
  out = ourjax.vmap(f)(jnp.array([2.0, 3.0]))
  same(out[0], [2.0, 3.0], np.float32, weak=True)
  same(out[1], [2, 3], np.int32, weak=True)


def test_switch_outputs_take_the_first_branch_weak_types():
  branches = [lambda: 1.0, lambda: jnp.float32(2)]
  same(lax.switch(1, branches), 2.0, np.float32, weak=True)
  same(lax.switch(1, branches[::-1]), 1.0, np.float32)
  same(lax.cond(True, lambda: 1.0, lambda: jnp.float32(2)), 1.0, np.float32)   # cond joins


def test_x64_default_dtypes_as_jax(x64):
  assert jnp.tri(3).dtype == np.float32                  # JAX's tri defaults to float32
  assert jnp.tril_indices(3)[0].dtype == np.int64
  assert jnp.diag_indices(2)[0].dtype == np.int64
  assert (jnp.array([True]) ** 2).dtype == np.int32      # bool -> int32 in numeric promotion
  assert jnp.square(jnp.array([True])).dtype == np.int32


def test_linalg_results_are_namedtuples_and_pytrees():
  a = jnp.array([[4.0, 1.0], [1.0, 3.0]])
  r = ourjax.jit(jnp.linalg.eigh)(a)
  assert r._fields == ("eigenvalues", "eigenvectors")
  np.testing.assert_allclose(np.asarray(r.eigenvalues), np.linalg.eigvalsh(np.asarray(a)),
                             rtol=1e-5)
  s = ourjax.vmap(jnp.linalg.slogdet)(jnp.stack([a, 2 * a]))
  assert s._fields == ("sign", "logabsdet")
  np.testing.assert_allclose(np.asarray(s.logabsdet), [np.log(11.0), np.log(44.0)], rtol=1e-5)
  assert ourjax.jit(jnp.linalg.qr)(a)._fields == ("Q", "R")
  assert ourjax.jit(jnp.linalg.svd)(a)._fields == ("U", "S", "Vh")


def test_norm_pdf_of_a_python_scalar_is_weak():
  x = ourjax.scipy.stats.norm.pdf(1.0)
  same(x, np.exp(-0.5) / np.sqrt(2 * np.pi), np.float32, weak=True)


def test_sort_complex_sorts_the_last_axis():
  x = np.array([[3.0, 1.0], [2.0, 0.0]], np.float32)
  got = jnp.sort_complex(jnp.asarray(x))
  assert got.dtype == np.complex64
  np.testing.assert_array_equal(np.asarray(got), np.sort_complex(x))


def test_tracer_reprs_as_jax():
  out = []
  ourjax.jit(lambda x: out.append(repr(x)) or x)(jnp.ones(3))
  ourjax.make_jaxpr(lambda x: out.append(str(x)) or x)(1.0)
  ourjax.vmap(lambda x: out.append(repr(x)) or x)(jnp.ones(3))
  ourjax.jvp(lambda x: out.append(repr(x)) or x, (1.0,), (1.0,))
  ourjax.grad(lambda x: out.append(repr(x)) or x)(1.0)
  ourjax.jit(ourjax.grad(lambda x: out.append(repr(x)) or x))(1.0)
  assert out == ["JitTracer(float32[3])", "JitTracer(~float32[])",
                 "VmapTracer(aval=float32[], batched=float32[3])",
                 "JVPTracer(primal=1.0, tangent=1.0)",
                 "GradTracer(primal=1.0, typeof(tangent)=f32[])",
                 "GradTracer(primal=JitTracer(~float32[]), typeof(tangent)=f32[])"]


def test_format_spec_on_nd_array_is_type_error():
  assert f"{jnp.float32(1.23456):.2f}" == "1.23"
  assert f"{jnp.ones(2)}" == str(jnp.ones(2))
  with pytest.raises(TypeError):
    f"{jnp.ones(2):.2f}"


def test_process_and_device_helpers():
  assert ourjax.local_device_count() == len(ourjax.local_devices()) >= 1
  assert ourjax.process_index() == 0 and ourjax.process_count() == 1
  assert str(ourjax.typeof(jnp.ones(2))) == "float32[2]"
  assert str(ourjax.typeof(1.0)) == "~float32[]"


# --- named-axis collectives under vmap -----------------------------------------------------------

def test_collectives_under_vmap_axis_name():
  x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
  vm = lambda f: ourjax.vmap(f, axis_name="i")(jnp.asarray(x))  # noqa: E731
  np.testing.assert_allclose(np.asarray(vm(lambda v: lax.psum(v, "i"))),
                             np.broadcast_to(x.sum(0), x.shape))
  np.testing.assert_allclose(np.asarray(vm(lambda v: v - lax.pmean(v, "i"))), x - x.mean(0))
  np.testing.assert_allclose(np.asarray(vm(lambda v: lax.pmax(v, "i"))),
                             np.broadcast_to(x.max(0), x.shape))
  same(vm(lambda v: lax.psum(1, "i")), [3, 3, 3], np.int32, weak=True)
  same(vm(lambda v: lax.axis_index("i")), [0, 1, 2], np.int32)
  np.testing.assert_allclose(np.asarray(vm(lambda v: lax.all_gather(v, "i"))),
                             np.broadcast_to(x, (3, 3, 2)))
  np.testing.assert_allclose(np.asarray(vm(lambda v: lax.all_gather(v, "i", tiled=True))),
                             np.broadcast_to(x.ravel(), (3, 6)))
  # nested vmaps, several names, under jit and grad from outside
  out = ourjax.vmap(ourjax.vmap(lambda v: lax.psum(v, ("i", "j")), axis_name="j"),
                    axis_name="i")(jnp.asarray(x))
  np.testing.assert_allclose(np.asarray(out), np.full(x.shape, x.sum()))
  g = ourjax.grad(lambda a: jnp.sum(ourjax.vmap(lambda v: (v - lax.pmean(v, "i")) ** 2,
                                                axis_name="i")(a)))(jnp.asarray(x))
  np.testing.assert_allclose(np.asarray(g), 2 * (x - x.mean(0)), rtol=1e-6)
  with pytest.raises(NameError, match="unbound axis name"):
    lax.psum(1.0, "k")


def test_logaddexp_second_derivative_at_a_tie():
  # JAX's custom JVP: d2/dz2 logaddexp(0, z) = sigmoid'(z), 1/4 at z = 0 (softplus too)
  f = lambda z: jnp.logaddexp(0.0, z)   # noqa: E731
  for z in (0.0, 0.5, -1.0):
    s = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(float(ourjax.grad(f)(z)), s, rtol=1e-6)
    np.testing.assert_allclose(float(ourjax.grad(ourjax.grad(f))(z)), s * (1 - s), rtol=1e-5)
  np.testing.assert_allclose(float(ourjax.grad(ourjax.grad(ourjax.nn.softplus))(0.0)), 0.25)
  h = ourjax.hessian(lambda w: jnp.sum(jnp.logaddexp(0.0, w)))(jnp.zeros(2))
  np.testing.assert_allclose(np.asarray(h), 0.25 * np.eye(2))
  assert float(jnp.logaddexp(jnp.inf, jnp.inf)) == np.inf
  assert float(jnp.logaddexp(-jnp.inf, -jnp.inf)) == -np.inf


def test_sinc_higher_derivatives_at_zero():
  f = jnp.sinc
  assert float(ourjax.grad(f)(0.0)) == 0.0
  np.testing.assert_allclose(float(ourjax.grad(ourjax.grad(f))(0.0)), -np.pi ** 2 / 3, rtol=1e-6)
  np.testing.assert_allclose(float(ourjax.grad(ourjax.grad(ourjax.grad(ourjax.grad(f))))(0.0)),
                             np.pi ** 4 / 5, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(f(jnp.array([0.0, 0.5]))), [1.0, 2 / np.pi], rtol=1e-6)
