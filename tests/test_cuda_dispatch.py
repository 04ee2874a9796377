"""The CUDA backend's dispatch path without a GPU: which executables replay a CUDA graph, the
packing of kernel parameters, and graph replay against kernel-by-kernel launches, run on the
stand-in driver of ``cuda_fake_driver`` (which records every launch as it would execute)."""
import contextlib
import logging

import llvmlite.ir as ir
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.llvm import kernels as K
from ourjax.backends.cuda import program as cuda_program

cuda_fake_driver = pytest.importorskip("cuda_fake_driver")   # needs cuda.bindings (types only)


@pytest.fixture(autouse=True)
def _plain_addresses(monkeypatch):
  """Calls allocate as plain launching does, not at a kept graph's addresses, so that runs
  with and without graphs see the same addresses and are compared launch for launch (the test
  of kept addresses turns it back on)."""
  monkeypatch.setattr(cuda_program, "KEEP_GRAPH_ADDRESSES", False)


def _exe(fn, *args):
  return ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()


def _reductions(x):
  """Seven full reductions in sequence, each feeding the next: ~20 kernels."""
  for _ in range(7):
    x = x / (1.0 + jnp.sum(x * x))
  return x


def test_which_executables_replay_a_graph():
  x = np.ones((64, 300), np.float32)
  why = cuda_program.graph_unsuitable
  assert why(_exe(_reductions, x).program) is None
  assert why(_exe(lambda v: (v, v * 2 + jnp.sum(v)), x).program) is None     # with a copy
  assert "fewer than GRAPH_MIN_LAUNCHES" in why(_exe(lambda v: v * 2 + 1, x).program)
  # a loop of known trip count is laid out in the graph; one that tests data is host-driven
  loop = _exe(lambda v: ourjax.lax.fori_loop(0, 3, lambda i, w: w * 2 + jnp.sum(w), v), x)
  assert [op[0] for op in loop.program].count("repeat") == 1 and why(loop.program) is None
  loop = _exe(lambda v: ourjax.lax.while_loop(lambda w: jnp.sum(w) < 1e6,
                                              lambda w: w * 2 + jnp.sum(w), v), x)
  assert why(loop.program) == "host-driven control flow (while)"
  # ... unless the device runs conditional graph nodes (cuda/conditional.py)
  assert why(loop.program, None) is None
  assert "no SWITCH" in why(loop.program, "the driver (CUDA 12.2) has no SWITCH conditional nodes")
  big = _exe(lambda v: ourjax.lax.fori_loop(0, cuda_program.GRAPH_MAX_NODES,
                                            lambda i, w: w * 2 + jnp.sum(w), v), x)
  assert "more than GRAPH_MAX_NODES" in why(big.program)
  cond = _exe(lambda v: ourjax.lax.cond(jnp.sum(v) > 0, lambda w: w + jnp.sum(w),
                                        lambda w: w - jnp.max(w), v), x)
  assert "host-driven control flow" in why(cond.program)
  assert why(cond.program, None) is None
  big = _exe(lambda v: ourjax.lax.while_loop(
      lambda w: jnp.sum(w) < 1e6,
      lambda w: ourjax.lax.fori_loop(0, cuda_program.GRAPH_MAX_NODES, lambda i, u: u * 2, w), v), x)
  assert "more than GRAPH_MAX_NODES" in why(big.program, None)


def test_conditionals_env_switch(monkeypatch):
  x = np.ones((64, 300), np.float32)
  loop = _exe(lambda v: ourjax.lax.while_loop(lambda w: jnp.sum(w) < 1e6,
                                              lambda w: w * 2 + jnp.sum(w), v), x)
  monkeypatch.setenv("OURJAX_CUDA_GRAPH_CONDITIONALS", "0")
  assert "OURJAX_CUDA_GRAPH_CONDITIONALS=0" in cuda_program.graph_unsuitable(loop.program, None)


def test_graphs_env_switch(monkeypatch):
  monkeypatch.delenv("OURJAX_CUDA_GRAPHS", raising=False)
  assert cuda_program.graphs_enabled()
  for off in ("0", "false", "off"):
    monkeypatch.setenv("OURJAX_CUDA_GRAPHS", off)
    assert not cuda_program.graphs_enabled()
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  assert cuda_program.graphs_enabled()


def test_parameter_block_packs_every_launch():
  exe = _exe(lambda v: (v, _reductions(v)), np.ones((8, 30), np.float32))
  block = cuda_program._ParamBlock(exe.program)
  slots = np.arange(1, exe.nslots + 1, dtype=np.uint64) << np.uint64(32)
  block.fill(slots)
  ptrs = np.frombuffer(block._ptrs.tobytes(), np.uint64)
  launches = [op for op in exe.program if op[0] == "k"]
  assert len(launches) == len(block.start) > 1
  for op in launches:
    _, _, idx, offs = op
    start = block.start[id(op)]
    if not len(idx):
      assert start is None
      continue
    j = start // 8
    np.testing.assert_array_equal(block.vals[j:j + len(idx)], slots[idx] + offs)
    # the pointer array at the launch's offset points at exactly those values
    assert list(ptrs[j:j + len(idx)]) == [block.vals.ctypes.data + 8 * (j + i)
                                          for i in range(len(idx))]


