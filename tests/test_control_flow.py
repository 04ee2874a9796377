"""Structured control flow (cond, switch, while_loop, fori_loop, scan, map) against Python loops,
gradients against central finite differences (float64), and jvp/vmap/jit/DCE of each."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.interpreters import partial_eval as pe


# ------------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(autouse=True)
def _jit_may_fall_back(monkeypatch):
  # control flow has no lowering yet: jit runs these primitives through the jaxpr evaluator
  monkeypatch.delenv("OURJAX_STRICT_LOWERING", raising=False)


def floats(n=None, lo=-2.0, hi=2.0):
  elt = st.floats(lo, hi, allow_nan=False, width=32)
  if n is None:
    return elt
  return st.lists(elt, min_size=n, max_size=n).map(lambda v: np.array(v, np.float32))


def central_diff(f, x, eps=1e-6):
  """Gradient of the scalar function ``f`` of a float64 array by central differences."""
  x = np.asarray(x, np.float64)
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    e = np.zeros_like(x)
    e[i] = eps
    g[i] = (float(f(x + e)) - float(f(x - e))) / (2 * eps)
  return g


def check_grad(f, x, rtol=1e-5, atol=1e-6):
  g = np.asarray(ourjax.grad(f)(x))
  np.testing.assert_allclose(g, central_diff(f, x), rtol=rtol, atol=atol)


def matvec(w, h):
  return lax.reduce_sum(w * lax.broadcast_in_dim(h, w.shape, (1,)), (1,))


def comp(x, i):
  """``x[i]`` of a vector, without indexing."""
  return jnp.sum(x * np.eye(x.shape[0], dtype=x.dtype)[i])


# ------------------------------------------------------------------------------------------------
# cond / switch


@given(st.booleans(), floats())
def test_cond_matches_python(p, x):
  def f(p, x):
    return lax.cond(p, lambda a: (jnp.sin(a), a * 2), lambda a: (a * a, a - 1), x)

  def ref(p, x):
    return (np.sin(x), x * 2) if p else (x * x, x - 1)

  out = f(p, np.float32(x))
  exp = ref(p, np.float32(x))
  for o, e in zip(out, exp):
    np.testing.assert_allclose(np.asarray(o), e, rtol=1e-6, atol=1e-6)
  out = ourjax.jit(f)(p, np.float32(x))
  for o, e in zip(out, exp):
    np.testing.assert_allclose(np.asarray(o), e, rtol=1e-6, atol=1e-6)


def test_cond_forms_and_integer_predicate():
  x = np.float32(3.0)
  assert float(lax.cond(True, 1.0, lambda a: a + 1, 2.0, lambda a: a * 10)) == 2.0
  assert float(lax.cond(False, 1.0, lambda a: a + 1, 2.0, lambda a: a * 10)) == 20.0
  assert float(lax.cond(2, lambda a: a + 1, lambda a: a - 1, operand=x)) == 4.0
  assert float(lax.cond(np.int32(0), lambda a: a + 1, lambda a: a - 1, x)) == 2.0
  # no operands, and closures over outer values
  assert float(lax.cond(True, lambda: x * 2, lambda: x)) == 6.0


@given(st.integers(-4, 6), floats())
def test_switch_clamps_index(i, x):
  branches = [lambda a: a + 1, lambda a: jnp.sin(a), lambda a: a * a]
  out = lax.switch(i, branches, np.float32(x))
  exp = branches[min(max(i, 0), 2)](np.float32(x))
  np.testing.assert_allclose(np.asarray(out), np.asarray(exp), rtol=1e-6, atol=1e-6)
  out = ourjax.jit(lambda i, x: lax.switch(i, branches, x))(i, np.float32(x))
  np.testing.assert_allclose(np.asarray(out), np.asarray(exp), rtol=1e-6, atol=1e-6)


def test_cond_jaxpr_text():
  text = str(ourjax.make_jaxpr(lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x))(True, 1.0))
  assert "cond[" in text and "branches=(" in text
  assert "sin" in text and "cos" in text
  assert "convert_element_type" in text


def test_cond_grad_fd(x64):
  def f(x):
    y = lax.cond(comp(x, 0) > 0, lambda v: jnp.sin(v) * comp(v, 1), lambda v: v * v, x)
    return jnp.sum(y * y)
  for x in ([0.3, -1.2, 0.7], [-0.5, 2.0, 1.5]):
    check_grad(f, np.array(x))


def test_switch_grad_fd(x64):
  def f(x, i):
    return lax.switch(i, [lambda v: jnp.sum(jnp.exp(v)), lambda v: jnp.sum(v * v * v),
                          lambda v: jnp.sum(jnp.sin(v) * v)], x)
  x = np.array([0.4, -0.8])
  for i in range(-1, 4):
    check_grad(lambda v: f(v, i), x)


def test_cond_grad_wrt_closed_over_value(x64):
  def f(w):
    return lax.cond(True, lambda v: jnp.sin(w * v), lambda v: w, 1.5)
  check_grad(f, np.float64(0.7))


def test_cond_vmap_batched_predicate():
  xs = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
  f = lambda x: lax.cond(x > 0, lambda a: a * 10, lambda a: jnp.sin(a), x)
  out = ourjax.vmap(f)(xs)
  np.testing.assert_allclose(np.asarray(out), np.where(xs > 0, xs * 10, np.sin(xs)), rtol=1e-6)
  text = str(ourjax.make_jaxpr(ourjax.vmap(f))(xs))
  assert "select_n" in text and "cond[" not in text


def test_switch_vmap_batched_index():
  idx = np.array([0, 1, 2, 5, -1], np.int32)
  xs = np.arange(5, dtype=np.float32)
  branches = [lambda a: a + 1, lambda a: a * 3, lambda a: -a]
  out = ourjax.vmap(lambda i, x: lax.switch(i, branches, x))(idx, xs)
  exp = [branches[min(max(i, 0), 2)](x) for i, x in zip(idx, xs)]
  np.testing.assert_allclose(np.asarray(out), np.asarray(exp, np.float32))


def test_cond_vmap_unbatched_predicate():
  xs = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  for p in (True, False):
    f = lambda x: lax.cond(p, lambda a: a.sum(), lambda a: jnp.prod(a), x)
    out = ourjax.vmap(f)(xs)
    exp = xs.sum(1) if p else xs.prod(1)
    np.testing.assert_allclose(np.asarray(out), exp)
    assert "cond[" in str(ourjax.make_jaxpr(ourjax.vmap(f))(xs))


def test_cond_batched_predicate_grad_has_no_nan(x64):
  # the untaken branch (sqrt of a negative: a NaN derivative) must not poison the gradient
  f = lambda x: lax.cond(x > 0, jnp.sqrt, lambda a: a * 2, x)
  x = np.array([-1.0, 4.0])
  np.testing.assert_allclose(np.asarray(ourjax.vmap(ourjax.grad(f))(x)), [2.0, 0.25])
  np.testing.assert_allclose(np.asarray(ourjax.grad(lambda x: jnp.sum(ourjax.vmap(f)(x)))(x)),
                             [2.0, 0.25])


def test_cond_errors():
  with pytest.raises(TypeError, match=r"cond branches must have equal output types[\s\S]*"
                     r"float32\[3\][\s\S]*float32\[2\], so the shapes do not match"):
    lax.cond(True, lambda: jnp.zeros(3), lambda: jnp.zeros(2))
  with pytest.raises(TypeError, match="so the dtypes do not match"):
    lax.cond(True, lambda: jnp.zeros(3, np.int32), lambda: jnp.zeros(3))
  with pytest.raises(TypeError, match="cond branch outputs must have the same pytree structure"):
    lax.cond(True, lambda: (1.0, 2.0), lambda: 1.0)
  with pytest.raises(TypeError, match="Pred must be a scalar"):
    lax.cond(np.array([True, False]), lambda: 1.0, lambda: 2.0)
  # as JAX: any nonzero number is true (floats too); complex predicates are refused
  assert float(lax.cond(1.5, lambda: 1.0, lambda: 2.0)) == 1.0
  assert float(lax.cond(np.float32(0.0), lambda: 1.0, lambda: 2.0)) == 2.0
  with pytest.raises(TypeError, match="Pred type must be"):
    lax.cond(np.complex64(1), lambda: 1.0, lambda: 2.0)
  with pytest.raises(TypeError, match="Branch index must be scalar"):
    lax.switch(np.array([0, 1]), [lambda: 1.0, lambda: 2.0])
  with pytest.raises(TypeError, match="Index type must be an integer"):
    lax.switch(1.0, [lambda: 1.0, lambda: 2.0])
  with pytest.raises(TypeError, match=r"switch branches must have equal output types[\s\S]*"
                     r"output of branch 0 has type float32\[\] but the corresponding output "
                     r"of branch2 has type float32\[2\]"):
    lax.switch(0, [lambda: 1.0, lambda: 2.0, lambda: jnp.zeros(2)])
  with pytest.raises(ValueError, match="Empty branch sequence"):
    lax.switch(0, [])


def test_cond_weak_types_are_false_funs():
  # as JAX's (0.10): cond's outputs take its branch 0's types, false_fun's, weak types included
  out = lax.cond(True, lambda: 1.0, lambda: np.float32(2.0))
  assert not out.weak_type
  out = lax.cond(True, lambda: 1.0, lambda: 2.0)
  assert out.weak_type
  for pred in (True, False):
    out = lax.cond(pred, lambda: np.float32(1.0), lambda: 2.0)
    assert out.weak_type and out.dtype == np.float32
    assert float(out) == (1.0 if pred else 2.0)
  out = ourjax.jit(lambda p: lax.cond(p, lambda: jnp.float32(1.0), lambda: 2.0))(True)
  assert out.weak_type


# ------------------------------------------------------------------------------------------------
# while_loop / fori_loop


@given(st.integers(0, 20), floats(lo=0.5, hi=1.5))
def test_while_loop_matches_python(n, x):
  def body(c):
    i, v = c
    return i + 1, v * np.float32(x) + 1
  out = lax.while_loop(lambda c: c[0] < n, body, (0, np.float32(1.0)))
  i, v = 0, np.float32(1.0)
  while i < n:
    i, v = body((i, v))
  assert int(out[0]) == i
  np.testing.assert_allclose(np.asarray(out[1]), v, rtol=1e-5)


@given(st.integers(-3, 8), st.integers(-3, 8), floats())
def test_fori_loop_matches_python(lo, hi, x):
  body = lambda i, v: v * np.float32(0.9) + i * np.float32(x)
  v = np.float32(0.5)
  for i in range(lo, hi):
    v = body(np.float32(i), v)
  out = lax.fori_loop(lo, hi, body, np.float32(0.5))
  np.testing.assert_allclose(np.asarray(out), v, rtol=1e-5, atol=1e-5)
  # traced bounds: a while loop
  out = ourjax.jit(lambda a, b: lax.fori_loop(a, b, body, np.float32(0.5)))(lo, hi)
  np.testing.assert_allclose(np.asarray(out), v, rtol=1e-5, atol=1e-5)


def test_fori_loop_static_is_scan_dynamic_is_while():
  body = lambda i, v: v + i
  assert "scan[" in str(ourjax.make_jaxpr(lambda x: lax.fori_loop(0, 3, body, x))(1))
  text = str(ourjax.make_jaxpr(lambda n, x: lax.fori_loop(0, n, body, x))(3, 1))
  assert "while[" in text and "body_jaxpr=" in text and "cond_nconsts=" in text


def test_while_loop_jvp(x64):
  def f(x):
    def body(c):
      i, v = c
      return i + 1, jnp.sin(v) * x + v
    return lax.while_loop(lambda c: c[0] < 6, body, (0, x))[1]
  for x in (0.3, -0.7, 1.1):
    _, t = ourjax.jvp(f, (x,), (1.0,))
    fd = (f(x + 1e-6) - f(x - 1e-6)) / 2e-6
    np.testing.assert_allclose(float(t), float(fd), rtol=1e-6)
    np.testing.assert_allclose(float(ourjax.jacfwd(f)(x)), float(fd), rtol=1e-6)
    _, f_lin = ourjax.linearize(f, x)
    np.testing.assert_allclose(float(f_lin(1.0)), float(fd), rtol=1e-6)


def test_while_loop_jvp_tangent_enters_carry_in_body(x64):
  # the carry `acc` starts with a zero tangent and picks one up from x inside the loop
  def f(x):
    return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] + x * x), (0, 0.0))[1]
  _, t = ourjax.jvp(f, (1.5,), (1.0,))
  np.testing.assert_allclose(float(t), 4 * 2 * 1.5)


def test_while_loop_reverse_mode_error():
  f = lambda x: lax.while_loop(lambda c: c < 10.0, lambda c: c * 2, x)
  with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                     "lax.while_loop or lax.fori_loop with dynamic start/stop values"):
    ourjax.grad(f)(1.0)
  g = lambda x, n: lax.fori_loop(0, n, lambda i, v: v * x, 1.0)
  with pytest.raises(ValueError, match="Try using lax.scan"):
    ourjax.grad(ourjax.jit(g))(1.0, 3)


def test_fori_loop_static_grad_fd(x64):
  def f(x):
    return jnp.sum(lax.fori_loop(1, 5, lambda i, v: jnp.sin(v) * x + v / i, x))
  check_grad(f, np.array([0.3, -0.4, 0.9]))


def test_while_vmap_batched_predicate():
  def collatz_steps(n):
    def body(c):
      m, k = c
      return jnp.where(m % 2 == 0, m // 2, 3 * m + 1), k + 1
    return lax.while_loop(lambda c: c[0] != 1, body, (n, 0))[1]
  ns = np.array([1, 2, 3, 6, 7, 27], np.int32)

  def ref(n):
    k = 0
    while n != 1:
      n, k = (n // 2 if n % 2 == 0 else 3 * n + 1), k + 1
    return k
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(collatz_steps)(ns)),
                                [ref(int(n)) for n in ns])
  text = str(ourjax.make_jaxpr(ourjax.vmap(collatz_steps))(ns))
  assert "reduce_or" in text and "select_n" in text


def test_while_vmap_unbatched_predicate():
  xs = np.array([1.0, 2.0, 3.0], np.float32)
  f = lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, 1.0))[1]
  np.testing.assert_allclose(np.asarray(ourjax.vmap(f)(xs)), xs ** 3)
  text = str(ourjax.make_jaxpr(ourjax.vmap(f))(xs))
  assert "reduce_or" not in text
  # batched bounds of a fori_loop: a batched predicate
  g = lambda n: lax.fori_loop(0, n, lambda i, v: v + i, 0)
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(g)(np.array([0, 1, 4, 6]))),
                                [0, 0, 6, 15])


def test_while_loop_errors():
  with pytest.raises(TypeError, match=r"while_loop body function carry input and carry output "
                     r"must have equal types[\s\S]*The input carry c has type float32\[2\] but "
                     r"the corresponding output carry component has type float32\[3\]"):
    lax.while_loop(lambda c: False, lambda c: jnp.zeros(3), jnp.zeros(2))
  with pytest.raises(TypeError, match=r"The input carry component c\[0\] has type int32\[\] "
                     r"but the corresponding output carry component has type float32\[\]"):
    lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1.5, c[1]), (jnp.int32(0), 1.0))
  # a weakly typed initial carry is promoted instead, as in JAX
  out = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1.5, c[1]), (0, 1.0))
  assert out[0].dtype == np.float32 and not out[0].weak_type and float(out[0]) == 3.0
  with pytest.raises(TypeError, match="must have the same pytree structure"):
    lax.while_loop(lambda c: False, lambda c: (c, c), 1.0)
  with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
    lax.while_loop(lambda c: c, lambda c: c + 1, 1.0)
  with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
    lax.while_loop(lambda c: c < jnp.ones(2), lambda c: c + 1, jnp.zeros(2))


def test_while_weak_carry_promoted():
  out = lax.while_loop(lambda x: x < 10, lambda x: x + np.float32(1), 0.0)
  assert out.dtype == np.float32 and not out.weak_type and float(out) == 10.0
  out = lax.fori_loop(0, 3, lambda i, x: x + i, 0)
  assert int(out) == 3


def test_newton_solver_with_while_loop(x64):
  # solve x**3 + a x - b = 0 by Newton's method, until the step is below a tolerance
  def solve(a, b):
    f = lambda x: x ** 3 + a * x - b
    df = lambda x: 3 * x ** 2 + a

    def body(c):
      x, _, k = c
      step = f(x) / df(x)
      return x - step, jnp.abs(step), k + 1
    x, _, k = lax.while_loop(lambda c: (c[1] > 1e-12) & (c[2] < 50), body, (b, 1.0, 0))
    return x, k

  for a, b in [(1.0, 2.0), (2.0, -3.0), (0.5, 10.0)]:
    x, k = solve(a, b)
    assert int(k) < 50
    np.testing.assert_allclose(float(x) ** 3 + a * float(x), b, rtol=1e-10)
    ref = np.roots([1, 0, a, -b])
    ref = ref[np.abs(ref.imag) < 1e-9].real
    np.testing.assert_allclose(float(x), ref[0], rtol=1e-10)
    # implicit-function derivative dx/db = 1 / (3x^2 + a), via forward mode through the loop
    _, t = ourjax.jvp(lambda bb: solve(a, bb)[0], (b,), (1.0,))
    np.testing.assert_allclose(float(t), 1 / (3 * float(x) ** 2 + a), rtol=1e-8)
  # batched over right-hand sides: lanes converge after different numbers of steps
  bs = np.array([2.0, -3.0, 10.0, 0.0])
  xs = ourjax.vmap(lambda b: solve(1.0, b)[0])(bs)
  np.testing.assert_allclose(np.asarray(xs) ** 3 + np.asarray(xs), bs, atol=1e-10)
  xs_jit = ourjax.jit(ourjax.vmap(lambda b: solve(1.0, b)[0]))(bs)
  np.testing.assert_allclose(np.asarray(xs_jit), np.asarray(xs))


# ------------------------------------------------------------------------------------------------
# scan / map


@given(st.integers(1, 6), st.booleans(), st.data())
@settings(max_examples=15)
def test_scan_matches_python(n, reverse, data):
  xs = data.draw(floats(n))
  ws = data.draw(floats(n))
  init = {"s": np.float32(0.5), "v": np.array([1.0, -1.0], np.float32)}

  def f(carry, x):
    x1, x2 = x
    s = carry["s"] * x1 + x2
    v = carry["v"] * np.float32(0.5) + s
    return {"s": s, "v": v}, (s * 2, v.sum())

  carry, ys = lax.scan(f, init, (xs, ws), reverse=reverse)
  c = init
  out = []
  order = range(n - 1, -1, -1) if reverse else range(n)
  for i in order:
    c, y = f(c, (xs[i], ws[i]))
    out.append(y)
  if reverse:
    out = out[::-1]
  np.testing.assert_allclose(np.asarray(carry["s"]), c["s"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(carry["v"]), c["v"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ys[0]), [o[0] for o in out], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ys[1]), [o[1] for o in out], rtol=1e-5, atol=1e-5)
  jc, jys = ourjax.jit(lambda i, a, b: lax.scan(f, i, (a, b), reverse=reverse))(init, xs, ws)
  np.testing.assert_allclose(np.asarray(jys[0]), np.asarray(ys[0]), rtol=1e-6)


def test_scan_length_only_and_none_outputs():
  carry, ys = lax.scan(lambda c, _: (c + 1, None), 0, None, length=4)
  assert int(carry) == 4 and ys is None
  carry, ys = lax.scan(lambda c, _: (c * 2, c), 1, xs=None, length=5)
  np.testing.assert_array_equal(np.asarray(ys), [1, 2, 4, 8, 16])
  carry, ys = lax.scan(lambda c, x: (c, x), 0.0, np.zeros((0, 3), np.float32))
  assert ys.shape == (0, 3)


def test_scan_jaxpr_text():
  text = str(ourjax.make_jaxpr(lambda c, xs: lax.scan(lambda c, x: (c + x, c), c, xs))(
      0.0, np.zeros(3, np.float32)))
  for part in ("scan[", "jaxpr=", "length=3", "reverse=False", "num_consts=", "num_carry=1",
               "unroll=1"):
    assert part in text
  assert "linear=" not in text     # JAX's scan prints no ``linear`` parameter


def test_scan_errors():
  with pytest.raises(ValueError, match="different leading axis sizes"):
    lax.scan(lambda c, x: (c, x), 0.0, (np.zeros(3), np.zeros(4)))
  with pytest.raises(ValueError, match="disagrees with leading axis sizes"):
    lax.scan(lambda c, x: (c, x), 0.0, np.zeros(3), length=4)
  with pytest.raises(ValueError, match="no values to scan over"):
    lax.scan(lambda c, x: (c, x), 0.0, None)
  with pytest.raises(ValueError, match="no leading axis"):
    lax.scan(lambda c, x: (c, x), 0.0, np.float32(1))
  with pytest.raises(TypeError, match=r"scan body function carry input and carry output must "
                     r"have equal types[\s\S]*float32\[2\][\s\S]*float32\[2,2\]"):
    lax.scan(lambda c, x: (lax.broadcast_in_dim(c, (2, 2), (0,)), x), jnp.zeros(2),
             np.zeros(3))
  with pytest.raises(TypeError, match="pair"):
    lax.scan(lambda c, x: c, 0.0, np.zeros(3))


def test_scan_grad_fd(x64):
  def loss(params, xs):
    w0, w1, b = comp(params, 0), comp(params, 1), comp(params, 2)

    def step(h, x):
      h = jnp.tanh(w0 * h + w1 * x + b)
      return h, h * x
    h, ys = lax.scan(step, 0.1, xs)
    return h + jnp.sum(ys * ys)
  xs = np.array([0.5, -0.3, 0.8, 1.2, -0.7])
  p = np.array([0.9, -0.4, 0.2])
  check_grad(lambda p: loss(p, xs), p)
  check_grad(lambda x: loss(p, x), xs)
  # reversed scan, and a gradient flowing through the initial carry
  f = lambda x: jnp.sum(lax.scan(lambda c, v: (c * v + 1, jnp.sin(c * v)), comp(x, 0), x,
                                 reverse=True)[1])
  check_grad(f, np.array([0.3, 0.5, -1.1, 0.8]))
  # several scanned inputs, each needed by the backward pass
  g = lambda x: jnp.sum(lax.scan(lambda c, ab: (c * ab[0] + jnp.sin(c * ab[1]), c * ab[2]),
                                 0.5, (x, x * x, jnp.cos(x)))[1])
  check_grad(g, np.array([0.3, 0.5, -1.1, 0.8]))


def test_scan_linearize_and_jvp(x64):
  def f(x):
    return lax.scan(lambda c, v: (jnp.sin(c) * v, c * v), 1.0, x)
  x, t = np.array([0.4, 1.3, -0.2]), np.array([1.0, -0.5, 2.0])
  (c, ys), (tc, tys) = ourjax.jvp(f, (x,), (t,))
  fd = [(a - b) / 2e-6 for a, b in zip(f(x + 1e-6 * t), f(x - 1e-6 * t))]
  np.testing.assert_allclose(float(tc), float(fd[0]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(tys), np.asarray(fd[1]), rtol=1e-6)
  _, f_lin = ourjax.linearize(f, x)
  lc, lys = f_lin(t)
  np.testing.assert_allclose(float(lc), float(tc), rtol=1e-10)
  np.testing.assert_allclose(np.asarray(lys), np.asarray(tys), rtol=1e-10)


def test_scan_grad_saves_loop_invariant_residuals_once(x64):
  # w is a loop constant: the transposed body reads it once rather than as a stacked residual
  w = np.array([[0.5, -0.2], [0.1, 0.9]])

  def f(w):
    return jnp.sum(lax.scan(lambda h, x: (jnp.tanh(matvec(w, h) + x), h),
                            np.ones(2), np.ones((4, 2)))[0])
  check_grad(f, w)
  closed = ourjax.make_jaxpr(ourjax.grad(f))(w)
  fwd, bwd = [e for e in closed.jaxpr.eqns if e.primitive is lax.scan_p]
  assert bwd.params["reverse"] and bwd.params["num_consts"] == 1
  assert bwd.inputs[0] is closed.jaxpr.invars[0]        # w itself, not a stacked copy
  # the stacked residuals: tanh' and the broadcast carry, but no copy of w per iteration
  assert sum(v.aval.shape == (4, 2, 2) for v in fwd.out_binders) == 1


def test_hessian_and_jacrev_of_scan(x64):
  def f(x):
    return lax.scan(lambda c, v: (c * jnp.sin(v) + v, c * c), 0.5, x)[0]
  x = np.array([0.2, -0.6, 1.1])
  h = np.asarray(ourjax.hessian(f)(x))
  g = lambda x: np.asarray(ourjax.grad(f)(x))
  fd = np.stack([(g(x + 1e-6 * e) - g(x - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
  np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)
  jr = np.asarray(ourjax.jacrev(lambda x: lax.scan(lambda c, v: (c + v, c * v), 0.0, x)[1])(x))
  jf = np.asarray(ourjax.jacfwd(lambda x: lax.scan(lambda c, v: (c + v, c * v), 0.0, x)[1])(x))
  np.testing.assert_allclose(jr, jf, rtol=1e-10)


def test_nested_control_flow_grad(x64):
  def f(x):
    def outer(c, v):
      c = lax.cond(v > 0, lambda a: a * v, lambda a: jnp.sin(a) + v, c)
      inner, _ = lax.scan(lambda d, u: (d * u + c, None), c, jnp.ones(2) * v)
      return inner, lax.fori_loop(0, 2, lambda i, a: a * c, v)
    c, ys = lax.scan(outer, comp(x, 0), x)
    return c + jnp.sum(ys)
  check_grad(f, np.array([0.7, 0.3, -0.4, 0.5]), rtol=1e-5)


def test_scan_vmap():
  xs = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
  inits = np.array([1.0, 2.0, 3.0], np.float32)
  w = np.float32(0.5)
  f = lambda c0, x: lax.scan(lambda c, v: (c * w + v, c - v), c0, x)
  bc, bys = ourjax.vmap(f)(inits, xs)
  for k in range(3):
    c, ys = f(inits[k], xs[k])
    np.testing.assert_allclose(np.asarray(bc)[k], np.asarray(c), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(bys)[k], np.asarray(ys), rtol=1e-6)
  # only the carry batched / only xs batched (in_axes=1) / only a constant batched
  bc, bys = ourjax.vmap(f, in_axes=(0, None))(inits, xs[0])
  np.testing.assert_allclose(np.asarray(bys)[1], np.asarray(f(inits[1], xs[0])[1]), rtol=1e-6)
  bc, bys = ourjax.vmap(f, in_axes=(None, 1))(1.0, xs)
  np.testing.assert_allclose(np.asarray(bys)[2], np.asarray(f(1.0, xs[:, 2])[1]), rtol=1e-6)
  g = lambda w: lax.scan(lambda c, v: (c * w + v, c), 1.0, xs[0])[0]
  ws = np.array([0.1, 0.5, 0.9], np.float32)
  np.testing.assert_allclose(np.asarray(ourjax.vmap(g)(ws)), [float(g(v)) for v in ws],
                             rtol=1e-6)


def test_vmap_of_grad_of_scan(x64):
  def f(x):
    return lax.scan(lambda c, v: (jnp.sin(c + v), c), 0.3, x)[0]
  xs = np.array([[0.1, 0.2, 0.3], [0.5, -0.5, 1.0]])
  g = ourjax.vmap(ourjax.grad(f))(xs)
  for k in range(2):
    np.testing.assert_allclose(np.asarray(g)[k], central_diff(f, xs[k]), rtol=1e-6)


def test_map():
  xs = np.arange(10, dtype=np.float32).reshape(5, 2)
  f = lambda x: (jnp.sum(x * x), x * 2)
  ys = lax.map(f, xs)
  np.testing.assert_allclose(np.asarray(ys[0]), (xs * xs).sum(1))
  np.testing.assert_allclose(np.asarray(ys[1]), xs * 2)
  for bs in (1, 2, 5, 7):
    yb = lax.map(f, xs, batch_size=bs)
    np.testing.assert_allclose(np.asarray(yb[0]), (xs * xs).sum(1))
    np.testing.assert_allclose(np.asarray(yb[1]), xs * 2)
  yv = ourjax.vmap(lambda x: lax.map(jnp.sin, x))(xs)
  np.testing.assert_allclose(np.asarray(yv), np.sin(xs), rtol=1e-6)
  yj = ourjax.jit(lambda x: lax.map(jnp.sin, x))(xs)
  np.testing.assert_allclose(np.asarray(yj), np.sin(xs), rtol=1e-6)


def test_rnn_trained_with_scan(x64):
  rng = np.random.RandomState(0)
  n_h, n_in, T = 4, 2, 6
  xs = rng.randn(T, n_in)
  targets = np.sin(np.cumsum(xs[:, 0]) / 2)
  params = {"wh": rng.randn(n_h, n_h) * 0.3, "wx": rng.randn(n_h, n_in) * 0.3,
            "b": np.zeros(n_h), "wo": rng.randn(n_h) * 0.3}

  def loss(p):
    def cell(h, x):
      h = jnp.tanh(matvec(p["wh"], h) + matvec(p["wx"], x) + p["b"])
      return h, jnp.sum(p["wo"] * h)
    _, ys = lax.scan(cell, jnp.zeros(n_h), xs)
    return jnp.mean((ys - targets) ** 2)

  # gradient against central differences, for every parameter
  grads = ourjax.grad(loss)(params)
  for k, v in params.items():
    def f(val, k=k):
      q = dict(params)
      q[k] = val
      return loss(q)
    np.testing.assert_allclose(np.asarray(grads[k]), central_diff(f, v), rtol=1e-5,
                               atol=1e-8)
  # plain SGD
  step = ourjax.jit(lambda p: ourjax.tree_util.tree_map(lambda a, g: a - 0.5 * g, p,
                                                        ourjax.grad(loss)(p)))
  losses = [float(loss(params))]
  for _ in range(15):
    params = step(params)
    losses.append(float(loss(params)))
  assert losses[-1] < 0.5 * losses[0]
  assert all(b <= a + 1e-12 for a, b in zip(losses, losses[1:]))


# ------------------------------------------------------------------------------------------------
# DCE


def test_dce_drops_unused_scan_carries_and_outputs():
  def f(xs):
    (a, b), (ya, yb) = lax.scan(lambda c, x: ((c[0] + x, c[1] * x), (c[0], jnp.sin(c[1]))),
                                (0.0, 1.0), xs)
    return a, ya
  closed = ourjax.make_jaxpr(f)(np.zeros(3, np.float32))
  new, used = pe.dce_jaxpr(closed.jaxpr, [True, False])
  eqn, = [e for e in new.eqns if e.primitive is lax.scan_p]
  assert eqn.params["num_carry"] == 1 and len(eqn.out_binders) == 1
  assert "sin" not in str(new) and "mul" not in str(new)
  out = ourjax.core.eval_jaxpr(new, closed.consts, np.arange(3, dtype=np.float32))
  assert float(out[0]) == 3.0
  # a carry that only feeds a used carry is kept
  g = lambda xs: lax.scan(lambda c, x: ((c[0] + c[1], c[1] + x), None), (0.0, 1.0), xs)[0][0]
  closed = ourjax.make_jaxpr(g)(np.zeros(3, np.float32))
  new, _ = pe.dce_jaxpr(closed.jaxpr, [True])
  eqn, = [e for e in new.eqns if e.primitive is lax.scan_p]
  assert eqn.params["num_carry"] == 2


def test_dce_while_and_cond():
  def f(x):
    i, a, b = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x, jnp.sin(c[2])),
                             (0, x, x))
    p, q = lax.cond(x > 0, lambda v: (v + 1, jnp.cos(v)), lambda v: (v - 1, jnp.exp(v)), x)
    return a, b, p, q
  closed = ourjax.make_jaxpr(f)(1.0)
  new, _ = pe.dce_jaxpr(closed.jaxpr, [True, False, True, False])
  text = str(new)
  assert "sin" not in text and "cos" not in text and "exp" not in text
  w, = [e for e in new.eqns if e.primitive is lax.while_p]
  assert len(w.out_binders) == 2      # the counter is kept: the predicate reads it
  out = ourjax.core.eval_jaxpr(new, closed.consts, 1.0)
  np.testing.assert_allclose([float(o) for o in out], [4.0, 2.0])


def test_grad_of_jit_with_control_flow(x64):
  # under grad, a jitted function is split offline: each control-flow equation splits itself
  w = np.array([[0.3, -0.5], [0.8, 0.1]])

  def f(x):
    h, ys = lax.scan(lambda h, v: (jnp.tanh(matvec(w.T * comp(x, 0), h) + v), jnp.sum(h * v)),
                     x, jnp.ones((3, 2)) * x)
    y = lax.cond(jnp.sum(h) > 0, lambda a: jnp.sum(jnp.sin(a)), lambda a: jnp.sum(a * a), h)
    return y + jnp.sum(ys) + lax.fori_loop(0, 3, lambda i, c: c * jnp.cos(c), jnp.sum(x))
  x = np.array([0.4, -0.9])
  g_ref = central_diff(f, x)
  np.testing.assert_allclose(np.asarray(ourjax.grad(ourjax.jit(f))(x)), g_ref, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ourjax.jit(ourjax.grad(f))(x)), g_ref, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ourjax.grad(f)(x)), g_ref, rtol=1e-6)


def test_vmap_over_closed_over_values(x64):
  ws = np.array([0.5, -1.0, 2.0])

  def f(w):
    a = lax.cond(w > 0, lambda: jnp.sin(w), lambda: w * w)
    b = lax.scan(lambda c, v: (c * w + v, None), 1.0, jnp.ones(3))[0]
    c = lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] + w), (0, 0.0))[1]
    return a + b + c
  np.testing.assert_allclose(np.asarray(ourjax.vmap(f)(ws)), [float(f(w)) for w in ws])
  g = ourjax.vmap(ourjax.jacfwd(f))(ws)    # forward mode: the while_loop has no transpose
  np.testing.assert_allclose(np.asarray(g), [central_diff(f, np.float64(w)) for w in ws],
                             rtol=1e-6)


def test_disable_jit_while_loop_copies_numpy_carries_and_falls_back_under_vmap():
  # JAX: with jit disabled the loop runs in Python on arrays (a body that updates a NumPy carry
  # in place does not alias the other carry), and a traced predicate (vmap) uses the primitive
  def body(carry):
    x, y = carry
    x += 1
    return x, y + x

  def f():
    val = np.array(1.0)
    return lax.while_loop(lambda c: c[0] < 10, body, (val, val))[1]

  with ourjax.disable_jit(False):
    jitted = f()
  with ourjax.disable_jit(True):
    eager = f()
    batched = ourjax.vmap(lambda y: lax.while_loop(lambda x: x < 10.0, lambda x: x + 1.0, y))(
        jnp.array([3.0, 4.0]))
  assert float(jitted) == float(eager) == sum(range(1, 11))
  np.testing.assert_array_equal(batched, [10.0, 10.0])


def test_platform_dependent_without_a_branch_for_the_platform():
  with pytest.raises(NotImplementedError, match="translation rule .* not found for platform"):
    lax.platform_dependent(3.0, tpu=lambda x: x + 2.0)


def test_scan_with_jit_disabled_runs_the_body_in_python():
  calls = []

  def body(c, x):
    calls.append(type(c).__name__)          # concrete values, not tracers
    return c + x["a"], (c * 2, x["b"])

  xs = {"a": np.arange(4.0, dtype=np.float32), "b": np.arange(8).reshape(4, 2)}
  with ourjax.disable_jit():
    carry, (y1, y2) = lax.scan(body, 0.0, xs)
    rcarry, (ry1, _) = lax.scan(body, 0.0, xs, reverse=True)
    with pytest.raises(ValueError, match="zero-length scan"):
      lax.scan(lambda c, x: (c + x, x), 0.0, np.array([], np.float32))
    assert float(lax.fori_loop(0, 0, lambda i, x: x + i, 1.0)) == 1.0
  assert len(calls) == 8 and "Tracer" not in "".join(calls)
  ref = lax.scan(body, 0.0, xs)                # the same with jit on
  assert float(carry) == float(ref[0]) == 6.0
  np.testing.assert_array_equal(y1, ref[1][0])
  np.testing.assert_array_equal(y2, xs["b"])
  np.testing.assert_array_equal(ry1, 2 * np.array([6.0, 5.0, 3.0, 0.0]))
  assert float(rcarry) == 6.0


def test_scan_forwards_xs_returned_as_ys():
  # a y that is the x as it came in is the xs array itself (JAX): the loop computes only the rest
  f = lambda xs: lax.scan(lambda c, x: (c + 1, x), 0, xs)
  scan_eqn = ourjax.make_jaxpr(f)(jnp.arange(3.0)).eqns[0]
  assert len(scan_eqn.params["jaxpr"].jaxpr.outvars) == 1
  xs = {"a": np.arange(3.0, dtype=np.float32), "b": np.ones((3, 2), np.float32)}
  for rev in (False, True):
    c, (b, cs, a) = lax.scan(lambda c, x: (c + x["a"], (x["b"], c, x["a"])), 0.0, xs,
                             reverse=rev)
    np.testing.assert_array_equal(a, xs["a"])
    np.testing.assert_array_equal(b, xs["b"])
    expect = np.cumsum(xs["a"][::-1])[::-1] - xs["a"] if rev else np.cumsum(xs["a"]) - xs["a"]
    np.testing.assert_array_equal(cs, expect)
  g = ourjax.grad(lambda v: lax.scan(lambda c, x: (c * x, x), 1.0, v)[1].sum() +
                  lax.scan(lambda c, x: (c * x, x), 1.0, v)[0])(jnp.arange(1.0, 4.0))
  np.testing.assert_allclose(g, 1 + np.array([6.0, 3.0, 2.0]))


def test_switch_branches_share_residual_slots():
  # JAX merges the branches' residuals by type: sin and cos (one f32 residual each) share one
  # slot, sin + cos needs a second; gradients stay right
  branches = [jnp.sin, jnp.cos, jnp.sinh, lambda x: jnp.sin(x) + jnp.cos(x)]
  refs = [np.cos, lambda x: -np.sin(x), np.cosh, lambda x: np.cos(x) - np.sin(x)]

  def conds(bs):
    j = ourjax.make_jaxpr(ourjax.grad(lambda x, i: lax.switch(i + 1, bs, x)))(0.0, 0)
    return [e for e in j.eqns if str(e.primitive) == "cond"]

  fwd2, bwd2 = conds(branches[:2])
  fwd3, _ = conds(branches[:3])
  fwd4, bwd4 = conds(branches)
  n_out = lambda e: {len(b.jaxpr.outvars) for b in e.params["branches"]}
  assert n_out(fwd2) == n_out(fwd3) == {2} and n_out(fwd4) == {3}
  assert {len(b.jaxpr.invars) for b in bwd4.params["branches"]} == {3}
  g = ourjax.jit(ourjax.grad(lambda x, i: lax.switch(i, branches, x)))
  for i, ref in enumerate(refs):
    np.testing.assert_allclose(g(0.7, i), ref(0.7), rtol=1e-6)


# -- control-flow traces are cached by function identity (as JAX's) --------------------------

def test_control_flow_bodies_are_traced_once_per_signature():
  import gc
  import weakref
  calls = {"cond": 0, "body": 0, "scan": 0, "t": 0, "f": 0}

  def cond(x):
    calls["cond"] += 1
    return x < 5

  def body(x):
    calls["body"] += 1
    return x + 2

  def step(c, x):
    calls["scan"] += 1
    return c + x, c

  def tb(x):
    calls["t"] += 1
    return x + 1

  def fb(x):
    calls["f"] += 1
    return x - 1

  for _ in range(3):
    assert int(lax.while_loop(cond, body, 0)) == 6
    c, ys = lax.scan(step, 0.0, jnp.ones(3))
    np.testing.assert_allclose(ys, [0.0, 1.0, 2.0])
    assert float(lax.cond(True, tb, fb, 1.0)) == 2.0
    assert float(lax.switch(1, [tb, fb], 1.0)) == 0.0
  assert calls == {"cond": 1, "body": 1, "scan": 1, "t": 2, "f": 2}   # (cond and switch)
  # other operand types trace again; a longer scan does not (its body sees one slice)
  assert float(lax.while_loop(cond, body, 0.0)) == 6.0
  assert calls["body"] == 2
  lax.scan(step, 0.0, jnp.ones(4))
  assert calls["scan"] == 1
  # a body closing over a tracer of an enclosing jit is traced again in each trace, with
  # that trace's value
  def g(y):
    return lax.while_loop(cond, lambda x: x + y, 0.0)
  assert float(ourjax.jit(g)(1.0)) == 5.0 and float(ourjax.jit(g)(2.5)) == 5.0
  assert float(ourjax.jit(lambda y: g(y) * 2)(4.0)) == 16.0
  # fori_loop too, with static bounds (a scan) and traced ones (a while_loop)
  fcalls = []

  def fbody(i, x):
    fcalls.append(i)
    return x + i
  for _ in range(3):
    assert int(lax.fori_loop(0, 4, fbody, 0)) == 6
  assert len(fcalls) == 1
  for _ in range(3):
    assert int(ourjax.jit(lambda hi: lax.fori_loop(0, hi, fbody, 0))(4)) == 6
  assert len(fcalls) == 2
  # clear_caches forgets them
  ourjax.clear_caches()
  lax.while_loop(cond, body, 0)
  assert calls["body"] == 3
  # the cache does not keep a function alive
  fn = lambda x: x + 1     # noqa: E731
  lax.while_loop(cond, fn, 0)
  ref = weakref.ref(fn)
  del fn
  gc.collect()
  assert ref() is None


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_unroll_gives_the_rolled_result_and_unrolls_the_lowered_loop(reverse):
  def f(c, x):
    c2 = jnp.sin(c) * 0.5 + x[0]
    return c2, (c2 * 2, x[1] + c2.sum())

  def python_scan(c, xs):        # the reference: a NumPy loop (float64)
    n = len(xs[1])
    ys0, ys1 = [None] * n, [None] * n
    c = np.asarray(c, np.float64)
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
      c = np.sin(c) * 0.5 + xs[0][t]
      ys0[t], ys1[t] = c * 2, xs[1][t] + c.sum()
    return c, np.stack(ys0), np.stack(ys1)

  for length in [1, 3, 5]:
    xs = (np.arange(length * 3, dtype=np.float32).reshape(length, 3) / 7,
          np.arange(length, dtype=np.float32))
    c0 = np.ones(3, np.float32)
    want = python_scan(c0, xs)
    for unroll in [1, 2, 3, True, 0, 10]:
      c, (y0, y1) = ourjax.jit(lambda c, xs: lax.scan(f, c, xs, reverse=reverse,
                                                      unroll=unroll))(c0, xs)
      for got, w in zip((c, y0, y1), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  # the lowered loop body holds `unroll` steps: the module grows with it
  xs, c0 = jnp.ones((20, 3)), jnp.ones(3)
  size = [len(ourjax.jit(lambda c, xs: lax.scan(f, c, xs, unroll=u)).lower(c0, xs)
              .as_text("hlo")) for u in (1, 2, True)]
  assert size[0] < size[1] < size[2]
