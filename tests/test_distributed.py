"""ourjax.distributed: two processes on loopback, one CPU device each, running collectives
under pmap through the coordinator; timeouts and an unreachable coordinator.  With two GPUs
(and NCCL), the same on one GPU per process, through NCCL, and data-parallel steps of
``examples/data_parallel.py``'s transformer against one process over both GPUs.  References:
NumPy on the values both processes contribute; the one-process run."""
import os
import textwrap

import numpy as np
import pytest

import ourjax
from ourjax import errors
from process_launch import ROOT, free_port, gpu_count, run_workers

# (the GPU workers' transformer: small, so that it compiles in seconds)
DP_CFG = dict(seq=16, dim=32, heads=2, layers=1, vocab=64)
DP_STEPS, DP_BATCH = 3, 4

_WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ourjax
    from ourjax import errors, lax
    port, pid, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    kw, made = {}, []
    if mode.startswith("gpu"):
      from ourjax.backends import collectives
      init = collectives.NcclProcessCommunicator.__init__
      def spy(self, *a, **k):
        made.append(type(self).__name__)
        init(self, *a, **k)
      collectives.NcclProcessCommunicator.__init__ = spy
      ourjax.config.update("jax_default_matmul_precision", "highest")
      if mode == "gpu-ids":           # every GPU visible: this process takes GPU pid
        kw["local_device_ids"] = [pid]
    ourjax.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60,
                                  **kw)
    out = {"index": ourjax.process_index(), "count": ourjax.process_count(),
           "devices": ourjax.device_count(), "local": ourjax.local_device_count(),
           "platforms": [d.platform for d in ourjax.local_devices()],
           "ordinals": [d.local_hardware_id for d in ourjax.local_devices()]}
    x = (np.arange(6, dtype=np.float32).reshape(1, 6) + 10 * pid)
    f = ourjax.pmap(lambda v: (lax.psum(v, "i"), lax.all_gather(v, "i"),
                               lax.pmax(v, "i"), lax.axis_index("i"),
                               lax.psum(1, "i")), axis_name="i")
    s, g, m, idx, size = f(x)
    out.update(psum=np.asarray(s).tolist(), gather=np.asarray(g).tolist(),
               pmax=np.asarray(m).tolist(), idx=int(np.asarray(idx)[0]),
               size=int(np.asarray(size)[0]))
    # a data-parallel gradient: each process its half of the batch, the mean over both
    w = np.array([0.5, -1.0, 2.0], np.float32)
    xb = np.arange(6, dtype=np.float32).reshape(1, 2, 3) * (pid + 1)
    def loss(w, xb):
      return ((xb @ w) ** 2).mean()
    grad = ourjax.pmap(lambda w, xb: lax.pmean(ourjax.grad(loss)(w, xb), "i"),
                       axis_name="i", in_axes=(None, 0))(w, xb)
    out["grad"] = np.asarray(grad).tolist()
    if mode.startswith("gpu"):
      # data-parallel steps: this process's device takes its slice of the batch
      import data_parallel as dp
      cfg, nsteps, b = json.loads(sys.argv[4])
      step = ourjax.pmap(dp.make_step(ourjax, cfg), axis_name="devices")
      params, opt = dp.init(0, cfg)
      params, opt = dp.replicate(params, 1), dp.replicate(opt, 1)
      losses = []
      for i in range(nsteps):
        x, labels = dp.batch(10 + i, 2, b, cfg)
        params, opt, loss = step(params, opt, x[pid:pid + 1], labels[pid:pid + 1])
        losses.append(float(np.asarray(loss)[0]))
      out["dp_losses"] = losses
      out["dp_params"] = [np.asarray(v)[0].tolist()
                          for v in ourjax.tree_util.tree_leaves(params)]
      out["nccl"] = made
    if mode == "timeout" and pid == 0:
      try:
        ourjax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)
        out["timeout"] = None
      except errors.CollectiveTimeoutError as e:
        out["timeout"] = str(e)
    ourjax.distributed.shutdown()
    print("RESULT " + json.dumps(out))
