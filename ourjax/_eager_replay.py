"""Eager calls of ``jnp`` functions made of several primitives: traced once, then replayed.

An eager ``jnp.var(x)`` binds about ten primitives, and each bind pays for the ``jnp`` and
``lax`` wrappers' argument checks, dtype promotion and the abstract evaluation of the primitive
(cached, but keyed per call) before its NumPy implementation runs: tens of microseconds for a
few microseconds of NumPy.  JAX's ``jnp`` functions are ``jit``-compiled instead, so an eager
call costs one cached dispatch.  ``replayed`` does the same without a compiler: the second time
a decorated function is called eagerly with one signature (the avals of its array operands, its
static arguments and Python scalars, the config flags), it is traced to a jaxpr, and that call
and the later ones run the jaxpr's primitives' NumPy implementations one after the other on
NumPy values, each result coerced to its equation's abstract dtype exactly as an eager bind
does (``Array._from_result``).  The results, dtypes and weak types are the eager ones: the same
implementations run on the same values; argument errors are raised by the first (direct) call
of a signature and by its trace.  The primal of a custom derivative (``nn.softmax``) is replayed
inline, a ``scan`` (threefry's rounds in every ``random`` sampler) by replaying its body once
per iteration; a standard elementwise or reduction step calls its NumPy function directly, and
the whole replay runs under one NumPy error state.  A slow replay that keeps being called is
compiled (see ``_Entry``).

A call goes the direct way (the function runs as written) when

* something is being traced (the function's primitives are then recorded by that trace),
* an operand is not an ``Array``, a list or tuple of host Arrays, a Python scalar or None (a
  NumPy array, a list of numbers, a tracer, a typed PRNG key), a static argument cannot be
  hashed, or a keyword argument is not one the decorator names,
* the signature was seen once only (a Python scalar that changes at every call is then never
  traced), or
* the trace failed or needs what a replay cannot give: a primitive with its own eager evaluation
  (``jit`` calls, ``while``/``cond``), a result that is not an Array (typed keys), an operand or result of ``_eager``'s kernel size
  (there the per-primitive choice between NumPy and a compiled kernel is worth its cost), NaN
  checking, ``disable_jit`` or ``no_tracing``.

A signature of ``_eager``'s kernel size goes the direct way until its whole jaxpr, compiled on
``_eager``'s worker thread, has been timed faster than its direct calls (``_LargeEntry``: one
fused program instead of a pass through memory per primitive).

A signature with an operand on a GPU (``_OnGpu`` in its key: the aval and the device) is not
replayed: from its second call its jaxpr runs compiled for that GPU (``_DeviceEntry``, through
``_eager_device.compiled``: one dispatch, as JAX's jitted ``jnp`` functions; the results stay
there); its first call goes the direct way, each primitive on the GPU (``_eager_device``).
"""
from __future__ import annotations

import functools
import inspect
import math
import time

import numpy as np

from ourjax import core
from ourjax.array import Array, to_numpy
from ourjax.backends import reference_ops as rops
from ourjax.config import config
from ourjax.core import Literal, impl_rules

_DIRECT = object()          # a cache entry: this signature runs the function as written
_CACHE_MAX = 512            # entries per function; the cache is cleared when full
_PY_SCALARS = (bool, int, float, complex)
#: primitives whose eager evaluation is their ``call_jaxpr`` (custom derivatives' primal)
_INLINED = frozenset(["custom_jvp_call", "custom_vjp_call"])


