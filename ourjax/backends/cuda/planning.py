"""Planning for the CUDA backend: the shared planner (``llvm/planning.py``: ``Planner``, buffer
assignment by live ranges; the CPU backend's subclass) with every planned kernel translated
into GPU kernels as it is added (``codegen.translate``), convolution patch matrices read in
place by implicit GEMMs,
double-buffered loops, and independent kernels merged into one launch (``horizontal.py``);
``_plan`` turns the planned steps into the executable's launch program (``program.py``).
"""
from __future__ import annotations

import numpy as np

from ourjax.backends.cuda import codegen, fold_transposes, horizontal, stencil, time_blocking
from ourjax.backends.cuda.program import _renamed
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm import arena
from ourjax.backends.llvm import planning as LP
from ourjax.lowering import hlo
from ourjax.config import env_switch


def _cpu_planning():
  from ourjax.backends.cpu import backend as cpu_backend
  return cpu_backend


def _make_planner(cpu_be, module, info):
  class GpuPlanner(cpu_be._Planner):
    """The CPU backend's planner whose kernels become GPU kernels as they are added."""
    widen_narrow_dots = False   # bf16/f16 dots run on the tensor cores as they are
    concat_kernels = False      # (no GPU translation of concat.ConcatKernel yet)
    implicit_im2col = False     # (the CPU's; patches are read in place here: _implicit_patches)
    # (the CPU's: its GPU translations have no accumulating dot, and loops here are
    # double-buffered instead: _double_buffer)
    dot_accumulate = False
    state_updates_in_place = False
    # (the CPU's: a dot and its elementwise consumer become one kernel here
    # (fuse_dot_epilogues), and the GPU's translations of kernels sharing a buffer in place
    # have not been run on a device)
    reuse_buffers = False
    # (the CPU's: a B packed once by a kernel of its own is the CPU GEMM's panel layout)
    share_packed_b = False

    def _group_kernels(self, instrs, outputs, leafmap):
      # a dot's elementwise consumer (bias, activation) runs in the dot's kernel
      from ourjax.backends.cuda.dots import fuse_dot_epilogues
      kernels = fuse_dot_epilogues(super()._group_kernels(instrs, outputs, leafmap), outputs)
      # sibling column reductions (a batchnorm gradient's sums) read their input once
      return codegen.merge_column_reductions(kernels)

    def _plan_group(self, instr, vals, steps, want, last_use, pos, comp):
      if instr.opcode == "attention":
        return self._attention(instr, vals, steps, want)
      if instr.opcode == "attention-grad":
        return self._attention_grad(instr, vals, steps, want)
      patches = self._implicit_patches(instr, vals, steps, want, comp)
      if patches is not None:
        return patches
      return super()._plan_group(instr, vals, steps, want, last_use, pos, comp)

    def _attention(self, instr, vals, steps, want):
      """An ``attention`` instruction (``lowering/passes/attention.py``) as one
      ``FlashAttention`` kernel over its operands' buffers."""
      from ourjax.backends.cuda.attention import FlashAttention
      (q, k, v), leafmap = self._attention_operands(instr, vals, steps, 3)
      out = want.get(instr) or self.temp(instr.dtype, instr.dims, instr.name)
      kern = FlashAttention(self._kname(), instr, q, k, v, out, leafmap)
      self.kernels.append(self._tag(kern))
      steps.append(LP.KernelStep(kern))
      return out

    def _attention_grad(self, instr, vals, steps, want):
      """An ``attention-grad`` instruction (``lowering/passes/attention_grad.py``) as the two
      ``FlashAttentionGrad`` kernels: dq (and the rows' statistics), then dk and dv."""
      from ourjax.backends.cuda.attention_grad import FlashAttentionGrad
      (q, k, v, o, do), leafmap = self._attention_operands(instr, vals, steps, 5)
      outs = tuple(want.get(("elem", instr, i)) or self.temp(s.dtype, s.dims, f"{instr.name}.{i}")
                   for i, s in enumerate(instr.shape.tuple_shapes))
      rows = int(np.prod(q.dims[:-1], dtype=np.int64))
      stats = self.temp(np.dtype(np.float32), (rows, 2), f"{instr.name}.stats")
      for mode, res in (("q", [outs[0]]), ("kv", [outs[1], outs[2]])):
        kern = FlashAttentionGrad(self._kname(), instr, mode, q, k, v, o, do, stats, res,
                                  leafmap)
        self.kernels.append(self._tag(kern))
        steps.append(LP.KernelStep(kern))
      return outs

    def _implicit_patches(self, instr, vals, steps, want, comp):
      """Convolution patch matrices that their dots read in place from the input
      (``implicit_gemm``): only the inputs are planned (a kernel writes them unless they are
      buffers already) and an ``Im2colBuf`` stands for each matrix (a tuple of them for a
      tuple-rooted fusion of batch chunks); None for other groups."""
      from ourjax.backends.cuda import implicit_gemm as IG
      from ourjax.backends.llvm import im2col as IM
      if instr.opcode != "fusion" or comp.root is instr or instr in want or \
         any(isinstance(k, tuple) and k[1] is instr for k in want):
        return None
      geos = IG.match(instr)
      if geos is None:
        return None
      users = [u for u in comp.instructions if any(o is instr for o in u.operands)]
      if instr.shape.is_tuple:   # each element read by one gte, read by one dot
        if any(u.opcode != "get-tuple-element" for u in users) or \
           sorted(u.attrs["index"] for u in users) != list(range(len(geos))):
          return None
        readers = {u.attrs["index"]: u for u in users}
      else:
        readers = {0: instr}
      for k, geo in enumerate(geos):
        x = readers[k]
        users = [u for u in comp.instructions if any(o is x for o in u.operands)]
        dot, seen_as = _patch_reader(users[0], x) if len(users) == 1 else (None, None)
        if dot is None or not IG.accepts(dot, seen_as, geo, info):
          return None
      fc = instr.attrs["calls"]
      srcs = IM.plan_sources(self, instr, geos, vals, steps)
      self.module.note("implicit_gemm", f"%{instr.name}: {len(geos)} patch matri"
                       f"{'ces' if len(geos) > 1 else 'x'} read in place from "
                       f"{list(geos[0].in_dims)} ({geos[0].taps} kernel positions)")
      out = [IG.Im2colBuf(srcs[id(g.v)], g, r.dims, f"{instr.name}.{k}")
             for k, (g, r) in enumerate(zip(geos, (fc.root.operands if instr.shape.is_tuple
                                                   else [fc.root])))]
      return tuple(out) if instr.shape.is_tuple else out[0]

    def _plan_while(self, instr, vals, steps, want, last_use, pos):
      state = super()._plan_while(instr, vals, steps, want, last_use, pos)
      _double_buffer(steps[-1])
      return state

    def _add_kernel(self, steps, kernel):
      self._tag(kernel)
      for g in codegen.translate(kernel, self.temp, info, cpu_be.MAX_THREADS):
        self.kernels.append(self._tag(g, source=kernel))
        steps.append(LP.KernelStep(g))

  return GpuPlanner(module)


