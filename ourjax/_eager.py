"""Eager evaluation of a primitive on concrete operands (``Primitive.impl``'s default).

``Primitive.bind`` comes here directly when no operand is a tracer and the calling thread has
no dynamic trace (``core.Primitive.bind``'s fast path).  Evaluation is abstract evaluation (the
result's dtype and weak type, and the errors a bad call raises), then the primitive's NumPy
implementation on the operands' host values, wrapped as Arrays of the abstract dtype.

Abstract evaluation is cached per (primitive, x64 flag, operand avals, params): an eager program
repeats the same few op signatures, and the rules (dtype checks, promotion, shape arithmetic)
cost more than a small NumPy op.  Rules raise errors before anything is cached, so a bad call
raises every time.  Params that cannot be hashed (NumPy arrays) skip the cache.

Large operands: a compiled kernel or NumPy
-------------------------------------------
For some primitives a compiled kernel of the CPU backend (``jit`` of the single primitive,
compiled once per signature: vectorized, and split across the backend's threads) beats the
NumPy implementation by a wide margin: ``select_n`` (NumPy's ``where`` branches on every element
of an unpredictable mask), ``erf``/``lgamma``/``integer_pow`` (NumPy evaluates them in many
passes or elementwise Python-level loops), reductions over all axes; for others it wins only
with several threads (the transcendental functions, where NumPy's own SIMD loops are fast).
``KERNEL_COST`` holds, per primitive, the kernel's time on one thread relative to NumPy's (measured
on two 2-core machines, 1024x1024 float32; the lower ratio of the two).  For each signature
(primitive, operand types and layouts, params) with at least ``_MIN_KERNEL_ELEMENTS`` elements the
NumPy time is measured, and the kernel is predicted to take ``dispatch + numpy_time * cost /
threads``.  When it is predicted to be faster than NumPy (on one thread or split, whichever was
faster) and the signature is called again (``_MIN_CALLS``), the kernel is compiled on a worker
thread (``ourjax-eager``: LLVM runs there without the GIL) while the calls go on in NumPy, so no
call waits for a compile (a 1024x1024 sum's kernel takes ~0.1 s to compile, a matrix product's ~1
s); once it is built, the next calls run the kernel and NumPy in turn (``_TRIALS`` timed calls of
each after one of the kernel: NumPy's calls made during the compile shared the cores with the
compiler and do not count), and the signature keeps whichever was faster, until a new trial
some calls later (``_FIRST_RECHECK`` after the first trial, then ``_RECHECK`` times the slower one's
time over the faster one's: the load of the cores changes which one is faster).  At most ``_MAX_PENDING``
compiles wait at a time (a program of ever new shapes does not queue a compile per shape);
``wait_for_kernels`` waits for those under way.  The kernel is not used under ``disable_jit`` or
while NaNs are being checked (whose re-runs are eager).

NumPy on several threads: NumPy runs a ufunc on one thread, JAX's executables split a large
elementwise op across their pool.  A large signature whose implementation is a plain ufunc
(``exp``, ``tanh``, ``log``, ``sin``, ``add``... on operands of the result's shape and dtype:
``_split_plan``) and whose one-thread call takes ``_SPLIT_MIN_SECONDS`` or more (30 us on the
native pool) is also timed split: for float and complex dtypes, NumPy's own loop for the dtype run in pieces on the CPU
backend's native thread pool (``_eager_loops``: a hand-off of a few microseconds); otherwise
(or where no such loop is found) the flattened operands and result cut into one contiguous
part per thread, each part run by the same ufunc on a Python thread of ``_SplitPool`` (the
ufunc's loop releases the GIL; a hand-off of tens of microseconds).  Either way the values are
NumPy's bit for bit.  The split is kept where it was faster, until it is timed against one
thread again (as the kernel's trial is: ``_FIRST_RECHECK``, then ``_RECHECK`` times the slower
one's time over the faster one's calls later: a choice made while other processes had the cores
does not stay for good), and its time is
NumPy's time in the kernel's prediction and trials (the prediction scales the one-thread time
by ``KERNEL_COST``).  On two cores this halves the transcendental functions, whose NumPy loops
beat the kernel's more accurate polynomials per element (``exp`` at 1024x1024 float32: ~470
us on one thread).
"""
from __future__ import annotations

import functools
import os
import threading
import time


import numpy as np