def replayed(static=(), operands=None):
  """Decorate a ``jnp`` function whose eager calls replay its jaxpr (see the module docstring).

  ``static``: the names of the parameters that only steer the computation (``axis``,
  ``dtype``, ``keepdims``...), hashed into the cache key.  Every other parameter is an operand:
  an ``Array`` (traced), a list or tuple of Arrays (each traced), a Python scalar (part of the
  key, by type and value) or None.
  ``operands``: if given, the only non-static parameters a replayed call may pass (others, such
  as deprecated spellings, go the direct way)."""
  def deco(fun):
    params = inspect.signature(fun).parameters
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    pos_names = [p.name for p in params.values() if p.kind in positional]
    kw_names = {p.name for p in params.values()
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              inspect.Parameter.KEYWORD_ONLY)}
    unknown = [n for n in static if n not in params]
    if unknown:
      raise TypeError(f"replayed: {fun.__name__} has no parameter(s) {unknown}")
    static_set = frozenset(static)
    allowed = frozenset(params) if operands is None else frozenset(operands) | static_set
    pos_static = tuple(n in static_set for n in pos_names)
    pos_ok = tuple(n in allowed for n in pos_names)
    n_pos = len(pos_names)
    cache: dict = {}

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
      st = core._state
      if st.dynamic_trace is not None or len(st.trace_stack) != 1 or len(args) > n_pos:
        return fun(*args, **kwargs)
      parts, values, slots = [], [], []
      gpu = None
      try:
        for i, v in enumerate(args):
          if not pos_ok[i]:
            return fun(*args, **kwargs)
          if pos_static[i]:
            parts.append((type(v), v))
            continue
          if (type(v) is Array and v._aval is not None and v._npy is not None and
              v._device_buf is None):
            parts.append(v._aval)       # (the common operand, inline)
            values.append(v)
            slots.append(i)
            continue
          p = _operand_key(v)
          if p is None:
            return fun(*args, **kwargs)
          if p.__class__ is _OnGpu:
            if gpu is not None and gpu[1] is not p[1]:
              return fun(*args, **kwargs)     # (two GPUs: the primitives raise)
            gpu = p
          parts.append(p)
          if type(v) is Array:
            values.append(v)
            slots.append(i)
          elif p.__class__ is _Seq:
            values.extend(v)
            slots.append((i, len(v)))
        for k, v in kwargs.items():
          if k not in allowed or k not in kw_names:
            return fun(*args, **kwargs)
          if k in static_set:
            parts.append((k, type(v), v))
            continue
          p = _operand_key(v)
          if p is None:
            return fun(*args, **kwargs)
          if p.__class__ is _OnGpu:
            if gpu is not None and gpu[1] is not p[1]:
              return fun(*args, **kwargs)     # (two GPUs: the primitives raise)
            gpu = p
          parts.append((k, p))
          if type(v) is Array:
            values.append(v)
            slots.append(k)
          elif p.__class__ is _Seq:
            values.extend(v)
            slots.append((k, len(v)))
        ov = config._local.overrides
        # the flags: the global values' version (and the dict itself: tests swap it) and this
        # thread's context-manager values
        key = (tuple(parts), config._version, id(config._values),
               tuple(ov.items()) if ov else ())
        entry = cache.get(key)
      except TypeError:        # an unhashable static argument: the function raises
        return fun(*args, **kwargs)
      if entry is None:        # first sighting: run it as written
        if len(cache) >= _CACHE_MAX:
          cache.clear()
        cache[key] = 1
        return fun(*args, **kwargs)
      if entry is _DIRECT:
        return fun(*args, **kwargs)
      if entry.__class__ is int:
        # (with an operand on a GPU: compiled whole for it, as JAX's jitted jnp functions)
        entry = cache[key] = (_build(fun, args, kwargs, slots) if gpu is None else
                              _build_device(fun, args, kwargs, slots, gpu[1]))
        if entry is _DIRECT:
          return fun(*args, **kwargs)
      if entry.__class__ is _LargeEntry:
        return entry.call(values, fun, args, kwargs)
      return entry.call(values)

    wrapper._replay_cache = cache
    return wrapper
  return deco


