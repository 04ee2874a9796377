"""Launch programs of the CUDA backend: what a call enqueues, and how it is replayed.

A compiled executable's *program* is a list of ops over the *slot table* (the addresses of the
call's parameters, outputs, constants and temporaries' arena; a buffer is a (slot, offset)
*spec*):

    ("k", kernel index, slots, offsets)                  a kernel launch
    ("copy", dst spec, src spec, bytes)                  a device-to-device copy
    ("repeat", n, body, odd body | None, fix-up copies)  a loop of known trip count
    ("while", cond, pred spec, body, name, odd cond | None, odd body | None, fix-up copies)
    ("cond", selector spec, dtype, [branch programs], name)

A double-buffered loop (``planning._double_buffer``) alternates its body with its *odd* body,
the same iteration with each state buffer and its next buffer exchanged (``_renamed``), and
runs the fix-up copies after an odd number of iterations.  ``_ParamBlock`` packs every launch's
parameters so that one gather computes them per call; ``_GraphReplay`` replays a program of
launches and copies as a CUDA graph.
"""
from __future__ import annotations

import numpy as np

from ourjax.config import env_switch

# Kernel parameters: every launch of a program reads its 64-bit parameters (buffer addresses:
# a slot's address plus an offset) from one packed block, refilled by one gather per call.

class _ParamBlock:
  """The parameter values of every kernel launch in a program, packed in one array, and the
  array of pointers to them that ``cuLaunchKernel`` and graph kernel nodes take (launch ``i``'s
  pointers start ``start[i]`` bytes into it).  ``fill(slots)`` computes every value of a call
  at once (``slots[idx] + offset``)."""

  def __init__(self, program):
    idx, offs = [], []
    self.start = {}                  # id(launch op) -> byte offset of its pointers, None if none
    for op in _launch_ops(program):
      n = len(op[2])
      self.start[id(op)] = 8 * len(idx) if n else None
      idx.extend(int(i) for i in op[2])
      offs.extend(int(o) for o in op[3])
    self.idx = np.array(idx, np.int64)
    self.offs = np.array(offs, np.uint64)
    self.vals, self._ptrs = self.new()
    self.base = int(self._ptrs.ctypes.data) if len(idx) else 0

  def new(self):
    """A fresh (values, pointers) pair laid out like this block's."""
    vals = np.zeros(len(self.idx), np.uint64)
    ptrs = vals.ctypes.data + 8 * np.arange(len(vals), dtype=np.uint64)
    return vals, ptrs

  def fill(self, slots, vals=None) -> None:
    np.add(slots[self.idx], self.offs, out=self.vals if vals is None else vals)


def _launch_ops(program):
  for op in program:
    if op[0] == "k":
      yield op
    elif op[0] in ("while", "repeat"):
      for prog in _loop_programs(op):
        yield from _launch_ops(prog)
    elif op[0] == "cond":
      for br in op[3]:
        yield from _launch_ops(br)


def _loop_programs(op):
  """The programs inside a ``repeat`` or ``while`` op: its body (and condition), their
  double-buffered odd versions where there are, and the fix-up copies."""
  if op[0] == "repeat":
    return [p for p in (op[2], op[3], op[4]) if p is not None]
  return [p for p in (op[1], op[3], op[5], op[6], op[7]) if p is not None]


def _resolve(program, funcs, starts):
  """``program`` with each kernel launch resolved to what launching it needs:
  ("k", Function, grid, block, shared bytes, parameter offset, kernel index, slots read).
  A kernel whose grid is empty (its arrays have no elements) is left out."""
  out = []
  for op in program:
    kind = op[0]
    if kind == "k":
      _, fi, idx, _offs = op
      f, grid, block, shared = funcs[fi]
      if 0 in grid:
        continue
      out.append(("k", f, grid, block, shared, starts[id(op)], fi, tuple(int(i) for i in idx)))
    elif kind == "copy":
      out.append(op)
    elif kind == "while":
      out.append(("while", _resolve(op[1], funcs, starts), op[2],
                  _resolve(op[3], funcs, starts), op[4],
                  None if op[5] is None else _resolve(op[5], funcs, starts),
                  None if op[6] is None else _resolve(op[6], funcs, starts), op[7]))
    elif kind == "repeat":
      out.append(("repeat", op[1], _resolve(op[2], funcs, starts),
                  None if op[3] is None else _resolve(op[3], funcs, starts), op[4]))
    elif kind == "cond":
      out.append(("cond", op[1], op[2], [_resolve(b, funcs, starts) for b in op[3]], op[4]))
    else:   # pragma: no cover
      raise AssertionError(kind)
  return out


# CUDA graphs: an executable whose program is a fixed sequence of launches is replayed as one
# graph launch instead of one cuLaunchKernel per kernel.

GRAPH_MIN_LAUNCHES = 2
"""The fewest kernel launches for which an executable is replayed as a CUDA graph.  Launching a
graph costs the host about what one ``cuLaunchKernel`` does, so a single kernel gains nothing
(and would hold a graph's device memory); each kernel beyond the first saves a launch."""