from ourjax import _eager_device, _eager_loops, _nan_check, core
from ourjax.array import Array, to_numpy
from ourjax.backends import reference_ops as rops
from ourjax.sharding import ShardedArray
from ourjax.config import config
from ourjax.core import impl_rules

_avals_cache: dict = {}
_CACHE_MAX = 8192      # entries; cleared when full (a few distinct signatures per program)


def clear_cache() -> None:
  _avals_cache.clear()
  _choices.clear()
  _eager_device.clear_cache()


def abstract_eval(prim, avals: tuple, params: dict):
  """``prim.abstract_eval(*avals, **params)``, cached (a tuple for multiple results)."""
  return _signature(prim, avals, params)[0]


def _signature(prim, avals: tuple, params: dict):
  """(abstract result, whether the operands are large enough for a kernel), cached."""
  try:
    # a param's type is part of the key: 1, 1.0 and True are equal as dict keys
    key = (prim, config.x64_enabled, avals,
           tuple([(k, v, type(v)) for k, v in params.items()]) if params else ())
    entry = _avals_cache.get(key)
  except TypeError:      # an unhashable param
    return _evaluate(prim, avals, params), False
  if entry is None:
    out = _evaluate(prim, avals, params)
    large = (not prim.multiple_results and
             max([a.size for a in avals] + [out.size]) >= _MIN_KERNEL_ELEMENTS and
             (prim.name in KERNEL_COST or _split_plan(prim, avals, out, params) is not None))
    entry = (out, large)
    if len(_avals_cache) >= _CACHE_MAX:
      _avals_cache.clear()
    _avals_cache[key] = entry
  return entry


def _evaluate(prim, avals, params):
  out = prim.abstract_eval(*avals, **params)
  return tuple(out) if prim.multiple_results else out


def _unalias(r, raw):
  """``r``, copied if it shares memory with one of the caller's writable NumPy arrays ``raw``
  (a rule may return its input or a view of it): an Array never aliases the caller's buffer,
  and wrapping ``r`` must not make the caller's array read-only."""
  if type(r) is np.ndarray and r.flags.writeable:
    for v in raw:
      if type(v) is np.ndarray and v.flags.writeable and np.may_share_memory(r, v):
        return r.copy()
  return r


def _run_numpy(prim, args, params, out, rule=None):
  if rule is None:
    rule = impl_rules.get(prim)
    if rule is None:
      raise NotImplementedError(f"no implementation rule for primitive '{prim.name}'")
  vals = [a._value if type(a) is Array else to_numpy(a) for a in args]
  outs = rule(*vals, **params)
  if prim.multiple_results:
    return [Array._from_result(_unalias(o, vals) if type(o) is not Array else o._value, a)
            for o, a in zip(outs, out)]
  if type(outs) is Array:      # a rule written with ourjax operations (a wrapper of p.impl)
    outs = outs._value
  return Array._from_result(_unalias(outs, vals), out)


def apply_rule(prim, rule, args, params):
  """``apply`` with the implementation ``rule`` instead of the registered one."""
  avals = tuple([core.get_aval(a) for a in args])
  out, _ = _signature(prim, avals, params)
  return _run_numpy(prim, args, params, out, rule)


_config_local, _config_values = config._local, config._values


