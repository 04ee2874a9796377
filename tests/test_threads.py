"""Tracing, jit, grad and vmap from several threads at once.

Trace state (the trace stack, the dynamic trace) and config contexts (``enable_x64``,
``disable_jit``) are per thread; the jit cache traces and compiles each signature once, with
the other threads waiting for that first compile.  ``tools/threads_stress.py`` runs the mixed
test many times in a loop."""
from __future__ import annotations

import contextlib
import logging
import threading

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.config import config, enable_x64

N_THREADS = 8


class _CompileCounter(logging.Handler):
  def __init__(self):
    super().__init__(logging.WARNING)
    self.names = []

  def emit(self, record):
    msg = record.getMessage()
    if msg.startswith("Compiling "):
      name = msg.split()[1]         # "jit(<name>)"
      self.names.append(name[4:-1] if name.startswith("jit(") else name)


@contextlib.contextmanager
def counting_compiles():
  """The names of the functions compiled inside the block (from ``jax_log_compiles``)."""
  old = config._values["jax_log_compiles"]
  config._values["jax_log_compiles"] = True
  h = _CompileCounter()
  log = logging.getLogger("ourjax")
  log.addHandler(h)
  try:
    yield h.names
  finally:
    log.removeHandler(h)
    config._values["jax_log_compiles"] = old


@pytest.fixture
def compiles():
  with counting_compiles() as names:
    yield names


def _run_threads(work, n=N_THREADS):
  """Run ``work(i)`` on ``n`` threads released together; re-raise the first failure."""
  barrier = threading.Barrier(n)
  errors = []

  def body(i):
    try:
      barrier.wait()
      work(i)
    except BaseException as e:      # noqa: BLE001 (reported below)
      errors.append(e)
  threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  if errors:
    raise errors[0]


def _loss(w, x):
  return jnp.sum(jnp.tanh(x @ w) ** 2)


def _loss_np_grad(w, x):
  y = np.tanh(x @ w)
  return x.T @ (2 * y * (1 - y * y))


def _poly(x):
  return x * x + 2.0 * x - 1.0


def test_mixed_jit_grad_vmap_from_eight_threads(compiles):
  def _sin_affine(x):         # (a new function per run: its jit cache starts empty)
    return jnp.sin(x) * 2.0 + x
  f_jit = ourjax.jit(_sin_affine)
  g_jit = ourjax.jit(ourjax.grad(_loss))
  v_jit = ourjax.jit(ourjax.vmap(_poly))
  rng = np.random.default_rng(0)
  shapes = [(3,), (5,), (2, 4)]              # three signatures of f_jit
  xs = {s: rng.standard_normal(s).astype(np.float32) for s in shapes}
  w = rng.standard_normal((4, 3)).astype(np.float32)
  xm = rng.standard_normal((6, 4)).astype(np.float32)
  vb = rng.standard_normal((7, 2)).astype(np.float32)
  fresh = []

  def work(i):
    r = np.random.default_rng(i)
    for step in range(12):
      k = int(r.integers(6))
      if k == 0:
        s = shapes[(i + step) % 3]
        np.testing.assert_allclose(np.asarray(f_jit(xs[s])), np.sin(xs[s]) * 2 + xs[s],
                                   rtol=1e-5, atol=1e-6)
      elif k == 1:
        np.testing.assert_allclose(np.asarray(g_jit(w, xm)), _loss_np_grad(w, xm),
                                   rtol=1e-4, atol=1e-4)
      elif k == 2:
        np.testing.assert_allclose(np.asarray(v_jit(vb)), _poly(vb), rtol=1e-6)
      elif k == 3:       # grad and vmap traced eagerly in this thread
        got = ourjax.vmap(ourjax.grad(lambda a: jnp.sum(jnp.exp(a) * a)))(vb)
        np.testing.assert_allclose(np.asarray(got), np.exp(vb) * (vb + 1), rtol=1e-5)
      elif k == 4:       # eager ops
        a = jnp.asarray(xs[(3,)])
        np.testing.assert_allclose(np.asarray(jnp.cos(a) + a), np.cos(xs[(3,)]) + xs[(3,)],
                                   rtol=1e-6)
      else:              # a fresh jitted closure: traced and compiled in this thread
        c = float(i)
        h = ourjax.jit(lambda x: x * c + 1.0)
        out = h(xs[(5,)])
        fresh.append(1)
        assert isinstance(out, ourjax.Array), type(out)
        np.testing.assert_allclose(np.asarray(out), xs[(5,)] * c + 1, rtol=1e-6)
  _run_threads(work)
  for s in shapes:            # every signature at least once (compiled here if no thread did)
    np.testing.assert_allclose(np.asarray(f_jit(xs[s])), np.sin(xs[s]) * 2 + xs[s], rtol=1e-5,
                               atol=1e-6)
  g_jit(w, xm)
  v_jit(vb)
  # each signature compiled exactly once, whatever the interleaving: 3 of f_jit, one each of
  # g_jit and v_jit, one per fresh closure
  assert compiles.count("_sin_affine") == 3, compiles
  assert len([n for n in compiles if n not in ("_sin_affine", "<lambda>")]) == 2, compiles
  assert compiles.count("<lambda>") == len(fresh), compiles


