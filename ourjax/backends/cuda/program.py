"""Launch programs of the CUDA backend: what a call enqueues, and how it is replayed.

A compiled executable's *program* is a list of ops over the *slot table* (the addresses of the
call's parameters, outputs, constants and temporaries' arena; a buffer is a (slot, offset)
*spec*):

    ("k", kernel index, slots, offsets)                  a kernel launch
    ("copy", dst spec, src spec, bytes)                  a device-to-device copy
    ("repeat", n, body, odd body | None, fix-up copies)  a loop of known trip count
    ("while", cond, pred spec, body, name, odd cond | None, odd body | None, fix-up copies)
    ("cond", selector spec, dtype, [branch programs], name)

(``while`` and ``cond`` are host-driven when launched kernel by kernel, conditional graph
nodes in a replay: ``conditional.py``.)

A double-buffered loop (``planning._double_buffer``) alternates its body with its *odd* body,
the same iteration with each state buffer and its next buffer exchanged (``_renamed``), and
runs the fix-up copies after an odd number of iterations.  ``_ParamBlock`` packs every launch's
parameters so that one gather computes them per call; ``_GraphReplay`` replays a program of
launches and copies as a CUDA graph.
"""
from __future__ import annotations

import numpy as np

from ourjax.backends.cuda import conditional
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


def _iterations(op):
  """The programs a ``repeat`` op runs, in order: its body once per iteration (alternating with
  its double-buffered odd body when it has one), then its fix-up copies when due."""
  _, n, body, odd, fixup = op
  for i in range(n):
    yield odd if (i & 1 and odd is not None) else body
  if odd is not None and n & 1:
    yield fixup


def _count_flat(program) -> tuple:
  """(nodes, what cannot be a graph node) of ``program`` laid out as a graph, without laying it
  out: a ``while`` or ``cond`` op counts as the conditional nodes that stand for it (with their
  setter kernels and bodies); the second item names the control values of other dtypes."""
  nodes, host = 0, set()
  for op in program:
    kind = op[0]
    if kind == "repeat":
      n, h = _count_flat(op[2])
      nodes += op[1] * n + (len(op[4]) if op[3] is not None and op[1] & 1 else 0)
      host |= h
    elif kind == "while":
      for prog in _loop_programs(op):
        n, h = _count_flat(prog)
        nodes += n
        host |= h
      nodes += _count_flat(op[1])[0] + 6         # (cond twice; setters, conditional nodes)
    elif kind == "cond":
      for prog in op[3]:
        n, h = _count_flat(prog)
        nodes += n + 1
        host |= h
      nodes += 2
      if np.dtype(op[2]) not in conditional.SWITCH_KINDS:
        host.add(f"a cond on a {np.dtype(op[2])} index")
    else:
      nodes += 1
  return nodes, host


def _walk(program):
  """Every launch and copy of ``program``, inside loops and conditionals too (once each)."""
  for op in program:
    if op[0] in ("k", "copy"):
      yield op
    else:
      for prog in (_loop_programs(op) if op[0] != "cond" else op[3]):
        yield from _walk(prog)


def graph_unsuitable(program, conditionals: str | None = "") -> str | None:
  """Why an executable's ``program`` is not replayed as a CUDA graph, or None when it is: it
  must be kernel launches, copies, loops (those of known trip count laid out iteration by
  iteration) and, where the device runs conditional nodes (``conditionals`` is None; else why
  not), ``while`` and ``cond`` ops, in at most ``GRAPH_MAX_NODES`` nodes, with at least
  ``GRAPH_MIN_LAUNCHES`` kernels.  ``OURJAX_CUDA_GRAPH_CONDITIONALS=0`` leaves ``while`` and
  ``cond`` to the host."""
  nodes, host = _count_flat(program)
  kind = _control_flow(program)
  if kind is not None:
    if conditionals is not None:
      return f"host-driven control flow ({kind}{'; ' + conditionals if conditionals else ''})"
    if not env_switch("OURJAX_CUDA_GRAPH_CONDITIONALS"):
      return "host-driven control flow (OURJAX_CUDA_GRAPH_CONDITIONALS=0)"
  if host:
    return f"host-driven control flow ({sorted(host)[0]})"
  if nodes > GRAPH_MAX_NODES:
    return f"{nodes} nodes (loops laid out), more than GRAPH_MAX_NODES={GRAPH_MAX_NODES}"
  flat = list(_walk(program))
  big = [op[3] for op in flat if op[0] == "copy" and op[3] > GRAPH_MAX_COPY_BYTES]
  if big:
    return f"a copy of {big[0]} bytes, more than GRAPH_MAX_COPY_BYTES"
  n = sum(1 for op in flat if op[0] == "k")
  if n < GRAPH_MIN_LAUNCHES:
    return f"{n} kernel launch(es), fewer than GRAPH_MIN_LAUNCHES={GRAPH_MIN_LAUNCHES}"
  return None


def _control_flow(program) -> str | None:
  """"while" or "cond" when ``program`` (loops included) has such an op, else None."""
  for op in program:
    if op[0] in ("while", "cond"):
      return op[0]
    if op[0] == "repeat":
      kind = _control_flow(op[2])
      if kind is not None:
        return kind
  return None


def _addr(slots, spec) -> int:
  slot, off = spec
  return int(slots[slot]) + off