def apply(prim, args, params):
  # avals and NumPy values: one or two host Arrays (most operations) without list comprehensions
  # (an Array with a device buffer is not a host operand: ``_eager_device`` runs it there)
  vals = None
  n = len(args)
  if n == 2:
    a, b = args
    if type(a) is Array and type(b) is Array:
      va, vb, na, nb = a._aval, b._aval, a._npy, b._npy
      if (va is not None and vb is not None and na is not None and nb is not None and
          a._device_buf is None and b._device_buf is None and a._committed is None and
          b._committed is None):
        avals, vals = (va, vb), (na, nb)
  elif n == 1:
    a = args[0]
    if type(a) is Array:
      va, na = a._aval, a._npy
      if va is not None and na is not None and a._device_buf is None and a._committed is None:
        avals, vals = (va,), (na,)
  elif n == 3:      # (select_n, clamp)
    a, b, c = args
    if type(a) is Array and type(b) is Array and type(c) is Array:
      va, vb, vc, na, nb, nc = a._aval, b._aval, c._aval, a._npy, b._npy, c._npy
      if (va is not None and vb is not None and vc is not None and na is not None and
          nb is not None and nc is not None and a._device_buf is None and
          b._device_buf is None and c._device_buf is None and a._committed is None and
          b._committed is None and c._committed is None):
        avals, vals = (va, vb, vc), (na, nb, nc)
  if vals is None:
    for a in args:
      if (type(a) is Array and a._committed is not None) or type(a) is ShardedArray:
        cdev = _committed_of(prim, args)
        if cdev is not None:
          return _on_committed(prim, args, params, cdev)
        break
    avals = tuple([(a._aval if a._aval is not None else a.aval) if type(a) is Array else
                   core.get_aval(a) for a in args])
  ov = _config_local.overrides      # (``config.x64_enabled``, inline)
  x64 = bool(ov["jax_enable_x64"] if ov and "jax_enable_x64" in ov else
             _config_values["jax_enable_x64"])
  if vals is None:      # (an operand on a GPU: the operation runs there)
    dev = _eager_device.gpu_of(args, prim)
    if dev is not None:
      return _eager_device.apply(prim, args, params, avals, x64, dev)
  try:      # (``_signature``, inline: this is every eager operation's path)
    entry = _avals_cache.get((prim, x64, avals,
                              tuple([(k, v, type(v)) for k, v in params.items()])
                              if params else ()))
  except TypeError:
    entry = None
  if entry is None:
    entry = _signature(prim, avals, params)
  out, large = entry
  if large:
    return _apply_large(prim, args, params, avals, out)
  rule = impl_rules.get(prim)
  if rule is None or prim.multiple_results:
    return _run_numpy(prim, args, params, out)
  if vals is None:     # (some argument is not an Array: it may be the caller's NumPy array)
    vals = [a._npy if type(a) is Array and a._npy is not None else to_numpy(a) for a in args]
    r = rule(*vals, **params)
    return Array._from_result(_unalias(r, vals) if type(r) is not Array else r._value, out)
  r = rule(*vals, **params)
  return Array._from_result(r if type(r) is not Array else r._value, out)


def _committed_of(prim, args):
  """The device that the operands committed to one are on (None: none is), as for a jitted
  call: operands committed to different devices raise JAX's ValueError."""
  from ourjax._jit import _committed_placement
  from ourjax.stages import _Signature
  leaves = [a for a in args if isinstance(a, Array)]
  names = ("x", "y") if len(args) <= 2 else tuple(f"args[{i}]" for i in range(len(args)))
  names = tuple(nm for nm, a in zip(names, args) if isinstance(a, Array))
  return _committed_placement(leaves, _Signature(prim.name, None, (), names, (), None))


def _on_committed(prim, args, params, dev):
  """``prim`` on operands of which some are committed to ``dev``: computed where ``dev`` is
  (uncommitted operands follow them there), its results committed to ``dev``."""
  from ourjax import backends
  from ourjax._jit import _commit_all

  def uncommitted(a):
    if type(a) is ShardedArray:
      a = a._shards[0]
    if type(a) is not Array:
      return a
    on_gpu = a._device_buf is not None and getattr(a._device_buf, "platform", None) == "gpu"
    if dev.platform == "cpu" or not on_gpu:
      out = Array._from_result(a._value, a.aval)
      return out if dev.platform == "cpu" else backends.put_on(out, dev)
    out = Array._from_device(a._device_buf, a.aval)
    out._npy = a._npy
    return out
  outs = apply(prim, [uncommitted(a) for a in args], params)
  if prim.multiple_results:
    return _commit_all(list(outs), dev)
  return _commit_all([outs], dev)[0]


# ------------------------------------------------------------------------------------------------
# Large operands: a compiled kernel or NumPy (see the module docstring)

