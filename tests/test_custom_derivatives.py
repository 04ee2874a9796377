"""custom_jvp and custom_vjp: the rules are what jvp/grad use (the tests' rules are deliberately
different from the true derivative, so a silently ignored rule fails), values are the primal
function's, and jit, vmap and higher-order differentiation compose as in JAX; errors as JAX."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ourjax
import ourjax.numpy as jnp
from ourjax import custom_jvp, custom_vjp, dtypes, lax
from ourjax.errors import UnexpectedTracerError

float0 = dtypes.float0


# ------------------------------------------------------------------------------------------------
# custom_jvp


def _make_f():
  """sin(x) * y whose JVP rule scales y's contribution by 100 (so we can tell it is used)."""
  @custom_jvp
  def f(x, y):
    return jnp.sin(x) * y

  @f.defjvp
  def f_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    return f(x, y), jnp.cos(x) * tx * y + 100.0 * jnp.sin(x) * ty

  return f


def _df(x, y):
  return np.cos(x) * y, 100.0 * np.sin(x)


def test_custom_jvp_value_jvp_and_grad():
  f = _make_f()
  assert math.isclose(float(f(2.0, 3.0)), math.sin(2.0) * 3.0, rel_tol=1e-6)
  y, t = ourjax.jvp(f, (2.0, 3.0), (1.0, 1.0))
  dx, dy = _df(2.0, 3.0)
  assert math.isclose(float(y), math.sin(2.0) * 3.0, rel_tol=1e-6)
  assert math.isclose(float(t), dx + dy, rel_tol=1e-5)
  gx, gy = ourjax.grad(f, argnums=(0, 1))(2.0, 3.0)
  assert math.isclose(float(gx), dx, rel_tol=1e-5) and math.isclose(float(gy), dy, rel_tol=1e-5)


def test_custom_jvp_under_jit():
  f = _make_f()
  jaxpr = ourjax.make_jaxpr(f)(2.0, 3.0)
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["custom_jvp_call"]
  assert math.isclose(float(ourjax.jit(f)(2.0, 3.0)), math.sin(2.0) * 3.0, rel_tol=1e-6)
  dx, dy = _df(2.0, 3.0)
  for g in (ourjax.grad(ourjax.jit(f), argnums=(0, 1)),
            ourjax.jit(ourjax.grad(f, argnums=(0, 1))),
            ourjax.grad(lambda x, y: ourjax.jit(lambda a, b: f(a, b) * 1.0)(x, y),
                        argnums=(0, 1))):
    gx, gy = g(2.0, 3.0)
    assert math.isclose(float(gx), dx, rel_tol=1e-5)
    assert math.isclose(float(gy), dy, rel_tol=1e-5)


@settings(max_examples=10)
@given(hnp.arrays(np.float32, (4,), elements=st.floats(-3, 3, width=32)),
       hnp.arrays(np.float32, (4,), elements=st.floats(-3, 3, width=32)))
def test_custom_jvp_under_vmap(xs, ys):
  f = _make_f()
  np.testing.assert_allclose(ourjax.vmap(f)(xs, ys), np.sin(xs) * ys, rtol=1e-5, atol=1e-6)
  dx, dy = _df(xs, ys)
  # vmap of grad: the rule runs on batch tracers
  gx, gy = ourjax.vmap(ourjax.grad(f, argnums=(0, 1)))(xs, ys)
  np.testing.assert_allclose(gx, dx, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gy, dy, rtol=1e-5, atol=1e-4)
  # grad of vmap: the batched rule runs (and an unbatched argument's gradient is summed)
  gx2, gy2 = ourjax.grad(lambda xs, y: jnp.sum(ourjax.vmap(f, in_axes=(0, None))(xs, y)),
                         argnums=(0, 1))(xs, np.float32(1.5))
  np.testing.assert_allclose(gx2, np.cos(xs) * 1.5, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gy2, np.sum(100 * np.sin(xs)), rtol=1e-4, atol=1e-3)
  # jvp of vmap
  _, t = ourjax.jvp(ourjax.vmap(f), (xs, ys), (np.ones(4, np.float32), np.ones(4, np.float32)))
  np.testing.assert_allclose(t, dx + dy, rtol=1e-5, atol=1e-4)


