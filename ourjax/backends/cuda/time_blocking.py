"""Time blocking: a loop whose body is one stencil chain runs several iterations per launch.

A loop of known trip count over a stencil (``lax.scan`` of an ODE integrator of coupled
oscillators, an explicit heat-equation step) plans to one ``StencilChain`` per iteration
(``stencil.py``), the scalar updates of the loop's counter, and, for a scan that stacks a
reduction per step (``ys[t] = mean(s**2)``), the ``SplitFinish`` combining the chain's
partials and storing them into their row.  Each launch costs more than an iteration's work,
so here the loop runs ``K`` iterations per launch (the "temporal blocking" of stencil codes):

* ``TimeBlockedChain``: the chain's stages repeated ``K`` times in one kernel.  Iteration
  ``t`` reads, from shared memory, the state iteration ``t - 1`` left there (the first reads it
  from memory); a block computes its tile widened by the halo ``K`` iterations need: each
  iteration's stencil reach added up, found by ``stencil._analyse`` over the repeated stages.
  Only the last iteration's state goes to memory; each iteration's reduction partials go to
  their own row of a ``K x tiles`` buffer.  The iterations reuse one shared-memory array per
  intermediate value and two per state (even and odd iterations: an iteration reads the
  previous state while writing its own), with a barrier at each iteration's start and, within
  one, wherever the chain's own stages need one (``StencilChain._run_stages``).  The scalar
  work is run for all ``K`` iterations first (``TimeBlockedChain``), each iteration's values
  kept per iteration; block 0 writes the states' into ``K + 1`` element snapshots.
* ``BatchedFinish``: every iteration's ``SplitFinish`` (its serial tails included: the store
  into the stacked output) in one launch of one block, each reading its own row of partials
  and its iteration's scalar state from the snapshot: a warp per iteration folds the partials,
  then one thread computes the outputs iteration after iteration, in the loop's order, so
  whatever they write ends as the loop leaves it.

The state is that of the unblocked loop bit for bit: every element is computed from the same
operands in the same order (halo positions are computed by several blocks alike); a reduction
per step combines the same per-tile partials, a warp per iteration (another order than the
unblocked finish's block of 128 threads).

A small state's reduction per step (too short to be split: one block's ``RowReduce`` after
the chain) becomes the chain's last stage, per-tile partials, with a ``SplitFinish`` of them
into which the one-thread store of its result folds (``_with_reduction``).

Applied where the body is exactly that (a chain whose memory outputs are the loop's next
state, scalar ``Elementwise`` work on scalar state, at most one ``SplitFinish`` of the
chain's partials that reads scalar state only), the loop runs double-buffered (its state and
next buffers alternate), and some ``K`` from ``MAX_ITERATIONS`` down to 2 divides the trip
count keeps the halo within ``stencil.MAX_HALO`` and the arrays within
``stencil.MAX_SHARED_BYTES``; of those the count of the least estimated time (``_best``:
launches against the halo's extra work) is taken, and the iterations left over run one per
launch after the blocked ones.  ``OURJAX_CUDA_TIME_BLOCKING=0`` turns it off.
"""
from __future__ import annotations

import copy
import functools
import math

from llvmlite import ir

from ourjax.backends.cuda import codegen, reductions, stencil
from ourjax.backends.cuda.codegen import I32, GpuKernel, sreg64
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import Emitter, Index, i64
from ourjax.config import env_switch
from ourjax.backends.llvm.kernel_info import same_origin
from ourjax.config import env_switch

__all__ = ["block_loops", "TimeBlockedChain", "BatchedFinish", "enabled", "MAX_ITERATIONS"]

#: The most iterations one launch runs (the halo grows by an iteration's reach with each).
MAX_ITERATIONS = 64


def enabled() -> bool:
  return env_switch("OURJAX_CUDA_TIME_BLOCKING")


def _view(b, base, row):
  """``base + row`` elements (a row of a snapshot or partials buffer)."""
  return b.gep(base, [row], inbounds=True)