def _scenario():
  """Several executables called many times with different argument buffers (device arrays,
  host arrays, results of earlier calls), interleaved, some results kept alive and some
  dropped; returns the executables."""
  rng = np.random.default_rng(0)
  f = ourjax.jit(lambda v: _reductions(v))     # a new function: a new executable
  g = ourjax.jit(lambda v: (v, v * 2 + jnp.sum(v)))             # a copy node
  h = ourjax.jit(lambda v, w: v * w + 1)                         # one kernel: no graph
  xs = [ourjax.device_put(rng.standard_normal((64, 300)).astype(np.float32)) for _ in range(3)]
  kept = []
  y = f(xs[0])
  for i in range(12):
    y = f(xs[i % 3] if i % 4 else y)
    a, b = g(y)
    if i % 3 == 0:
      kept.append((y, b))                       # outputs stay alive: other addresses next time
    y = h(b, xs[(i + 1) % 3])
    f(np.full((64, 300), i, np.float32))        # a host argument, uploaded for the call
  return [_called_executable(fn) for fn in (f, g)]


def _called_executable(jitted):
  """The CudaExecutable that calls of ``jitted`` (one signature) ran."""
  (entry,) = jitted._cache.values()
  return entry.executable.compiled


def _run_scenario(monkeypatch, graphs: bool, fail=()):
  """The scenario on a fresh stand-in driver: what it executed, the driver calls it made, and
  per graph-eligible executable its graph_reason, whether it ended with a graph, how many node
  updates it made, and its kernel count."""
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1" if graphs else "0")
  with cuda_fake_driver.installed() as fake:
    fake.fail = set(fail)
    exes = _scenario()
    run = {"executed": list(fake.executed), "calls": dict(fake.calls),
           "reasons": [e.graph_reason for e in exes],
           "graphs": [e._graph is not None for e in exes],
           "updates": [e._graph.updates if e._graph is not None else 0 for e in exes],
           "kernels": [len(e.kernels) for e in exes]}
    del exes
  return run


def test_graph_replay_launches_what_plain_launches_do(monkeypatch):
  plain = _run_scenario(monkeypatch, graphs=False)
  replay = _run_scenario(monkeypatch, graphs=True)
  assert plain["reasons"] == ["OURJAX_CUDA_GRAPHS=0"] * 2
  assert plain["calls"].get("cuGraphLaunch", 0) == 0
  assert replay["reasons"] == [None, None] and replay["graphs"] == [True, True]
  assert len(replay["executed"]) == len(plain["executed"]) > 300
  # same kernels with the same parameters in the same order
  assert replay["executed"] == plain["executed"]
  # f and g run as one graph launch per call from their second call on; h (one kernel) and
  # the first calls launch kernel by kernel
  calls = replay["calls"]
  n_f, n_g, n_h = 1 + 12 + 12, 12, 12
  k_f, k_g = replay["kernels"]
  assert calls["cuGraphLaunch"] == (n_f - 1) + (n_g - 1)
  assert calls["cuLaunchKernel"] == n_h + k_f + k_g
  assert calls["cuGraphInstantiate"] <= 2 * cuda_program.GRAPH_INSTANCES
  assert calls.get("cuGraphExecMemcpyNodeSetParams", 0) > 0   # g's copy followed its buffers
  assert 0 < sum(replay["updates"]) == (calls["cuGraphExecKernelNodeSetParams"]
                                        + calls["cuGraphExecMemcpyNodeSetParams"])


@pytest.mark.parametrize("pdl", [True, False])
def test_kernel_to_kernel_graph_edges_are_programmatic(monkeypatch, pdl):
  """Consecutive kernels of a graph are joined by programmatic edges (the second kernel is
  scheduled early and waits in its prologue); an edge from or to a copy stays a full one;
  OURJAX_CUDA_PDL=0 makes every edge a full one.  The launches are the same either way."""
  monkeypatch.setenv("OURJAX_CUDA_PDL", "1" if pdl else "0")
  run = _run_scenario(monkeypatch, graphs=True)
  assert run["executed"] == _run_scenario(monkeypatch, graphs=False)["executed"]
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  with cuda_fake_driver.installed():
    exes = _scenario()
    seen = {"programmatic": 0, "full": 0}
    for e in exes:
      g = e._graph.graph
      kinds = dict(zip(map(id, g.nodes), g.names))
      for n, name in zip(g.nodes, g.names):
        edges = getattr(n, "edge_types", [])
        if not n.deps:
          continue
        prev = kinds[id(n.deps[0])]
        if pdl and name != "copy" and prev != "copy":
          assert edges == [(1, 1)], (prev, name, edges)   # PROGRAMMATIC, port PROGRAMMATIC
          seen["programmatic"] += 1
        else:
          assert edges == [], (prev, name, edges)
          seen["full"] += 1
    assert seen["programmatic"] > 0 if pdl else seen["programmatic"] == 0
    assert seen["full"] > 0                       # g's copy keeps full edges
    del exes


