"""The llvmlite engine for the host CPU: parse, verify, optimise (O3) and JIT an LLVM module.

One process-wide setup: every LLVM target is initialised once (the CUDA backend needs NVPTX from
the same LLVM), and a host ``TargetMachine`` (this CPU's name and features, opt level 3) is built
once and used for optimisation, assembly printing and the data layout of new modules.

Each :func:`compile_module` call gets its own MCJIT execution engine (MCJIT is llvmlite's
well-tested JIT; the engine owns the machine code, so the code lives exactly as long as the
returned :class:`CompiledModule`).  The optimiser is LLVM's new pass manager with the default
``O3`` pipeline and loop + SLP vectorization switched on; with ``noalias`` pointers and inline math
(``ourjax.backends.llvm.math``) an elementwise loop becomes 512-bit (AVX-512) or 256-bit code.

Object code is loaded by ``loader.py`` (without LLVM; MCJIT, ``load_object`` here, where that
loader cannot), whose symbol table of the process's libraries LLVM shares (``loader.mirror``).

Usage::

    mod = new_module("k")          # llvmlite.ir.Module with the host triple and data layout
    ...                            # emit functions into mod
    cm = compile_module(mod, ["k"])
    f = cm.ctypes_function("k", None, [ctypes.c_int64, ctypes.c_void_p])
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from typing import Iterable, Optional, Sequence, Union

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ourjax import _phases
from ourjax.backends.cpu import loader as _loader

try:  # the package's error type, when the package imports (it may be mid-construction)
  from ourjax.errors import CompileError
except Exception:  # pragma: no cover - fallback while ourjax/__init__.py is not importable
  class CompileError(RuntimeError):
    """The backend failed to compile a module (the message carries LLVM's log)."""

__all__ = ["CompileError", "CompiledModule", "compile_module", "new_module", "cpu_name",
           "cpu_features", "triple", "target_data_layout", "host_target_machine",
           "compile_to_object", "compile_to_objects", "pack_objects", "load_object",
           "target_machine_for", "optimize_for", "vector_isa", "ObjectBuilds", "object_apart"]

_lock = threading.RLock()
_state: Optional[dict] = None

# (code loaded without LLVM, cpu/loader.py, defines the libraries' symbols for LLVM too)
_loader.mirror(llvm)


def _setup() -> dict:
  """Initialise LLVM once per process and build the host target machine."""
  global _state
  st = _state
  if st is not None:        # (set once, whole: read without the lock, which LLVM work holds)
    return st
  with _lock:
    if _state is not None:
      return _state
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    llvm.check_jit_execution()
    name, features = _target_cpu()
    triple_ = llvm.get_process_triple()
    target = llvm.Target.from_triple(triple_)
    tm = _make_tm(target, name, features)
    _state = dict(name=name, features=features, triple=triple_, target=target, tm=tm,
                  layout=str(tm.target_data))
    return _state


def _target_cpu() -> tuple:
  """(LLVM CPU name, feature string) that code is generated for: the host's, or the one
  ``OURJAX_CPU`` names (``NAME`` or ``NAME:+feat,-feat``; e.g. ``haswell`` for AVX2 code, or
  ``x86-64`` for baseline SSE2 code), so that a wide host can run and measure the code a narrower
  one gets.  Naming a CPU whose instructions this host lacks makes the generated code fault."""
  want = os.environ.get("OURJAX_CPU", "").strip()
  if want:
    name, _, features = want.partition(":")
    return name.strip(), features.strip()
  name = llvm.get_host_cpu_name()
  try:
    features = llvm.get_host_cpu_features().flatten()
  except RuntimeError:  # some hosts cannot report features; the CPU name still carries them
    features = ""
  return name, features


def target_machine_for(name: str, features: str = "") -> "llvm.TargetMachine":
  """An O3 TargetMachine for another x86 CPU (IR and assembly checks of another instruction
  set; code for it is not run unless this host has its instructions)."""
  st = _setup()
  return _make_tm(st["target"], name, features)


def optimize_for(module: Union[ir.Module, str], tm=None) -> str:
  """The optimised IR text of ``module`` as :func:`compile_module` would produce it, for the
  host or for ``tm`` (see :func:`target_machine_for`)."""
  st = _setup()
  with _lock:
    ref = _parse(str(module), st)
    _optimize(ref, tm or st["tm"])
    return str(ref)


_VECTOR_ISA = {}


def vector_isa(tm=None) -> str:
  """The vector instruction set the code generator uses for the target: ``"avx512"`` (32 zmm
  registers of 512 bits, FMA), ``"avx2"`` (16 ymm registers of 256 bits, FMA) or ``"sse"``
  (anything narrower: 128-bit xmm, or AVX without FMA).  Read off the assembly of a 16-lane
  fused multiply-add, so it holds for an ``OURJAX_CPU`` override too.  The GEMM's register
  blocking and the vectorization tests follow it."""
  st = _setup()
  tm = tm or st["tm"]
  key = id(tm)
  if key not in _VECTOR_ISA:
    text = """
    define void @probe(<16 x float>* noalias %p, <16 x float>* noalias %q) {
      %a = load <16 x float>, <16 x float>* %p
      %b = load <16 x float>, <16 x float>* %q
      %c = call <16 x float> @llvm.fma.v16f32(<16 x float> %a, <16 x float> %b, <16 x float> %a)
      store <16 x float> %c, <16 x float>* %p
      ret void
    }
    declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
    """
    with _lock:
      ref = llvm.parse_assembly(text)
      ref.triple = st["triple"]
      asm = tm.emit_assembly(ref)
    fma = "vfmadd" in asm
    if "zmm" in asm and fma:
      isa = "avx512"
    elif "ymm" in asm and fma:
      isa = "avx2"
    else:
      isa = "sse"
    _VECTOR_ISA[key] = (isa, tm)      # (tm kept alive so that its id stays unique)
  return _VECTOR_ISA[key][0]


def _make_tm(target, name, features, opt: int = 3):
  return target.create_target_machine(cpu=name, features=features, opt=opt, reloc="default",
                                      codemodel="jitdefault", jit=False)


def cpu_name() -> str:
  """LLVM's name for the CPU code is generated for (the host's, e.g. ``znver5``, unless
  ``OURJAX_CPU`` names another); part of on-disk cache keys."""
  return _setup()["name"]


def cpu_features() -> str:
  """The feature string code is generated for (the host's ``+avx512f,...``, or what
  ``OURJAX_CPU`` gives); part of on-disk cache keys."""
  return _setup()["features"]


def triple() -> str:
  """The host target triple."""
  return _setup()["triple"]


def target_data_layout() -> str:
  """The host data-layout string, to set on new modules."""
  return _setup()["layout"]


def host_target_machine() -> "llvm.TargetMachine":
  """The shared host TargetMachine (do not hand it to an execution engine: engines own theirs)."""
  return _setup()["tm"]


def new_module(name: str) -> ir.Module:
  """An empty ``llvmlite.ir.Module`` with the host triple and data layout set (so the
  vectorizer's cost model sees this CPU's vector widths)."""
  st = _setup()
  mod = ir.Module(name=name)
  mod.triple = st["triple"]
  mod.data_layout = st["layout"]
  return mod


def _optimize(mod: "llvm.ModuleRef", tm, loop_unrolling: bool = True,
              unlocked: bool = False, speed_level: int = 3, slp: bool = True) -> None:
  pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
  pto.loop_vectorization = True
  pto.slp_vectorization = slp
  pto.loop_interleaving = True
  pto.loop_unrolling = loop_unrolling
  pb = llvm.create_pass_builder(tm, pto)
  run_passes(pb.getModulePassManager(), mod, pb, unlocked)


def _excerpt(text: str, limit: int = 40) -> str:
  lines = text.splitlines()
  if len(lines) > limit:
    lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
  return "\n".join(lines)


class CompiledModule(_loader.CodeAccess):
  """A JIT-compiled LLVM module.  The machine code stays valid while this object lives."""

  def __init__(self, engine, module_ref, entry_names: Sequence[str], optimized_ir: str):
    self._engine = engine
    self._module = module_ref
    self.optimized_ir: str = optimized_ir
    self._asm: Optional[str] = None
    self._addresses = {}
    for n in entry_names:
      self._addresses[n] = engine.get_function_address(n)

  @property
  def entry_names(self):
    return tuple(self._addresses)

  def address(self, name: str) -> int:
    """The native address of function ``name`` (an entry name or any defined function)."""
    addr = self._addresses.get(name)
    if addr is None:
      try:
        self._module.get_function(name)
      except NameError:
        raise KeyError(f"function {name!r} is not defined in the compiled module") from None
      with _lock:
        addr = self._engine.get_function_address(name)
      self._addresses[name] = addr
    if not addr:
      raise KeyError(f"function {name!r} has no address in the compiled module")
    return addr



def _parse(text: str, st: dict, context=None, unlocked: bool = False):
  """``text`` parsed and verified for the host (its triple and data layout filled in when
  absent); LLVM's complaint as a ``CompileError``.  Called with ``_lock`` held, unless in a
  ``context`` of the caller's own (``unlocked``: parsed outside llvmlite's lock too)."""
  try:
    ref = parse_assembly(text, context, unlocked)
    ref.verify()
  except RuntimeError as e:
    raise CompileError(f"LLVM rejected the module: {e}\n--- IR (start) ---\n"
                       f"{_excerpt(text)}") from None
  if not ref.triple:
    ref.triple = st["triple"]
  if not ref.data_layout:
    ref.data_layout = st["layout"]
  return ref


def _await_gemm(parts, skip=()) -> None:
  """Wait for the shared GEMMs being built on their thread (``gemm.prefetch_shared_gemm``)
  that ``parts`` (IR texts or object bytes) call, unless named in ``skip`` (provided beside
  them, or defined there); before taking ``_lock``, which the build takes too."""
  from ourjax.backends.llvm import gemm_library as gemm
  if not gemm._pending or threading.current_thread().name.startswith("ourjax-gemm"):
    return
  for dtype in list(gemm._pending):
    sym = f"ourjax_gemm_{dtype}"
    if sym in skip:
      continue
    if any((sym in p and f'define void @"{sym}"(' not in p) if isinstance(p, str)
           else sym.encode() in bytes(p) for p in parts):
      gemm.shared_gemm_symbol(dtype)


def _check_externals(ref, provided=frozenset()) -> None:
  """MCJIT would abort the process on an unresolved symbol: refuse such a module here
  (``provided``: names that objects loaded beside this one define)."""
  missing = [f.name for f in ref.functions
             if f.is_declaration and not f.name.startswith("llvm.")
             and f.name not in provided and not llvm.address_of_symbol(f.name)]
  if missing:
    raise CompileError(f"the module calls undefined external function(s) {missing}")


def compile_module(module: Union[ir.Module, str], entry_names: Sequence[str] = (),
                   *, optimize: bool = True) -> CompiledModule:
  """Parse, verify, optimise at O3 and JIT ``module`` (an ``llvmlite.ir.Module`` or IR text).

  ``entry_names`` are functions whose addresses are resolved now (a missing one is an error).
  Raises :class:`CompileError` with LLVM's message when the IR is malformed.
  """
  st = _setup()
  text = str(module)
  if isinstance(entry_names, str):
    entry_names = [entry_names]
  _await_gemm([text])
  with _lock:
    ref = _parse(text, st)
    for n in entry_names:
      try:
        fn = ref.get_function(n)
      except NameError:
        raise CompileError(f"entry point {n!r} is not defined in the module") from None
      if fn.is_declaration:
        raise CompileError(f"entry point {n!r} is declared but not defined in the module")
    if optimize:
      _optimize(ref, st["tm"])
    optimized = str(ref)
    _check_externals(ref)
    try:
      features = st["features"]
      if masked_select_hazard(optimized):
        features = _without_avx512(features)
      engine = llvm.create_mcjit_compiler(ref, _make_tm(st["target"], st["name"], features))
      engine.finalize_object()
    except RuntimeError as e:
      raise CompileError(f"LLVM failed to generate code: {e}") from None
    return CompiledModule(engine, ref, list(entry_names), optimized)


def compile_to_object(module: Union[ir.Module, str], *, optimize: bool = True,
                      loop_unrolling: bool = True, keep_ir: bool = True,
                      own_thread: bool = False, speed_level: int = 3, slp: bool = True,
                      provided: Iterable[str] = ()):
  """Parse, verify and optimise ``module`` like :func:`compile_module`, then emit host object
  code instead of JIT-ing it.  Returns ``(object_bytes, optimized_ir)``; load the bytes with
  :func:`load_object` (the CPU backend stores them in its on-disk cache).  ``loop_unrolling``
  False skips LLVM's unroller (the vectorizer still interleaves): about half the code and a
  third less compile time for kernel-heavy modules.  ``keep_ir`` False: "" for the optimised
  IR (not printed); ``own_thread``: in a context and target machine of its own, outside
  llvmlite's lock (for a thread that compiles beside others); ``speed_level``: LLVM's
  optimisation level (3: O3); ``slp`` False: no SLP vectorizer (for code vectorised as
  emitted, where it found nothing and cost time); ``provided``: names that objects loaded
  beside this one define (which it may call)."""
  st = _setup()
  text = str(module)
  _await_gemm([text])
  if own_thread:
    with _lock:
      tm = _make_tm(st["target"], st["name"], st["features"])
      context = llvm.create_context()
    return _object(text, st, tm, context, optimize, loop_unrolling, frozenset(provided),
                   keep_ir, unlocked=True, speed_level=speed_level, slp=slp)
  with _lock:
    return _object(text, st, st["tm"], None, optimize, loop_unrolling, frozenset(provided),
                   keep_ir, speed_level=speed_level, slp=slp)


def compile_to_objects(texts: Sequence[str], *, loop_unrolling: bool = True,
                       provided: Iterable[str] = (), keep_ir: bool = True,
                       speed_levels: Optional[Sequence[int]] = None) -> list:
  """:func:`compile_to_object` of several modules that are loaded together (each may call
  what the others define: ``provided`` names those functions), at once on one thread per
  module (at most the CPU count).  Each module is parsed, optimised and code-generated in an
  LLVM context and a target machine of its own, so the threads share nothing, and those three
  steps run outside llvmlite's process-wide lock (``_unlocked``; ctypes releases the GIL), so
  they do run at once.  Returns ``[(object_bytes, optimized_ir)]`` in the order of ``texts``;
  the optimised IR is "" unless ``keep_ir`` (printing it cost as much as a tenth of the LLVM
  time).  ``speed_levels``: the optimisation level of each module (default 3, LLVM's O3; 0
  also generates its code at LLVM's -O0: the fast instruction selector and register
  allocator)."""
  st = _setup()
  provided = frozenset(provided)
  _await_gemm(texts, provided)
  levels = list(speed_levels) if speed_levels is not None else [3] * len(texts)
  if len(texts) == 1:
    if _math_builds_pending():
      # (in a context and target machine of its own, outside llvmlite's lock: the math
      # library building meanwhile on its thread took the lock only after this module's LLVM
      # work, and the program then waited for it: the benchmark's attention, 54 ms against
      # 37 for its first call, 2-core host)
      return [object_apart(texts[0], levels[0], provided, loop_unrolling, keep_ir)]
    # (otherwise under the lock in the process's context: programs compiled as one module
    # took 2-10 % longer in contexts of their own, at the edge of the noise)
    with _lock:
      return [_object(texts[0], st, st["tm"], None, True, loop_unrolling, provided, keep_ir,
                      speed_level=levels[0])]
  builds = ObjectBuilds(len(texts), loop_unrolling=loop_unrolling, keep_ir=keep_ir)
  for text, level in zip(texts, levels):
    builds.submit(text, level, provided)
  return builds.results()


def _math_builds_pending() -> bool:
  """Whether a math library is being built on the math thread (``libraries._prefetch_math``)."""
  from ourjax.backends.cpu import libraries
  return any(not f.done() for f in list(libraries._math_pending.values()))


class ObjectBuilds:
  """What :func:`compile_to_objects` does for modules that are handed over one at a time:
  each ``submit(text, level, provided)`` starts compiling a module at once on a thread (at
  most ``modules`` or the CPU count of them, one fewer until the caller waits in ``results``),
  in an LLVM context and target machine of its own, outside llvmlite's lock, while the caller
  goes on (emitting the next module, say); ``results()`` waits and returns ``[(object_bytes, optimized_ir)]`` in submission order (a
  module's ``CompileError`` raised there).  ``provided``: the names other modules (or the
  process-wide libraries) define that this one may call."""

  def __init__(self, modules: int, *, loop_unrolling: bool = True, keep_ir: bool = True,
               slp: bool = True):
    from concurrent.futures import ThreadPoolExecutor
    self.st = _setup()
    self.loop_unrolling, self.keep_ir, self.slp = loop_unrolling, keep_ir, slp
    threads = max(1, min(modules, os.cpu_count() or 1))
    self.pool = ThreadPoolExecutor(threads, thread_name_prefix="ourjax-llvm")
    # (until the caller waits in ``results``, it is still emitting the next modules: one core
    # is left to it, so that its Python is not starved by as many LLVM threads as cores)
    self._slots = threading.Semaphore(max(1, threads - 1))
    self._waiting = False
    self.futures = []

  def _one(self, text, level, provided):
    with self._slots:
      return object_apart(text, level, provided, self.loop_unrolling, self.keep_ir, self.slp)

  def submit(self, text: str, level: int = 3, provided: Iterable[str] = ()) -> None:
    provided = frozenset(provided)
    _await_gemm([text], provided)
    self.futures.append(self.pool.submit(_phases.bound(self._one), text, level, provided))

  def results(self) -> list:
    if not self._waiting:           # (the caller only waits now: its core goes to LLVM)
      self._waiting = True
      self._slots.release()
    try:
      return [f.result() for f in self.futures]
    finally:
      self.pool.shutdown(wait=False)

  def abandon(self) -> None:
    """Drop the builds (those under way finish on their threads, unused)."""
    for f in self.futures:
      f.cancel()
    if not self._waiting:           # (a build waiting for its slot goes on, and ends)
      self._waiting = True
      self._slots.release()
    self.pool.shutdown(wait=False)


def object_apart(text: str, level: int = 3, provided: Iterable[str] = (),
                 loop_unrolling: bool = True, keep_ir: bool = True, slp: bool = True):
  """(object bytes, optimised IR or "") of ``text`` compiled on the calling thread in an LLVM
  context and target machine of its own, outside llvmlite's lock (what ``ObjectBuilds`` runs
  on its threads; it does not wait for the shared GEMMs, ``_await_gemm``, so a thread that
  builds one may call it).  ``level`` 0 also generates code at LLVM's -O0."""
  st = _setup()
  with _lock:
    tm = _make_tm(st["target"], st["name"], st["features"], 0 if level == 0 else 3)
    context = llvm.create_context()
  return _object(text, st, tm, context, True, loop_unrolling, frozenset(provided), keep_ir,
                 unlocked=True, speed_level=level, slp=slp)


#: The interpreter's switch interval while a module compiles outside llvmlite's lock
#: (``quick_handoff``), in seconds.  Such a thread takes the GIL back after each of its
#: ~30-70 calls into LLVM, and while another thread runs Python (the caller emitting the next
#: module) it waited for the interval, 5 ms by default, at each: a module that compiles in
#: 25 ms alone took 128 ms beside a thread busy in Python, 89 ms at 0.5 ms (2-core host).
QUICK_SWITCH_INTERVAL = 0.0002

_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = None


class quick_handoff:
  """While any thread is inside one, the interpreter's switch interval is at most
  ``QUICK_SWITCH_INTERVAL`` (``sys.setswitchinterval``), so that threads compiling beside
  Python code get the GIL back soon after each call into LLVM; the interval the process had
  comes back when the last one leaves (unless something else set another meanwhile)."""

  def __enter__(self):
    global _switch_users, _switch_saved
    with _switch_lock:
      if _switch_users == 0:
        old = sys.getswitchinterval()
        _switch_saved = None
        if old > QUICK_SWITCH_INTERVAL:
          _switch_saved = old
          sys.setswitchinterval(QUICK_SWITCH_INTERVAL)
      _switch_users += 1
    return self

  def __exit__(self, *exc):
    global _switch_users, _switch_saved
    with _switch_lock:
      _switch_users -= 1
      if _switch_users == 0 and _switch_saved is not None:
        if abs(sys.getswitchinterval() - QUICK_SWITCH_INTERVAL) < 1e-6:
          sys.setswitchinterval(_switch_saved)
        _switch_saved = None
    return False


def _object(text, st, tm, context, optimize, loop_unrolling, provided, keep_ir=True,
            unlocked=False, speed_level=3, slp=True):
  """(object bytes, optimised IR or "" unless ``keep_ir``) of one module: parsed in
  ``context`` (None: the global one, under ``_lock``), optimised and code-generated with
  ``tm``; with ``unlocked`` (``context`` and ``tm`` this thread's own) the parse, the
  optimisation and the code generation run outside llvmlite's lock, with the GIL handed back
  quickly (``quick_handoff``)."""
  if unlocked:
    with quick_handoff():
      return _object_steps(text, st, tm, context, optimize, loop_unrolling, provided, keep_ir,
                           unlocked, speed_level, slp)
  return _object_steps(text, st, tm, context, optimize, loop_unrolling, provided, keep_ir,
                       unlocked, speed_level, slp)


def _object_steps(text, st, tm, context, optimize, loop_unrolling, provided, keep_ir,
                  unlocked, speed_level, slp):
  with _phases.phase("llvm.parse"):
    ref = _parse(text, st, context, unlocked)
  if optimize:
    with _phases.phase("llvm.opt"):
      _optimize(ref, tm, loop_unrolling, unlocked, speed_level, slp)
  _check_externals(ref, provided)
  # (a module code-generated as it came (unoptimised, or at O0: an entry in a module of its
  # own) has a shuffle only if its text has one: without, there is no hazard to look for,
  # and its optimised IR need not be printed for the check)
  hazard_free = (not optimize or speed_level == 0) and "shufflevector" not in text
  text = None
  if keep_ir or (_has_avx512(st) and not hazard_free):
    with _phases.phase("llvm.print"):
      text = str(ref)
    if masked_select_hazard(text):
      tm = _make_tm(st["target"], st["name"], _without_avx512(st["features"]))
  with _phases.phase("llvm.codegen"):
    obj = _emit_object(tm, ref, unlocked)
  return obj, (text if keep_ir else "")


# LLVM 22's X86 back end miscompiles ``select(c, shufflevector(select(c, a, b)), d)`` when it
# lowers the outer select to an AVX-512 mask: it folds the shuffle into a masked permute and then
# simplifies the inner select to ``a`` as if ``c`` held in the lanes the permute reads, not the
# lanes it writes (on 4 to 16 lanes, with and without AVX512VL; AVX2 code is right).  The optimised
# IR is right, so a module that has the pattern is code-generated without AVX-512 (its 512-bit
# vectors are split into 256-bit halves).  Found by the differential fuzzer through the gradient
# of ``cumsum(lax.cummax(x))``; tests/test_cpu_jit.py holds the reproducer.  Only AVX-512 code
# pays for printing the optimised IR to look for it.
_LINE = re.compile(r"^\s*(%[-\w.]+) = (select|shufflevector) (.*)$", re.M)
_NAME = re.compile(r"%[-\w.]+")


def masked_select_hazard(text: str) -> bool:
  """Whether optimised IR ``text`` has a vector select whose operand is a shuffle of a select on
  the same condition (the pattern above), in any function."""
  if "shufflevector" not in text or "x i1> %" not in text:
    return False
  for fn in text.split("\ndefine ")[1:]:
    if "shufflevector" not in fn or "= select <" not in fn:
      continue     # (no shuffle, or no select on a vector condition: the pattern's lines)
    selects, shuffles = {}, {}
    for name, op, rest in _LINE.findall(fn):
      if op == "select":
        if rest.startswith("<"):                       # a vector condition
          names = _NAME.findall(rest)
          if names:
            selects[name] = (names[0], names[1:])
      else:
        shuffles[name] = _NAME.findall(rest)
    for cond, operands in selects.values():
      for v in operands:
        if any(selects.get(s, ("",))[0] == cond for s in shuffles.get(v, ())):
          return True
  return False


def _has_avx512(st) -> bool:
  """Whether code for ``st``'s target uses AVX-512 (where the miscompile above lives)."""
  return vector_isa(st["tm"]) == "avx512"


def _without_avx512(features: str) -> str:
  kept = [f for f in features.split(",") if f and not f[1:].startswith("avx512")]
  return ",".join(kept + ["-avx512f"])


def parse_assembly(text: str, context=None, unlocked: bool = False):
  """``llvm.parse_assembly(text, context)``; with ``unlocked`` (``context`` the calling
  thread's own) outside llvmlite's lock (``_unlocked``).  LLVM's complaint as RuntimeError."""
  if not unlocked:
    return llvm.parse_assembly(text, context=context)
  from llvmlite.binding import ffi
  from llvmlite.binding.module import ModuleRef
  with ffi.OutputString() as errmsg:
    ref = ModuleRef(_unlocked("LLVMPY_ParseAssembly")(
        context, ctypes.c_char_p(text.encode()), errmsg), context)
    if errmsg:
      ref.close()
      raise RuntimeError(f"LLVM IR parsing error\n{errmsg}")
  return ref


def run_passes(mpm, ref, pb, unlocked: bool = False) -> None:
  """``mpm.run(ref, pb)``; with ``unlocked`` outside llvmlite's lock (objects of the calling
  thread's own)."""
  if unlocked:
    _unlocked("LLVMPY_RunNewModulePassManager")(mpm, ref, pb)
  else:
    mpm.run(ref, pb)


def emit_to_memory(tm, ref, use_object: bool = True, unlocked: bool = False) -> bytes:
  """``tm``'s object code (or assembly text, as bytes) of ``ref``; with ``unlocked`` outside
  llvmlite's lock (objects of the calling thread's own).  LLVM's complaint as RuntimeError."""
  if not unlocked:
    return bytes(tm.emit_object(ref)) if use_object else tm.emit_assembly(ref).encode()
  from llvmlite.binding import ffi
  with ffi.OutputString() as outerr:
    mb = _unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, ref, int(use_object), outerr)
    if not mb:
      raise RuntimeError(str(outerr))
  try:
    return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(mb), ffi.lib.LLVMPY_GetBufferSize(mb))
  finally:
    ffi.lib.LLVMPY_DisposeMemoryBuffer(mb)


