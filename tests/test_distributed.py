"""ourjax.distributed: two processes on loopback, one CPU device each, running collectives
under pmap through the coordinator; timeouts and an unreachable coordinator.  References:
NumPy on the values both processes contribute."""
import textwrap

import numpy as np
import pytest

import ourjax
from ourjax import errors
from process_launch import free_port, run_workers

_WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ourjax
    from ourjax import errors, lax
    port, pid, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ourjax.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60)
    out = {"index": ourjax.process_index(), "count": ourjax.process_count(),
           "devices": ourjax.device_count(), "local": ourjax.local_device_count()}
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
  _check_collectives(_launch("plain"))


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