class TimeBlockedChain(stencil.StencilChain):
  """``iterations`` iterations of a stencil chain's ``stages`` in one launch (module
  docstring).  Every stage runs over the same window, the tile and ``lo``/``hi`` positions
  either side: the halo that all the iterations need, so a value near the window's edge may be
  wrong (computed from reads clamped into the window) while the values a tile's own positions
  depend on never are.  ``states``: (state Buf, next Buf) pairs; the state is copied from
  memory into shared memory first, each iteration writes the next state into the array the
  previous one did not, and the last is copied to memory at the end.

  Scalar work: ``scalars``, the body's kernels of one element in its order (a counter's
  increment, a time step's, a forcing term of the time), run by thread 0 of every block for
  all the iterations first, each value kept in shared memory per iteration (``sstates``:
  (state, next, snapshot) triples, the state's values before each iteration and after the
  last; ``stemps``: the temporaries they write, per iteration); a stage reads iteration
  ``t``'s.  Block 0 also writes the states' values into their snapshots in memory (what the
  finishes read) and the last into the next state."""

  def __init__(self, name, stages, n, lo, hi, states, partials, iterations, scalars=(),
               sstates=(), stemps=()):
    self.iterations, self.lo, self.hi = iterations, lo, hi
    self.reach = max(lo, hi)
    self.states = list(states)
    self.scalars, self.sstates, self.stemps = list(scalars), list(sstates), list(stemps)
    extra_r = [st for st, _ in self.states] + [st for st, _, _ in self.sstates]
    extra_w = [nx for _, nx in self.states] + [x for _, nx, g in self.sstates for x in (nx, g)]
    mine = {id(x) for x in self.stemps} | {id(nx) for _, nx, _ in self.sstates}
    for kern in self.scalars:
      extra_r.extend(x for x in K._leaf_bufs(kern.leafmap) if id(x) not in mine)
    # (staged: not read from memory by the stages: their values and the scalar temporaries)
    produced = {id(x) for st in stages for _, x in st.outputs} | {id(x) for x in self.stemps}
    super().__init__(name, stages, n, produced, set(), [[partials]] if partials else [],
                     extra_r, extra_w)

  def gpu_body(self, b, ptr):
    codegen.launch_bounds(b.module, b.function, self.block)   # (registers for the whole block)
    held = self._scalar_program(b, ptr) if self.scalars else {}
    mod = b.module
    t0 = b.mul(sreg64(b, "ctaid.x"), i64(stencil.TILE), flags=["nuw", "nsw"])
    tid = sreg64(b, "tid.x")
    win = stencil.TILE + self.lo + self.hi
    base = b.sub(t0, i64(self.lo))

    def array(buf, tag):
      rows = math.prod(buf.dims[:-1])
      gv = codegen.shared_array(mod, E.storage_type(buf.dtype), rows * win,
                                f"{self.name}_{tag}")
      return b.gep(gv, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)
    nexts = {id(nx) for _, nx in self.states}
    one = {}                 # id(Buf) -> its array (an iteration's intermediate values)
    two = {}                 # id(next Buf) -> (array, array) (even and odd iterations')
    for j, st in enumerate(self.stages):
      for k, (_, buf) in enumerate(st.outputs):
        if id(buf) in nexts:
          two[id(buf)] = (array(buf, f"e{j}_{k}"), array(buf, f"o{j}_{k}"))
        else:
          one[id(buf)] = array(buf, f"s{j}_{k}")
    # the state, from memory into the array the first iteration reads as the previous one's
    for st, nx in self.states:
      self._window_copy(b, st, nx, two[id(nx)][1], base, win, tid, ptr, into_shared=True)
    with E.ForLoop(b, 0, self.iterations, "tb") as lp:
      t = lp.index
      codegen.barrier(b)     # (the previous iteration's values are all written and read)
      even = b.icmp_unsigned("==", b.and_(t, i64(1)), i64(0))
      # this iteration's arrays: its own values, and its state read from the previous one's
      arrays = dict(one)
      for k, (a0, a1) in two.items():
        arrays[k] = b.select(even, a0, a1)
      for st, nx in self.states:
        a0, a1 = two[id(nx)]
        arrays[id(st)] = b.select(even, a1, a0)

      def staged_as(buf, arrays=arrays):
        p = arrays.get(id(buf))
        return None if p is None else (p, win, base, self.n, buf.dtype)

      def at(buf, t=t):
        h = held.get(id(buf))
        return ptr(buf) if h is None else _view(b, h, t)
      self._run_stages(b, t0, tid, ptr, staged_as, at, t)
    codegen.barrier(b)
    last = (self.iterations - 1) & 1
    for st, nx in self.states:
      self._window_copy(b, nx, nx, two[id(nx)][last], base, win, tid, ptr, into_shared=False)

  def _window_copy(self, b, mem, like, arr, base, win, tid, ptr, into_shared):
    """``mem`` (rows x n in memory) over the window into ``arr``, or the tile's own positions
    of ``arr`` back into ``mem``."""
    n = self.n
    rows = math.prod(like.dims[:-1])
    width = win if into_shared else stencil.TILE
    with E.ForLoop(b, 0, rows, "wr") as rl, \
        E.ForLoop(b, tid, width, "wc", step=i64(self.block)) as wl:
      r, w = rl.index, wl.index
      if into_shared:
        pos = stencil._wrap(b, b.add(base, w), n, self.reach)
        v = E.load_element(b, ptr(mem), b.add(b.mul(r, i64(n)), pos), mem.dtype)
        E.store_element(b, v, arr, b.add(b.mul(r, i64(win)), w), mem.dtype)
      else:
        pos = b.add(b.add(base, i64(self.lo)), w)
        with b.if_then(b.icmp_signed("<", pos, i64(n))):
          v = E.load_element(b, arr, b.add(b.mul(r, i64(win)), b.add(w, i64(self.lo))),
                             mem.dtype)
          E.store_element(b, v, ptr(mem), b.add(b.mul(r, i64(n)), pos), mem.dtype)

  def _scalar_program(self, b, ptr) -> dict:
    """Every iteration's scalar values into shared memory, by thread 0 of each block (class
    docstring); returns {id(Buf): its shared-memory array} for scalar states and temporaries.
    (One thread: each value is read by the thread that wrote it; the main loop's first
    barrier publishes them to the block.)"""
    held, nexts = {}, {}
    for st, nx, _ in self.sstates:
      held[id(st)] = self._scalar_array(b, st, self.iterations + 1, len(held))
      nexts[id(nx)] = held[id(st)]
    for x in self.stemps:
      held[id(x)] = self._scalar_array(b, x, self.iterations, len(held))
    tid = sreg64(b, "tid.x")
    with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
      for st, _, _ in self.sstates:
        E.store_element(b, E.load_element(b, ptr(st), i64(0), st.dtype), held[id(st)],
                        i64(0), st.dtype)
      with E.ForLoop(b, 0, self.iterations, "tbs") as lp:
        t = lp.index
        t1 = b.add(t, i64(1))

        def at(buf):
          if id(buf) in held:
            return _view(b, held[id(buf)], t)
          if id(buf) in nexts:
            return _view(b, nexts[id(buf)], t1)
          return ptr(buf)
        for kern in self.scalars:
          em = Emitter(b, K._make_leaves(b, kern.leafmap, at))
          K.store_outputs(b, em, kern.outputs, Index(b, (), linear=i64(0)), at)
      # block 0: the snapshots the finishes read, and the next state
      with b.if_then(b.icmp_unsigned("==", sreg64(b, "ctaid.x"), i64(0))):
        for st, nx, snap in self.sstates:
          with E.ForLoop(b, 0, self.iterations + 1, "tbw") as lp:
            v = E.load_element(b, held[id(st)], lp.index, st.dtype)
            E.store_element(b, v, ptr(snap), lp.index, st.dtype)
          v = E.load_element(b, held[id(st)], i64(self.iterations), st.dtype)
          E.store_element(b, v, ptr(nx), i64(0), st.dtype)
    return held

  def _scalar_array(self, b, buf, n, k):
    gv = codegen.shared_array(b.module, E.storage_type(buf.dtype), n, f"{self.name}_v{k}", 8)
    return b.gep(gv, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)


