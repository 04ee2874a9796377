"""``jit``: ``JitWrapped`` traces a function once per input signature (its cache, keyed by the
arguments' types, the static arguments and the configuration that changes a trace), compiles the
jaxpr for its backend and calls it; a fast path per entry skips the flattening and checks
of an ordinary call.  ``lower``/``trace`` give the AOT stages (``stages.py``)."""
from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import weakref
from typing import Callable

import numpy as np

from ourjax import (_cache_miss, _compiler_options, _events, _nan_check, _once, _phases, core,
                    dtypes, errors)
from ourjax import _pytree as tree_util
from ourjax.array import Array
from ourjax.config import config, user_context_key
from ourjax.sharding import ShardedArray
from ourjax.interpreters import partial_eval as pe
from ourjax.interpreters.pjit import pjit_p
from ourjax import ref as _ref
from ourjax._pytree import tree_flatten, tree_structure, tree_unflatten
# (defined in api before it imports this module)
from ourjax.api import (ShapeDtypeStruct, _abstractify, _check_arg, _fun_name, _split_static,
                        flatten_fun)


# ------------------------------------------------------------------------------------------------
# jit



def _staging() -> bool:
  """Is a jaxpr being built (make_jaxpr, eval_shape, an enclosing jit's trace)?"""
  dyn = core._state.dynamic_trace
  return dyn is not None and dyn.trace_type is pe.JaxprTrace

class _CacheEntry:
  """One traced signature of a jitted function: the closed jaxpr, the output structure, why
  the cache missed (for ``jax_log_compiles``), and the executable once compiled."""
  __slots__ = ("closed", "out_tree", "executable", "reason", "sig", "compiled", "times")

  def __init__(self, closed, out_tree, reason=None, sig=None, times=None):
    self.closed, self.out_tree, self.executable = closed, out_tree, None
    self.compiled = {}        # {None: executable}, filled once (_once.build_once)
    self.reason, self.sig = reason, sig
    self.times = times        # the compile phases so far (_phases; jax_log_compiles only)


def _positional_params(fun):
  """(names of the positional parameters, name of *args or None, keyword names), or None when
  the signature is unknown."""
  try:
    params = list(inspect.signature(fun).parameters.values())
  except (TypeError, ValueError):
    return None
  pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
  kw = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
  has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
  return pos, var, kw, has_var_kw


def _fun_location(fun) -> str:
  code = getattr(inspect.unwrap(fun), "__code__", None)
  return f" defined at {code.co_filename}:{code.co_firstlineno}" if code is not None else ""


def _static_str(v) -> str:
  r = repr(v)
  return r if len(r) <= 60 else r[:57] + "..."


_log = logging.getLogger("ourjax")
_JIT_CACHES = weakref.WeakKeyDictionary()
_PRIVATE_FAST = weakref.WeakSet()    # jitted functions whose caches are their own (see below)


_JIT_CACHES_LOCK = threading.Lock()


def _shared_cache(fun, options) -> dict:
  """The signature cache of ``fun`` under ``options``: shared by every ``jit(fun, ...)`` with
  the same options (so ``jit(f)(x)`` in a loop traces once, as in JAX), dropped with ``fun``."""
  try:
    with _JIT_CACHES_LOCK:
      per_fun = _JIT_CACHES.get(fun)
      if per_fun is None:
        per_fun = _JIT_CACHES[fun] = {}
      return per_fun.setdefault(options, {})
  except TypeError:       # not weakly referenceable or not hashable: a cache of its own
    return {}


def _axis_env_key() -> tuple:
  """The named axes in scope (enclosing vmap(axis_name=...), pmap and shard_map axes) with their
  sizes: a trace may read them (lax.axis_size), so they are part of jit's cache key."""
  from ourjax.lax.parallel import _spmd_env
  env = _spmd_env()
  stack = core._state.trace_stack
  if len(stack) == 1 and not env:
    return ()
  from ourjax.interpreters.batching import BatchTrace
  named = tuple((m.payload.name, m.payload.size) for m in stack
                if m.trace_type is BatchTrace and m.payload is not None
                and m.payload.name is not None)
  return named + tuple(sorted(env.items(), key=lambda kv: str(kv[0])))


def _infer_nums_and_names(argnums: tuple, argnames: tuple, pos, kw) -> tuple:
  """``(argnums, argnames)`` each completed from the other through the signature: the names
  of the numbered parameters that can be passed by keyword, and the positions of the named
  ones (``pos``: the positional parameters' names, ``kw``: those that take keywords)."""
  nums = {i % len(pos) if i < 0 else i for i in argnums if -len(pos) <= i < len(pos)}
  argnames += tuple(pos[i] for i in sorted(nums) if pos[i] in kw and pos[i] not in argnames)
  argnums += tuple(pos.index(n) for n in argnames
                   if n in pos and pos.index(n) not in nums and pos.index(n) not in argnums)
  return argnums, argnames


