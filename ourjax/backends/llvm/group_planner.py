"""Planning a group (``plan_group``, ``GroupPlanner``): which kernels a group of HLO
instructions (a fusion, or one unfused op) becomes -- dots, sorts, scatters and reductions that
need their own kernels, the loop kernels that evaluate everything else, their leaves and
outputs (see ``kernels``'s module docstring).  Split from ``kernels.py``, which re-exports these
names."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm.kernels import (  # (a module kernels.py imports as it loads)
    HARD_OPS, SPLIT_CHUNKS, Buf, ColumnReduceKernel, CopyKernel, DotKernel, DotSpec,
    Im2colDotKernel, Kernel, LoopKernel, PlanError, ScatterKernel, SortKernel,
    SplitReduceFinish, SplitReducePartials, _cost_per_element, _narrow_float_dot,
    fast_dot_ok)
from ourjax.backends.llvm.dots import PackBKernel, dot_scratch, share_b
from ourjax.lowering import hlo

# ---------------------------------------------------------------------------------------------
# planning a group
# ---------------------------------------------------------------------------------------------

_PREFIX_OPS = (set(hlo.UNARY_OPS) | set(hlo.BINARY_OPS) |
               {"compare", "select", "clamp", "convert", "copy"})


def _operand_class(instr, o, k):
  """How many leading index components of ``o`` equal the kernel's index prefix when ``instr``
  is evaluated at an index whose first ``k`` components are that prefix."""
  op = instr.opcode
  if op in _PREFIX_OPS:
    return k if o.dims == instr.dims else 0
  if op == "bitcast-convert" and o.dims == instr.dims:
    return k
  if op == "broadcast":
    dims = instr.attrs["dimensions"]
    m = 0
    for i, d in enumerate(dims):
      if d == i and o.dims[i] == instr.dims[i]:
        m += 1
      else:
        break
    return min(k, m)
  if op == "reduce":
    n = len(instr.operands) // 2
    if o in instr.operands[n:]:
      return 0
    rd = sorted(instr.attrs["dimensions"])
    lead = rd[0] if rd else len(o.dims)
    return min(k, lead)
  if op in ("tuple", "get-tuple-element"):
    return k
  return 0


def _index_classes(roots, instrs, leafmap):
  """instr -> the smallest prefix class over all its uses (see ``_operand_class``)."""
  cls = {}
  for r, k in roots:
    cls[r] = min(cls.get(r, k), k)
  for instr in reversed(instrs):
    if instr not in cls or instr in leafmap:
      continue
    k = cls[instr]
    for o in instr.operands:
      if o in leafmap:
        continue
      ko = _operand_class(instr, o, k)
      cls[o] = min(cls.get(o, ko), ko)
  return cls


def _linear_index_suffices(outs, leafmap, dims) -> bool:
  """Whether a loop kernel over ``dims`` computes ``outs`` from values at its own linear index
  only (elementwise ops over ``dims``, scalars): a flat loop then needs no position.  Otherwise
  (broadcasts, transposes, slices, iota, ...) a flat loop divides its index by the dimensions
  at every element and does not vectorize (a (128, 128, 10) outer product of per-example
  gradients: 4 ns an element); rows mode nests a loop over the last dimension instead."""
  stack = [i for i, _ in outs]
  seen = set()
  while stack:
    x = stack.pop()
    if id(x) in seen or x in leafmap or not x.dims:
      continue
    seen.add(id(x))
    if x.opcode == "broadcast" and not x.operands[0].dims:
      continue
    if x.shape.is_tuple or tuple(x.dims) != tuple(dims) or not (
        x.is_elementwise() or x.opcode in ("convert", "copy", "bitcast-convert")):
      return False
    stack.extend(x.operands)
  return True


class GroupPlanner:
  """Plans the kernels of one group.  ``new_temp(dtype, dims, name) -> Buf`` makes arena
  buffers; ``max_threads`` sizes per-thread scratch."""

  def __init__(self, new_temp: Callable, new_scratch: Callable, max_threads: int, prefix: str,
               widen_narrow_dots: bool = True, concat_kernels: bool = True, threads: int = 1,
               dot_accumulate: bool = False, reuse_outputs: bool = False,
               whole_calls: bool = False, share_packed_b: bool = False):
    self.new_temp, self.new_scratch = new_temp, new_scratch
    # a dot's pieces read B packed once (dots.share_b, PackBKernel; CPU only)
    self.share_packed_b = share_packed_b
    # the kernels may also be called whole (one piece of one; dots.dot_scratch)
    self.whole_calls = whole_calls
    # a dot whose one consumer is an elementwise output of the group is computed in that
    # output's buffer, which the consumer then updates in place (``_dot_home``), and a sort's
    # scratch is sized for the pieces it runs as (CPU only)
    self.reuse_outputs = reuse_outputs
    # out = out + dot as one accumulating GEMM (DotKernel.accumulate; CPU only for now)
    self.dot_accumulate = dot_accumulate
    self.threads = min(threads, max_threads)   # the host's (DotKernel.chunks)
    # f16/bf16 dots go through the f32 GEMM on the CPU; a GPU has narrow-type tensor cores
    self.widen_narrow_dots = widen_narrow_dots
    # many-part concatenations written part by part (concat.ConcatKernel; CPU only for now)
    self.concat_kernels = concat_kernels
    self.max_threads = max_threads
    self.prefix = prefix
    self.count = 0
    self.kernels: list[Kernel] = []

  def _name(self):
    self.count += 1
    return f"{self.prefix}_{self.count}"

  def plan(self, instrs: Sequence[hlo.Instruction], outputs: Sequence, leafmap: dict):
    """``instrs`` in topological order; ``outputs`` (instr, Buf) pairs; ``leafmap`` instr ->
    Buf | tuple of Buf | ('imm', scalar).  Returns the kernels (in order)."""
    self._homes = []
    kernels = self._plan(instrs, outputs, leafmap)
    if self._homes and not all(overwrites_in_place(kernels, b, [o], True)
                               for b, o in self._homes):
      # (an output the kernels would overwrite while something still reads the dot in it:
      # planned again with the dot in a buffer of its own)
      self.reuse_outputs, self.kernels, self.count = False, [], 0
      kernels = self._plan(instrs, outputs, leafmap)
    return kernels

  def _plan(self, instrs, outputs, leafmap):
    leafmap = dict(leafmap)
    instrs = [i for i in instrs if i.opcode != "parameter" or i not in leafmap]
    for i in instrs:
      if i.opcode == "parameter" and i not in leafmap:
        raise PlanError(f"parameter %{i.name} has no buffer")
      if i.opcode == "constant" and i not in leafmap:
        v = i.attrs["value"]
        if v.ndim == 0:
          leafmap[i] = ("imm", v[()])
        else:
          raise PlanError(f"array constant %{i.name} has no buffer")
      if i.opcode in ("while", "conditional", "fusion", "custom-call"):
        raise PlanError(f"{i.opcode} inside a group")
    out_of = {}
    for instr, buf in outputs:
      out_of.setdefault(instr, buf)
    self._out_of, self._leaf_bufs = out_of, leafmap
    # 0. an output that adds a dot to the buffer it is written into (a loop's accumulator,
    #    dW + x^T @ dz, computed in its state buffer): the dot accumulates there
    if self.dot_accumulate:
      for instr, buf in outputs:
        self._accumulating_dot(instr, buf, leafmap, instrs, out_of)
    # 1. hard ops
    for instr in instrs:
      if instr in leafmap or instr.opcode not in HARD_OPS:
        continue
      self._hard(instr, out_of.get(instr), leafmap, instrs)
    # 2. outputs that are leaves already: copies
    pending = []
    for instr, buf in outputs:
      spec = leafmap.get(instr)
      if isinstance(spec, Buf):
        if spec is not buf:
          self.kernels.append(CopyKernel(self._name(), spec, buf))
      else:
        pending.append((instr, buf))
    # 2b. an output that a reduction of the group reads (a bias gradient summing the gate
    #     gradients it also returns) is computed first and read back from its buffer, not
    #     computed again inside the reduction's kernel
    reduced = {id(o) for i in instrs if i.opcode == "reduce" and i not in leafmap
               for o in i.operands[:len(i.operands) // 2]}
    first = [(i, b) for i, b in pending if id(i) in reduced and i.opcode != "reduce"
             and isinstance(b, Buf)]
    for i, b in first:
      self._loop_kernel(_dims(i), [(i, b)], leafmap, instrs)
      leafmap[i] = b
    pending = [pair for pair in pending if pair not in first]
    # 3. reduction outputs with their own strategies, then loop kernels
    rest = []
    for instr, buf in pending:
      if instr.opcode == "reduce" and self._reduce_kernel(instr, buf, leafmap, instrs):
        continue
      rest.append((instr, buf))
    self._loop_kernels(rest, leafmap, instrs)
    return self.kernels

  # -- hard ops --------------------------------------------------------------------------------
  def _materialize(self, instr, leafmap, instrs):
    """A buffer holding ``instr``'s value (computing it with a loop kernel if needed)."""
    spec = leafmap.get(instr)
    if isinstance(spec, Buf):
      return spec
    if instr.shape.is_tuple:
      raise PlanError(f"cannot materialise tuple-shaped %{instr.name}")
    buf = self.new_temp(instr.dtype, instr.dims, instr.name)
    if isinstance(spec, tuple) and spec and spec[0] == "imm":
      self.kernels.append(LoopKernel(self._name(), instr.dims, [(instr, buf)], {instr: spec},
                                     rows=False))
    elif instr.opcode == "reduce" and self._reduce_kernel(instr, buf, leafmap, instrs):
      pass
    else:
      self._loop_kernel(instr.dims, [(instr, buf)], leafmap, instrs)
    leafmap[instr] = buf
    return buf

  def _materialize_reduces_under(self, root, leafmap, instrs):
    """Materialise every reduction ``root`` reads (kernels other than ``LoopKernel`` evaluate
    their operands at arbitrary indices)."""
    below = _reachable([o for o in root.operands], leafmap)
    for i in instrs:
      if id(i) in below and i not in leafmap and i.opcode == "reduce" and i is not root:
        if i.shape.is_tuple:
          raise PlanError(f"variadic reduce %{i.name} under %{root.name}")
        self._materialize(i, leafmap, instrs)

  def _hard(self, instr, out_buf, leafmap, instrs):
    op = instr.opcode
    self._materialize_reduces_under(instr, leafmap, instrs)
    if op == "dot" and fast_dot_ok(instr):
      lhs = self._materialize(instr.operands[0], leafmap, instrs)
      rhs = self._materialize(instr.operands[1], leafmap, instrs)
      out = out_buf or self._dot_home(instr, instrs, leafmap) or \
          self.new_temp(instr.dtype, instr.dims, instr.name)
      spec = DotSpec(instr)
      # (a convolution's patch matrix the planner left unwritten: llvm/gemm_im2col.py)
      kind = Im2colDotKernel if getattr(lhs, "geometry", None) is not None else DotKernel
      im2col = kind is Im2colDotKernel
      packed = None
      if self.share_packed_b and share_b(spec, self.threads, im2col):
        from ourjax.backends.llvm import gemm
        packed = self.new_temp(instr.dtype, (gemm.packed_b_elements(
            "f32" if spec.dtype == E.F32 else "f64", spec.N, spec.K),),
            instr.name + ".packed_b")
        self.kernels.append(PackBKernel(self._name(), spec, rhs, packed))
      direct = False
      if im2col:    # (the patch rows read in place: no panel of them packed)
        from ourjax.backends.llvm import gemm_im2col
        direct = gemm_im2col.direct_a(lhs.geometry, spec.N,
                                      "f32" if spec.dtype == E.F32 else "f64")
      scratch = dot_scratch(self.new_scratch, spec, self.threads, instr.name, im2col=im2col,
                            whole=self.whole_calls, b_packed=packed is not None,
                            direct_a=direct)
      self.kernels.append(kind(self._name(), instr, lhs, rhs, out, scratch,
                               threads=self.threads, packed_b=packed))
      leafmap[instr] = out
      return
    if op == "dot" and self.widen_narrow_dots and _narrow_float_dot(instr):
      self._narrow_dot(instr, out_buf, leafmap, instrs)
      return
    if op in ("dot", "convolution"):
      for o in instr.operands:
        if o not in leafmap and o.shape.size > 1:
          self._materialize(o, leafmap, instrs)
      out = out_buf or self.new_temp(instr.dtype, instr.dims, instr.name)
      self.kernels.append(LoopKernel(self._name(), instr.dims, [(instr, out)],
                                     _restrict(leafmap, instr), rows=False))
      leafmap[instr] = out
      return
    if op == "sort":
      ins = [self._materialize(o, leafmap, instrs) for o in instr.operands]
      shapes = instr.shape.tuple_shapes if instr.shape.is_tuple else [instr.shape]
      if instr.shape.is_tuple:
        outs = list(out_buf) if isinstance(out_buf, tuple) else [
            self.new_temp(s.dtype, s.dims, f"{instr.name}.{k}") for k, s in enumerate(shapes)]
      else:
        outs = [out_buf or self.new_temp(instr.dtype, instr.dims, instr.name)]
      dims = instr.operands[0].dims
      d = instr.attrs.get("dimension", 0) if dims else 0
      n = dims[d] if dims else 1
      scratch = self.new_scratch(2 * n * 8 * self.max_threads + 64, instr.name)
      kern = SortKernel(self._name(), instr, ins, outs, scratch)
      if self.reuse_outputs:
        # (the CPU runs it as ``chunks`` pieces, each with its own two position arrays; the
        # GPU's fallback runs ``max_threads`` threads)
        scratch.nbytes = 2 * n * 8 * kern.chunks + 64
      self.kernels.append(kern)
      leafmap[instr] = tuple(outs) if instr.shape.is_tuple else outs[0]
      return
    if op == "scatter":
      operand, indices, updates = instr.operands
      src = self._materialize(operand, leafmap, instrs)
      self._materialize(indices, leafmap, instrs)
      self._materialize(updates, leafmap, instrs)
      out = out_buf or self.new_temp(instr.dtype, instr.dims, instr.name)
      if src is not out:
        self.kernels.append(CopyKernel(self._name(), src, out))
      self.kernels.append(ScatterKernel(self._name(), instr, out, _restrict(leafmap, instr)))
      leafmap[instr] = out
      return
    raise PlanError(f"no kernel for {op}")

  def _dot_home(self, d, instrs, leafmap):
    """The buffer of an output ``o`` of the group that the dot ``d`` may be computed in (None
    when there is none): ``o`` depends on ``d`` only through elementwise operations over its
    shape (``reuse.outputs_reached``: its loop kernel reads each element of ``d`` where it
    writes that element of ``o``), and ``o``'s buffer, of ``d``'s dtype, is an arena
    temporary or the caller's output (not a donated parameter's, which
    ``backends/donation.py`` decides about) that the group does not read.  Then ``d`` needs
    no temporary of its own, as in XLA's buffer assignment.  ``plan`` checks the kernels that
    result (``overwrites_in_place``)."""
    if not self.reuse_outputs or d in self._out_of or d.shape.is_tuple:
      return None
    from ourjax.backends.llvm.reuse import outputs_reached
    found = outputs_reached([d], instrs, lambda u: u in self._out_of)
    for o in found or ():
      buf = self._out_of[o]
      if not isinstance(buf, Buf) or buf.kind not in ("temp", "output") or buf.donated or \
         buf.dtype != np.dtype(d.dtype) or getattr(buf, "source", None) is not None or \
         sum(1 for b in self._out_of.values() if b is buf) != 1 or \
         any(b is buf for b, _ in self._homes) or any(
             spec is buf or (isinstance(spec, tuple) and any(x is buf for x in spec))
             for spec in self._leaf_bufs.values()):
        continue
      self._homes.append((buf, o))
      return buf
    return None

  def _accumulating_dot(self, instr, buf, leafmap, instrs, out_of) -> bool:
    """Plan output ``instr = add(x, dot)`` (either order) whose ``x`` is read from ``buf``,
    the buffer ``instr`` is written into, as one ``DotKernel`` accumulating into ``buf``
    (the packed GEMM's ``C += A @ B``: the sum rounds as C + partial sums, not as x + the whole
    sum; within a dot's rounding).  The dot's operands must not be ``buf``."""
    if (instr.opcode != "add" or instr in leafmap or instr.shape.is_tuple
        or not isinstance(buf, Buf) or instr.dtype not in (E.F32, E.F64)):
      return False
    for d, x in (instr.operands, instr.operands[::-1]):
      # (x read by nothing else of the group: the dot writes buf before the group's other
      # kernels run; a donated parameter's buffer is only checked on the plan without this)
      if (d.opcode == "dot" and d not in leafmap and d not in out_of and d.users == [instr]
          and leafmap.get(x) is buf and x.users == [instr] and d.dtype == instr.dtype
          and tuple(d.dims) == tuple(instr.dims) and fast_dot_ok(d)):
        break
    else:
      return False
    from ourjax.backends.llvm.dots import _gemm_layout_ok
    spec = DotSpec(d)
    if not _gemm_layout_ok(spec):
      return False
    self._materialize_reduces_under(d, leafmap, instrs)
    lhs = self._materialize(d.operands[0], leafmap, instrs)
    rhs = self._materialize(d.operands[1], leafmap, instrs)
    if lhs is buf or rhs is buf:
      return False        # (operands materialised meanwhile stay: they are computed once)
    scratch = dot_scratch(self.new_scratch, spec, self.threads, d.name, whole=self.whole_calls)
    self.kernels.append(DotKernel(self._name(), d, lhs, rhs, buf, scratch, threads=self.threads,
                                  accumulate=True))
    leafmap[instr] = buf
    leafmap[d] = buf      # (read by nothing else: its one user is ``instr``)
    return True

  def _narrow_dot(self, instr, out_buf, leafmap, instrs):
    """f16/bf16 dot: the operands widened to f32 buffers, the packed f32 GEMM (f32 is the
    accumulation type, as the reference's), then the result rounded to its type."""
    f32 = hlo.Shape(np.float32, ())
    conv = []
    for o in instr.operands:
      c = hlo.Instruction("convert", [o], f32.with_dims(o.dims), name=f"{o.name}.f32")
      buf = self.new_temp(np.float32, o.dims, c.name)
      self.kernels.append(LoopKernel(self._name(), o.dims, [(c, buf)], _restrict(leafmap, o)
                                     if o in leafmap else _restrict(leafmap, c),
                                     rows=len(o.dims) >= 2 and o.dims[-1] >= 16))
      leafmap[c] = buf
      conv.append(c)
    wide = hlo.Instruction("dot", conv, f32.with_dims(instr.dims), dict(instr.attrs),
                           name=f"{instr.name}.f32")
    wide.attrs.pop("preferred_element_type", None)
    if instr.dtype == E.F32 and out_buf is not None:
      res = out_buf
    else:
      res = self.new_temp(np.float32, instr.dims, wide.name)
    spec = DotSpec(wide)
    scratch = dot_scratch(self.new_scratch, spec, self.threads, wide.name,
                          whole=self.whole_calls)
    self.kernels.append(DotKernel(self._name(), wide, leafmap[conv[0]], leafmap[conv[1]], res,
                                  scratch, threads=self.threads))
    leafmap[wide] = res
    if res is out_buf:
      leafmap[instr] = res
      return
    out = out_buf or self.new_temp(instr.dtype, instr.dims, instr.name)
    back = hlo.Instruction("convert", [wide], instr.shape, name=f"{instr.name}.round")
    self.kernels.append(LoopKernel(self._name(), instr.dims, [(back, out)], {wide: res},
                                   rows=len(instr.dims) >= 2 and instr.dims[-1] >= 16))
    leafmap[instr] = out

  # -- reductions ------------------------------------------------------------------------------
  def _reduce_kernel(self, r, buf, leafmap, instrs) -> bool:
    n = len(r.operands) // 2
    if n != 1 or not isinstance(buf, Buf):
      return False
    src = r.operands[0].dims
    rd = sorted(r.attrs["dimensions"])
    if not rd or math.prod(src) == 0:
      return False
    contiguous = rd == list(range(rd[0], rd[-1] + 1))
    trailing = contiguous and rd[-1] == len(src) - 1
    if contiguous and not trailing:
      self._materialize_reduces_under(r, leafmap, instrs)
      self.kernels.append(ColumnReduceKernel(self._name(), r, buf, _restrict(leafmap, r)))
      return True
    op = E.simple_reducer(r.attrs["to_apply"])
    count = math.prod(src[d] for d in rd)
    if trailing and op is not None and r.shape.size <= 4 and count >= (1 << 15):
      self._materialize_reduces_under(r, leafmap, instrs)
      parts = self.new_temp(r.dtype, (SPLIT_CHUNKS, r.shape.size), r.name + ".partials")
      self.kernels.append(SplitReducePartials(self._name(), r, parts, _restrict(leafmap, r)))
      self.kernels.append(SplitReduceFinish(self._name(), r, parts, buf, _restrict(leafmap, r)))
      return True
    return False

  # -- loop kernels ------------------------------------------------------------------------------
  def _loop_kernels(self, outputs, leafmap, instrs):
    if not outputs:
      return
    clusters: dict[tuple, list] = {}
    for instr, buf in outputs:
      clusters.setdefault(_dims(instr), []).append((instr, buf))
    # fold clusters of dims D[:-1] into the cluster of D (written once per row)
    for dims in sorted(clusters, key=len, reverse=True):
      if dims not in clusters or len(dims) < 2:
        continue
      outer = dims[:-1]
      if outer in clusters and dims[-1] >= 8:
        clusters[dims].extend(clusters.pop(outer))
    for dims, outs in clusters.items():
      self._loop_kernel(dims, outs, leafmap, instrs)

  def _loop_kernel(self, dims, outs, leafmap, instrs):
    if self.concat_kernels and len(outs) == 1:
      from ourjax.backends.llvm import concat
      root, buf = outs[0]
      seen = _reachable([root], leafmap)
      if concat.wants_concat_kernel(root, leafmap, [i for i in instrs if id(i) in seen]):
        self.kernels.append(concat.ConcatKernel(self._name(), root, buf,
                                                _restrict(leafmap, root),
                                                _cost_per_element(outs, leafmap)))
        return
    rank = len(dims)
    while True:
      has_outer = any(_dims(i) != dims for i, _ in outs)
      roots = [(i, len(_dims(i))) for i, _ in outs]
      cls = _index_classes(roots, instrs, leafmap)
      reduces = [i for i in instrs if i in cls and i not in leafmap and i.opcode == "reduce"]
      want_outer = [r for r in reduces if rank >= 2 and _dims(r) == dims[:-1]
                    and cls[r] == rank - 1]
      rows = rank >= 2 and (has_outer or bool(want_outer) or dims[-1] >= 16 or
                            (dims[-1] >= 4 and not _linear_index_suffices(outs, leafmap, dims)))
      bad = []
      pre_outer, pre_elem = [], []
      for r in reduces:
        k = cls[r]
        if _column_reduce(r) and r not in [i for i, _ in outs]:
          bad.append(r)          # its own vectorized column kernel, read back from a buffer
        elif rows and _dims(r) == dims[:-1] and k == rank - 1:
          pre_outer.append(r)
        elif _dims(r) == dims and k == rank:
          pre_elem.append(r)
        else:
          bad.append(r)
      if not bad:
        break
      self._materialize(bad[0], leafmap, instrs)   # innermost first (topological order)
    self.kernels.append(LoopKernel(self._name(), dims, outs, _restrict_many(leafmap, outs),
                                   rows=rows, prefetch_outer=pre_outer, prefetch_elem=pre_elem))


