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
attention instruction       ``attention.FlashAttention`` (planned by the GPU planner itself, not
                            translated): softmax(q kᵀ) v in one kernel, the scores never stored
attention-grad instruction  ``attention_grad.FlashAttentionGrad``: its backward as two kernels
                            (dq; dk and dv), the probabilities recomputed tile by tile
anything else               ``Threaded``: the planned kernel's own body (``Kernel.emit``) called
(in-place dynamic-update-   with ``tid``/``nthreads`` = the GPU thread's global index / count,
slice, rare sort/scatter)   so every op the CPU backend runs also runs here, correctly
==========================  ================================================================

The reduction kernels (``RowReduce``, ``SplitPartials``/``SplitFinish``, ``ColumnReduce`` and
its finishing passes) are in ``reductions.py``; stencil chains of elementwise kernels in
``stencil.py``, horizontal merging in ``horizontal.py`` (both after translation, on the plan).

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
from ourjax.backends.cuda.builder import new_builder
from ourjax.backends.cuda.target import DEFAULT_ARCH, DeviceInfo

__all__ = ["TRIPLE", "DEFAULT_ARCH", "PTX_VERSION", "new_module", "compile_ptx", "GpuKernel",
           "translate", "DeviceInfo"]

TRIPLE = "nvptx64-nvidia-cuda"
PTX_VERSION = "80"      # PTX ISA 8.0: CUDA 12.0+ drivers (sm_90 needs 7.8)
VEC = 4                 # elements per thread and iteration in streaming loops
F16 = np.dtype(np.float16)

_lock = threading.Lock()
_tms: dict = {}


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
  # (a context of its own: the module's text declares the named types it made and no others)
  mod = ir.Module(name=name, context=ir.Context())
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
  one = lambda text: compile_ptx_own(text, arch)     # noqa: E731
  from concurrent.futures import ThreadPoolExecutor
  with ThreadPoolExecutor(max(1, min(len(texts), os.cpu_count() or 1))) as pool:
    return list(pool.map(_phases.bound(one), texts))


def compile_ptx_own(text: str, arch: str = DEFAULT_ARCH) -> str:
  """``compile_ptx`` of IR text in an LLVM context and a target machine of the calling
  thread's own, outside llvmlite's lock (any thread, several at once)."""
  target_machine(arch)               # (initialises LLVM's targets once, under the lock)
  a = _arch_for(text, arch)
  return _ptx(text, a, _new_target_machine(a), llvm.create_context(), unlocked=True)


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


def launch_bounds(module: ir.Module, fn, threads: int, min_blocks: int | None = None) -> None:
  """Tell ptxas the block size (``.maxntid``), so that it keeps the registers per thread low
  enough for blocks of ``threads``, and with ``min_blocks`` how many blocks an SM must hold
  (``.minnctapersm``: registers held to what that many leave)."""
  for key, val in (("maxntidx", threads), ("minctasm", min_blocks)):
    if val is not None:
      module.add_named_metadata("nvvm.annotations", module.add_metadata(
          [fn, ir.MetaDataString(module, key), ir.Constant(I32, int(val))]))


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
  ``gpu_body(b, ptr)`` and ``launch(info) -> (grid, block, shared_bytes)``.  ``compile_cost``:
  a rough rank of what its module costs LLVM and the driver's JIT (1: a small loop kernel), by
  which ``backend.emit`` orders the emission (the dearest first, so that their compiles overlap
  the emission of the rest)."""
  is_copy = False
  compile_cost = 1

  def helpers(self) -> list:
    """The device functions (planned ``Kernel``s, emitted by their own ``emit``) this kernel's
    body calls: emitted into its module before it, and named by ``function_names``."""
    return []

  def function_names(self) -> list:
    """Names this kernel's module defines: its own and its helpers'."""
    return [self.name] + [h.name for h in self.helpers()]

  def emit_gpu(self, module: ir.Module) -> ir.Function:
    for h in self.helpers():
      if h.name not in module.globals:
        h.emit(module)
    fty = ir.FunctionType(ir.VoidType(), [K._ptr_type(x) for x in self.buffers])
    fn = ir.Function(module, fty, name=self.name)
    fn.calling_convention = "ptx_kernel"
    for a in fn.args:
      a.add_attribute("noalias")
      a.attributes.align = 16
    b = new_builder(fn.append_basic_block("entry"))
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


# (the reduction kernels live in reductions.py; they are codegen's names too)
from ourjax.backends.cuda.reductions import (  # noqa: E402
    ColumnFinish, ColumnOutputsFinish, ColumnReduce, RowReduce, SplitFinish, SplitPartials,
    _partial_dtype, _red_count)


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

  def helpers(self):
    return [self.inner]

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


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