#: flags read while tracing (besides x64, the matmul precision and the dtype promotion), part
#: of jit's cache keys: a function traced under other values is traced again
TRACE_FLAGS = ("jax_numpy_rank_promotion", "jax_random_seed_offset")


def _trace_flags(flags) -> tuple:
  return tuple(getattr(flags, f) for f in TRACE_FLAGS)


class JitWrapped:
  """What ``jit(f)`` returns: a callable with a per-signature cache of traced jaxprs and their
  executables.  The cache key is the argument structure, each argument leaf's shape, dtype and
  weak type, the static arguments (by hash and ==), the backend and the x64 flag."""

  def __init__(self, fun, static_argnums=(), static_argnames=(), donate_argnums=(),
               keep_unused=False, backend=None, inline=False, donate_argnames=(),
               compiler_options=None):
    self.fun = fun
    # (checked when compiling, as JAX's; part of the cache key: they make another executable)
    self.compiler_options = dict(compiler_options or {})
    try:
      opts_key = tuple(sorted((k, type(v).__name__, v) for k, v in
                              self.compiler_options.items()))
      hash(opts_key)
    except TypeError:
      opts_key = ("unhashable", id(self))
    if isinstance(static_argnums, int):
      static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
      static_argnames = (static_argnames,)
    if isinstance(donate_argnums, int):
      donate_argnums = (donate_argnums,)
    if isinstance(donate_argnames, str):
      donate_argnames = (donate_argnames,)
    static_argnums, static_argnames = tuple(static_argnums), tuple(static_argnames)
    donate_argnums, donate_argnames = tuple(donate_argnums), tuple(donate_argnames)
    if set(static_argnames) & set(donate_argnames):
      raise ValueError(f"static_argnames and donate_argnames cannot intersect. Argument names "
                       f"{set(static_argnames) & set(donate_argnames)} appear in both "
                       "static_argnames and donate_argnames")
    sig = _positional_params(fun)
    if sig is None and donate_argnames:
      raise ValueError(f"Getting the signature of function {fun} failed. Pass donate_argnums "
                       "instead of donate_argnames.")
    if sig is not None:
      pos, var, kw, has_var_kw = sig
      for what, nums in (("static_argnums", static_argnums), ("donate_argnums", donate_argnums)):
        if var is None and any(i >= len(pos) or i < -len(pos) for i in nums):
          raise ValueError(f"Jitted function has {what}={nums}, but only accepts {len(pos)} "
                           "positional arguments.")
      for what, names in (("static_argnames", static_argnames),
                          ("donate_argnames", donate_argnames)):
        # positional-only parameters and *args cannot be named, even with **kwargs
        bad = {n for n in names if n not in kw and (not has_var_kw or n in pos or n == var)}
        if bad:
          raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. Function "
                           "does not take these args.")
      # JAX infers each of static_argnums/static_argnames from the other through the signature
      static_argnums, static_argnames = _infer_nums_and_names(static_argnums, static_argnames,
                                                              pos, kw)
      donate_argnums, donate_argnames = _infer_nums_and_names(donate_argnums, donate_argnames,
                                                              pos, kw)
    self.static_argnums, self.static_argnames = static_argnums, static_argnames
    # donated leaves (``_donated``): outputs written into their buffers, the arrays deleted
    # after the call (``_donation``)
    self.donate_argnums, self.donate_argnames = donate_argnums, donate_argnames
    self.keep_unused = keep_unused
    self.backend = backend
    self.inline = inline
    self._cache: dict = _shared_cache(fun, (static_argnums, static_argnames, donate_argnums,
                                            donate_argnames, keep_unused, backend, inline,
                                            opts_key))
    # dispatch fast path: (x64, per-argument (shape, dtype[, weak])) -> call(args) | False
    self._fast: dict = _shared_cache(fun, (static_argnums, static_argnames, donate_argnums,
                                           donate_argnames, keep_unused, backend, inline,
                                           opts_key, "fast"))
    self._no_fast = bool(static_argnums or static_argnames)
    # (in_shardings, out_shardings) when given; the sharded programs per signature and layout
    self._shardings = None
    self._sharded: dict = {}
    self._plans: dict = {}
    try:
      shared = fun in _JIT_CACHES
    except TypeError:
      shared = False
    if not shared:
      _PRIVATE_FAST.add(self)
    # (updated=(): copying fun's __dict__ would overwrite attributes such as self.fun)
    functools.update_wrapper(self, fun, updated=())

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  # -- signatures ----------------------------------------------------------------------------

  def _signature(self, args, kwargs, abstract_ok=False):
    f, dargs, dkwargs, static_key = _split_static(self.fun, args, kwargs, self.static_argnums,
                                                  self.static_argnames, "jit")
    leaves, in_tree = tree_flatten((dargs, dkwargs))
    for i, x in enumerate(leaves):
      if not ((abstract_ok or _staging()) and isinstance(x, ShapeDtypeStruct)):
        try:
          _check_arg(x, f"jit({_fun_name(self.fun)})")
        except TypeError:
          if type(x) is _ref.Ref:
            raise _ref.HasRefs(f"jit({_fun_name(self.fun)}): mutable array references are "
                               "taken by calls, not by lower/trace/eval_shape") from None
          path = self._leaf_names(args, kwargs, len(leaves))[i]
          raise TypeError(
              f"Error interpreting argument to {self.fun} as an abstract array. The "
              f"problematic value is of type {type(x)} and was passed to the function at path "
              f"{path}.\nThis typically means that a jit-wrapped function was called with a "
              "non-array argument, and this argument was not marked as static using the "
              "static_argnums or static_argnames parameters of jax.jit.") from None
    avals = tuple(_abstractify(x) for x in leaves)
    key = (in_tree, avals, static_key, self.backend, config.x64_enabled,
           config.jax_default_matmul_precision,   # (read at trace time, as JAX's key has it)
           _axis_env_key(), config.jax_numpy_dtype_promotion, user_context_key(),
           _trace_flags(config))
    return f, leaves, in_tree, avals, key, (args, kwargs)

  def _leaf_names(self, args, kwargs, n_leaves) -> tuple:
    """A readable name per dynamic argument leaf: ``x``, ``params['w']``, ``args[2]``."""
    sig = _positional_params(self.fun)
    pos, var = (sig[0], sig[1]) if sig else ([], None)
    nargs = len(args)
    static = {i % nargs if i < 0 and nargs else i for i in self.static_argnums}
    dyn_pos = [i for i in range(nargs) if i not in static]
    dargs = tuple(args[i] for i in dyn_pos)
    dkwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
    names = []
    for path, _ in tree_util.tree_flatten_with_path((dargs, dkwargs))[0]:
      head, rest = path[0], path[1:]
      if getattr(head, "idx", 0) == 0 and rest:
        k = dyn_pos[rest[0].idx]
        base = pos[k] if k < len(pos) else (f"{var}[{k - len(pos)}]" if var else f"args[{k}]")
      elif rest:
        base = str(rest[0].key)
      else:
        base = "?"
      names.append(base + tree_util.keystr(tuple(rest[1:])))
    if len(names) != n_leaves:
      names = [f"argument {i}" for i in range(n_leaves)]
    return tuple(names)

  def _donated(self, args, kwargs, names) -> tuple:
    nargs = len(args)
    static = {i % nargs if i < 0 and nargs else i for i in self.static_argnums}
    dyn_pos = [i for i in range(nargs) if i not in static]
    donated_pos = {i % nargs if i < 0 and nargs else i for i in self.donate_argnums}
    dargs = tuple(args[i] for i in dyn_pos)
    dkwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
    out = []
    for path, _ in tree_util.tree_flatten_with_path((dargs, dkwargs))[0]:
      head, rest = path[0], path[1:]
      if getattr(head, "idx", 0) == 0 and rest:
        out.append(dyn_pos[rest[0].idx] in donated_pos)
      else:
        out.append(bool(rest) and str(rest[0].key) in self.donate_argnames)
    return tuple(out) if len(out) == len(names) else (False,) * len(names)

  def _explain_miss(self, key, names) -> str:
    """Why ``key`` missed the cache, against the closest cached signature."""
    fname = _fun_name(self.fun)
    head = f"cache miss for {fname}{_fun_location(self.fun)}"
    if not self._cache:
      return f"{head}: first call (never traced before)"
    in_tree, avals, static_key, backend, x64, prec, axes, promo, user, tflags = key
    best = None
    for old in list(self._cache):     # (a snapshot: other threads may add signatures)
      o_tree, o_avals, o_static, o_backend, o_x64, o_prec, o_axes, o_promo, o_user, o_tflags = old
      diffs = []          # (weight, text): the closest signature has the least total weight
      if user != o_user:
        diffs.append((2, f"the user contexts' values (make_user_context) are now {user} and "
                      f"were {o_user}"))
      if promo != o_promo:
        diffs.append((2, f"jax_numpy_dtype_promotion is now {promo} and was {o_promo}"))
      for flag, now, before in zip(TRACE_FLAGS, tflags, o_tflags):
        if now != before:
          diffs.append((2, f"{flag} is now {now} and was {before}"))
      if axes != o_axes:
        diffs.append((2, f"the named axes in scope are now {axes} and were {o_axes}"))
      if x64 != o_x64:
        diffs.append((2, f"jax_enable_x64 is now {x64} and was {o_x64}"))
      if prec != o_prec:
        diffs.append((2, f"jax_default_matmul_precision is now {prec} and was {o_prec}"))
      if in_tree != o_tree:
        diffs.append((1000, f"the argument structure is now {in_tree} and was {o_tree}"))
      else:
        for n, a, b in zip(names, avals, o_avals):
          if a == b:
            continue
          if a.shape == b.shape and a.dtype == b.dtype:
            diffs.append((1, f"argument {n}: now {a.str_short()}{' (weak type)' * a.weak_type} "
                          f"and before {b.str_short()}{' (weak type)' * b.weak_type}: the weak "
                          "type changed (a Python scalar is weakly typed, an array is not)"))
          else:
            what = "shape" if a.dtype == b.dtype else ("dtype" if a.shape == b.shape else
                                                       "shape and dtype")
            diffs.append((3, f"argument {n}: {what} changed, now {a.str_short()} and before "
                          f"{b.str_short()}"))
      if _differs(static_key, o_static):
        new_s = dict(static_key[0] + static_key[1]) if static_key else {}
        old_s = dict(o_static[0] + o_static[1]) if o_static else {}
        pnames = (_positional_params(self.fun) or ([],))[0]
        for k in sorted(set(new_s) | set(old_s), key=str):
          nm = pnames[k] if isinstance(k, int) and k < len(pnames) else k
          if k not in new_s or k not in old_s:
            nv = _static_str(new_s[k]) if k in new_s else "not passed"
            ov = _static_str(old_s[k]) if k in old_s else "not passed"
            diffs.append((3, f"static argument {nm}: now {nv} and before {ov}"))
          elif (type(new_s[k]) is not type(old_s[k]) or _differs(new_s[k], old_s[k])
                or hash(new_s[k]) != hash(old_s[k])):
            diffs.append((2, f"static argument {nm}: now {_static_str(new_s[k])} and before "
                          f"{_static_str(old_s[k])}"))
      if backend != o_backend:
        diffs.append((2, f"backend is now {backend} and was {o_backend}"))
      score = sum(w for w, _ in diffs)
      if best is None or score < best[0]:
        best = (score, [d for _, d in diffs])
    best = best[1]
    lines = "\n".join(f"  * {d}" for d in best) or "  * (an equal signature was evicted)"
    return f"{head}; differences from the closest cached signature:\n{lines}"

  def _trace(self, f, in_tree, avals, key, args_kwargs):
    """The cache entry of ``key``, traced on a miss: once, when several threads miss at the
    same time (the others wait for it; a failure reaches them all and is not cached)."""
    try:
      entry = self._cache.get(key)
    except Exception as e:    # noqa: BLE001  (a static argument's __eq__ raised)
      raise ValueError(
          "static arguments should be comparable using __eq__. The following error was raised "
          f"when comparing the static arguments of {_fun_name(self.fun)} with those of a cached "
          f"call: {type(e).__name__}: {e}") from e
    if entry is not None:
      return entry

    def trace():
      from ourjax.stages import _Signature
      # as JAX's: the function must support weak references (its caches hold it weakly), so
      # jit(np.sin) raises "cannot create weak reference to 'numpy.ufunc' object" when called
      weakref.ref(self.fun)
      if config.jax_no_tracing:
        raise RuntimeError(f"re-tracing function {_fun_name(self.fun)}"
                           f"{_fun_location(self.fun)} for `jit`, but 'no_tracing' is set")
      args, kwargs = args_kwargs
      names = self._leaf_names(args, kwargs, len(avals))
      if config.jax_explain_cache_misses:
        _cache_miss.explain(self.fun, _fun_name(self.fun), key, self._cache, names,
                            core.user_frame())
      reason = self._explain_miss(key, names)
      _events.fire("trace_to_jaxpr")
      flat, out_tree = flatten_fun(f, in_tree, check_outputs="jit")
      times = _phases.begin(_fun_name(self.fun))
      level = logging.WARNING if config.jax_log_compiles else logging.DEBUG
      t0 = time.perf_counter() if _log.isEnabledFor(level) else None
      with _phases.collecting(times), _phases.phase("trace"):
        closed = pe.trace_to_jaxpr(flat, list(avals), _fun_name(self.fun))
      if t0 is not None:      # (as JAX's: a WARNING with jax_log_compiles, else DEBUG)
        _log.log(level, "Finished tracing %s for jit in %.6f sec", _fun_name(self.fun),
                 time.perf_counter() - t0)
      sig = _Signature(_fun_name(self.fun), in_tree, tuple(avals), names,
                       self._donated(args, kwargs, names), out_tree[0])
      entry = _CacheEntry(closed, out_tree[0], reason, sig, times)
      if any(isinstance(c, core.Tracer) for c in closed.consts):
        # it closes over values of an enclosing transformation of this thread: not reusable
        return _once.Uncached(entry)
      return entry
    return _once.build_once(self._cache, key, trace)

  # -- calling ---------------------------------------------------------------------------------

  def __call__(self, *args, **kwargs):
    # Fast path: positional NumPy/ourjax arrays and NumPy scalars (or pytrees of them: a
    # training step's parameters) of a signature seen before, nothing traced: one dictionary
    # lookup, then the executable's own call (no avals, no general signature).
    fkey = None
    if not kwargs and not self._no_fast and core.nothing_traced():
      flat, tdef = args, None
      sig = _fast_signature(args)
      if sig is None and args:
        flat, tdef = tree_flatten(args)
        sig = _fast_signature(flat)
      if sig is not None:
        if config._local.overrides:     # this thread's context-manager flags
          x64, off = config.x64_enabled, _fast_path_off(config)
          prec = (config.jax_default_matmul_precision, config.jax_numpy_dtype_promotion,
                  _trace_flags(config), config.jax_default_device)
        else:
          flags = config._values
          x64, off = flags["jax_enable_x64"], _fast_path_off(flags)
          prec = (flags["jax_default_matmul_precision"], flags["jax_numpy_dtype_promotion"],
                  (flags["jax_numpy_rank_promotion"], flags["jax_random_seed_offset"]),
                  flags["jax_default_device"])
        fkey = (bool(x64), prec, sig if tdef is None else (tdef, sig), user_context_key())
        hit = self._fast.get(fkey)
        if hit and not off:
          try:
            outs = hit(flat)
          except errors.ResourceExhaustedError:
            outs = None       # (the general path below says which operation, and where)
          if outs is not None:
            return outs
      flat = None   # (keeps no argument alive: a donated one must have no other owner)
    if config.jax_disable_jit:
      return self.fun(*args, **kwargs)
    d = self.__dict__
    if d.get("_ref_inner"):
      return self._call(args, kwargs, fkey)
    # mutable references (ourjax.ref) taken as arguments (a leaf _signature cannot take) or
    # closed over (found while tracing: the trace touched one of an enclosing frame) are
    # threaded through
    if d.get("_closed_refs"):
      return _ref.jit_call(self, args, kwargs)
    depth, added = _ref.enter_handler()
    try:
      return self._call(args, kwargs, fkey)
    except _ref._RefsNeeded as e:
      if e.depth != depth:
        raise
      d.setdefault("_closed_refs", []).append(e.ref)
    except _ref.HasRefs:
      pass
    finally:
      _ref.exit_handler(depth, added)
    return _ref.jit_call(self, args, kwargs)

  def _call(self, args, kwargs, fkey=None):
    _events.fire("jit_cpp_cache_miss")
    f, leaves, in_tree, avals, key, ak = self._signature(args, kwargs)
    top = core.find_top_trace(leaves)
    if any(type(x) is ShapeDtypeStruct for x in leaves):
      # (only while staging, _signature's check) as in JAX: a ShapeDtypeStruct argument is an
      # abstract constant of the enclosing jaxpr, so eval_shape of a function that calls a jitted
      # one on ShapeDtypeStructs gives the output shapes; it has no value to run with
      staging = pe.JaxprTrace(core._state.dynamic_trace)
      leaves = [staging.abstract_const(x) if type(x) is ShapeDtypeStruct else x for x in leaves]
      top = core.find_top_trace(leaves)
    if self.inline and not isinstance(top, core.EvalTrace):
      return self.fun(*args, **kwargs)      # traced into the enclosing jaxpr
    entry = self._trace(f, in_tree, avals, key, ak)
    closed, hoisted = entry.closed, []
    if any(isinstance(c, core.Tracer) for c in closed.consts):
      # The function closes over values of an enclosing transformation (grad of a loss that
      # calls a jitted closure over the parameters): they become explicit operands, so that
      # transformation sees them (JAX's closure conversion).  Such a trace is not reusable.
      closed, hoisted = _hoist_tracer_consts(closed)
    elif isinstance(top, core.EvalTrace):
      dev = None if self._shardings is not None else _committed_placement(leaves, entry.sig)
      if self._shardings is not None or any(type(x) is ShardedArray and
                                            len(x._sharding._device_list) > 1 for x in leaves):
        # laid out over several devices: the partitioned program on the mesh
        from ourjax.interpreters import partition
        outs = partition.call_sharded(self, entry, leaves, ak)
        if outs is not None:
          return tree_unflatten(entry.out_tree, outs)
      # Nothing is being traced: run the cached executable directly (what pjit's impl does),
      # compiled once however many threads call at the same time.  Arguments committed to a
      # device (device_put on it) make the call run there, for that device's backend.
      moved = None
      if dev is not None:
        backend = self._backend_of(dev)
      else:
        # uncommitted arguments: on ``jax_default_device``'s backend, the results put on that
        # device where it is not its platform's first (uncommitted, as JAX's)
        from ourjax import backends
        ddev = backends.configured_default_device()
        backend = None if ddev is None else self._backend_of(ddev)
        if ddev is not None and backends.devices(ddev.platform)[0] is not ddev:
          moved = ddev
      exe = entry.executable if backend is None else None
      if exe is None:
        exe = _once.build_once(entry.compiled, backend,
                               lambda: self._compile(entry, backend))
        if backend is None:
          entry.executable = exe
      if dev is not None:
        # (a block on one CPU device other than the first: its host data)
        leaves = [x._shards[0] if type(x) is ShardedArray else x for x in leaves]
      if config.jax_no_execution:
        raise RuntimeError(f"executing jit-compiled function {_fun_name(self.fun)}, but "
                           "'no_execution' is set")
      nan_check = _nan_check.enabled()
      if fkey is not None and fkey not in self._fast and not nan_check and moved is None:
        fast = _fast_entry(exe, entry.out_tree, leaves, dev)
        self._fast[fkey] = (fast and dev is not None and _committing(fast, dev)) or fast or False
      try:
        outs = exe(*leaves)
      except errors.ResourceExhaustedError as e:
        raise _exhausted_in(e, entry.closed, self.fun) from None
      if nan_check:
        _nan_check.check_jit(outs, entry.closed, leaves, _fun_name(self.fun))
      if dev is not None:
        outs = _commit_all(outs, dev)
      elif moved is not None:
        from ourjax import backends
        outs = [backends.put_on(o, moved) if type(o) is Array else o for o in outs]
      return tree_unflatten(entry.out_tree, outs)
    donated = entry.sig.donated if entry.sig is not None else ()
    extra = ({"donated_invars": (False,) * len(hoisted) + tuple(donated)}
             if any(donated) else {})
    outs = pjit_p.bind(*hoisted, *leaves, jaxpr=closed, name=_fun_name(self.fun),
                       backend=self.backend, **extra)
    return tree_unflatten(entry.out_tree, outs)

  def _backend_of(self, dev):
    """The backend a call whose arguments are committed to ``dev`` compiles for: the one
    named to ``jit``, else ``dev``'s platform's; None where that is the default backend (the
    executable of uncommitted calls serves)."""
    if self.backend is not None:
      return None
    from ourjax import backends
    if dev.platform == backends.default_backend():
      return None
    return "cuda" if dev.platform == "gpu" else "cpu"

  def _compile(self, entry, backend=None):
    from ourjax import backends
    _compiler_options.check(self.compiler_options)
    return backends.compile_jaxpr(entry.closed, backend or self.backend, _fun_name(self.fun),
                                  keep_unused=self.keep_unused, log_reason=entry.reason,
                                  cache=False,     # (the cache entry keeps it)
                                  times=entry.times, donated=entry.sig.donated)

  # -- stages ----------------------------------------------------------------------------------

  def trace(self, *args, **kwargs):
    """The ``Traced`` stage: ``.jaxpr``, ``.out_info``, ``.lower()``."""
    from ourjax.stages import Traced
    f, leaves, in_tree, avals, key, ak = self._signature(args, kwargs, abstract_ok=True)
    entry = self._trace(f, in_tree, avals, key, ak)
    return Traced(self, entry, entry.sig)

  def lower(self, *args, **kwargs):
    """The ``Lowered`` stage: the HLO module (``.as_text()``), ``.compile()``.  Arguments may
    be arrays or ``ShapeDtypeStruct``s."""
    return self.trace(*args, **kwargs).lower()

  def _lower_entry(self, entry, sig):
    from ourjax.lowering import from_jaxpr
    from ourjax.stages import Lowered
    name = _fun_name(self.fun)
    from ourjax.backends import donation_of
    lowering = from_jaxpr.lower(entry.closed, name, keep_unused=self.keep_unused)
    low = Lowered(lowering, entry.closed, sig, self.backend, self.donate_argnums, name,
                  entry.reason, donation_of(lowering, entry.closed, sig.donated))
    low._compiler_options = self.compiler_options
    return low

  def eval_shape(self, *args, **kwargs):
    """The outputs' ``ShapeDtypeStruct``s; with ``out_shardings`` given, each carries its
    sharding (the prefix tree broadcast over the outputs), as JAX's."""
    entry = self.trace(*args, **kwargs)._entry
    avals = entry.closed.out_avals
    shardings = [None] * len(avals)
    out_s = self._shardings[1] if self._shardings is not None else None
    if out_s is not None:
      out_struct = tree_unflatten(entry.out_tree, list(range(len(avals))))
      shardings = tree_util.broadcast_prefix(out_s, out_struct)
    return tree_unflatten(entry.out_tree, [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type, s)
                                           for a, s in zip(avals, shardings)])

  def clear_cache(self):
    self._cache.clear()
    self._fast.clear()

  def _cache_size(self) -> int:
    return len(self._cache)

  def __getstate__(self):
    # (JAX's PjitFunction state names the function: ``function_name``)
    state = dict(self.__dict__)
    state["function_name"] = _state_fun_name(self.__dict__.get("fun"))
    return state

  def __setstate__(self, state):
    state = dict(state)
    state.pop("function_name", None)
    self.__dict__.update(state)

  def __repr__(self):
    try:
      return f"<PjitFunction of {self.__wrapped__!r}>"    # JAX's form
    except Exception:    # noqa: BLE001  (a failing or missing repr of the function)
      return "<PjitFunction>"

  def __getattr__(self, name):
    # attributes set on the function (f.some_value = ...) read through the jitted function,
    # as JAX's (which copies the function's __dict__)
    fun = self.__dict__.get("fun")
    d = getattr(fun, "__dict__", None)
    if name.startswith("__") or not isinstance(d, dict) or name not in d:
      raise AttributeError(f"'JitWrapped' object has no attribute {name!r}")
    return d[name]