def _operand_key(v):
  """The cache-key part of an operand, None when the call cannot be replayed."""
  t = type(v)
  if t is Array:
    buf = v._device_buf
    if buf is not None and getattr(buf, "platform", None) == "gpu":
      return _OnGpu((v.aval, buf.device))       # (compiled for that GPU: ``_DeviceEntry``)
    if v._npy is None:     # (a deleted array, or one of another backend)
      return None
    return v._aval if v._aval is not None else v.aval
  if v is None:
    return ("none",)
  if t is list or t is tuple:       # a sequence of Arrays (jnp.stack's)
    avals = []
    for a in v:
      if type(a) is not Array or a._npy is None or a._device_buf is not None:
        return None
      avals.append(a._aval if a._aval is not None else a.aval)
    return _Seq((t, tuple(avals)))
  if t in _PY_SCALARS:
    # by value, and by sign for zeros (0.0 == -0.0): the trace bakes the scalar in
    if t is float:
      return (t, v, math.copysign(1.0, v))
    if t is complex:
      return (t, v, repr(v))
    return (t, v)
  return None


class _Seq(tuple):
  """The key part of a list or tuple of Arrays: (its type, their avals)."""
  __slots__ = ()


class _OnGpu(tuple):
  """The key part of an Array on a GPU: (its aval, the CUDA device)."""
  __slots__ = ()


def _build(fun, args, kwargs, slots):
  """The replay of one signature, or ``_DIRECT``."""
  from ourjax import _eager
  from ourjax.interpreters import partial_eval as pe
  traced = _trace(fun, args, kwargs, slots)
  if traced is None:
    return _DIRECT
  closed, structure = traced
  jaxpr, _ = pe.dce_jaxpr(closed.jaxpr)
  try:
    replay = _Replay(jaxpr, closed.consts, structure, _eager._MIN_KERNEL_ELEMENTS)
  except _TooLarge:
    return _LargeEntry(core.ClosedJaxpr(jaxpr, closed.consts),
                       getattr(fun, "__name__", "replayed"), structure)
  except _NoReplay:
    return _DIRECT
  return _Entry(replay, core.ClosedJaxpr(jaxpr, closed.consts),
                getattr(fun, "__name__", "replayed"))


def _build_device(fun, args, kwargs, slots, dev):
  """The compiled program of one signature with an operand on GPU ``dev``, or ``_DIRECT``."""
  from ourjax import _eager_device
  traced = _trace(fun, args, kwargs, slots)
  if traced is None:
    return _DIRECT
  closed, structure = traced
  call = _eager_device.compiled(closed, getattr(fun, "__name__", "replayed"), dev)
  return _DIRECT if call is None else _DeviceEntry(call, structure)


class _DeviceEntry:
  """A signature with an operand on a GPU: its jaxpr compiled for that GPU (one dispatch for
  the whole function, as JAX's jitted ``jnp`` functions; the results stay on the GPU)."""
  __slots__ = ("fn", "structure")

  def __init__(self, fn, structure):
    self.fn, self.structure = fn, structure

  def call(self, arrays):
    outs = self.fn(arrays)
    st = self.structure
    return outs[0] if st is None else st(outs)


def _trace(fun, args, kwargs, slots):
  """(closed jaxpr of ``fun`` with the operands at ``slots`` traced, the result's sequence type
  or None), or None when the call cannot be replayed (flags, an error, a result that is not
  an array: the direct call raises the user's error, or works)."""
  from ourjax import _nan_check
  from ourjax.interpreters import partial_eval as pe
  if config.jax_disable_jit or config.jax_no_tracing or _nan_check.enabled():
    return None
  avals = []
  for s in slots:
    if type(s) is tuple:      # (position or name, length): a sequence of Arrays
      seq = args[s[0]] if type(s[0]) is int else kwargs[s[0]]
      avals.extend([core.get_aval(a) for a in seq])
    else:
      avals.append(core.get_aval(args[s] if type(s) is int else kwargs[s]))
  structure = []

  def flat(*tracers):
    a, kw = list(args), dict(kwargs)
    i = 0
    for s in slots:
      if type(s) is tuple:
        where, n = s
        v = type(args[where] if type(where) is int else kwargs[where])(tracers[i:i + n])
        i += n
      else:
        where, v = s, tracers[i]
        i += 1
      if type(where) is int:
        a[where] = v
      else:
        kw[where] = v
    out = fun(*a, **kw)
    if isinstance(out, (tuple, list)):
      structure.append(type(out))
      outs = list(out)
    else:
      outs = [out]
    for o in outs:
      if not isinstance(o, (core.Tracer, Array)):
        raise _NoReplay
    return outs

  try:
    closed = pe.trace_to_jaxpr(flat, avals, getattr(fun, "__name__", "replayed"))
  except Exception:     # noqa: BLE001  (the direct call raises the user's error, or works)
    return None
  return closed, (structure[0] if structure else None)


