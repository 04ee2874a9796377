"""Control flow inside CUDA graphs, on a GPU (skipped without one): ``while`` loops and
``cond``/``switch`` whose predicate or index is computed on the device replay as conditional
graph nodes (``cuda/conditional.py``), with no value read back by the host, and compute what
the reference backend does, for any trip count (zero, odd and even: a double-buffered loop's
fix-up), nested, and with inputs at new addresses on every call (the graph's nodes updated)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ourjax.backends.cuda import driver

if not driver.available():
  pytest.skip(f"no CUDA GPU ({driver.unavailable_reason()})", allow_module_level=True)

import ourjax  # noqa: E402
import ourjax.numpy as jnp  # noqa: E402
from ourjax import lax  # noqa: E402
from ourjax.backends.cuda import conditional  # noqa: E402

if conditional.supported(driver.get_device(0)) is not None:
  pytest.skip(conditional.supported(driver.get_device(0)), allow_module_level=True)


def _check(fn, *argsets, graph=True):
  """Call ``fn`` compiled for the GPU on each argument set in turn, twice over (the first call
  launches kernel by kernel, later ones replay the graph), against the reference backend.
  Each call gets fresh device copies of its arguments (new addresses)."""
  compiled = ourjax.jit(fn, backend="cuda").lower(*argsets[0]).compile()
  ref = ourjax.jit(fn, backend="reference")
  exe = compiled.runtime_executable()
  for _ in range(2):
    for args in argsets:
      got = compiled(*[ourjax.device_put(np.asarray(a)) for a in args])
      want = ref(*args)
      for g, w in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=1e-5)
  if graph:
    assert exe.graph_reason is None
    assert exe._graph is not None
  return exe


def _body(c):
  i, x, acc = c
  x = jnp.tanh(x * 1.25 + jnp.sum(x) * 1e-3)
  return i + 1, x, acc + jnp.max(x)


def _loop(n, x):
  return lax.while_loop(lambda c: c[0] < n, _body, (jnp.int32(0), x, jnp.float32(0)))


@settings(max_examples=6, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=2, max_size=4))
def test_while_any_trip_count(counts):
  x = np.linspace(-1, 1, 300, dtype=np.float32).reshape(3, 100)
  _check(_loop, *[(np.int32(n), x + n) for n in counts])


def test_while_state_tested_on_device():
  """The predicate depends on the state (a convergence test), not on a counter."""
  def newton(a):
    def body(c):
      y, k = c
      return 0.5 * (y + a / y), k + 1
    return lax.while_loop(lambda c: (jnp.max(jnp.abs(c[0] * c[0] - a)) > 1e-4) & (c[1] < 50),
                          body, (jnp.ones_like(a), jnp.int32(0)))
  a = np.linspace(0.5, 40.0, 512, dtype=np.float32)
  _check(newton, (a,), (a * 3,))


@pytest.mark.parametrize("index", [0, 1, 2, -1, 7])
def test_switch_and_cond(index):
  branches = [lambda x: x * 2.0, lambda x: jnp.sin(x) + jnp.sum(x), lambda x: x - jnp.max(x)]
  x = np.linspace(-2, 2, 64, dtype=np.float32)
  _check(lambda i, x: lax.switch(i, branches, x) + 1.0, (np.int32(index), x))
  _check(lambda p, x: lax.cond(p > 0, branches[1], branches[2], x) * 3.0,
         (np.float32(index), x), (np.float32(-index), x))


def test_nested_control_flow():
  def f(n, x):
    def outer(i, y):
      y = lax.cond(jnp.sum(y) > 0, lambda z: _loop(n, z)[1], lambda z: z * 0.5 - 0.1, y)
      return y + i
    return lax.fori_loop(0, 3, outer, x)
  x = np.linspace(-1, 1.5, 128, dtype=np.float32).reshape(2, 64)
  _check(f, (np.int32(3), x), (np.int32(0), x), (np.int32(4), -x))


def test_grad_through_scan_with_cond():
  def loss(w, x):
    def step(c, xi):
      h = lax.cond(jnp.sum(xi) > 0,
                   lambda h: jnp.tanh(jnp.dot(h, w, precision=lax.Precision.HIGHEST) + xi),
                   lambda h: h * 0.9, c)
      return h, jnp.sum(h)
    return jnp.sum(lax.scan(step, jnp.zeros((4, 16), np.float32), x)[1])
  rng = np.random.default_rng(0)
  w = rng.normal(size=(16, 16)).astype(np.float32) * 0.3
  x = rng.normal(size=(6, 4, 16)).astype(np.float32)
  _check(ourjax.grad(loss), (w, x))


def test_host_driven_when_switched_off(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_GRAPH_CONDITIONALS", "0")
  x = np.ones((3, 100), np.float32)
  exe = _check(lambda n, x: _loop(n + 0, x), (np.int32(3), x), graph=False)
  assert "OURJAX_CUDA_GRAPH_CONDITIONALS=0" in exe.graph_reason
