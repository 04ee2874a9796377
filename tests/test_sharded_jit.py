"""jit with in_shardings/out_shardings (and on arrays laid out over a mesh): the partitioner
(interpreters/partition.py) on OURJAX_NUM_CPU_DEVICES CPU devices.  References: NumPy in
float64, and the same function jitted on one device."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.interpreters import partition
from ourjax.sharding import NamedSharding, PartitionSpec as P

from cpu_devices import N, four_cpu_devices, random_f32 as _x  # noqa: F401,E402  (autouse)


def _mlp_params(rng):
  return {"w1": _x(rng, (3, 16)) * 0.5, "b1": _x(rng, (16,)) * 0.1,
          "w2": _x(rng, (16, 2)) * 0.5}


def _loss(p, x, y):
  h = jnp.tanh(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] - y) ** 2)


def _numpy_step(p, x, y, lr):
  """The same SGD step by hand in float64."""
  p = {k: v.astype(np.float64) for k, v in p.items()}
  h = np.tanh(x @ p["w1"] + p["b1"])
  r = h @ p["w2"] - y
  loss = np.mean(r ** 2)
  dr = 2 * r / r.size
  dh = (dr @ p["w2"].T) * (1 - h ** 2)
  g = {"w2": h.T @ dr, "w1": x.T @ dh, "b1": dh.sum(0)}
  return loss, {k: p[k] - lr * g[k] for k in p}


def test_data_parallel_training_step_matches_one_device_and_numpy():
  rng = np.random.default_rng(0)
  params = _mlp_params(rng)
  x, y = _x(rng, (16, 3)), _x(rng, (16, 2))
  mesh = ourjax.make_mesh((N,), ("batch",))
  rep, bat = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))

  def step(p, x, y):
    loss, g = ourjax.value_and_grad(_loss)(p, x, y)
    return loss, ourjax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)
  sharded = ourjax.jit(step, in_shardings=(rep, bat, bat), out_shardings=(rep, rep))
  single = ourjax.jit(step)
  ps, p1, pn = params, params, params
  for _ in range(3):
    loss_s, ps = sharded(ps, x, y)
    loss_1, p1 = single(p1, x, y)
    loss_n, pn = _numpy_step(pn, x.astype(np.float64), y.astype(np.float64), 0.1)
    np.testing.assert_allclose(float(loss_s), float(loss_1), rtol=1e-5)
    np.testing.assert_allclose(float(loss_s), loss_n, rtol=1e-4)
    for k in params:
      assert ps[k].sharding.spec == P()
      np.testing.assert_allclose(np.asarray(ps[k]), np.asarray(p1[k]), rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(np.asarray(ps[k]), pn[k], rtol=1e-4, atol=1e-5)
  # the gradient's all-reduce is the partitioner's: one psum per parameter and one for the loss
  closed = ourjax.make_jaxpr(step)(params, x, y)
  in_specs = [partition.replicated(v.aval.ndim) for v in closed.jaxpr.invars[:3]] + \
      [(("batch",), ())] * 2
  local, specs = partition.partition(closed, mesh, in_specs, [None] * 4, "step")
  psums = [e for e in local.jaxpr.eqns if e.primitive.name == "psum"]
  assert sum(len(e.inputs) for e in psums) == 4
  assert all(e.params["axes"] == ("batch",) for e in psums)
  # the three gradients' psums are one all-reduce, after the backward pass
  assert sorted(len(e.inputs) for e in psums) == [1, 3]
  assert all(s == partition.replicated(len(s)) for s in specs)


def test_tensor_parallel_dot_weights_split_on_the_output_dimension():
  rng = np.random.default_rng(1)
  x, w = _x(rng, (5, 8)), _x(rng, (8, 12))
  mesh = ourjax.make_mesh((N,), ("model",))
  f = ourjax.jit(lambda x, w: jnp.tanh(x @ w),
                 in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "model"))))
  out = f(x, w)
  want = np.tanh(x.astype(np.float64) @ w)
  assert out.sharding == NamedSharding(mesh, P(None, "model"))
  for k, sh in enumerate(out.addressable_shards):     # each device its own columns, no gather
    assert sh.data.shape == (5, 3) and sh.device == mesh.devices[k]
    np.testing.assert_allclose(np.asarray(sh.data), want[:, 3 * k:3 * k + 3], rtol=1e-5,
                               atol=1e-6)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ourjax.jit(lambda x, w: jnp.tanh(x @ w))(
      x, w)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("specs", [
    (P(None, "m"), P("m", None), P("m")),      # contracting dimension split: psum
    (P("m"), P(), P(None, "m")),               # batch split, result resharded
    (P(), P(None, "m"), None),
    (P("m", None), P(None, "m"), P()),         # both free dimensions: rhs gathered
])
def test_dot_layouts_and_out_shardings(specs):
  rng = np.random.default_rng(2)
  x, w = _x(rng, (8, 4)), _x(rng, (4, 8))
  mesh = ourjax.make_mesh((N,), ("m",))
  xs, ws, os_ = specs
  f = ourjax.jit(lambda x, w: (x @ w).sum(1) + (x @ w).max(1),
                 in_shardings=(NamedSharding(mesh, xs), NamedSharding(mesh, ws)),
                 out_shardings=None if os_ is None else NamedSharding(mesh, P(*os_[:1])))
  out = f(x, w)
  xw = x.astype(np.float64) @ w
  np.testing.assert_allclose(np.asarray(out), xw.sum(1) + xw.max(1), rtol=1e-5, atol=1e-5)
  if os_ is not None:
    assert out.sharding == NamedSharding(mesh, P(*os_[:1]))


def test_two_dimensional_mesh_data_and_model_parallel():
  rng = np.random.default_rng(3)
  x, w1, w2 = _x(rng, (4, 6)), _x(rng, (6, 8)), _x(rng, (8, 3))
  mesh = ourjax.make_mesh((2, 2), ("data", "model"))

  def f(x, w1, w2):
    h = jnp.maximum(x @ w1, 0.0)              # [data, model]
    return jnp.sum(h @ w2, axis=1)            # contracting over model: psum
  S = lambda *s: NamedSharding(mesh, P(*s))  # noqa: E731
  g = ourjax.jit(f, in_shardings=(S("data"), S(None, "model"), S("model")))
  out = g(x, w1, w2)
  want = (np.maximum(x.astype(np.float64) @ w1, 0) @ w2).sum(1)
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
  assert out.sharding.spec == P("data")


def test_committed_inputs_fallback_operations_and_chained_calls():
  rng = np.random.default_rng(4)
  x = _x(rng, (8, 6))
  mesh = ourjax.make_mesh((N,), ("m",))
  a = ourjax.device_put(x, NamedSharding(mesh, P("m")))
  double = ourjax.jit(lambda v: v * 2 + 1)
  b = double(a)                                # laid out as its argument, without in_shardings
  assert b.sharding == NamedSharding(mesh, P("m"))
  np.testing.assert_allclose(np.asarray(b), x * 2 + 1, rtol=1e-6)
  # operations the partitioner does not split run on gathered operands
  g = ourjax.jit(lambda v: (jnp.cumsum(v, 0), jnp.sort(v, axis=0), v[1:7:2] * 3,
                            lax.reduce_prod(v, (0,)), v.reshape(4, 12), v.T @ v))
  want = (np.cumsum(x * 2 + 1, 0), np.sort(x * 2 + 1, 0), (x * 2 + 1)[1:7:2] * 3,
          np.prod(x * 2 + 1, 0), (x * 2 + 1).reshape(4, 12), (x * 2 + 1).T @ (x * 2 + 1))
  for got, w in zip(g(b), want):
    np.testing.assert_allclose(np.asarray(got), w, rtol=1e-5, atol=1e-5)
  assert g(b)[4].sharding.spec == P("m")      # a reshape that keeps the split dimension
  # out_shardings alone: the whole computation on every device, each keeping its block
  c = ourjax.jit(lambda v: v * 3, out_shardings=NamedSharding(mesh, P(None, "m")))(
      np.ones((2, 8), np.float32))
  assert [s.data.shape for s in c.addressable_shards] == [(2, 2)] * N
  np.testing.assert_array_equal(np.asarray(c), np.full((2, 8), 3.0))


def test_sharded_jit_errors():
  mesh = ourjax.make_mesh((N,), ("m",))
  other = ourjax.make_mesh((2, 2), ("a", "b"))
  with pytest.raises(ValueError, match=r"argument x \(f32\[6,2\]\).*dimension 0 is split 4 "
                     "times.*6 is not divisible by 4"):
    ourjax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("m")))(
        np.ones((6, 2), np.float32))
  a = ourjax.device_put(np.ones(8, np.float32), NamedSharding(mesh, P("m")))
  b = ourjax.device_put(np.ones(8, np.float32), NamedSharding(other, P("a")))
  with pytest.raises(ValueError, match=r"mismatched meshes.*argument u \(f32\[8\]\).*"
                     r"argument v \(f32\[8\]\)"):
    ourjax.jit(lambda u, v: u + v)(a, b)
  with pytest.raises(ValueError, match="mismatched meshes"):
    ourjax.jit(lambda u: u, out_shardings=NamedSharding(other, P()))(a)
  with pytest.raises(ValueError, match="does not match the sharding of argument u"):
    ourjax.jit(lambda u: u, in_shardings=NamedSharding(mesh, P()))(a)
  with pytest.raises(NameError, match="unbound axis name: m"):
    ourjax.jit(lambda u: lax.psum(u, "m"), in_shardings=NamedSharding(mesh, P("m")))(a)
  with pytest.raises(RuntimeError, match="PartitionSpec.*needs a mesh"):
    ourjax.jit(lambda u: u, in_shardings=P("m"))(np.ones(8, np.float32))
  with mesh:      # a bare PartitionSpec takes the mesh of the context
    out = ourjax.jit(lambda u: u + 1, in_shardings=P("m"))(np.ones(8, np.float32))
  assert out.sharding == NamedSharding(mesh, P("m"))


def test_slices_pads_and_concatenations_along_unsplit_dimensions_stay_local():
  rng = np.random.default_rng(5)
  x = _x(rng, (8, 6))
  mesh = ourjax.make_mesh((N,), ("m",))
  f = ourjax.jit(lambda v: jnp.concatenate(jnp.split(v, 3, axis=1)[::-1], axis=1) +
                 jnp.pad(v[:, 2:], ((0, 0), (1, 1))),
                 in_shardings=NamedSharding(mesh, P("m")))
  out = f(x)
  want = np.concatenate(np.split(x, 3, axis=1)[::-1], axis=1) + np.pad(x[:, 2:], ((0, 0), (1, 1)))
  np.testing.assert_array_equal(np.asarray(out), want)
  assert out.sharding.spec == P("m")
  local = list(f._sharded.values())[0].local
  assert not any(e.primitive.name == "all_gather" for e in local.jaxpr.eqns)


def test_transformer_data_parallel_step_needs_only_the_gradient_all_reduce():
  import importlib
  import os
  import sys
  examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
  sys.path.insert(0, examples)
  try:
    dp = importlib.import_module("data_parallel")
  finally:
    sys.path.remove(examples)
  cfg = dict(seq=8, dim=16, heads=2, layers=1, vocab=32)
  step = dp.make_step(ourjax, cfg, axis=None)
  params, opt = dp.init(0, cfg)
  x, labels = dp.batch(1, N, 1, cfg)
  x, labels = x.reshape((N,) + x.shape[2:]), labels.reshape((N,) + labels.shape[2:])
  mesh = ourjax.make_mesh((N,), ("batch",))
  rep, bat = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
  sharded = ourjax.jit(step, in_shardings=(rep, rep, bat, bat))
  (p_s, _, loss_s), (p_1, _, loss_1) = sharded(params, opt, x, labels), \
      ourjax.jit(step)(params, opt, x, labels)
  np.testing.assert_allclose(float(loss_s), float(loss_1), rtol=1e-5)
  for a, b in zip(ourjax.tree_util.tree_leaves(p_s), ourjax.tree_util.tree_leaves(p_1)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  local = list(sharded._sharded.values())[0].local
  names = [e.primitive.name for e in local.jaxpr.eqns]
  # one all-reduce of every gradient and one of the loss; nothing gathered
  psums = sorted(len(e.inputs) for e in local.jaxpr.eqns if e.primitive.name == "psum")
  assert psums == [1, len(ourjax.tree_util.tree_leaves(params))]
  assert "all_gather" not in names


_AXES = [None, "x", "y", ("x", "y")]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), a0=st.sampled_from(_AXES), a1=st.sampled_from(_AXES),
       b1=st.sampled_from(_AXES), out=st.sampled_from([None, P(), P("y"), P(("x", "y"))]))
def test_random_layouts_of_a_composite_function_match_numpy(seed, a0, a1, b1, out):
  """Any layout of the operands (on a 2x2 mesh) gives NumPy's numbers: elementwise ops,
  reductions, a dot, a reshape, a broadcast and a transpose, resharded as needed."""
  def valid(*entries):
    names = [n for e in entries if e for n in (e if isinstance(e, tuple) else (e,))]
    return len(names) == len(set(names))
  if not valid(a0, a1):
    a1 = None
  mesh = ourjax.make_mesh((2, 2), ("x", "y"))
  rng = np.random.default_rng(seed)
  x, w = _x(rng, (8, 4)), _x(rng, (4, 8))

  def f(x, w):
    h = jnp.tanh(x @ w) * 2.0 + x.sum(1, keepdims=True)     # [8, 8]
    r = h.reshape(8, 2, 4).max(axis=2).T                     # [2, 8]
    return (r * h[:2]).sum(0) + h.min(0)                     # [8]
  g = ourjax.jit(f, in_shardings=(NamedSharding(mesh, P(a0, a1)), NamedSharding(mesh, P(b1))),
                 out_shardings=None if out is None else NamedSharding(mesh, out))
  got = g(x, w)
  xd, wd = x.astype(np.float64), w.astype(np.float64)
  h = np.tanh(xd @ wd) * 2.0 + xd.sum(1, keepdims=True)
  r = h.reshape(8, 2, 4).max(axis=2).T
  np.testing.assert_allclose(np.asarray(got), (r * h[:2]).sum(0) + h.min(0), rtol=1e-5,
                             atol=1e-5)
  if out is not None:
    assert got.sharding == NamedSharding(mesh, out)