class _NoReplay(Exception):
  pass


class _TooLarge(_NoReplay):
  """An operand or result of ``_eager``'s kernel size (the calls go the direct way, and the
  signature may be compiled whole: ``_LargeEntry``)."""


# ------------------------------------------------------------------------------------------------
# A replay or a compiled kernel.  A replay costs a few microseconds per equation; a signature
# whose replay is slow (a loop: threefry's rounds in every random function) and that is called
# again and again is compiled (``jit`` of its jaxpr on the CPU backend: one native call) once the
# replays so far took as long as a compile takes (ski rental; ``_eager`` compiles a large
# operand's kernel on a worker thread instead); its first calls are timed against the replay,
# and the faster one is kept.

#: running mean of the measured compiles of replayed signatures, seconds
_compile_seconds = [0.5]


def _compiled(closed, name, arrays, out_avals):
  """``closed`` compiled for the CPU (jit of its flat evaluation, named ``name``: what
  log_compiles and profiles show), called once on ``arrays`` and waited for; the compile's time
  goes into ``_compile_seconds``' running mean.  None when the backend cannot build it or its
  results are not Arrays of ``out_avals``."""
  from ourjax import api

  def flat(*args):
    return _eval_flat(closed, *args)
  flat.__name__ = flat.__qualname__ = name
  fn = api.jit(flat, backend="cpu")
  t0 = time.perf_counter()
  try:
    outs = fn(*arrays)          # compiles
    for o in outs:
      o.block_until_ready()
  except Exception:  # noqa: BLE001  (the caller keeps its uncompiled way)
    return None
  _compile_seconds[0] = 0.5 * (_compile_seconds[0] + time.perf_counter() - t0)
  if [type(o) is Array and o.aval for o in outs] != out_avals:
    return None
  return fn
_MIN_REPLAY_SECONDS = 1e-4     # a faster replay is not worth a compile (a jitted call: ~10 us)
_TRIALS = 2


def _eval_flat(closed, *args):
  return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


class _Entry:
  """One replayed signature: its replay, and the state of its compiled alternative
  (``state``: None while undecided, ``'trial'`` while the kernel is timed, ``'kernel'`` once it
  was faster, ``'replay'`` when the replay stays)."""
  __slots__ = ("replay", "closed", "name", "spent", "best", "fn", "state", "k_best", "k_calls")

  def __init__(self, replay, closed, name):
    self.replay, self.closed, self.name = replay, closed, name
    self.spent, self.best, self.fn, self.state = 0.0, float("inf"), None, None
    self.k_best, self.k_calls = float("inf"), 0

  def call(self, arrays):
    if self.state == "replay":
      return self.replay.run([a._npy for a in arrays])
    fn = self.fn      # (read once: another thread may settle the choice meanwhile)
    if fn is not None and self.state != "replay":
      t0 = time.perf_counter()
      outs = fn(*arrays)
      if self.state == "trial":
        for o in outs:
          o.block_until_ready()
        self._timed(time.perf_counter() - t0)
      st = self.replay.structure
      return outs[0] if st is None else st(outs)
    t0 = time.perf_counter()
    r = self.replay.run([a._npy for a in arrays])
    dt = time.perf_counter() - t0
    self.spent += dt
    if dt < self.best:
      self.best = dt
    if self.state is None and self.spent >= _compile_seconds[0]:
      self._consider(arrays)
    return r

  def _consider(self, arrays):
    if self.best < _MIN_REPLAY_SECONDS:
      self.state = "replay"
      return
    fn = _compiled(self.closed, self.name, arrays, self.replay.out_avals)
    if fn is None:              # (a kernel the backend cannot build: the replay stays)
      self.state = "replay"
      return
    self.state, self.fn = "trial", fn

  def _timed(self, dt):
    self.k_calls += 1
    if dt < self.k_best:
      self.k_best = dt
    if self.k_calls >= _TRIALS:
      if self.k_best < self.best:
        self.state = "kernel"
      else:
        self.state, self.fn = "replay", None