#: kernel time on one thread / NumPy time on one thread, per primitive, 1024x1024 float32
#: (ourjax's CPU backend against NumPy 2.4's SIMD loops), the lower of two machines'
#: measurements: a 2-core AVX-512 Xeon and a 2-core AVX-512 AMD EPYC, where NumPy's loops and the
#: kernels' code stand differently (``sqrt``: 0.96 on the Xeon, 0.53 on the EPYC; ``exp``: 1.3
#: and 0.91).  The lower one, so that a kernel that may win on this machine is built and timed:
#: the trial, not this table, decides.  Primitives not listed always run in NumPy: views and
#: copies (reshape, slice, concatenate...), gathers and scatters, and whatever has no kernel of
#: its own.
KERNEL_COST = {
    # a transposed copy: NumPy walks the input a cache line (and a page) an element, the kernel
    # in tiles (1024x1024 float32 on one AMD EPYC core: 0.9 against 3.6 ms)
    "transpose": 0.3,
    # NumPy's where branches per element; the kernel is a vector select
    "select_n": 0.15,
    # the backend's packed GEMM against NumPy's BLAS (1024^3 float32: 35 against 66 ms, on
    # two threads each)
    "dot_general": 1.05,
    # NumPy: several passes or scalar loops (reference_ops); the kernel: one vectorized pass
    "erf": 0.02, "erfc": 0.02, "erf_inv": 0.005, "lgamma": 0.07, "digamma": 0.07,
    "integer_pow": 0.02, "logistic": 0.7, "rsqrt": 0.6,
    # reductions: NumPy's pairwise sum on one thread; the kernel splits rows across threads
    "reduce_sum": 0.8, "reduce_max": 1.05, "reduce_min": 1.05, "reduce_prod": 0.8,
    # memory-bound one-pass ops: about equal on one thread (NumPy ahead on the EPYC), the
    # kernel may win with threads
    "add": 0.7, "sub": 0.7, "mul": 0.7, "div": 0.93, "max": 1.29, "min": 1.1, "neg": 1.18,
    "abs": 1.24, "sqrt": 0.53, "lt": 1.1, "le": 1.1, "gt": 1.1, "ge": 1.1, "eq": 1.1,
    "ne": 1.1, "convert_element_type": 1.6,
    # NumPy's SIMD transcendental loops are mostly faster per element than the kernel's
    # polynomials
    "exp": 0.91, "exp2": 1.3, "log": 1.37, "log1p": 1.7, "expm1": 1.54, "tanh": 2.04,
    "sin": 2.77, "cos": 2.96, "tan": 4.3, "atan2": 1.9, "pow": 3.5, "cbrt": 2.45,
}
_MIN_KERNEL_ELEMENTS = 1 << 14   # below this, a kernel's dispatch costs about what NumPy does
_DISPATCH_SECONDS = 2e-5         # a compiled call's fixed cost
_MIN_CALLS = 2                   # NumPy calls of a signature before its kernel is compiled
_MAX_PENDING = 4                 # compiles queued or under way at most
_TRIALS = 3                      # timed kernel calls before the choice is made (the best counts)
#: calls after a trial's choice before the next trial, times the loser's time over the winner's
#: (the 3 calls of the loser in a trial cost under 1.5% of the calls in between; 200: a choice
#: made while other processes had the cores is revisited within a few hundred calls)
_RECHECK = 200
#: ... after a signature's first choice: its first calls often run beside compiles (its own
#: kernel's, the fused program's of a replayed function) that hold a core
_FIRST_RECHECK = 40
#: compile on the worker thread (False: in the call that decides to, as tests do)
_BACKGROUND = True


class _Choice:
  """What one large signature runs: ``'numpy'`` while undecided or when NumPy was faster,
  ``'compiling'`` while its kernel is built (NumPy runs meanwhile), ``'trial'`` while the kernel
  and NumPy are timed in turn, ``'kernel'`` once the kernel was faster.  ``settled``: the kernel
  is not considered again (NumPy was faster, or it could not be built).  ``np_best``: NumPy's
  best time (from the trial's start, its calls of the trial only: the calls made while the
  kernel compiled shared the cores with the compiler).  NumPy's own choice (see ``_split_plan``):
  ``plan`` splits the call across threads, ``split`` is None while undecided (the one-thread
  calls are timed first, then ``_TRIALS`` split ones), then whether NumPy runs split;
  ``np_single``: NumPy's best time on one thread (what the kernel's prediction scales)."""
  __slots__ = ("state", "np_best", "np_calls", "fn", "k_best", "k_calls", "np_trials",
               "settled", "since", "recheck", "plan", "split", "sp_best", "sp_calls",
               "np_single", "single_calls", "sp_since", "sp_recheck", "deferred", "sp_rounds",
               "k_rounds")

  def __init__(self, plan=None):
    self.state, self.np_best, self.np_calls = "numpy", float("inf"), 0
    self.fn, self.k_best, self.k_calls, self.np_trials = None, float("inf"), 0, 0
    self.settled, self.since, self.recheck = False, 0, _RECHECK
    self.plan, self.split = plan, (None if plan is not None else False)
    self.sp_best, self.sp_calls, self.np_single = float("inf"), 0, float("inf")
    self.single_calls, self.sp_since, self.sp_recheck, self.deferred = 0, 0, _RECHECK, 0
    self.sp_rounds = self.k_rounds = 0      # (choices made so far: split, kernel)


