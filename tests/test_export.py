"""ourjax.export (JAX's jax.export): export a jitted function, call it, serialize and load it."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax as jax
import ourjax.numpy as jnp
from ourjax import export, lax


def _f(x, y):
  return {"s": jnp.sin(x) * y, "c": jnp.cumsum(x) + lax.cond(y.sum() > 0, jnp.cos, jnp.tanh, y)}


def _f_np(x, y):
  c = np.cos(y) if y.sum() > 0 else np.tanh(y)
  return {"s": np.sin(x) * y, "c": np.cumsum(x) + c}


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_call_and_round_trip_match_numpy(n, seed):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(n).astype(np.float32)
  y = rng.standard_normal(n).astype(np.float32)
  exp = export.export(jax.jit(_f))(jax.ShapeDtypeStruct((n,), jnp.float32), y)
  assert exp.in_avals == (jax.core.ShapedArray((n,), np.float32),) * 2
  assert [a.shape for a in exp.out_avals] == [(n,), (n,)]
  want = _f_np(x.astype(np.float64), y.astype(np.float64))
  for e in (exp, export.deserialize(exp.serialize())):
    got = e.call(x, y)
    assert set(got) == {"s", "c"}
    for k in got:
      np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=2e-5, atol=2e-6)


def test_call_checks_structure_shapes_dtypes():
  exp = export.export(jax.jit(lambda x, y: x + y))(jnp.ones(3), jnp.ones(3))
  with pytest.raises(ValueError, match=r"Shape mismatch for args\[0\]"):
    exp.call(jnp.ones(4), jnp.ones(3))
  with pytest.raises(ValueError, match=r"Dtype mismatch for args\[1\]: expected float32"):
    exp.call(jnp.ones(3), jnp.ones(3, jnp.int32))
  with pytest.raises(ValueError, match="same pytree structure"):
    exp.call(jnp.ones(3))
  with pytest.raises(ValueError, match="must be the result of `jit`"):
    export.export(lambda x: x)(1.0)


def test_call_under_jit_grad_vmap():
  exp = export.export(jax.jit(lambda x: jnp.sin(x) ** 2))(jnp.ones(4))
  x = jnp.linspace(-1.0, 1.0, 4)
  np.testing.assert_allclose(jax.jit(exp.call)(x), np.sin(np.asarray(x)) ** 2, rtol=1e-6)
  g = jax.grad(lambda x: exp.call(x).sum())(x)
  np.testing.assert_allclose(g, np.sin(2 * np.asarray(x, np.float64)), rtol=1e-5, atol=1e-6)
  xs = jnp.stack([x, 2 * x])
  np.testing.assert_allclose(jax.vmap(exp.call)(xs), np.sin(np.asarray(xs)) ** 2, rtol=1e-6)


def test_vjp_export_and_serialized_vjp_keep_custom_rules():
  @jax.custom_jvp
  def f(x):
    return jnp.sin(x)
  f.defjvp(lambda p, t: (f(p[0]), 3.0 * t[0]))     # a deliberately non-standard derivative

  exp = export.export(jax.jit(f))(jnp.ones(3))
  x = jnp.array([0.1, 0.2, 0.3])
  ones = jnp.ones(3)
  v = exp.vjp()
  assert v.in_avals == exp.in_avals + exp.out_avals
  np.testing.assert_allclose(v.call(x, ones)[0], 3.0 * np.ones(3))
  loaded = export.deserialize(exp.serialize(vjp_order=1))
  assert loaded.has_vjp()
  np.testing.assert_allclose(jax.grad(lambda x: loaded.call(x).sum())(x), 3.0 * np.ones(3))
  np.testing.assert_allclose(loaded.call(x), np.sin(np.asarray(x)), rtol=1e-6)
  no_vjp = export.deserialize(exp.serialize())
  assert not no_vjp.has_vjp() and no_vjp.vjp() is None
  with pytest.raises(ValueError, match="without its VJP"):
    jax.grad(lambda x: no_vjp.call(x).sum())(x)


def test_key_arguments_and_structures():
  def g(k, d):
    return jax.random.normal(k, (2,)) + d["a"], [d["b"] * 2]
  args = (jax.random.key(3), {"a": jnp.ones(2), "b": jnp.arange(3)})
  exp = export.export(jax.jit(g))(*args)
  loaded = export.deserialize(exp.serialize())
  want = g(*args)
  got = loaded.call(*args)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1][0], want[1][0])
  assert loaded.out_tree == exp.out_tree and loaded.in_tree == exp.in_tree


def test_unserializable_functions_and_bytes_are_refused():
  cb = jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((3,), jnp.float32), x))
  with pytest.raises(ValueError, match="pure_callback"):
    export.export(cb)(jnp.ones(3)).serialize()

  class Evil:
    def __reduce__(self):
      return (os.system, ("true",))
  with pytest.raises(pickle.UnpicklingError, match="refusing"):
    export.deserialize(export._MAGIC + pickle.dumps({"x": Evil()}))
  with pytest.raises(ValueError, match="not an ourjax Exported"):
    export.deserialize(b"garbage")


def test_deserialize_in_a_new_process(tmp_path):
  exp = export.export(jax.jit(lambda x: (jnp.tanh(x) @ x.T, x.astype(jnp.bfloat16))))(
      jnp.ones((2, 3)))
  path = tmp_path / "f.bin"
  path.write_bytes(exp.serialize())
  code = ("import sys, numpy as np, ourjax.numpy as jnp\n"
          "from ourjax import export\n"
          "e = export.deserialize(open(sys.argv[1], 'rb').read())\n"
          "a, b = e.call(jnp.arange(6.0).reshape(2, 3))\n"
          "print(repr(np.asarray(a).tolist()), b.dtype)\n")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       cwd=root, env={**os.environ, "PYTHONPATH": root}, check=True).stdout
  x = np.arange(6.0).reshape(2, 3)
  want = np.tanh(x) @ x.T
  got_text, dtype = out.strip().rsplit(" ", 1)
  np.testing.assert_allclose(np.array(eval(got_text)), want, rtol=1e-5)
  assert dtype == "bfloat16"


def test_platforms_and_disabled_checks():
  f = jax.jit(lambda x: x * 2)
  exp = export.export(f, platforms=("tpu",))(1.0)
  assert exp.platforms == ("tpu",)
  with pytest.raises(ValueError, match="exported for platforms"):
    exp.call(1.0)
  exp = export.export(f, platforms=("tpu",),
                      disabled_checks=[export.DisabledSafetyCheck.platform()])(1.0)
  assert float(exp.call(1.0)) == 2.0
  assert export.deserialize(exp.serialize()).disabled_safety_checks == exp.disabled_safety_checks
  with pytest.raises(ValueError, match="unknown platform"):
    export.export(f, platforms=("abacus",))
