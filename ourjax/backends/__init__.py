"""Backends: where a jitted function's jaxpr is compiled and run.

``compile_jaxpr(closed_jaxpr, backend)`` lowers the jaxpr to an HLO module
(``lowering/from_jaxpr.py``), optimizes it (``lowering/pipeline.py``) and hands it to a backend's
``compile(module)``, whose executable maps NumPy arrays to a tuple of NumPy arrays.  Backends:

* ``reference``: the NumPy interpreter of HLO modules (``backends/reference.py``), the oracle.
* ``cpu``: native code through llvmlite (``backends/cpu``).
* ``cuda``: PTX through llvmlite's NVPTX target, run with ``cuda.bindings`` (``backends/cuda``);
  its executables return Arrays whose data stays on the GPU until read.  It is the default
  backend when a GPU is present; ``OURJAX_PLATFORMS=cpu`` (or ``cuda``) chooses explicitly.

A jaxpr holding a primitive that has no lowering rule yet runs through the jaxpr evaluator (each
primitive's NumPy implementation) instead, so programs stay correct while the compiler grows;
``OURJAX_STRICT_LOWERING=1`` turns that fallback into an error (the tests use it).

``jit``'s donation (``_donation.py``): ``compile_jaxpr(..., donated=)`` pairs donated
arguments with outputs (``donation_of``), sets ``module.input_output_alias`` for the backend,
and the ``ModuleExecutable`` hands the donated buffers over and deletes the arrays.

While ``ourjax.profiler`` records (a trace, ``OURJAX_PROFILE=1``), ``_profile_hook`` is set and
every executable call goes through it (``backends/profiling.py`` measures it); otherwise it is
None and costs one check on the general call path (jit's fast path does not look at it: the
profiler clears the fast paths when it starts and stops).
"""
from __future__ import annotations

import logging
import os
import time
import weakref

import numpy as np

from ourjax import _gc, _once, _phases, core, dtypes

log = logging.getLogger("ourjax")
_cache: dict = {}

#: ``hook(executable, args) -> outputs`` while the profiler records, else None.
_profile_hook = None
#: Compile CPU modules with profiling instrumentation straight away (``OURJAX_PROFILE=1``).
_profile_all = False


class JaxprEvaluator:
  """Runs a closed jaxpr eagerly, op by op (the fallback executable)."""

  def __init__(self, closed: core.ClosedJaxpr, donated=None):
    self.closed = closed
    # (donated arguments are deleted after a call, as a compiled call would; none is reused)
    self.donation = None if donated is None else _donation_of_jaxpr(closed, donated)
    self.kept_args = None

  def __call__(self, *args):
    if _profile_hook is not None:
      return _profile_hook(self, args)
    return self._run(lambda *a: self._evaluate(*a), args)

  def _run(self, runner, args):
    if self.donation is not None:
      from ourjax import _donation
      return _donation.run(self, runner, args, lambda a: runner(*a))
    return runner(*args)

  def _evaluate(self, *args):
    with core.new_base_main():
      return core.eval_jaxpr(self.closed.jaxpr, self.closed.consts, *args)