GRAPH_AFTER_CALLS = 1
"""Calls an executable makes kernel by kernel before it builds its graph: building and
instantiating a graph costs far more than launching its kernels once, so an executable that is
called only once never builds one."""

GRAPH_INSTANCES = 2
"""Executable graphs kept per executable, each holding the buffer addresses of a recent call.
A loop ``y = f(x)`` gets its outputs in two alternating blocks (the previous result is alive
while the next one is allocated), so two instances replay such a loop without updating a node."""


KEEP_GRAPH_ADDRESSES = True
"""Whether a call's outputs and arena are allocated at the addresses of a kept graph instance
(``_GraphReplay.preferred``) and other requests keep off those blocks (``memory``'s wanted
addresses).  Off, allocation ignores graphs (tests that compare replays with plain launches
address for address turn it off)."""


def graphs_enabled() -> bool:
  """False when ``OURJAX_CUDA_GRAPHS`` is 0/false/no/off (read when an executable is loaded)."""
  return env_switch("OURJAX_CUDA_GRAPHS")


GRAPH_MAX_COPY_BYTES = (1 << 31) - 1
"""The largest copy a graph's copy node takes: the node describes it as one row of a 3-D copy,
whose pitch the driver limits to 2^31 - 1 bytes (a copy that large runs for milliseconds,
so launching it directly costs nothing that matters)."""


GRAPH_MAX_NODES = 20000
"""The most nodes a graph gets.  A loop of known trip count (``repeat``) is laid out in the
graph once per iteration, so a 1000-step scan of a few kernels replays as one launch; building
and instantiating a graph costs the host about a microsecond per node, once per executable."""


def _flat_program(program):
  """The launches and copies of ``program`` in order, each loop of known trip count laid out
  once per iteration; yields ("while" | "cond", ...) ops as they are (the host drives them)."""
  for op in program:
    if op[0] == "repeat":
      for prog in _iterations(op):
        yield from _flat_program(prog)
    else:
      yield op


def _iterations(op):
  """The programs a ``repeat`` op runs, in order: its body once per iteration (alternating with
  its double-buffered odd body when it has one), then its fix-up copies when due."""
  _, n, body, odd, fixup = op
  for i in range(n):
    yield odd if (i & 1 and odd is not None) else body
  if odd is not None and n & 1:
    yield fixup


def _count_flat(program) -> tuple:
  """(nodes, host-driven kinds) of ``_flat_program(program)``, without laying it out."""
  nodes, host = 0, set()
  for op in program:
    if op[0] == "repeat":
      n, h = _count_flat(op[2])
      nodes += op[1] * n + (len(op[4]) if op[3] is not None and op[1] & 1 else 0)
      host |= h
    elif op[0] in ("while", "cond"):
      host.add(op[0])
    else:
      nodes += 1
  return nodes, host


def graph_unsuitable(program) -> str | None:
  """Why an executable's ``program`` is not replayed as a CUDA graph, or None when it is: it
  must be a fixed sequence of kernel launches and copies (no ``while``/``cond``, which the host
  drives by reading values back; loops of known trip count are laid out iteration by
  iteration) of at most ``GRAPH_MAX_NODES`` nodes, with at least ``GRAPH_MIN_LAUNCHES``
  kernels."""
  nodes, host = _count_flat(program)
  for kind in ("while", "cond"):
    if kind in host:
      return f"host-driven control flow ({kind})"
  if nodes > GRAPH_MAX_NODES:
    return f"{nodes} nodes (loops laid out), more than GRAPH_MAX_NODES={GRAPH_MAX_NODES}"
  flat = list(_flat_program(program))
  big = [op[3] for op in flat if op[0] == "copy" and op[3] > GRAPH_MAX_COPY_BYTES]
  if big:
    return f"a copy of {big[0]} bytes, more than GRAPH_MAX_COPY_BYTES"
  n = sum(1 for op in flat if op[0] == "k")
  if n < GRAPH_MIN_LAUNCHES:
    return f"{n} kernel launch(es), fewer than GRAPH_MIN_LAUNCHES={GRAPH_MIN_LAUNCHES}"
  return None


def _addr(slots, spec) -> int:
  slot, off = spec
  return int(slots[slot]) + off