class BatchedFinish(GpuKernel):
  """A time-blocked loop's ``SplitFinish`` (of one output) for every iteration by one block
  (module docstring): iteration ``t`` reads row ``t`` of ``partials`` (``tiles`` per row) and
  its scalar state from row ``t`` of the snapshots (``snaps``: {id(state Buf): snapshot}); a
  warp per iteration folds the partials, then thread 0 computes the outputs in order."""

  def __init__(self, name, fin, iterations, tiles, partials, snaps):
    self.fin, self.iterations, self.tiles = fin, iterations, tiles
    self.partials, self.snaps = partials, dict(snaps)
    self._orig = fin.partials[0][0]
    reads = [partials] + [x for x in fin.reads if x is not self._orig]
    reads += list(self.snaps.values())
    super().__init__(name, reads, fin.writes, work=fin.work * iterations)

  def helpers(self):
    return self.fin.helpers()

  def launch(self, info):
    return (1, 1, 1), (32 * min(self.iterations, 32), 1, 1), 0

  def _at(self, b, ptr, t):
    """``ptr`` for iteration ``t``: its row of partials, its row of each snapshot."""
    def at(buf):
      if buf is self._orig:
        return _view(b, ptr(self.partials), b.mul(t, i64(self.tiles)))
      snap = self.snaps.get(id(buf))
      return ptr(buf) if snap is None else _view(b, ptr(snap), t)
    return at

  def gpu_body(self, b, ptr):
    fin = self.fin
    warps = min(self.iterations, 32)
    tid = sreg64(b, "tid.x")
    lane32 = b.trunc(b.and_(tid, i64(31)), I32)
    em = Emitter(b, K._make_leaves(b, fin.leafmap, ptr))
    reds = [reductions._Reducer(b, em, r) for r in fin.prefetch]
    held = [[codegen.shared_array(b.module, v.type, self.iterations, f"{self.name}_a{j}_{k}")
             for k, v in enumerate(red.ident)] for j, red in enumerate(reds)]

    def slot(arr, t):
      return b.gep(arr, [i64(0), t], inbounds=True)
    # each iteration's partials folded by one warp
    with E.ForLoop(b, b.lshr(tid, i64(5)), self.iterations, "ft", step=i64(warps)) as lp:
      at = self._at(b, ptr, lp.index)
      for red, parts, arrs in zip(reds, fin.partials, held):
        vals = fin._fold(b, at, red, parts, i64(0), b.and_(tid, i64(31)), i64(32))
        vals = reductions._warp_allreduce(b, red, vals, lane32)
        with b.if_then(b.icmp_unsigned("==", lane32, ir.Constant(I32, 0))):
          for v, arr in zip(vals, arrs):
            b.store(v, slot(arr, lp.index))
    codegen.barrier(b)
    # the outputs (and the stores into the stacked results) in the loop's order
    with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
      with E.ForLoop(b, 0, self.iterations, "fo") as lp:
        at = self._at(b, ptr, lp.index)
        emt = Emitter(b, K._make_leaves(b, fin.leafmap, at))
        oidx = Index(b, fin.dims, linear=i64(0))
        for r, arrs in zip(fin.prefetch, held):
          red = reductions._Reducer(b, emt, r)
          vals = [b.load(slot(arr, lp.index)) for arr in arrs]
          emt.remember(r, oidx, red.result(red.finish(vals)))
        fin._outputs(b, emt, oidx, at)