class ModuleExecutable:
  """A compiled module plus the constants hoisted out of it; returns ourjax Arrays typed like
  the jaxpr's outputs (weak types included).  ``kept_args`` are the indices of the arguments
  the module takes (unused ones are dropped before the call), None for all of them."""

  def __init__(self, module, compiled, hoisted, out_avals, backend: str, kept_args=None,
               donation=None):
    # (``module``: the optimised module, or a function that makes it when first asked for)
    self._module, self.compiled, self.backend = module, compiled, backend
    self.hoisted = [_host(c) for c in hoisted]
    self.out_avals = list(out_avals)
    self.kept_args = None if kept_args is None else tuple(kept_args)
    self._hoisted_arrays = None
    self.donation = donation      # (``_donation.Donation`` of the module's parameters, or None)
    _LIVE_EXECUTABLES.add(self)   # (``Client.live_executables``)

  _profile_runner = None     # (backends/profiling.py)

  @property
  def module(self):
    """The optimised module (made now when the code came from the disk cache)."""
    if callable(self._module):
      self._module = self._module()
    return self._module

  def __call__(self, *args):
    if _profile_hook is not None:
      return _profile_hook(self, args)
    return self._run(self.compiled, args)

  def _run(self, compiled, args):
    """Call ``compiled`` (``self.compiled``, or the profiler's stand-in for it)."""
    if self.kept_args is not None:
      args = [args[i] for i in self.kept_args]
    if self.donation is not None:
      from ourjax import _donation
      return _donation.run(self, compiled, args, lambda a: self._call(compiled, a))
    return self._call(compiled, args)

  def _call(self, compiled, args):
    from ourjax.array import Array, to_numpy
    if getattr(compiled, "device_resident", False):
      # a device backend takes Arrays as they are (their data may already be on the device)
      # and returns device buffers; hoisted constants become Arrays once, so that their
      # device copies are kept with them
      if self._hoisted_arrays is None:
        self._hoisted_arrays = [Array(c) for c in self.hoisted]
      outs = compiled(*args, *self._hoisted_arrays)
      return [Array._from_device(o, a) for o, a in zip(outs, self.out_avals)]
    outs = compiled(*[to_numpy(a) for a in args], *self.hoisted)
    return [Array._from_result(o, a) for o, a in zip(outs, self.out_avals)]

  def fast_path(self):
    """``call(args) -> list of Arrays | None`` for ``jit``'s dispatch fast path (arguments of
    the compiled types, as NumPy arrays or Arrays; None means "take the general path"), or
    None when the backend has none."""
    from ourjax.array import Array
    maker = getattr(self.compiled, "fast_caller", None)
    if maker is None:
      return None
    if self.donation is not None:
      return self._donating_fast_path(maker)
    if getattr(self.compiled, "device_resident", False):
      # device results stay on the device; hoisted constants share their device copies with
      # the general path's (see __call__)
      if self._hoisted_arrays is None:
        self._hoisted_arrays = [Array(c) for c in self.hoisted]
      inner = maker(self.kept_args, self._hoisted_arrays, Array)
      wrap = Array._from_device
    else:
      inner = maker(self.kept_args, self.hoisted, Array)
      wrap = Array._from_result
    if inner is None:
      return None
    avals = self.out_avals
    if len(avals) == 1:
      aval = avals[0]

      def call1(args):
        outs = inner(args)
        return None if outs is None else [wrap(outs[0], aval)]
      return call1

    def call(args):
      outs = inner(args)
      return None if outs is None else [wrap(o, a) for o, a in zip(outs, avals)]
    return call


  def _donating_fast_path(self, maker):
    """``fast_path`` of an executable with donated parameters: on the host, the backend's own
    fast caller for calls whose donated arguments are distinct Arrays owning their memory (the
    others take the general path, which copies or raises); on a device, the general call."""
    from ourjax import _donation
    from ourjax.array import Array
    run, compiled = self._run, self.compiled
    general = lambda args: run(compiled, args)   # noqa: E731
    inner = None if getattr(compiled, "device_resident", False) else \
        maker(self.kept_args, self.hoisted, Array)
    if inner is None:
      return general
    leaf = (lambda k: k) if self.kept_args is None else (lambda k: self.kept_args[k])
    deleted = [leaf(k) for k in self.donation.deleted]
    reused = [leaf(k) for k in sorted({k for _, k in getattr(compiled, "aliases", ())})]
    sole = _donation.sole_host_owner
    avals = self.out_avals
    wrap = Array._from_result

    def call(args):
      for i in deleted:
        if type(args[i]) is not Array:
          return None
      if len({id(a) for a in args}) != len(args):
        return None
      for i in reused:
        if not sole(args[i]):
          return None
      outs = inner(args)
      if outs is None:
        return None
      for i in deleted:
        args[i]._delete()
      return [wrap(o, a) for o, a in zip(outs, avals)]
    return call

  def for_device(self, device) -> "ModuleExecutable":
    """This executable running on ``device`` (a GPU: the module is loaded there once)."""
    per = self.__dict__.setdefault("_per_device", {})
    exe = per.get(device.id)
    if exe is None:
      import copy
      exe = copy.copy(self)
      exe.compiled = self.compiled.for_device(device.local_hardware_id)
      exe._hoisted_arrays = None
      exe._per_device = {}
      per[device.id] = exe
    return exe


def for_device(exe, device):
  """``exe`` (from ``compile_jaxpr``) running on ``device``: executables of a device backend
  are loaded on it; the others run where they always run."""
  if isinstance(exe, ModuleExecutable) and hasattr(exe.compiled, "for_device"):
    return exe.for_device(device)
  return exe