def _patch_reader(user, x):
  """(the dot reading patch matrix ``x`` as its A operand, ``x`` as that dot sees it) when
  ``user`` is a dot, or a dot's kOutput fusion (its epilogue: a scale, a shift, a relu) whose
  dot reads ``x`` and nothing else does; (None, None) otherwise."""
  if user.opcode == "dot":
    return user, x
  if user.opcode != "fusion" or user.attrs.get("kind") != "kOutput":
    return None, None
  where = [i for i, o in enumerate(user.operands) if o is x]
  fc = user.attrs["calls"]
  dots = [i for i in fc.instructions if i.opcode == "dot"]
  if len(where) != 1 or len(dots) != 1:
    return None, None
  p = fc.parameters[where[0]]
  return (dots[0], p) if p.users == [dots[0]] else (None, None)


def _double_buffer(step) -> None:
  """Run the while loop ``step`` double-buffered when it copies a next state back: the copies
  (a device copy per carried array per iteration, e.g. a scan's hidden state or a gradient
  accumulator) give way to renaming, iterations alternating which buffer of each pair holds
  the state (``_plan``'s ``loop``).  ``OURJAX_CUDA_DOUBLE_BUFFER=0`` keeps the copies."""
  if not env_switch("OURJAX_CUDA_DOUBLE_BUFFER"):
    return
  step.double_buffered = bool(step.copies_back)