def test_custom_jvp_higher_order():
  @custom_jvp
  def f(x):
    return jnp.sin(x)

  f.defjvps(lambda t, ans, x: jnp.cos(x) * t * 2.0)   # twice the true derivative
  x = 0.7
  assert math.isclose(float(ourjax.grad(f)(x)), 2 * math.cos(x), rel_tol=1e-6)
  # the rule itself is differentiated for the second derivative
  assert math.isclose(float(ourjax.grad(ourjax.grad(f))(x)), -2 * math.sin(x), rel_tol=1e-6)
  h = ourjax.hessian(lambda v: jnp.sum(f(v)))(np.array([0.1, 0.2], np.float32))
  np.testing.assert_allclose(h, np.diag(-2 * np.sin([0.1, 0.2])), rtol=1e-5, atol=1e-7)


def test_custom_jvp_numerically_stable_rule():
  @custom_jvp
  def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))

  @log1pexp.defjvp
  def log1pexp_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + jnp.exp(x)))

  assert float(ourjax.grad(log1pexp)(100.0)) == 1.0
  assert float(ourjax.jit(ourjax.grad(log1pexp))(100.0)) == 1.0


def test_custom_jvp_nondiff_argnums_and_kwargs():
  @custom_jvp
  def app(f, x, scale=2.0):
    return f(x) * scale

  def app_jvp(f, primals, tangents):
    x, scale = primals
    t, ts = tangents
    return app(f, x, scale), 10.0 * t + 0.0 * ts

  app = custom_jvp(app.fun, nondiff_argnums=(0,))
  app.defjvp(app_jvp)
  assert float(app(jnp.sin, 0.5)) == pytest.approx(2 * math.sin(0.5), rel=1e-6)
  assert float(app(jnp.sin, x=0.5, scale=3.0)) == pytest.approx(3 * math.sin(0.5), rel=1e-6)
  assert float(ourjax.grad(lambda x: app(jnp.sin, x))(0.5)) == 10.0
  assert float(ourjax.jit(ourjax.grad(lambda x: app(jnp.sin, x)))(0.5)) == 10.0


def test_custom_jvp_integer_argument_gets_float0_tangent():
  seen = []

  @custom_jvp
  def f(x, n):
    return x * n

  @f.defjvp
  def f_jvp(primals, tangents):
    x, n = primals
    tx, tn = tangents
    seen.append(np.asarray(tn).dtype)
    return f(x, n), tx * n

  assert float(ourjax.grad(f)(2.0, 3)) == 3.0
  assert seen and seen[-1] == float0


def test_custom_jvp_pytrees_and_closures():
  scale = jnp.array([1.0, 2.0])     # a closed-over array

  @custom_jvp
  def f(d):
    return {"s": jnp.sum(d["a"] * scale), "p": d["a"] * d["b"]}

  @f.defjvp
  def f_jvp(primals, tangents):
    (d,), (t,) = primals, tangents
    return f(d), {"s": jnp.sum(t["a"] * scale), "p": t["a"] * d["b"] + d["a"] * t["b"]}

  d = {"a": jnp.array([1.0, -1.0]), "b": jnp.array([0.5, 3.0])}
  g = ourjax.grad(lambda d: f(d)["s"] + jnp.sum(f(d)["p"]))(d)
  np.testing.assert_allclose(g["a"], [1.5, 5.0])
  np.testing.assert_allclose(g["b"], [1.0, -1.0])
  gj = ourjax.jit(ourjax.grad(lambda d: f(d)["s"]))(d)
  np.testing.assert_allclose(gj["a"], [1.0, 2.0])