def _unlocked(name: str):
  """llvmlite's ctypes function ``name`` (argument types set) without the process-wide lock
  that llvmlite takes around every call.  LLVM allows work in different contexts with
  different target machines on different threads at once; the lock would make the threads of
  ``compile_to_objects`` take turns.  Only for objects of the calling thread's own."""
  from llvmlite.binding import ffi
  getattr(ffi.lib, name)              # (llvmlite wraps a function on first use)
  return ffi.lib._fntab[name]._cfn


def _emit_object(tm, ref, unlocked: bool = False) -> bytes:
  """``tm.emit_object(ref)``; a ``CompileError`` when LLVM fails."""
  try:
    return emit_to_memory(tm, ref, True, unlocked)
  except RuntimeError as e:
    raise CompileError(f"LLVM failed to generate code: {e}") from None


_MULTI = _loader.MULTI


def pack_objects(objs: Sequence[bytes]) -> bytes:
  """Several objects as one blob (for caches that store one): :func:`load_object` takes it."""
  if len(objs) == 1:
    return bytes(objs[0])
  head = _MULTI + len(objs).to_bytes(4, "little") + b"".join(
      len(o).to_bytes(8, "little") for o in objs)
  return head + b"".join(bytes(o) for o in objs)


_unpack_objects = _loader.unpack_objects


