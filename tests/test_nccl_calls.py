"""The NCCL communicators' host side without GPUs or NCCL: a stand-in ``nccl`` module records
the calls that ``backends/collectives.py`` issues (pointers, counts, types, ops, ranks,
communicators, streams) for collectives among two GPUs of one process (``NcclCommunicator``)
and between processes (``NcclProcessCommunicator``, the unique id read from the coordinator),
against what each collective must ask of NCCL."""
import pickle
import sys
import types

import numpy as np
import pytest

pytest.importorskip("cuda.bindings")

from ourjax.backends import Device, collectives  # noqa: E402

F32 = collectives._NCCL_TYPES["float32"]
OPS = collectives._NCCL_OPS


class _Recorder:
  def __init__(self):
    self.calls = []
    rec = self.calls.append
    self.nccl = types.SimpleNamespace(
        group_start=lambda: rec(("group_start",)), group_end=lambda: rec(("group_end",)),
        all_reduce=lambda *a: rec(("all_reduce",) + a),
        all_gather=lambda *a: rec(("all_gather",) + a),
        reduce_scatter=lambda *a: rec(("reduce_scatter",) + a),
        allto_all=lambda *a: rec(("all_to_all",) + a),
        send=lambda *a: rec(("send",) + a), recv=lambda *a: rec(("recv",) + a),
        comm_init_all=lambda n, ids: [f"comm-of-gpu{i}" for i in ids], Comm=lambda p: p)


class _Gpu:
  def __init__(self, ordinal, calls):
    self.ordinal, self.stream_handle, self._calls = ordinal, f"stream{ordinal}", calls

  def make_current(self):
    pass

  def memset8(self, *a):
    self._calls.append(("memset",) + a)


class _Buf:
  count = 0

  def __init__(self, shape, dtype=np.float32):
    _Buf.count += 1
    self.ptr, self.shape, self.dtype = _Buf.count, tuple(shape), np.dtype(dtype)
    self.nbytes = int(np.prod(shape)) * self.dtype.itemsize


class _Arr:
  def __init__(self, shape):
    self._device_buf = _Buf(shape)


@pytest.fixture
def recorder(monkeypatch):
  rec = _Recorder()
  mod, bindings = types.ModuleType("nccl"), types.ModuleType("nccl.bindings")
  bindings.nccl = rec.nccl
  mod.bindings = bindings
  monkeypatch.setitem(sys.modules, "nccl", mod)
  monkeypatch.setitem(sys.modules, "nccl.bindings", bindings)
  from ourjax.backends.cuda import backend as cuda_backend
  monkeypatch.setattr(cuda_backend._Ready, "record",
                      staticmethod(lambda dev, pool: f"ready{dev.ordinal}"))
  monkeypatch.delenv("OURJAX_COLLECTIVE_TIMEOUT", raising=False)
  rec.module = mod
  return rec


def _fake_gpus(comm, ordinals, calls):
  comm._drvs = {k: _Gpu(o, calls) for k, o in enumerate(ordinals)}
  comm._empty = lambda k, shape, dtype: _Buf(shape, dtype)