def test_custom_jvp_errors():
  @custom_jvp
  def f(x):
    return x * 2

  with pytest.raises(AttributeError, match="No JVP defined for custom_jvp function f using "
                     "defjvp"):
    f(1.0)
  f.defjvp(lambda p, t: (f(*p),))
  with pytest.raises(TypeError, match="must produce a pair \\(list or tuple of length two\\)"):
    ourjax.jvp(f, (1.0,), (1.0,))
  f.defjvp(lambda p, t: (f(*p), (t[0], t[0])))
  with pytest.raises(TypeError, match="must produce primal and tangent outputs with equal "
                     "container \\(pytree\\) structures"):
    ourjax.jvp(f, (1.0,), (1.0,))
  f.defjvp(lambda p, t: (f(*p), lax.convert_element_type(t[0], np.int32)))
  with pytest.raises(TypeError, match="expected tangent dtype float32"):
    ourjax.jvp(f, (np.float32(1),), (np.float32(1),))
  f.defjvp(lambda p, t: (f(*p), jnp.ones(3)))
  with pytest.raises(ValueError, match="corresponding shapes"):
    ourjax.jvp(f, (np.float32(1),), (np.float32(1),))


# ------------------------------------------------------------------------------------------------
# custom_vjp


def _make_g(calls=None):
  """sin(x) * y whose bwd scales y's cotangent by 100."""
  @custom_vjp
  def g(x, y):
    return jnp.sin(x) * y

  def g_fwd(x, y):
    if calls is not None:
      calls.append("fwd")
    return g(x, y), (jnp.cos(x), jnp.sin(x), y)

  def g_bwd(res, ct):
    if calls is not None:
      calls.append("bwd")
    cos_x, sin_x, y = res
    return cos_x * ct * y, 100.0 * sin_x * ct

  g.defvjp(g_fwd, g_bwd)
  return g


def test_custom_vjp_value_and_grad():
  calls = []
  g = _make_g(calls)
  assert math.isclose(float(g(2.0, 3.0)), math.sin(2.0) * 3.0, rel_tol=1e-6)
  assert calls == []        # eagerly only the primal function runs
  gx, gy = ourjax.grad(g, argnums=(0, 1))(2.0, 3.0)
  dx, dy = _df(2.0, 3.0)
  assert math.isclose(float(gx), dx, rel_tol=1e-5) and math.isclose(float(gy), dy, rel_tol=1e-5)
  assert calls == ["fwd", "bwd"]
  out, pullback = ourjax.vjp(g, 2.0, 3.0)
  cx, cy = pullback(2.0)
  assert math.isclose(float(cx), 2 * dx, rel_tol=1e-5)
  v, _ = ourjax.value_and_grad(g)(2.0, 3.0)
  assert math.isclose(float(v), math.sin(2.0) * 3.0, rel_tol=1e-6)


def test_custom_vjp_under_jit():
  g = _make_g()
  jaxpr = ourjax.make_jaxpr(g)(2.0, 3.0)
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["custom_vjp_call"]
  assert math.isclose(float(ourjax.jit(g)(2.0, 3.0)), math.sin(2.0) * 3.0, rel_tol=1e-6)
  dx, dy = _df(2.0, 3.0)
  for gr in (ourjax.grad(ourjax.jit(g), argnums=(0, 1)),
             ourjax.jit(ourjax.grad(g, argnums=(0, 1)))):
    gx, gy = gr(2.0, 3.0)
    assert math.isclose(float(gx), dx, rel_tol=1e-5)
    assert math.isclose(float(gy), dy, rel_tol=1e-5)


@settings(max_examples=10)
@given(hnp.arrays(np.float32, (3,), elements=st.floats(-3, 3, width=32)),
       hnp.arrays(np.float32, (3,), elements=st.floats(-3, 3, width=32)))