def _host(c):
  from ourjax.array import to_numpy
  return to_numpy(c)


def default_backend_name() -> str:
  """The backend ``jit`` uses when none is named: the first of ``OURJAX_PLATFORMS``
  (``config.jax_platforms``, comma separated) that is known; without it ``'cuda'`` when a GPU
  is present, else ``'cpu'`` (native)."""
  from ourjax.config import config
  plats = config.jax_platforms
  if plats:
    for p in str(plats).split(","):
      p = p.strip().lower()
      if p in ("cpu", "reference"):
        return p
      if p in ("cuda", "gpu"):
        if _cuda_available():
          return "cuda"
        from ourjax.backends.cuda import driver
        raise RuntimeError(f"OURJAX_PLATFORMS={plats!r} asks for CUDA, but no CUDA GPU can be "
                           f"used: {driver.unavailable_reason()}")
    return "cpu"
  return "cuda" if _cuda_available() else "cpu"


def _cuda_available() -> bool:
  try:
    from ourjax.backends.cuda import driver
  except Exception:   # pragma: no cover - the backend itself failed to import
    return False
  return driver.available()


def _backend_module(name: str):
  name = name or default_backend_name()
  if name == "cpu":
    from ourjax.backends.cpu import backend as cpu
    return cpu
  if name == "reference":
    from ourjax.backends import reference
    return reference
  if name in ("cuda", "gpu"):
    from ourjax.backends.cuda import backend as cuda
    return cuda
  raise ValueError(f"Unknown backend {name!r}: expected one of 'cpu', 'cuda', 'reference'")


def _log_compile(name: str, in_avals, reason: str | None) -> None:
  """"Compiling ...": a WARNING with ``jax_log_compiles``, else a DEBUG record (as JAX's)."""
  from ourjax.config import config
  level = logging.WARNING if config.jax_log_compiles else logging.DEBUG
  if not log.isEnabledFor(level):
    return
  shapes = ", ".join(a.str_short() + (" (weak)" if a.weak_type else "") for a in in_avals)
  msg = f"Compiling jit({name or 'f'}) with global shapes and types ({shapes})."   # (JAX's)
  if reason:
    msg += "\n" + reason
  log.log(level, msg)


def _donation_of_jaxpr(closed, donated):
  from ourjax import _donation
  return _donation.set_up(closed.in_avals, closed.out_avals, donated)


def donation_of(lowering, closed: core.ClosedJaxpr, donated):
  """The ``_donation.Donation`` of ``lowering``'s module for ``donated`` (a bool per argument
  leaf of ``closed``; pruned arguments are not donated), warning about unusable ones; None when
  nothing is donated."""
  if not donated or not any(donated):
    return None
  from ourjax import _donation
  kept = lowering.kept_args
  return _donation.set_up([closed.in_avals[i] for i in kept], closed.out_avals,
                          [bool(donated[i]) for i in kept])


def compile_lowering(lowering, closed: core.ClosedJaxpr, backend=None, name: str = "",
                     log_reason: str | None = None, donation=None) -> ModuleExecutable:
  """Optimize a copy of a lowered module (``from_jaxpr.lower``; the lowering itself stays as it
  was) and compile it with ``backend``; with ``jax_log_compiles`` the time of each phase is
  logged after it (``_phases``).  ``donation`` (``donation_of``): the module's outputs that
  are written into donated parameters (``module.input_output_alias``) and the arguments a call
  deletes."""
  _log_compile(name, closed.in_avals, log_reason)
  outer = _phases.current()
  times = outer or _phases.begin(name)
  with _phases.collecting(times), _gc.paused():
    exe = _compile_lowering(lowering, closed, backend, donation)
  if outer is None:
    _phases.report(times)
  return exe


