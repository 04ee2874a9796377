"""Mutable array references (ourjax.ref, JAX's jax.ref / jax.new_ref): eager reads and writes,
threading through jit (arguments and closed-over references) and through the loops and
conditionals, references local to a grad/vmap'd function; checked against NumPy."""
import numpy as np
import pytest

import ourjax as jax
import ourjax.numpy as jnp
from ourjax import lax


def test_eager_get_set_swap_addupdate_freeze():
  x = np.arange(5, dtype=np.float32)
  r = jax.new_ref(jnp.asarray(x))
  assert isinstance(r, jax.Ref) and r.shape == (5,) and r.dtype == np.float32 and r.ndim == 1
  assert repr(r.aval) == "Ref{float32[5]}"
  np.testing.assert_array_equal(r[1:3], x[1:3])
  r[1] = 10.
  x[1] = 10.
  r[...] += 1
  x += 1
  np.testing.assert_array_equal(r[...], x)
  old = jax.ref.swap(r, 0, 7.)
  assert float(old) == x[0]
  x[0] = 7.
  jax.ref.addupdate(r, (), jnp.ones(5))
  x += 1
  jax.ref.set(r, slice(3, 5), jnp.zeros(2))
  x[3:5] = 0
  np.testing.assert_array_equal(jax.ref.get(r), x)
  np.testing.assert_array_equal(jax.ref.freeze(r), x)


def test_set_checks_shape_and_dtype():
  r = jax.new_ref(jnp.zeros(3, jnp.float32))
  with pytest.raises(ValueError, match="Invalid shape for `swap`"):
    r[...] = jnp.zeros(4)
  with pytest.raises(ValueError, match="Invalid shape for `swap`.*Expected shape: \\(2,\\)"):
    r[1:] = 5.       # as JAX: no broadcasting of the value written
  with pytest.raises(ValueError, match="Invalid dtype for `swap`"):
    r[...] = jnp.zeros(3, jnp.int32)
  r[1] = 2            # a weakly typed value takes the reference's dtype
  assert r[...].dtype == np.float32 and float(r[1]) == 2.0


def test_jit_with_reference_argument_mutates_it():
  @jax.jit
  def f(r, x):
    r[...] += x
    return x * 2
  r = jax.new_ref(jnp.zeros(3))
  expected = np.zeros(3, np.float32)
  for k in range(3):       # the second and third calls hit the cache: the new value is used
    x = np.full(3, k + 1, np.float32)
    np.testing.assert_array_equal(f(r, x), 2 * x)
    expected += x
    np.testing.assert_array_equal(r[...], expected)


def test_jit_closed_over_reference():
  r = jax.new_ref(jnp.float32(1.))

  @jax.jit
  def step(x):
    r[...] = r[...] * x
    return r[...] + 1
  assert float(step(2.)) == 3.0 and float(r[...]) == 2.0
  assert float(step(3.)) == 7.0 and float(r[...]) == 6.0
  r[...] = 1.          # written outside: the jitted function reads the new value
  assert float(step(5.)) == 6.0


def test_same_reference_twice_is_one_reference():
  @jax.jit
  def f(a, b):
    a[...] += 1.
    b[...] += 10.
  r = jax.new_ref(jnp.zeros(()))
  f(r, r)
  assert float(r[...]) == 11.0


@pytest.mark.parametrize("staged", [False, True])
def test_loops_and_conditionals_thread_references(staged):
  def program():
    acc = jax.new_ref(jnp.float32(0.))

    def body(i, c):
      acc[...] += i.astype(jnp.float32)
      return c + 1
    n = lax.fori_loop(0, 5, body, 0)

    def scan_body(c, x):
      acc[...] = acc[...] * x
      return c, acc[...]
    _, ys = lax.scan(scan_body, 0., jnp.array([2., 3.], jnp.float32))
    lax.cond(acc[...] > 50., lambda: acc.__setitem__(..., acc[...] + 100.), lambda: None)
    lax.switch(1, [lambda: None, lambda: acc.__setitem__(..., acc[...] - 1.)])
    lax.while_loop(lambda c: acc[...] < 1000., lambda c: (acc.__setitem__(
        ..., acc[...] * 2.), c + 1)[1], 0)
    return n, ys, acc[...]
  n, ys, final = jax.jit(program)() if staged else program()
  # by hand: 0+1+2+3+4 = 10, *2 = 20, *3 = 60, +100 = 160, -1 = 159, doubled until >= 1000
  v = 159.
  while v < 1000.:
    v *= 2
  assert int(n) == 5
  np.testing.assert_array_equal(ys, [20., 60.])
  assert float(final) == v


def test_outer_reference_in_loop_body():
  r = jax.new_ref(jnp.zeros(4))

  def body(i, c):
    r[i] = i * 2.
    return c
  lax.fori_loop(0, 4, body, None)
  np.testing.assert_array_equal(r[...], [0., 2., 4., 6.])
  jax.jit(lambda: lax.fori_loop(0, 4, body, None))()
  np.testing.assert_array_equal(r[...], [0., 2., 4., 6.])


