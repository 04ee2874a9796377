"""Programs over a mesh of every process's devices, run both as 2 processes of 2 CPU devices
each (``test_multiprocess_spmd.py``'s workers) and as one process of 4 CPU devices (the
reference), or over 2 GPUs (one per process; the reference one process over both).
``run(pid, nproc, seed, ndev)`` returns ``{name: array}``: global arrays, made from the data
this process holds (``make_array_from_process_local_data`` of its rows); ``ndev``: the
devices of all processes (4 or 2)."""
import numpy as np

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.sharding import NamedSharding, PartitionSpec as P


def _rows(x, pid, nproc):
  n = x.shape[0] // nproc
  return x[pid * n:(pid + 1) * n]


def _loss(p, x, y):
  h = jnp.tanh(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] - y) ** 2)


def _step(p, x, y):
  loss, g = ourjax.value_and_grad(_loss)(p, x, y)
  return loss, ourjax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)


def run(pid: int, nproc: int, seed: int, ndev: int = 4) -> dict:
  rng = np.random.default_rng(seed)
  out = {}
  mesh = ourjax.make_mesh((ndev,), ("x",))
  rows = NamedSharding(mesh, P("x"))
  X = rng.standard_normal((8, 3)).astype(np.float32)
  x = ourjax.make_array_from_process_local_data(rows, _rows(X, pid, nproc))
  out["x"] = x
  # shard_map: a reduction, each device's index, a ring shift
  f = ourjax.shard_map(
      lambda v: (lax.psum(v, "x"), v * lax.axis_index("x"),
                 lax.ppermute(v, "x", [(i, (i + 1) % ndev) for i in range(ndev)]),
                 lax.all_gather(v, "x", tiled=True),
                 lax.psum_scatter(lax.all_gather(v, "x", tiled=True) * (1.0 + lax.axis_index(
                     "x")), "x", tiled=True)),
      mesh=mesh, in_specs=P("x"), out_specs=(P(), P("x"), P("x"), P(), P("x")))
  for name, r in zip(("psum", "index", "ppermute", "all_gather", "psum_scatter"), f(x)):
    out["shard_map_" + name] = r
  # a 2-d mesh: 'p' across the processes, 'd' within each
  m2 = ourjax.make_mesh((2, ndev // 2), ("p", "d"))
  Z = rng.standard_normal((8, 4)).astype(np.float32)
  z = ourjax.make_array_from_process_local_data(NamedSharding(m2, P(("p", "d"))),
                                                _rows(Z, pid, nproc))
  g = ourjax.shard_map(lambda v: (lax.psum(v, "d"), lax.pmax(v, "p"), v @ lax.all_gather(
      v, ("p", "d"), tiled=True).T), mesh=m2, in_specs=P(("p", "d")),
      out_specs=(P("p"), P("d"), P(("p", "d"))))
  for name, r in zip(("psum_d", "pmax_p", "gram"), g(z)):
    out["mesh2_" + name] = r
  # data-parallel training: the batch split over all devices, the parameters replicated
  params = {"w1": rng.standard_normal((3, 16)).astype(np.float32) * 0.5,
            "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
            "w2": rng.standard_normal((16, 2)).astype(np.float32) * 0.5}
  XB = rng.standard_normal((16, 3)).astype(np.float32)
  YB = rng.standard_normal((16, 2)).astype(np.float32)
  rep = NamedSharding(mesh, P())
  xb = ourjax.make_array_from_process_local_data(rows, _rows(XB, pid, nproc))
  yb = ourjax.make_array_from_process_local_data(rows, _rows(YB, pid, nproc))
  # (the parameters donated: each device's copy updated in place)
  step = ourjax.jit(_step, in_shardings=(rep, rows, rows), out_shardings=(rep, rep),
                    donate_argnums=0)
  p = params
  for i in range(3):
    old = p
    loss, p = step(p, xb, yb)
    if i:
      assert all(v.is_deleted() for v in old.values())
    out[f"dp_loss{i}"] = loss
  for k, v in p.items():
    out["dp_" + k] = v
  # tensor parallelism: the weight's columns split, the result split alike
  W = rng.standard_normal((3, 8)).astype(np.float32)
  cols = NamedSharding(mesh, P(None, "x"))
  tp = ourjax.jit(lambda a, w: jnp.tanh(a @ w), in_shardings=(rep, cols), out_shardings=cols)
  out["tp"] = tp(XB, W)
  # a jitted function on a global array laid out already; a result left as partitioned
  out["jit_sum"] = ourjax.jit(lambda v: (v * 2.0).sum(0))(z)
  out["jit_rows"] = ourjax.jit(lambda v: jnp.sin(v) + 1.0)(x)
  # per-device arrays and a callback, this process's devices only
  dev_blocks = [ourjax.device_put(X[idx], d) for d, idx in
                rows.addressable_devices_indices_map(X.shape).items()]
  out["single_device_arrays"] = ourjax.make_array_from_single_device_arrays(
      X.shape, rows, dev_blocks)
  out["callback"] = ourjax.make_array_from_callback(Z.shape, NamedSharding(m2, P("p", "d")),
                                                    lambda idx: Z[idx])
  # pmap over this process's devices, its collectives over every process's
  pm = ourjax.pmap(lambda v: (lax.psum(v, "i"), lax.axis_index("i")), axis_name="i")
  s, ix = pm(_rows(X[:ndev], pid, nproc))
  out["pmap_psum"] = s
  out["pmap_index"] = ix
  return out