def _compile_lowering(lowering, closed, backend, donation=None):
  module = lowering.module.clone()
  dump = os.environ.get("OURJAX_DUMP")
  if dump:   # the jaxpr beside the module dumps the pipeline writes (module.NN-pass.txt)
    os.makedirs(dump, exist_ok=True)
    with open(os.path.join(dump, f"{module.name}.jaxpr.txt"), "w") as f:
      f.write(str(closed) + "\n")
  name = backend or default_backend_name()
  native = name != "reference"
  kept = lowering.kept_args
  kept = None if len(kept) == len(closed.in_avals) else kept
  # (under OURJAX_PROFILE=1 every call is profiled: compile the instrumented code only)
  opts = {"profile": True} if _profile_all and name == "cpu" else {}
  aliases = dict(donation.aliases) if donation is not None and donation.aliases else None

  def aliased(m):
    if aliases:   # XLA's input_output_alias: output j is written into parameter k's buffer
      m.input_output_alias = dict(aliases)
    return m

  # (read now: an executable loaded from the disk cache makes its module later, on demand; the
  # switch is what its key holds, the OURJAX_* environment)
  from ourjax.config import env_switch
  cpu_attention_on = name == "cpu" and env_switch("OURJAX_CPU_ATTENTION")

  def optimized(m):
    from ourjax.lowering import pipeline
    if name == "cpu":
      from ourjax.backends.llvm import attention as cpu_attention
      m.fused_attention = cpu_attention.refuses if cpu_attention_on else None
      m.read_stored = True
      # (an output that moves a stored value's elements, a roll, read there at the moved
      # positions instead of stored: recompute_outputs; row_cache.READ_MOVED says why)
      from ourjax.backends.llvm import row_cache
      m.read_moved = row_cache.READ_MOVED
    if name == "cuda":   # (its implicit GEMM reads convolution patches from their input)
      from ourjax.backends.cuda import backend as cuda_backend, implicit_gemm
      m.patches_in_place = implicit_gemm.enabled(cuda_backend.device_info())
      m.patch_channel_bytes = 16
      # (a kernel's launch and ramp, a few us, and its share of the compile: on an H100, 32
      # groups of 29 MFLOP each ran 0.26-0.31 ms split against 0.32 direct, but the split's
      # 32 tensor-core kernels took 1.6-1.8 s to compile against 0.2-0.4 s; groups of 100+
      # MFLOP ran 1.5-2x faster split)
      m.kernel_fixed_flops = 1e8
      m.dot_epilogues = True
      from ourjax.backends.cuda import attention, attention_grad
      m.fused_attention = attention.refuses if attention.enabled() else None
      m.fused_attention_grad = attention_grad.refuses if attention.enabled() else None
    pipeline.optimize(m, early_passes=pipeline.NATIVE_EARLY_PASSES if native else (),
                      late_passes=pipeline.NATIVE_LATE_PASSES if native else None)
    return aliased(m)

  # the native backends' disk cache is first asked by the module as lowered (its aliases
  # included): a program an earlier process compiled skips the passes too (its optimised
  # module is made again only if asked for)
  skey = None
  if name in ("cpu", "cuda") and not opts and not dump:
    # (cpu/cache.py, cuda/cache.py: the key and the load need neither the passes nor the
    # compiler)
    from ourjax.backends import disk_cache
    if name == "cpu":
      from ourjax.backends.cpu import cache as source_cache
    else:
      from ourjax.backends.cuda import cache as source_cache
    if disk_cache.cache_dir():
      with _phases.phase("cache_key"):
        skey = source_cache.source_key(aliased(module))     # (None: not cached here)
    if skey is not None:
      lazy = _LazyModule(lambda: optimized(lowering.module.clone()))
      compiled = source_cache.load_by_source(skey, lazy)
      if compiled is not None:
        return ModuleExecutable(lazy, compiled, lowering.hoisted, closed.out_avals, name, kept,
                                donation)
  if name == "cpu":
    # (the shared GEMMs its dots will call build on a thread of their own meanwhile)
    from ourjax.backends.cpu.libraries import prefetch_for
    prefetch_for(module)
  optimized(module)
  if name == "cpu":
    opts["verified"] = True       # (pipeline.optimize verified it, last)
  compiled = _backend_module(backend).compile(module, **opts)
  if skey is not None:
    source_cache.store_by_source(skey, compiled)
  return ModuleExecutable(module, compiled, lowering.hoisted, closed.out_avals, name, kept,
                          donation)


class _LazyModule:
  """A module made on first call and kept (what an executable loaded by its source key gives
  for ``.module``)."""

  def __init__(self, make):
    self.make, self.value = make, None

  def __call__(self):
    if self.value is None:
      self.value = self.make()
    return self.value


