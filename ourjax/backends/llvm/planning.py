"""Kernel planning shared by the native backends: an HLO module's entry computation becomes
*steps* over buffers, and the buffers get arena offsets.

1. *Planning* (``Planner``): every instruction of the entry computation gets a buffer (tree):
   parameters and outputs are passed in by the caller, array constants are kept by the
   executable, everything else is a temporary in one *arena*.  ``reshape``,
   ``get-tuple-element`` and ``tuple`` are aliases; each fusion or other op becomes kernels
   (``kernels.GroupPlanner``); ``while`` and ``conditional`` become ``WhileStep``/``CondStep``
   around the steps of their computations (a loop's next state is computed in its state
   buffer where the body allows, else in a buffer of its own or, on the CPU, over a value of
   the body that dies where it is read elementwise, and copied back).  Values that are outputs
   are computed straight into the output buffers; a ``dynamic-update-slice`` whose operand is
   a temporary at its last use updates that buffer in place; outputs of a donating call are planned into their parameters'
   buffers (``plan_entry``, ``backends/donation.py``).  With ``reuse_buffers`` (the CPU's), a
   value read only elementwise by the group where it dies shares its buffer with that group's
   result, or is computed in the output that result goes to (``llvm/reuse.py``).
2. *Buffer assignment* (``arena._assign``): a temporary that dies before some output buffer is first
   touched lives inside that output (``Buf.home``, at a 64-byte offset; the caller allocates
   outputs anyway), as XLA's buffer assignment shares an output's allocation with values that
   die before it is defined (on the CPU also a dot's per-thread packing scratch, and a packed
   B in outputs the backend aligns to 64 bytes); the others get arena offsets by a first-fit over their live
   ranges (64-byte aligned; a buffer used inside a loop lives for the whole loop), in order of
   first use and in order of decreasing size, whichever needs the smaller arena.

The CPU backend (``cpu/entry.py``) emits the steps as one native entry function; the CUDA
backend (``cuda/planning.py``) translates each planned kernel into GPU kernels as it is added and
launches the steps from the host.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.group_planner import overwrites_in_place
from ourjax.lowering import hlo

#: Upper bound of threads a compiled module is sized for (per-thread scratch, partials).
MAX_THREADS = 16

ALIGN = 64


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------

class KernelStep:
  def __init__(self, kernel: K.Kernel):
    self.kernel = kernel

  @property
  def parallel(self):
    return self.kernel.parallel


class WhileStep:
  """A while loop: ``cond_steps`` compute ``pred``, ``body_steps`` the next state.
  ``trip_count``: how many times the body runs when that is known at compile time
  (``lowering.loops.trip_count``; the GPU then runs the body that many times without reading
  ``pred`` back), else None."""
  parallel = False

  def __init__(self, cond_steps, pred: K.Buf, body_steps, trip_count=None,
               name: str = "while", copies_back=()):
    self.cond_steps, self.pred, self.body_steps = cond_steps, pred, body_steps
    self.trip_count = trip_count
    self.name = name
    #: the copies ending ``body_steps`` that move the next state into the state buffers
    self.copies_back = list(copies_back)
    #: set by a backend that runs the loop double-buffered (the GPU's): instead of copying
    #: back, iterations alternate between the state and next buffers, so ``_assign`` keeps
    #: the next buffers alive across the whole loop
    self.double_buffered = False


class CondStep:
  parallel = False

  def __init__(self, selector: K.Buf, branches, name: str = "conditional"):
    self.selector, self.branches = selector, branches
    self.name = name


def _flat(tree):
  if isinstance(tree, tuple) and not (tree and tree[0] == "imm"):
    for t in tree:
      yield from _flat(t)
  else:
    yield tree


class Planner:
  """Buffers and steps of the entry computation and the computations it calls.  ``threads()``:
  how many threads the kernels will be cut into pieces for (the CPU backend's pool size)."""
  widen_narrow_dots = True    # see GroupPlanner; the GPU planner turns it off
  concat_kernels = True       # likewise
  #: while-body results are computed in their state buffers where the planned body allows
  #: (``_own_index_candidates``, ``_state_in_place_ok``); the CPU's planner turns it on
  state_updates_in_place = False
  #: ``out = out + dot`` as one accumulating GEMM (``GroupPlanner._accumulating_dot``; CPU)
  dot_accumulate = False
  #: values computed in the buffers of values that die where they are read elementwise
  #: (``llvm/reuse.py``, ``GroupPlanner._dot_home``; the CPU's planner turns it on)
  reuse_buffers = False
  #: a dot run by several threads packs B once for all its pieces (``dots.share_b``; CPU)
  share_packed_b = False
  #: a loop body's next state may be computed in the buffer of a value that dies where it is
  #: read elementwise (``reuse.share_results``) and copied back from there (no next buffer of
  #: its own; with ``reuse_buffers``, the CPU's: the GPU alternates state and next buffers)
  share_loop_next = False

  def threads(self) -> int:
    return 1

  def __init__(self, module: hlo.Module):
    self.module = module
    self.temps: list[K.Buf] = []
    self.consts: list[K.Buf] = []
    self.const_of: dict = {}
    self.kernels: list[K.Kernel] = []
    self.nk = 0
    #: {value key: Buf} of fused values written to planner-owned temporaries, which later
    #: groups read instead of computing again (``reuse.seed_computed``; CPU: reuse_buffers)
    self.computed = {}
    #: ids of buffers written over by such a value while later groups still had them as
    #: operands (which then read the value instead: ``reuse.read_only_through``)
    self.clobbered = set()
    self._group = None    # the instruction whose kernels are being planned (for the profiler)
    #: ids of the loops' next-state buffers that a body's result may be computed elsewhere
    #: than in (``share_loop_next``), and {id(next buffer): where it was computed instead}
    self._loop_next, self._next_src = {}, {}     # (ids kept alive: never reused)
    self._in_branches = 0        # conditionals whose branches are being planned
    self._body_starts = []     # (where the temporaries of the loop bodies being planned start)

  # -- buffers ---------------------------------------------------------------------------------
  def temp(self, dtype, dims, name=""):
    b = K.Buf(dtype, dims, name)
    self.temps.append(b)
    return b

  def scratch(self, nbytes, name=""):
    b = K.Buf(np.uint8, (int(nbytes),), name + ".scratch", kind="scratch")
    self.temps.append(b)
    return b

  def const_buf(self, instr):
    b = self.const_of.get(instr)
    if b is None:
      b = K.Buf(instr.dtype, instr.dims, instr.name, kind="const")
      b.const_value = instr.attrs["value"]
      self.const_of[instr] = b
      self.consts.append(b)
    return b

  def _new_tree(self, shape, name, want=None):
    if shape.is_tuple:
      return tuple(self._new_tree(s, f"{name}.{k}", None if want is None else want.get(k))
                   for k, s in enumerate(shape.tuple_shapes))
    if isinstance(want, K.Buf):
      return want
    return self.temp(shape.dtype, shape.dims, name)

  def _as_buf(self, spec, instr, steps):
    """A Buf holding ``spec`` (materialising an immediate)."""
    if isinstance(spec, K.Buf):
      return spec
    buf = self.temp(instr.dtype, instr.dims, instr.name + ".imm")
    self._copy_into(steps, spec, buf)
    return buf

  def _attention_operands(self, instr, vals, steps, n):
    """The first ``n`` operands of an ``attention`` or ``attention-grad`` instruction as
    buffers, and the leafmap of its computations' parameters (``calls``, then ``grad_calls``:
    the scores' and the gradient's modifications) to the values of the operands after them."""
    bufs = [self._as_buf(vals[x], x, steps) for x in instr.operands[:n]]
    rest, leafmap = list(instr.operands[n:]), {}
    for c in (instr.attrs.get("calls"), instr.attrs.get("grad_calls")):
      if c is not None:
        m = len(c.parameters) - 1
        leafmap.update({p: vals[x] for p, x in zip(c.parameters[1:], rest[:m])})
        rest = rest[m:]
    return bufs, leafmap

  def _kname(self):
    self.nk += 1
    return f"k{self.nk}"

  def _tag(self, kernel, source=None):
    """Note on ``kernel`` the HLO instruction it was planned for (``llvm/kernel_info.py``)."""
    if getattr(kernel, "hlo_group", None) is None:
      kernel.hlo_group = self._group
    if source is not None and source is not kernel:
      kernel.hlo_source = source
    return kernel

  def _add_kernel(self, steps, kernel):
    self.kernels.append(self._tag(kernel))
    steps.append(KernelStep(kernel))

  def _copy_into(self, steps, src_spec, dst: K.Buf):
    if isinstance(src_spec, tuple) and src_spec and src_spec[0] == "imm":
      proxy = _proxy(dst)
      self._add_kernel(steps, K.LoopKernel(self._kname(), dst.dims, [(proxy, dst)],
                                           {proxy: src_spec}, rows=False))
    elif src_spec is not dst:
      if not isinstance(src_spec, K.Buf):
        raise K.PlanError(f"cannot copy {src_spec!r} into a buffer")
      self._add_kernel(steps, K.CopyKernel(self._kname(), src_spec, dst))

  # -- computations ----------------------------------------------------------------------------
  def plan_computation(self, comp: hlo.Computation, params, outs, direct: bool, forced=None):
    """Steps computing ``comp`` with parameter buffer trees ``params``, leaving the result in
    the buffer tree ``outs``.  With ``direct``, instructions whose value is an output are
    computed straight into it.  ``forced``: dynamic-update-slices (or fusions rooted at one) to
    run in place in the given buffer (their operand's)."""
    saved = getattr(self, "_forced", {}), getattr(self, "_forwarded", {})
    self._forced = forced or {}
    self._depth = getattr(self, "_depth", 0) + 1
    try:
      return self._plan_computation(comp, params, outs, direct)
    finally:
      self._forced, self._forwarded = saved
      self._depth -= 1

  def _plan_computation(self, comp, params, outs, direct):
    steps = []
    root = comp.root
    want = {}
    if direct:
      elems = root.operands if root.opcode == "tuple" else [root]
      dsts = list(outs) if root.opcode == "tuple" else [outs]
      for e, d in zip(elems, dsts):
        if isinstance(d, K.Buf) and e.opcode not in ("parameter", "constant", "tuple",
                                                     "get-tuple-element", "reshape"):
          want.setdefault(e, d)
        elif (isinstance(d, K.Buf) and e.opcode == "get-tuple-element"
              and e.operands[0].opcode not in ("parameter", "tuple", "get-tuple-element")):
          want.setdefault(("elem", e.operands[0], e.attrs["index"]), d)
    last_use = self._last_uses(comp)
    self._forwarded = {}
    if self.reuse_buffers and comp is self.module.entry:
      from ourjax.backends.llvm import reuse
      self._forwarded = reuse.forward_outputs(comp, want, last_use)
    vals = {}
    for p, t in zip(comp.parameters, params):
      vals[p] = t
    for pos, instr in enumerate(comp.instructions):
      op = instr.opcode
      if op == "parameter":
        continue
      if op == "constant":
        v = instr.attrs["value"]
        vals[instr] = ("imm", v[()]) if v.ndim == 0 else self.const_buf(instr)
      elif op == "tuple":
        vals[instr] = tuple(vals[o] for o in instr.operands)
      elif op == "get-tuple-element":
        vals[instr] = vals[instr.operands[0]][instr.attrs["index"]]
      elif op == "reshape" and not isinstance(vals[instr.operands[0]], tuple):
        vals[instr] = vals[instr.operands[0]]
      elif _reshape_view(instr) is not None and not isinstance(vals[_reshape_view(instr)],
                                                               tuple):
        vals[instr] = vals[_reshape_view(instr)]     # (its operand's buffer, as a reshape's)
      elif op == "while":
        vals[instr] = self._plan_while(instr, vals, steps, want, last_use, pos)
      elif op == "conditional":
        w = want.get(instr)
        if instr.shape.is_tuple:     # (its elements that are results, planned in place)
          w = tuple(want.get(("elem", instr, k)) for k in range(len(instr.shape.tuple_shapes)))
        vals[instr] = self._plan_conditional(instr, vals, steps, w)
      else:
        self._group = instr
        try:
          vals[instr] = self._plan_group(instr, vals, steps, want, last_use, pos, comp)
        finally:
          self._group = None
    self._place(steps, vals[root], outs)
    return steps

  def _place(self, steps, src, dst):
    """Copy the value tree ``src`` into the buffer tree ``dst`` (skipping identical buffers).
    A loop's next state computed in a temporary of the body (``share_loop_next``) is not
    copied: the copy back to the state reads it there (``_copy_back``)."""
    if isinstance(dst, tuple):
      for a, d in zip(src, dst):
        self._place(steps, a, d)
      return
    # (not inside a conditional's branches: the other branches write the next buffer itself)
    if (id(dst) in self._loop_next and isinstance(src, K.Buf) and src.kind == "temp"
        and src is not dst and self._body_starts and not self._in_branches
        and any(t is src for t in self.temps[self._body_starts[-1]:])):
      # (a value of the body, not the state: a body permuting its state elements needs its
      # next buffers, or copying back would overwrite a state element before it is read)
      self._next_src[id(dst)] = src
      return
    if src is not dst:
      self._copy_into(steps, src, dst)

  def _last_uses(self, comp):
    """instr -> position of its last use, counting uses through aliases (tuple/gte/reshape) and
    the root (infinity)."""
    pos = {i: k for k, i in enumerate(comp.instructions)}
    alias_of = {}
    for i in comp.instructions:
      if i.opcode in ("get-tuple-element", "reshape", "tuple"):
        alias_of[i] = [o for o in i.operands]
      elif _reshape_view(i) is not None:
        alias_of[i] = [_reshape_view(i)]
    last = {}

    def bases(i):
      out, stack = set(), [i]
      while stack:
        x = stack.pop()
        if x in alias_of:
          stack.extend(alias_of[x])
        else:
          out.add(x)
      return out
    for i in comp.instructions:
      for o in i.operands:
        for base in bases(o):
          last[base] = max(last.get(base, -1), pos[i])
    for base in bases(comp.root):
      last[base] = math.inf
    for i in comp.instructions:   # an alias that is itself used later extends its bases
      if i in alias_of:
        for base in bases(i):
          last[base] = max(last.get(base, -1), last.get(i, -1))
    return last

  def _plan_group(self, instr, vals, steps, want, last_use, pos, comp):
    op = instr.opcode
    if op == "fusion":
      fc = instr.attrs["calls"]
      instrs = fc.instructions
      leafmap = {p: vals[o] for p, o in zip(fc.parameters, instr.operands)}
      for i in instrs:
        if i.opcode == "constant" and i.attrs["value"].ndim > 0:
          leafmap[i] = self.const_buf(i)
      root = fc.root
      if self.reuse_buffers and self.computed:
        from ourjax.backends.llvm import reuse
        operand = dict(zip(fc.parameters, instr.operands))
        reuse.seed_computed(self, reuse.value_keys(fc, operand.__getitem__), leafmap)
        reuse.check_clobbered(self, fc, leafmap, [fc.root])
    else:
      instrs = [instr]
      leafmap = {o: vals[o] for o in instr.operands}
      root = instr
    # result buffers
    inplace = self._forced.get(instr)
    if inplace is None:
      inplace = self._inplace_target(instr, root, leafmap, vals, last_use, pos, comp,
                                     want.get(instr))
    if inplace is not None:
      res = inplace
    elif op == "scatter" and \
        self._dying_operand(instr, vals, last_use, pos, comp, want.get(instr)) is not None:
      res = vals[instr.operands[0]]      # (updated in place: no copy of the operand)
    elif instr.shape.is_tuple:
      res = tuple(want.get(("elem", instr, k)) or self.temp(s.dtype, s.dims, f"{instr.name}.{k}")
                  for k, s in enumerate(instr.shape.tuple_shapes))
      if any(isinstance(s, hlo.Shape) and s.is_tuple for s in instr.shape.tuple_shapes):
        raise K.PlanError(f"nested tuple result of %{instr.name}")
    else:
      res = want.get(instr) or self.temp(instr.dtype, instr.dims, instr.name)
    if inplace is not None:
      kern = K.DynamicUpdateInPlace(self._kname(), root, inplace,
                                    K._restrict_many(leafmap, [(root.operands[1], None)] +
                                                     [(o, None) for o in root.operands[2:]]))
      self._add_kernel(steps, kern)
      return res
    tuple_root = op == "fusion" and root.opcode == "tuple"
    roots = root.operands if tuple_root else [root]

    def outputs(res):
      return list(zip(roots, res)) if tuple_root else [(root, res)]
    shared, planned = [], res
    if self.reuse_buffers and not (op == "scatter" and res is vals[instr.operands[0]]):
      from ourjax.backends.llvm import reuse
      wanted = {id(w) for w in want.values()
                if isinstance(w, K.Buf) and id(w) not in self._loop_next}
      fresh = {id(b) for b in (res if isinstance(res, tuple) else [res])
               if isinstance(b, K.Buf) and b.kind == "temp" and id(b) not in wanted}
      res, shared = reuse.share_results(instr, res, fresh, vals, last_use, pos, comp,
                                        self._forwarded.get(instr, ()))
    kernels = self._group_kernels(instrs, outputs(res), leafmap)
    if shared and not all(overwrites_in_place(kernels, b, [roots[k]], False)
                          for b, k in shared):
      # (the kernels read the operand elsewhere than where they write: the group's own
      # buffers, and a copy into an output its operand was computed in)
      res = planned
      copies = []
      if isinstance(res, tuple):
        res = list(res)
        for b, k in shared:
          if res[k] is b:
            res[k] = self.temp(b.dtype, b.dims, f"{instr.name}.{k}")
            copies.append((res[k], b))
        res = tuple(res)
      elif any(res is b for b, _ in shared):
        res = self.temp(res.dtype, res.dims, instr.name)
        copies.append((res, planned))
      kernels = self._group_kernels(instrs, outputs(res), leafmap)
      kernels += [K.CopyKernel(self._kname(), src, dst) for src, dst in copies]
      res = planned
    for kern in kernels:
      self._add_kernel(steps, kern)
    return res

  def _group_kernels(self, instrs, outputs, leafmap) -> list:
    """The planned kernels of one group (a backend may rearrange them)."""
    planner = K.GroupPlanner(self.temp, self.scratch, MAX_THREADS, self._kname(),
                             widen_narrow_dots=self.widen_narrow_dots,
                             concat_kernels=self.concat_kernels, threads=self.threads(),
                             dot_accumulate=self.dot_accumulate,
                             reuse_outputs=self.reuse_buffers,
                             # (inside a loop or a branch, the CPU's entry may call a parallel
                             # kernel whole: its per-thread scratch then fits the whole call)
                             whole_calls=getattr(self, "_depth", 1) > 1,
                             share_packed_b=self.share_packed_b)
    return planner.plan(instrs, outputs, leafmap)

  def _dying_operand(self, instr, vals, last_use, pos, comp, target=None):
    """The temporary buffer of ``instr``'s operand 0 when ``instr`` is its last reader and
    reads it through nothing else (a scatter may then update it in place, as XLA's does); None
    otherwise.  ``target``: the buffer the result is to be written into; the operand's buffer
    must then be that one (``reuse.forward_outputs`` computed the operand there)."""
    top = instr.operands[0]
    spec = vals.get(top)
    if not isinstance(spec, K.Buf) or (spec is not target if target is not None else
                                       spec.kind != "temp"):
      return None
    if not _dies_at(top, comp, last_use, pos):
      return None
    if any(vals.get(o) is spec for o in instr.operands[1:]):
      return None
    return spec

  def _inplace_target(self, instr, root, leafmap, vals, last_use, pos, comp, target=None):
    """The operand buffer a dynamic-update-slice may update in place, or None.  ``target``:
    the buffer the result is to be written into; when that is the operand's own (a donated
    parameter the result is aliased to, ``backends/donation.py``, which made sure nothing
    reads it afterwards), the update happens there."""
    if root.opcode != "dynamic-update-slice" or instr.shape.is_tuple:
      return None
    operand = root.operands[0]
    spec = leafmap.get(operand)
    if not isinstance(spec, K.Buf):
      return None
    # the top-level instruction whose buffer this is must be used last here
    top = operand if instr.opcode != "fusion" else \
        instr.operands[instr.attrs["calls"].parameters.index(operand)]
    if spec.kind == "param" and spec is target:
      pass
    elif spec.kind != "temp":
      return None
    else:
      if not _dies_at(top, comp, last_use, pos):
        return None
    if any(vals.get(o) is spec for o in instr.operands if o is not top):
      return None
    if instr.opcode == "fusion":   # the fused update must not read the operand
      reach = K._reachable(root.operands[1:], {})
      if id(operand) in reach or operand.users != [root]:
        return None
    return spec

  def _plan_while(self, instr, vals, steps, want, last_use, pos):
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    init = vals[instr.operands[0]]
    passthrough = self._passthrough(body)
    # state buffers: a pass-through element stays in its initial buffer (never written); an
    # initial temporary that dies here becomes the state (of the first element it starts, the
    # others copy it before the loop: a scan's stacked outputs all start from one array of
    # zeros); a result that is an entry output lives in the output buffer; anything else gets
    # a buffer of its own
    if isinstance(init, tuple) and instr.shape.is_tuple:
      init_instr = instr.operands[0]
      if init_instr.opcode == "tuple":     # (each element's own array dies here or not)
        dies = [_dies_at(o, instr.parent, last_use, pos) for o in init_instr.operands]
      else:
        dies = [last_use.get(init_instr, math.inf) == pos] * len(init)
      outs = [want.get(("elem", instr, k)) for k in range(len(init))]
      taken = {id(v) for k, v in enumerate(init)      # (read by the body as it is)
               if isinstance(v, K.Buf) and k in passthrough and outs[k] is None}
      elems = []
      for k, (v, shp) in enumerate(zip(init, instr.shape.tuple_shapes)):
        out = outs[k]
        if isinstance(v, K.Buf) and k in passthrough and out is None:
          elems.append(v)
        elif (isinstance(v, K.Buf) and v.kind == "temp" and dies[k] and id(v) not in taken
              and out is None and not shp.is_tuple):
          taken.add(id(v))
          elems.append(v)
        elif isinstance(out, K.Buf):
          elems.append(out)
        else:
          elems.append(self._new_tree(shp, f"{instr.name}.state.{k}"))
      state = tuple(elems)
    else:
      state = self._new_tree(instr.shape, instr.name + ".state")
    self._place(steps, init, state)
    pred = self.temp(np.bool_, (), instr.name + ".pred")
    cond_steps = self.plan_computation(cond, [state], pred, direct=True)
    forced = self._body_inplace(body, state)
    in_place = {id(b) for b in forced.values()}
    # results also computed in their state buffers, as planned and checked below
    own = self._own_index_candidates(body, state, passthrough, forced) \
        if self.state_updates_in_place else set()
    next_tree = self._new_tree(instr.shape, instr.name + ".next")
    if self.share_loop_next:
      self._loop_next.update((id(b), b) for b in _flat(next_tree) if isinstance(b, K.Buf))
    while True:
      for b in _flat(next_tree):      # (where a planning attempt left a next state: not yet)
        self._next_src.pop(id(b), None)
      body_out = next_tree
      if isinstance(body_out, tuple):
        body_out = tuple(st if isinstance(st, K.Buf) and (id(st) in in_place or k in passthrough
                                                          or k in own)
                         else bo for k, (st, bo) in enumerate(zip(state, body_out)))
      mark = (len(self.kernels), len(self.temps))
      self._body_starts.append(mark[1])
      try:
        body_steps = self.plan_computation(body, [state], body_out, direct=True, forced=forced)
      finally:
        self._body_starts.pop()
      # copy the next state back (skipping elements the body passes through)
      copies = self._copy_back(body, body_out, state, body_steps)
      bad = {k for k in own
             if not self._state_in_place_ok(body_steps, state[k], _old_readers(body, k))}
      if not bad:
        break
      # plan the body again with those results in their next buffers
      del self.kernels[mark[0]:]
      del self.temps[mark[1]:]
      own -= bad
    from ourjax.lowering import loops
    steps.append(WhileStep(cond_steps, pred, body_steps, loops.trip_count(instr), instr.name,
                           copies))
    return state

  @staticmethod
  def _passthrough(body) -> set:
    """Positions of the state the body returns unchanged (root element k is gte(param, k))."""
    root, p = body.root, body.parameters[0]
    if root.opcode != "tuple":
      return set()
    return {k for k, e in enumerate(root.operands)
            if e.opcode == "get-tuple-element" and e.operands[0] is p and e.attrs["index"] == k}

  def _body_inplace(self, body, state):
    """Root elements of a while body that update their own state element with a
    dynamic-update-slice nobody reads the old state after: {instruction: state buffer}."""
    root = body.root
    if root.opcode != "tuple" or not isinstance(state, tuple):
      return {}
    p = body.parameters[0]
    pos = {i: n for n, i in enumerate(body.instructions)}

    def reads_state(i, k):   # gte(p, k) or an alias of it
      while i.opcode == "reshape":
        i = i.operands[0]
      return (i.opcode == "get-tuple-element" and i.operands[0] is p
              and i.attrs["index"] == k)
    out = {}
    for k, e in enumerate(root.operands):
      if root.operands.count(e) != 1 or not isinstance(state[k], K.Buf):
        continue
      if e.opcode == "dynamic-update-slice":
        target, others = e.operands[0], e.operands[1:]
      elif e.opcode == "fusion" and e.attrs["calls"].root.opcode == "dynamic-update-slice":
        fc = e.attrs["calls"]
        fop = fc.root.operands[0]
        if fop.opcode != "parameter" or fop.users != [fc.root]:
          continue
        n = fc.parameters.index(fop)
        target = e.operands[n]
        others = [o for j, o in enumerate(e.operands) if j != n]
      else:
        continue
      if not reads_state(target, k) or any(reads_state(o, k) for o in others):
        continue
      readers = [u for i in body.instructions if reads_state(i, k) for u in i.users]
      if any(pos.get(u, -1) > pos[e] for u in readers if u is not root):
        continue
      out[e] = state[k]
    return out

  @staticmethod
  def _own_index_candidates(body, state, passthrough, forced) -> set:
    """Positions k of a while body's result that may be computed straight into state buffer k
    (no next buffer, no copy back): an array instruction of the state element's type whose
    old value is no other result; ``_state_in_place_ok`` then checks the planned steps."""
    root = body.root
    if root.opcode != "tuple" or not isinstance(state, tuple):
      return set()
    p = body.parameters[0]

    def reads_state(i, k):   # gte(p, k) or a reshape of it
      while i.opcode == "reshape":
        i = i.operands[0]
      return (i.opcode == "get-tuple-element" and i.operands[0] is p
              and i.attrs["index"] == k)
    out = set()
    for k, e in enumerate(root.operands):
      st = state[k]
      # (an element of a multi-output fusion's result is planned straight into its buffer
      # too, ``want[("elem", fusion, i)]``; not one of the state's, a tuple's or a loop's)
      gte_ok = (e.opcode == "get-tuple-element"
                and e.operands[0].opcode not in ("parameter", "tuple", "get-tuple-element",
                                                 "while", "conditional"))
      if (k in passthrough or e in forced or not isinstance(st, K.Buf)
          or root.operands.count(e) != 1 or e.shape.is_tuple
          or (e.opcode == "get-tuple-element" and not gte_ok)
          or e.opcode in ("parameter", "constant", "reshape", "tuple", "while", "conditional")
          or tuple(e.dims) != tuple(st.dims) or np.dtype(e.dtype) != st.dtype):
        continue
      if any(reads_state(o, k) for j, o in enumerate(root.operands) if j != k):
        continue                        # (the old state is also a result)
      out.add(k)
    return out

  @staticmethod
  def _state_in_place_ok(steps, buf, old_readers=None) -> bool:
    """Whether ``steps`` (a loop body's, copies back included) may write ``buf`` while also
    reading it: every step that reads it comes before the first that writes it, or the last
    reader is that writer, an elementwise kernel reading ``buf`` only at the index of the
    element it writes (it loads an element's inputs before storing it) or a dot accumulating
    into ``buf``, as a donated parameter's buffer may take its output
    (``backends/donation.py``).  ``old_readers``: the body's instructions that read the old
    state (``_old_readers``); a kernel of another of the body's instructions that reads
    ``buf`` after the first write reads the new value there (the body's result, computed in
    ``buf``: a reduction of the next state), which the write does not disturb."""
    from ourjax.backends import donation
    last_read, first_write = -1, math.inf
    for t, s in enumerate(steps):
      r, w = set(), set()
      donation._step_buffers(s, r, w)
      if id(buf) in r:
        group = getattr(getattr(s, "kernel", None), "hlo_group", None)
        if not (old_readers is not None and t > first_write and id(buf) not in w
                and group is not None and group.parent is old_readers[0]
                and group not in old_readers[1]):
          last_read = t
      if id(buf) in w and first_write == math.inf:
        first_write = t
    if last_read < first_write:
      return True
    if last_read > first_write:
      return False
    kernel = getattr(steps[last_read], "kernel", None)
    if isinstance(kernel, K.DotKernel) and getattr(kernel, "accumulate", False):
      # C += A @ B reads each element of C where it writes it
      return kernel.out is buf and kernel.lhs is not buf and kernel.rhs is not buf
    if type(kernel) is not K.LoopKernel:
      return False
    dims = tuple(kernel.dims)
    mine = [i for i, b in kernel.outputs if b is buf]
    if (buf.size != math.prod(dims) or len(mine) != 1 or mine[0].shape.is_tuple
        or tuple(mine[0].dims) != dims
        or any(isinstance(b, tuple) and buf in b for _, b in kernel.outputs)):
      return False
    return reads_at_own_index(kernel, buf, dims)

  def _copy_back(self, body, nxt, state, steps):
    """Append the copies of the next state into the state buffers to ``steps``; returns
    their kernels."""
    root = body.root
    p = body.parameters[0]
    copies = []

    def rec(n, s, elem):
      if isinstance(s, tuple):
        sub = elem.operands if elem is not None and elem.opcode == "tuple" else [None] * len(s)
        for k, (a, c) in enumerate(zip(n, s)):
          rec(a, c, sub[k] if k < len(sub) else None)
        return
      if (elem is not None and elem.opcode == "get-tuple-element"
          and elem.operands[0] is p and s is state[elem.attrs["index"]]):
        return   # passes the state element through unchanged
      if n is s:
        return   # updated in place
      n = self._next_src.get(id(n), n)     # (computed in a temporary of the body)
      copies.append(K.CopyKernel(self._kname(), n, s))
      self._add_kernel(steps, copies[-1])
    rec(nxt, state, root)
    return copies

  def _plan_conditional(self, instr, vals, steps, want):
    sel = self._as_buf(vals[instr.operands[0]], instr.operands[0], steps)
    out = self._new_tree(instr.shape, instr.name, None)
    if isinstance(want, K.Buf):
      out = want
    elif isinstance(want, tuple) and isinstance(out, tuple):
      # the branches compute the elements that are results straight into their buffers (not
      # into temporaries copied there after the conditional): an entry output or a loop's
      # next state, which no branch reads; not a donated argument's buffer or a loop's state
      out = tuple(w if isinstance(w, K.Buf) and isinstance(o, K.Buf) and (
          (w.kind == "output" and not w.donated) or id(w) in self._loop_next) else o
          for w, o in zip(want, out))
    branches = []
    self._in_branches += 1
    try:
      for comp, operand in zip(instr.attrs["branches"], instr.operands[1:]):
        branches.append(self.plan_computation(comp, [vals[operand]], out, direct=True))
    finally:
      self._in_branches -= 1
    steps.append(CondStep(sel, branches, instr.name))
    return out


def _old_readers(body, k):
  """(body, {instructions of ``body`` that read state element ``k`` as it was when the
  iteration began}): the users of ``get-tuple-element(param, k)`` through the instructions
  that only alias a buffer (reshapes, tuples and their elements, reshape-only fusions), and
  anything that passes the state on (loops, conditionals, calls)."""
  p = body.parameters[0]
  seen, readers = set(), set()
  stack = [i for i in body.instructions if i.opcode == "get-tuple-element"
           and i.operands[0] is p and i.attrs["index"] == k]
  stack.append(p)       # (the whole state, read as a tuple)
  while stack:
    i = stack.pop()
    if id(i) in seen:
      continue
    seen.add(id(i))
    for u in i.users:
      if u.opcode in ("reshape", "tuple", "get-tuple-element") or _reshape_view(u) is i:
        if u.opcode == "get-tuple-element" and i is p and u.attrs["index"] != k:
          continue
        stack.append(u)
      readers.add(u)
  return body, readers


def _dies_at(top, comp, last_use, pos) -> bool:
  """Whether the buffer of ``top`` (seen through reshapes and tuple elements) is a temporary
  whose last reader is the instruction at ``pos``."""
  base = top
  while base.parent is comp:
    if base.opcode in ("reshape", "get-tuple-element"):
      base = base.operands[0]
    elif _reshape_view(base) is not None:
      base = _reshape_view(base)
    else:
      break
  if base.opcode in ("parameter", "constant", "while", "conditional", "tuple"):
    return False
  return last_use.get(base, math.inf) == pos


def _reshape_view(instr):
  """The operand that ``instr`` only reshapes, when it is a fusion of reshapes of one of its
  operands (the fusion pass puts a reshape with nothing to fuse in a fusion of its own), else
  None.  Like a reshape, it is planned as a view of that operand's buffer (a reshape keeps the
  row-major order of the elements), not as a kernel that copies it."""
  if instr.opcode != "fusion":
    return None
  fc = instr.attrs["calls"]
  x = fc.root
  while x.opcode == "reshape":
    x = x.operands[0]
  if x is fc.root or x.opcode != "parameter":
    return None
  return instr.operands[fc.parameters.index(x)]


def _proxy(buf: K.Buf) -> hlo.Instruction:
  """A stand-in instruction of ``buf``'s shape (the key of an immediate's leaf)."""
  return hlo.Instruction("constant", [], hlo.Shape(buf.dtype, buf.dims),
                         {"value": np.zeros((), buf.dtype)})



def entry_buffers(entry: hlo.Computation):
  """The entry's argument buffers: parameters in slots 0..n-1, then one output buffer per
  result.  Returns (params, outs, result) where result is outs' tuple or single buffer."""
  params = []
  for k, p in enumerate(entry.parameters):
    b = K.Buf(p.dtype, p.dims, p.name, kind="param")
    b.slot = k
    params.append(b)
  root = entry.root.shape
  shapes = list(root.tuple_shapes) if root.is_tuple else [root]
  outs = []
  for j, s in enumerate(shapes):
    b = K.Buf(s.dtype, s.dims, f"out{j}", kind="output")
    b.slot = len(params) + j
    outs.append(b)
  return params, outs, (tuple(outs) if root.is_tuple else outs[0])


def plan_entry(module: hlo.Module, make_planner, copy_kinds=(K.CopyKernel,),
               elementwise_kinds=(K.LoopKernel,), reorder: bool = False):
  """(planner, steps, parameter Bufs, output Bufs, aliases) of ``module``'s entry, outputs
  written into donated parameters' buffers as ``module.input_output_alias`` asks
  (``backends/donation.py``; ``aliases``: its ``(j, k, "direct" | "copy")``).
  ``make_planner(module)`` makes a planner (the GPU backend's translates kernels as they come,
  so its kinds of copy and elementwise kernels are its own).  ``reorder``: first run the entry
  in the order ``llvm/schedule.py`` picks for memory (``OURJAX_SCHEDULE=0``: not)."""
  from ourjax.backends import donation
  if reorder and os.environ.get("OURJAX_SCHEDULE", "1") != "0":
    from ourjax.backends.llvm import schedule
    if schedule.reorder(module.entry):
      module.note("schedule", "entry instructions reordered for a lower peak of temporaries")

  def plan(outs_for):
    planner = make_planner(module)
    params, outs, result = entry_buffers(module.entry)
    for j in getattr(module, "input_output_alias", None) or {}:
      outs[j].donated = True     # (not shared with other values: donation decides about it)
    if outs_for is not None:
      chosen = outs_for(params, outs, planner.temp)
      result = tuple(chosen) if isinstance(result, tuple) else chosen[0]
    steps = planner.plan_computation(module.entry, params, result, direct=True)
    return planner, steps, params, outs

  def add_copy(planner, steps, src, dst):
    planner._add_kernel(steps, K.CopyKernel(planner._kname(), src, dst))
  return donation.plan_with_aliases(module, plan, add_copy, elementwise_kinds, copy_kinds)



def reads_at_own_index(kernel, buf, dims, reshapes: bool = False, rows: bool = False) -> bool:
  """Whether the elementwise ``kernel`` (over ``dims``: its ``leafmap`` and ``outputs``) reads
  ``buf`` only at the index of the element it computes: every value depending on ``buf``'s
  leaves is elementwise over ``dims`` (a dynamic-update-slice reads its operand where it
  writes).  Then an output may be written over ``buf`` (donation), or computed by the thread
  that has just finished ``buf``'s element (a GPU reduction's epilogue).  ``reshapes``: also
  through reshapes and leaves of other dims with as many elements (the CPU's loop kernels
  read those at the same row-major linear index).  ``rows``: also through reductions of the
  last dimension that a loop kernel in rows mode computes for each row before storing any of
  its elements (``prefetch_outer``), values over the rows and their broadcasts back along the
  row (a softmax over the last dimension reads ``buf`` only in the row it writes; reshapes
  then keep the last dimension)."""
  dims = tuple(dims)
  size = math.prod(dims)
  rows = rows and getattr(kernel, "rows", False) and len(dims) >= 1
  outer = dims[:-1]
  pre_outer = {id(r) for r in getattr(kernel, "prefetch_outer", ())}

  def row_op(x, deps) -> bool:
    """A value over the rows computed from ``buf`` as a rows-mode kernel allows."""
    if not rows or x.shape.is_tuple:
      return False
    if x.opcode == "reduce":
      return (id(x) in pre_outer and len(x.operands) == 2 and not deps[1] and
              sorted(x.attrs["dimensions"]) == [len(dims) - 1] and
              tuple(x.operands[0].dims) == dims)
    if x.opcode == "broadcast":
      return (tuple(x.dims) == dims and tuple(x.operands[0].dims) == outer and
              list(x.attrs["dimensions"]) == list(range(len(outer))))
    return x.is_elementwise() and tuple(x.dims) == outer and all(
        tuple(o.dims) == outer for o, d in zip(x.operands, deps) if d)

  def same(x_dims) -> bool:
    return tuple(x_dims) == dims or (reshapes and math.prod(x_dims) == size)
  tainted = set()
  for instr, spec in kernel.leafmap.items():
    if isinstance(spec, tuple) and any(x is buf for x in spec):
      return False
    if spec is buf:
      if instr.shape.is_tuple or not same(instr.dims):
        return False
      tainted.add(id(instr))
  memo = {}
  bad = []

  def reads_buf(x) -> bool:
    """Whether ``x`` depends on ``buf`` (noting in ``bad`` a value that does so not
    elementwise)."""
    k = id(x)
    if k in memo:
      return memo[k]
    memo[k] = False
    if x in kernel.leafmap:
      v = k in tainted
    else:
      deps = [reads_buf(o) for o in x.operands]
      v = any(deps)
      dus = x.opcode == "dynamic-update-slice" and deps[0] and not any(deps[1:])
      reshape = reshapes and x.opcode == "reshape" and not x.shape.is_tuple and \
          same(x.dims) and (not rows or tuple(x.dims[-1:]) == dims[-1:])
      if v and not reshape and not row_op(x, deps) and not (
          (x.is_elementwise() or dus) and not x.shape.is_tuple and same(x.dims) and
          all(tuple(o.dims) == tuple(x.dims) for o, d in zip(x.operands, deps) if d)):
        bad.append(x)
    memo[k] = v
    return v
  for instr, _ in kernel.outputs:
    reads_buf(instr)
  for r in list(getattr(kernel, "prefetch_outer", ())) + list(getattr(kernel, "prefetch_elem",
                                                                        ())):
    reads_buf(r)
  return not bad


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
