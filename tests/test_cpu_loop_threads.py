"""Parallel kernels inside control flow on the CPU (cpu/entry.py's regions): the large kernels of
scan, fori and while bodies and of cond/switch branches are split across the thread pool while
thread 0 runs the control flow.  Every test runs its program with several thread counts (more
threads than cores too), checks that the results are the same bits whatever the count (piece
boundaries do not depend on it) and compares them with a float64 NumPy computation or the
reference backend.  ``PARALLEL_MIN_WORK`` and the least work and bytes of a job are lowered so
that small programs have parallel kernels and copies (many pieces each) inside their loops,
which keeps the tests quick."""
from __future__ import annotations

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends.cpu import backend as cpu
from ourjax.backends.cpu import entry
from ourjax.backends.llvm import kernels
from ourjax.config import config
from ourjax.tree_util import tree_leaves

F32 = np.float32
THREADS = (1, 2, 3, 5)


@pytest.fixture(autouse=True)
def _small_parallel(monkeypatch):
  monkeypatch.setattr(kernels, "PARALLEL_MIN_WORK", 512)
  monkeypatch.setattr(entry, "LOOP_JOB_MIN_WORK", 512)
  monkeypatch.setattr(entry, "LOOP_JOB_MIN_COPY_BYTES", 1024)
  # (the CPU backend even where a GPU is the default)
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir="off",
                                              jax_platforms="cpu"))
  saved = cpu.num_threads()
  yield
  cpu.set_num_threads(saved)


def _meta(f, *args):
  return f.lower(*args).compile()._executable.compiled.meta


def _by_threads(f, *args, threads=THREADS, repeat=1):
  """``f(*args)``'s leaves as NumPy arrays, asserting they are the same bits for every thread
  count (each run ``repeat`` times)."""
  first = None
  for n in threads:
    cpu.set_num_threads(n)
    for _ in range(repeat):
      got = [np.array(x) for x in tree_leaves(f(*args))]
      if first is None:
        first = got
      for a, b in zip(first, got):
        np.testing.assert_array_equal(a, b, err_msg=f"{n} threads")
  return first


def _rng(seed=0):
  return np.random.default_rng(seed)


def test_scan_body_with_large_dots_and_elementwise_kernels():
  T, B, I, H = 7, 32, 48, 64
  r = _rng(1)
  xs = r.standard_normal((T, B, I)).astype(F32)
  w = (r.standard_normal((I, H)) / np.sqrt(I)).astype(F32)
  u = (r.standard_normal((H, H)) / np.sqrt(H)).astype(F32)

  def run(xs, w, u):
    def cell(h, x):
      h = jnp.tanh(x @ w + h @ u)
      return h, h * 2.0
    return lax.scan(cell, jnp.zeros((B, H), F32), xs)
  f = ourjax.jit(run)
  meta = _meta(f, xs, w, u)
  assert meta["regions"] >= 1 and meta["parallel"]
  h, ys = _by_threads(f, xs, w, u)
  want_h = np.zeros((B, H))
  want_ys = []
  for t in range(T):
    want_h = np.tanh(xs[t].astype(np.float64) @ w + want_h @ u)
    want_ys.append(2 * want_h)
  np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(ys, np.stack(want_ys), rtol=1e-4, atol=1e-5)