def compile_jaxpr(closed: core.ClosedJaxpr, backend=None, name: str = "", *,
                  keep_unused: bool = True, log_reason: str | None = None, cache: bool = True,
                  times=None, donated=None):
  """The executable of ``closed`` (cached per jaxpr object, backend and ``keep_unused`` unless
  ``cache=False``, for callers that keep it themselves): a ``ModuleExecutable``, or, when some
  primitive has no lowering rule and ``OURJAX_STRICT_LOWERING`` is not set, a
  ``JaxprEvaluator``.  ``times``: the compile-phase record begun at tracing (``_phases``).
  ``donated``: a bool per argument leaf (``jit``'s donate_argnums, see ``_donation``)."""
  donated = tuple(donated) if donated and any(donated) else None
  if not cache:
    return _compile_jaxpr(closed, backend, name, keep_unused, log_reason, times, donated)
  key = (id(closed), backend, keep_unused, donated)
  hit = _cache.get(key)
  if hit is not None and hit[0] is closed:
    return hit[1]
  # (compiled once when threads ask together; the entry keeps ``closed`` alive, so its id
  # names it for good)
  return _once.build_once(_cache, key, lambda: (closed, _compile_jaxpr(
      closed, backend, name, keep_unused, log_reason, None, donated)))[1]


class Float0ResultsExecutable:
  """The executable of a jaxpr with ``float0`` results (the cotangents of integer or boolean
  arguments, say): those carry no data, so ``inner`` computes the other results and the
  float0 ones are filled in as NumPy float0 zeros, as JAX returns them."""

  def __init__(self, inner, out_avals):
    self.inner, self.out_avals = inner, list(out_avals)
    self.kept_args = getattr(inner, "kept_args", None)

  def __call__(self, *args):
    outs = iter(self.inner(*args))
    return [np.zeros(a.shape, dtypes.float0) if a.dtype == dtypes.float0 else next(outs)
            for a in self.out_avals]


def _without_float0_results(closed):
  """``closed`` without its float0 results (and the constants only they used)."""
  from ourjax.interpreters import partial_eval as pe
  keep = [a.dtype != dtypes.float0 for a in closed.out_avals]
  jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, keep)
  used = {id(x) for e in jaxpr.eqns for x in e.inputs} | {id(v) for v in jaxpr.outvars}
  pairs = [(v, c) for v, c in zip(jaxpr.constvars, closed.consts) if id(v) in used]
  jaxpr = core.Jaxpr([v for v, _ in pairs], jaxpr.invars, jaxpr.eqns, jaxpr.outvars,
                     jaxpr.debug_name)
  return core.ClosedJaxpr(jaxpr, [c for _, c in pairs])


def _compile_jaxpr(closed, backend, name, keep_unused, log_reason, times=None, donated=None):
  from ourjax.lowering import from_jaxpr
  from ourjax import _events
  if any(a.dtype == dtypes.float0 for a in closed.out_avals):
    inner = _compile_jaxpr(_without_float0_results(closed), backend, name, keep_unused,
                           log_reason, times, donated)
    return Float0ResultsExecutable(inner, closed.out_avals)
  _events.fire("lower_jaxpr_to_module")
  _events.fire("pxla_cached_compilation")
  if core.jaxpr_calls_host(closed):
    # host callbacks: no compiled code calls back into Python yet, so the jaxpr is evaluated
    # (each callback then runs once per call, in program order, with concrete values)
    return JaxprEvaluator(closed, donated)
  try:
    times = _phases.begin(name, times)
    debug = times is None and log.isEnabledFor(logging.DEBUG)
    t0 = time.perf_counter() if debug else 0.0
    with _phases.collecting(times), _gc.paused():
      with _phases.phase("lower"):
        lowering = from_jaxpr.lower(closed, name, keep_unused=keep_unused)
      if debug:
        t1 = time.perf_counter()
        log.debug("Finished jaxpr to HLO module conversion %s in %.6f sec", name, t1 - t0)
      exe = compile_lowering(lowering, closed, backend, name, log_reason,
                             donation_of(lowering, closed, donated))
    if debug:
      log.debug("Finished XLA compilation of jit(%s) in %.6f sec", name,   # (JAX's words)
                time.perf_counter() - t1)
    _phases.report(times)
    return exe
  except from_jaxpr.LoweringError as e:
    if os.environ.get("OURJAX_STRICT_LOWERING"):
      raise
    log.debug("jit(%s): %s; running the jaxpr op by op", name, e)
    return JaxprEvaluator(closed, donated)