_choices: dict = {}


def _bind_one(prim, params, *args):
  return prim.bind(*args, **params)


def _kernel_threads() -> int:
  from ourjax.backends.cpu import backend as cpu_backend
  return cpu_backend.num_threads()


def _apply_large(prim, args, params, avals, out):
  try:
    # (the operands' layouts too: a broadcast or strided view is copied for a kernel, and cut
    # by rows for a split, so it is timed apart from contiguous operands of the same avals)
    key = (prim, config.x64_enabled, avals, tuple([(k, v, type(v)) for k, v in params.items()]),
           tuple([type(a) is Array and a._npy is not None and a._npy.flags.c_contiguous
                  for a in args]))
    choice = _choices.get(key)
  except TypeError:          # an unhashable param
    return _run_numpy(prim, args, params, out)
  if choice is None:
    if len(_choices) >= _CACHE_MAX:
      _choices.clear()
    choice = _choices[key] = _Choice(_split_plan(prim, avals, out, params))
  fn = choice.fn       # (read once: another thread may settle the choice meanwhile)
  state = choice.state
  if fn is not None and state != "numpy" and _kernel_allowed(args):
    if state == "trial" and choice.np_trials < choice.k_calls:
      return _numpy_trial(prim, args, params, out, choice)     # (NumPy's turn)
    t0 = time.perf_counter()
    r = fn(*args)
    if state == "trial":
      r.block_until_ready()
      if not _time_kernel(choice, time.perf_counter() - t0, r, out):
        return _run_np(prim, args, params, out, choice)
    else:
      choice.since += 1
      if choice.since >= choice.recheck:
        _retrial(choice)
    return r
  split = choice.split
  if split is None:                 # (NumPy on one thread or split: still being timed)
    return _split_trial(prim, args, params, out, choice)
  t0 = time.perf_counter()
  r = _run_np(prim, args, params, out, choice)
  dt = time.perf_counter() - t0
  choice.np_calls += 1
  if dt < choice.np_best:
    choice.np_best = dt
  if choice.plan is not None:       # (NumPy on one thread or split: timed again after a while)
    choice.sp_since += 1
    if choice.sp_since >= choice.sp_recheck:
      _split_retrial(choice)
  if choice.settled:
    if fn is not None and choice.state == "numpy":     # (NumPy won the kernel's trial)
      choice.since += 1
      if choice.since >= choice.recheck and _kernel_allowed(args):
        _retrial(choice)
  elif (choice.state == "numpy" and choice.fn is None and prim.name in KERNEL_COST and
        _kernel_allowed(args)):
    _consider_kernel(prim, params, args, choice)
  return r


def _run_np(prim, args, params, out, choice):
  """NumPy's implementation as ``choice`` runs it: split across threads or on this one."""
  if choice.split:
    r = _run_split(choice.plan, args, out)
    if r is not None:
      return r
  return _run_numpy(prim, args, params, out)


def _split_trial(prim, args, params, out, choice):
  """NumPy's calls while its one-thread and split calls are timed: ``_MIN_CALLS`` on one thread
  (a signature faster than ``_split_min_seconds`` stays there), then ``_TRIALS`` split; the
  faster stays (its best time is NumPy's time for the kernel's decision).  While a kernel is
  being compiled on the worker thread, the calls run on one thread untimed (the compiler has a
  core: a split timed then would lose for good, or until its recheck), ``_MAX_DEFERRED`` calls
  at most."""
  if _pending and choice.deferred < _MAX_DEFERRED:
    choice.deferred += 1
    choice.np_calls += 1
    return _run_numpy(prim, args, params, out)
  single = choice.single_calls < _MIN_CALLS
  t0 = time.perf_counter()
  r = None if single else _run_split(choice.plan, args, out)
  if r is None:
    r = _run_numpy(prim, args, params, out)      # (or the threads were busy)
    dt = time.perf_counter() - t0
    choice.np_calls += 1
    choice.single_calls += 1
    if dt < choice.np_single:
      choice.np_single = dt
  else:
    dt = time.perf_counter() - t0
    choice.sp_calls += 1
    if dt < choice.sp_best:
      choice.sp_best = dt
  if choice.single_calls >= _MIN_CALLS and (choice.np_single < _split_min_seconds(choice, out)
                                            or choice.sp_calls >= _TRIALS):
    one, sp = choice.np_single, choice.sp_best
    choice.split = sp < one
    choice.np_best = min(one, sp)
    choice.sp_since = 0
    choice.sp_recheck = _recheck_after(one, sp, choice.sp_rounds)
    choice.sp_rounds += 1
  return r