def test_custom_vjp_under_vmap(xs, ys):
  g = _make_g()
  np.testing.assert_allclose(ourjax.vmap(g)(xs, ys), np.sin(xs) * ys, rtol=1e-5, atol=1e-6)
  dx, dy = _df(xs, ys)
  gx, gy = ourjax.vmap(ourjax.grad(g, argnums=(0, 1)))(xs, ys)
  np.testing.assert_allclose(gx, dx, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gy, dy, rtol=1e-5, atol=1e-4)
  # grad of vmap with an unbatched argument: its cotangent is summed over the batch
  gx2, gy2 = ourjax.grad(lambda xs, y: jnp.sum(ourjax.vmap(g, in_axes=(0, None))(xs, y)),
                         argnums=(0, 1))(xs, np.float32(1.5))
  np.testing.assert_allclose(gx2, np.cos(xs) * 1.5, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gy2, np.sum(100 * np.sin(xs)), rtol=1e-4, atol=1e-3)


def test_custom_vjp_second_order():
  @custom_vjp
  def f(x):
    return jnp.sin(x)

  f.defvjp(lambda x: (f(x), jnp.cos(x)), lambda c, g: (2.0 * c * g,))   # twice the truth
  assert math.isclose(float(ourjax.grad(f)(0.3)), 2 * math.cos(0.3), rel_tol=1e-6)
  # reverse over reverse: bwd is differentiated
  assert math.isclose(float(ourjax.grad(ourjax.grad(f))(0.3)), -2 * math.sin(0.3),
                      rel_tol=1e-6)


def test_custom_vjp_forward_mode_is_an_error():
  g = _make_g()
  with pytest.raises(TypeError, match="can't apply forward-mode autodiff \\(jvp\\) to a "
                     "custom_vjp function."):
    ourjax.jvp(g, (2.0, 3.0), (1.0, 1.0))


def test_custom_vjp_none_cotangents_pytrees_and_integer_args():
  @custom_vjp
  def f(d, n):
    return d["a"] * n + d["b"]

  def fwd(d, n):
    return f(d, n), (n,)

  def bwd(res, ct):
    n, = res
    return {"a": ct * n * 10.0, "b": None}, None

  f.defvjp(fwd, bwd)
  d = {"a": jnp.array([1.0, 2.0]), "b": jnp.array([3.0, 4.0])}
  _, pullback = ourjax.vjp(f, d, 3)
  cd, cn = pullback(jnp.ones(2))
  np.testing.assert_allclose(cd["a"], [30.0, 30.0])
  np.testing.assert_allclose(cd["b"], [0.0, 0.0])
  assert cn.dtype == float0


def test_custom_vjp_clip_gradient_with_nondiff_function_arg():
  @custom_vjp
  def clip_gradient(lo, hi, x):
    return x

  def fwd(lo, hi, x):
    return x, None

  def bwd(lo, hi, _, g):
    return (None, None, jnp.clip(g, lo, hi))

  clip_gradient = custom_vjp(clip_gradient.fun, nondiff_argnums=(0, 1))
  clip_gradient.defvjp(fwd, lambda lo, hi, res, g: (jnp.clip(g, lo, hi),))
  f = lambda x: clip_gradient(-0.5, 0.5, x) * 3.0
  assert float(ourjax.grad(f)(1.0)) == 0.5
  assert float(ourjax.jit(ourjax.grad(f))(1.0)) == 0.5

  @custom_vjp
  def h(x, y):
    return x * y
  h = custom_vjp(h.fun, nondiff_argnums=(1,))
  h.defvjp(lambda x, y: (x * y, y), lambda y, r, g: (g * r,))
  with pytest.raises(UnexpectedTracerError, match="Found a JAX Tracer object passed as an "
                     "argument to a custom_vjp function in a position indicated by "
                     "nondiff_argnums as non-differentiable"):
    ourjax.grad(lambda y: h(1.0, y))(2.0)