""")


def _launch(mode, timeout_s="60"):
  return run_workers(_WORKER, [mode], collective_timeout=timeout_s)


def _check_platform(outs, platform, ordinals):
  for o, k in zip(outs, ordinals):
    assert o["platforms"] == [platform] and o["ordinals"] == [k]


def _check_collectives(outs):
  xs = [np.arange(6, dtype=np.float32).reshape(1, 6) + 10 * pid for pid in range(2)]
  w = np.array([0.5, -1.0, 2.0])
  xb = [np.arange(6, dtype=np.float64).reshape(2, 3) * (pid + 1) for pid in range(2)]
  grads = [2 * ((b @ w)[:, None] * b).mean(0) for b in xb]
  for pid, o in enumerate(outs):
    assert (o["index"], o["count"], o["devices"], o["local"]) == (pid, 2, 2, 1)
    np.testing.assert_allclose(o["psum"], xs[0] + xs[1])
    np.testing.assert_allclose(o["gather"], np.stack([xs[0][0], xs[1][0]])[None])
    np.testing.assert_allclose(o["pmax"], np.maximum(xs[0], xs[1]))
    assert o["idx"] == pid and o["size"] == 2
    np.testing.assert_allclose(o["grad"], [np.mean(grads, 0)], rtol=1e-5)


def test_two_processes_run_collectives_under_pmap():
  outs = _launch("plain")
  _check_collectives(outs)
  _check_platform(outs, "cpu", [0, 0])


def _one_process_data_parallel():
  """The workers' data-parallel steps in this process, pmap over its first two GPUs."""
  import sys
  sys.path.insert(0, os.path.join(ROOT, "examples"))
  try:
    import data_parallel as dp
  finally:
    sys.path.pop(0)
  devs = ourjax.devices("cuda")[:2]
  step = ourjax.pmap(dp.make_step(ourjax, DP_CFG), axis_name="devices", devices=devs)
  params, opt = dp.init(0, DP_CFG)
  params, opt = dp.replicate(params, 2), dp.replicate(opt, 2)
  losses = []
  for i in range(DP_STEPS):
    x, labels = dp.batch(10 + i, 2, DP_BATCH, DP_CFG)
    params, opt, loss = step(params, opt, x, labels)
    loss = np.asarray(loss)
    assert loss[0] == loss[1]
    losses.append(float(loss[0]))
  return losses, [np.asarray(v) for v in ourjax.tree_util.tree_leaves(params)]


@pytest.mark.parametrize("gpus", ["one-each", "all"])
def test_two_processes_one_gpu_each_through_nccl(gpus):
  """One GPU per process (the only one it sees, or picked by ``local_device_ids`` among
  both): its devices are CUDA's, the collectives go through NCCL (``NcclProcessCommunicator``)
  and agree with NumPy, and the data-parallel steps agree with one process over both GPUs."""
  if gpu_count() < 2:
    pytest.skip("needs two GPUs and NCCL")
  import json
  outs = run_workers(_WORKER, ["gpu" if gpus == "one-each" else "gpu-ids",
                               json.dumps([DP_CFG, DP_STEPS, DP_BATCH])],
                     gpus=True if gpus == "one-each" else "all", wait_s=300,
                     path=[os.path.join(ROOT, "examples")])
  _check_collectives(outs)
  _check_platform(outs, "gpu", [0, 0] if gpus == "one-each" else [0, 1])
  for o in outs:
    assert o["nccl"] and set(o["nccl"]) == {"NcclProcessCommunicator"}
  losses, params = _one_process_data_parallel()
  for pid, o in enumerate(outs):
    np.testing.assert_allclose(o["dp_losses"], losses, rtol=1e-5)
    assert len(o["dp_params"]) == len(params)
    for got, want in zip(o["dp_params"], params):
      np.testing.assert_allclose(np.asarray(got, np.float32), want[pid], rtol=1e-4, atol=1e-6)


def test_a_collective_a_process_never_joins_times_out():
  outs = _launch("timeout", timeout_s="2")
  _check_collectives(outs)
  msg = outs[0]["timeout"]
  assert msg is not None and "lax.psum over axes ('i',) of f32[6]" in msg
  assert "waited for process 1" in msg and "within 2 s" in msg


def test_unreachable_coordinator_and_bad_arguments():
  port = free_port()            # nothing listens there
  with pytest.raises(RuntimeError, match=f"process 1 of 2 cannot reach the coordinator at "
                     f"127.0.0.1:{port}"):
    ourjax.distributed.initialize(f"127.0.0.1:{port}", 2, 1, initialization_timeout=0.5)
  assert not ourjax.distributed.is_initialized() and ourjax.process_count() == 1
  # process 0 starts the coordinator, but process 1 never comes
  with pytest.raises(errors.CollectiveTimeoutError, match="process 1 did not connect"):
    ourjax.distributed.initialize(f"127.0.0.1:{port}", 2, 0, initialization_timeout=0.5)
  assert not ourjax.distributed.is_initialized()
  with pytest.raises(ValueError, match="'host:port'"):
    ourjax.distributed.initialize("localhost", 2, 0)
  with pytest.raises(ValueError, match="process_id 2 is not in"):
    ourjax.distributed.initialize("127.0.0.1:1", 2, 2)