class _GraphReplay:
  """One executable's launch program as a CUDA graph (``driver.Graph``: a chain of kernel and
  copy nodes), built on the first call from that call's buffer addresses and replayed on every
  call after.

  The addresses a call uses, its *slot table* (parameters, outputs, constants, the arena), may
  differ from call to call.  Up to ``GRAPH_INSTANCES`` executable instances are kept, each with
  the slot table its nodes were last given: a call whose table equals an instance's launches
  that instance as it is; otherwise the least recently used instance is updated first, only in
  the nodes that read a slot whose address changed (``cuGraphExecKernelNodeSetParams`` /
  ``cuGraphExecMemcpyNodeSetParams``).  A node's parameters are a function of the slot table
  alone, so equal tables mean equal launches.  ``preferred`` gives the call's allocations the
  addresses of the instance that matches its parameters, so that a loop whose buffers
  alternate between two sets updates nothing."""

  def __init__(self, dev, module, ops, params: _ParamBlock, slots, held=None):
    # held: where the call's own blocks (outputs, arena) are in a slot table; the addresses
    # there of every kept instance are marked wanted in the device's allocator
    self._allocator = dev.allocator if held is not None else None
    self._held = held
    graph = dev.new_graph(keep=module)
    users = [set() for _ in range(len(slots))]
    self._copies = {}                # node -> (dst spec, src spec)
    for op in _flat_program(ops):
      if op[0] == "k":
        _, f, grid, block, shared, start, _fi, idx = op
        n = graph.add_kernel(f, grid, block, shared, 0 if start is None else params.base + start)
        for s in idx:
          users[s].add(n)
      else:
        _, dst, src, nbytes = op
        n = graph.add_copy(_addr(slots, dst), _addr(slots, src), nbytes)
        self._copies[n] = (dst, src)
        users[dst[0]].add(n)
        users[src[0]].add(n)
    self.graph = graph
    self.slot_users = [tuple(sorted(u)) for u in users]
    self._built = slots                # the table the graph's own nodes hold
    self._lru: list = []               # [GraphExec, slot table, key], least recently used first
    self._by_key: dict = {}
    self.updates = 0                   # nodes updated so far (for tests and profiling)

  def preferred(self, slots, n: int):
    """The slot table to allocate the call's outputs and arena at (where those blocks are
    free): that of the least recently used kept instance whose ``n`` parameter addresses equal
    ``slots``'s (the least recently used: its outputs are the likeliest to have been let go
    of), else of the least recently used instance (the one a miss updates); None while none
    is kept."""
    lru = self._lru
    if not lru:
      return None
    head = slots[:n].tobytes()
    for inst in lru:
      if inst[1][:n].tobytes() == head:
        return inst[1]
    return lru[0][1]

  def replay(self, slots, params: _ParamBlock) -> None:
    key = slots.tobytes()
    inst = self._by_key.get(key)
    if inst is None:
      inst = self._retarget(slots, key, params)
    elif self._lru[-1] is not inst:
      self._lru.remove(inst)
      self._lru.append(inst)
    inst[0].launch()

  def _retarget(self, slots, key, params):
    """An instance whose nodes hold ``slots``: a new one while fewer than GRAPH_INSTANCES
    exist, else the least recently used, updated where its addresses differ."""
    if len(self._lru) < GRAPH_INSTANCES:
      inst = [self.graph.instantiate(), self._built, None]
    else:
      inst = self._lru.pop(0)
      del self._by_key[inst[2]]
      self._hold(inst[1], False)
    changed = np.flatnonzero(inst[1] != slots)
    if len(changed):
      params.fill(slots)
      nodes = sorted({n for s in changed.tolist() for n in self.slot_users[s]})
      exe = inst[0]
      for n in nodes:
        c = self._copies.get(n)
        if c is None:
          exe.set_kernel(n)
        else:
          exe.set_copy(n, _addr(slots, c[0]), _addr(slots, c[1]))
      self.updates += len(nodes)
    inst[1], inst[2] = slots, key
    self._hold(slots, True)
    self._lru.append(inst)
    self._by_key[key] = inst
    return inst

  def _hold(self, slots, on: bool) -> None:
    a = self._allocator
    if a is not None:
      ptrs = slots[self._held].tolist()
      a.want(ptrs) if on else a.unwant(ptrs)

  def __del__(self):
    try:
      for inst in self._lru:
        self._hold(inst[1], False)
    except Exception:   # pragma: no cover - never raise from a finaliser
      pass


def _renamed(program, swap):
  """``program`` with every buffer address spec in ``swap`` replaced by its partner (the same
  iteration run with each state buffer and its next buffer exchanged)."""
  out = []
  for op in program:
    kind = op[0]
    if kind == "k":
      pairs = [swap.get((int(i), int(o)), (int(i), int(o))) for i, o in zip(op[2], op[3])]
      out.append(("k", op[1], np.array([x[0] for x in pairs], np.int64),
                  np.array([x[1] for x in pairs], np.uint64)))
    elif kind == "copy":
      out.append(("copy", swap.get(op[1], op[1]), swap.get(op[2], op[2]), op[3]))
    elif kind == "repeat":
      out.append(("repeat", op[1], _renamed(op[2], swap),
                  None if op[3] is None else _renamed(op[3], swap), _renamed(op[4], swap)))
    elif kind == "while":
      out.append(("while", _renamed(op[1], swap), swap.get(op[2], op[2]),
                  _renamed(op[3], swap), op[4],
                  None if op[5] is None else _renamed(op[5], swap),
                  None if op[6] is None else _renamed(op[6], swap), _renamed(op[7], swap)))
    elif kind == "cond":
      out.append(("cond", swap.get(op[1], op[1]), op[2],
                  [_renamed(b, swap) for b in op[3]], op[4]))
    else:   # pragma: no cover
      raise AssertionError(kind)
  return out