def test_custom_vjp_bwd_structure_errors():
  @custom_vjp
  def f(x):
    return x

  f.defvjp(lambda x: (x, None), lambda _, g: (g, g))
  f(2.0)   # fine eagerly
  structure = ourjax.tree_util.tree_structure
  with pytest.raises(TypeError) as e:
    ourjax.grad(f)(2.0)
  assert str(e.value) == (
      "Custom VJP bwd rule must produce an output with the same container (pytree) structure "
      "as the args tuple of the primal function, and in particular must produce a tuple of "
      "length equal to the number of arguments to the primal function, but got bwd output "
      f"structure {structure((1, 1))} for primal input structure {structure((1,))}.")
  f.defvjp(lambda x: (x, None), lambda _, g: 2.0 * g)     # not a tuple
  with pytest.raises(TypeError, match="Custom VJP bwd rule must produce an output with the "
                     "same container"):
    ourjax.grad(f)(2.0)
  f.defvjp(lambda x: (x, None), lambda _, g: (jnp.ones(3),))
  with pytest.raises(ValueError, match="Custom VJP bwd rule must produce an output with the "
                     "same shape/dtypes as the args tuple of the primal function"):
    ourjax.grad(f)(2.0)
  f.defvjp(lambda x: ((x, x), None), lambda _, g: (g,))
  with pytest.raises(TypeError, match="Custom VJP fwd rule <lambda> for function f must "
                     "produce a pair"):
    ourjax.grad(f)(2.0)

  @custom_vjp
  def nothing(x):
    return x
  with pytest.raises(AttributeError, match="No VJP defined for custom_vjp function nothing "
                     "using defvjp"):
    nothing(1.0)


def test_custom_vjp_inside_checkpoint_and_stacked():
  g = _make_g()
  f = lambda x: g(g(x, 2.0), 0.5)
  x = 0.4
  want = float(ourjax.grad(f)(x))
  inner = math.sin(x) * 2.0
  assert math.isclose(want, math.cos(inner) * 0.5 * math.cos(x) * 2.0, rel_tol=1e-5)
  assert math.isclose(float(ourjax.grad(ourjax.checkpoint(f))(x)), want, rel_tol=1e-6)


def test_closure_convert():
  w = jnp.array([1.0, 2.0, 3.0])
  f = lambda x: jnp.sum(x * w)
  conv, consts = ourjax.closure_convert(f, jnp.zeros(3))
  assert len(consts) == 1
  x = jnp.array([1.0, 1.0, 2.0])
  assert float(conv(x, *consts)) == float(f(x))
  assert float(conv(x, jnp.ones(3))) == 4.0


# ------------------------------------------------------------------------------------------------
# Staged without differentiation: partial evaluation and transposition use the primal function


def test_linear_transpose_and_partial_eval_of_custom_functions():
  from ourjax.interpreters import partial_eval as pe

  @custom_jvp
  def scale(x):
    return x * 3.0

  scale.defjvps(lambda t, ans, x: t * 3.0)
  g = _make_g()
  x = np.array([1.0, 2.0], np.float32)
  (ct,) = ourjax.linear_transpose(scale, x)(np.ones(2, np.float32))
  np.testing.assert_allclose(ct, [3.0, 3.0])
  (ct,) = ourjax.linear_transpose(lambda y: g(np.float32(0.5), y), x)(np.ones(2, np.float32))
  np.testing.assert_allclose(ct, np.sin(0.5) * np.ones(2), rtol=1e-6)
  # online partial evaluation with a known and an unknown operand: the known part runs now
  for f in (lambda a, b: scale(jnp.sin(a)) * b, lambda a, b: g(a, b)):
    jaxpr, pvals, consts = pe.partial_eval_flat(
        lambda a, b: [f(a, b)], [pe.PartialVal.known(x), pe.PartialVal.unknown(
            ourjax.core.ShapedArray((2,), np.float32))])
    assert not pvals[0].is_known
    out = ourjax.core.eval_jaxpr(jaxpr, consts, np.full(2, 2.0, np.float32))
    np.testing.assert_allclose(out[0], f(x, np.full(2, 2.0, np.float32)), rtol=1e-6)
  # offline: a custom call inside a jaxpr, split with one input known
  closed = ourjax.make_jaxpr(lambda a, b: g(a, b) + scale(a))(x, x)
  jk, ju, out_unk, n_res = pe.partial_eval_jaxpr(pe.convert_constvars_jaxpr(closed.jaxpr),
                                                [False, True])
  known = ourjax.core.eval_jaxpr(jk, [], x)
  res = known[len(known) - n_res:]
  out = ourjax.core.eval_jaxpr(ju, [], *res, np.full(2, 2.0, np.float32))
  np.testing.assert_allclose(out[0], g(x, np.full(2, 2.0, np.float32)) + scale(x), rtol=1e-6)