#: a large signature is compiled once its direct calls have cost this share of a compile: the
#: compile runs beside the calls (on the worker), so it costs the caller no wait, only a core
#: for a while (softmax of 1024x1024 float32: after ~15 calls of ~2.5 ms)
_LARGE_COMPILE_SHARE = 0.1


class _LargeEntry:
  """A signature with large operands: its calls go the direct way (each primitive chooses
  between NumPy and its own kernel in ``_eager``), timed; once they have cost a share of a
  compile's time (``_LARGE_COMPILE_SHARE``), the whole jaxpr is compiled (one fused program: ``nn.softmax`` of a
  large matrix is five or more eager operations over it, each a pass through memory; JAX's is
  one jitted call) on ``_eager``'s worker thread while the direct calls go on (``_eager``'s
  limit of pending compiles applies, and ``_eager.wait_for_kernels`` waits for it), then timed
  in turn with the direct calls, ``_TRIALS`` calls of each, and the faster stays.  ``state``: ``'numpy'`` while
  the direct calls are timed (the name ``_eager``'s fork handlers reset a pending compile's
  owner to), ``'compiling'``, ``'trial'``, ``'kernel'``, or ``'direct'`` for good."""
  __slots__ = ("closed", "name", "structure", "spent", "best", "fn", "state", "k_best",
               "k_calls", "d_calls", "out_avals")

  def __init__(self, closed, name, structure):
    self.closed, self.name, self.structure = closed, name, structure
    self.out_avals = list(closed.out_avals)
    self.spent, self.best, self.fn, self.state = 0.0, float("inf"), None, "numpy"
    self.k_best, self.k_calls, self.d_calls = float("inf"), 0, 0

  def call(self, arrays, fun, args, kwargs):
    fn = self.fn      # (read once: another thread may settle the choice meanwhile)
    state = self.state
    if fn is not None and state in ("trial", "kernel") and not config.jax_disable_jit:
      if state == "trial" and self.d_calls < self.k_calls:     # (the direct call's turn)
        t0 = time.perf_counter()
        r = fun(*args, **kwargs)
        self.d_calls += 1
        self.best = min(self.best, time.perf_counter() - t0)
        self._decide()
        return r
      t0 = time.perf_counter()
      outs = fn(*arrays)
      if state == "trial":
        for o in outs:
          o.block_until_ready()
        self.k_calls += 1
        self.k_best = min(self.k_best, time.perf_counter() - t0)
        self._decide()
      st = self.structure
      return outs[0] if st is None else st(outs)
    if state != "numpy":          # ('compiling', 'direct', or a kernel under disable_jit)
      return fun(*args, **kwargs)
    t0 = time.perf_counter()
    r = fun(*args, **kwargs)
    dt = time.perf_counter() - t0
    self.spent += dt
    self.best = min(self.best, dt)
    if self.spent >= _LARGE_COMPILE_SHARE * _compile_seconds[0]:
      self._submit(arrays)
    return r

  def _decide(self):
    """After ``_TRIALS`` timed calls of each, the faster of the program and the direct calls
    stays."""
    if self.k_calls >= _TRIALS and self.d_calls >= _TRIALS and self.state == "trial":
      if self.k_best < self.best:
        self.state = "kernel"
      else:
        self.state, self.fn = "direct", None

  def _submit(self, arrays):
    from ourjax import _eager, _nan_check
    if config.jax_disable_jit or _nan_check.enabled():
      return
    with _eager._lock:
      if len(_eager._pending) >= _eager._MAX_PENDING or self.state != "numpy":
        return
      self.state = "compiling"
      overrides = dict(config._local.overrides)    # (x64 and the other flags of this thread)
      _eager._pending[self] = _eager._executor().submit(self._compile_job, list(arrays),
                                                         overrides)

  def _compile_job(self, arrays, overrides):
    from ourjax import _eager
    try:
      config._local.overrides = overrides
      self._compile(arrays)
    finally:
      with _eager._lock:
        _eager._pending.pop(self, None)

  def _compile(self, arrays):
    fn = _compiled(self.closed, self.name, arrays, self.out_avals)
    if fn is None:              # (a program the backend cannot build: direct it stays)
      self.state = "direct"
      return
    self.fn = fn             # (before the state: a caller that sees 'trial' finds the kernel)
    self.best = float("inf")  # (timed again in turn with the program: the calls so far shared
    self.state = "trial"      # the cores with this compile)