def test_kernels_wait_for_their_grid_dependencies_first():
  """Every kernel for sm_90 starts with griddepcontrol.wait (before any memory access: a
  programmatic edge lets it start while its predecessor runs), and none for sm_80."""
  from ourjax.backends.cuda import codegen
  c = ourjax.jit(lambda a, b: (ourjax.numpy.sum(a * b, axis=1), a @ b.T + 1.0),
                 backend="cuda").lower(np.ones((64, 96), np.float32),
                                       np.ones((64, 96), np.float32)).compile()
  exe = c.runtime_executable()
  for arch, want in (("90", True), ("80", False)):
    for k in exe.kernels:
      if k.is_copy:
        continue
      m = codegen.new_module("t", arch)
      fn = k.emit_gpu(m)
      first = next(i for i in fn.entry_basic_block.instructions
                   if not isinstance(i, ir.AllocaInstr))
      has = "griddepcontrol.wait" in str(first)
      assert has == want, (arch, k.name, str(first))


@pytest.mark.parametrize("keep", [True, False])
def test_alternating_buffers_replay_without_updates(monkeypatch, keep):
  monkeypatch.setattr(cuda_program, "KEEP_GRAPH_ADDRESSES", keep)
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  with cuda_fake_driver.installed() as fake:
    f = ourjax.jit(lambda v: _reductions(v))     # a new function: a new executable
    x = ourjax.device_put(np.ones((64, 300), np.float32))
    y = f(x)
    for _ in range(3):
      y = f(x)
    exe = _called_executable(f)
    before = exe._graph.updates, fake.calls["cuGraphInstantiate"]
    for _ in range(10):
      y = f(x)                                  # outputs alternate between two blocks
    assert (exe._graph.updates, fake.calls["cuGraphInstantiate"]) == before
    assert fake.calls["cuGraphLaunch"] == 13                  # all calls but the first
    assert fake.calls["cuLaunchKernel"] == len(exe.kernels)
    del y, exe


@pytest.mark.parametrize("api", ["cuGraphCreate", "cuGraphAddMemcpyNode", "cuGraphInstantiate",
                                 "cuGraphExecKernelNodeSetParams", "cuGraphLaunch"])
def test_graph_api_failure_falls_back_to_plain_launches(monkeypatch, caplog, api):
  plain = _run_scenario(monkeypatch, graphs=False)
  with caplog.at_level(logging.WARNING, logger="ourjax"):
    got = _run_scenario(monkeypatch, graphs=True, fail=[api])
  assert got["executed"] == plain["executed"]    # nothing launched twice, nothing missing
  failed = [r for r in got["reasons"] if r]
  assert failed and all("CUDA graph API failed" in r and api in r for r in failed), failed
  assert any("one by one" in r.message for r in caplog.records)
  if api == "cuGraphAddMemcpyNode":            # only g has a copy: f keeps its graph
    assert got["graphs"] == [True, False]


def test_fast_caller_matches_the_call(monkeypatch):
  """``CudaExecutable.fast_caller`` (jit's dispatch fast path) launches what a call does, with
  hoisted constants uploaded once."""
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "0")
  with cuda_fake_driver.installed() as fake:
    c = np.linspace(0, 1, 300, dtype=np.float32)
    f = ourjax.jit(lambda v, w: _reductions(v * c) + w)
    x = ourjax.device_put(np.ones((64, 300), np.float32))
    w = np.full((64, 300), 2, np.float32)
    mexe = f.lower(x, w).compile()._executable
    exe = mexe.compiled
    hoisted = [ourjax.Array(h) for h in mexe.hoisted]
    exe(x, w, *hoisted)
    fake.executed.clear()
    exe(x, w, *hoisted)
    want = list(fake.executed)
    call = exe.fast_caller(mexe.kept_args, hoisted, ourjax.Array)
    fake.executed.clear()
    outs = call((x, w))
    assert [(o.shape, o.dtype) for o in outs] == [((64, 300), np.dtype(np.float32))]
    got = list(fake.executed)
    # same launches; only the addresses of the freshly uploaded host argument may differ
    assert [r[:5] for r in got] == [r[:5] for r in want]
    assert exe.fast_caller((0,), hoisted, ourjax.Array) is None     # arity mismatch
    del outs, call, exe, mexe, hoisted


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_loops_of_known_trip_count_read_nothing_back(monkeypatch, trips):
  """A fori_loop/scan runs its body ``trips`` times with no device-to-host read of a predicate;
  replayed as one graph from the second call on, it launches what kernel-by-kernel launching
  does (the body's kernels ``trips`` times in order)."""
  x = np.ones((64, 300), np.float32)
  runs = {}
  for graphs in (False, True):
    monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1" if graphs else "0")
    with cuda_fake_driver.installed() as fake:
      f = ourjax.jit(lambda v: ourjax.lax.scan(
          lambda c, _: (c * 2 + jnp.sum(c), jnp.max(c)), v, None, length=trips))
      for _ in range(3):
        f(x)
      exe = _called_executable(f)
      runs[graphs] = (list(fake.executed), dict(fake.calls), exe)
  plain, replay = runs[False], runs[True]
  assert plain[0] == replay[0]
  for _, calls, _ in (plain, replay):
    assert calls.get("cuMemcpyDtoHAsync", 0) == 0
  exe = replay[2]
  (rep,) = [op for op in exe.program if op[0] == "repeat"] or [None]
  if rep is not None:
    body = sum(1 for op in rep[2] if op[0] == "k")
    per_call = sum(1 for r in plain[0] if r[0] == "kernel") // 3
    assert rep[1] == trips and per_call >= trips * body
  if trips:
    assert replay[1].get("cuGraphLaunch", 0) == 2


