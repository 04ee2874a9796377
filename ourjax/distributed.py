"""Several processes (``jax.distributed``): ``initialize``, ``shutdown``, ``process_index``,
``process_count``.

One process per device (or per few devices) on one host, or on several (on GPUs, give each
process its GPU: ``CUDA_VISIBLE_DEVICES`` with one id, or ``local_device_ids=[k]`` with all
visible; ``tests/test_distributed.py`` runs both on two GPUs): process 0 runs the
*coordinator*, a small key-value service over TCP (the standard library's ``socketserver``),
at ``coordinator_address``; every process connects to it, registers its devices, and waits
for the others (a barrier).  Through it the processes exchange what they need:

* between GPUs, the NCCL unique id (``ncclGetUniqueId`` on process 0, read by the others before
  ``ncclCommInitRank``: ``backends/collectives.py``);
* between CPU devices, the collectives' data themselves (``ProcessCommunicator``: each process
  posts its lanes' blocks and reads the others', then reduces locally).

Once joined, the devices are numbered across processes as JAX numbers them (process 0's
first): ``ourjax.devices()`` lists every process's (``Device.process_index``), and this
process's ``Device`` objects take their global ids (``local_hardware_id`` keeps the local
number; ``shutdown`` gives the old ids back).  A mesh over them spans the processes:
``shard_map`` and sharded ``jit`` run there on *global* arrays, each process holding its own
devices' blocks (``sharding.py``, ``interpreters/spmd.py``: ``Lanes``).  ``pmap`` maps over
this process's devices (the leading axis is its local share) and its collectives run over the
devices of all processes, as in JAX: the axis size is the global device count.  Call
``initialize`` first, before any computation (as JAX asks).

Every wait has a deadline: connecting to the coordinator (``initialization_timeout``), the
barrier, and each collective (``OURJAX_COLLECTIVE_TIMEOUT`` seconds, 300 by default); a wait
that expires raises ``errors.CollectiveTimeoutError`` naming what was waited for.

Messages are a 4-byte length and a JSON object; binary values travel in base64.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import socketserver
import struct
import threading
import time

from ourjax import errors

__all__ = ["initialize", "shutdown", "is_initialized", "process_index", "process_count"]


def collective_timeout() -> float:
  """Seconds a collective waits for the other devices or processes
  (``OURJAX_COLLECTIVE_TIMEOUT``, 300 by default)."""
  v = os.environ.get("OURJAX_COLLECTIVE_TIMEOUT")
  if not v:
    return 300.0
  try:
    t = float(v)
  except ValueError:
    raise ValueError(f"OURJAX_COLLECTIVE_TIMEOUT must be a number of seconds, got {v!r}") \
        from None
  if t <= 0:
    raise ValueError(f"OURJAX_COLLECTIVE_TIMEOUT must be positive, got {v!r}")
  return t


# ------------------------------------------------------------------------------------------------
# Wire format


def _send(sock, obj) -> None:
  data = json.dumps(obj).encode()
  sock.sendall(struct.pack("!I", len(data)) + data)


def _recv_exact(sock, n: int) -> bytes:
  buf = bytearray()
  while len(buf) < n:
    chunk = sock.recv(n - len(buf))
    if not chunk:
      raise ConnectionError("the connection was closed")
    buf += chunk
  return bytes(buf)


def _recv(sock):
  (n,) = struct.unpack("!I", _recv_exact(sock, 4))
  return json.loads(_recv_exact(sock, n))


# ------------------------------------------------------------------------------------------------
# The coordinator (process 0)


class _Store:
  """The key-value store: ``set(key, value, reads)`` (the value is dropped after ``reads``
  gets; 0: kept), ``get(key, timeout)`` waits until the key is set."""

  def __init__(self):
    self.values: dict = {}
    self.reads: dict = {}
    self.cond = threading.Condition()

  def set(self, key, value, reads):
    with self.cond:
      self.values[key] = value
      self.reads[key] = reads
      self.cond.notify_all()

  def get(self, key, timeout):
    with self.cond:
      if not self.cond.wait_for(lambda: key in self.values, timeout):
        return None
      value = self.values[key]
      left = self.reads[key]
      if left:
        if left == 1:
          del self.values[key], self.reads[key]
        else:
          self.reads[key] = left - 1
      return value


class _Handler(socketserver.BaseRequestHandler):
  def handle(self):
    store = self.server.store
    sock = self.request
    while True:
      try:
        msg = _recv(sock)
      except (ConnectionError, OSError, struct.error, ValueError):
        return
      op = msg.get("op")
      if op == "set":
        store.set(msg["key"], msg["value"], int(msg.get("reads", 0)))
        _send(sock, {"ok": True})
      elif op == "get":
        v = store.get(msg["key"], float(msg["timeout"]))
        _send(sock, {"ok": v is not None, "value": v})
      else:
        _send(sock, {"ok": False, "error": f"unknown operation {op!r}"})


class _Server(socketserver.ThreadingTCPServer):
  daemon_threads = True
  allow_reuse_address = True

  def __init__(self, address):
    self.store = _Store()
    super().__init__(address, _Handler)


# ------------------------------------------------------------------------------------------------
# A process's connection


class _Client:
  """One connection to the coordinator, shared by this process's threads (one request at a
  time)."""

  def __init__(self, address, deadline, who):
    host, port = address
    last = None
    while True:
      try:
        self.sock = socket.create_connection((host, port), timeout=max(0.1, min(
            5.0, deadline - time.monotonic())))
        break
      except OSError as e:
        last = e
        if time.monotonic() >= deadline:
          raise RuntimeError(
              f"ourjax.distributed.initialize: {who} cannot reach the coordinator at "
              f"{host}:{port} ({type(last).__name__}: {last}); is process 0 running, and is "
              "the address right?") from None
        time.sleep(0.05)
    self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    self.lock = threading.Lock()
    self.address = f"{host}:{port}"

  def _call(self, msg, wait):
    with self.lock:
      self.sock.settimeout(wait + 30.0)
      try:
        _send(self.sock, msg)
        return _recv(self.sock)
      except (OSError, ConnectionError) as e:
        raise RuntimeError(f"ourjax.distributed: lost the connection to the coordinator at "
                           f"{self.address} ({type(e).__name__}: {e})") from None

  def set(self, key: str, value: bytes, reads: int = 0) -> None:
    self._call({"op": "set", "key": key, "value": base64.b64encode(value).decode(),
                "reads": reads}, 0.0)

  def get(self, key: str, timeout: float, what: str) -> bytes:
    r = self._call({"op": "get", "key": key, "timeout": timeout}, timeout)
    if not r.get("ok"):
      raise errors.CollectiveTimeoutError(
          f"{what}: nothing arrived within {timeout:g} s (OURJAX_COLLECTIVE_TIMEOUT); a "
          "process did not take part, or is stuck or gone")
    return base64.b64decode(r["value"])

  def close(self):
    try:
      self.sock.close()
    except OSError:
      pass


class _State:
  def __init__(self, client, server, process_id, num_processes, local_device_ids):
    self.client, self.server = client, server
    self.process_id, self.num_processes = process_id, num_processes
    self.local_device_ids = local_device_ids
    self.local_devices = None       # this process's devices, then every process's
    self.global_devices = None      # (``_number_devices``)
    self.seq = 0
    self.lock = threading.Lock()

  def next_key(self, kind: str) -> str:
    with self.lock:
      self.seq += 1
      return f"{kind}/{self.seq}"


_state: _State | None = None


def _parse_address(addr: str):
  host, sep, port = addr.rpartition(":")
  if not sep or not port.isdigit():
    raise ValueError(f"ourjax.distributed.initialize: coordinator_address must be "
                     f"'host:port', got {addr!r}")
  return host.strip("[]") or "127.0.0.1", int(port)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids=None, *,
               initialization_timeout: float = 300, coordinator_bind_address=None, **_):
  """Join this process to a computation over several processes: process 0 starts the
  coordinator at ``coordinator_address`` ('host:port'); all connect to it and wait for each
  other (up to ``initialization_timeout`` seconds).  Unset arguments come from
  ``OURJAX_COORDINATOR_ADDRESS``, ``OURJAX_NUM_PROCESSES`` and ``OURJAX_PROCESS_ID``.
  ``local_device_ids`` picks this process's devices (of the CPU or GPU ids it sees)."""
  global _state
  if _state is not None:
    raise RuntimeError("distributed.initialize should only be called once.")
  coordinator_address = coordinator_address or os.environ.get("OURJAX_COORDINATOR_ADDRESS")
  if num_processes is None and os.environ.get("OURJAX_NUM_PROCESSES"):
    num_processes = int(os.environ["OURJAX_NUM_PROCESSES"])
  if process_id is None and os.environ.get("OURJAX_PROCESS_ID"):
    process_id = int(os.environ["OURJAX_PROCESS_ID"])
  if coordinator_address is None or num_processes is None or process_id is None:
    raise ValueError("ourjax.distributed.initialize needs coordinator_address, num_processes "
                     "and process_id (or OURJAX_COORDINATOR_ADDRESS, OURJAX_NUM_PROCESSES, "
                     "OURJAX_PROCESS_ID); ourjax does not detect a cluster")
  num_processes, process_id = int(num_processes), int(process_id)
  if num_processes < 1 or not 0 <= process_id < num_processes:
    raise ValueError(f"ourjax.distributed.initialize: process_id {process_id} is not in "
                     f"[0, num_processes={num_processes})")
  host, port = _parse_address(coordinator_address)
  if isinstance(local_device_ids, int):
    local_device_ids = [local_device_ids]
  deadline = time.monotonic() + float(initialization_timeout)
  server = None
  if process_id == 0:
    bind = _parse_address(coordinator_bind_address) if coordinator_bind_address else (host, port)
    try:
      server = _Server(bind)
    except OSError as e:
      raise RuntimeError(f"ourjax.distributed.initialize: process 0 cannot start the "
                         f"coordinator at {bind[0]}:{bind[1]} ({e})") from None
    threading.Thread(target=server.serve_forever, name="ourjax-coordinator",
                     daemon=True).start()
  who = f"process {process_id} of {num_processes}"
  try:
    client = _Client((host, port), deadline, who)
    from ourjax import backends
    state = _State(client, server, process_id, num_processes,
                   list(local_device_ids) if local_device_ids is not None else None)
    local = _local_devices(state, backends)
    client.set(f"init/{process_id}", json.dumps({
        "devices": len(local), "platform": local[0].platform if local else "cpu",
        "kinds": [d.device_kind for d in local]}).encode())
    counts = []
    for q in range(num_processes):
      left = max(0.0, deadline - time.monotonic())
      try:
        counts.append(json.loads(client.get(f"init/{q}", left, "")))
      except errors.CollectiveTimeoutError:
        raise errors.CollectiveTimeoutError(
            f"ourjax.distributed.initialize ({who}): process {q} did not connect to the "
            f"coordinator at {host}:{port} within {initialization_timeout:g} s") from None
    state.device_counts = [c["devices"] for c in counts]
    _number_devices(state, local, counts, backends)
  except BaseException:
    if server is not None:
      server.shutdown()
      server.server_close()
    raise
  _state = state