def overwrites_in_place(kernels, buf, new, writes_old: bool) -> bool:
  """Whether ``kernels`` (a group's, in order) may compute the value of the instructions
  ``new`` into ``buf`` over the value it held (the group's dot's when ``writes_old``, else one
  computed before the group): exactly one kernel writes the new value, the last to write
  ``buf`` (with ``writes_old``, one kernel before it writes the old value); every kernel
  before it reads the old value, every one after it reads ``buf`` only as ``new`` (a
  reduction of the group's output, read back from its buffer); and if that kernel reads the
  old value, it is an elementwise loop kernel with ``buf`` as its one output of its shape
  that reads ``buf`` only at the index of the element it writes, or in rows mode only in the
  row it writes (``planning.reads_at_own_index``: it evaluates an element's outputs before
  storing them, and a row's reductions before storing any of its elements)."""
  from ourjax.backends.llvm.planning import reads_at_own_index
  writers = [k for k, kern in enumerate(kernels) if any(w is buf for w in kern.writes)]
  if len(writers) != (2 if writes_old else 1):
    return False
  last = writers[-1]
  new = {id(i) for i in new}
  for kern in kernels[last + 1:]:
    if not any(r is buf or getattr(r, "source", None) is buf for r in kern.reads):
      continue
    leaves = getattr(kern, "leafmap", None)
    if leaves is None or getattr(kern, "inner", None) is not None:
      return False
    for i, spec in leaves.items():
      if (spec is buf or (isinstance(spec, tuple) and any(x is buf for x in spec))) and \
         id(i) not in new:
        return False
  kern = kernels[last]
  if not any(r is buf or getattr(r, "source", None) is buf for r in kern.reads):
    return True
  if type(kern) is not LoopKernel:
    return False
  mine = [i for i, b in kern.outputs if b is buf]
  if len(mine) != 1 or mine[0].shape.is_tuple or tuple(_dims(mine[0])) != tuple(kern.dims):
    return False
  return reads_at_own_index(kern, buf, kern.dims, reshapes=True, rows=True)