def _dataflow(exe, while_trips=3, branch=0, graph=None):
  """What the entry's outputs hold after running ``exe.program`` symbolically: each buffer
  (by address spec) holds a token naming how its value was made (kernel, inputs' tokens);
  a host-driven while runs ``while_trips`` iterations, a cond its branch ``branch``.  Equal
  tokens: equal values.  ``graph``: run instead the nodes a ``_GraphReplay`` laid out
  (``(replay, root nodes)`` of ``_lay_out_recorded``), its setter kernels fed the same
  predicates and branch index.  Returns (output tokens, device copies run)."""
  mem = {}
  copied = [0]

  def get(spec):
    return mem.get(spec, ("uninitialised", spec))

  def kernel(op):
    merged = exe.kernels[op[1]]
    where = {id(b): (int(i), int(o)) for b, i, o in zip(merged.buffers, op[2], op[3])}
    group = merged.parts if type(merged).__name__ == "Horizontal" else [merged]
    for k in group:                      # (independent: any order will do)
      if getattr(k, "epilogues", None):    # a finish, then the kernels folded into it
        ins = tuple(get(where[id(b)]) for b in [k.partials] + K._leaf_bufs(k.leafmap))
        mem[where[id(k.out)]] = ("k", k.name, 0, ins)
        todo = k.epilogues
      else:
        todo = [k]
      for k in todo:
        specs = [where[id(b)] for b in k.buffers]
        writes = {id(w) for w in k.writes}
        reads = {id(r) for r in k.reads}
        ins = tuple(get(s) for b, s in zip(k.buffers, specs) if id(b) in reads)
        for pos, (b, s) in enumerate(zip(k.buffers, specs)):
          if id(b) in writes:
            mem[s] = ("k", k.name, pos, ins)

  def copy_(dst, src):
    mem[dst] = get(src)
    copied[0] += 1

  def run(prog):
    for op in prog:
      if op[0] == "k":
        kernel(op)
      elif op[0] == "copy":
        copy_(op[1], op[2])
      elif op[0] == "repeat":
        for prog in cuda_program._iterations(op):
          run(prog)
      elif op[0] == "while":
        _, cond, _pred, body, _name, odd_cond, odd, fixup = op
        for i in range(while_trips):
          swapped = i & 1 and odd is not None
          run(odd_cond if swapped else cond)
          run(odd if swapped else body)
        run(odd_cond if while_trips & 1 and odd is not None else cond)
        if while_trips & 1 and odd is not None:
          run(fixup)
      elif op[0] == "cond":
        run(op[3][branch])
      else:
        raise AssertionError(op[0])

  if graph is None:
    run(exe.program)
  else:
    replay, root, ops_at = graph
    handles, tested = {}, {}

    def nodes(ns):
      for nd in ns:
        if nd[0] == "k" and nd[1] == "set_while":
          vals = replay._laying[nd[2]].vals
          loop = int(vals[1])
          k = tested[loop] = tested.get(loop, -1) + 1     # the predicate's k-th test
          p = int(k < while_trips)
          handles[loop] = p
          if vals[4] & 1:
            handles[int(vals[2])] = p
          if vals[4] & 2:
            handles[int(vals[3])] = int(vals[5])
        elif nd[0] == "k" and nd[1] == "set_switch":
          vals = replay._laying[nd[2]].vals
          handles[int(vals[1])] = branch
        elif nd[0] == "k":
          kernel(ops_at[nd[2]])
        elif nd[0] == "copy":
          copy_(*replay._copies[nd[2]])
        elif nd[0] == "cond":
          _, kind, h, bodies = nd
          if kind == "while":
            tested[h] = tested.get(h, -1)          # (each run of the loop counts afresh)
            while handles[h]:
              nodes(bodies[0])
          elif kind == "if":
            if handles[h]:
              nodes(bodies[0])
          elif handles[h] < len(bodies):
            nodes(bodies[handles[h]])
    nodes(root)
  n = len(exe.param_specs)
  return [get((n + j, 0)) for j in range(len(exe.out_specs))], copied[0]