def test_differentiating_a_closed_over_value_is_an_error():
  from ourjax.custom_derivatives import CustomJVPException, CustomVJPException

  def with_jvp(w):
    @custom_jvp
    def f(x):
      return x * w
    f.defjvps(lambda t, ans, x: t * w)
    return f(w * 2.0)

  def with_vjp(w):
    @custom_vjp
    def f(x):
      return x * w
    f.defvjp(lambda x: (x * w, None), lambda _, g: (g * w,))
    return f(w * 2.0)

  with pytest.raises(CustomJVPException, match="Detected differentiation of a custom_jvp "
                     "function with respect to a closed-over value"):
    ourjax.grad(with_jvp)(3.0)
  with pytest.raises(CustomVJPException, match="Detected differentiation of a custom_vjp "
                     "function with respect to a closed-over value"):
    ourjax.grad(with_vjp)(3.0)
  # closing over traced values is fine for the other transformations
  np.testing.assert_allclose(ourjax.vmap(with_jvp)(jnp.array([1.0, 2.0])), [2.0, 8.0])
  np.testing.assert_allclose(ourjax.jit(with_vjp)(3.0), 18.0)


def test_custom_gradient_rule_is_the_vjp():
  # jax.custom_gradient: fun returns (out, rule); rule(ct) gives the argument cotangents
  @ourjax.custom_gradient
  def f(x):
    return x ** 2, lambda g: (g * x,)          # deliberately half the true derivative

  assert float(f(3.0)) == 9.0
  for g in (ourjax.grad(f), ourjax.jit(ourjax.grad(f))):
    assert float(g(3.0)) == 3.0
  np.testing.assert_allclose(ourjax.vmap(ourjax.grad(f))(jnp.arange(3.0)), [0.0, 1.0, 2.0])

  @ourjax.custom_gradient
  def h(x, y):
    return x * y, lambda g: (g * y * 10, g * x)
  gx, gy = ourjax.jit(ourjax.grad(h, (0, 1)))(2.0, 3.0)
  assert (float(gx), float(gy)) == (30.0, 2.0)

  @ourjax.custom_gradient
  def clip_gradient(x):                        # a single cotangent, not a tuple
    return x, lambda g: jnp.clip(g, -0.5, 0.5)
  assert float(ourjax.grad(lambda x: 3 * clip_gradient(x))(1.0)) == 0.5

  @ourjax.custom_gradient
  def with_int(x):                             # an integer output gets a float0 cotangent
    return (x, jnp.round(x).astype(jnp.int32)), lambda g: jnp.ones_like(x)
  np.testing.assert_array_equal(
      ourjax.grad(lambda x: jnp.sum(with_int(with_int(x)[0])[0]))(jnp.arange(3.0)), np.ones(3))


