"""checkpoint policies reach inside the control flow and jit calls a checkpointed function
holds (JAX's partial_eval_jaxpr_custom rules for cond, scan and jit): values computed inside a
cond branch, a scan body or a jitted call are saved or recomputed one by one, as the policy says,
instead of the whole cond/scan/call being recomputed.  Gradients are checked against the
function without checkpoint and against finite differences (float64)."""
import functools

import numpy as np
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.ad_checkpoint import checkpoint_name

policies = ourjax.checkpoint_policies
save_cos = lambda prim, *_, **__: str(prim) == "cos"          # noqa: E731
save_sin = lambda prim, *_, **__: str(prim) == "sin"          # noqa: E731
POLICIES = [None, policies.nothing_saveable, policies.everything_saveable,
            policies.dots_saveable, save_cos, save_sin]


def _linear_text(f, x):
  return str(ourjax.make_jaxpr(ourjax.linearize(f, x)[1])(x))


def _count(text, name):
  return text.count(f" {name} ")


def _body(W, x):
  x = jnp.sin(jnp.dot(x, W))
  x = jnp.cos(jnp.dot(x, W))
  return jnp.tanh(x)


def _programs():
  def with_cond(W):
    x = jnp.linspace(0.1, 0.5, W.shape[0])
    return lax.cond(W.sum() > 0, lambda x: _body(W, x), lambda x: jnp.sin(x) * W[0], x).sum()

  def with_scan(W):
    x = jnp.linspace(0.1, 0.5, W.shape[0])
    return lax.scan(lambda c, t: (_body(W, c) * t, jnp.cos(c)), x,
                    jnp.array([1.0, 0.5, 2.0]))[1].sum()

  def with_jit(W):
    return ourjax.jit(lambda W: jnp.sin(_body(W, W[0])).sum())(W)

  def nested(W):
    def step(c, _):
      return lax.cond(c.sum() > -100.0, lambda c: _body(W, c), jnp.cos, c), None
    return lax.scan(step, W[1], None, length=2)[0].sum()
  return {"cond": with_cond, "scan": with_scan, "jit": with_jit, "nested": nested}


PROGRAMS = _programs()


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(sorted(PROGRAMS)), pol=st.sampled_from(range(len(POLICIES))),
       seed=st.integers(0, 2**16), sign=st.sampled_from([1.0, -1.0]))
def test_gradients_match_without_checkpoint_and_finite_differences(name, pol, seed, sign):
  f = PROGRAMS[name]
  W = sign * np.abs(np.random.default_rng(seed).standard_normal((3, 3))) * 0.5
  with ourjax.enable_x64(True):
    W64 = jnp.asarray(W)
    g_ref = ourjax.grad(f)(W64)
    f_ck = ourjax.checkpoint(f, policy=POLICIES[pol])
    np.testing.assert_allclose(ourjax.grad(f_ck)(W64), g_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ourjax.jit(ourjax.grad(f_ck))(W64), g_ref, rtol=1e-9,
                               atol=1e-12)
    # central differences on a few entries
    eps = 1e-6
    for (i, j) in [(0, 0), (1, 2), (2, 1)]:
      E = np.zeros_like(W)
      E[i, j] = eps
      fd = (float(f(jnp.asarray(W + E))) - float(f(jnp.asarray(W - E)))) / (2 * eps)
      np.testing.assert_allclose(float(g_ref[i, j]), fd, rtol=1e-5, atol=1e-7)


def test_cond_branch_values_follow_the_policy():
  # save_cos: cos x is saved from the forward pass, nothing is recomputed (JAX's counts)
  f = ourjax.checkpoint(lambda x: lax.cond(x > 0, jnp.sin, lambda x: x, x), policy=save_cos)
  t = _linear_text(f, 4.0)
  assert (_count(t, "sin"), _count(t, "cos")) == (0, 0)
  # nothing saveable: cos x is recomputed in the backward pass, sin x is not needed
  f = ourjax.checkpoint(lambda x: lax.cond(x > 0, jnp.sin, lambda x: x, x),
                        policy=policies.nothing_saveable)
  t = _linear_text(f, 4.0)
  assert (_count(t, "sin"), _count(t, "cos")) == (0, 1)
  np.testing.assert_allclose(ourjax.grad(f)(4.0), np.cos(4.0), rtol=1e-6)