class _RecordedGraph:
  """What ``_GraphReplay`` lays out, recorded as a tree instead of built: ("k", function,
  node) and ("copy", node) and ("empty", node) entries, and ("cond", kind, handle, bodies)."""

  def __init__(self):
    self.root, self.nodes, self._handles = [], [], 0
    self._into = self.root
    self.device = None

  def _add(self, entry):
    self._into.append(entry)
    self.nodes.append(entry)
    return len(self.nodes) - 1

  def add_kernel(self, f, grid, block, shared, address, programmatic=True):
    return self._add(("k", f, len(self.nodes), address))

  def add_copy(self, dst, src, nbytes):
    return self._add(("copy", None, len(self.nodes)))

  def add_empty(self):
    return self._add(("empty",))

  def conditional_handle(self):
    self._handles += 1
    return self._handles

  def add_conditional(self, kind, handle, size=1):
    bodies = [[] for _ in range(size)]
    self._add(("cond", kind, handle, bodies))
    return bodies

  @contextlib.contextmanager
  def body(self, b):
    saved, self._into = self._into, b
    try:
      yield
    finally:
      self._into = saved


def _lay_out_recorded(exe, monkeypatch):
  """(replay, root nodes, {node index: program launch op}) of ``exe``'s program laid out by
  ``_GraphReplay._lay_out`` on a ``_RecordedGraph``, kernels standing for their launch ops."""
  from ourjax.backends.cuda import conditional
  monkeypatch.setattr(conditional, "setters", lambda dev: ("set_while", "set_switch"))
  params = cuda_program._ParamBlock(exe.program)
  launches = {params.start[id(op)]: op for op in cuda_program._launch_ops(exe.program)}
  funcs = [(i, (1, 1, 1), (1, 1, 1), 0) for i in range(len(exe.kernels))]
  ops = cuda_program._resolve(exe.program, funcs, params.start)
  replay = cuda_program._GraphReplay.__new__(cuda_program._GraphReplay)
  slots = np.arange(exe.nslots, dtype=np.uint64) << np.uint64(32)
  replay._users = [set() for _ in range(exe.nslots)]
  replay._copies, replay._set_fns, replay._laying = {}, None, {}
  g = _RecordedGraph()
  replay._lay_out(g, ops, slots, params)
  ops_at = {nd[2]: launches[nd[3] - params.base] for nd in g.nodes
            if nd[0] == "k" and nd[1] not in ("set_while", "set_switch")}
  return replay, g.root, ops_at


_CONTROL = {
    "while": lambda v: ourjax.lax.while_loop(lambda c: jnp.sum(c[1]) < 1e6,
                                             lambda c: (c[0] + jnp.sum(c[1]), c[1] * 2.0 + 1),
                                             (jnp.float32(0), v)),
    "while_in_fori": lambda v: ourjax.lax.fori_loop(0, 2, lambda i, w: ourjax.lax.while_loop(
        lambda u: jnp.max(u) < 1e6, lambda u: jnp.roll(u, 1) * 2 + i, w), v),
    "cond": lambda v: ourjax.lax.cond(jnp.sum(v) > 0, lambda w: w * 2 + jnp.sum(w),
                                      lambda w: jnp.roll(w, 1) - jnp.max(w), v),
    "switch": lambda v: ourjax.lax.switch(jnp.argmax(v[0]), [lambda w: w * 2,
                                                             lambda w: w - jnp.max(w),
                                                             lambda w: jnp.sin(w)], v),
}


@pytest.mark.parametrize("double_buffer", ["1", "0"])
@pytest.mark.parametrize("name", sorted(_CONTROL))
def test_conditional_graph_computes_what_the_host_loop_does(name, double_buffer, monkeypatch):
  """``while`` and ``cond`` laid out as conditional graph nodes (``cuda/conditional.py``:
  setter kernels, WHILE / IF / SWITCH bodies, a double-buffered loop's odd iterations and
  parity fix-up) leave in the outputs what the host-driven program does, for zero, odd and
  even trip counts and every branch, the predicates fed to both alike."""
  monkeypatch.setenv("OURJAX_CUDA_DOUBLE_BUFFER", double_buffer)
  monkeypatch.setenv("OURJAX_CUDA_TIME_BLOCKING", "0")
  exe = _exe(_CONTROL[name], np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6))
  assert cuda_program.graph_unsuitable(exe.program, None) is None
  kinds = {op[0] for op in exe.program}
  assert kinds & {"while", "cond", "repeat"}
  recorded = _lay_out_recorded(exe, monkeypatch)
  cases = [(t, 0) for t in range(4)] if name.startswith("while") else \
      [(0, b) for b in range(3 if name == "switch" else 2)]
  for trips, branch in cases:
    want = _dataflow(exe, while_trips=trips, branch=branch)[0]
    got = _dataflow(exe, while_trips=trips, branch=branch, graph=recorded)[0]
    assert got == want, (trips, branch)


_LOOPS = {
    "scan": lambda v: ourjax.lax.scan(lambda c, x: (c * 2 + jnp.sum(c) + x, jnp.max(c)), v,
                                      jnp.ones((5,) + v.shape, v.dtype)),
    "fori_pair": lambda v: ourjax.lax.fori_loop(
        0, 4, lambda i, ab: (ab[1] * 2 + i, ab[0] + jnp.sum(ab[1])), (v, v + 1)),
    "fori_odd": lambda v: ourjax.lax.fori_loop(0, 3, lambda i, w: jnp.roll(w, 1) * 2 + i, v),
    "while": lambda v: ourjax.lax.while_loop(lambda c: c[0] < 100.0,
                                             lambda c: (c[0] + jnp.sum(c[1]), c[1] * 0.5),
                                             (jnp.float32(0), v)),
    "nested": lambda v: ourjax.lax.fori_loop(
        0, 3, lambda i, w: ourjax.lax.fori_loop(0, 3, lambda j, u: u * 2 - jnp.sum(u) + j, w)
        + 1, v),
    "grad_scan": ourjax.grad(lambda v: jnp.sum(ourjax.lax.scan(
        lambda c, x: (jnp.tanh(c * x), c), v, jnp.ones((4,) + v.shape, v.dtype))[1])),
}