def test_custom_vjp_symbolic_zeros():
  # JAX's symbolic_zeros=True: fwd sees CustomVJPPrimal(value, perturbed) leaves (a key array is
  # one leaf), bwd sees SymbolicZero for zero cotangents (float0 for keys and integers) and may
  # return SymbolicZero or None for a zero cotangent
  from ourjax.custom_derivatives import CustomVJPPrimal, SymbolicZero
  seen = {}

  @ourjax.custom_vjp
  def g(x, y):
    return x * y, x + y

  def g_fwd(x, y):
    assert isinstance(x, CustomVJPPrimal) and isinstance(y, CustomVJPPrimal)
    seen["perturbed"] = (x.perturbed, y.perturbed)
    return g(x.value, y.value), (x.value, y.value)

  def g_bwd(res, cts):
    a, b = cts
    seen["zero"] = (isinstance(a, SymbolicZero), isinstance(b, SymbolicZero))
    x, y = res
    ga = 0.0 if isinstance(a, SymbolicZero) else a
    gb = 0.0 if isinstance(b, SymbolicZero) else b
    return ga * y + gb, (SymbolicZero.from_primal_value(x) if isinstance(b, SymbolicZero)
                         else ga * x + gb)

  g.defvjp(g_fwd, g_bwd, symbolic_zeros=True)
  assert float(ourjax.grad(lambda x: g(x, 2.0)[0])(3.0)) == 2.0
  assert seen == {"perturbed": (True, False), "zero": (False, True)}
  dx, dy = ourjax.jit(ourjax.grad(lambda x, y: g(x, y)[1], (0, 1)))(3.0, 2.0)
  assert (float(dx), float(dy)) == (1.0, 1.0)
  assert seen == {"perturbed": (True, True), "zero": (True, False)}
  np.testing.assert_allclose(ourjax.vmap(ourjax.grad(lambda x: g(x, 2.0)[0]))(jnp.arange(3.0)),
                             [2.0, 2.0, 2.0])

  @ourjax.custom_vjp
  def f(_, state):
    return state
  state = (8.0, ourjax.random.key(123))

  def bwd_keys(_, ct):
    assert isinstance(ct[1], SymbolicZero) and ct[1].dtype == ourjax.dtypes.float0
    return ct[0], ct
  f.defvjp(lambda _, state: (ourjax.tree.map(lambda p: p.value, state), None), bwd_keys,
           symbolic_zeros=True)
  assert float(ourjax.grad(lambda t: f(t, state)[0])(3.0)) == 1.0


def test_custom_jvp_symbolic_zeros():
  # JAX: with symbolic_zeros=True a rule sees SymbolicZero for a tangent that is symbolically
  # zero (an argument not differentiated) and may return one
  from ourjax.custom_derivatives import SymbolicZero
  seen = []

  @ourjax.custom_jvp
  def f(x, y):
    return x * y

  def f_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    seen.append((isinstance(tx, SymbolicZero), isinstance(ty, SymbolicZero)))
    out = 0.0
    if not isinstance(tx, SymbolicZero):
      out = out + 10 * tx * y                   # deliberately not the true derivative
    if not isinstance(ty, SymbolicZero):
      out = out + x * ty
    return x * y, out
  f.defjvp(f_jvp, symbolic_zeros=True)

  assert float(ourjax.grad(f)(2.0, 3.0)) == 30.0 and seen[-1] == (False, True)
  assert float(ourjax.jit(ourjax.grad(f, 1))(2.0, 3.0)) == 2.0 and seen[-1] == (True, False)
  out, tan = ourjax.jvp(f, (2.0, 3.0), (1.0, 0.0))    # an explicit 0 is a value, not symbolic
  assert (float(out), float(tan)) == (6.0, 30.0) and seen[-1] == (False, False)
  np.testing.assert_allclose(ourjax.vmap(ourjax.grad(f))(jnp.arange(3.0), jnp.ones(3)), 10.0)

  @ourjax.custom_jvp
  def g(x):
    return 2 * x
  g.defjvp(lambda p, t: (g(p[0]), SymbolicZero.from_primal_value(p[0])), symbolic_zeros=True)
  assert float(ourjax.grad(g)(1.0)) == 0.0
