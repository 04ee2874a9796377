"""checkpoint/remat: same values and gradients as without it, fewer saved residuals (counted in
the linearized jaxpr), the forward recomputed inside the backward pass, policies, and the
compositions with jit, vmap and higher-order differentiation."""
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ourjax
import ourjax.numpy as jnp
from ourjax.ad_checkpoint import checkpoint_name
from ourjax.interpreters import ad

_FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def _chain(x):
  return jnp.sin(jnp.sin(jnp.sin(x)))


def _residuals(f, *args):
  """The residuals reverse mode keeps for f at args: the linear jaxpr's constants."""
  _, jaxpr, consts, _ = ad.linearize_flat(lambda *a: [f(*a)], list(args))
  return consts, jaxpr


def _count(jaxpr, name):
  n = 0
  for e in jaxpr.eqns:
    n += e.primitive.name == name
    for p in e.params.values():
      inner = getattr(p, "jaxpr", p)
      if isinstance(inner, ourjax.core.Jaxpr):
        n += _count(inner, name)
  return n


@settings(max_examples=10, suppress_health_check=_FIXTURE_OK)
@given(hnp.arrays(np.float64, (5,), elements=st.floats(-3, 3)))
def test_same_values_and_gradients(x64, x):
  f = lambda x: jnp.sum(_chain(x) * x)
  fr = lambda x: jnp.sum(ourjax.checkpoint(_chain)(x) * x)
  np.testing.assert_allclose(fr(x), f(x), rtol=1e-14)
  np.testing.assert_allclose(ourjax.grad(fr)(x), ourjax.grad(f)(x), rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(ourjax.jit(ourjax.grad(fr))(x), ourjax.grad(f)(x), rtol=1e-12,
                             atol=1e-14)
  np.testing.assert_allclose(ourjax.hessian(fr)(x), ourjax.hessian(f)(x), rtol=1e-10,
                             atol=1e-12)


def test_fewer_residuals_and_recomputation():
  x = np.linspace(0.1, 1.0, 4).astype(np.float32)
  plain, _ = _residuals(lambda x: jnp.sum(_chain(x)), x)
  saved, jaxpr = _residuals(lambda x: jnp.sum(ourjax.checkpoint(_chain)(x)), x)
  assert len(plain) == 3                 # cos of each sin's input
  assert len(saved) == 1                 # only the input
  np.testing.assert_array_equal(np.asarray(saved[0]), x)
  # the linear jaxpr recomputes the forward: the two inner sines (the outer one's value is not
  # needed by the tangent), and the three cosines
  assert _count(jaxpr, "sin") == 2 and _count(jaxpr, "cos") == 3
  assert _count(jaxpr, "checkpoint") == 1
  # and so does the gradient's jaxpr (forward once outside, again inside the backward pass)
  g = ourjax.make_jaxpr(ourjax.grad(lambda x: jnp.sum(ourjax.checkpoint(_chain)(x))))(x)
  assert _count(g.jaxpr, "sin") == 5
  assert "checkpoint" in str(g) and "prevent_cse=True" in str(g)


def test_policies():
  w = (np.arange(9, dtype=np.float32).reshape(3, 3) - 4) * 0.2

  def layer(x):
    return jnp.sin(jnp.dot(jnp.sin(x), w))

  x = np.linspace(0.1, 1.0, 3).astype(np.float32)
  d = np.sin(x) @ w                                    # the dot's output
  loss = lambda f: (lambda x: jnp.sum(f(x)))
  pols = ourjax.checkpoint_policies

  def saved(policy="plain"):
    f = layer if policy == "plain" else ourjax.checkpoint(layer, policy=policy)
    return [np.asarray(r) for r in _residuals(loss(f), x)[0]]

  def holds(res, value):
    return any(r.shape == value.shape and np.allclose(r, value, rtol=1e-6) for r in res)

  plain, none, nothing = saved(), saved(None), saved(pols.nothing_saveable)
  everything, dots = saved(pols.everything_saveable), saved(pols.dots_saveable)
  # nothing saveable: the input and the closed-over weight only
  assert len(none) == len(nothing) == 2 and holds(none, x) and holds(none, w)
  # everything saveable: what plain reverse mode saves (cos of each sine's input, and w)
  assert len(everything) == len(plain) == 3
  assert holds(everything, np.cos(x)) and holds(everything, np.cos(d))
  # dots saveable: the dot's output is kept, the cosines are recomputed
  assert holds(dots, d) and not holds(dots, np.cos(d)) and not holds(none, d)
  want = ourjax.grad(loss(layer))(x)
  for pol in (None, pols.everything_saveable, pols.dots_saveable,
              pols.dots_with_no_batch_dims_saveable):
    np.testing.assert_allclose(ourjax.grad(loss(ourjax.checkpoint(layer, policy=pol)))(x),
                               want, rtol=1e-6)


def test_save_only_these_names():
  def f(x):
    a = checkpoint_name(jnp.sin(x), "a")
    return jnp.sum(jnp.sin(a) * jnp.cos(x))

  x = np.linspace(0.1, 1.0, 3).astype(np.float32)
  pol = ourjax.checkpoint_policies.save_only_these_names("a")
  n_named = len(_residuals(ourjax.checkpoint(f, policy=pol), x)[0])
  n_none = len(_residuals(ourjax.checkpoint(f), x)[0])
  assert n_named == n_none + 1
  np.testing.assert_allclose(ourjax.grad(ourjax.checkpoint(f, policy=pol))(x),
                             ourjax.grad(f)(x), rtol=1e-6)


def test_save_any_names_but_these():
  def f(x):
    y = checkpoint_name(jnp.sin(x), "y")
    z = checkpoint_name(jnp.cos(x), "z")
    return jnp.sum(jnp.sin(y) * jnp.sin(z) * jnp.exp(x))

  x = np.linspace(0.1, 1.0, 3).astype(np.float32)
  pols = ourjax.checkpoint_policies
  n = {names: len(_residuals(ourjax.checkpoint(
      f, policy=pols.save_any_names_but_these(*names)), x)[0])
      for names in [("y", "z"), ("z",), ()]}
  assert n[("y", "z")] + 1 == n[("z",)] and n[("z",)] + 1 == n[()]   # one more name, one more
  both = pols.save_from_both_policies(pols.save_only_these_names("y"),
                                      pols.save_only_these_names("z"))
  assert len(_residuals(ourjax.checkpoint(f, policy=both), x)[0]) == n[()]
  np.testing.assert_allclose(
      ourjax.grad(ourjax.checkpoint(f, policy=pols.save_any_names_but_these("y")))(x),
      ourjax.grad(f)(x), rtol=1e-6)


def test_remat_under_jit_vmap_and_decorator_forms(x64):
  @ourjax.checkpoint
  def g(x, w):
    return jnp.tanh(x * w) * w

  xs, w = np.linspace(-1, 1, 5), 0.8
  want = (1 - np.tanh(xs * w) ** 2) * w * w
  np.testing.assert_allclose(ourjax.vmap(ourjax.grad(g), in_axes=(0, None))(xs, w), want,
                             rtol=1e-12)
  np.testing.assert_allclose(
      ourjax.grad(lambda xs: jnp.sum(ourjax.vmap(g, in_axes=(0, None))(xs, w)))(xs), want,
      rtol=1e-12)
  # a checkpoint inside a jitted function, under grad (offline partial evaluation)
  h = ourjax.jit(lambda xs: jnp.sum(g(xs, w) ** 2))
  gw = ourjax.grad(lambda xs: jnp.sum(g(xs, w) ** 2))(xs)
  np.testing.assert_allclose(ourjax.grad(h)(xs), gw, rtol=1e-12)
  np.testing.assert_allclose(ourjax.jit(ourjax.grad(h))(xs), gw, rtol=1e-12)
  # checkpoint(policy=...) as a decorator factory, and remat as the alias
  k = ourjax.checkpoint(policy=ourjax.checkpoint_policies.nothing_saveable)(jnp.sin)
  np.testing.assert_allclose(ourjax.grad(lambda x: jnp.sum(k(x)))(xs), np.cos(xs), rtol=1e-12)
  assert ourjax.remat is ourjax.checkpoint
  # jvp of a checkpointed function
  _, t = ourjax.jvp(lambda x: g(x, w), (xs,), (np.ones_like(xs),))
  np.testing.assert_allclose(t, want / w * w, rtol=1e-12)


def test_static_argnums_and_integer_outputs():
  @functools.partial(ourjax.checkpoint, static_argnums=(1,))
  def f(x, n):
    assert isinstance(n, int)     # static: a Python int, not a tracer
    y = x
    for _ in range(n):
      y = jnp.sin(y)
    return y, n

  x = np.float32(0.5)
  g = ourjax.grad(lambda x: f(x, 3)[0])(x)
  np.testing.assert_allclose(g, ourjax.grad(lambda x: _chain(x))(x), rtol=1e-6)
  assert int(ourjax.jit(lambda x: f(x, 2)[1])(x)) == 2


def test_mlp_with_checkpointed_layers(x64):
  rng = np.random.default_rng(1)
  params = [(rng.standard_normal((4, 4)) * 0.5, rng.standard_normal(4) * 0.1)
            for _ in range(3)]
  x = rng.standard_normal((5, 4))

  def layer(p, h):   # a few nonlinearities per layer: more to save than the layer's inputs
    w, b = p
    return jnp.sin(jnp.tanh(jnp.dot(h, w) + b)) * 0.5 + jnp.cos(h)

  def loss(params, remat):
    h = x
    for p in params:
      h = (ourjax.checkpoint(layer) if remat else layer)(p, h)
    return jnp.sum(h ** 2)

  g0 = ourjax.grad(loss)(params, False)
  g1 = ourjax.grad(loss)(params, True)
  for a, b in zip(ourjax.tree_util.tree_leaves(g0), ourjax.tree_util.tree_leaves(g1)):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
  leaves, tree = ourjax.tree_util.tree_flatten(params)
  unflat = lambda ls: ourjax.tree_util.tree_unflatten(tree, list(ls))
  n0 = len(_residuals(lambda *ls: loss(unflat(ls), False), *leaves)[0])
  n1 = len(_residuals(lambda *ls: loss(unflat(ls), True), *leaves)[0])
  assert n1 < n0


def test_checkpoint_jaxpr_and_eager():
  f = ourjax.checkpoint(lambda x: jnp.sin(x) * 2.0)
  jaxpr = ourjax.make_jaxpr(f)(np.float32(1))
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["checkpoint"]
  eqn = jaxpr.jaxpr.eqns[0]
  assert eqn.params["prevent_cse"] is True and eqn.params["differentiated"] is False
  assert float(f(np.float32(1))) == pytest.approx(2 * np.sin(1.0), rel=1e-6)


@pytest.mark.parametrize("prevent_cse", [True, False, (True,)])
def test_differentiated_checkpoint_lowers_through_an_optimization_barrier(prevent_cse):
  """As JAX lowers it: the recomputation in the backward pass reads its inputs through an
  opt-barrier (so CSE cannot merge it with the forward pass), with prevent_cse; the forward
  alone has none; the compiled module has none left, and the gradient is unchanged."""
  g = ourjax.checkpoint(lambda x: jnp.sin(jnp.sin(x)) * x, prevent_cse=prevent_cse)
  f = lambda x: g(x).sum()
  x = np.linspace(-1.0, 1.0, 7).astype(np.float32)
  assert "opt-barrier" not in ourjax.jit(f).lower(x).as_text("hlo")
  low = ourjax.jit(ourjax.grad(f)).lower(x)
  assert ("opt-barrier" in low.as_text("hlo")) == (prevent_cse is not False)
  assert "opt-barrier" not in low.compile().as_text()
  want = ourjax.grad(lambda x: (jnp.sin(jnp.sin(x)) * x).sum())(x)
  for backend in ("cpu", "reference"):
    np.testing.assert_allclose(ourjax.jit(ourjax.grad(f), backend=backend)(x), want,
                               rtol=1e-6, atol=1e-6)


def _barrier_operand_counts(txt):
  import re
  return sorted(len(m.split(",")) for m in re.findall(r"optimization_barrier ([^:]*):", txt))


@pytest.mark.parametrize("cse,want", [((False, True), [2, 2]), ((True, False), [2, 2]),
                                      ((False, False), [1, 1]), (True, [3, 3])])
def test_prevent_cse_per_argument(cse, want):
  # JAX's per-argument prevent_cse: only the flagged arguments (and the residuals and
  # cotangents the backward pass adds) go through the optimization barrier
  @functools.partial(ourjax.checkpoint, prevent_cse=cse)
  def layer(W, x):
    return x @ W + jnp.array([1.0, 2.0, 3.0])

  def loss(Ws, x):
    for W in Ws:
      x = layer(W, x)
    return jnp.sum(x ** 2)
  Ws = [jnp.ones((3, 3)) * 0.5, jnp.eye(3)]
  x = jnp.arange(3.0)
  txt = ourjax.jit(ourjax.grad(loss, (0, 1))).lower(Ws, x).as_text()
  assert _barrier_operand_counts(txt) == want
  g_ref = ourjax.grad(lambda Ws, x: jnp.sum(
      ((x @ Ws[0] + jnp.array([1.0, 2.0, 3.0])) @ Ws[1] + jnp.array([1.0, 2.0, 3.0])) ** 2),
      (0, 1))(Ws, x)
  g = ourjax.jit(ourjax.grad(loss, (0, 1)))(Ws, x)
  np.testing.assert_allclose(g[1], g_ref[1], rtol=1e-6)
  np.testing.assert_allclose(g[0][0], g_ref[0][0], rtol=1e-6)


def test_prevent_cse_must_be_bool_or_tuple():
  with pytest.raises(TypeError, match="prevent_cse must be a bool or tuple of bools"):
    ourjax.checkpoint(lambda x: x, prevent_cse=1)


def test_saved_residuals_are_logged(caplog):
  import logging

  def f(x):
    return jnp.cos(jnp.sin(x).sum())
  x = jnp.arange(3.0)
  caplog.set_level(logging.DEBUG, logger="ourjax")
  for policy, inputs, inter, names in [
      (None, True, False, set()),
      (lambda *_, **__: True, False, True, {"sin", "cos"}),
      (lambda p, *_, **__: str(p) == "cos", True, True, {"cos"})]:
    caplog.clear()
    g = ourjax.grad(ourjax.checkpoint(f, policy=policy))(x)
    np.testing.assert_allclose(g, -np.sin(np.sin(np.arange(3.0)).sum()) * np.cos(np.arange(3.0)),
                               rtol=1e-5)
    text = "\n".join(r.getMessage() for r in caplog.records
                     if "remat-decorated function" in r.getMessage())
    assert ("saving inputs with shapes:" in text) == inputs
    assert ("saving these intermediates:" in text) == inter
    for name in ("sin", "cos"):
      assert (f" {name} " in text) == (name in names), (policy, text)