# ---------------------------------------------------------------------------------------------
# forming blocked loops
# ---------------------------------------------------------------------------------------------

def block_loops(steps, new_temp, note=None):
  """``steps`` with each loop that qualifies (module docstring) run ``K`` iterations per
  launch; loops nested in loops and conditionals are looked at too.  ``new_temp(dtype, dims,
  name)`` makes a temporary buffer; ``note(msg)`` reports each decision."""
  out = []
  for s in steps:
    for attr in ("cond_steps", "body_steps"):
      if hasattr(s, attr):
        setattr(s, attr, block_loops(getattr(s, attr), new_temp, note))
    if hasattr(s, "branches"):
      s.branches = [block_loops(br, new_temp, note) for br in s.branches]
    out.append(s)
    if hasattr(s, "body_steps") and s.trip_count is not None:
      why, rest = _block(s, new_temp)
      if rest is not None:
        out.append(rest)
      if note is not None and why is not None and not why.startswith("-"):
        note(f"{s.name}: {why}")
  return out


def _block(s, new_temp):
  """Block loop ``s`` in place: (what was done, or why not ("-..." when the loop is not of the
  kind at all, which is not worth a note), the loop of the iterations left over or None)."""
  why = _block_or_why(s, new_temp)
  return why if isinstance(why, tuple) else (why, None)