@pytest.mark.parametrize("name", sorted(_LOOPS))
def test_double_buffered_loops_compute_what_copies_do(name, monkeypatch):
  """Loops whose iterations alternate between each state buffer and its next buffer (no copy
  back) leave in the outputs the same values as loops that copy the next state back."""
  x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
  monkeypatch.setenv("OURJAX_CUDA_HORIZONTAL", "0")
  monkeypatch.setenv("OURJAX_CUDA_TIME_BLOCKING", "0")    # (it needs double buffering)
  monkeypatch.setenv("OURJAX_CUDA_DOUBLE_BUFFER", "0")
  plain = _exe(_LOOPS[name], x)
  monkeypatch.setenv("OURJAX_CUDA_DOUBLE_BUFFER", "1")
  swapped = _exe(_LOOPS[name], x)
  loops = [op for op in swapped.program if op[0] in ("repeat", "while")]
  assert loops and any(op[3 if op[0] == "repeat" else 6] is not None for op in loops)
  (want, plain_copies), (got, copies) = _dataflow(plain), _dataflow(swapped)
  assert got == want
  assert copies < plain_copies


def _lstm_like(params, xs):
  def cell(carry, x):
    h, c = carry
    z = x @ params[0] + h @ params[1]
    i, f, g, o = jnp.split(z, 4, axis=-1)
    c = ourjax.nn.sigmoid(f) * c + ourjax.nn.sigmoid(i) * jnp.tanh(g)
    h = ourjax.nn.sigmoid(o) * jnp.tanh(c)
    return (h, c), h
  zeros = jnp.zeros((xs.shape[1], params[1].shape[0]), xs.dtype)
  return jnp.sum(ourjax.lax.scan(cell, (zeros, zeros), xs)[1] ** 2)


def _sgd_step(w, b, x):
  loss = lambda w, b: jnp.sum(jnp.maximum(x @ w + b, 0.0) ** 2)
  gw, gb = ourjax.grad(loss, argnums=(0, 1))(w, b)
  return w - 0.1 * gw, b - 0.1 * gb


def _stencil_scan(v):
  """An integrator step with a rolled stencil and a scalar per step (``ys[t] = mean(..)``): its
  split reduction joins the step's elementwise launch, and the one-thread store of the scalar
  into its stacked slice runs in the reduction's finishing launch."""
  s = jnp.concatenate([v, v[::-1]]).reshape(2, -1)

  def step(s, _):
    x, w = s[0], s[1]
    k = jnp.stack([w, jnp.roll(x, 1) + jnp.roll(x, -1) - 2.0 * x - 0.1 * w])
    s = s + 0.01 * k
    return s, jnp.mean(s[0] * s[0])
  return ourjax.lax.scan(step, s, None, length=5)


_MERGED = dict(_LOOPS, lstm_grad=None, sgd_bias=None, stencil_scan=_stencil_scan,
               siblings=lambda v: (jnp.exp(v), v * 2, jnp.sin(v).T, jnp.cumsum(v, 0) + 1),
               rows=lambda v: (jnp.sum(v, axis=1), jnp.exp(v) * 2, jnp.max(v, axis=1) - 1))


@pytest.mark.parametrize("name", sorted(_MERGED))
def test_horizontal_kernels_compute_what_their_parts_do(name, monkeypatch):
  """Independent kernels merged into one launch (``cuda/horizontal.py``) leave the same values
  in the outputs as the kernels launched one by one, and the merged program has fewer
  launches."""
  if name == "lstm_grad":
    rng = np.random.RandomState(0)
    args = ((rng.randn(3, 16).astype(np.float32), rng.randn(4, 16).astype(np.float32)),
            rng.randn(5, 2, 3).astype(np.float32))
    fn = ourjax.grad(_lstm_like)
  elif name == "sgd_bias":
    rng = np.random.RandomState(0)
    args = (rng.randn(64, 32).astype(np.float32), rng.randn(32).astype(np.float32),
            rng.randn(512, 64).astype(np.float32))
    fn = _sgd_step
  else:
    args = (np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6),)
    fn = _MERGED[name]
  monkeypatch.setenv("OURJAX_CUDA_HORIZONTAL", "0")
  plain = _exe(fn, *args)
  monkeypatch.setenv("OURJAX_CUDA_HORIZONTAL", "1")
  merged = _exe(fn, *args)
  assert _dataflow(merged)[0] == _dataflow(plain)[0]
  assert len(list(cuda_program._launch_ops(merged.program))) <= \
      len(list(cuda_program._launch_ops(plain.program)))
  horizontal = [k for k in merged.kernels if type(k).__name__ == "Horizontal"]
  parts = [p for k in horizontal for p in k.parts]
  for k in horizontal:            # every part is launched exactly once, inside one kernel
    assert len(k.parts) >= 2 and k.launch(None)[0][0] == k.ranges[-1][1]
  assert len({id(p) for p in parts}) == len(parts)
  if name in ("lstm_grad", "siblings"):
    assert parts
  if name == "sgd_bias":     # the bias's update is computed where its gradient is finished
    assert any(getattr(k, "epilogues", None) for k in merged.kernels)