def test_fori_loop_with_reductions_and_a_switch_in_the_body():
  r = _rng(2)
  x0 = r.standard_normal((96, 160)).astype(F32)

  def run(x):
    def body(i, x):
      x = x * 0.75 + jnp.sin(x) * 0.25
      x = x - jnp.mean(x, axis=1, keepdims=True) * 0.5        # a row reduction
      x = x + jnp.sum(x, axis=0) * 1e-3                       # a column reduction
      return lax.switch(i % 3, [lambda v: v * 1.5, lambda v: jnp.cos(v), lambda v: v - 0.25],
                        x)
    return lax.fori_loop(0, 9, body, x)
  f = ourjax.jit(run)
  assert _meta(f, x0)["regions"] >= 1
  got, = _by_threads(f, x0)
  want = x0.astype(np.float64)
  for i in range(9):
    want = want * 0.75 + np.sin(want) * 0.25
    want = want - want.mean(axis=1, keepdims=True) * 0.5
    want = want + want.sum(axis=0) * 1e-3
    want = [want * 1.5, np.cos(want), want - 0.25][i % 3]
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_while_loop_stopping_on_a_large_reduction():
  r = _rng(3)
  x0 = (r.standard_normal((64, 256)) * 4).astype(F32)

  def run(x):
    def cond(c):
      return (jnp.sum(jnp.abs(c[1])) > 100.0) & (c[0] < 200)

    def body(c):
      return c[0] + 1, c[1] * 0.8 + jnp.tanh(c[1]) * 0.05
    return lax.while_loop(cond, body, (0, x))
  f = ourjax.jit(run)
  assert _meta(f, x0)["regions"] >= 1
  n, got = _by_threads(f, x0)
  want, k = x0.astype(np.float64), 0
  while np.abs(want).sum() > 100.0 and k < 200:
    want, k = want * 0.8 + np.tanh(want) * 0.05, k + 1
  assert int(n) == k and 5 < k < 200
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_cond_with_large_branches_outside_loops():
  r = _rng(4)
  x = r.standard_normal((128, 128)).astype(F32)
  y = r.standard_normal((128, 128)).astype(F32)

  def run(p, x, y):
    return lax.cond(p, lambda a, b: a @ b + 1.0, lambda a, b: jnp.exp(a) - b, x, y)
  f = ourjax.jit(run)
  assert _meta(f, True, x, y)["regions"] >= 1
  for p in (True, False):
    got, = _by_threads(f, p, x, y)
    want = x.astype(np.float64) @ y + 1.0 if p else np.exp(x.astype(np.float64)) - y
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grad_through_an_lstm_scan_matches_the_reference_backend():
  T, B, I, H = 5, 16, 24, 32
  r = _rng(5)
  params = {"wx": (r.standard_normal((I, 4 * H)) / np.sqrt(I)).astype(F32),
            "wh": (r.standard_normal((H, 4 * H)) / np.sqrt(H)).astype(F32),
            "b": np.zeros(4 * H, F32)}
  xs = r.standard_normal((T, B, I)).astype(F32)
  ys = r.standard_normal((T, B, H)).astype(F32)

  def loss(params, xs, ys):
    def cell(carry, x):
      h, c = carry
      z = x @ params["wx"] + h @ params["wh"] + params["b"]
      i, fg, g, o = jnp.split(z, 4, axis=-1)
      c = ourjax.nn.sigmoid(fg) * c + ourjax.nn.sigmoid(i) * jnp.tanh(g)
      h = ourjax.nn.sigmoid(o) * jnp.tanh(c)
      return (h, c), h
    zeros = jnp.zeros((B, H), F32)
    _, hs = lax.scan(cell, (zeros, zeros), xs)
    return jnp.mean(jnp.square(hs - ys))
  f = ourjax.jit(ourjax.value_and_grad(loss))
  assert _meta(f, params, xs, ys)["regions"] >= 1
  got = _by_threads(f, params, xs, ys)
  want = [np.asarray(x) for x in tree_leaves(
      ourjax.jit(ourjax.value_and_grad(loss), backend="reference")(params, xs, ys))]
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)


def test_many_small_jobs_with_more_threads_than_cores():
  """A thread the OS does not run for a while holds up only the pieces it claimed: many short
  jobs per call, threads oversubscribed, the same bits every time."""
  r = _rng(6)
  x0 = r.standard_normal((32, 64)).astype(F32)

  def run(x):
    def body(x, _):
      x = jnp.sin(x) * 0.9 + jnp.roll(x, 1, axis=1) * 0.1
      return x, jnp.max(x)
    return lax.scan(body, x, None, length=60)
  f = ourjax.jit(run)
  assert _meta(f, x0)["regions"] >= 1
  got, maxes = _by_threads(f, x0, threads=(1, 4, 8), repeat=10)
  want = x0.astype(np.float64)
  want_max = []
  for _ in range(60):
    want = np.sin(want) * 0.9 + np.roll(want, 1, axis=1) * 0.1
    want_max.append(want.max())
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(maxes, want_max, rtol=1e-4)