def _block_or_why(s, new_temp):
  if not s.double_buffered or not s.copies_back:
    return "-not double-buffered"
  n = s.trip_count
  skip = {(id(c.src), id(c.dst)) for c in s.copies_back}
  copies, body = [], []
  for x in s.body_steps:
    k = getattr(x, "kernel", None)
    if k is None:
      return "-control flow in the body"
    if k.is_copy and (id(k.src), id(k.dst)) in skip:
      copies.append(x)
    else:
      body.append(k)
  chains = [k for k in body if type(k) is stencil.StencilChain]
  if not chains:            # a body of one stencil kernel: a chain of one stage
    big = [k for k in body if not (type(k) is codegen.Elementwise and k.dims == ())]
    if len(big) != 1 or type(big[0]) is not codegen.Elementwise or \
        stencil._stage_of(big[0]) is None:
      return "-no stencil chain"
    chains = [_OneStage(big[0])]
  if len(chains) != 1:
    return "-more than one stencil chain"
  chain = chains[0]
  folded = _with_reduction(chain, body)
  if folded is not None:
    chain, fin_new, gone = folded
    body = [k for k in body if k not in gone] + [fin_new]
  state_of = {id(c.src): c.dst for c in s.copies_back}      # next -> state
  next_of = {id(c.dst): c.src for c in s.copies_back}       # state -> next
  fins = [k for k in body if type(k) is reductions.SplitFinish]
  scal = [k for k in body if k is not getattr(chain, 'kernel', chain) and k not in fins]
  if len(fins) > 1:
    return "more than one reduction finish in the body"
  fin = fins[0] if fins else None
  last = chain.stages[-1]
  if (fin is None) != (last.kind != "partials"):
    return "the chain's reduction is not finished in the loop"
  if fin is not None and [list(p) for p in fin.partials] != [list(p) for p in last.partials]:
    return "the finish reads other partials"
  written = {id(x) for k in body for x in k.writes}
  # scalar work: kernels of one element, in the body's order, reading scalar loop state,
  # invariants and what earlier ones wrote; writing next scalar state or temporaries
  scalar_next, temps = set(), set()
  for k in scal:
    if type(k) is not codegen.Elementwise or k.dims != ():
      return f"{type(k).__name__} {k.name} in the body"
    for x in k.reads:
      if (id(x) in next_of and x.dims) or (id(x) in written and id(x) not in temps):
        return f"{k.name} reads %{x.name}, written in the body"
    for x in k.writes:
      if x.dims:
        return f"{k.name} writes %{x.name}, not a scalar"
      if id(x) in state_of:
        scalar_next.add(id(x))
      elif x.kind == "temp":
        temps.add(id(x))
      else:
        return f"{k.name} writes %{x.name}, read after the loop"
  # the chain: reads loop invariants, the state and scalar values; writes the next state
  states = []
  for x in chain.reads:
    if id(x) in next_of and x.dims:
      states.append(x)
    elif id(x) in written and id(x) not in temps:
      return f"the chain reads %{x.name}, written in the body"
  # (what the chain stored for a reduction that is now its last stage stays on chip)
  read = {id(x) for k in body if k is not getattr(chain, "kernel", chain) for x in k.reads}
  chain_out = [x for st in chain.stages for _, x in st.outputs if id(x) in chain.globals_out
               and (id(x) in read or id(x) in state_of or x.kind != "temp")]
  if any(id(x) not in state_of for x in chain_out):
    return "the chain writes memory other than the next state"
  if {id(x) for x in chain_out} | scalar_next != set(state_of):
    return "a loop state not updated by the chain or a scalar kernel"
  if fin is not None:
    fin_own = {id(x) for x in fin.writes}
    parts = {id(p) for p in last.partials[0]}
    for x in fin.reads:
      if id(x) in parts or id(x) in fin_own:
        continue
      if id(x) in next_of:
        if x.dims:
          return "the finish reads the big loop state"
      elif id(x) in written:
        return f"the finish reads %{x.name}, written in the body"
    if any(id(x) in next_of or id(x) in state_of for x in fin.writes):
      return "the finish writes loop state"
    if len(last.partials[0]) != 1:
      return "a reduction of several partials"
    if fin.nout != 1:
      return "the finish has several outputs"
  # (a wider halo than MAX_HALO was measured slower even for a grid of a few blocks: on an
  # H100, RK4 on 2 x 1024 took 1.54 ms with 50 iterations per launch in blocks of 672
  # threads, 1.28 with 10 in blocks of 352)
  max_halo = stencil.MAX_HALO
  nexts = {id(next_of[id(x)]): x for x in states}
  memo = {} if env_switch("OURJAX_CUDA_PLAN_MEMO") else None   # (stencil._analyse)
  fits = functools.lru_cache(None)(lambda k: _fits(chain, k, next_of, nexts, max_halo, memo))
  lo_k, hi_k = 1, min(MAX_ITERATIONS, n)        # the most iterations that fit (they grow
  while lo_k < hi_k:                            # the halo: fitting is monotone)
    mid = (lo_k + hi_k + 1) // 2
    if fits(mid) is None:
      hi_k = mid - 1
    else:
      lo_k = mid
  if lo_k < 2:
    return "no iteration count fits the halo and shared memory"
  K_ = _best(n, lo_k, fits)
  made = _make(chain, fin, scal, K_, states, next_of, state_of, temps, new_temp, fits(K_))
  rest = None
  if n % K_:
    rest = copy.copy(s)
    rest.body_steps, rest.trip_count = list(s.body_steps), n % K_
  s.body_steps = [type(s.body_steps[0])(k) for k in made] + copies
  s.trip_count = n // K_
  left = f", then {n % K_} one per launch" if n % K_ else ""
  return (f"{K_} iterations per launch ({n // K_} launches{left})", rest)