def _differs(a, b) -> bool:
  """``a != b`` for the miss explanation; a comparison that raises counts as a difference
  (a static argument whose __eq__ raises is JAX's ValueError only on a possible cache hit)."""
  try:
    return bool(a != b)
  except Exception:    # noqa: BLE001
    return True


def _exhausted_in(e, closed: core.ClosedJaxpr, fun):
  """``e`` (an allocation that failed in a jitted call) naming the function and, for a result,
  the operation that computes it and its line."""
  msg = f"{e}, in jit({_fun_name(fun)}){_fun_location(fun)}"
  outvars = closed.jaxpr.outvars
  if e.output is not None and e.output < len(outvars):
    v = outvars[e.output]
    eqn = next((q for q in closed.jaxpr.eqns if any(b is v for b in q.out_binders)), None)
    if eqn is not None:
      msg += (f"; that result, {v.aval.str_short()}, is computed by {eqn.primitive.name} at "
              f"{eqn.source_info or 'an unknown line'}")
  return type(e)(msg, e.nbytes, e.output)


def _fast_signature(xs):
  """The fast path's key of arguments ``xs``: (shape, dtype[, weak type]) of each, or None
  when one is not an Array, NumPy array or NumPy scalar (or is an Array without a value or
  type yet).
  (It keeps no argument's value alive: a donated one has no other owner.)"""
  sig = []
  for a in xs:
    t = type(a)
    if t is Array:
      v = a._npy
      if v is None:
        v = a._aval               # an array that lives on a device: its type
        if v is None:
          return None
      if a._committed is None:
        sig.append((v.shape, v.dtype, a.weak_type))
      else:                       # (committed: where the call runs)
        sig.append((v.shape, v.dtype, a.weak_type, a._committed))
    elif t is np.ndarray:
      sig.append((a.shape, a.dtype))
    elif isinstance(a, np.generic) and a.dtype.kind in "biufc":
      sig.append(((), a.dtype))     # (a NumPy scalar: typed as its 0-d array)
    else:
      return None
  return tuple(sig)


