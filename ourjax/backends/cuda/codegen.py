"""PTX for HLO kernels: the shared elemental emitter with GPU iteration, through llvmlite's
NVPTX target (triple ``nvptx64-nvidia-cuda``, ``sm_90`` unless the GPU present says otherwise,
``sm_90a`` for a module holding wgmma instructions, PTX ISA 8.0, which every CUDA 12 and 13
driver loads).

DESIGN rule 5: the element of every fused value comes from ``llvm/emitter.py`` exactly as on the
CPU; only the outer iteration differs.  The kernels of a group are planned by the shared planner
(``llvm/kernels.py``: ``GroupPlanner``); ``translate`` turns each planned kernel into GPU
kernels:

==========================  ================================================================
planned kernel              GPU kernel(s)
==========================  ================================================================
LoopKernel (elementwise)    ``Elementwise``: grid-stride loop, ``VEC`` consecutive elements per
                            thread (the loads of same-shape operands become 16-byte vector
                            loads), index arithmetic per vector, not per element
LoopKernel with row         ``RowReduce``: one block per row; each reduction of the row is
reductions (softmax,        computed cooperatively (strided loop, warp butterfly shuffles, one
layernorm) or reduction     shared-memory step across warps), memoised for the emitter, then
outputs                     the row's outputs are written by all threads
few long reductions         ``SplitReduce``: pass 1 has ``G`` blocks per output write block
                            partials, pass 2 combines them (and computes the outputs)
ColumnReduceKernel          ``ColumnReduce``: one thread per output element walking the reduced
                            block (coalesced across the kept minor dimensions), split into
                            partials + a combine pass when there are few outputs
dot (f32, bf16, f16)        ``wgmma.WgmmaDot`` (Hopper ``wgmma.mma_async``, sm_90a PTX) when the
                            layouts and tile sizes fit, else ``MmaDot`` (``mma.sync``; tf32 for
                            f32 unless the highest precision is configured) when the tile sizes
                            divide the problem, else ``SimtDot`` (64x64 shared-memory tiles);
                            f64 always ``SimtDot``.  An M-major A is first copied K-major
                            (``transpose.StridedTranspose``) where that makes it a WgmmaDot
dot + elementwise consumer  ``FusedDot`` (``fuse_dot_epilogues``, before translation): the
(kOutput: bias, activation) consumer evaluated where the accumulators are stored (``Epilogue``)
LoopKernel reading through  ``transpose.TiledTranspose``: 32x32 output tiles staged through
a transpose of the minor     shared memory, so reads and writes are both coalesced
dimension
SortKernel, ScatterKernel   ``sort_scatter``: a bitonic network per row in shared memory (long
                            rows: chunks merged in global memory); one thread per update with
                            atomics (a compare-and-swap loop for other combiners)
CopyKernel                  a device-to-device copy (no kernel)
anything else               ``Threaded``: the planned kernel's own body (``Kernel.emit``) called
(in-place dynamic-update-   with ``tid``/``nthreads`` = the GPU thread's global index / count,
slice, rare sort/scatter)   so every op the CPU backend runs also runs here, correctly
==========================  ================================================================

Reductions reassociate (as on the CPU backend and in XLA), float atomics add duplicates in any
order, and an overwriting scatter with colliding indices leaves any one of them (as JAX on a
GPU); everything else computes what the CPU backend computes, element for element.
"""
from __future__ import annotations

import copy
import math
import os
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from ourjax import _phases
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I1, I8, I32, I64, Emitter, Index, i64
from ourjax.lowering import hlo

__all__ = ["TRIPLE", "DEFAULT_ARCH", "PTX_VERSION", "new_module", "compile_ptx", "GpuKernel",
           "translate", "DeviceInfo"]

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "90"
PTX_VERSION = "80"      # PTX ISA 8.0: CUDA 12.0+ drivers (sm_90 needs 7.8)
VEC = 4                 # elements per thread and iteration in streaming loops
F16 = np.dtype(np.float16)

_lock = threading.Lock()
_tms: dict = {}


class DeviceInfo:
  """What code generation needs to know about the GPU (defaults: an H100)."""

  def __init__(self, arch: str = DEFAULT_ARCH, sm_count: int = 132):
    self.arch, self.sm_count = arch, sm_count

  @property
  def cc(self) -> int:
    return int(self.arch)


# ---------------------------------------------------------------------------------------------
# the NVPTX target
# ---------------------------------------------------------------------------------------------

def target_machine(arch: str = DEFAULT_ARCH):
  """The process's shared NVPTX target machine for ``arch`` (used under ``_lock``)."""
  with _lock:
    tm = _tms.get(arch)
    if tm is None:
      tm = _tms[arch] = _new_target_machine(arch)
    return tm


def _new_target_machine(arch: str):
  from ourjax.backends.cpu import jit
  jit._setup()    # initialises every LLVM target (NVPTX included) once per process
  return llvm.Target.from_triple(TRIPLE).create_target_machine(
      cpu=f"sm_{arch}", features=f"+ptx{PTX_VERSION}", opt=3)


def new_module(name: str, arch: str = DEFAULT_ARCH) -> ir.Module:
  mod = ir.Module(name=name)
  mod.triple = TRIPLE
  mod.data_layout = str(target_machine(arch).target_data)
  return mod


def compile_ptx(module, arch: str = DEFAULT_ARCH) -> str:
  """PTX text of an ``ir.Module`` (or IR text): verified, optimised at O3 (the NVPTX pipeline
  then vectorises adjacent loads/stores), printed.  Raises ``CompileError`` with LLVM's
  message."""
  text = str(module)
  tm = target_machine(_arch_for(text, arch))
  with _lock:
    return _ptx(text, arch, tm, None)


def compile_ptx_modules(modules, arch: str = DEFAULT_ARCH) -> list:
  """``compile_ptx`` of several independent modules at once, one thread each (at most one per
  core), each in an LLVM context and a target machine of its own (llvmlite releases the GIL
  inside LLVM, and these threads call it outside its process-wide lock: ``jit._unlocked``): a
  program's kernels, cut into modules, are optimised and printed in parallel."""
  texts = [str(m) for m in modules]
  if len(texts) == 1:
    return [compile_ptx(texts[0], arch)]
  target_machine(arch)               # (initialises LLVM's targets once, under the lock)

  def one(text):
    a = _arch_for(text, arch)
    return _ptx(text, a, _new_target_machine(a), llvm.create_context(), unlocked=True)

  import os
  from concurrent.futures import ThreadPoolExecutor
  with ThreadPoolExecutor(max(1, min(len(texts), os.cpu_count() or 1))) as pool:
    return list(pool.map(_phases.bound(one), texts))


def _arch_for(text: str, arch: str) -> str:
  return "90a" if arch == "90" and "wgmma." in text else arch   # wgmma: sm_90a only


def _ptx(text: str, arch: str, tm, context, unlocked: bool = False) -> str:
  """The PTX of ``text``; ``unlocked``: ``tm`` and ``context`` are this thread's own, and LLVM
  runs outside llvmlite's lock (``jit.parse_assembly``, ``run_passes``, ``emit_to_memory``)."""
  from ourjax.backends.cpu import jit
  from ourjax.errors import CompileError
  try:
    with _phases.phase("llvm.parse"):
      ref = jit.parse_assembly(text, context, unlocked)
      ref.verify()
  except RuntimeError as e:
    raise CompileError(f"LLVM rejected the GPU module: {e}\n" + _ir_context(text, str(e))
                       ) from None
  with _phases.phase("llvm.opt"):
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    jit.run_passes(pb.getModulePassManager(), ref, pb, unlocked)
  try:
    with _phases.phase("llvm.codegen"):
      return jit.emit_to_memory(tm, ref, False, unlocked).decode()
  except RuntimeError as e:
    raise CompileError(f"the NVPTX backend failed: {e}") from None


def _ir_context(text: str, err: str, around: int = 3) -> str:
  """The IR lines around the line an LLVM parse error names (``<string>:LINE:COL``)."""
  import re
  m = re.search(r"<string>:(\d+):", err)
  lines = text.splitlines()
  if not m:
    return "--- IR (start) ---\n" + "\n".join(lines[:20])
  n = int(m.group(1)) - 1
  lo, hi = max(0, n - around), min(len(lines), n + around + 1)
  return f"--- IR lines {lo + 1}-{hi} ---\n" + "\n".join(lines[lo:hi])


# ---------------------------------------------------------------------------------------------
# small GPU IR helpers
# ---------------------------------------------------------------------------------------------

def _decl(mod, name, ret, args):
  fn = mod.globals.get(name)
  if fn is None:
    fn = ir.Function(mod, ir.FunctionType(ret, args), name=name)
  return fn


def sreg(b, name: str):
  """A special register (``tid.x``, ``ctaid.x``, ``ntid.x``, ``nctaid.x``...) as i32."""
  return b.call(_decl(b.module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, []), [])


def sreg64(b, name: str):
  return b.zext(sreg(b, name), I64)


def barrier(b):
  b.call(_decl(b.module, "llvm.nvvm.barrier0", ir.VoidType(), []), [])