class _Replay:
  """A jaxpr flattened into register slots: ``template`` holds the constants and literals,
  ``steps`` the equations as (rule, params, input slots, output slot(s), output aval(s),
  multiple results)."""
  __slots__ = ("template", "in_slots", "steps", "out_slots", "out_avals", "structure",
               "max_elements")

  def __init__(self, jaxpr, consts, structure, max_elements):
    self.template: list = []
    self.steps: list = []
    self.max_elements = max_elements
    const_slots = [self._const(to_numpy(c), v.aval) for v, c in zip(jaxpr.constvars, consts)]
    self.in_slots = [self._new() for _ in jaxpr.invars]
    self.out_slots = self._emit(jaxpr, const_slots + self.in_slots)
    self.out_avals = [x.aval for x in jaxpr.outvars]
    self.structure = structure
    del self.max_elements

  def _new(self) -> int:
    self.template.append(None)
    return len(self.template) - 1

  def _const(self, value, aval) -> int:
    v = _coerce(np.asarray(value), aval)
    if v.flags.writeable:          # (shared by every call: a rule must not write to it)
      v = v.copy()
      v.flags.writeable = False
    self.template.append(v)
    return len(self.template) - 1

  def _emit(self, jaxpr, in_slots) -> list:
    """Append the steps of ``jaxpr`` (constvars then invars read from ``in_slots``); its
    outputs' slots."""
    slot = dict(zip(list(jaxpr.constvars) + list(jaxpr.invars), in_slots))

    def read(x):
      return self._const(x.val, x.aval) if isinstance(x, Literal) else slot[x]

    for eqn in jaxpr.eqns:
      prim = eqn.primitive
      ins = [read(x) for x in eqn.inputs]
      if prim.name in _INLINED:      # a custom derivative's primal: its equations, inline
        inner = eqn.params["call_jaxpr"]
        cs = [self._const(to_numpy(c), v.aval) for v, c in zip(inner.jaxpr.constvars,
                                                                inner.consts)]
        for v, o in zip(eqn.out_binders, self._emit(inner.jaxpr, cs + ins)):
          slot[v] = o
        continue
      if prim.name == "scan":        # a loop: its body replayed once per iteration
        rule = _ScanRunner(eqn.params, self.max_elements)
      else:
        rule = impl_rules.get(prim)
        if rule is None or prim._custom_impl:
          raise _NoReplay
      avals = [v.aval for v in eqn.out_binders] + [x.aval for x in eqn.inputs]
      if any(a.size >= self.max_elements for a in avals):
        raise _TooLarge
      outs = [self._new() for _ in eqn.out_binders]
      for v, o in zip(eqn.out_binders, outs):
        slot[v] = o
      if type(rule) is _ScanRunner:
        params = {}
      else:
        rule, params = _direct_numpy(rule, eqn.params, [x.aval for x in eqn.inputs])
      if prim.multiple_results:
        self.steps.append((rule, params, tuple(ins), tuple(outs),
                           tuple(v.aval for v in eqn.out_binders), True))
      else:
        self.steps.append((rule, params, tuple(ins), outs[0], eqn.out_binders[0].aval, False))
    return [read(x) for x in jaxpr.outvars]

  def run_raw(self, values) -> list:
    """The outputs as NumPy values (the error state already set by the caller)."""
    regs = self.template.copy()
    for i, v in zip(self.in_slots, values):
      regs[i] = v
    for rule, params, ins, outs, avals, multi in self.steps:
      r = rule(*[regs[i] for i in ins], **params)
      if multi:
        for o, a, x in zip(outs, avals, r):
          regs[o] = _coerce(x, a)
      else:
        regs[outs] = _coerce(r, avals)
    return [regs[i] for i in self.out_slots]

  def run(self, values):
    token = _set_quiet()      # (inf and NaN are values: no NumPy warnings, as ``rops.quietly``)
    try:
      vals = self.run_raw(values)
    finally:
      _reset_quiet(token)
    res = [Array._from_result(v, a) for v, a in zip(vals, self.out_avals)]
    if self.structure is None:
      return res[0]
    return self.structure(res)