def test_one_process_all_reduce_all_gather_ppermute(recorder):
  c = collectives.NcclCommunicator([Device("gpu", 0), Device("gpu", 1)])
  _fake_gpus(c, [0, 1], recorder.calls)
  for _ in range(2):          # (the second call from what the first one looked up)
    recorder.calls.clear()
    ins = [[_Arr((3, 2)), _Arr((4,))], [_Arr((3, 2)), _Arr((4,))]]
    outs = c.all_reduce([(0, 1)], ins, "max")
    assert [[(o.shape, o._ready) for o in lane] for lane in outs] == \
        [[((3, 2), "ready0"), ((4,), "ready0")], [((3, 2), "ready1"), ((4,), "ready1")]]
    assert recorder.calls == [("group_start",)] + [
        ("all_reduce", ins[k][i]._device_buf.ptr, outs[k][i].ptr, n, F32, OPS["max"],
         f"comm-of-gpu{k}", f"stream{k}") for i, n in ((0, 6), (1, 4)) for k in (0, 1)] + \
        [("group_end",)]
  recorder.calls.clear()
  ins = [_Arr((3,)), _Arr((3,))]
  outs = c.all_gather([(0, 1)], ins)
  assert [o.shape for o in outs] == [(2, 3), (2, 3)]
  assert recorder.calls[1:3] == [("all_gather", ins[k]._device_buf.ptr, outs[k].ptr, 3, F32,
                                  f"comm-of-gpu{k}", f"stream{k}") for k in (0, 1)]
  recorder.calls.clear()
  ins = [_Arr((5,)), _Arr((5,))]
  outs = c.ppermute([(0, 1)], ins, [(0, 1)])
  # lane 0 receives nothing: zeros
  assert recorder.calls == [
      ("memset", outs[0].ptr, 0, 20), ("group_start",),
      ("send", ins[0]._device_buf.ptr, 5, F32, 1, "comm-of-gpu0", "stream0"),
      ("recv", outs[1].ptr, 5, F32, 0, "comm-of-gpu1", "stream1"), ("group_end",)]


def test_processes_share_a_communicator_per_group(recorder):
  made = []

  class Communicator:
    def __init__(self, n, rank, uid):
      self.ptr = f"comm({n},{rank},{uid})"

    @classmethod
    def init(cls, n, rank, uid):
      made.append((n, rank, uid))
      return cls(n, rank, uid)
  core = types.ModuleType("nccl.core")
  core.Communicator, core.get_unique_id = Communicator, lambda: "uid-of-process-0"
  sys.modules["nccl.core"] = core
  recorder.module.core = core
  try:
    store = {}

    class Client:
      def set(self, key, value, reads=0):
        store[key] = (value, reads)

      def get(self, key, timeout, what):
        return store[key][0]
    # process 0 of 2 (one GPU each) draws the id; process 1 reads it
    everyone = [Device("gpu", 0, process_index=0, local_hardware_id=0),
                Device("gpu", 1, process_index=1, local_hardware_id=0)]
    comms = []
    for pid in (0, 1):
      st = types.SimpleNamespace(process_id=pid, num_processes=2, client=Client())
      lanes = types.SimpleNamespace(devices=[everyone[pid]], all_devices=everyone,
                                    lane_ids=[pid])
      c = collectives.NcclProcessCommunicator(lanes, st)
      _fake_gpus(c, [0], recorder.calls)
      comms.append(c)
    assert list(store) == [] and made == []
    recorder.calls.clear()
    a = _Arr((3,))
    out = comms[0].all_reduce([(0, 1)], [[a]], "sum")
    assert store == {"nccl-unique-id/0,1/1": (pickle.dumps("uid-of-process-0"), 1)}
    b = _Arr((3,))
    out1 = comms[1].all_reduce([(0, 1)], [[b]], "sum")
    assert made == [(2, 0, "uid-of-process-0"), (2, 1, "uid-of-process-0")]
    assert recorder.calls == [
        ("group_start",), ("all_reduce", a._device_buf.ptr, out[0][0].ptr, 3, F32, OPS["sum"],
                           "comm(2,0,uid-of-process-0)", "stream0"), ("group_end",),
        ("group_start",), ("all_reduce", b._device_buf.ptr, out1[0][0].ptr, 3, F32,
                           OPS["sum"], "comm(2,1,uid-of-process-0)", "stream0"),
        ("group_end",)]
    # a ring shift: each process sends its block and receives the other's
    recorder.calls.clear()
    x = _Arr((2,))
    (o,) = comms[1].ppermute([(0, 1)], [x], [(0, 1), (1, 0)])
    assert sorted(recorder.calls[1:3]) == sorted([
        ("recv", o.ptr, 2, F32, 0, "comm(2,1,uid-of-process-0)", "stream0"),
        ("send", x._device_buf.ptr, 2, F32, 0, "comm(2,1,uid-of-process-0)", "stream0")])
    # a group of the other process's GPUs only: nothing to do here
    recorder.calls.clear()
    assert comms[1]._members_of((0,)) == []
  finally:
    sys.modules.pop("nccl.core", None)