#: every ModuleExecutable still referenced (by a jit cache, a ``Compiled``, ...)
_LIVE_EXECUTABLES: "weakref.WeakSet" = weakref.WeakSet()


class Client:
  """The runtime a device belongs to, as JAX's ``device.client``: ``platform`` and
  ``live_executables()``, the compiled programs for that platform still alive (dropped from
  jit's caches by ``clear_cache``/``clear_caches``, they go once nothing else holds them)."""

  def __init__(self, platform: str):
    self.platform = platform

  def live_executables(self) -> list:
    names = ("cuda",) if self.platform == "gpu" else ("cpu", "reference")
    return [e for e in list(_LIVE_EXECUTABLES) if e.backend in names]

  def __repr__(self):
    return f"Client(platform={self.platform!r})"


_CLIENTS: dict = {}


class Device:
  """A device as JAX shows it: ``platform`` ('cpu' or 'gpu'), ``id``, ``device_kind``,
  ``client``, ``process_index`` and ``local_hardware_id`` (the CPU device's or GPU's number
  in its process: the CUDA ordinal).  In one process ``id`` is ``local_hardware_id``; under
  ``ourjax.distributed`` ``id`` numbers the devices of all processes (process 0's first), and
  the other processes' devices are objects of this class too, which this process cannot
  address (``distributed.initialize``)."""

  def __init__(self, platform: str, id: int = 0, device_kind: str | None = None,
               process_index: int = 0, local_hardware_id: int | None = None):
    self.platform, self.id = platform, id
    self.device_kind = device_kind or platform
    self.process_index = process_index
    self.local_hardware_id = id if local_hardware_id is None else local_hardware_id

  @property
  def client(self) -> Client:
    c = _CLIENTS.get(self.platform)
    if c is None:
      c = _CLIENTS[self.platform] = Client(self.platform)
    return c

  def __repr__(self):
    return f"{'CpuDevice' if self.platform == 'cpu' else 'CudaDevice'}(id={self.id})"

  def __str__(self):
    return f"{'cpu' if self.platform == 'cpu' else 'cuda'}:{self.id}"     # (JAX's)

  def memory_stats(self):
    """The caching allocator's statistics (GPU devices; None for the CPU)."""
    if self.platform != "gpu":
      return None
    from ourjax.backends.cuda import memory
    return memory.memory_stats(self.local_hardware_id)


_CPU = Device("cpu", 0)
_CPUS: list = [_CPU]
_GPUS: list = []


def num_cpu_devices() -> int:
  """How many CPU devices ourjax shows: ``OURJAX_NUM_CPU_DEVICES`` (or the config option
  ``jax_num_cpu_devices``, or XLA's ``--xla_force_host_platform_device_count`` in
  ``XLA_FLAGS``), else 1.  They share the host's memory and cores; their collectives run in
  process (``backends/collectives.py``), so programs for several devices run and are tested
  without GPUs."""
  from ourjax.config import config
  n = getattr(config, "jax_num_cpu_devices", None)
  if n is None or int(n) < 1:
    n = os.environ.get("OURJAX_NUM_CPU_DEVICES")
    if not n:
      for flag in os.environ.get("XLA_FLAGS", "").split():
        if flag.startswith("--xla_force_host_platform_device_count="):
          n = flag.split("=", 1)[1]
  try:
    return max(1, int(n)) if n else 1
  except ValueError:
    raise ValueError(f"OURJAX_NUM_CPU_DEVICES must be a positive integer, got {n!r}") from None


def _cpu_devices() -> list:
  n = num_cpu_devices()
  while len(_CPUS) < n:
    _CPUS.append(Device("cpu", len(_CPUS)))
  return _CPUS[:n]


def _cuda_devices() -> list:
  if not _GPUS and _cuda_available():
    from ourjax.backends.cuda import driver
    for i in range(driver.device_count()):
      _GPUS.append(Device("gpu", i, driver.get_device(i).name))
  return list(_GPUS)


def devices(backend=None):
  """The devices of ``backend`` ('cpu', 'cuda'/'gpu'; default: the default backend's)."""
  name = backend or default_backend_name()
  if isinstance(name, str) and name.lower() in ("cuda", "gpu"):
    gpus = _cuda_devices()
    if not gpus:
      from ourjax.backends.cuda import driver
      raise RuntimeError(f"Backend 'cuda' is not available: {driver.unavailable_reason()}")
    return gpus
  return _cpu_devices()


