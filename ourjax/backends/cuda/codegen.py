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
few long reductions         ``SplitPartials``: ``G`` blocks per output write block partials;
                            ``SplitFinish`` combines them (and computes the outputs)
ColumnReduceKernel          ``ColumnReduce``: one thread per output element walking the reduced
                            block (coalesced across the kept minor dimensions), split into
                            partials + a combine pass (``ColumnFinish``, a block per output) when
                            there are few outputs, which also computes the elementwise kernels
                            that read its result at their own index (``horizontal.py``);
                            sibling reductions of a group over the same block in one pass
                            (``merge_column_reductions``)
dot (f32, bf16, f16)        ``wgmma.WgmmaDot`` (Hopper ``wgmma.mma_async``, sm_90a PTX) when the
                            layouts fit, at any sizes, else ``MmaDot`` (``mma.sync``; tf32 for
                            f32 unless the highest precision is configured) when the tile sizes
                            divide the problem, else ``SimtDot`` (64x64 shared-memory tiles);
                            f64 always ``SimtDot``.  An M-major A is first copied K-major
                            (``transpose.StridedTranspose``) where that makes it a WgmmaDot
                            (the dot kernels and their choice: ``dots.py``); a convolution's
                            patch matrix is read in place by the dot (``implicit_gemm.py``)
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

import math
import os
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from ourjax import _phases
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I1, I32, I64, Emitter, Index, i64

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
  mod.ourjax_arch = arch           # (read by GpuKernel.emit_gpu)
  return mod


PDL_MIN_CC = 90
"""The compute capability from which kernels take part in programmatic dependent launch
(Hopper's ``griddepcontrol``)."""