def test_one_compile_per_signature_when_threads_race(compiles):
  f = ourjax.jit(lambda x, y: jnp.exp(x) * y)
  xs = [np.full(n, 0.5, np.float32) for n in (2, 3, 4)]
  out = [None] * N_THREADS

  def work(i):
    x = xs[i % 3]
    out[i] = np.asarray(f(x, x))
  _run_threads(work)
  for i in range(N_THREADS):
    np.testing.assert_allclose(out[i], np.exp(xs[i % 3]) * xs[i % 3], rtol=1e-6)
  assert len(compiles) == 3, compiles
  assert f._cache_size() == 3


def test_a_failing_trace_reaches_every_waiter_and_is_not_cached():
  calls = []
  gate = threading.Event()

  def bad(x):
    calls.append(1)
    gate.wait(5)
    raise ValueError("no good")
  f = ourjax.jit(bad)
  x = np.ones(3, np.float32)
  errors = []

  def work(i):
    if i == 0:
      threading.Timer(0.2, gate.set).start()
    try:
      f(x)
    except ValueError as e:
      errors.append(e)
  _run_threads(work, 4)
  assert len(errors) == 4
  assert len(calls) <= 4 and f._cache_size() == 0
  gate.set()
  with pytest.raises(ValueError):       # tried again on the next call
    f(x)


def test_trace_state_is_per_thread():
  """A thread tracing a jitted function does not make another thread's calls traced."""
  inside = threading.Event()
  release = threading.Event()
  results = {}

  def slow(x):
    inside.set()
    release.wait(5)
    return x + 1
  f = ourjax.jit(slow)
  g = ourjax.jit(lambda x: x * 3)
  x = np.arange(3, dtype=np.float32)
  t = threading.Thread(target=lambda: results.setdefault("f", f(x)))
  t.start()
  assert inside.wait(5)
  try:
    results["g"] = g(x)                 # compiled while the other thread is mid-trace
    results["eager"] = jnp.sin(jnp.asarray(x))
  finally:
    release.set()
    t.join()
  assert isinstance(results["g"], ourjax.Array)
  np.testing.assert_allclose(np.asarray(results["g"]), x * 3)
  np.testing.assert_allclose(np.asarray(results["eager"]), np.sin(x), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(results["f"]), x + 1)


def test_config_contexts_are_per_thread():
  seen = {}
  entered = threading.Event()
  done = threading.Event()

  def other():
    entered.wait(5)
    seen["x64"] = config.jax_enable_x64
    seen["dtype"] = jnp.asarray(1.5).dtype
    done.set()
  t = threading.Thread(target=other)
  t.start()
  with enable_x64(True):
    entered.set()
    assert done.wait(5)
    assert config.jax_enable_x64 and jnp.asarray(1.5).dtype == np.float64
  t.join()
  assert seen == {"x64": False, "dtype": np.dtype(np.float32)}
  # config.update is global: every thread sees it
  t_seen = []
  old = config.jax_log_compiles
  config.update("jax_log_compiles", not old)
  try:
    th = threading.Thread(target=lambda: t_seen.append(config.jax_log_compiles))
    th.start()
    th.join()
  finally:
    config.update("jax_log_compiles", old)
  assert t_seen == [not old]