def _split_min_seconds(choice, out) -> float:
  native = _eager_loops.loop_of(choice.plan, out.dtype) is not None
  return _NATIVE_SPLIT_MIN_SECONDS if native else _SPLIT_MIN_SECONDS


def _split_retrial(choice):
  """Time NumPy on one thread and split again (some calls after the choice: the load of the
  cores changes which one is faster)."""
  choice.split = None
  choice.single_calls = choice.sp_calls = choice.deferred = 0
  choice.np_single = choice.sp_best = float("inf")


# ------------------------------------------------------------------------------------------------
# NumPy across threads: an elementwise ufunc releases the GIL in its loop, so the parts of one
# large call run at once on the backend's thread count (NumPy itself runs one thread; JAX's
# executables split a large elementwise op across its pool).  Each part is a contiguous range of
# the flattened operands and result (or, where an operand is a strided view such as a broadcast
# row, a range of the leading axis), so every element is computed by the same loop as in one
# call (the results are NumPy's, bit for bit).

#: a one-thread NumPy call shorter than this is not split: on Python threads (a part's hand-off
#: to a thread and back costs ~20-60 us on a 2-core VM; a 1024x1024 float32 add takes ~100-170
#: us, an exp ~450 us), on the native pool (``_eager_loops``: a whole call's hand-off ~5-10 us;
#: a 256x256 float32 exp takes ~30 us)
_SPLIT_MIN_SECONDS = 1e-4
_NATIVE_SPLIT_MIN_SECONDS = 3e-5
_SPLIT_ALIGN = 64        # elements: each part starts on a multiple (vector loops stay aligned)
#: calls of a signature whose split is not timed yet because a compile is under way, at most
_MAX_DEFERRED = 50


def _split_plan(prim, avals, out, params):
  """The NumPy ufunc to split a large call of ``prim`` with, or None: the implementation is a
  plain ufunc of one result (``impl.numpy_fn``, not replaced by the user), every operand has the
  result's shape and dtype (no broadcasting, no casts: the ufunc's loop for that dtype gives the
  result's dtype), the dtype has 32 bits or more (narrower floats are computed in float32), no
  params, and the backend has several threads."""
  rule = impl_rules.get(prim)
  fn = getattr(rule, "numpy_fn", None)
  if ((type(fn) is not np.ufunc and not isinstance(fn, rops.MinMax)) or params or
      prim.multiple_results or fn.nout != 1 or fn.nin != len(avals)):
    return None
  dt = out.dtype
  if dt.itemsize < 4 or dt.kind not in "iufc":
    return None
  for a in avals:
    if getattr(a, "shape", None) != out.shape or getattr(a, "dtype", None) != dt:
      return None
  try:
    if fn.resolve_dtypes((dt,) * fn.nin + (None,))[-1] != dt:
      return None
  except (TypeError, ValueError, AttributeError):     # (no loop for the dtype)
    return None
  return fn if _kernel_threads() > 1 else None


class _SplitPool:
  """Python threads that run parts of a NumPy call (``n - 1`` of them; the caller runs the
  first part).  One call at a time: a call that finds the pool busy runs on its own thread."""

  def __init__(self, n: int):
    import queue
    self.n, self.busy = n, threading.Lock()
    self.done = queue.SimpleQueue()
    self.todo = [queue.SimpleQueue() for _ in range(n - 1)]
    for q in self.todo:
      threading.Thread(target=self._serve, args=(q,), daemon=True,
                       name="ourjax-eager-split").start()

  def _serve(self, q):
    from ourjax.backends.reference_ops import quietly
    while True:
      job = q.get()
      if job is None:          # (the pool was replaced: a new thread count)
        return
      fn, ins, o = job
      try:
        quietly(fn, *ins, out=o)
        self.done.put(None)
      except BaseException as e:   # noqa: BLE001  (raised again in the calling thread)
        self.done.put(e)


_split_pool = None