def _column_reduce(r) -> bool:
  """A single-operand reduce over a contiguous block of dimensions followed by kept ones
  (what ``ColumnReduceKernel`` does better than one strided loop per output)."""
  if len(r.operands) != 2 or r.shape.is_tuple:
    return False
  rd = sorted(r.attrs["dimensions"])
  src = r.operands[0].dims
  return (bool(rd) and rd == list(range(rd[0], rd[-1] + 1)) and rd[-1] < len(src) - 1
          and math.prod(src) > 0)


def _dims(instr):
  s = instr.shape
  return s.tuple_shapes[0].dims if s.is_tuple else s.dims


def _reachable(roots, leafmap):
  seen, stack = set(), list(roots)
  while stack:
    x = stack.pop()
    if id(x) in seen:
      continue
    seen.add(id(x))
    if x in leafmap:
      continue
    stack.extend(x.operands)
  return seen


def _restrict(leafmap, root):
  return _restrict_many(leafmap, [(root, None)])


def _restrict_many(leafmap, outs):
  """The part of ``leafmap`` reachable from the outputs (so kernels take only what they read)."""
  seen = _reachable([i for i, _ in outs], leafmap)
  return {k: v for k, v in leafmap.items() if id(k) in seen}


def plan_group(instrs, outputs, leafmap, new_temp, new_scratch, max_threads, prefix):
  return GroupPlanner(new_temp, new_scratch, max_threads, prefix).plan(instrs, outputs, leafmap)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
