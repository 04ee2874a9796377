"""shard_map, sharded jit and pmap over a mesh of every process's devices
(``ourjax.distributed``): two processes of two CPU devices each, on loopback, against the same
programs run in one process over four CPU devices (``multiprocess_programs.py``) and NumPy.
Global arrays: their shapes, this process's blocks, the error on reading one whole."""
import os
import textwrap

import numpy as np
import pytest

import ourjax
from ourjax.sharding import NamedSharding, PartitionSpec as P

from cpu_devices import N, four_cpu_devices  # noqa: F401,E402  (autouse)
import multiprocess_programs  # noqa: E402
from process_launch import ROOT, gpu_count, run_workers  # noqa: E402
SEED = 7

_WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ourjax
    from ourjax.experimental import multihost_utils
    import multiprocess_programs
    port, pid, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    ndev = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    if ndev == 2:                     # (one GPU each: the reference's dots at full precision)
      ourjax.config.update("jax_default_matmul_precision", "highest")
    ourjax.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60)
    info = {"devices": [[d.id, d.process_index] for d in ourjax.devices()],
            "local": [d.id for d in ourjax.local_devices()],
            "count": ourjax.device_count(), "local_count": ourjax.local_device_count()}
    results = {}
    info["platforms"] = [d.platform for d in ourjax.local_devices()]
    for name, a in multiprocess_programs.run(pid, 2, seed, ndev).items():
      r = {"shape": list(a.shape), "dtype": str(a.dtype),
           "fully_addressable": bool(getattr(a, "is_fully_addressable", True)),
           "shards": [[[list(s.index[d].indices(a.shape[d])[:2]) for d in range(a.ndim)],
                       s.device.id, np.asarray(s.data).tolist()] for s in a.addressable_shards]}
      try:
        r["value"] = np.asarray(a).tolist()
      except RuntimeError as e:
        r["error"] = str(e)
        r["gathered"] = multihost_utils.process_allgather(a).tolist()
      results[name] = r
    # laying a global array out anew would need the other process's blocks
    x = ourjax.make_array_from_process_local_data(
        ourjax.NamedSharding(ourjax.make_mesh((ndev,), ("x",)), ourjax.P("x")),
        np.zeros((2, 3), np.float32))
    try:
      ourjax.device_put(x, ourjax.NamedSharding(ourjax.make_mesh((ndev,), ("x",)),
                                                ourjax.P(None, None)))
      info["relayout"] = None
    except ValueError as e:
      info["relayout"] = str(e)
    ourjax.distributed.shutdown()
    print("RESULT " + json.dumps({"info": info, "results": results}))