class _ScanRunner:
  """A ``scan`` step: its body's replay run ``length`` times on NumPy values (what
  ``_scan._scan_impl`` does with one eager bind per body equation)."""

  def __init__(self, params, max_elements):
    closed = params["jaxpr"]
    self.body = _Replay(closed.jaxpr, closed.consts, None, max_elements)
    self.length, self.reverse = params["length"], params["reverse"]
    self.num_consts, self.num_carry = params["num_consts"], params["num_carry"]
    self.y_avals = closed.out_avals[self.num_carry:]

  def __call__(self, *args):
    nc, nk, n = self.num_consts, self.num_carry, self.length
    consts, carry, xs = list(args[:nc]), list(args[nc:nc + nk]), args[nc + nk:]
    ys = [np.empty((n,) + a.shape, a.dtype) for a in self.y_avals]
    run = self.body.run_raw
    for k in range(n):
      i = n - 1 - k if self.reverse else k
      outs = run(consts + carry + [x[i] for x in xs])
      carry = outs[:nk]
      for y, o in zip(ys, outs[nk:]):
        y[i] = o
    return carry + ys


def _direct_numpy(rule, params, in_avals):
  """(function, params) for one step: the NumPy function inside a standard elementwise or
  reduction rule where the rule itself would only call it (operands of 32 bits or more, the
  error state set by ``run``; a max/min over a non-empty operand needs no initial value), else
  the rule itself."""
  for a in in_avals:
    if a.dtype.itemsize < 4 and a.dtype.kind in "fV":
      return rule, params         # (16-bit floats are computed in float32 by the rule)
  fn = getattr(rule, "numpy_fn", None)
  if fn is not None:
    return fn, params
  fn = getattr(rule, "reduce_fn", None)
  if fn is None:
    return rule, params
  a0 = in_avals[0]
  single = a0.size and all(a0.shape[a] == 1 for a in params["axes"])  # (the rule: a reshape)
  if (not rule.chooser or a0.size) and a0.dtype.itemsize >= 4 and not single:
    return fn, {"axis": params["axes"]}
  return rule, params


def _set_quiet():
  if rops._extobj_contextvar is None:
    ctx = np.errstate(all="ignore")
    ctx.__enter__()
    return ctx
  return rops._extobj_contextvar.set(rops._IGNORE_ALL)


def _reset_quiet(token):
  if rops._extobj_contextvar is None:
    token.__exit__(None, None, None)
  else:
    rops._extobj_contextvar.reset(token)


def _coerce(v, aval):
  """``v`` as a NumPy array of ``aval``'s dtype and shape (what ``Array._from_result`` makes
  of an eager result)."""
  if type(v) is Array:
    v = v._value
  elif type(v) is not np.ndarray:
    v = np.asarray(v)
  if v.dtype != aval.dtype:
    v = v.astype(aval.dtype)
  if v.shape != aval.shape:
    v = v.reshape(aval.shape) if v.size == aval.size else np.broadcast_to(v, aval.shape).copy()
  return v