class _GraphReplay:
  """One executable's launch program as a CUDA graph (``driver.Graph``: a chain of kernel and
  copy nodes, with ``while`` and ``cond`` ops as conditional nodes: ``_while``, ``_cond``),
  built on the first call from that call's buffer addresses and replayed on every call after.

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
    self._dev, self._module, self._ops = dev, module, ops
    self._users = [set() for _ in range(len(slots))]
    self._copies = {}                # node -> (dst spec, src spec)
    self._set_fns = None             # (set_while, set_switch) once a conditional needs them
    # a graph with conditional nodes is instantiated once (the driver refuses a second
    # instance), so each of its instances is a graph of its own, laid out the same way
    self._one_instance = _control_flow(ops) is not None
    self.graph, self._setters = self._build(slots, params)
    self._fresh = True                 # self.graph not yet instantiated
    self.slot_users = [tuple(sorted(u)) for u in self._users]
    self._built = slots                # the table the graph's own nodes hold
    # [GraphExec, slot table, key, {node: conditional.SetterParams}], least recently used first
    self._lru: list = []
    self._by_key: dict = {}
    self.updates = 0                   # nodes updated so far (for tests and profiling)

  def _build(self, slots, params):
    """(a graph of the program with ``slots``'s addresses (``params`` filled from them), its
    setter kernels' parameters by node)."""
    graph = self._dev.new_graph(keep=self._module)
    self._laying = {}
    self._lay_out(graph, self._ops, slots, params)
    return graph, self._laying

  def _lay_out(self, graph, ops, slots, params) -> None:
    """Append ``ops`` to ``graph``: launches and copies as nodes, loops of known trip count
    iteration by iteration, ``while`` and ``cond`` ops as conditional nodes (``_while``,
    ``_cond``)."""
    users = self._users
    for op in ops:
      kind = op[0]
      if kind == "k":
        _, f, grid, block, shared, start, _fi, idx = op
        n = graph.add_kernel(f, grid, block, shared, 0 if start is None else params.base + start)
        for s in idx:
          users[s].add(n)
      elif kind == "copy":
        _, dst, src, nbytes = op
        n = graph.add_copy(_addr(slots, dst), _addr(slots, src), nbytes)
        self._copies[n] = (dst, src)
        users[dst[0]].add(n)
        users[src[0]].add(n)
      elif kind == "repeat":
        for prog in _iterations(op):
          self._lay_out(graph, prog, slots, params)
      elif kind == "while":
        self._while(graph, op, slots, params)
      else:
        self._cond(graph, op, slots, params)

  def _body(self, graph, body, progs, slots, params) -> None:
    """Fill the conditional body graph ``body`` with ``progs`` in order (an empty node when
    they have no launch or copy: a body graph may not be empty)."""
    with graph.body(body):
      before = len(graph.nodes)
      for prog in progs:
        self._lay_out(graph, prog, slots, params)
      if len(graph.nodes) == before:
        graph.add_empty()

  def _setter(self, graph, fn, spec, consts, slots) -> None:
    sp = conditional.SetterParams(spec, consts)
    sp.point(slots)
    # (a plain edge: the setter does not wait for its predecessor's grid itself)
    n = graph.add_kernel(fn, (1, 1, 1), (1, 1, 1), 0, sp.address, programmatic=False)
    self._laying[n] = sp
    self._users[spec[0]].add(n)

  def _while(self, graph, op, slots, params) -> None:
    """``cond; set; WHILE { body; cond; set }`` (``conditional``'s layout): the predicate
    never leaves the device.  A double-buffered loop runs its odd iteration under an IF node
    inside the body and its fix-up copies under an IF node on the iteration count's parity."""
    _, cond, pred, body, _name, odd_cond, odd, fixup = op
    if self._set_fns is None:
      self._set_fns = conditional.setters(graph.device)
    set_while = self._set_fns[0]
    loop = graph.conditional_handle()
    two = odd is not None
    then = graph.conditional_handle() if two else 0
    parity = graph.conditional_handle() if two else 0

    def setter(sets_then: bool, parity_value) -> None:
      mask = (1 if sets_then else 0) | (0 if parity_value is None else 2)
      self._setter(graph, set_while, pred, [loop, then, parity, mask, parity_value or 0], slots)

    self._lay_out(graph, cond, slots, params)
    setter(False, 0 if two else None)
    (b,) = graph.add_conditional("while", loop)
    with graph.body(b):
      self._lay_out(graph, body, slots, params)
      if not two:
        self._lay_out(graph, cond, slots, params)
        setter(False, None)
      else:
        self._lay_out(graph, odd_cond, slots, params)
        setter(True, 1)
        (t,) = graph.add_conditional("if", then)
        with graph.body(t):
          self._lay_out(graph, odd, slots, params)
          self._lay_out(graph, cond, slots, params)
          setter(False, 0)
    if two:
      (f,) = graph.add_conditional("if", parity)
      self._body(graph, f, [fixup], slots, params)

  def _cond(self, graph, op, slots, params) -> None:
    """``set; SWITCH {branches}``: the branch index never leaves the device."""
    _, sel, dt, branches, _name = op
    if self._set_fns is None:
      self._set_fns = conditional.setters(graph.device)
    h = graph.conditional_handle()
    self._setter(graph, self._set_fns[1], sel,
                 [h, conditional.SWITCH_KINDS[np.dtype(dt)], len(branches)], slots)
    for b, prog in zip(graph.add_conditional("switch", h, len(branches)), branches):
      self._body(graph, b, [prog], slots, params)

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
      if self._fresh or not self._one_instance:
        inst = [self.graph.instantiate(), self._built, None, self._setters]
        self._fresh = False
      else:
        params.fill(slots)
        graph, setters = self._build(slots, params)
        inst = [graph.instantiate(), slots, None, setters]
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
        if c is not None:
          exe.set_copy(n, _addr(slots, c[0]), _addr(slots, c[1]))
          continue
        sp = inst[3].get(n)
        if sp is not None:
          sp.point(slots)
        exe.set_kernel(n)
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