def check_objects(parts: Sequence[bytes], entry_names: Sequence[str] = ()) -> None:
  """Raise ValueError unless ``parts`` (objects loaded together) are sound ELF objects for
  this host that define ``entry_names`` and need nothing LLVM cannot resolve."""
  from ourjax.backends.cpu import elf
  machine = elf.host_machine()
  defined, undefined = set(), set()
  for k, part in enumerate(parts):
    try:
      info = elf.check(part, machine)
    except ValueError as e:
      raise ValueError(f"object {k} of {len(parts)}: {e}") from None
    defined |= info.defined
    undefined |= info.undefined
  missing = [n for n in entry_names if n not in defined]
  if missing:
    raise ValueError(f"entry point {missing[0]!r} is not defined in the object code")
  for name in sorted(undefined - defined):
    if name.startswith("_GLOBAL_OFFSET_TABLE_") or llvm.address_of_symbol(name):
      continue
    raise ValueError(f"it needs symbol {name!r}, which nothing defines")


def load_object(obj: bytes, entry_names: Sequence[str] = (),
                optimized_ir: Optional[str] = None) -> CompiledModule:
  """JIT-load host object code (from :func:`compile_to_object`) into its own MCJIT engine and
  resolve ``entry_names``.  Raises :class:`CompileError` when the bytes are not a loadable
  object or an entry point is missing.  The objects are checked first (``elf.check``: headers,
  sections, symbols, relocations; the entry points defined; every symbol they need defined by
  one of them or known to LLVM), so that damaged bytes raise instead of crashing the loader."""
  st = _setup()
  _await_gemm(_unpack_objects(bytes(obj)), set(entry_names))
  with _lock:
    try:
      check_objects(_unpack_objects(bytes(obj)), entry_names)
    except ValueError as e:
      raise CompileError(f"object code failed its check: {e}") from None
    try:
      empty = llvm.parse_assembly("")
      empty.triple = st["triple"]
      empty.data_layout = st["layout"]
      engine = llvm.create_mcjit_compiler(empty, _make_tm(st["target"], st["name"],
                                                          st["features"]))
      for part in _unpack_objects(bytes(obj)):
        engine.add_object_file(llvm.ObjectFileRef.from_data(part))
      engine.finalize_object()
    except (RuntimeError, ValueError) as e:
      raise CompileError(f"could not load object code: {e}") from None
    cm = CompiledModule.__new__(CompiledModule)
    cm._engine, cm._module, cm._object = engine, empty, obj
    cm.optimized_ir = optimized_ir or ""
    cm._asm = None
    cm._addresses = {}
    for n in entry_names:
      addr = engine.get_function_address(n)
      if not addr:
        raise CompileError(f"entry point {n!r} is not defined in the object code")
      cm._addresses[n] = addr
    return cm