""")


@pytest.fixture(scope="module")
def two_processes():
  return run_workers(_WORKER, [SEED], cpu_devices=2, wait_s=300,
                     path=[os.path.join(ROOT, "tests")])


@pytest.fixture(scope="module")
def reference():
  """The same programs in one process over four CPU devices."""
  mp = pytest.MonkeyPatch()
  mp.setenv("OURJAX_NUM_CPU_DEVICES", str(N))
  mp.setitem(ourjax.config._values, "jax_platforms", "cpu")
  try:
    return {k: np.asarray(v) for k, v in multiprocess_programs.run(0, 1, SEED).items()}
  finally:
    mp.undo()


def _assembled(name, outs, ndev=N):
  """The global value of result ``name`` from both processes' blocks (each index the same
  data wherever it is held)."""
  r0 = outs[0]["results"][name]
  shape = tuple(r0["shape"])
  full = np.full(shape, np.nan)
  seen = np.zeros(shape, bool)
  devices = []
  for o in outs:
    r = o["results"][name]
    assert tuple(r["shape"]) == shape and r["dtype"] == r0["dtype"]
    for bounds, dev, data in r["shards"]:
      idx = tuple(slice(a, b) for a, b in bounds)
      data = np.asarray(data, np.float64).reshape(full[idx].shape)
      if seen[idx].any():
        np.testing.assert_array_equal(full[idx][seen[idx]], data[seen[idx]])
      full[idx] = data
      seen[idx] = True
      devices.append(dev)
  assert seen.all(), f"{name}: the processes' blocks do not cover the array"
  assert sorted(devices) == list(range(ndev))
  return full


def test_devices_span_both_processes(two_processes):
  for pid, o in enumerate(two_processes):
    info = o["info"]
    assert info["devices"] == [[0, 0], [1, 0], [2, 1], [3, 1]]
    assert info["local"] == [2 * pid, 2 * pid + 1]
    assert (info["count"], info["local_count"]) == (4, 2)


def test_every_result_matches_one_process_over_four_devices(two_processes, reference):
  names = sorted(reference)
  assert sorted(two_processes[0]["results"]) == names
  for name in names:
    if name.startswith("pmap_"):
      # (a pmap's results are each process's: its devices' indices of the mapped axis)
      for pid, o in enumerate(two_processes):
        np.testing.assert_allclose(o["results"][name]["value"],
                                   reference[name][2 * pid:2 * pid + 2], rtol=2e-5)
      continue
    got = _assembled(name, two_processes)
    want = reference[name]
    assert got.shape == want.shape, name
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=name)


def test_results_against_numpy(two_processes, reference):
  rng = np.random.default_rng(SEED)
  X = rng.standard_normal((8, 3)).astype(np.float32)
  Z = rng.standard_normal((8, 4)).astype(np.float32)
  got = {n: _assembled(n, two_processes) for n in two_processes[0]["results"]
         if not n.startswith("pmap_")}
  blocks = X.reshape(4, 2, 3).astype(np.float64)
  np.testing.assert_array_equal(got["x"], X)
  np.testing.assert_allclose(got["shard_map_psum"], blocks.sum(0), rtol=1e-6)
  np.testing.assert_allclose(got["shard_map_index"],
                             (blocks * np.arange(4)[:, None, None]).reshape(8, 3))
  np.testing.assert_array_equal(got["shard_map_ppermute"], np.roll(blocks, 1, 0).reshape(8, 3))
  np.testing.assert_array_equal(got["shard_map_all_gather"], X)
  np.testing.assert_allclose(got["shard_map_psum_scatter"], 10 * X, rtol=1e-6)
  zb = Z.reshape(2, 2, 2, 4).astype(np.float64)         # [p, d, rows, cols]
  np.testing.assert_allclose(got["mesh2_psum_d"], zb.sum(1).reshape(4, 4), rtol=1e-6)
  np.testing.assert_allclose(got["mesh2_pmax_p"], zb.max(0).reshape(4, 4))
  zz = Z.reshape(4, 2, 4).astype(np.float64)
  np.testing.assert_allclose(got["mesh2_gram"], np.concatenate([b @ Z.T for b in zz]),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got["jit_sum"], 2 * Z.astype(np.float64).sum(0), rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(got["jit_rows"], np.sin(X) + 1, rtol=1e-6)
  np.testing.assert_array_equal(got["single_device_arrays"], X)
  np.testing.assert_array_equal(got["callback"], Z)
  for o in two_processes:
    np.testing.assert_allclose(o["results"]["pmap_psum"]["value"],
                               np.tile(X[:4].sum(0), (2, 1)), rtol=1e-6)


def test_global_arrays_blocks_and_reading_them(two_processes):
  for pid, o in enumerate(two_processes):
    res = o["results"]
    x = res["x"]
    assert x["shape"] == [8, 3] and not x["fully_addressable"]
    assert [s[0][0] for s in x["shards"]] == [[4 * pid, 4 * pid + 2], [4 * pid + 2, 4 * pid + 4]]
    assert [s[1] for s in x["shards"]] == [2 * pid, 2 * pid + 1]
    # a global array spread over both processes cannot be read whole here ...
    assert "spans non-addressable" in x["error"] and "f32[8,3]" in x["error"]
    assert f"process {pid} holds only some of its blocks" in x["error"]
    np.testing.assert_array_equal(x["gathered"], _assembled("x", two_processes))
    # ... one whose blocks this process holds all of can (replicated results)
    for name in ("dp_loss2", "dp_w1", "shard_map_psum"):
      assert not res[name]["fully_addressable"] and "value" in res[name]
    # pmap results are this process's (its devices along the mapped axis)
    assert res["pmap_index"]["fully_addressable"]
    assert res["pmap_index"]["value"] == [2 * pid, 2 * pid + 1]
    assert "the array spans the devices of several processes" in o["info"]["relayout"]


def test_data_parallel_training_matches_one_device(two_processes):
  rng = np.random.default_rng(SEED)
  rng.standard_normal((8, 3))
  rng.standard_normal((8, 4))
  params = {"w1": rng.standard_normal((3, 16)).astype(np.float32) * 0.5,
            "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
            "w2": rng.standard_normal((16, 2)).astype(np.float32) * 0.5}
  XB = rng.standard_normal((16, 3)).astype(np.float32)
  YB = rng.standard_normal((16, 2)).astype(np.float32)
  step = ourjax.jit(multiprocess_programs._step)
  p = params
  for i in range(3):
    loss, p = step(p, XB, YB)
    for o in two_processes:
      np.testing.assert_allclose(o["results"][f"dp_loss{i}"]["value"], float(loss), rtol=1e-5)
  for k in p:
    for o in two_processes:
      np.testing.assert_allclose(o["results"]["dp_" + k]["value"], np.asarray(p[k]),
                                 rtol=1e-5, atol=1e-6)


def test_process_local_data_in_one_process():
  mesh = ourjax.make_mesh((N,), ("x",))
  sh = NamedSharding(mesh, P("x"))
  data = np.arange(8.0, dtype=np.float32).reshape(N * 2 // 2, -1)
  a = ourjax.make_array_from_process_local_data(sh, data)
  assert a.sharding == sh and a.shape == data.shape
  np.testing.assert_array_equal(np.asarray(a), data)
  with pytest.raises(ValueError, match="global_shape should be None or equal to"):
    ourjax.make_array_from_process_local_data(sh, data, (16, 2))
  with mesh:        # a PartitionSpec takes the mesh of the context; pytrees of data
    t = ourjax.make_array_from_process_local_data(P("x"), {"a": data, "b": data[:, :1]})
  assert t["a"].sharding == sh and t["b"].shape == (N, 1)
  np.testing.assert_array_equal(np.asarray(t["b"]), data[:, :1])


def test_two_processes_one_gpu_each_match_one_process_over_both(monkeypatch):
  """The same programs on a mesh of two GPUs, one per process (NCCL between the processes),
  against one process over both GPUs (NCCL within it)."""
  if gpu_count() < 2:
    pytest.skip("needs two GPUs and NCCL")
  outs = run_workers(_WORKER, [SEED, 2], gpus=True, wait_s=300,
                     path=[os.path.join(ROOT, "tests")])
  monkeypatch.setitem(ourjax.config._values, "jax_platforms", "cuda")
  monkeypatch.setitem(ourjax.config._values, "jax_default_matmul_precision", "highest")
  reference = {k: np.asarray(v) for k, v in multiprocess_programs.run(0, 1, SEED, 2).items()}
  for pid, o in enumerate(outs):
    assert o["info"]["platforms"] == ["gpu"]
    assert o["info"]["devices"] == [[0, 0], [1, 1]] and o["info"]["local"] == [pid]
  assert sorted(outs[0]["results"]) == sorted(reference)
  for name in sorted(reference):
    if name.startswith("pmap_"):
      for pid, o in enumerate(outs):
        np.testing.assert_allclose(o["results"][name]["value"], reference[name][pid:pid + 1],
                                   rtol=2e-5, err_msg=name)
      continue
    got = _assembled(name, outs, ndev=2)
    np.testing.assert_allclose(got, reference[name], rtol=2e-5, atol=2e-6, err_msg=name)
