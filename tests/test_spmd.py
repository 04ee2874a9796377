"""pmap, shard_map, shardings and the named-axis collectives over several devices.

The CPU shows ``OURJAX_NUM_CPU_DEVICES`` devices whose collectives run in process
(``backends/collectives.py``), so every API here runs without GPUs.  References: NumPy on the
global arrays, and the same function under ``vmap`` with a named axis (pmap's definition).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from cpu_devices import N, four_cpu_devices, random_f32 as _x  # noqa: F401,E402  (autouse)


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


def test_devices_from_environment():
  devs = ourjax.devices()
  assert len(devs) == N and [d.id for d in devs] == list(range(N))
  assert all(d.platform == "cpu" for d in devs)
  assert ourjax.device_count() == N


@settings(max_examples=8, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_pmap_reductions_match_numpy(shape, seed):
  x = _x(np.random.default_rng(seed), (N,) + shape)
  out = ourjax.pmap(lambda v: (lax.psum(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i"),
                               lax.pmean(v, "i")), axis_name="i")(x)
  for got, want in zip(out, (x.sum(0), x.max(0), x.min(0), x.mean(0))):
    np.testing.assert_allclose(np.asarray(got), np.broadcast_to(want, x.shape), rtol=1e-5,
                               atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple),
       axis=st.integers(0, 1), tiled=st.booleans(), seed=st.integers(0, 2**16))
def test_all_gather_matches_numpy_and_vmap(shape, axis, tiled, seed):
  axis = min(axis, len(shape) - 1 if tiled else len(shape))
  x = _x(np.random.default_rng(seed), (N,) + shape)
  f = lambda v: lax.all_gather(v, "i", axis=axis, tiled=tiled)  # noqa: E731
  got = np.asarray(ourjax.pmap(f, axis_name="i")(x))
  want = np.moveaxis(x, 0, axis)
  if tiled:
    want = np.concatenate(list(x), axis=axis)
  np.testing.assert_array_equal(got, np.broadcast_to(want, (N,) + want.shape))
  np.testing.assert_array_equal(got, np.asarray(ourjax.vmap(f, axis_name="i")(x)))


@settings(max_examples=6, deadline=None)
@given(tiled=st.booleans(), seed=st.integers(0, 2**16))
def test_psum_scatter_and_all_to_all(tiled, seed):
  rng = np.random.default_rng(seed)
  k = 2 if tiled else 1
  x = _x(rng, (N, N * k, 3)) if tiled else _x(rng, (N, N, 3))
  f = lambda v: lax.psum_scatter(v, "i", scatter_dimension=0, tiled=tiled)  # noqa: E731
  got = np.asarray(ourjax.pmap(f, axis_name="i")(x))
  total = x.sum(0)
  want = total.reshape(N, k, 3) if tiled else total
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got, np.asarray(ourjax.vmap(f, axis_name="i")(x)), rtol=1e-6)
  y = _x(rng, (N, N, 2))
  g = lambda v: lax.all_to_all(v, "i", 0, 1)  # noqa: E731
  got = np.asarray(ourjax.pmap(g, axis_name="i")(y))
  # member p gets stack over i of y_i[p], along axis 1
  want = np.stack([np.stack([y[i, p] for i in range(N)], axis=1) for p in range(N)])
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(got, np.asarray(ourjax.vmap(g, axis_name="i")(y)))


@pytest.mark.parametrize("mapper", ["pmap", "vmap"])
@pytest.mark.parametrize("tiled", [False, True])
def test_psum_scatter_along_an_inner_dimension(mapper, tiled):
  x = _x(np.random.default_rng(5), (N, 3, 2 * N if tiled else N, 2))
  f = getattr(ourjax, mapper)(
      lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=tiled), axis_name="i")
  total = x.sum(0)                                     # [3, d, 2]
  if tiled:
    want = np.stack([total[:, 2 * p:2 * p + 2] for p in range(N)])
  else:
    want = np.stack([total[:, p] for p in range(N)])
  np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5, atol=1e-5)


def test_ppermute_axis_index_and_pbroadcast():
  x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
  perm = [(i, (i + 1) % N) for i in range(N - 1)]       # the last one sends nothing
  got = np.asarray(ourjax.pmap(lambda v: lax.ppermute(v, "i", perm), axis_name="i")(x))
  want = np.zeros_like(x)
  for s, d in perm:
    want[d] = x[s]
  np.testing.assert_array_equal(got, want)
  idx = ourjax.pmap(lambda v: lax.axis_index("i") + 0 * v[0].astype(jnp.int32),
                    axis_name="i")(x)
  np.testing.assert_array_equal(np.asarray(idx), np.arange(N))
  b = ourjax.pmap(lambda v: lax.pbroadcast(v, "i", 2), axis_name="i")(x)
  np.testing.assert_array_equal(np.asarray(b), np.broadcast_to(x[2], x.shape))
  assert int(ourjax.pmap(lambda v: lax.psum(1, "i"), axis_name="i")(x)[0]) == N


def test_pmap_in_axes_out_axes_and_static_args():
  rng = np.random.default_rng(0)
  w, x = _x(rng, (3,)), _x(rng, (2, N))
  f = ourjax.pmap(lambda w, x, k: (w.sum() * x * k, lax.psum(x, "i")), axis_name="i",
                  in_axes=(None, 1, None), out_axes=(1, None), static_broadcasted_argnums=2)
  a, s = f(w, x, 3.0)
  np.testing.assert_allclose(np.asarray(a), w.sum() * x * 3.0, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(s), x.sum(1), rtol=1e-5)


def test_pmap_static_arguments_cache_only_when_hashable():
  x = np.arange(N, dtype=np.float32)
  f = ourjax.pmap(lambda v, k: v * k[0], axis_name="i", static_broadcasted_argnums=1)
  for _ in range(3):     # a list is not hashable: computed anew each call, never cached
    np.testing.assert_array_equal(np.asarray(f(x, [3.0])), x * 3)
  assert len(f._pmap_cache) == 0
  g = ourjax.pmap(lambda v, k: v * k, axis_name="i", static_broadcasted_argnums=1)
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(g(x, 2.0)), x * 2)
  assert len(g._pmap_cache) == 1


def test_grad_inside_and_outside_pmap():
  rng = np.random.default_rng(1)
  w, x = _x(rng, (3,)), _x(rng, (N, 3))

  def loss(w, x):
    return lax.pmean(jnp.sum(jnp.tanh(x * w) ** 2), "i")
  g = ourjax.pmap(ourjax.grad(loss), axis_name="i", in_axes=(None, 0))(w, x)
  # psum's transpose is psum: each device's gradient is its own term's (as JAX's)
  want = [2 * np.tanh(xi * w) * (1 - np.tanh(xi * w) ** 2) * xi for xi in x]
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-6)
  # grad of a pmap (pmap under a transformation runs as vmap with the named axis)
  h = ourjax.grad(lambda v: ourjax.pmap(lambda u: lax.psum(u * u, "i"), axis_name="i")(v).sum())
  np.testing.assert_allclose(np.asarray(h(x[:, 0])), 2 * N * x[:, 0], rtol=1e-5)


def test_collectives_inside_jit_and_scan_in_pmap():
  x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
  inner = ourjax.jit(lambda v: lax.psum(v * 2, "i") + 1)

  def body(c, _):
    c = lax.pmean(c + 1.0, "i")
    return c, c.sum()
  f = ourjax.pmap(lambda v: (inner(v), lax.scan(body, v, None, length=3)), axis_name="i")
  a, (c, ys) = f(x)
  np.testing.assert_allclose(np.asarray(a), np.broadcast_to(2 * x.sum(0) + 1, x.shape))
  ref = x.mean(0)
  refs = []
  cc = x.copy()
  for _ in range(3):
    cc = np.broadcast_to((cc + 1).mean(0), cc.shape)
    refs.append(cc[0].sum())
  np.testing.assert_allclose(np.asarray(c), cc, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ys), np.broadcast_to(refs, (N, 3)), rtol=1e-6)
  del ref


def test_pmap_result_is_sharded_and_feeds_the_next_pmap():
  x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
  f = ourjax.pmap(lambda v: v * 2 + lax.axis_index("i"), axis_name="i")
  y = f(x)
  assert isinstance(y.sharding, NamedSharding) and y.sharding.spec == P("i")
  assert [s.device.id for s in y.addressable_shards] == list(range(N))
  assert all(s.data.shape == (1, 2) for s in y.addressable_shards)
  z = f(y)
  want = (x * 2 + np.arange(N)[:, None]) * 2 + np.arange(N)[:, None]
  np.testing.assert_array_equal(np.asarray(z), want)
  np.testing.assert_array_equal(np.asarray(z + 1), want + 1)     # eager op on a sharded array


def test_pmap_errors():
  with pytest.raises(ValueError, match="requires 8 logical devices"):
    ourjax.pmap(lambda v: v)(np.zeros((8, 2), np.float32))
  with pytest.raises(ValueError, match="inconsistent sizes"):
    ourjax.pmap(lambda a, b: a + b)(np.zeros((2,)), np.zeros((3,)))
  with pytest.raises(NameError, match="unbound axis name: j"):
    ourjax.pmap(lambda v: lax.psum(v, "j"), axis_name="i")(np.zeros((2,), np.float32))
  with pytest.raises(NameError, match="unbound axis name"):
    lax.psum(1.0, "i")


def test_named_sharding_layout_and_device_put():
  mesh = ourjax.make_mesh((2, 2), ("x", "y"))
  assert mesh.shape == {"x": 2, "y": 2} and mesh.size == 4
  s = NamedSharding(mesh, P("x"))
  idx = s.devices_indices_map((4, 6))
  assert idx[mesh.devices[1, 0]] == (slice(2, 4), slice(None))
  assert s.shard_shape((4, 6)) == (2, 6) and not s.is_fully_replicated
  assert s.is_equivalent_to(NamedSharding(mesh, P("x", None)), 2)
  assert not s.is_equivalent_to(NamedSharding(mesh, P("y")), 2)
  x = np.arange(24, dtype=np.float32).reshape(4, 6)
  a = ourjax.device_put(x, NamedSharding(mesh, P("y", "x")))
  assert a.sharding == NamedSharding(mesh, P("y", "x"))
  for sh in a.addressable_shards:
    np.testing.assert_array_equal(np.asarray(sh.data), x[sh.index])
  assert sorted(sh.replica_id for sh in ourjax.device_put(x, s).addressable_shards) == [0, 0, 1, 1]
  np.testing.assert_array_equal(np.asarray(a), x)
  one = ourjax.device_put(x, ourjax.devices()[2])
  assert one.devices() == {ourjax.devices()[2]}
  assert one.sharding == SingleDeviceSharding(ourjax.devices()[2])
  with pytest.raises(ValueError, match="evenly divide"):
    ourjax.device_put(np.zeros((5, 3)), s)
  with pytest.raises(ValueError, match="not found in mesh"):
    NamedSharding(mesh, P("z"))
  with pytest.raises(ValueError, match="duplicate"):
    NamedSharding(mesh, P("x", "x"))
  with pytest.raises(ValueError, match="needs 8 devices"):
    ourjax.make_mesh((2, 4), ("a", "b"))
  assert isinstance(Mesh(np.array(ourjax.devices()[:2]), ("d",)).devices, np.ndarray)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), spec=st.sampled_from([("x", "y"), ("y", None), (None, "x"),
                                                          (("x", "y"), None)]))
def test_shard_map_matches_numpy_eager_jit_and_grad(seed, spec):
  mesh = ourjax.make_mesh((2, 2), ("x", "y"))
  x = _x(np.random.default_rng(seed), (4, 4))
  in_spec = P(*spec)
  named = {n for e in spec if e for n in (e if isinstance(e, tuple) else (e,))}

  def f(b):
    # sum of every block over all devices, plus the block scaled by its x position
    tot = lax.psum(b.sum(), ("x", "y"))
    return b * (lax.axis_index("x") + 1).astype(b.dtype) + tot
  sm = ourjax.shard_map(f, mesh=mesh, in_specs=in_spec, out_specs=in_spec)
  # reference: the same blocks in NumPy
  sh = NamedSharding(mesh, in_spec)
  blocks = sh.devices_indices_map(x.shape)
  reps = int(np.prod([mesh.shape[n] for n in ("x", "y") if n not in named]))
  tot = x.sum() * reps
  want = np.empty_like(x)
  for d, c in zip(mesh.devices.flat, mesh.coords()):
    want[blocks[d]] = x[blocks[d]] * (c["x"] + 1) + tot
  if "x" not in named:      # replicated along x: any device's value, the first's (x = 0)
    want = x * 1 + tot
  np.testing.assert_allclose(np.asarray(sm(x)), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ourjax.jit(sm)(x)), want, rtol=1e-5, atol=1e-5)
  g = ourjax.grad(lambda z: jnp.sum(sm(z) ** 2))(x)
  eps = 1e-2
  e = np.zeros_like(x)
  e[1, 2] = eps
  fd = (np.sum(np.asarray(sm(x + e)) ** 2) - np.sum(np.asarray(sm(x - e)) ** 2)) / (2 * eps)
  np.testing.assert_allclose(np.asarray(g)[1, 2], fd, rtol=2e-2, atol=2e-2)


def test_shard_map_takes_sharded_inputs_and_mesh_context():
  mesh = ourjax.make_mesh((4,), ("d",))
  x = np.arange(8, dtype=np.float32)
  a = ourjax.device_put(x, NamedSharding(mesh, P("d")))
  with mesh:
    f = ourjax.shard_map(lambda b: lax.all_gather(b, "d", tiled=True) * 2, in_specs=P("d"),
                         out_specs=P())
    out = f(a)
  np.testing.assert_array_equal(np.asarray(out), x * 2)
  with pytest.raises(ValueError, match="needs a mesh"):
    ourjax.shard_map(lambda b: b, in_specs=P(), out_specs=P())(x)


@pytest.mark.parametrize("name", ["all_gather", "psum_scatter", "ppermute", "all_to_all",
                                  "psum", "pmax"])
@pytest.mark.parametrize("mapper", ["pmap", "vmap"])
def test_collective_gradients_match_finite_differences(name, mapper):
  rng = np.random.default_rng(3)
  x = _x(rng, (N, N, 2))
  coll = {"all_gather": lambda v: lax.all_gather(v, "i", axis=1),
          "psum_scatter": lambda v: lax.psum_scatter(v, "i"),
          "ppermute": lambda v: lax.ppermute(v, "i", [(0, 2), (2, 1), (1, 0)]),
          "all_to_all": lambda v: lax.all_to_all(v, "i", 0, 1),
          "psum": lambda v: lax.psum(jnp.sin(v), "i"),
          "pmax": lambda v: lax.pmax(v * v, "i")}[name]
  mapped = getattr(ourjax, mapper)(coll, axis_name="i")
  w = _x(rng, np.shape(np.asarray(mapped(x))))
  loss = lambda z: jnp.sum(mapped(z) * w)  # noqa: E731
  g = np.asarray(ourjax.grad(loss)(x))
  for idx in [(0, 1, 0), (3, 2, 1), (2, 0, 1)]:
    e = np.zeros_like(x)
    e[idx] = 1e-2
    fd = (float(loss(x + e)) - float(loss(x - e))) / 2e-2
    np.testing.assert_allclose(g[idx], fd, rtol=2e-2, atol=2e-3)


def test_vmap_inside_pmap_batches_the_collectives():
  x = _x(np.random.default_rng(4), (N, 3, 2))
  f = ourjax.pmap(ourjax.vmap(lambda v: (lax.psum(v, "i"), lax.all_gather(v, "i")),
                              in_axes=0), axis_name="i")
  s, g = f(x)
  np.testing.assert_allclose(np.asarray(s), np.broadcast_to(x.sum(0), x.shape), rtol=1e-5)
  want = np.broadcast_to(np.moveaxis(x, 0, 1)[None], (N, 3, N, 2))
  np.testing.assert_array_equal(np.asarray(g), want)
  # the same with the vmap axis named too, reduced over both axes
  both = ourjax.pmap(ourjax.vmap(lambda v: lax.psum(v, ("i", "j")), axis_name="j"),
                     axis_name="i")(x)
  np.testing.assert_allclose(np.asarray(both), np.broadcast_to(x.sum((0, 1)), x.shape),
                             rtol=1e-5)


def test_a_donated_laid_out_array_is_deleted_for_device_put_and_block_until_ready():
  from ourjax.errors import JaxRuntimeError
  f = ourjax.jit(lambda v: v * 2, donate_argnums=0)
  devs = ourjax.devices()
  for mesh_devs in (devs[:1], devs, devs[::-1]):
    s = NamedSharding(Mesh(np.array(mesh_devs), ("x",)), P("x"))
    x = ourjax.device_put(np.arange(2 * N, dtype=np.float32), s)
    np.testing.assert_array_equal(np.asarray(f(x)), 2 * np.arange(2 * N, dtype=np.float32))
    assert x.is_deleted()
    for put in (lambda: ourjax.device_put(x, s), lambda: ourjax.device_put(x)):
      with pytest.raises(RuntimeError, match="Array has been deleted with shape=float32"):
        put()
    with pytest.raises(JaxRuntimeError, match="deleted or donated buffer"):
      x.block_until_ready()