#: A blocked launch (the chain's and the finishes') against one iteration's work of a grid that
#: fills the GPU over a window of one tile: on an H100, RK4 on 2 x 65536, about 4 us against
#: 1.5 (1.88 ms for 1000 iterations in 100 launches).
LAUNCH_COST = 2.7


def _best(n, kmax, fits) -> int:
  """The iterations per launch (2..``kmax``) of the least estimated time: ``n // K`` blocked
  launches and ``n % K`` single iterations after them, each launch ``LAUNCH_COST``, each
  iteration its window's width in tiles (every block computes its whole window).  The halo
  grows linearly with K, so the widths between 2 and ``kmax`` are interpolated."""
  tile = stencil.TILE
  w2, wk = (tile + sum(fits(k)) for k in (2, kmax))

  def width(k):
    return 1.0 if kmax == 2 else (w2 + (wk - w2) * (k - 2) / (kmax - 2)) / tile

  def cost(k):
    blocked, left = n // k, n % k
    return ((blocked + left) * LAUNCH_COST + blocked * k * width(k) + left * width(1)
            - 1e-9 * k)
  return min(range(2, kmax + 1), key=cost)


def _with_reduction(chain, body):
  """For a chain without a reduction and one ``RowReduce`` in the body of a single full
  reduction over the chain's axis (a small state's ``mean(s**2)`` per step, too short to be
  split in two kernels): (the chain with the reduction as its last stage, folding per-tile
  partials, the ``SplitFinish`` combining them with the one-thread kernel that stored the
  result folded in, the kernels they replace), or None."""
  rows = [k for k in body if type(k) is reductions.RowReduce]
  if len(rows) != 1 or chain.stages[-1].kind == "partials":
    return None
  R = rows[0]
  if R.outer_dims != () or len(R.prefetch) != 1 or R.inner_outs:
    return None
  r = R.prefetch[0]
  src = r.operands[0].dims
  if (not src or src[-1] != chain.n or len(r.operands) != 2 or r.shape.is_tuple
      or sorted(r.attrs["dimensions"]) != list(range(len(src)))):
    return None
  part = K.Buf(reductions._partial_dtype(r.dtype), (chain.tiles,), f"{r.name}.tile0")
  stage = stencil._Stage("partials", R, src, [], K._restrict_many(R.leafmap, [(r, None)]), [r],
                         [[part]])
  fin = reductions.SplitFinish(R.name + "_f", (), R.outer_outs, [r], [[part]], R.leafmap,
                               chain.tiles)
  fin_leaves = stencil._finish_leaves(fin)
  gone = [R]
  tails = []
  after = body[body.index(R) + 1:]
  if after and type(after[0]) is codegen.Threaded and after[0].nthreads == 1 and \
      not after[0].scratch and any(x in R.writes for x in after[0].reads):
    tails.append(after[0].inner)
    gone.append(after[0])
  fin = same_origin(reductions.SplitFinish(fin.name, (), fin.outputs, fin.prefetch,
                                           fin.partials, fin_leaves, chain.tiles, tails), R)
  return _Chain(chain, stage), fin, gone