def _kernels_in(steps) -> list:
  """The kernels of ``steps`` in order, those inside loops and conditionals included."""
  out = []
  for s in steps:
    k = getattr(s, "kernel", None)
    if k is not None:
      out.append(k)
    for sub in [getattr(s, a, None) for a in ("cond_steps", "body_steps")] + list(
        getattr(s, "branches", ())):
      if sub:
        out.extend(_kernels_in(sub))
  return out


def _plan(module: hlo.Module, info: codegen.DeviceInfo):
  cpu_be = _cpu_planning()
  entry = module.entry
  planner, steps, params, outs, aliases = LP.plan_entry(
      module, lambda m: _make_planner(cpu_be, m, info), copy_kinds=(codegen.Copy,),
      elementwise_kinds=(codegen.Elementwise,))
  nparams = len(params)
  # (after donation's planning: an output in a donated parameter's buffer is that parameter's
  # Buf, so merging sees the kernels that read it and the one that writes over it)
  if stencil.enabled():
    steps = stencil.chain_steps(steps, info, LP.KernelStep)
  steps = horizontal.fold_finish_epilogues(steps, LP.KernelStep)
  steps = fold_transposes.fold_output_transposes(steps, LP.KernelStep, _kernels_in)
  if stencil.enabled() and time_blocking.enabled():
    steps = time_blocking.block_loops(steps, planner.temp,
                                      lambda m: module.note("time_blocking", m))
  if horizontal.enabled():
    steps = horizontal.merge_steps(steps, info, LP.KernelStep)
  planner.kernels = _kernels_in(steps)    # (what the transformations left)
  arena_bytes = arena._assign(planner, steps)
  slot = nparams + len(outs)
  consts = []
  for c in planner.consts:
    c.slot = slot
    consts.append((slot, c.const_value))
    slot += 1
  arena_slot = slot
  nslots = slot + 1
  kernels = [k for k in planner.kernels if not k.is_copy]
  index = {id(k): n for n, k in enumerate(kernels)}

  def spec(buf):
    if buf.kind in ("param", "output", "const"):
      return (buf.slot, 0)
    if buf.home is not None:     # (a temporary inside an output not yet written)
      return (buf.home, int(buf.offset))
    return (arena_slot, int(buf.offset))

  def program(steps):
    out = []
    for s in steps:
      if isinstance(s, LP.KernelStep):
        k = s.kernel
        if k.is_copy:
          if k.dst.nbytes:
            out.append(("copy", spec(k.dst), spec(k.src), k.dst.nbytes))
          continue
        sp = [spec(x) for x in k.buffers]
        out.append(("k", index[id(k)], np.array([x[0] for x in sp], np.int64),
                    np.array([x[1] for x in sp], np.uint64)))
      elif isinstance(s, LP.WhileStep):
        out.append(loop(s))
      elif isinstance(s, LP.CondStep):
        out.append(("cond", spec(s.selector), np.dtype(s.selector.dtype),
                    [program(br) for br in s.branches], s.name))
      else:   # pragma: no cover
        raise K.PlanError(f"unknown step {s!r}")
    return out

  def loop(s):
    """A ``repeat`` (trip count known) or host-driven ``while`` op.  A double-buffered loop
    (``_double_buffer``) leaves out the copies of its next state into the state: its odd
    iterations run the body with each (state, next) buffer pair swapped, and ``fixup``
    copies the state into place after an odd number of iterations."""
    skip = {(id(c.src), id(c.dst)) for c in s.copies_back} if s.double_buffered else set()
    body = program([x for x in s.body_steps
                    if not (isinstance(x, LP.KernelStep) and x.kernel.is_copy
                            and (id(x.kernel.src), id(x.kernel.dst)) in skip)])
    cond = program(s.cond_steps)
    odd = odd_cond = None
    fixup = []
    if skip:
      swap = {}
      for c in s.copies_back:
        a, b = spec(c.src), spec(c.dst)
        swap[a], swap[b] = b, a
        fixup.append(("copy", b, a, c.dst.nbytes))
      odd, odd_cond = _renamed(body, swap), _renamed(cond, swap)
    if s.trip_count is not None:
      return ("repeat", s.trip_count, body, odd, fixup)
    return ("while", cond, spec(s.pred), body, s.name, odd_cond, odd, fixup)

  prog = program(steps)
  param_specs = [(p.dtype, p.dims) for p in entry.parameters]
  out_specs = [(np.dtype(o.dtype), tuple(o.dims)) for o in outs]
  return prog, kernels, consts, param_specs, out_specs, arena_bytes, nslots, aliases