def _committed_placement(leaves, sig):
  """The device that the arguments committed to one (``device_put`` on it) are on, or None
  when none is; arguments committed to different devices raise JAX's ValueError naming
  them.  (Uncommitted arguments go wherever the call runs.)"""
  from ourjax.backends import committed_device
  dev = first = None
  for i, x in enumerate(leaves):
    if type(x) is Array:
      if x._committed is None:
        continue
    elif type(x) is not ShardedArray:
      continue
    d = committed_device(x)
    if d is None:
      continue
    if dev is None:
      dev, first = d, i
    elif d != dev:
      names = sig.arg_names if sig is not None else ()

      def arg(k, d):
        nm = names[k] if k < len(names) else f"args[{k}]"
        a = leaves[k].aval
        shape = ",".join(map(str, a.shape))
        return (f"argument {nm} of {sig.fun_name if sig is not None else 'jit'} with shape "
                f"{a.dtype.name}[{shape}] and with device ids [{d.id}] on platform "
                f"{d.platform.upper()}")
      raise ValueError("Received incompatible devices for jitted computation. Got "
                       f"{arg(first, dev)} and {arg(i, d)}")
  return dev


def _commit_all(outs, dev):
  """Results of a call whose arguments were committed to ``dev``: committed to it (on a CPU
  device other than the first: its single-device arrays)."""
  from ourjax import backends
  if dev.platform == "cpu" and dev != backends._CPU:
    return [backends.put_on(o, dev) if type(o) is Array else o for o in outs]
  return [backends.commit(o, dev) if type(o) is Array else o for o in outs]