def test_events_finalized_in_a_garbage_cycle_are_not_reused():
  """Arrays that die in a reference cycle are finalized together with their ``_Ready`` and its
  event; the ``_Ready``'s finalizer returning the event to the pool must not hand a destroyed
  event to a later call (on a GPU: CUDA_ERROR_CONTEXT_IS_DESTROYED at cuEventRecord)."""
  import gc
  x = np.ones((8, 8), np.float32)
  with cuda_fake_driver.installed() as fake:
    f = ourjax.jit(lambda v: v * 2 + 1)
    for _ in range(20):
      out = f(x)
      cycle = [out]
      cycle.append(cycle)
      del out, cycle
      gc.collect()
    f(x)
    assert fake.calls.get("cuEventRecord", 0) >= 21


def test_profiler_describes_every_gpu_kernel():
  """The profiler's description of each kernel of a GPU program (merged kernels name their
  parts' HLO; split-K dots, whose ``parts`` are partial-sum buffers, are dots)."""
  from ourjax.backends.llvm import kernel_info
  rng = np.random.RandomState(1)
  params = (rng.randn(96, 512).astype(np.float32), rng.randn(128, 512).astype(np.float32))
  xs = rng.randn(6, 16, 96).astype(np.float32)
  exe = _exe(ourjax.grad(_lstm_like), params, xs)
  kinds = set()
  for k in exe.kernels:
    d = kernel_info.describe(k)
    kinds.add(d["kind"])
    assert d["hlo"] and d["bytes"] > 0
    if d["kind"] == "Horizontal":
      assert d["hlo"] == " + ".join(kernel_info.describe(p)["hlo"] for p in k.parts)
  assert "Horizontal" in kinds


def test_synchronising_parts_join_only_at_their_block_size():
  """A split reduction's partials (blocks that synchronise) join a horizontal launch only when
  the merged block is their own block size; a one-thread store after a one-output split
  reduction runs in the reduction's finishing launch."""
  from ourjax.backends.cuda import codegen, horizontal, reductions
  x = np.linspace(-1, 1, 4096 * 16, dtype=np.float32)
  exe = _exe(_stencil_scan, x)
  info = codegen.DeviceInfo()
  kinds = [type(k).__name__ for k in exe.kernels]
  merged = [k for k in exe.kernels if isinstance(k, horizontal.Horizontal)
            and any(isinstance(p, reductions.SplitPartials) for p in k.parts)]
  assert merged, kinds
  for h in merged:
    blk = h.launch(info)[1][0]
    for p in h.parts:
      if isinstance(p, horizontal.SYNCED):
        assert p.launch(info)[1][0] == blk
  assert any(isinstance(k, reductions.SplitFinish) and k.tails for k in exe.kernels), kinds
  # the guard itself: a synchronising part at another block size is refused
  sp = next(p for h in merged for p in h.parts if isinstance(p, reductions.SplitPartials))
  big = next(p for h in merged for p in h.parts if not isinstance(p, horizontal.SYNCED))
  assert horizontal._fits([big], sp, info)

  class Wide:            # an independent part launched with a wider block than sp's
    name, reads, writes, work = "wide", [], [], 1

    def launch(self, info):
      return (1, 1, 1), (2 * sp.launch(info)[1][0], 1, 1), 0
  with pytest.raises(ValueError, match="synchronises"):
    horizontal.Horizontal("h", [sp, Wide()], info)


@pytest.mark.parametrize("fail", [(), ("cuLinkComplete",)])
def test_modules_load_as_linked_cubins_cached_on_disk(tmp_path, fail):
  """An executable's PTX modules are compiled by the driver's linker (several at once) and
  loaded as cubins, which the compilation cache keeps: a new executable of the same program
  loads them from disk without linking.  A module the linker fails on is loaded as PTX."""
  from ourjax.config import config
  old = config.jax_compilation_cache_dir
  config.update("jax_compilation_cache_dir", str(tmp_path))
  try:
    _linked_cubins(tmp_path, fail)
  finally:
    config.update("jax_compilation_cache_dir", old)