def _run_split(ufunc, args, out):
  """``ufunc(*args)`` in parts on the pool's threads, as an Array of ``out``; None where it
  cannot be split (the pool busy, or a non-contiguous operand of fewer than two rows)."""
  global _split_pool
  vals = [a._value if type(a) is Array else to_numpy(a) for a in args]
  loop = _eager_loops.loop_of(ufunc, out.dtype)
  if loop is not None:        # (NumPy's loop itself, on the backend's native threads)
    from ourjax.backends.cpu import threads
    res = _eager_loops.run(loop, vals, out.shape, out.dtype, threads.get_pool())
    if res is not None:
      return Array._from_result(res, out)
  # contiguous operands are cut as flat ranges; others (a broadcast row's stride-0 view, a
  # transposed view) into ranges of the leading axis, which any strides allow
  rows = False
  for v in vals:
    if not v.flags.c_contiguous:
      rows = True
  if rows and (out.ndim < 2 or out.shape[0] < 2):
    return None
  pool = _split_pool
  if pool is None or pool.n != _kernel_threads():
    with _lock:
      if _split_pool is None or _split_pool.n != _kernel_threads():
        if _split_pool is not None:
          for q in _split_pool.todo:
            q.put(None)
        _split_pool = _SplitPool(_kernel_threads())
      pool = _split_pool
  if not pool.busy.acquire(blocking=False):
    return None
  try:
    if rows:
      size = out.shape[0]
      step = -(-size // pool.n)
      flat = vals
      res = np.empty(out.shape, out.dtype)
    else:
      size = out.size
      step = -(-size // pool.n)
      step = -(-step // _SPLIT_ALIGN) * _SPLIT_ALIGN
      flat = [v.reshape(-1) for v in vals]
      res = np.empty(size, out.dtype)
    sent = 0
    for i in range(1, pool.n):
      lo, hi = i * step, min(size, (i + 1) * step)
      if lo >= hi:
        break
      pool.todo[i - 1].put((ufunc, [f[lo:hi] for f in flat], res[lo:hi]))
      sent += 1
    from ourjax.backends.reference_ops import quietly
    err = None
    try:
      quietly(ufunc, *[f[:step] for f in flat], out=res[:step])
    finally:
      for _ in range(sent):          # (every part is waited for before the pool is free)
        e = pool.done.get()
        err = err or e
    if err is not None:
      raise err
  finally:
    pool.busy.release()
  return Array._from_result(res.reshape(out.shape), out)


def _retrial(choice):
  """Time the kernel and NumPy in turn again (some calls after a trial: the cores' load may have
  changed which one is faster)."""
  choice.since = 0
  choice.k_calls = choice.np_trials = 0        # (the kernel is warm: no untimed call)
  choice.k_best = choice.np_best = float("inf")
  choice.settled = False
  choice.state = "trial"


def _kernel_allowed(args) -> bool:
  if config.jax_disable_jit or _nan_check.enabled():
    return False
  for a in args:
    if type(a) is not Array or a._npy is None:    # (device arrays stay with their backend)
      return False
  return True


def _consider_kernel(prim, params, args, choice):
  """Compile the kernel (on the worker thread) when the signature is called again and the
  kernel is predicted to be faster than NumPy.  (Any predicted saving: the prediction errs by
  tens of percent from one machine to another, the compile does not hold up the calls, and the
  trial decides; below ``_MIN_KERNEL_ELEMENTS`` and the dispatch's cost nothing is built.)"""
  if choice.np_calls < _MIN_CALLS:
    return
  t_np = choice.np_best
  # (KERNEL_COST is relative to NumPy on one thread: its time, also where NumPy runs split)
  t_one = choice.np_single if choice.np_single < float("inf") else t_np
  t_kernel = _DISPATCH_SECONDS + t_one * KERNEL_COST[prim.name] / _kernel_threads()
  if t_kernel >= t_np:
    return
  if not _BACKGROUND:
    choice.state = "compiling"
    _compile(prim, params, args, choice)
    return
  with _lock:
    if len(_pending) >= _MAX_PENDING or choice.state != "numpy":
      return
    choice.state = "compiling"
    overrides = dict(config._local.overrides)    # (x64 and the other flags of this thread)
    _pending[choice] = _executor().submit(_compile_job, prim, params, args, choice, overrides)


def _compile(prim, params, args, choice):
  """Build the kernel of ``choice``'s signature (by running it once): ``'trial'`` next, or
  NumPy for good if the backend cannot build it."""
  from ourjax import api
  fn = api.jit(functools.partial(_bind_one, prim, params), backend="cpu")
  try:
    fn(*args).block_until_ready()        # compiles
  except Exception:   # noqa: BLE001  (a kernel the backend cannot build: NumPy it is)
    choice.settled, choice.state = True, "numpy"
    return
  choice.fn = fn          # (before the state: a caller that sees 'trial' finds the kernel)
  choice.np_best = float("inf")       # (NumPy is timed again, in turn with the kernel)
  choice.k_calls = -1     # (the kernel's first call is not timed: it warms the thread pool and
  # the recycled output blocks up, which NumPy's calls so far found warm)
  choice.state = "trial"


def _compile_job(prim, params, args, choice, overrides):
  try:
    config._local.overrides = overrides
    _compile(prim, params, args, choice)
  finally:
    with _lock:
      _pending.pop(choice, None)


_lock = threading.Lock()
_pending: dict = {}      # _Choice -> the Future of its compile
_worker = None


def _executor():
  global _worker
  if _worker is None:
    from concurrent.futures import ThreadPoolExecutor
    _worker = ThreadPoolExecutor(1, thread_name_prefix="ourjax-eager")
  return _worker


def wait_for_kernels(timeout: float | None = None) -> bool:
  """Wait until the kernels being compiled for eager operations are built (``timeout``
  seconds at most); True if none is left.  (Benchmarks call it to time the steady state.)"""
  from concurrent.futures import wait
  with _lock:
    futures = list(_pending.values())
  if futures:
    wait(futures, timeout)
  with _lock:
    return not _pending


def _before_fork():
  """A fork waits for the compile under way (the child would inherit the locks the worker holds
  in the compiler, and no thread to release them); those not started are dropped."""
  with _lock:
    items = list(_pending.items())
  for choice, fut in items:
    if fut.cancel():
      with _lock:
        _pending.pop(choice, None)
      choice.state = "numpy"          # considered again by its next call
  for _, fut in items:
    if not fut.cancelled():
      try:
        fut.result()
      except Exception:   # noqa: BLE001  (_compile_job catches the compile's own errors)
        pass


def _after_fork_in_child():
  global _worker, _lock, _split_pool
  _worker, _lock = None, threading.Lock()     # (the worker thread is not in the child)
  _split_pool = None                          # (nor the split's threads)
  for choice in list(_pending):
    if choice.fn is None:
      choice.state = "numpy"
  _pending.clear()


if hasattr(os, "register_at_fork"):
  # (registered after concurrent.futures' own hooks, which hold its shutdown lock across a fork
  # and run after this one therefore: the compile waited for may start work on a pool)
  __import__("concurrent.futures.thread")
  os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _time_kernel(choice, dt, r, out) -> bool:
  """Record a timed kernel call; False if its result cannot be used (not of the abstract
  result's type: then NumPy runs this signature from now on)."""
  if type(r) is not Array or r.aval != out:
    choice.settled, choice.state, choice.fn = True, "numpy", None
    return False
  choice.k_calls += 1
  if choice.k_calls > 0 and dt < choice.k_best:
    choice.k_best = dt
  _decide(choice)
  return True


def _numpy_trial(prim, args, params, out, choice):
  """A trial's NumPy call, timed."""
  t0 = time.perf_counter()
  r = _run_np(prim, args, params, out, choice)
  dt = time.perf_counter() - t0
  choice.np_trials += 1
  if dt < choice.np_best:
    choice.np_best = dt
  _decide(choice)
  return r


def _recheck_after(a: float, b: float, rounds: int) -> int:
  """Calls before two timed ways are timed again: ``_FIRST_RECHECK`` after a signature's first
  choice (made in its first calls, often beside compiles), then ``_RECHECK`` times the slower
  one's time over the faster one's."""
  if rounds == 0:
    return _FIRST_RECHECK
  return int(_RECHECK * min(max(a, b) / max(min(a, b), 1e-9), 1000.0))


def _decide(choice):
  """After ``_TRIALS`` timed calls of each, the faster of the kernel and NumPy stays."""
  if choice.k_calls >= _TRIALS and choice.np_trials >= _TRIALS and choice.state == "trial":
    k, n = choice.k_best, choice.np_best
    choice.recheck = _recheck_after(k, n, choice.k_rounds)
    choice.k_rounds += 1
    choice.since = 0
    if choice.k_best < choice.np_best:
      choice.state = "kernel"
    else:
      choice.settled, choice.state = True, "numpy"


core._eager_apply = apply