def _committing(fast, dev):
  """A fast path's call whose results are committed to ``dev``: ``fast`` itself where its
  results are marked so as they are made (``_fast_entry``)."""
  from ourjax import backends
  if not (dev.platform == "cpu" and dev != backends._CPU):
    return fast

  def call(args):
    out = fast(args)
    if out is None:
      return None
    return tree_util.tree_map(lambda o: _commit_all([o], dev)[0], out)
  return call


def _fast_path_off(flags) -> bool:
  """Whether a flag of ``flags`` (the config, or its dict of global values) sends every call
  down the general path."""
  if isinstance(flags, dict):
    return bool(flags["jax_disable_jit"] or flags["jax_debug_nans"] or flags["jax_debug_infs"]
                or flags["jax_no_execution"])
  return bool(flags.jax_disable_jit or flags.jax_debug_nans or flags.jax_debug_infs
              or flags.jax_no_execution)


def _fast_entry(exe, out_tree, leaves, committed=None):
  """``call(args) -> result | None`` running ``exe`` on arguments of ``leaves``' signature
  (None from ``call`` sends that call down the general path), or None when ``exe`` has no fast
  path or the arguments need converting (e.g. float64 NumPy arrays without x64).
  ``committed``: the device the arguments are committed to, whose results are marked
  committed to it as they come out (new arrays; one that is an argument itself is made anew,
  ``backends.commit``), except on a CPU device other than the first (``_committing``)."""
  make = getattr(exe, "fast_path", None)
  if make is None:
    return None
  from ourjax import backends
  if backends._profile_hook is not None:
    return None       # the profiler records every call (it clears these when it stops)
  for a in leaves:
    dt = a.dtype                # (an Array's dtype also when it lives on a device)
    if dt != dtypes.canonicalize_dtype(dt):
      return None
  call = make()
  if call is None:
    return None
  if committed is not None and not (committed.platform == "cpu" and committed != backends._CPU):
    plain = call

    def call(args):
      outs = plain(args)
      if outs is None:
        return None
      marked = []
      for o in outs:
        if type(o) is Array and o._committed is None:
          if any(o is a for a in args):
            o = backends.commit(o, committed)
          else:
            o._committed = committed
        marked.append(o)
      return marked
  if out_tree.num_leaves == 1 and out_tree == tree_structure(0):
    def single(args):
      outs = call(args)
      return None if outs is None else outs[0]
    return single

  def tree(args):
    outs = call(args)
    return None if outs is None else tree_unflatten(out_tree, outs)
  return tree