def test_local_references_under_grad_and_vmap():
  def f(x):
    r = jax.new_ref(x)
    r[...] = jnp.sin(r[...]) * 2.
    jax.ref.addupdate(r, (), x ** 2)
    return r[...].sum()
  x = np.array([0.3, -1.2, 2.0], np.float32)
  np.testing.assert_allclose(jax.grad(f)(x), 2 * np.cos(x) + 2 * x, rtol=1e-5)
  np.testing.assert_allclose(jax.jit(jax.grad(f))(x), 2 * np.cos(x) + 2 * x, rtol=1e-5)
  xs = np.stack([x, 2 * x])
  np.testing.assert_allclose(jax.vmap(f)(xs), [(2 * np.sin(v) + v ** 2).sum() for v in xs],
                             rtol=1e-5)


def test_returning_a_reference_from_jit_is_an_error():
  with pytest.raises(ValueError, match="mutable array references cannot be returned"):
    jax.jit(lambda: jax.new_ref(1.))()


def test_outer_reference_inside_checkpoint_is_an_error():
  r = jax.new_ref(jnp.float32(1.))
  with pytest.raises(ValueError, match="does not thread references"):
    jax.jit(jax.checkpoint(lambda x: x * r[...]))(2.)


def test_vjp_with_refs_accumulates_gradients():
  def f(x, y):
    return jnp.sin(x) * y
  x, y = np.array([0.3, 1.1], np.float32), np.array([2.0, -1.0], np.float32)
  _, f_vjp = jax.vjp(f, x, y)
  acc = jax.new_ref(jnp.ones(2))
  for _ in range(2):    # added into the reference each time
    gx, gy = f_vjp.with_refs(acc, jax.ad.DontWant())(jnp.ones(2, jnp.float32))
  assert gx == jax.ad.GradRef() and gy == jax.ad.DidntWant()
  np.testing.assert_allclose(acc[...], 1 + 2 * np.cos(x) * y, rtol=1e-6)
  gx, gy = f_vjp.with_refs(jax.ad.GradValue(), None)(jnp.ones(2, jnp.float32))
  np.testing.assert_allclose(gx, np.cos(x) * y, rtol=1e-6)
  np.testing.assert_allclose(gy, np.sin(x), rtol=1e-6)
  out = jax.jit(lambda: f_vjp.with_refs(jax.ad.DontWant(), jax.ad.GradValue())(
      jnp.ones(2, jnp.float32)))()     # the markers are pytrees: they come out of jit
  assert out[0] == jax.ad.DidntWant()
  with pytest.raises(TypeError, match="one spec per primal"):
    f_vjp.with_refs(acc)


def test_writing_a_differentiated_value_into_an_outer_reference_is_an_error():
  r = jax.new_ref(jnp.float32(0.))

  def f(x):
    r[...] = x * 2        # x is a tracer of grad, r was made outside it
    return x
  with pytest.raises(ValueError, match="made outside the transformation"):
    jax.grad(f)(1.)
  assert float(r[...]) == 0.0

  def g(x):                # reading an outer reference, writing a plain value: fine
    r[...] = r[...] + 1.
    return x * r[...]
  np.testing.assert_allclose(jax.grad(g)(3.), 1.0)
  assert float(r[...]) == 1.0


def test_nested_jits_and_loops_share_an_outer_reference():
  r = jax.new_ref(jnp.zeros(()))

  @jax.jit
  def inner(x):
    r[...] += x
    return x

  @jax.jit
  def outer(x):
    inner(x)
    inner(2 * x)
    return r[...]
  assert float(outer(1.)) == 3.0 and float(outer(1.)) == 6.0

  def body(c, x):
    inner(x)
    return c, r[...]
  _, ys = lax.scan(body, 0., jnp.arange(3.))
  np.testing.assert_array_equal(ys, [6., 7., 9.])
  _, ys = jax.jit(lambda: lax.scan(body, 0., jnp.arange(3.)))()
  np.testing.assert_array_equal(ys, [9., 10., 12.])

  @jax.jit
  def add_to(ref, v):
    ref[...] += v

  def h(x):                 # a local reference handed to a jitted function, under vmap/grad
    loc = jax.new_ref(x)
    add_to(loc, x)
    return loc[...]
  np.testing.assert_array_equal(jax.vmap(h)(jnp.arange(3.)), [0., 2., 4.])
  np.testing.assert_array_equal(jax.grad(lambda x: h(x).sum())(jnp.ones(2)), [2., 2.])

  a, b = jax.new_ref(jnp.int32(0)), jax.new_ref(jnp.int32(0))

  def step(i):
    lax.cond(i % 2 == 0, lambda: a.__setitem__(..., a[...] + 1),
             lambda: b.__setitem__(..., b[...] + 1))
    return i + 1
  jax.jit(lambda: lax.while_loop(lambda i: i < 7, step, 0))()
  assert (int(a[...]), int(b[...])) == (4, 3)