class _Chain:
  """A chain with one more stage (what ``_make`` reads of a chain)."""

  def __init__(self, chain, stage):
    self.kernel = getattr(chain, "kernel", chain)
    self.stages = list(chain.stages) + [stage]
    self.n, self.tiles, self.name = chain.n, chain.tiles, chain.name
    produced = {id(x) for st in self.stages for _, x in st.outputs}
    self.reads = list(chain.reads) + [x for x in K._leaf_bufs(stage.leafmap)
                                      if id(x) not in produced]
    self.globals_out = set(chain.globals_out)


class _OneStage:
  """A stencil kernel seen as a chain of one stage (what ``_make`` reads of a chain)."""

  def __init__(self, kernel):
    self.kernel = kernel
    self.stages = [stencil._stage_of(kernel)]
    self.n = kernel.dims[-1]
    self.tiles = -(-self.n // stencil.TILE)
    self.name, self.reads = kernel.name, kernel.reads
    self.globals_out = {id(x) for x in kernel.writes}


def _fits(chain, iters, next_of, nexts, max_halo, memo=None):
  """(lo, hi), the halo of ``iters`` iterations per launch, when it is within ``max_halo`` and
  the shared-memory arrays fit (each intermediate one, each next state two), else None."""
  window = _halo(chain, iters, next_of, nexts, max_halo, memo)
  if window is None:
    return None
  win = stencil.TILE + window[0] + window[1]
  smem = 0
  for st in chain.stages:
    for _, buf in st.outputs:
      smem += (2 if id(buf) in nexts else 1) * math.prod(buf.dims[:-1]) * win * \
          max(1, buf.dtype.itemsize)
  return window if smem <= stencil.MAX_SHARED_BYTES else None


def _make(chain, fin, scal, iters, states, next_of, state_of, temps, new_temp, window):
  """The kernels of ``iters`` iterations per launch, over a halo of ``window`` (lo, hi)."""
  lo, hi = window
  tiles = chain.tiles
  partials = None
  if chain.stages[-1].kind == "partials":
    p = chain.stages[-1].partials[0][0]
    partials = new_temp(p.dtype, (iters * tiles,), f"{p.name}.rows")
  stages = []
  for st in chain.stages:
    new = stencil._Stage(st.kind, st.kernel, st.dims, st.outputs, st.leafmap, st.reduces,
                         [[partials]] if st.kind == "partials" else ())
    new.lo, new.hi = lo, hi
    stages.append(new)
  # each scalar state's snapshot in memory: row 0 its value, row t + 1 after iteration t
  sstates, snaps, seen = [], {}, set()
  stemps = []
  for k in scal:
    for x in k.writes:
      if id(x) in state_of:
        st = state_of[id(x)]
        snaps[id(st)] = snap = new_temp(st.dtype, (iters + 1,), f"{st.name}.snap")
        sstates.append((st, x, snap))
      elif id(x) in temps and id(x) not in seen:
        seen.add(id(x))
        stemps.append(x)
  pairs = [(x, next_of[id(x)]) for x in states]
  tb = same_origin(TimeBlockedChain(f"{chain.name}_tb{iters}", stages, chain.n, lo, hi, pairs,
                                    partials, iters, scal, sstates, stemps),
                   getattr(chain, "kernel", chain))
  out = [tb]
  if fin is not None:
    if any(id(x) in next_of and id(x) not in snaps for x in fin.reads):
      return None          # (a scalar state the finish reads but no update changes)
    fsnaps = {id(x): snaps[id(x)] for x in fin.reads if id(x) in snaps}
    out.append(same_origin(BatchedFinish(f"{fin.name}_b{iters}", fin, iters, tiles, partials,
                                         fsnaps), fin))
  return out


def _halo(chain, iters, next_of, nexts, max_halo=stencil.MAX_HALO, memo=None):
  """(lo, hi): the widest halo any stage needs when ``iters`` iterations follow a state read
  whole from memory, found by ``stencil._analyse`` over the stages repeated ``iters + 1``
  times (the first time standing for the state's copy into shared memory); None when it is
  wider than ``max_halo``."""
  produced = {id(x) for st in chain.stages for _, x in st.outputs}
  clones = {}

  def out_buf(x, t):
    if (id(x), t) not in clones:
      clones[(id(x), t)] = K.Buf(x.dtype, x.dims, f"{x.name}.t{t}")
    return clones[(id(x), t)]
  stages = []
  for t in range(iters + 1):
    for st in chain.stages:
      leafmap = {}
      for leaf, spec in st.leafmap.items():
        if isinstance(spec, K.Buf):
          if id(spec) in produced:
            spec = out_buf(spec, t)
          elif t and id(spec) in next_of and id(next_of[id(spec)]) in nexts:
            spec = out_buf(next_of[id(spec)], t - 1)
        leafmap[leaf] = spec
      stages.append(stencil._Stage(st.kind, st.kernel, st.dims,
                                   [(i, out_buf(x, t)) for i, x in st.outputs], leafmap,
                                   st.reduces, st.partials))
  stages = stencil._analyse(stages, max_halo, memo)
  if stages is None:
    return None
  per = len(chain.stages)
  first = [st for st in stages[:per] if any(id(x) in nexts for _, x in chain.stages[
      stages.index(st)].outputs)]
  need = first + stages[per:]
  return max(st.lo for st in need), max(st.hi for st in need)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