def _clear_fast_paths() -> None:
  """Forget every jitted function's dispatch fast paths (the profiler calls this when it
  starts and stops recording: a fast path does not look for the profiler)."""
  for per_fun in list(_JIT_CACHES.values()):
    for options, cache in list(per_fun.items()):
      if options and options[-1] == "fast":
        cache.clear()
  for j in list(_PRIVATE_FAST):
    j._fast.clear()


def _hoist_tracer_consts(closed: core.ClosedJaxpr):
  """Turn the constants of ``closed`` that are tracers into leading inputs; returns the new
  closed jaxpr and those constants."""
  jaxpr = closed.jaxpr
  is_tr = [isinstance(c, core.Tracer) for c in closed.consts]
  keep_v = [v for v, t in zip(jaxpr.constvars, is_tr) if not t]
  keep_c = [c for c, t in zip(closed.consts, is_tr) if not t]
  hoist_v = [v for v, t in zip(jaxpr.constvars, is_tr) if t]
  hoist_c = [c for c, t in zip(closed.consts, is_tr) if t]
  new = core.Jaxpr(keep_v, hoist_v + list(jaxpr.invars), jaxpr.eqns, jaxpr.outvars,
                   jaxpr.debug_name)
  return core.ClosedJaxpr(new, keep_c), hoist_c


