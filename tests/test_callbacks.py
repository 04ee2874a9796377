"""Host callbacks (debug.print/debug.callback, pure_callback, experimental.io_callback) from
eager code and from inside jit, grad, vmap and loops."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.experimental import io_callback

floats = st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=5)


@given(floats)
def test_debug_callback_sees_runtime_values_under_jit_vmap_and_grad(xs):
  x = np.array(xs, np.float32)
  seen = []

  def f(v):
    ourjax.debug.callback(lambda a: seen.append(np.asarray(a)), v)
    return (v * 2).sum()
  ourjax.jit(f)(x)
  assert len(seen) == 1
  np.testing.assert_array_equal(seen.pop(), x)
  ourjax.vmap(f)(x)                       # once per element, in order
  assert [float(s) for s in seen] == [float(v) for v in x]
  seen.clear()
  g = ourjax.grad(f)(x)                   # the forward values, once
  np.testing.assert_array_equal(np.asarray(g), np.full_like(x, 2))
  assert len(seen) == 1
  np.testing.assert_array_equal(seen.pop(), x)
  ourjax.jit(ourjax.grad(ourjax.jit(f)))(x)
  assert len(seen) == 1


def test_debug_print_formats_inside_jit_and_scan(capsys):
  def f(x):
    ourjax.debug.print("x={x} first={}", x[0], x=x + 1)
    return lax.scan(lambda c, v: (ourjax.debug.print("c={}", c) or c + v, None), 0.0, x)[0]
  out = ourjax.jit(f)(jnp.arange(3.0))
  assert float(out) == 3.0
  assert capsys.readouterr().out.splitlines() == [
      "x=[1. 2. 3.] first=0.0", "c=0.0", "c=0.0", "c=1.0"]
  # a callback whose result nothing uses still runs
  ourjax.jit(lambda x: (ourjax.debug.print("dead {}", x), 1.0)[1])(5.0)
  assert capsys.readouterr().out == "dead 5.0\n"
  with pytest.raises(ValueError, match="keyword"):
    ourjax.debug.print("{missing}", 1.0)


@given(floats)
def test_pure_callback_matches_numpy_and_vmap_methods(xs):
  x = np.array(xs, np.float32)
  spec = lambda v: ourjax.ShapeDtypeStruct(v.shape, v.dtype)  # noqa: E731
  f = lambda v: ourjax.pure_callback(lambda a: np.sin(np.asarray(a, np.float64)),  # noqa: E731
                                     spec(v), v, vmap_method="sequential")
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(x)), np.sin(x.astype(np.float64)),
                             rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ourjax.vmap(f)(x)), np.sin(x.astype(np.float64)),
                             rtol=1e-6)
  shapes = []

  def add(a, b):
    shapes.append((np.shape(a), np.shape(b)))
    return np.asarray(a) + np.asarray(b)
  for method, bshape in (("expand_dims", (1,)), ("broadcast_all", (len(x),))):
    g = lambda v, w: ourjax.pure_callback(add, spec(v), v, w, vmap_method=method)  # noqa
    out = ourjax.vmap(g, in_axes=(0, None))(x, np.float32(1))
    np.testing.assert_allclose(np.asarray(out), x + 1, rtol=1e-6)
    assert shapes.pop() == ((len(x),), bshape)
  with pytest.raises(NotImplementedError, match="vmap_method"):
    ourjax.vmap(lambda v: ourjax.pure_callback(np.sin, spec(v), v))(x)
  with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
    ourjax.grad(lambda v: f(v).sum())(x)


def test_pure_callback_checks_the_result_shape_and_casts_the_dtype():
  spec = ourjax.ShapeDtypeStruct((), jnp.float32)
  out = ourjax.jit(lambda x: ourjax.pure_callback(lambda a: np.float64(a) * 2, spec, x))(1.5)
  assert out.dtype == np.float32 and float(out) == 3.0
  with pytest.raises(RuntimeError, match="shape"):
    ourjax.jit(lambda x: ourjax.pure_callback(lambda a: np.ones(2), spec, x))(1.0)
  tree = ourjax.pure_callback(lambda a: {"s": a.sum(), "d": a * 2},
                              {"s": ourjax.ShapeDtypeStruct((), jnp.float32),
                               "d": ourjax.ShapeDtypeStruct((3,), jnp.float32)},
                              jnp.arange(3.0))
  assert float(tree["s"]) == 3.0
  np.testing.assert_array_equal(np.asarray(tree["d"]), [0, 2, 4])


def test_io_callback_runs_once_per_call_and_refuses_jvp_and_ordered_vmap():
  log = []

  def record(v):
    log.append(float(v))
    return np.float32(v * 2)
  spec = ourjax.ShapeDtypeStruct((), jnp.float32)
  f = ourjax.jit(lambda x: io_callback(record, spec, x))
  assert float(f(1.0)) == 2.0 and float(f(3.0)) == 6.0
  assert log == [1.0, 3.0]
  log.clear()
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(lambda x: io_callback(record, spec, x))(
      jnp.arange(2.0))), [0, 2])
  assert log == [0.0, 1.0]
  # unused results: still called
  ourjax.jit(lambda x: (io_callback(record, spec, x), x)[1])(7.0)
  assert log[-1] == 7.0
  with pytest.raises(ValueError, match="IO callbacks do not support JVP"):
    ourjax.grad(lambda x: io_callback(record, spec, x))(1.0)
  with pytest.raises(ValueError, match="Cannot `vmap` ordered IO callback"):
    ourjax.vmap(lambda x: io_callback(record, spec, x, ordered=True))(jnp.arange(2.0))
  ourjax.effects_barrier()


def test_debug_print_is_its_own_primitive_in_jaxprs_as_jax(capsys):
  # JAX names debug.print's equation debug_print (debug.callback stays debug_callback), also
  # in the jaxpr of a scan body under value_and_grad
  def f(c, _):
    ourjax.debug.print("c = {c}", c=c, ordered=True)
    return c + 1, None
  jaxpr = ourjax.make_jaxpr(ourjax.value_and_grad(lambda x: lax.scan(f, x, length=2)[0]))(1.0)
  body = jaxpr.eqns[0].params["jaxpr"]
  assert "debug_print" in [e.primitive.name for e in body.eqns]
  cb = ourjax.make_jaxpr(lambda x: ourjax.debug.callback(lambda v: None, x) or x)(1.0)
  assert [e.primitive.name for e in cb.eqns] == ["debug_callback"]
  assert ourjax.jit(ourjax.vmap(lambda x: ourjax.debug.print("v={}", x) or x * 2))(
      jnp.arange(2.0)).tolist() == [0.0, 2.0]
  assert capsys.readouterr().out.split() == ["v=0.0", "v=1.0"]