def grid_dependency_prologue(b) -> None:
  """The first instructions of a kernel on sm_90+: ``griddepcontrol.wait`` (touch no memory
  until the grids this one depends on have completed and their writes are visible: a no-op
  for a launch without a programmatic dependency), then ``griddepcontrol.launch_dependents``
  (the next kernel may be scheduled once every block of this one is past its wait).

  Together they let a graph edge between two kernels be *programmatic* (``driver.Graph``):
  the next kernel's blocks are launched and waiting while this one runs, so a chain of small
  dependent kernels (a loop body's) does not pay the full launch latency at every boundary,
  while its results are exactly those of a fully serialised chain (every kernel waits before
  its first access, reads and writes alike, so a buffer reused for a later value is not
  overwritten early either)."""
  fty = ir.FunctionType(ir.VoidType(), [])
  b.call(ir.InlineAsm(fty, "griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;",
                      "~{memory}", side_effect=True), [])


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
  """A special register (``tid.x``, ``ctaid.x``, ``ntid.x``, ``nctaid.x``...) as i32, or the
  value a kernel emitted as part of another sets for it (``b.sreg_values``, see
  ``horizontal.py``)."""
  over = getattr(b, "sreg_values", None)
  if over and name in over:
    return over[name]
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
    if int(getattr(module, "ourjax_arch", DEFAULT_ARCH).rstrip("a")) >= PDL_MIN_CC:
      grid_dependency_prologue(b)
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
        K.store_outputs(b, em, self.outputs, Index(b, dims, linear=lp.index), ptr,
                        evaluate_first=True)
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
  init value), memoises them and writes the outputs; from ``WIDE_GROUPS`` partials on, one
  block per output does.

  ``tails``: serial kernels (``Kernel``s of one thread) that followed it and are run by the
  thread that computed the only output, after its stores (``horizontal.fold_finish_epilogues``:
  a scan step's ``ys[t] = mean(...)`` stored into its stacked slice by the same launch)."""
  BLOCK = 128

  def __init__(self, name, dims, outputs, prefetch, partials, leafmap, groups, tails=()):
    self.dims, self.outputs = tuple(dims), list(outputs)
    self.prefetch, self.partials = list(prefetch), list(partials)
    self.leafmap, self.groups = dict(leafmap), groups
    self.tails = list(tails)
    self.nout = math.prod(self.dims)
    assert not self.tails or self.nout == 1, "serial tails follow a single output"
    flat = [p for ps in self.partials for p in ps]
    reads = flat + K._leaf_bufs(self.leafmap) + [x for t in self.tails for x in t.reads]
    writes = K.output_bufs(outputs) + [x for t in self.tails for x in t.writes]
    super().__init__(name, reads, writes, work=self.nout * groups)

  #: From this many partials per output, a block per output combines them (its threads
  #: striding over them, then a block reduction) instead of one thread per output: one thread
  #: adding hundreds of partials one after the other (a large sum's, or a stencil chain's one
  #: per tile) took longer than the launch.
  WIDE_GROUPS = 32
  WIDE_BLOCK = 128

  @property
  def wide(self) -> bool:
    return self.groups >= self.WIDE_GROUPS and self.nout <= 65535

  def launch(self, info):
    if self.wide:
      return (self.nout, 1, 1), (self.WIDE_BLOCK, 1, 1), 0
    return (-(-self.nout // self.BLOCK), 1, 1), (self.BLOCK, 1, 1), 0

  def emit_gpu(self, module):
    for t in self.tails:
      t.emit(module)
    return super().emit_gpu(module)

  def function_names(self):
    return [self.name] + [t.name for t in self.tails]

  def _fold(self, b, ptr, red, parts, o, start, step):
    """This thread's combination of partials ``start, start + step, ...`` of output ``o``."""
    G = self.groups
    accs = [E.alloca_entry(b, v.type) for v in red.ident]
    for a, v in zip(accs, red.ident):
      b.store(v, a)
    with E.ForLoop(b, start, G, "g", step=step) as g:
      pos = b.add(b.mul(o, i64(G)), g.index)
      xs = []
      for p, dt in zip(parts, red.dtypes):
        x = E.load_element(b, ptr(p), pos, p.dtype)
        xs.append(E.convert_value(b, x, p.dtype, dt) if p.dtype != np.dtype(dt) else x)
      new = red.combine([b.load(a) for a in accs], xs)
      for a, v in zip(accs, new):
        b.store(v, a)
    return [b.load(a) for a in accs]

  def _outputs(self, b, em, oidx, ptr):
    K.store_outputs(b, em, self.outputs, oidx, ptr)
    for t in self.tails:      # (this thread's own stores are visible to it)
      b.call(b.module.globals[t.name], [ptr(x) for x in t.buffers] + [i64(0), i64(1)])

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    if self.wide:              # a block per output
      T = self.WIDE_BLOCK
      o = sreg64(b, "ctaid.x")
      tid = sreg64(b, "tid.x")
      oidx = Index(b, self.dims, linear=o)
      for j, (r, parts) in enumerate(zip(self.prefetch, self.partials)):
        red = _Reducer(b, em, r)
        vals = _block_allreduce(b, red, self._fold(b, ptr, red, parts, o, tid, i64(T)), T,
                                f"{self.name}_w{j}")
        em.remember(r, oidx, red.result(red.finish(vals)))
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        self._outputs(b, em, oidx, ptr)
      return
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      oidx = Index(b, self.dims, linear=o)
      for r, parts in zip(self.prefetch, self.partials):
        red = _Reducer(b, em, r)
        em.remember(r, oidx, red.result(red.finish(self._fold(b, ptr, red, parts, o, 0, 1))))
      self._outputs(b, em, oidx, ptr)


class ColumnReduce(GpuKernel):
  """The ``reduces`` (sibling reductions over the same contiguous middle block ``red`` of
  ``pre + red + post``; often one, several for a multi-output fusion such as a batchnorm
  gradient's sums): thread (s, p, j) folds chunk ``s`` of the reduced block for output (p, j)
  of each, their common operands read and computed once per element; with one chunk it folds
  the whole block in order into ``outs``, else into ``partials[n][s, p*post + j]`` for
  ``ColumnFinish``."""
  BLOCK = 256

  def __init__(self, name, reduces, outs, leafmap, pre, red, post, splits=1, partials=None):
    self.reduces, self.outs = list(reduces), list(outs)
    self.partials = list(partials) if partials is not None else None
    self.leafmap = dict(leafmap)
    self.pre, self.red, self.post = tuple(pre), tuple(red), tuple(post)
    self.splits = splits
    self.nout = math.prod(self.pre) * math.prod(self.post)
    self.partial = partials is not None
    super().__init__(name, K._leaf_bufs(self.leafmap),
                     self.partials if self.partial else self.outs,
                     work=self.nout * math.prod(self.red) * len(self.reduces))

  def launch(self, info):
    n = self.nout * self.splits
    return (max(1, -(-n // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    nred, npost = math.prod(self.red), math.prod(self.post)
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
      if self.partial:
        reds = [_Reducer(b, em, r) for r in self.reduces]
        acc0s = [red.ident[0] for red in reds]
        csize = -(-nred // S)
        klo = b.mul(s, i64(csize))
        khi = b.add(klo, i64(csize))
        khi = b.select(b.icmp_signed(">", khi, i64(nred)), i64(nred), khi)
      else:
        reds = None
        acc0s = [em.scalar(r.operands[1]) for r in self.reduces]
        klo, khi = i64(0), i64(nred)
      accs = []
      for a0 in acc0s:
        acc = E.alloca_entry(b, a0.type)
        b.store(a0, acc)
        accs.append(acc)
      pmulti = E.delinearize(b, p, self.pre)
      jmulti = E.delinearize(b, j, self.post)
      with E.ForLoop(b, klo, khi, "k") as k:
        em.push_scope()
        for n, (r, acc) in enumerate(zip(self.reduces, accs)):
          src = r.operands[0]
          lin = b.add(b.mul(b.add(b.mul(p, i64(nred)), k.index), i64(npost)), j)
          idx = Index(b, src.dims, linear=lin,
                      multi=pmulti + E.delinearize(b, k.index, self.red) + jmulti)
          x = em.value(src, idx)
          if self.partial:
            new = reds[n].combine([b.load(acc)], [x])[0]
          else:
            new = em.combine(r.attrs["to_apply"], [b.load(acc)], [x], [r.dtype])[0]
          b.store(new, acc)
        em.pop_scope()
      for n, (r, acc) in enumerate(zip(self.reduces, accs)):
        if self.partial:
          part = self.partials[n]
          E.store_element(b, b.load(acc), ptr(part), t, part.dtype)
        else:
          E.store_element(b, b.load(acc), ptr(self.outs[n]), rest, r.dtype)


class ColumnFinish(GpuKernel):
  """out[o] = init (+) fold over s of partials[s, o]: one block per output, its threads folding
  every ``BLOCK``-th partial, then a warp-shuffle and shared-memory combine (a column
  reduction with few outputs has thousands of partials each: one thread per output folding
  them in turn took 60 us for 64 outputs of 4,224 partials)."""
  BLOCK = 256

  def __init__(self, name, reduce, out, partials, leafmap, splits, epilogues=()):
    self.reduce, self.out, self.partials = reduce, out, partials
    self.leafmap, self.splits = dict(leafmap), splits
    # elementwise kernels over the outputs that read them at their own index (an optimizer's
    # update of a bias from its gradient): computed here by the thread that finishes ``out[o]``
    # (``horizontal.fold_finish_epilogues``)
    self.epilogues = list(epilogues)
    self.nout = out.size
    self.block = min(self.BLOCK, max(32, _pow2_at_least(splits)))
    reads = [partials] + K._leaf_bufs(self.leafmap)
    writes = [out]
    for e in self.epilogues:
      reads += [x for x in e.reads if x is not out]
      writes += e.writes
    super().__init__(name, reads, writes, work=self.nout * splits)

  def launch(self, info):
    return (max(1, self.nout), 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.nout == 0:
      return
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    o = sreg64(b, "ctaid.x")
    red = _Reducer(b, em, self.reduce)
    acc = E.alloca_entry(b, red.ident[0].type)
    b.store(red.ident[0], acc)
    with E.ForLoop(b, sreg64(b, "tid.x"), self.splits, "s", step=self.block) as s:
      x = E.load_element(b, ptr(self.partials), b.add(b.mul(s.index, i64(self.nout)), o),
                         self.partials.dtype)
      b.store(red.combine([b.load(acc)], [x])[0], acc)
    total = _block_allreduce(b, red, [b.load(acc)], self.block, self.name)
    with b.if_then(b.icmp_unsigned("==", sreg(b, "tid.x"), ir.Constant(I32, 0))):
      v = red.finish(total)[0]
      E.store_element(b, v, ptr(self.out), o, self.reduce.dtype)
      for e in self.epilogues:
        em_e = Emitter(b, K._make_leaves(b, e.leafmap, ptr))
        oidx = Index(b, e.dims, linear=o)
        for leaf, buf in e.leafmap.items():
          if buf is self.out:
            em_e.remember(leaf, oidx, v)
        K.store_outputs(b, em_e, e.outputs, oidx, ptr)


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
    self.inner.emit(module)
    return super().emit_gpu(module)

  def gpu_body(self, b, ptr):
    inner = b.module.globals[self.inner.name]
    gid = b.add(b.mul(sreg64(b, "ctaid.x"), sreg64(b, "ntid.x")), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", gid, i64(self.nthreads))):
      b.call(inner, [ptr(x) for x in self.inner.buffers] + [gid, i64(self.nthreads)])


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


def translate(kernel: K.Kernel, new_temp, info: DeviceInfo, max_threads: int) -> list:
  """GPU kernels computing what the planned ``kernel`` computes (see the module docstring).
  ``new_temp(dtype, dims, name) -> Buf`` makes arena buffers (partials)."""
  from ourjax.backends.cuda.dots import FusedDot, _dot_kernels   # dots imports this module
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
  if isinstance(kernel, (K.ColumnReduceKernel, SiblingColumnReduces)):
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
  from ourjax.backends.cuda.dots import _dot_kernels, _gpu_dot_ok
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
  splits = _column_splits(nout, max(math.prod(bk[1]) for bk in blocks), info)
  parts = []
  for j, (r, (pre, red, post)) in enumerate(zip(reds, blocks)):
    part = new_temp(_partial_dtype(r.dtype), (splits * nout,), f"{r.name}.colpart")
    parts.append(part)
    kernels.append(ColumnReduce(f"{name}_c{j}", [r], [None], K._restrict(leafmap, r), pre, red,
                                post, splits, [part]))
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


class SiblingColumnReduces(K.Kernel):
  """Column reductions of one group over the same block of the same index space, none reading
  another (``merge_column_reductions``): translated as one ``ColumnReduce`` pass."""

  def __init__(self, kernels):
    self.parts = list(kernels)
    first = self.parts[0]
    self.pre, self.red, self.post = first.pre, first.red, first.post
    self.leafmap = {}
    for k in self.parts:
      self.leafmap.update(k.leafmap)
    super().__init__(first.name, K._leaf_bufs(self.leafmap), [k.out for k in self.parts],
                     work=sum(k.work for k in self.parts))


def merge_column_reductions(kernels) -> list:
  """Runs of ``ColumnReduceKernel``s over the same reduced block of the same dimensions whose
  reductions are simple (add, max, ...) and do not read each other's results, as one
  ``SiblingColumnReduces`` each: the GPU reads their common input once instead of once per
  reduction."""
  out, run = [], []

  def flush():
    if len(run) > 1:
      out.append(SiblingColumnReduces(run))
    else:
      out.extend(run)
    run.clear()
  for k in kernels:
    if isinstance(k, K.ColumnReduceKernel) and not k.reduce.shape.is_tuple and \
       E.simple_reducer(k.reduce.attrs["to_apply"]) is not None:
      if run and ((k.pre, k.red, k.post, tuple(k.reduce.operands[0].dims)) !=
                  (run[0].pre, run[0].red, run[0].post, tuple(run[0].reduce.operands[0].dims))
                  or any(x.out in k.reads for x in run)):
        flush()
      run.append(k)
      continue
    flush()
    out.append(k)
  flush()
  return out


def _column_splits(nout: int, nred: int, info) -> int:
  """Chunks per column for ``nout`` columns of ``nred`` elements: enough threads for about
  2,048 per SM, each folding at least 8 elements."""
  if nout >= info.sm_count * 1024:
    return 1
  return max(1, min(-(-info.sm_count * 2048 // nout), nred // 8))


def _column(kernel, new_temp, info):
  """A ``ColumnReduceKernel``, or ``SiblingColumnReduces`` (several in one pass): one
  ``ColumnReduce``, or with few outputs column partials and a ``ColumnFinish`` per
  reduction."""
  parts = getattr(kernel, "parts", [kernel])
  reduces, outs = [k.reduce for k in parts], [k.out for k in parts]
  nout = math.prod(kernel.pre) * math.prod(kernel.post)
  nred = math.prod(kernel.red)
  simple = all(E.simple_reducer(r.attrs["to_apply"]) is not None for r in reduces)
  splits = _column_splits(nout, nred, info) if simple and nout and nred >= 64 else 1
  if splits == 1:
    return [ColumnReduce(kernel.name, reduces, outs, kernel.leafmap, kernel.pre, kernel.red,
                         kernel.post)]
  partials = [new_temp(_partial_dtype(r.dtype), (splits * nout,), r.name + ".colpart")
              for r in reduces]
  restricted = K._restrict_many(kernel.leafmap, [(r, None) for r in reduces])
  ks = [ColumnReduce(kernel.name + "_p", reduces, outs, restricted, kernel.pre, kernel.red,
                     kernel.post, splits, partials)]
  for n, (r, o, part) in enumerate(zip(reduces, outs, partials)):
    ks.append(ColumnFinish(kernel.name + ("_f" if len(reduces) == 1 else f"_f{n}"), r, o,
                           part, K._restrict(kernel.leafmap, r), splits))
  return ks