def shfl_bfly(b, word, lanemask: int):
  fn = _decl(b.module, "llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])
  return b.call(fn, [ir.Constant(I32, -1), word, ir.Constant(I32, lanemask),
                     ir.Constant(I32, 0x1F)])


def shared_array(mod, elem, n: int, name: str, align: int = 16):
  ty = ir.ArrayType(elem, n)
  gv = ir.GlobalVariable(mod, ty, name, addrspace=3)
  gv.linkage = "internal"
  gv.initializer = ir.Constant(ty, ir.Undefined)
  gv.align = align
  return gv


def shared_ptr(b, arr, idx):
  """Pointer to ``arr[idx]`` (``idx`` an i32 or i64 value or int)."""
  if isinstance(idx, int):
    idx = ir.Constant(I32, idx)
  return b.gep(arr, [ir.Constant(I32, 0), idx], inbounds=True)


def _words(b, v):
  """A compute value as i32 words (for shuffles and shared memory) and the inverse."""
  t = v.type
  if t == I1:
    return [b.zext(v, I32)], lambda w: b.icmp_unsigned("!=", w[0], ir.Constant(I32, 0))
  if isinstance(t, ir.IntType):
    if t.width < 32:
      return [b.zext(v, I32)], lambda w: b.trunc(w[0], t)
    if t.width == 32:
      return [v], lambda w: w[0]
    lo = b.trunc(v, I32)
    hi = b.trunc(b.lshr(v, ir.Constant(I64, 32)), I32)
    return [lo, hi], lambda w: b.or_(b.zext(w[0], I64),
                                     b.shl(b.zext(w[1], I64), ir.Constant(I64, 32)))
  if isinstance(t, ir.FloatType):
    return [b.bitcast(v, I32)], lambda w: b.bitcast(w[0], t)
  if isinstance(t, ir.DoubleType):
    ws, back = _words(b, b.bitcast(v, I64))
    return ws, lambda w: b.bitcast(back(w), t)
  raise E.EmitterError(f"no GPU reduction transport for {t}")


def _pow2_at_least(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------

class GpuKernel(K.Kernel):
  """A ``__global__`` function over the kernel's buffers (``noalias``, 16-byte aligned:
  allocations are 512-byte aligned and arena offsets multiples of 64).  Subclasses implement
  ``gpu_body(b, ptr)`` and ``launch(info) -> (grid, block, shared_bytes)``."""
  is_copy = False

  def emit_gpu(self, module: ir.Module) -> ir.Function:
    fty = ir.FunctionType(ir.VoidType(), [K._ptr_type(x) for x in self.buffers])
    fn = ir.Function(module, fty, name=self.name)
    fn.calling_convention = "ptx_kernel"
    for a in fn.args:
      a.add_attribute("noalias")
      a.attributes.align = 16
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = {id(x): a for x, a in zip(self.buffers, fn.args)}
    self.gpu_body(b, lambda buf: ptrs[id(buf)])
    b.ret_void()
    return fn

  def gpu_body(self, b, ptr):
    raise NotImplementedError

  def launch(self, info: DeviceInfo):
    raise NotImplementedError


GRID_WAVES = 1 << 16     # grid-stride kernels launch at most this many blocks per SM
                         # (measured: a grid covering every vector beats 16 per SM)


def _grid_for(items: int, block: int, info: DeviceInfo, waves: int | None = None) -> int:
  return max(1, min(-(-items // block), info.sm_count * (waves or GRID_WAVES)))


class Copy(GpuKernel):
  """``dst = src``: a device-to-device copy, no kernel."""
  is_copy = True

  def __init__(self, name, src, dst):
    self.src, self.dst = src, dst
    super().__init__(name, [src], [dst], work=dst.size)

  def emit_gpu(self, module):
    return None


class Elementwise(GpuKernel):
  """Outputs of ``dims`` element by element: a grid-stride loop over vectors of ``VEC``
  consecutive elements (then a tail), each element evaluated by the shared emitter.

  A vector is emitted in three phases: the loads of every leaf of the output's shape for all
  ``VEC`` elements (remembered by the emitter, so evaluation reuses them), the evaluation of all
  elements, the stores.  LLVM merges neighbouring loads and stores into 16-byte vector accesses
  only within one basic block; this way a branch inside the evaluation (inline math's cold slow
  paths) falls between the loads and the stores instead of splitting them.  Leaves read at
  other indices (broadcast operands, transposes) are loaded where evaluation reaches them; a
  prefetched load evaluation does not use is dead code that LLVM deletes.  Math functions with a
  rare slow path (GPU sin, cos) hand their conditions over (``llmath.collect_slow_paths``): one
  cold branch per vector evaluates it again with the per-element slow paths."""
  BLOCK = 256

  def __init__(self, name, dims, outputs, leafmap):
    self.dims, self.outputs, self.leafmap = tuple(dims), list(outputs), dict(leafmap)
    self.total = math.prod(self.dims)
    self.vec = VEC if self.total >= VEC * 64 else 1
    super().__init__(name, K._leaf_bufs(self.leafmap), K.output_bufs(outputs), work=self.total)

  def launch(self, info):
    return (_grid_for(max(1, self.total // self.vec), self.BLOCK, info), 1, 1), \
        (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    from ourjax.backends.llvm import math as llmath
    if self.total == 0:
      return
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    dims, V = self.dims, self.vec
    gid = b.add(b.mul(sreg64(b, "ctaid.x"), sreg64(b, "ntid.x")), sreg64(b, "tid.x"))
    stride = b.mul(sreg64(b, "nctaid.x"), sreg64(b, "ntid.x"))
    nvec = self.total // V
    last_ok = bool(dims) and dims[-1] % V == 0
    if nvec:
      with E.ForLoop(b, gid, nvec, "v", step=stride) as lp:
        base = b.mul(lp.index, i64(V), flags=["nuw", "nsw"])
        bidx = Index(b, dims, linear=base) if (last_ok and V > 1) else None
        idxs = []
        for k in range(V):
          lin = b.add(base, i64(k), flags=["nuw", "nsw"]) if k else base
          if bidx is not None and k:
            multi = bidx.multi[:-1] + [b.add(bidx.multi[-1], i64(k), flags=["nuw", "nsw"])]
            idxs.append(Index(b, dims, linear=lin, multi=multi))
          elif bidx is not None:
            idxs.append(bidx)
          else:
            idxs.append(Index(b, dims, linear=lin))
        same = [(instr, leaf) for instr, leaf in em.leaves.items()
                if isinstance(leaf, E.Leaf) and leaf.value is None and leaf.dims == dims]
        loaded = [[(instr, E.load_element(b, leaf.ptr, idx.linear, leaf.dtype))
                   for instr, leaf in same] for idx in idxs]
        with llmath.collect_slow_paths(b) as guards:
          values = self._evaluate(em, idxs, loaded)
        if guards:
          values = self._slow_path(b, em, idxs, loaded, values, guards)
        for idx, vals in zip(idxs, values):
          self._store_values(b, vals, idx, ptr)
    if self.total % V:
      with E.ForLoop(b, b.add(gid, i64(nvec * V)), self.total, "t", step=stride) as lp:
        em.push_scope()
        K.store_outputs(b, em, self.outputs, Index(b, dims, linear=lp.index), ptr)
        em.pop_scope()

  def _evaluate(self, em, idxs, loaded):
    """The outputs' values at each index of ``idxs``, the prefetched loads remembered first."""
    values = []
    for idx, pre in zip(idxs, loaded):
      em.push_scope()
      for instr, v in pre:
        em.remember(instr, idx, v)
      values.append([em.value(instr, idx) for instr, _ in self.outputs])
      em.pop_scope()
    return values

  def _slow_path(self, b, em, idxs, loaded, fast, guards):
    """Where any of the vector's fast math paths is wrong (``guards``, rare), evaluate the
    vector again with the per-element slow paths, in a cold block; the values merged."""
    cond = guards[0]
    for g in guards[1:]:
      cond = b.or_(cond, g)
    hot = b.block
    cold = b.append_basic_block("v.slow")
    join = b.append_basic_block("v.join")
    b.cbranch(cond, cold, join).set_weights([1, 1 << 20])
    b.position_at_end(cold)
    slow = self._evaluate(em, idxs, loaded)
    cold_end = b.block
    b.branch(join)
    b.position_at_end(join)

    def merge(f, s):
      if isinstance(f, tuple):
        return tuple(merge(a, c) for a, c in zip(f, s))
      phi = b.phi(f.type)
      phi.add_incoming(f, hot)
      phi.add_incoming(s, cold_end)
      return phi
    return [[merge(f, s) for f, s in zip(fv, sv)] for fv, sv in zip(fast, slow)]

  def _store_values(self, b, vals, index, ptr):
    """Store the outputs' values ``vals`` (one per output, tuples for tuple outputs)."""
    for (instr, buf), v in zip(self.outputs, vals):
      K.store_output(b, instr, buf, v, index, ptr)


class _Reducer:
  """How one ``reduce`` combines on the GPU: simple reducers (add, max, ...) start every thread
  from the neutral element and apply the init value once at the end (the reference's result up
  to reassociation); other reducers (variadic, e.g. argmax) use the init value as the identity,
  as XLA does."""

  def __init__(self, b, em, r):
    self.b, self.em, self.r = b, em, r
    n = len(r.operands) // 2
    self.n = n
    self.ops, self.inits = r.operands[:n], r.operands[n:]
    self.comp = r.attrs["to_apply"]
    self.op = E.simple_reducer(self.comp) if n == 1 else None
    self.dtypes = [o.dtype for o in self.ops]
    self.init_vals = [em.scalar(i) for i in self.inits]
    if self.op is not None:
      self.ident = [E.const(self.dtypes[0], K._neutral(self.op, self.dtypes[0]))]
    else:
      self.ident = list(self.init_vals)

  def combine(self, accs, xs):
    if self.op is not None:
      return [E.reassociating_combine(self.b, self.op, accs[0], xs[0], self.dtypes[0])]
    return self.em.combine(self.comp, list(accs), list(xs), self.dtypes)

  def finish(self, accs):
    if self.op is not None:
      return [E.reassociating_combine(self.b, self.op, self.init_vals[0], accs[0],
                                      self.dtypes[0])]
    return list(accs)

  def result(self, vals):
    return tuple(vals) if self.n > 1 else vals[0]

  @property
  def rdims(self):
    return sorted(self.r.attrs["dimensions"])

  @property
  def count(self):
    src = self.ops[0].dims
    return math.prod(src[d] for d in self.rdims)

  def trailing(self):
    src, rd = self.ops[0].dims, self.rdims
    return rd == list(range(len(src) - len(rd), len(src)))

  def source_index(self, oidx, k):
    """Index into the operands of reduced position ``k`` (i64) at output index ``oidx``."""
    b = self.b
    src = self.ops[0].dims
    rd = self.rdims
    red = E.delinearize(b, k, [src[d] for d in rd])
    multi = [None] * len(src)
    kept = [d for d in range(len(src)) if d not in rd]
    for d, m in zip(kept, oidx.multi):
      multi[d] = m
    for d, m in zip(rd, red):
      multi[d] = m
    if self.trailing():
      lin = b.add(b.mul(oidx.linear, i64(self.count), flags=["nuw", "nsw"]), k,
                  flags=["nuw", "nsw"]) if kept else k
      return Index(b, src, linear=lin, multi=multi)
    return Index(b, src, multi=multi)


def _accumulate(b, em, red: _Reducer, oidx, start, step, vec: int, accs):
  """Fold the reduced positions start, start+step, ... (in vectors of ``vec``) into the allocas
  ``accs``."""
  count = red.count
    # vectors of `vec` consecutive positions, then the tail one by one
  nvec = count // vec
  if nvec:
    with E.ForLoop(b, start, nvec, "rv", step=step) as lp:
      base = b.mul(lp.index, i64(vec), flags=["nuw", "nsw"])
      for k in range(vec):
        em.push_scope()
        kk = b.add(base, i64(k), flags=["nuw", "nsw"]) if k else base
        idx = red.source_index(oidx, kk)
        xs = [em.value(o, idx) for o in red.ops]
        new = red.combine([b.load(a) for a in accs], xs)
        for a, v in zip(accs, new):
          b.store(v, a)
        em.pop_scope()
  if count % vec:
    with E.ForLoop(b, b.add(start, i64(nvec * vec)), count, "rt", step=step) as lp:
      em.push_scope()
      idx = red.source_index(oidx, lp.index)
      xs = [em.value(o, idx) for o in red.ops]
      new = red.combine([b.load(a) for a in accs], xs)
      for a, v in zip(accs, new):
        b.store(v, a)
      em.pop_scope()


def _warp_allreduce(b, red: _Reducer, vals, lane):
  for off in (16, 8, 4, 2, 1):
    others = []
    for v in vals:
      ws, back = _words(b, v)
      others.append(back([shfl_bfly(b, w, off) for w in ws]))
    upper = b.icmp_unsigned("!=", b.and_(lane, ir.Constant(I32, off)), ir.Constant(I32, 0))
    first = [b.select(upper, o, v) for v, o in zip(vals, others)]
    second = [b.select(upper, v, o) for v, o in zip(vals, others)]
    vals = red.combine(first, second)
  return vals


def _block_allreduce(b, red: _Reducer, vals, block: int, tag: str):
  """Every thread of the block gets the combination of all threads' ``vals``."""
  tid = sreg(b, "tid.x")
  lane = b.and_(tid, ir.Constant(I32, 31))
  vals = _warp_allreduce(b, red, vals, lane)
  if block <= 32:
    return vals
  warp = b.lshr(tid, ir.Constant(I32, 5))
  nw = block // 32
  words = []
  backs = []
  for v in vals:
    ws, back = _words(b, v)
    words.append(ws)
    backs.append(back)
  arrays = [[shared_array(b.module, I32, 32, f"{tag}_s{k}_{j}", 4) for j in range(len(ws))]
            for k, ws in enumerate(words)]
  with b.if_then(b.icmp_unsigned("==", lane, ir.Constant(I32, 0))):
    for ws, arrs in zip(words, arrays):
      for w, arr in zip(ws, arrs):
        b.store(w, shared_ptr(b, arr, warp))
  barrier(b)
  valid = b.icmp_unsigned("<", lane, ir.Constant(I32, nw))
  loaded = []
  for arrs, back, ident in zip(arrays, backs, red.ident):
    v = back([b.load(shared_ptr(b, arr, lane)) for arr in arrs])
    loaded.append(b.select(valid, v, ident))
  vals = _warp_allreduce(b, red, loaded, lane)
  barrier(b)     # the shared words may be reused by the next reduction
  return vals


def _row_block(count: int) -> int:
  return max(32, min(512, _pow2_at_least(-(-count // 8))))


class RowReduce(GpuKernel):
  """One block per output row (``outer_dims``): each prefetched reduction of the row is
  computed by the whole block, then ``outer_outs`` (the row's own values, thread 0) and
  ``inner_outs`` (``outer_dims + (n,)``) are written.

  *Resident* rows (every reduction over the row's last dimension, at most ``RESIDENT_VECS``
  vectors of ``VEC`` elements per thread): each thread's elements get one index each, used by
  every pass in one memo scope, so the row is read from memory once and every fused value
  (``exp(x - max)`` of a softmax) is computed once and kept in registers between the
  reductions and the outputs.  Threads past the row's end work on a clamped copy of the last
  vector: it is left out of the reductions and its stores write the same bits as its owner.
  Other rows loop over the row once per pass."""
  RESIDENT_VECS = 4

  def __init__(self, name, outer_dims, n, inner_outs, outer_outs, prefetch, leafmap):
    self.outer_dims, self.n = tuple(outer_dims), n
    self.inner_outs, self.outer_outs = list(inner_outs), list(outer_outs)
    self.prefetch, self.leafmap = list(prefetch), dict(leafmap)
    self.rows = math.prod(self.outer_dims)
    longest = max([_red_count(r) for r in self.prefetch] + [n or 1])
    self.resident = self._resident_plan()
    self.block = self.resident[2] if self.resident else _row_block(longest)
    super().__init__(name, K._leaf_bufs(self.leafmap),
                     K.output_bufs(self.inner_outs + self.outer_outs), work=self.rows * longest)

  def _resident_plan(self):
    """(L, V, T, vectors per thread) for resident rows, or None."""
    rank = len(self.outer_dims)
    L = self.n
    for r in self.prefetch:
      src = r.operands[0]
      if sorted(r.attrs["dimensions"]) != [rank] or src.dims[:rank] != self.outer_dims:
        return None
      if L is None:
        L = src.dims[rank]
      if src.dims != self.outer_dims + (L,):
        return None
    if not L or not self.prefetch:
      return None
    V = VEC if L % VEC == 0 else 1
    nv_total = L // V
    T = max(32, min(1024, _pow2_at_least(-(-nv_total // 2))))
    per = -(-nv_total // T)
    if per > self.RESIDENT_VECS:
      return None
    return L, V, T, per

  def launch(self, info):
    return (max(1, min(self.rows, 65535 * 4)), 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.rows == 0:
      return
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    tid = sreg64(b, "tid.x")
    with E.ForLoop(b, sreg64(b, "ctaid.x"), self.rows, "row",
                   step=sreg64(b, "nctaid.x")) as row:
      em.push_scope()
      omulti = E.delinearize(b, row.index, self.outer_dims)
      oidx = Index(b, self.outer_dims, linear=row.index, multi=omulti)
      if self.resident:
        self._resident_row(b, em, ptr, row.index, omulti, oidx, tid)
      else:
        self._looped_row(b, em, ptr, row.index, omulti, oidx, tid)
      em.pop_scope()

  def _outer(self, b, em, ptr, oidx, tid):
    if self.outer_outs:
      em.push_scope()
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        K.store_outputs(b, em, self.outer_outs, oidx, ptr)
      em.pop_scope()

  def _looped_row(self, b, em, ptr, row, omulti, oidx, tid):
    T = self.block
    for j, r in enumerate(self.prefetch):
      red = _Reducer(b, em, r)
      if red.count == 0:
        em.remember(r, oidx, red.result(red.init_vals))
        continue
      accs = [E.alloca_entry(b, v.type) for v in red.ident]
      for a, v in zip(accs, red.ident):
        b.store(v, a)
      vec = VEC if (red.trailing() and red.count % VEC == 0 and red.count >= VEC * T) else 1
      _accumulate(b, em, red, oidx, tid, i64(T), vec, accs)
      vals = _block_allreduce(b, red, [b.load(a) for a in accs], T, f"{self.name}_r{j}")
      em.remember(r, oidx, red.result(red.finish(vals)))
    self._outer(b, em, ptr, oidx, tid)
    if self.inner_outs and self.n:
      dims = self.outer_dims + (self.n,)
      base = b.mul(row, i64(self.n), flags=["nuw", "nsw"])
      with E.ForLoop(b, tid, self.n, "col", step=i64(T)) as col:
        em.push_scope()
        idx = Index(b, dims, linear=b.add(base, col.index, flags=["nuw", "nsw"]),
                    multi=list(omulti) + [col.index])
        K.store_outputs(b, em, self.inner_outs, idx, ptr)
        em.pop_scope()

  def _resident_row(self, b, em, ptr, row, omulti, oidx, tid):
    L, V, T, per = self.resident
    dims = self.outer_dims + (L,)
    nvec = L // V
    base_row = b.mul(row, i64(L), flags=["nuw", "nsw"])
    elems = []      # (Index, valid or None) of this thread's elements
    for i in range(per):
      j = b.add(tid, i64(i * T), flags=["nuw", "nsw"]) if i else tid
      valid = None
      if (i + 1) * T > nvec:
        valid = b.icmp_signed("<", j, i64(nvec))
        j = b.select(valid, j, i64(nvec - 1))
      c0 = b.mul(j, i64(V), flags=["nuw", "nsw"]) if V > 1 else j
      for k in range(V):
        col = b.add(c0, i64(k), flags=["nuw", "nsw"]) if k else c0
        idx = Index(b, dims, linear=b.add(base_row, col, flags=["nuw", "nsw"]),
                    multi=list(omulti) + [col])
        elems.append((idx, valid))
    for jr, r in enumerate(self.prefetch):
      red = _Reducer(b, em, r)
      acc = list(red.ident)
      for idx, valid in elems:
        new = red.combine(acc, [em.value(o, idx) for o in red.ops])
        acc = new if valid is None else [b.select(valid, n_, a) for n_, a in zip(new, acc)]
      vals = _block_allreduce(b, red, acc, T, f"{self.name}_r{jr}")
      em.remember(r, oidx, red.result(red.finish(vals)))
    self._outer(b, em, ptr, oidx, tid)
    for idx, _ in elems:      # clamped copies store their owner's values again: no branch
      K.store_outputs(b, em, self.inner_outs, idx, ptr)


def _red_count(r) -> int:
  src = r.operands[0].dims
  return math.prod(src[d] for d in r.attrs["dimensions"])


def _partial_dtype(dt):
  dt = np.dtype(dt)
  return np.dtype(np.float32) if dt in (E.F16, E.BF16) else dt


class SplitPartials(GpuKernel):
  """Pass 1 of a split reduction: block ``g`` of output ``o`` folds positions
  g*T*VEC + ..., stride G*T*VEC of each reduction into ``partials[r][o * G + g]``."""

  def __init__(self, name, dims, prefetch, partials, leafmap, groups, block):
    self.dims, self.prefetch, self.partials = tuple(dims), list(prefetch), list(partials)
    self.leafmap, self.groups, self.block = dict(leafmap), groups, block
    self.nout = math.prod(self.dims)
    flat = [p for ps in self.partials for p in ps]
    super().__init__(name, K._leaf_bufs(self.leafmap), flat,
                     work=self.nout * max(_red_count(r) for r in self.prefetch))

  def launch(self, info):
    return (self.groups * self.nout, 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    G, T = self.groups, self.block
    blk = sreg64(b, "ctaid.x")
    o = b.udiv(blk, i64(G))
    g = b.urem(blk, i64(G))
    tid = sreg64(b, "tid.x")
    oidx = Index(b, self.dims, linear=o)
    for j, (r, parts) in enumerate(zip(self.prefetch, self.partials)):
      red = _Reducer(b, em, r)
      accs = [E.alloca_entry(b, v.type) for v in red.ident]
      for a, v in zip(accs, red.ident):
        b.store(v, a)
      vec = VEC if (red.trailing() and red.count % VEC == 0) else 1
      start = b.add(b.mul(g, i64(T)), tid)
      _accumulate(b, em, red, oidx, start, i64(G * T), vec, accs)
      vals = _block_allreduce(b, red, [b.load(a) for a in accs], T, f"{self.name}_r{j}")
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        pos = b.add(b.mul(o, i64(G)), g)
        for v, p, dt in zip(vals, parts, red.dtypes):
          v = E.convert_value(b, v, dt, p.dtype) if p.dtype != np.dtype(dt) else v
          E.store_element(b, v, ptr(p), pos, p.dtype)


class SplitFinish(GpuKernel):
  """Pass 2: one thread per output combines the ``G`` partials of each reduction (then the
  init value), memoises them and writes the outputs."""
  BLOCK = 128

  def __init__(self, name, dims, outputs, prefetch, partials, leafmap, groups):
    self.dims, self.outputs = tuple(dims), list(outputs)
    self.prefetch, self.partials = list(prefetch), list(partials)
    self.leafmap, self.groups = dict(leafmap), groups
    self.nout = math.prod(self.dims)
    flat = [p for ps in self.partials for p in ps]
    super().__init__(name, flat + K._leaf_bufs(self.leafmap), K.output_bufs(outputs),
                     work=self.nout * groups)

  def launch(self, info):
    return (-(-self.nout // self.BLOCK), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    G = self.groups
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      oidx = Index(b, self.dims, linear=o)
      for r, parts in zip(self.prefetch, self.partials):
        red = _Reducer(b, em, r)
        accs = [E.alloca_entry(b, v.type) for v in red.ident]
        for a, v in zip(accs, red.ident):
          b.store(v, a)
        with E.ForLoop(b, 0, G, "g") as g:
          pos = b.add(b.mul(o, i64(G)), g.index)
          xs = []
          for p, dt in zip(parts, red.dtypes):
            x = E.load_element(b, ptr(p), pos, p.dtype)
            xs.append(E.convert_value(b, x, p.dtype, dt) if p.dtype != np.dtype(dt) else x)
          new = red.combine([b.load(a) for a in accs], xs)
          for a, v in zip(accs, new):
            b.store(v, a)
        em.remember(r, oidx, red.result(red.finish([b.load(a) for a in accs])))
      K.store_outputs(b, em, self.outputs, oidx, ptr)


class ColumnReduce(GpuKernel):
  """``reduce`` over a contiguous middle block ``red`` of ``pre + red + post``: thread
  (s, p, j) folds chunk ``s`` of the reduced block for output (p, j); with one chunk it folds
  the whole block in order into the output, else into ``partials[s, p*post + j]`` for
  ``ColumnFinish``."""
  BLOCK = 256

  def __init__(self, name, reduce, out, leafmap, pre, red, post, splits=1, partials=None):
    self.reduce, self.out, self.leafmap = reduce, out, dict(leafmap)
    self.pre, self.red, self.post = tuple(pre), tuple(red), tuple(post)
    self.splits, self.partials = splits, partials
    self.nout = math.prod(self.pre) * math.prod(self.post)
    self.partial = partials is not None
    tgt = partials if self.partial else out
    super().__init__(name, K._leaf_bufs(self.leafmap), [tgt],
                     work=self.nout * math.prod(self.red))

  def launch(self, info):
    n = self.nout * self.splits
    return (max(1, -(-n // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    r = self.reduce
    npre, nred, npost = math.prod(self.pre), math.prod(self.red), math.prod(self.post)
    if self.nout == 0:
      return
    S = self.splits
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr), fast_reductions=self.partial)
    t = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", t, i64(self.nout * S))):
      s = b.udiv(t, i64(self.nout))
      rest = b.urem(t, i64(self.nout))
      p = b.udiv(rest, i64(npost))
      j = b.urem(rest, i64(npost))
      red = _Reducer(b, em, r) if self.partial else None
      src = r.operands[0]
      comp = r.attrs["to_apply"]
      dt = r.dtype
      if self.partial:
        acc0 = red.ident[0]
        csize = -(-nred // S)
        klo = b.mul(s, i64(csize))
        khi = b.add(klo, i64(csize))
        khi = b.select(b.icmp_signed(">", khi, i64(nred)), i64(nred), khi)
      else:
        acc0 = em.scalar(r.operands[1])
        klo, khi = i64(0), i64(nred)
      acc = E.alloca_entry(b, acc0.type)
      b.store(acc0, acc)
      pmulti = E.delinearize(b, p, self.pre)
      jmulti = E.delinearize(b, j, self.post)
      with E.ForLoop(b, klo, khi, "k") as k:
        em.push_scope()
        lin = b.add(b.mul(b.add(b.mul(p, i64(nred)), k.index), i64(npost)), j)
        idx = Index(b, src.dims, linear=lin,
                    multi=pmulti + E.delinearize(b, k.index, self.red) + jmulti)
        x = em.value(src, idx)
        if self.partial:
          new = red.combine([b.load(acc)], [x])[0]
        else:
          new = em.combine(comp, [b.load(acc)], [x], [dt])[0]
        b.store(new, acc)
        em.pop_scope()
      if self.partial:
        E.store_element(b, b.load(acc), ptr(self.partials), t, self.partials.dtype)
      else:
        E.store_element(b, b.load(acc), ptr(self.out), rest, dt)


class ColumnFinish(GpuKernel):
  """out[o] = init (+) fold over s of partials[s, o]."""
  BLOCK = 256

  def __init__(self, name, reduce, out, partials, leafmap, splits):
    self.reduce, self.out, self.partials = reduce, out, partials
    self.leafmap, self.splits = dict(leafmap), splits
    self.nout = out.size
    super().__init__(name, [partials] + K._leaf_bufs(self.leafmap), [out],
                     work=self.nout * splits)

  def launch(self, info):
    return (max(1, -(-self.nout // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      red = _Reducer(b, em, self.reduce)
      acc = E.alloca_entry(b, red.ident[0].type)
      b.store(red.ident[0], acc)
      with E.ForLoop(b, 0, self.splits, "s") as s:
        x = E.load_element(b, ptr(self.partials), b.add(b.mul(s.index, i64(self.nout)), o),
                           self.partials.dtype)
        b.store(red.combine([b.load(acc)], [x])[0], acc)
      E.store_element(b, red.finish([b.load(acc)])[0], ptr(self.out), o, self.reduce.dtype)


class ColumnOutputsFinish(GpuKernel):
  """The outputs of ``dims`` computed from reductions over leading/middle dimensions: one
  thread per output element combines each reduction's column partials
  (``partials[j][s * nout + o]``, written by ``ColumnReduce``), memoises the result and writes
  the outputs (a bias update ``b - lr * sum(g, axis=0)`` in one pass after the partials)."""
  BLOCK = 256

  def __init__(self, name, dims, outputs, reduces, partials, leafmap, splits):
    self.dims, self.outputs = tuple(dims), list(outputs)
    self.reduces, self.partials = list(reduces), list(partials)
    self.leafmap, self.splits = dict(leafmap), splits
    self.nout = math.prod(self.dims)
    super().__init__(name, list(self.partials) + K._leaf_bufs(self.leafmap),
                     K.output_bufs(outputs), work=self.nout * splits)

  def launch(self, info):
    return (max(1, -(-self.nout // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      oidx = Index(b, self.dims, linear=o)
      for r, part in zip(self.reduces, self.partials):
        red = _Reducer(b, em, r)
        acc = E.alloca_entry(b, red.ident[0].type)
        b.store(red.ident[0], acc)
        with E.ForLoop(b, 0, self.splits, "s") as sl:
          x = E.load_element(b, ptr(part), b.add(b.mul(sl.index, i64(self.nout)), o), part.dtype)
          b.store(red.combine([b.load(acc)], [x])[0], acc)
        em.remember(r, oidx, red.finish([b.load(acc)])[0])
      K.store_outputs(b, em, self.outputs, oidx, ptr)


class Threaded(GpuKernel):
  """A planned kernel run as it is planned: its body (``Kernel.emit``) is called by every GPU
  thread with ``tid`` = the thread's global index and ``nthreads`` = the thread count.  Serial
  kernels get one thread; kernels with per-thread scratch get the thread count the scratch is
  sized for."""

  def __init__(self, kernel, max_threads: int):
    self.inner = kernel
    if kernel.serial_only:
      n = 1
    elif kernel.scratch:
      n = max_threads
    else:
      n = max(1, min(kernel.work or 1, 1 << 16))
    self.nthreads = n
    super().__init__(kernel.name + "_g", kernel.reads, kernel.writes, kernel.scratch,
                     work=kernel.work)

  def launch(self, info):
    blk = min(128, self.nthreads)
    return (-(-self.nthreads // blk), 1, 1), (blk, 1, 1), 0

  def emit_gpu(self, module):
    inner = self.inner.emit(module)
    fn = super().emit_gpu(module)
    return fn

  def gpu_body(self, b, ptr):
    inner = b.module.globals[self.inner.name]
    gid = b.add(b.mul(sreg64(b, "ctaid.x"), sreg64(b, "ntid.x")), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", gid, i64(self.nthreads))):
      b.call(inner, [ptr(x) for x in self.inner.buffers] + [gid, i64(self.nthreads)])


# ---------------------------------------------------------------------------------------------
# dot
# ---------------------------------------------------------------------------------------------

class SimtDot(GpuKernel):
  """C[b] = A[b] @ B[b] over strided operand buffers: 64x64 output tiles per block of 256
  threads (4x4 outputs each), 16-deep k slices through shared memory; any sizes and strides
  (bounds are clamped and masked), float accumulation (double for f64)."""
  BM = BN = 64
  BK = 16

  def __init__(self, name, dot, lhs, rhs, out, spec=None, out_dtype=None):
    """``spec``: another batching of the operands than the dot's own (split-K partials);
    ``out_dtype``: the type C is written in (the dot's by default)."""
    self.dot, self.spec = dot, spec or K.DotSpec(dot)
    self.lhs, self.rhs, self.out = lhs, rhs, out
    s = self.spec
    self.acc_dt = E.accumulation_dtype(dot.operands[0].dtype, dot.operands[1].dtype, dot.dtype)
    self.out_dt = np.dtype(out_dtype or dot.dtype)
    super().__init__(name, [lhs, rhs], [out], work=s.B * s.M * s.N * s.K)

  def launch(self, info):
    s = self.spec
    return (-(-s.N // self.BN), -(-s.M // self.BM), s.B), (256, 1, 1), 0

  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    if s.B * M * N == 0:
      return
    adt, bdt = self.dot.operands[0].dtype, self.dot.operands[1].dtype
    acc_dt = self.acc_dt
    cty = E.compute_type(acc_dt)
    BM, BN, BK = self.BM, self.BN, self.BK
    mod = b.module
    As = shared_array(mod, cty, BK * (BM + 1), self.name + "_As")
    Bs = shared_array(mod, cty, BK * (BN + 1), self.name + "_Bs")
    tid = sreg64(b, "tid.x")
    tx = b.urem(tid, i64(16))
    ty = b.udiv(tid, i64(16))
    n0 = b.mul(sreg64(b, "ctaid.x"), i64(BN))
    m0 = b.mul(sreg64(b, "ctaid.y"), i64(BM))
    bat = sreg64(b, "ctaid.z")
    A, Bm, C = ptr(self.lhs), ptr(self.rhs), ptr(self.out)
    a_base = b.mul(bat, i64(s.a_sb))
    b_base = b.mul(bat, i64(s.b_sb))
    zero = E.const(acc_dt, 0)
    accs = [[E.alloca_entry(b, cty) for _ in range(4)] for _ in range(4)]
    for row in accs:
      for a in row:
        b.store(zero, a)

    def clamp(v, hi):
      return b.select(b.icmp_signed(">", v, i64(hi)), i64(hi), v)

    def load_tile(src, base, dt, major_fast, rows_total, cols_total, r0, s_r, s_c, dst, width,
                  k0):
      # tile of BK (k) x width (m or n) into dst[k * (width + 1) + x]
      for q in range(4):
        if major_fast:   # stride 1 along k: consecutive threads take consecutive k
          kk = b.urem(tid, i64(BK))
          xx = b.add(b.udiv(tid, i64(BK)), i64(16 * q))
        else:
          xx = b.urem(tid, i64(width))
          kk = b.add(b.udiv(tid, i64(width)), i64(4 * q))
        gx = b.add(r0, xx)
        gk = b.add(k0, kk)
        ok = b.and_(b.icmp_signed("<", gx, i64(rows_total)), b.icmp_signed("<", gk,
                                                                            i64(cols_total)))
        off = b.add(base, b.add(b.mul(clamp(gx, rows_total - 1), i64(s_r)),
                                b.mul(clamp(gk, cols_total - 1), i64(s_c))))
        v = E.convert_value(b, E.load_element(b, src, off, dt), dt, acc_dt)
        v = b.select(ok, v, zero)
        b.store(v, shared_ptr(b, dst, b.trunc(b.add(b.mul(kk, i64(width + 1)), xx), I32)))

    fl = ["contract"] if E._is_float(acc_dt) else []
    with E.ForLoop(b, 0, -(-Kd // BK), "kt") as kt:
      k0 = b.mul(kt.index, i64(BK))
      load_tile(A, a_base, adt, s.a_sk == 1, M, Kd, m0, s.a_sm, s.a_sk, As, BM, k0)
      load_tile(Bm, b_base, bdt, s.b_sk == 1 and s.b_sn != 1, N, Kd, n0, s.b_sn, s.b_sk, Bs,
                BN, k0)
      barrier(b)
      for kk in range(BK):
        av = [b.load(shared_ptr(b, As, b.trunc(b.add(i64(kk * (BM + 1) + 16 * i), ty), I32)))
              for i in range(4)]
        bv = [b.load(shared_ptr(b, Bs, b.trunc(b.add(i64(kk * (BN + 1) + 16 * j), tx), I32)))
              for j in range(4)]
        for i in range(4):
          for j in range(4):
            a = accs[i][j]
            if E._is_float(acc_dt):
              b.store(b.fadd(b.load(a), b.fmul(av[i], bv[j], flags=fl), flags=fl), a)
            else:
              b.store(b.add(b.load(a), b.mul(av[i], bv[j])), a)
      barrier(b)
    c_base = b.mul(bat, i64(M * N))
    for i in range(4):
      gm = b.add(m0, b.add(ty, i64(16 * i)))
      for j in range(4):
        gn = b.add(n0, b.add(tx, i64(16 * j)))
        ok = b.and_(b.icmp_signed("<", gm, i64(M)), b.icmp_signed("<", gn, i64(N)))
        with b.if_then(ok):
          v = E.convert_value(b, b.load(accs[i][j]), acc_dt, self.out_dt)
          E.store_element(b, v, C, b.add(c_base, b.add(b.mul(gm, i64(N)), gn)), self.out_dt)


SPLIT_K_MIN = 2048        # shortest contraction split into partial products


def _split_k(dot, info: DeviceInfo):
  """(S, spec of S partial products over K/S each) for a dot with too few 64x64 output tiles
  to fill the GPU and a long contraction (a convolution's weight gradient: 288x64 outputs of
  25088 products each), else None.  S divides K."""
  s = K.DotSpec(dot)
  if not s.ok or s.B != 1 or not E._is_float(dot.dtype) or s.K < SPLIT_K_MIN:
    return None
  tiles = -(-s.M // SimtDot.BM) * -(-s.N // SimtDot.BN)
  if 2 * tiles >= info.sm_count:
    return None
  want = min(-(-2 * info.sm_count // tiles), s.K // 256)
  S = next((d for d in range(want, 3, -1) if s.K % d == 0), None)
  if S is None:
    return None
  staged = copy.copy(s)
  staged.B, staged.K = S, s.K // S
  staged.a_sb, staged.b_sb = staged.K * s.a_sk, staged.K * s.b_sk
  return S, staged


class SplitKSum(GpuKernel):
  """C = the sum of ``S`` partial products (``parts``: [S, M, N] in the accumulation type),
  converted to the dot's type and stored through ``dot_writer`` (so a fused epilogue applies
  here): one thread per element of C, the partials read coalesced."""
  BLOCK = 256

  def __init__(self, name, dot, parts, out, S, epilogue=None):
    self.dot, self.parts, self.out, self.S, self.epilogue = dot, parts, out, S, epilogue
    self.spec = K.DotSpec(dot)
    self.nout = self.spec.M * self.spec.N
    reads, writes = _dot_buffers(parts, parts, out, epilogue)
    super().__init__(name, reads, writes, work=self.nout * S)

  def launch(self, info):
    return (max(1, -(-self.nout // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.nout == 0:
      return
    acc_dt = np.dtype(self.parts.dtype)
    store = dot_writer(b, ptr, self)
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      P = ptr(self.parts)
      acc = E.alloca_entry(b, E.compute_type(acc_dt))
      b.store(E.const(acc_dt, 0), acc)
      with E.ForLoop(b, 0, self.S, "s") as sl:
        x = E.load_element(b, P, b.add(b.mul(sl.index, i64(self.nout)), o), acc_dt)
        b.store(b.fadd(b.load(acc), x), acc)
      v = E.convert_value(b, b.load(acc), acc_dt, self.dot.dtype)
      N = self.spec.N
      store(v, o, (i64(0), b.udiv(o, i64(N)), b.urem(o, i64(N))))


class TensorCoreDot(GpuKernel):
  """C[b] = A[b] @ B[b] on the tensor cores (``mma.sync``, f32 accumulation): 128x128 block
  tiles, 8 warps of 64x32, k slices of 32 through padded (bank-conflict-free) shared memory,
  the next slice loaded into registers (16-byte vector loads) while the current one is
  multiplied.  f32 operands are rounded to tf32 (``cvt.rna``) as they enter shared memory;
  bf16/f16 use m16n8k16.  Needs M, N % 128 == 0, K % 32 == 0 and unit stride along k or along
  m (A) / n (B)."""
  BM = BN = 128
  BK = 32
  WM, WN = 64, 32       # warp tile
  THREADS = 256

  def __init__(self, name, dot, lhs, rhs, out, kind: str, epilogue=None):
    self.dot, self.spec, self.kind = dot, K.DotSpec(dot), kind   # kind: tf32 | bf16 | f16
    self.lhs, self.rhs, self.out, self.epilogue = lhs, rhs, out, epilogue
    s = self.spec
    super().__init__(name, *_dot_buffers(lhs, rhs, out, epilogue), work=s.B * s.M * s.N * s.K)

  @classmethod
  def supports(cls, dot, info: DeviceInfo, allow_tf32: bool) -> str | None:
    """The kind of mma for ``dot`` or None."""
    if info.cc < 80:
      return None
    lhs, rhs = dot.operands
    s = K.DotSpec(dot)
    if not s.ok or not E._is_float(dot.dtype) or dot.dtype == E.F64:
      return None
    if lhs.dtype != rhs.dtype:
      return None
    dt = lhs.dtype
    kind = {E.F32: "tf32" if allow_tf32 else None, E.BF16: "bf16", F16: "f16"}.get(dt)
    if kind is None:
      return None
    if s.M % cls.BM or s.N % cls.BN or s.K % cls.BK or s.K == 0:
      return None
    if not (s.a_sk == 1 or s.a_sm == 1) or not (s.b_sn == 1 or s.b_sk == 1):
      return None
    per_vec = 16 // dt.itemsize          # 16-byte accesses need every stride to keep alignment
    strides = [s.a_sm if s.a_sk == 1 else s.a_sk, s.b_sk if s.b_sn == 1 else s.b_sn]
    if s.B > 1:
      strides += [s.a_sb, s.b_sb]
    if any(x % per_vec for x in strides):
      return None
    return kind

  def launch(self, info):
    s = self.spec
    return (s.N // self.BN, s.M // self.BM, s.B), (self.THREADS, 1, 1), 0

  # -- helpers ---------------------------------------------------------------------------------
  def _mma(self, b, afr, bfr, acc):
    F = ir.FloatType()
    shape = "m16n8k8" if self.kind == "tf32" else "m16n8k16"
    ty = {"tf32": "tf32", "bf16": "bf16", "f16": "f16"}[self.kind]
    asm = (f"mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 "
           "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
    fty = ir.FunctionType(ir.LiteralStructType([F] * 4), [I32] * 6 + [F] * 4)
    call = b.asm(fty, asm, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", list(afr) + list(bfr) + list(acc),
                 side_effect=False)
    return [b.extract_value(call, i) for i in range(4)]

  def _tf32(self, b, x):
    fty = ir.FunctionType(I32, [ir.FloatType()])
    return b.asm(fty, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], side_effect=False)

  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    BM, BN, BK, T = self.BM, self.BN, self.BK, self.THREADS
    narrow = self.kind != "tf32"
    mod = b.module
    # shared tiles: 32-bit words (tf32) or 16-bit halves (bf16/f16), padded rows
    if narrow:
      ety, ldk = E.I16, BK + 8          # A: [m][k], B: [n][k]   (k contiguous, 80-byte rows)
      As = shared_array(mod, ety, BM * ldk, self.name + "_As")
      Bs = shared_array(mod, ety, BN * ldk, self.name + "_Bs")
    else:
      ety = I32
      lda, ldb = BK + 4, BN + 8         # A: [m][k], B: [k][n]
      As = shared_array(mod, ety, BM * lda, self.name + "_As")
      Bs = shared_array(mod, ety, BK * ldb, self.name + "_Bs")
    tid = sreg64(b, "tid.x")
    lane = b.urem(tid, i64(32))
    warp = b.udiv(tid, i64(32))
    wm = b.udiv(warp, i64(BN // self.WN))       # 0..1
    wn = b.urem(warp, i64(BN // self.WN))       # 0..3
    g = b.udiv(lane, i64(4))
    t4 = b.urem(lane, i64(4))
    n0 = b.mul(sreg64(b, "ctaid.x"), i64(BN))
    m0 = b.mul(sreg64(b, "ctaid.y"), i64(BM))
    bat = sreg64(b, "ctaid.z")
    A, Bm = ptr(self.lhs), ptr(self.rhs)
    a_base = b.mul(bat, i64(s.a_sb))
    b_base = b.mul(bat, i64(s.b_sb))
    edt = self.dot.operands[0].dtype
    sty = E.storage_type(edt)
    per_vec = 16 // edt.itemsize                # elements per 16-byte vector
    vty = ir.VectorType(sty, per_vec)
    nvec_a = BM * BK // per_vec // T            # vectors per thread per tile
    nvec_b = BN * BK // per_vec // T
    F = ir.FloatType()
    zero = ir.Constant(F, 0.0)
    MI, NI = self.WM // 16, self.WN // 8
    accs = [[[E.alloca_entry(b, F) for _ in range(4)] for _ in range(NI)] for _ in range(MI)]
    for row in accs:
      for c in row:
        for a in c:
          b.store(zero, a)
    regs_a = [E.alloca_entry(b, vty) for _ in range(nvec_a)]
    regs_b = [E.alloca_entry(b, vty) for _ in range(nvec_b)]

    # which (row, col) of the tile vector q of this thread covers, per operand layout
    def a_coords(q):
      v = b.add(tid, i64(q * T))
      if s.a_sk == 1:     # vectors along k
        per_row = BK // per_vec
        return b.udiv(v, i64(per_row)), b.mul(b.urem(v, i64(per_row)), i64(per_vec)), True
      per_row = BM // per_vec   # vectors along m
      return b.mul(b.urem(v, i64(per_row)), i64(per_vec)), b.udiv(v, i64(per_row)), False

    def b_coords(q):
      v = b.add(tid, i64(q * T))
      if s.b_sn == 1:     # vectors along n
        per_row = BN // per_vec
        return b.mul(b.urem(v, i64(per_row)), i64(per_vec)), b.udiv(v, i64(per_row)), True
      per_row = BK // per_vec   # vectors along k
      return b.udiv(v, i64(per_row)), b.mul(b.urem(v, i64(per_row)), i64(per_vec)), False

    def vload(base_ptr, off):
      p = b.gep(base_ptr, [off], inbounds=True)
      return b.load(b.bitcast(p, vty.as_pointer()), align=16)

    def load_global(k0):
      for q in range(nvec_a):
        mm, kk, _ = a_coords(q)
        off = b.add(a_base, b.add(b.mul(b.add(m0, mm), i64(s.a_sm)),
                                  b.mul(b.add(k0, kk), i64(s.a_sk))))
        b.store(vload(A, off), regs_a[q])
      for q in range(nvec_b):
        nn, kk, _ = b_coords(q)
        off = b.add(b_base, b.add(b.mul(b.add(n0, nn), i64(s.b_sn)),
                                  b.mul(b.add(k0, kk), i64(s.b_sk))))
        b.store(vload(Bm, off), regs_b[q])

    def to_word(x):
      if narrow:
        return x                       # i16 storage bits
      return self._tf32(b, x)          # f32 -> tf32 bits (i32)

    def sidx(v):
      return b.trunc(v, I32)

    def store_shared():
      for q in range(nvec_a):
        mm, kk, along_k = a_coords(q)
        vec = b.load(regs_a[q])
        for e in range(per_vec):
          x = b.extract_element(vec, ir.Constant(I32, e))
          m_e, k_e = (mm, b.add(kk, i64(e))) if along_k else (b.add(mm, i64(e)), kk)
          pos = b.add(b.mul(m_e, i64(ldk if narrow else lda)), k_e)
          b.store(to_word(x), shared_ptr(b, As, sidx(pos)))
      for q in range(nvec_b):
        nn, kk, along_n = b_coords(q)
        vec = b.load(regs_b[q])
        for e in range(per_vec):
          x = b.extract_element(vec, ir.Constant(I32, e))
          n_e, k_e = (b.add(nn, i64(e)), kk) if along_n else (nn, b.add(kk, i64(e)))
          if narrow:
            pos = b.add(b.mul(n_e, i64(ldk)), k_e)
          else:
            pos = b.add(b.mul(k_e, i64(ldb)), n_e)
          b.store(to_word(x), shared_ptr(b, Bs, sidx(pos)))

    def load_pair(arr, pos):
      """Two consecutive 16-bit elements at even ``pos`` as one i32."""
      p = shared_ptr(b, arr, sidx(pos))
      return b.load(b.bitcast(p, ir.PointerType(I32, addrspace=3)), align=4)

    def compute():
      kstep = 8 if not narrow else 16
      for ks in range(BK // kstep):
        kb = ks * kstep
        afr = []
        for mi in range(MI):
          r0 = b.add(b.add(b.mul(wm, i64(self.WM)), i64(mi * 16)), g)
          r1 = b.add(r0, i64(8))
          if narrow:
            c0 = b.add(i64(kb), b.mul(t4, i64(2)))
            c1 = b.add(c0, i64(8))
            afr.append([load_pair(As, b.add(b.mul(r, i64(ldk)), c))
                        for r, c in ((r0, c0), (r1, c0), (r0, c1), (r1, c1))])
          else:
            c0 = b.add(i64(kb), t4)
            c1 = b.add(c0, i64(4))
            afr.append([b.load(shared_ptr(b, As, sidx(b.add(b.mul(r, i64(lda)), c))))
                        for r, c in ((r0, c0), (r1, c0), (r0, c1), (r1, c1))])
        bfr = []
        for ni in range(NI):
          col = b.add(b.add(b.mul(wn, i64(self.WN)), i64(ni * 8)), g)
          if narrow:
            k0_ = b.add(i64(kb), b.mul(t4, i64(2)))
            bfr.append([load_pair(Bs, b.add(b.mul(col, i64(ldk)), k0_)),
                        load_pair(Bs, b.add(b.mul(col, i64(ldk)), b.add(k0_, i64(8))))])
          else:
            k0_ = b.add(i64(kb), t4)
            bfr.append([b.load(shared_ptr(b, Bs, sidx(b.add(b.mul(k0_, i64(ldb)), col)))),
                        b.load(shared_ptr(b, Bs, sidx(b.add(b.mul(b.add(k0_, i64(4)),
                                                                  i64(ldb)), col))))])
        for mi in range(MI):
          for ni in range(NI):
            cur = [b.load(a) for a in accs[mi][ni]]
            new = self._mma(b, afr[mi], bfr[ni], cur)
            for a, v in zip(accs[mi][ni], new):
              b.store(v, a)

    KT = Kd // BK
    load_global(i64(0))
    store_shared()
    barrier(b)
    with E.ForLoop(b, 0, KT, "kt") as kt:
      more = b.icmp_signed("<", b.add(kt.index, i64(1)), i64(KT))
      with b.if_then(more):
        load_global(b.mul(b.add(kt.index, i64(1)), i64(BK)))
      compute()
      barrier(b)
      with b.if_then(more):
        store_shared()
      barrier(b)
    _store_mma_accumulators(b, accs, dot_writer(b, ptr, self), self.dot.dtype, bat=bat, M=M,
                            N=N, m0=m0, n0=n0, wm=wm, wn=wn, WM=self.WM, WN=self.WN, g=g,
                            t4=t4, MI=MI, NI=NI)


class Epilogue:
  """Elementwise consumers of a dot fused into the dot's kernel (a kOutput fusion's bias add and
  activation, a gradient's mask): ``outputs`` ((instr, Buf) pairs over the dot's dims) are
  evaluated by the shared emitter where each accumulator is stored, with the dot's element
  handed to it (``Emitter.remember``) instead of going through memory.  ``leafmap`` holds the
  consumers' other leaves.  Planned by ``fuse_dot_epilogues``."""

  def __init__(self, dot, outputs, leafmap):
    self.dot, self.outputs = dot, list(outputs)
    self.leafmap = {k: v for k, v in leafmap.items() if k is not dot}
    self.reads = K._leaf_bufs(self.leafmap)
    self.writes = K.output_bufs(self.outputs)


def _dot_buffers(lhs, rhs, out, epilogue):
  """(reads, writes) of a dot kernel: C, or in its place the fused epilogue's outputs."""
  if epilogue is None:
    return [lhs, rhs], [out]
  return [lhs, rhs] + epilogue.reads, epilogue.writes


def dot_writer(b, ptr, kernel):
  """``store(v, linear, (batch, m, n))``: where a dot kernel (``dot``, ``out``, ``epilogue``,
  ``spec`` attributes) puts element ``v`` of C (a compute value of the dot's type; ``linear``
  its row-major position): into C, or through the fused epilogue."""
  dot, epi = kernel.dot, kernel.epilogue
  if epi is None:
    C, dt = ptr(kernel.out), dot.dtype
    return lambda v, linear, where: E.store_element(b, v, C, linear, dt)
  em = Emitter(b, K._make_leaves(b, epi.leafmap, ptr))
  dims = tuple(dot.dims)
  plain = len(dims) == 2 and kernel.spec.B == 1
  batched = len(dims) == 3 and dims[0] == kernel.spec.B

  def store(v, linear, where):
    em.push_scope()
    multi = list(where[1:]) if plain else list(where) if batched else None
    idx = Index(b, dims, linear=linear, multi=multi)
    em.remember(dot, idx, v)
    K.store_outputs(b, em, epi.outputs, idx, ptr)
    em.pop_scope()
  return store


def _store_mma_accumulators(b, accs, store, out_dt, *, bat, M, N, m0, n0, wm, wn, WM, WN, g,
                            t4, MI, NI):
  """The epilogue of both tensor-core kernels: a warp's f32 accumulators, converted to the
  result type, to ``store`` (``dot_writer``).  In each 16x8 tile, c0,c1 sit at (g, 2t..2t+1)
  and c2,c3 at (g+8, 2t..2t+1)."""
  c_base = b.mul(bat, i64(M * N))
  for mi in range(MI):
    for ni in range(NI):
      r0 = b.add(m0, b.add(b.add(b.mul(wm, i64(WM)), i64(mi * 16)), g))
      col = b.add(n0, b.add(b.add(b.mul(wn, i64(WN)), i64(ni * 8)), b.mul(t4, i64(2))))
      for h in range(2):
        row = b.add(r0, i64(8 * h)) if h else r0
        base = b.add(c_base, b.add(b.mul(row, i64(N)), col))
        for e in range(2):
          v = E.convert_value(b, b.load(accs[mi][ni][2 * h + e]), E.F32, out_dt)
          store(v, b.add(base, i64(e)) if e else base,
                (bat, row, b.add(col, i64(e)) if e else col))


def _asm(b, text, constraints, args, ret=None, side_effect=True):
  fty = ir.FunctionType(ret or ir.VoidType(), [a.type for a in args])
  return b.asm(fty, text, constraints, list(args), side_effect=side_effect)


def _saddr(b, p):
  """The .shared-space address (i64) of an addrspace(3) pointer."""
  return b.ptrtoint(p, I64)


class MmaDot(GpuKernel):
  """C[b] = A[b] @ B[b] on the tensor cores (``mma.sync``, f32 accumulation), second version:
  128x128 block tiles, 8 warps of 64x32; k slices (32 deep for bf16/f16, 16 for tf32) are
  copied global -> shared with ``cp.async`` (16 bytes each, no registers) into two stages, the
  next slice in flight while the current one is multiplied.  Shared tiles keep each operand's
  contiguous dimension (rows padded by 16 bytes: conflict-free), and fragments are read with
  ``ldmatrix`` (``.trans`` where the tile is stored the other way round; plain 32-bit loads for
  the tf32 tiles ldmatrix cannot transpose).  f32 fragments are rounded to tf32 (``cvt.rna``).
  Same conditions as ``TensorCoreDot``."""
  BM = BN = 128
  WM, WN = 64, 32
  THREADS = 256

  def __init__(self, name, dot, lhs, rhs, out, kind: str, epilogue=None):
    self.dot, self.spec, self.kind = dot, K.DotSpec(dot), kind
    self.lhs, self.rhs, self.out, self.epilogue = lhs, rhs, out, epilogue
    self.BK = 16 if kind == "tf32" else 32
    s = self.spec
    super().__init__(name, *_dot_buffers(lhs, rhs, out, epilogue), work=s.B * s.M * s.N * s.K)

  def launch(self, info):
    s = self.spec
    return (s.N // self.BN, s.M // self.BM, s.B), (self.THREADS, 1, 1), 0

  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    BM, BN, BK, T = self.BM, self.BN, self.BK, self.THREADS
    tf32 = self.kind == "tf32"
    edt = self.dot.operands[0].dtype
    esz = edt.itemsize
    epv = 16 // esz                       # elements per 16-byte chunk
    ety = I32 if tf32 else E.I16
    a_kmaj = s.a_sk == 1                  # A tile stored [m][k] (else [k][m])
    b_nmaj = s.b_sn == 1                  # B tile stored [k][n] (else [n][k])
    pad_k = 4 if tf32 else 8
    # (rows, row length) of each stage's tiles
    a_rows, a_ld = (BM, BK + pad_k) if a_kmaj else (BK, BM + 8)
    b_rows, b_ld = (BK, BN + 8) if b_nmaj else (BN, BK + pad_k)
    a_stage, b_stage = a_rows * a_ld, b_rows * b_ld
    mod = b.module
    As = shared_array(mod, ety, 2 * a_stage, self.name + "_As")
    Bs = shared_array(mod, ety, 2 * b_stage, self.name + "_Bs")
    tid = sreg64(b, "tid.x")
    lane = b.urem(tid, i64(32))
    warp = b.udiv(tid, i64(32))
    wm = b.udiv(warp, i64(BN // self.WN))
    wn = b.urem(warp, i64(BN // self.WN))
    g = b.udiv(lane, i64(4))
    t4 = b.urem(lane, i64(4))
    li = b.udiv(lane, i64(8))             # which 8x8 matrix this lane addresses in ldmatrix
    lr = b.urem(lane, i64(8))             # which row of it
    n0 = b.mul(sreg64(b, "ctaid.x"), i64(BN))
    m0 = b.mul(sreg64(b, "ctaid.y"), i64(BM))
    bat = sreg64(b, "ctaid.z")
    A, Bm = ptr(self.lhs), ptr(self.rhs)
    a_base = b.mul(bat, i64(s.a_sb))
    b_base = b.mul(bat, i64(s.b_sb))
    F = ir.FloatType()
    MI, NI = self.WM // 16, self.WN // 8
    accs = [[[E.alloca_entry(b, F) for _ in range(4)] for _ in range(NI)] for _ in range(MI)]
    for row in accs:
      for c in row:
        for a in c:
          b.store(ir.Constant(F, 0.0), a)

    def sp(arr, idx):
      return shared_ptr(b, arr, b.trunc(idx, I32))

    def gaddr(base_ptr, off):
      return b.ptrtoint(b.gep(base_ptr, [off], inbounds=True), I64)

    def copy16(dst_ptr, src_addr):
      _asm(b, "{ .reg .u64 g; cvta.to.global.u64 g, $1; cp.async.cg.shared.global [$0], [g], 16; }",
           "l,l,~{memory}", [_saddr(b, dst_ptr), src_addr])

    def issue(stage, k0):
      """This thread's 16-byte chunks of the A and B slices at k0 into ``stage``."""
      a_off = b.mul(stage, i64(a_stage))
      b_off = b.mul(stage, i64(b_stage))
      a_chunks_row = (BK if a_kmaj else BM) // epv
      b_chunks_row = (BN if b_nmaj else BK) // epv
      for q in range(a_rows * a_chunks_row // T):
        c = b.add(tid, i64(q * T))
        r = b.udiv(c, i64(a_chunks_row))
        e = b.mul(b.urem(c, i64(a_chunks_row)), i64(epv))
        if a_kmaj:   # r = m, e = k
          src = b.add(a_base, b.add(b.mul(b.add(m0, r), i64(s.a_sm)), b.add(k0, e)))
        else:        # r = k, e = m
          src = b.add(a_base, b.add(b.mul(b.add(k0, r), i64(s.a_sk)), b.add(m0, e)))
        copy16(sp(As, b.add(a_off, b.add(b.mul(r, i64(a_ld)), e))), gaddr(A, src))
      for q in range(b_rows * b_chunks_row // T):
        c = b.add(tid, i64(q * T))
        r = b.udiv(c, i64(b_chunks_row))
        e = b.mul(b.urem(c, i64(b_chunks_row)), i64(epv))
        if b_nmaj:   # r = k, e = n
          src = b.add(b_base, b.add(b.mul(b.add(k0, r), i64(s.b_sk)), b.add(n0, e)))
        else:        # r = n, e = k
          src = b.add(b_base, b.add(b.mul(b.add(n0, r), i64(s.b_sn)), b.add(k0, e)))
        copy16(sp(Bs, b.add(b_off, b.add(b.mul(r, i64(b_ld)), e))), gaddr(Bm, src))
      _asm(b, "cp.async.commit_group;", "~{memory}", [])

    R4 = ir.LiteralStructType([I32] * 4)

    def ldmatrix(p, trans):
      op = "ldmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "") + ".shared.b16"
      r = _asm(b, op + " {$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,l,~{memory}",
               [_saddr(b, p)], ret=R4)
      return [b.extract_value(r, i) for i in range(4)]

    def rna(w):
      if not tf32:
        return w
      return _asm(b, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [b.bitcast(w, F)], ret=I32,
                  side_effect=False)

    def compute(stage):
      a_off = b.mul(stage, i64(a_stage))
      b_off = b.mul(stage, i64(b_stage))
      kstep = 8 if tf32 else 16
      for ks in range(BK // kstep):
        kb = ks * kstep
        afr = []
        for mi in range(MI):
          mbase = b.add(b.mul(wm, i64(self.WM)), i64(mi * 16))
          if tf32 and not a_kmaj:     # [k][m] words: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3
            regs = []
            for dm, dk in ((0, 0), (8, 0), (0, 4), (8, 4)):
              pos = b.add(b.mul(b.add(i64(kb + dk), t4), i64(a_ld)),
                          b.add(mbase, b.add(g, i64(dm))))
              regs.append(b.load(sp(As, b.add(a_off, pos))))
          elif a_kmaj:                  # [m][k]: plain ldmatrix
            m = b.add(mbase, b.add(b.mul(b.urem(li, i64(2)), i64(8)), lr))
            k = b.add(i64(kb), b.mul(b.udiv(li, i64(2)), i64(4 if tf32 else 8)))
            regs = ldmatrix(sp(As, b.add(a_off, b.add(b.mul(m, i64(a_ld)), k))), False)
          else:                         # [k][m] halves: ldmatrix.trans
            k = b.add(i64(kb), b.add(b.mul(b.udiv(li, i64(2)), i64(8)), lr))
            m = b.add(mbase, b.mul(b.urem(li, i64(2)), i64(8)))
            regs = ldmatrix(sp(As, b.add(a_off, b.add(b.mul(k, i64(a_ld)), m))), True)
          afr.append([rna(x) for x in regs])
        bfr = []
        for nj in range(0, NI, 2):      # two n8 tiles per step
          nbase = b.add(b.mul(wn, i64(self.WN)), i64(nj * 8))
          if tf32 and b_nmaj:           # [k][n] words: b0 (k t, n g), b1 (k t+4, n g)
            for d in (0, 8):
              col = b.add(nbase, b.add(g, i64(d)))
              pair = []
              for dk in (0, 4):
                pos = b.add(b.mul(b.add(i64(kb + dk), t4), i64(b_ld)), col)
                pair.append(rna(b.load(sp(Bs, b.add(b_off, pos)))))
              bfr.append(pair)
            continue
          if b_nmaj:                    # [k][n] halves: ldmatrix.trans
            k = b.add(i64(kb), b.add(b.mul(b.urem(li, i64(2)), i64(8)), lr))
            n = b.add(nbase, b.mul(b.udiv(li, i64(2)), i64(8)))
            regs = ldmatrix(sp(Bs, b.add(b_off, b.add(b.mul(k, i64(b_ld)), n))), True)
          else:                         # [n][k]: plain ldmatrix
            n = b.add(nbase, b.add(b.mul(b.udiv(li, i64(2)), i64(8)), lr))
            k = b.add(i64(kb), b.mul(b.urem(li, i64(2)), i64(4 if tf32 else 8)))
            regs = ldmatrix(sp(Bs, b.add(b_off, b.add(b.mul(n, i64(b_ld)), k))), False)
          regs = [rna(x) for x in regs]
          bfr.append([regs[0], regs[1]])
          bfr.append([regs[2], regs[3]])
        for mi in range(MI):
          for ni in range(NI):
            cur = [b.load(a) for a in accs[mi][ni]]
            new = _mma(b, self.kind, afr[mi], bfr[ni], cur)
            for a, v in zip(accs[mi][ni], new):
              b.store(v, a)

    KT = Kd // BK
    issue(i64(0), i64(0))
    with E.ForLoop(b, 0, KT, "kt") as kt:
      nxt = b.add(kt.index, i64(1))
      with b.if_then(b.icmp_signed("<", nxt, i64(KT))):
        issue(b.and_(nxt, i64(1)), b.mul(nxt, i64(BK)))
      with b.if_then(b.icmp_signed(">=", nxt, i64(KT))):
        _asm(b, "cp.async.commit_group;", "~{memory}", [])
      _asm(b, "cp.async.wait_group 1;", "~{memory}", [])
      barrier(b)
      compute(b.and_(kt.index, i64(1)))
      barrier(b)
    _asm(b, "cp.async.wait_group 0;", "~{memory}", [])
    _store_mma_accumulators(b, accs, dot_writer(b, ptr, self), self.dot.dtype, bat=bat, M=M,
                            N=N, m0=m0, n0=n0, wm=wm, wn=wn, WM=self.WM, WN=self.WN, g=g,
                            t4=t4, MI=MI, NI=NI)


def _mma(b, kind, afr, bfr, acc):
  F = ir.FloatType()
  shape = "m16n8k8" if kind == "tf32" else "m16n8k16"
  asm = (f"mma.sync.aligned.{shape}.row.col.f32.{kind}.{kind}.f32 "
         "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
  fty = ir.FunctionType(ir.LiteralStructType([F] * 4), [I32] * 6 + [F] * 4)
  call = b.asm(fty, asm, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", list(afr) + list(bfr) + list(acc),
               side_effect=False)
  return [b.extract_value(call, i) for i in range(4)]



# ---------------------------------------------------------------------------------------------
# translation of planned kernels
# ---------------------------------------------------------------------------------------------

def _independent(reduces, leafmap) -> bool:
  """No reduction among ``reduces`` reads another one."""
  ids = {id(r) for r in reduces}
  for r in reduces:
    below = K._reachable(list(r.operands), leafmap)
    if (below & ids) - {id(r)}:
      return False
  return True


def _tf32_allowed(dot=None) -> bool:
  """float32 operands may be rounded to tf32 (JAX's default on tensor cores) unless the dot or
  the configured default asks for "highest" precision."""
  if dot is not None and "highest" in dot.attrs.get("operand_precision", ()):
    return False
  from ourjax.config import config
  p = config.read("jax_default_matmul_precision") if hasattr(config, "read") else \
      getattr(config, "jax_default_matmul_precision", None)
  return str(p).lower() not in ("highest", "float32", "precision.highest")


def _dot_kernels(name, dot, lhs, rhs, out, info: DeviceInfo, new_temp, epilogue=None) -> list:
  """The kernels computing ``dot`` into ``out`` (or, with a fused ``Epilogue``, its outputs).

  Tensor-core dots use ``WgmmaDot`` (wgmma.py, Hopper) where its layouts and tiles fit; an A
  stored M-major (``x.T @ dy``, every weight gradient) is first copied K-major by a
  ``StridedTranspose`` (one pass over A; wgmma then runs at about twice MmaDot's rate);
  elsewhere ``MmaDot``.  ``OURJAX_CUDA_MMA=v2`` keeps them on MmaDot, ``v1`` on
  ``TensorCoreDot``.  Other dots use ``SimtDot``, which has no epilogue: its epilogue becomes
  an elementwise kernel reading C; a SimtDot with too few output tiles for the GPU and a long
  contraction is split along K (``_split_k``: partial products, then ``SplitKSum``, which
  applies the epilogue)."""
  from ourjax.backends.cuda.transpose import StridedTranspose
  kind = TensorCoreDot.supports(dot, info, _tf32_allowed(dot))
  pre, main = [], None
  if kind is not None:
    choice = os.environ.get("OURJAX_CUDA_MMA", "wgmma")
    if choice == "v1":
      main = TensorCoreDot(name, dot, lhs, rhs, out, kind, epilogue)
    elif choice == "wgmma":
      from ourjax.backends.cuda.wgmma import WgmmaDot
      how = WgmmaDot.supports(dot, info, kind)
      if how is not None:
        main = WgmmaDot(name, dot, lhs, rhs, out, kind, *how, epilogue=epilogue)
      else:
        s = K.DotSpec(dot)
        if s.ok and s.a_sm == 1 and s.a_sk != 1 and s.M > 1:
          staged = copy.copy(s)
          staged.a_sb, staged.a_sm, staged.a_sk = s.M * s.K, s.K, 1
          how = WgmmaDot.supports(dot, info, kind, staged)
          if how is not None:
            lhs_k = new_temp(lhs.dtype, (s.B, s.M, s.K), f"{name}.lhs_k_major")
            pre = [StridedTranspose(name + "_t", lhs, lhs_k, s.B, s.M, s.K, s.a_sb, s.a_sk)]
            main = WgmmaDot(name, dot, lhs_k, rhs, out, kind, *how, epilogue=epilogue,
                            spec=staged)
    if main is None:
      main = MmaDot(name, dot, lhs, rhs, out, kind, epilogue)
  else:
    split = _split_k(dot, info)
    if split is not None:
      S, staged = split
      acc_dt = E.accumulation_dtype(dot.operands[0].dtype, dot.operands[1].dtype, dot.dtype)
      parts = new_temp(acc_dt, (S, staged.M, staged.N), f"{name}.k_parts")
      return [SimtDot(name + "_p", dot, lhs, rhs, parts, spec=staged, out_dtype=acc_dt),
              SplitKSum(name, dot, parts, out, S, epilogue)]
    main = SimtDot(name, dot, lhs, rhs, out)
  post = []
  if epilogue is not None and getattr(main, "epilogue", None) is None:
    post = [Elementwise(name + "_e", dot.dims, epilogue.outputs,
                        {**epilogue.leafmap, dot: out})]
  return pre + [main] + post


class FusedDot(K.Kernel):
  """A planned dot with its elementwise consumer fused in (``fuse_dot_epilogues``); ``out``
  is the dot's own buffer, which the GPU kernels need only where they cannot fuse."""

  def __init__(self, name, dot, lhs, rhs, out, epilogue: Epilogue):
    self.dot, self.lhs, self.rhs, self.out, self.epilogue = dot, lhs, rhs, out, epilogue
    super().__init__(name, [lhs, rhs] + epilogue.reads, epilogue.writes)


def _dot_producer(k):
  """(dot, lhs, rhs, out) of a planned kernel computing one dot into a buffer, or None."""
  if isinstance(k, K.DotKernel):
    return k.dot, k.lhs, k.rhs, k.out
  if (isinstance(k, K.LoopKernel) and len(k.outputs) == 1 and k.outputs[0][0].opcode == "dot"
          and isinstance(k.outputs[0][1], K.Buf)):
    dot, buf = k.outputs[0]
    specs = [k.leafmap.get(o) for o in dot.operands]
    if all(isinstance(x, K.Buf) for x in specs) and _gpu_dot_ok(dot):
      return dot, specs[0], specs[1], buf
  return None


def _epilogue_ok(c, dot, out) -> bool:
  """Whether planned kernel ``c`` can run as ``dot``'s epilogue: an elementwise kernel over the
  dot's shape reading the dot's buffer ``out`` only as the dot, through elementwise ops at its
  own index (a broadcast or slice of the dot would need other elements)."""
  if not isinstance(c, K.LoopKernel) or c.prefetch_outer or c.prefetch_elem:
    return False
  dims = tuple(dot.dims)
  if c.dims != dims or any(i.shape.is_tuple or K._dims(i) != dims for i, _ in c.outputs):
    return False
  if c.leafmap.get(dot) is not out or sum(v is out for v in c.leafmap.values()) != 1:
    return False
  seen, stack = set(), [i for i, _ in c.outputs]
  while stack:
    x = stack.pop()
    if id(x) in seen or x is dot or x in c.leafmap:
      continue
    seen.add(id(x))
    if x.opcode in hlo.ELEMENTWISE_OPS and tuple(x.dims) == dims:
      stack.extend(x.operands)
    elif id(dot) in K._reachable(list(x.operands), c.leafmap):
      return False
  return True


def fuse_dot_epilogues(kernels, outputs) -> list:
  """One group's planned ``kernels`` with every dot whose result feeds exactly one elementwise
  kernel of the dot's shape (and is not an output of the group, ``outputs``: (instr, Buf)
  pairs) turned, with that kernel, into a ``FusedDot`` placed where the consumer was (after
  everything it reads)."""
  out_bufs = set()
  for _, buf in outputs:
    out_bufs.update(id(x) for x in (buf if isinstance(buf, tuple) else (buf,)))
  kernels = list(kernels)
  for i, k in enumerate(kernels):
    prod = _dot_producer(k)
    if prod is None or id(prod[3]) in out_bufs:
      continue
    dot, lhs, rhs, out = prod
    readers = [j for j, c in enumerate(kernels)
               if j != i and c is not None and any(x is out for x in c.reads)]
    if len(readers) != 1 or readers[0] < i or not _epilogue_ok(kernels[readers[0]], dot, out):
      continue
    c = kernels[readers[0]]
    kernels[readers[0]] = FusedDot(k.name, dot, lhs, rhs, out,
                                   Epilogue(dot, c.outputs, c.leafmap))
    kernels[i] = None
  return [k for k in kernels if k is not None]


def _gpu_dot_ok(dot) -> bool:
  lhs, rhs = dot.operands
  return (K.DotSpec(dot).ok and all(E._is_float(x.dtype) for x in (lhs, rhs, dot))
          and not dot.shape.is_tuple)


def translate(kernel: K.Kernel, new_temp, info: DeviceInfo, max_threads: int) -> list:
  """GPU kernels computing what the planned ``kernel`` computes (see the module docstring).
  ``new_temp(dtype, dims, name) -> Buf`` makes arena buffers (partials)."""
  name = kernel.name
  if isinstance(kernel, K.CopyKernel):
    return [Copy(name, kernel.src, kernel.dst)]
  if isinstance(kernel, (K.DotKernel, FusedDot)):
    return _dot_kernels(name, kernel.dot, kernel.lhs, kernel.rhs, kernel.out, info, new_temp,
                        getattr(kernel, "epilogue", None))
  if isinstance(kernel, K.SplitReducePartials):
    return []      # the GPU version is made from the finishing half
  if isinstance(kernel, K.SplitReduceFinish):
    r = kernel.reduce
    return _split(name, r.dims, [(r, kernel.out)], [r], kernel.leafmap, new_temp, info)
  if isinstance(kernel, K.ColumnReduceKernel):
    return _column(kernel, new_temp, info)
  if isinstance(kernel, K.LoopKernel):
    return _loop(kernel, new_temp, info)
  if isinstance(kernel, (K.SortKernel, K.ScatterKernel)):
    from ourjax.backends.cuda import sort_scatter    # imports this module: a local import
    return sort_scatter.translate(kernel, new_temp, info, max_threads)
  return [Threaded(kernel, max_threads)]


def _loop(kernel: K.LoopKernel, new_temp, info):
  name = kernel.name
  outs, leafmap, dims = kernel.outputs, kernel.leafmap, kernel.dims
  # a lone dot with its operands in buffers: a matrix kernel
  if len(outs) == 1 and outs[0][0].opcode == "dot" and isinstance(outs[0][1], K.Buf):
    dot, buf = outs[0]
    specs = [leafmap.get(o) for o in dot.operands]
    if all(isinstance(x, K.Buf) for x in specs) and _gpu_dot_ok(dot):
      return _dot_kernels(name, dot, specs[0], specs[1], buf, info, new_temp)
  if kernel.rows and (kernel.prefetch_outer or any(K._dims(i) != dims for i, _ in outs)):
    inner = [(i, b) for i, b in outs if K._dims(i) == dims]
    outer = [(i, b) for i, b in outs if K._dims(i) != dims]
    cols = _column_outputs(name, dims[:-1], inner, outer, kernel.prefetch_outer, leafmap,
                           new_temp, info)
    if cols is not None:
      return cols
    return [RowReduce(name, dims[:-1], dims[-1], inner, outer, kernel.prefetch_outer,
                      leafmap)]
  if kernel.prefetch_elem and all(K._dims(i) == dims for i, _ in outs):
    reds = kernel.prefetch_elem
    cols = _column_outputs(name, dims, [], outs, reds, leafmap, new_temp, info)
    if cols is not None:
      return cols
    longest = max(_red_count(r) for r in reds)
    nout = math.prod(dims)
    if longest >= 32 and nout:
      if (nout < 2 * info.sm_count and longest >= 4096 and _independent(reds, leafmap)):
        return _split(name, dims, outs, reds, leafmap, new_temp, info)
      return [RowReduce(name, dims, None, [], outs, reds, leafmap)]
  if not kernel.prefetch_outer and not kernel.prefetch_elem:
    from ourjax.backends.cuda import transpose
    tiled = transpose.plan(name, dims, outs, leafmap)
    if tiled is not None:
      return [tiled]
  return [Elementwise(name, dims, outs, leafmap)]


def _column_block(r):
  """(pre, red, post) of a reduce over one contiguous block of dimensions that is not at the
  end of its operand, else None."""
  src = r.operands[0].dims
  rd = sorted(r.attrs["dimensions"])
  if not rd or rd != list(range(rd[0], rd[-1] + 1)) or rd[-1] == len(src) - 1:
    return None
  return src[:rd[0]], src[rd[0]:rd[-1] + 1], src[rd[-1] + 1:]


def _column_outputs(name, odims, inner, outer, reds, leafmap, new_temp, info):
  """Kernels for outputs that need reductions over leading/middle dimensions (a row block
  would read them down columns): column partials per reduction, then one pass computing the
  outputs of ``odims``, plus an elementwise kernel for ``inner`` outputs that do not use the
  reductions.  None when that does not apply (the caller keeps one kernel)."""
  if not reds or not outer:
    return None
  blocks = [_column_block(r) for r in reds]
  if any(bk is None for bk in blocks) or any(r.shape.is_tuple for r in reds):
    return None
  if any(E.simple_reducer(r.attrs["to_apply"]) is None for r in reds):
    return None
  if any(tuple(r.dims) != tuple(odims) for r in reds):
    return None
  ids = {id(r) for r in reds}
  if inner and K._reachable([i for i, _ in inner], leafmap) & ids:
    return None
  for r in reds:        # a reduction reading another one needs the row kernel's ordering
    if (K._reachable(list(r.operands), leafmap) & ids) - {id(r)}:
      return None
  nout = math.prod(odims)
  if nout == 0:
    return None
  kernels = []
  if inner:
    kernels.append(Elementwise(name + "_e", K._dims(inner[0][0]), inner,
                               K._restrict_many(leafmap, inner)))
  splits = 1
  if nout < info.sm_count * 1024:
    longest = max(math.prod(bk[1]) for bk in blocks)
    splits = max(1, min(-(-info.sm_count * 2048 // nout), longest // 8))
  parts = []
  for j, (r, (pre, red, post)) in enumerate(zip(reds, blocks)):
    part = new_temp(_partial_dtype(r.dtype), (splits * nout,), f"{r.name}.colpart")
    parts.append(part)
    kernels.append(ColumnReduce(f"{name}_c{j}", r, None, K._restrict(leafmap, r), pre, red,
                                post, splits, part))
  kernels.append(ColumnOutputsFinish(name + "_f", odims, outer, reds, parts,
                                     K._restrict_many(leafmap, outer), splits))
  return kernels


def _split(name, dims, outs, reds, leafmap, new_temp, info):
  nout = max(1, math.prod(dims))
  longest = max(_red_count(r) for r in reds)
  block = 512
  groups = max(1, min(-(-info.sm_count * 4 // nout), -(-longest // (block * VEC * 2))))
  partials = []
  for r in reds:
    shapes = r.shape.tuple_shapes if r.shape.is_tuple else [r.shape]
    partials.append([new_temp(_partial_dtype(sh.dtype), (nout * groups,), f"{r.name}.part{k}")
                     for k, sh in enumerate(shapes)])
  restricted = K._restrict_many(leafmap, [(r, None) for r in reds])
  return [SplitPartials(name + "_p", dims, reds, partials, restricted, groups, block),
          SplitFinish(name + "_f", dims, outs, reds, partials, leafmap, groups)]


def _column(kernel: K.ColumnReduceKernel, new_temp, info):
  r = kernel.reduce
  nout = math.prod(kernel.pre) * math.prod(kernel.post)
  nred = math.prod(kernel.red)
  op = E.simple_reducer(r.attrs["to_apply"])
  splits = 1
  if op is not None and nout and nred >= 64 and nout < info.sm_count * 1024:
    splits = max(1, min(-(-info.sm_count * 2048 // nout), nred // 8))
  if splits == 1:
    return [ColumnReduce(kernel.name, r, kernel.out, kernel.leafmap, kernel.pre, kernel.red,
                         kernel.post)]
  part = new_temp(_partial_dtype(r.dtype), (splits * nout,), r.name + ".colpart")
  restricted = K._restrict(kernel.leafmap, r)
  return [ColumnReduce(kernel.name + "_p", r, kernel.out, restricted, kernel.pre, kernel.red,
                       kernel.post, splits, part),
          ColumnFinish(kernel.name + "_f", r, kernel.out, part, restricted, splits)]
