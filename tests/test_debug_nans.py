"""``jax_debug_nans`` / ``jax_debug_infs``: a NaN (inf) produced by a primitive raises
FloatingPointError naming the primitive and the user's line, eagerly and inside jit (whose
function is re-run op by op to find it), as JAX does (checked against JAX 0.10)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.config import config, debug_infs, debug_nans


@pytest.fixture
def nans():
  with debug_nans(True):
    yield


def _line_of(fn, text):
  import inspect
  lines, first = inspect.getsourcelines(fn)
  return first + next(i for i, l in enumerate(lines) if text in l)


def test_eager_primitives(nans):
  with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in div"):
    jnp.array(0.0) / jnp.array(0.0)
  with pytest.raises(FloatingPointError, match=r"encountered in log\n  at .*test_debug_nans"):
    jnp.log(jnp.array([1.0, -1.0]))
  # no NaN: nothing raised; integers are never checked; infs only with jax_debug_infs
  np.testing.assert_allclose(np.asarray(jnp.sqrt(jnp.array([4.0]))), [2.0])
  jnp.array(1) // jnp.array(0)
  assert np.isinf(float(jnp.array(1.0) / jnp.array(0.0)))


def test_jit_names_the_primitive_and_the_line(nans, caplog):
  def f(a):
    b = jnp.exp(a * 0.0)
    return b + jnp.log(-a)           # the NaN is made here
  with pytest.raises(FloatingPointError, match=r"encountered in log") as e:
    ourjax.jit(f)(jnp.array([1.0, 2.0]))
  assert f"test_debug_nans.py:{_line_of(f, 'jnp.log(-a)')}" in str(e.value)
  assert any("de-optimized" in r.getMessage() for r in caplog.records)


def test_jit_cases_as_jax(nans):
  sqrt2 = ourjax.jit(lambda x: jnp.sqrt(x) * 2.0)
  with pytest.raises(FloatingPointError, match="encountered in sqrt"):
    sqrt2(jnp.array([-1.0, 1.0]))
  # as in JAX, a NaN input that flows through a primitive raises there too
  with pytest.raises(FloatingPointError, match="encountered in sqrt"):
    sqrt2(np.array([np.nan, 1.0], np.float32))
  # ... and one passed straight through: the de-optimized run finds no primitive
  with pytest.raises(FloatingPointError, match="did not produce invalid values"):
    ourjax.jit(lambda a: a)(np.array([np.nan], np.float32))
  # a NaN masked away by where does not reach an output of jit: no error (JAX: the same)
  g = ourjax.jit(lambda x: jnp.where(x > 0, jnp.log(x), 0.0))
  np.testing.assert_array_equal(np.asarray(g(jnp.array([-1.0, 1.0]))), [0.0, 0.0])
  with pytest.raises(FloatingPointError, match="encountered in log"):     # nested jit
    ourjax.jit(lambda a: ourjax.jit(jnp.log)(a) + 1)(jnp.array([1.0, -1.0]))
  with pytest.raises(FloatingPointError, match="encountered in log"):     # inside scan
    ourjax.jit(lambda a: lax.scan(lambda c, v: (c + jnp.log(v), c), 0.0, a))(
        jnp.array([1.0, -1.0]))
  assert np.isinf(float(ourjax.jit(lambda x: x / 0.0)(jnp.array(1.0))))


def test_transformations(nans):
  with pytest.raises(FloatingPointError, match="encountered in log"):
    ourjax.vmap(jnp.log)(jnp.array([1.0, -1.0]))
  with pytest.raises(FloatingPointError, match="encountered in mul"):   # 0 * inf in the vjp
    ourjax.grad(lambda a: jnp.sqrt(a) * 0.0)(0.0)
  assert np.isinf(float(ourjax.grad(jnp.sqrt)(0.0)))


def test_debug_infs():
  with debug_infs(True):
    with pytest.raises(FloatingPointError, match=r"invalid value \(inf\) encountered in div"):
      ourjax.jit(lambda x: x / 0.0)(jnp.array(1.0))
    with pytest.raises(FloatingPointError, match=r"\(inf\) encountered in exp"):
      jnp.exp(jnp.array([1000.0]))


def test_off_by_default_and_per_thread():
  assert not config.jax_debug_nans
  f = ourjax.jit(jnp.log)
  assert np.isnan(np.asarray(f(jnp.array([-1.0])))).all()
  seen = []
  with debug_nans(True):
    t = threading.Thread(target=lambda: seen.append(np.asarray(f(jnp.array([-1.0])))))
    t.start()
    t.join()
    with pytest.raises(FloatingPointError):
      f(jnp.array([-1.0]))
  assert len(seen) == 1 and np.isnan(seen[0]).all()     # the other thread was not checking


def test_config_update_and_environment():
  config.update("jax_debug_nans", True)
  try:
    with pytest.raises(FloatingPointError, match="encountered in log"):
      ourjax.jit(jnp.log)(jnp.array([-2.0]))
  finally:
    config.update("jax_debug_nans", False)
  root = os.path.dirname(os.path.dirname(os.path.abspath(ourjax.__file__)))
  code = ("import ourjax, ourjax.numpy as jnp\n"
          "try:\n  ourjax.jit(lambda x: jnp.log(x) * 2)(jnp.array([-1.0]))\n"
          "except FloatingPointError as e:\n  print('raised:', str(e).splitlines()[0])\n")
  p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                     env=dict(os.environ, OURJAX_DEBUG_NANS="1", PYTHONPATH=root))
  assert "raised: invalid value (nan) encountered in log" in p.stdout, p.stderr[-2000:]