def test_dots_saved_inside_cond():
  # JAX's test_remat_checkpoint_dots_inside_cond: the dots are saved, the sines recomputed
  x = jnp.ones((5,))

  @functools.partial(ourjax.checkpoint, policy=policies.checkpoint_dots)
  def f(W):
    def g(x):
      for _ in range(3):
        x = jnp.sin(jnp.dot(x, W, precision=lax.Precision.HIGHEST))
      return x
    return lax.cond(x.sum() > 0, g, lambda x: x, x)

  y, f_vjp = ourjax.vjp(f, jnp.ones((5, 5)))
  t = str(ourjax.make_jaxpr(f_vjp)(y))
  assert (_count(t, "sin"), _count(t, "cos"), t.count(" dot_")) == (2, 3, 5)


def test_scan_body_values_follow_the_policy():
  to_scan = lambda c, _: (jnp.sin(c), jnp.sin(c))           # noqa: E731
  f = ourjax.checkpoint(lambda x: lax.scan(to_scan, x, None, length=3), policy=save_cos)
  t = _linear_text(f, 4.0)
  assert (_count(t, "sin"), _count(t, "cos")) == (0, 0)
  f = ourjax.checkpoint(lambda x: lax.scan(to_scan, x, None, length=3),
                        policy=policies.nothing_saveable)
  t = _linear_text(f, 4.0)
  assert _count(t, "cos") >= 1          # recomputed, not saved


def test_jit_call_inside_checkpoint_is_split_by_the_policy():
  @ourjax.custom_jvp
  def sin(x):
    return jnp.sin(x)

  def sin_jvp(primals, tangents):
    x, = primals
    y, c = ourjax.jit(lambda: (jnp.sin(x), jnp.cos(x)))()
    return y, c * tangents[0]
  sin.defjvp(sin_jvp)
  for pol, want in [(save_cos, (0, 0)), (save_sin, (0, 1))]:
    f = ourjax.checkpoint(lambda x: lax.cond(x > 0, sin, lambda x: x, x), policy=pol)
    t = _linear_text(f, 4.0)
    assert (_count(t, "sin"), _count(t, "cos")) == want, (pol, t)
    np.testing.assert_allclose(ourjax.grad(f)(4.0), np.cos(4.0), rtol=1e-6)


def test_operands_of_calls_are_recomputed_not_saved():
  # nothing saveable: sin x feeds a jit call; the call must not save it as its residual
  # (the enclosing checkpoint recomputes it), as JAX's test_remat_custom_policy
  sin = lambda x: checkpoint_name(jnp.sin(x), "sin")              # noqa: E731
  for square in [lambda x: x * x, ourjax.jit(lambda x: x * x)]:
    f = ourjax.checkpoint(lambda x: sin(square(sin(x))), policy=None)
    y, f_lin = ourjax.linearize(f, 1.0)
    text = str(f_lin.func.args[0])
    assert " sin " in text and " cos " in text
    y_ref, t_ref = ourjax.jvp(lambda x: jnp.sin(jnp.sin(x) ** 2), (1.0,), (2.0,))
    np.testing.assert_allclose(y, y_ref, rtol=1e-6)
    np.testing.assert_allclose(f_lin(2.0), t_ref, rtol=1e-6)


def test_scan_carries_are_recomputed_by_the_staged_scan():
  # JAX's test_remat_of_scan: with nothing saveable the linearized scan recomputes the carry
  to_scan = lambda c, _: (jnp.sin(c), jnp.sin(c))                  # noqa: E731
  f = ourjax.checkpoint(lambda x: lax.scan(to_scan, x, None, length=3))
  t = _linear_text(f, 4.0)
  assert " sin " in t and " cos " in t
  g = ourjax.grad(lambda x: f(x)[1].sum())(4.0)
  g_ref = ourjax.grad(lambda x: lax.scan(to_scan, x, None, length=3)[1].sum())(4.0)
  np.testing.assert_allclose(g, g_ref, rtol=1e-6)


def test_nested_cond_inside_custom_jvp_follows_the_policy():
  def cond_apply(f, x):
    return lax.cond(True, f, lambda x: x, x)

  @ourjax.custom_jvp
  def sin(x):
    return jnp.sin(x)

  def sin_jvp(primals, tangents):
    x, = primals
    y, c = cond_apply(lambda xs: (jnp.sin(xs[0]), jnp.cos(xs[1])), (x, x))
    return y, c * tangents[0]
  sin.defjvp(sin_jvp)
  cases = [(save_cos, (0, 0)), (save_sin, (0, 1)), (policies.everything_saveable, (0, 0)),
           (policies.nothing_saveable, (0, 1))]           # (JAX's counts)
  for pol, want in cases:
    f = ourjax.checkpoint(functools.partial(cond_apply, sin), policy=pol)
    t = _linear_text(f, 4.0)
    assert (_count(t, "sin"), _count(t, "cos")) == want, (pol, t)
    np.testing.assert_allclose(ourjax.grad(ourjax.grad(f))(3.0), -np.sin(3.0), rtol=1e-5)
