"""ourjax._gc.paused: the cyclic collector is off while ourjax traces or compiles, and as the
caller left it afterwards (nested and concurrent pauses included)."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import _gc


@pytest.fixture
def collector_on():
  was = gc.isenabled()
  gc.enable()
  yield
  gc.enable() if was else gc.disable()


def test_pause_nests_and_restores(collector_on):
  with _gc.paused():
    assert not gc.isenabled()
    with _gc.paused():
      assert not gc.isenabled()
    assert not gc.isenabled()          # the inner pause does not end the outer one
  assert gc.isenabled()
  gc.disable()
  with _gc.paused():
    assert not gc.isenabled()
  assert not gc.isenabled()            # off before: off after


def test_pause_ends_with_an_exception(collector_on):
  with pytest.raises(ZeroDivisionError):
    with _gc.paused():
      1 / 0
  assert gc.isenabled()


def test_concurrent_pauses_end_with_the_last(collector_on):
  entered, release = threading.Barrier(2), threading.Event()
  states = []

  def worker():
    with _gc.paused():
      entered.wait()
      release.wait()

  t = threading.Thread(target=worker)
  t.start()
  with _gc.paused():
    entered.wait()
  states.append(gc.isenabled())        # the worker still holds its pause
  release.set()
  t.join()
  states.append(gc.isenabled())
  assert states == [False, True]


def test_tracing_and_compiling_pause_the_collector_and_restore_it(collector_on):
  seen = []

  def f(x):
    seen.append(gc.isenabled())        # runs while tracing
    return jnp.sin(x) * 2.0 + x

  x = np.linspace(-2, 2, 33).astype(np.float32)
  out = ourjax.jit(f)(x)
  np.testing.assert_allclose(np.asarray(out), np.sin(x.astype(np.float64)) * 2 + x,
                             rtol=2e-6, atol=2e-6)
  assert seen == [False] and gc.isenabled()
  gc.disable()
  g = ourjax.jit(lambda x: jnp.cos(x) - x)
  np.testing.assert_allclose(np.asarray(g(x)), np.cos(x.astype(np.float64)) - x,
                             rtol=2e-6, atol=2e-6)
  assert not gc.isenabled()