def _linked_cubins(tmp_path, fail):
  x = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)

  def run():
    f = ourjax.jit(lambda v: (jnp.sum(jnp.exp(v), axis=1), v @ v.T + 1.0))
    out = f(ourjax.device_put(x))
    return _called_executable(f), out
  with cuda_fake_driver.installed() as fake:
    fake.fail = set(fail)
    exe, _ = run()
    n = len(exe.ptx_modules)
    assert n >= 2
    if fail:
      assert fake.calls["cuModuleLoadDataEx"] == n and fake.calls["cuModuleLoadData"] == 0
      assert not list(tmp_path.rglob("cuda-*.bin"))
    else:
      assert fake.calls["cuLinkComplete"] == n and fake.calls["cuModuleLoadData"] == n
      assert fake.calls["cuModuleLoadDataEx"] == 0
      assert len(list(tmp_path.rglob("cuda-*.bin"))) == n
    del exe
  if fail:
    return
  ourjax.clear_caches()
  with cuda_fake_driver.installed() as fake:
    exe, _ = run()
    assert fake.calls["cuLinkComplete"] == 0 and fake.calls["cuModuleLoadData"] == n
    del exe
  # an entry that reads back intact but does not load: the PTX is loaded, the entry dropped
  # (the executable's own entry, which holds its cubins too, cuda/cache.py, removed first)
  for p in tmp_path.rglob("gpusrc-*.bin"):
    p.unlink()
  from ourjax.backends import disk_cache
  (bad,) = [p for p in tmp_path.rglob("cuda-*.bin")][:1]
  key = bad.name[:-4]
  disk_cache.write(key, {"kind": "cubin"}, b"not a cubin", "")
  ourjax.clear_caches()
  with cuda_fake_driver.installed() as fake:
    exe, _ = run()
    assert fake.calls["cuModuleLoadDataEx"] == 1 and fake.calls["cuModuleLoadData"] == n
    assert not bad.exists()
    del exe


def test_no_driver_library_is_found_without_importing_the_bindings():
  """Where libcuda cannot be loaded, ``available()`` says so without importing cuda-python (a
  tenth of a second of every CPU-only program's first jit call)."""
  import ctypes
  import subprocess
  import sys
  try:
    ctypes.CDLL("libcuda.so.1")
    pytest.skip("this machine has the CUDA driver library")
  except OSError:
    pass
  code = ("import sys; from ourjax.backends.cuda import driver; "
          "print(driver.available(), 'cuda.bindings' in sys.modules, driver.unavailable_reason())")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120).stdout.split()
  assert out[:2] == ["False", "False"] and "libcuda" in " ".join(out[2:]), out


def test_one_wait_for_all_outputs_of_a_call():
  """The outputs of one call share its completion event: waiting for all of them (a training
  step's parameters) makes one ``cuEventSynchronize``; a second wait, or ``is_ready``, makes
  none (it used to synchronize the whole stream once an output had been waited for)."""
  with cuda_fake_driver.installed() as fake:
    f = ourjax.jit(lambda p: {k: v * 2 for k, v in p.items()})
    p = {f"w{i}": ourjax.device_put(np.full((8,), i, np.float32)) for i in range(12)}
    out = f(p)
    before = fake.calls.get("cuEventSynchronize", 0), fake.calls.get("cuStreamSynchronize", 0)
    ourjax.block_until_ready(out)
    ourjax.block_until_ready(out)
    assert all(x.is_ready() for x in out.values())
    after = fake.calls.get("cuEventSynchronize", 0), fake.calls.get("cuStreamSynchronize", 0)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0), (before, after)
    del out



@pytest.mark.parametrize("prefer", [True, False])
def test_a_loop_feeding_its_outputs_back_replays_kept_graphs(monkeypatch, prefer):
  """A training loop's pattern: the step's outputs (several of one size) are its next
  arguments, and the old ones are dropped.  The outputs are allocated at the addresses of the
  kept graph instance whose arguments are the call's (the call before last's), so after the
  first calls every call launches an instance as it is, with no node updated; without that
  preference the free lists hand the blocks out in another order and calls update nodes."""
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  monkeypatch.setattr(cuda_program, "KEEP_GRAPH_ADDRESSES", prefer)

  @ourjax.jit
  def grads(p, x):                  # (as a data-parallel step's segments: an all-reduce between)
    return _reductions(jnp.tanh(p * x)), jnp.mean(x)

  @ourjax.jit
  def update(p, m, v, g):
    g = g / jnp.maximum(1.0, jnp.sqrt(jnp.sum(g * g)))      # (clipped by the global norm)
    m = 0.9 * m + 0.1 * g
    v = 0.99 * v + 0.01 * g * g
    return p - 0.01 * m / (jnp.sqrt(v) + 1e-3), m, v

  def step(p, m, v, k):
    g, _ = grads(p, np.full((64, 300), k, np.float32))      # a host batch, uploaded
    return update(p, m, v, g * 0.5)
  with cuda_fake_driver.installed() as fake:
    state = tuple(ourjax.device_put(np.full((64, 300), k + 1, np.float32)) for k in range(3))
    for k in range(6):
      state = step(*state, k)
    exes = [_called_executable(grads), _called_executable(update)]
    before = [e._graph.updates for e in exes], fake.calls["cuGraphInstantiate"]
    for k in range(12):
      state = step(*state, k)
    after = [e._graph.updates for e in exes], fake.calls["cuGraphInstantiate"]
    if prefer:
      assert after == before
    else:
      assert after[0] != before[0]
    del state, exes