def _number_devices(state, local, infos, backends):
  """Global device ids, as JAX numbers them: process 0's devices first, then process 1's,
  ...; this process's ``Device`` objects take theirs (``local_hardware_id`` keeps the local
  number, the CUDA ordinal), and the other processes' devices get ``Device`` objects of their
  own, which this process cannot address.  ``state.global_devices`` lists them all."""
  offset = sum(c["devices"] for c in infos[:state.process_id])
  state.local_devices = list(local)
  everyone = []
  for q, info in enumerate(infos):
    if q == state.process_id:
      for k, d in enumerate(local):
        d.id, d.process_index = offset + k, q
      everyone.extend(local)
    else:
      start = sum(c["devices"] for c in infos[:q])
      kinds = info.get("kinds") or [None] * info["devices"]
      everyone.extend(backends.Device(info.get("platform", "cpu"), start + k, kinds[k],
                                      process_index=q, local_hardware_id=k)
                      for k in range(info["devices"]))
  state.global_devices = everyone


def _restore_device_numbers(state):
  for d in getattr(state, "local_devices", None) or ():
    d.id, d.process_index = d.local_hardware_id, 0


def _local_devices(state, backends):
  if getattr(state, "local_devices", None) is not None:
    return list(state.local_devices)
  devs = backends.devices()
  if state.local_device_ids is None:
    return devs
  by_id = {d.local_hardware_id: d for d in devs}
  missing = [i for i in state.local_device_ids if i not in by_id]
  if missing:
    raise ValueError(f"ourjax.distributed.initialize: local_device_ids {missing} are not "
                     f"among this process's devices {sorted(by_id)}")
  return [by_id[i] for i in state.local_device_ids]


def shutdown(timeout: float = 30.0):
  """Leave the computation: wait (up to ``timeout`` seconds) until every process has called
  shutdown, then close the connection (process 0 stops the coordinator)."""
  global _state
  state = _state
  if state is None:
    return
  _state = None
  try:
    state.client.set(f"shutdown/{state.process_id}", b"1")
    if state.server is not None:
      deadline = time.monotonic() + timeout
      for q in range(state.num_processes):
        try:
          state.client.get(f"shutdown/{q}", max(0.0, deadline - time.monotonic()), "")
        except errors.CollectiveTimeoutError:
          break
  finally:
    _restore_device_numbers(state)
    state.client.close()
    if state.server is not None:
      state.server.shutdown()
      state.server.server_close()


def is_initialized() -> bool:
  return _state is not None


def process_index() -> int:
  return _state.process_id if _state is not None else 0


def process_count() -> int:
  return _state.num_processes if _state is not None else 1


def state() -> _State | None:
  """The connection of this process (None: a single process)."""
  return _state