def default_backend() -> str:
  """'gpu' when the default backend is CUDA, else 'cpu' (JAX's platform names)."""
  return "gpu" if default_backend_name() == "cuda" else "cpu"


def configured_default_device():
  """The ``Device`` that ``jax_default_device`` names (``ourjax.default_device``; a platform
  name means its first device), or None where it is unset."""
  from ourjax.config import config
  d = config.jax_default_device
  if d is None or isinstance(d, Device):
    return d
  return devices(d)[0]


def gpu_of_ordinal(ordinal: int) -> Device:
  """The ``Device`` of the GPU of CUDA ordinal ``ordinal`` in this process."""
  return _cuda_devices()[ordinal]


def cuda_device(id: int = 0) -> Device:
  return _cuda_devices()[id]


def array_devices(array):
  sharding = getattr(array, "_sharding", None)
  if sharding is not None:
    return set(sharding._device_list)
  committed = getattr(array, "_committed", None)
  if committed is not None:
    return {committed}
  buf = getattr(array, "_device_buf", None)
  if buf is not None and getattr(buf, "platform", None) == "gpu":
    return {gpu_of_ordinal(buf.device.ordinal)}
  return {_CPU}


def committed_device(x):
  """The one device ``x`` is committed to (an Array ``device_put`` on a device or computed from
  such, or laid out on one device by a sharding), else None."""
  c = getattr(x, "_committed", None)
  if c is not None:
    return c
  sharding = getattr(x, "_sharding", None)
  if sharding is not None and len(sharding._device_list) == 1:
    return sharding._device_list[0]
  return None


def commit(value, device):
  """``value`` (an Array, on ``device`` already) as an array committed to ``device``: itself
  when it is, else a new Array of the same data (the argument stays uncommitted)."""
  from ourjax.array import Array
  if committed_device(value) is device:
    return value
  if type(value) is not Array:
    return value              # (a sharded array is committed to its devices already)
  if value._device_buf is not None and getattr(value._device_buf, "platform", None) == "gpu":
    out = Array._from_device(value._device_buf, value.aval)
    out._npy = value._npy
  else:
    out = Array._from_result(value._value, value.aval)
  out._committed = device
  return out


def put_on(value, device):
  """``value`` (an Array or host value) as an Array on ``device`` (a ``Device``; None: the
  device ``jax_default_device`` names, else the default backend's first device; under ``ourjax.distributed``, this process's first, as in
  JAX: with ``local_device_ids`` that need not be the backend's first)."""
  from ourjax.array import Array
  if device is None:
    device = configured_default_device()
  if device is None:
    from ourjax import distributed
    st = distributed.state()
    local = st.local_devices if st is not None else None
    device = local[0] if local else devices()[0]
  if isinstance(device, str):
    device = devices(device)[0]
  if device.platform == "gpu":
    from ourjax.backends.cuda import backend as cuda
    from ourjax.backends.cuda import driver
    if device not in _GPUS:
      raise ValueError(f"cannot put an array on {device}: it belongs to process "
                       f"{device.process_index}, not to this one (only a process's own devices "
                       "are addressable)")
    dev = driver.get_device(device.local_hardware_id)
    if isinstance(value, Array):
      buf = value._device_buf
      if buf is not None and getattr(buf, "device", None) is dev:
        return value
      out = Array._from_device(cuda.DeviceBuffer.from_host(value._value, dev), value.aval)
      return out
    a = value if isinstance(value, Array) else Array(value)
    return Array._from_device(cuda.DeviceBuffer.from_host(a._value, dev), a.aval)
  # the host: an Array with host data only (on a CPU device other than the first, tagged with
  # its device)
  if not isinstance(value, Array):
    value = Array(value)
  if device is not _CPU:
    if device not in _CPUS:
      raise ValueError(f"cannot put a {value.aval.str_short()} array on {device}: it belongs to "
                       f"process {device.process_index}, not to this one (only a process's own "
                       "devices are addressable)")
    from ourjax.sharding import ShardedArray, SingleDeviceSharding
    host = Array._from_result(value._value, value.aval)
    return ShardedArray._from_shards([host], SingleDeviceSharding(device), value.aval)
  if value._device_buf is None and type(value) is Array:
    return value
  return Array._from_result(value._value, value.aval)