def jit(fun: Callable | None = None, *, static_argnums=(), static_argnames=(),
        donate_argnums=(), donate_argnames=(), keep_unused: bool = False, device=None,
        backend: str | None = None, inline: bool = False, abstracted_axes=None,
        in_shardings=None, out_shardings=None, compiler_options: dict | None = None):
  """Compile ``fun``: trace it once per argument signature and run it as one executable.
  Usable as ``@jit`` or ``@jit(static_argnames=...)``.

  ``static_argnums``/``static_argnames`` name arguments passed to ``fun`` as Python values
  (hashable; part of the cache key), each inferred from the other through the signature.
  ``donate_argnums``/``donate_argnames`` give the arguments' buffers to the call: an output
  of the same shape and dtype is written into them, and the donated arrays are deleted (see
  ``ourjax/_donation.py``).  With ``keep_unused=False`` arguments the
  outputs do not depend on are left out of the compiled module (still accepted).  ``backend``
  picks where it compiles.  ``inline=True`` traces ``fun`` into an enclosing jaxpr instead of
  a nested call.  ``compiler_options`` (XLA's options: ``{"xla_...": value}``) are checked when
  the function compiles, as XLA checks them (``ourjax/_compiler_options.py``: an unknown name
  raises ``JaxRuntimeError``); ourjax's compiler has no such options, so they change nothing
  else."""
  if compiler_options is not None and not (
      isinstance(compiler_options, dict) and all(isinstance(k, str) for k in compiler_options)):
    raise TypeError(f"jit: compiler_options must be a dict with str keys, got "
                    f"{compiler_options!r}")

  def wrap(f):
    if isinstance(f, staticmethod):
      raise TypeError(f"staticmethod arguments are not supported, got {f}; apply jit to the "
                      "function before staticmethod (@staticmethod above @jit)")
    if inspect.isgeneratorfunction(f):
      raise TypeError(f"Expected a function, got a generator function: {f}")
    if not callable(f):
      raise TypeError(f"Expected a callable value, got {f!r}")
    w = JitWrapped(f, static_argnums, static_argnames, donate_argnums, keep_unused, backend,
                   inline, donate_argnames, compiler_options)
    if in_shardings is not None or out_shardings is not None:
      w._shardings = (in_shardings, out_shardings)
      w._no_fast = True
    return w
  return wrap if fun is None else wrap(fun)


def _state_fun_name(fun) -> str:
  """The function's name as JAX's jit records it: a partial without a name of its own is named
  by the function it wraps; a callable without ``__name__`` is '<unnamed function>'."""
  while isinstance(fun, functools.partial) and not hasattr(fun, "__name__"):
    fun = fun.func
  return getattr(fun, "__name__", "<unnamed function>")
