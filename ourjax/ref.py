"""Mutable array references (JAX's ``jax.ref`` / ``jax.new_ref``).

A ``Ref`` is a box holding an array.  ``r[idx]`` reads, ``r[idx] = v`` writes, and
``get/set/swap/addupdate/freeze`` are the functional spellings.  Eagerly a write replaces the
box's value; inside transformations the box simply holds the traced value, so a function that
creates and uses its own references is an ordinary pure function to jit, grad and vmap.

A reference that crosses a staged trace (an argument of a jitted function, or one created
outside a jitted function, a ``scan``/``while_loop``/``fori_loop``/``cond``/``switch`` body and
used inside it) is threaded through: its value enters the traced function as an input and its
final value comes out as an extra output, written back into the box after the call (what JAX's
state discharge does).  Staged traces (``partial_eval.trace_to_jaxpr``) push a *frame*; a
reference belongs to the frame it was created or bound in.  Touching a reference of an enclosing
frame raises ``_RefsNeeded`` at the innermost frame; the transformation that pushed that frame
(``jit`` and the loops and conditionals above) catches it, threads the reference and traces
again.  Other staged transformations (``checkpoint``, ``custom_jvp``, ...) do not thread
references: using an outer one inside them is an error that says so.
"""
from __future__ import annotations

import builtins
import contextlib
import threading

import numpy as np

from ourjax.core import ShapedArray, Tracer, get_aval

__all__ = ["Ref", "AbstractRef", "new_ref", "empty_ref", "free_ref", "get", "set", "swap",
           "addupdate", "freeze"]


class _Frame:
  __slots__ = ("depth",)

  def __init__(self, depth):
    self.depth = depth


class _State(threading.local):
  def __init__(self):
    self.frames: list = []      # the staged traces now running, outermost first
    self.handlers = builtins.set()  # frame depths whose transformation threads references


_state = _State()


class _RefsNeeded(BaseException):
  """A trace at frame ``depth`` touched ``ref``, which belongs to an enclosing frame.  (A
  BaseException, so that ``except Exception`` in user code does not swallow it.)"""

  def __init__(self, depth, ref):
    super().__init__(depth, ref)
    self.depth, self.ref = depth, ref


@contextlib.contextmanager
def staged_frame(name: str = ""):
  """Run a staged trace in a new frame (``partial_eval.trace_to_jaxpr``)."""
  frame = _Frame(len(_state.frames))
  _state.frames.append(frame)
  try:
    yield frame
  except _RefsNeeded as e:
    if e.depth == frame.depth and frame.depth not in _state.handlers:
      raise ValueError(
          f"a mutable array reference ({e.ref.aval}) created outside of {name or 'a function'} "
          "is used inside it, but this transformation does not thread references (jit, scan, "
          "while_loop, fori_loop, cond and switch do): pass its value in and return the new "
          "value instead") from None
    raise
  finally:
    _state.frames.pop()


def _current():
  return _state.frames[-1] if _state.frames else None


class AbstractRef:
  """The type of a reference: ``Ref{float32[3]}``."""
  __slots__ = ("inner_aval",)

  def __init__(self, inner_aval: ShapedArray):
    self.inner_aval = inner_aval

  shape = property(lambda self: self.inner_aval.shape)
  dtype = property(lambda self: self.inner_aval.dtype)
  ndim = property(lambda self: len(self.inner_aval.shape))
  size = property(lambda self: int(np.prod(self.inner_aval.shape, dtype=np.int64)))

  def __eq__(self, other):
    return isinstance(other, AbstractRef) and other.inner_aval == self.inner_aval

  def __hash__(self):
    return hash(("Ref", self.inner_aval))

  def __repr__(self):
    a = self.inner_aval
    return f"Ref{{{a.dtype.name}[{','.join(str(d) for d in a.shape)}]}}"


def _trace_level() -> int:
  from ourjax import core
  return core._state.trace_stack[-1].level


class Ref:
  """A mutable array reference (see the module docstring)."""
  __slots__ = ("_value", "_frame", "_level", "_aval", "__weakref__")

  def __init__(self, value, frame):
    self._value, self._frame, self._level = value, frame, _trace_level()
    a = get_aval(value)
    self._aval = ShapedArray(a.shape, a.dtype)

  # -- the box ---------------------------------------------------------------------------------
  def _check(self):
    cur = _current()
    if self._frame is cur:
      return
    if self._frame is None or self._frame in _state.frames:
      raise _RefsNeeded(cur.depth, self)
    raise ValueError(f"a mutable array reference ({self.aval}) is used outside the traced "
                     "function that created it (a reference cannot escape jit or a loop body)")

  def _read(self):
    self._check()
    return self._value

  def _write(self, value):
    self._check()
    value = _coerce(value, self._aval, "swap")
    if isinstance(value, Tracer) and value._trace.main.level > self._level:
      # a value of a transformation (grad, vmap) started after the reference was made: it
      # would outlive that transformation in the box (JAX's error)
      raise ValueError(
          "performing a set/swap operation with a differentiated or batched value on an array "
          f"reference of type {self.aval} made outside the transformation. Move the array "
          "reference to be an argument of the transformed function?")
    self._value = value

  # -- the array-like surface ------------------------------------------------------------------
  aval = property(lambda self: AbstractRef(self._aval))
  shape = property(lambda self: self._aval.shape)
  dtype = property(lambda self: self._aval.dtype)
  ndim = property(lambda self: len(self._aval.shape))
  size = property(lambda self: int(np.prod(self._aval.shape, dtype=np.int64)))

  def __len__(self):
    if not self._aval.shape:
      raise TypeError("len() of unsized object")
    return self._aval.shape[0]

  def __getitem__(self, idx):
    return get(self, idx)

  def __setitem__(self, idx, value):
    set(self, idx, value)

  def addupdate(self, x, idx=None):
    addupdate(self, idx, x)

  def __repr__(self):
    v = self._value
    if isinstance(v, Tracer):
      return repr(self.aval)
    body = np.array2string(np.asarray(v), separator=", ", prefix="Ref(")
    return f"Ref({body}, dtype={self._aval.dtype.name})"

  def __hash__(self):
    return id(self)

  def __eq__(self, other):
    return self is other


def _coerce(value, aval: ShapedArray, what: str, expected_shape=None):
  """``value`` checked against the reference's dtype and the shape written (JAX's errors;
  a weakly typed value, a Python scalar, takes the reference's dtype)."""
  from ourjax import numpy as jnp
  from ourjax import lax
  if not isinstance(value, Tracer) and not hasattr(value, "aval"):
    value = jnp.asarray(value)
  a = get_aval(value)
  if a.dtype != aval.dtype and not a.weak_type:
    raise ValueError(f"Invalid dtype for `{what}`. Ref dtype: {aval.dtype}. Value dtype: "
                     f"{a.dtype}.")
  if a.weak_type:
    value = lax.convert_element_type(value, aval.dtype)   # (a strong value in the box)
  shape = tuple(aval.shape) if expected_shape is None else tuple(expected_shape)
  if tuple(a.shape) != shape:
    raise ValueError(f"Invalid shape for `{what}`. Ref shape: {tuple(aval.shape)}. Expected "
                     f"shape: {shape}. Value shape: {tuple(a.shape)}.")
  return value


def _whole(idx) -> bool:
  return idx is None or idx is Ellipsis or (isinstance(idx, tuple) and
                                            (idx == () or idx == (Ellipsis,)))


# ------------------------------------------------------------------------------------------------
# The public functions


def new_ref(init_val, *, memory_space=None, kind=None) -> Ref:
  """A new reference holding (a copy of) ``init_val``."""
  from ourjax import numpy as jnp
  v = init_val if isinstance(init_val, Tracer) else jnp.array(init_val)
  if get_aval(v).weak_type:
    from ourjax import lax
    v = lax.convert_element_type(v, get_aval(v).dtype)
  return Ref(v, _current())


def empty_ref(ty, memory_space=None) -> Ref:
  """A new reference of type ``ty`` (an ``AbstractRef``, or anything with ``shape`` and
  ``dtype``); its contents are unspecified (zeros here)."""
  from ourjax import numpy as jnp
  inner = ty.inner_aval if isinstance(ty, AbstractRef) else ty
  return Ref(jnp.zeros(tuple(inner.shape), inner.dtype), _current())


def free_ref(ref: Ref) -> None:
  """Release a reference (nothing to do here: its value is an ordinary array)."""
  ref._check()


def get(ref: Ref, idx=None):
  """``ref[idx]`` (the whole value for ``idx`` None, ``()`` or ``...``)."""
  v = ref._read()
  return v if _whole(idx) else v[idx]


def set(ref: Ref, idx, value) -> None:  # noqa: A001  (JAX's name)
  """``ref[idx] = value`` (``value`` of the indexed shape and the reference's dtype)."""
  _update(ref, idx, value, "swap", add=False)


def swap(ref: Ref, idx, value, _function_name: str = "ref_swap"):
  """Write ``value`` at ``idx`` and return what was there."""
  old = get(ref, idx)
  set(ref, idx, value)
  return old


def addupdate(ref: Ref, idx, x) -> None:
  """``ref[idx] += x``."""
  _update(ref, idx, x, "addupdate", add=True)


def _update(ref, idx, value, what, add):
  from ourjax import numpy as jnp
  cur = ref._read()
  if _whole(idx):
    value = _coerce(value, ref._aval, what)
    ref._write(jnp.add(cur, value) if add else value)
  else:
    value = _coerce(value, ref._aval, what, get_aval(cur[idx]).shape)
    ref._write(cur.at[idx].add(value) if add else cur.at[idx].set(value))


def freeze(ref: Ref):
  """The reference's value as an immutable array."""
  return ref._read()


# ------------------------------------------------------------------------------------------------
# Threading references through staged transformations


def _leaves_have_refs(leaves) -> bool:
  return any(type(x) is Ref for x in leaves)


class HasRefs(Exception):
  """jit's signature met a reference among the arguments (``jit_call`` takes those)."""


def enter_handler():
  """``handling`` without the context manager (jit's call path): returns what
  ``exit_handler`` takes."""
  depth = len(_state.frames)
  added = depth not in _state.handlers
  if added:
    _state.handlers.add(depth)
  return depth, added


def exit_handler(depth, added):
  if added:
    _state.handlers.discard(depth)


@contextlib.contextmanager
def handling():
  """Mark the frames the enclosed transformation pushes (at the current depth) as threading
  references: a ``_RefsNeeded`` for them propagates to the caller (``threaded``)."""
  depth = len(_state.frames)
  added = depth not in _state.handlers
  _state.handlers.add(depth)
  try:
    yield depth
  finally:
    if added:
      _state.handlers.discard(depth)


def threaded(run, refs: list | None = None):
  """``run(refs)``, called again with more references each time its traces touch one of an
  enclosing frame (``refs`` starts empty)."""
  refs = list(refs or [])
  while True:
    with handling() as depth:
      try:
        return run(refs)
      except _RefsNeeded as e:
        if e.depth != depth:
          raise
        if any(r is e.ref for r in refs):
          raise AssertionError("reference threaded but not bound") from None
        refs.append(e.ref)


@contextlib.contextmanager
def bound(refs, values):
  """Bind ``refs`` to ``values`` in the current (staged) frame for the enclosed code; yields a
  function returning their current values.  The boxes are restored afterwards."""
  saved = [(r._value, r._frame, r._level) for r in refs]
  cur, level = _current(), _trace_level()
  for r, v in zip(refs, values):
    r._value, r._frame, r._level = v, cur, level
  try:
    yield lambda: [r._value for r in refs]
  finally:
    for r, (v, f, lv) in zip(refs, saved):
      r._value, r._frame, r._level = v, f, lv


def read_all(refs):
  return [r._read() for r in refs]


def write_all(refs, values):
  for r, v in zip(refs, values):
    r._write(v)


def check_no_refs(leaves, what: str):
  for x in leaves:
    if type(x) is Ref:
      raise ValueError(f"{what} returned a mutable array reference of type {x.aval}, but "
                       "mutable array references cannot be returned.")


# ------------------------------------------------------------------------------------------------
# jit


_pending = threading.local()


def jit_call(jw, args, kwargs):
  """``jw(*args, **kwargs)`` for a jitted function that takes references (as arguments, or
  closed over: ``jw._closed_refs``): a jitted pure function of their values that returns
  their new values too, called, then the new values written back."""
  from ourjax._jit import JitWrapped
  from ourjax.api import _split_static
  from ourjax.tree_util import tree_flatten
  f, dargs, dkwargs, static_key = _split_static(jw.fun, args, kwargs, jw.static_argnums,
                                                jw.static_argnames, "jit")
  leaves, tree = tree_flatten((dargs, dkwargs))
  pure = jw.__dict__.get("_ref_pure")
  if pure is None:
    def pure_fun(ref_vals, leaves, *, meta):
      return _pure_call(ref_vals, leaves, meta)
    pure_fun.__name__ = getattr(jw.fun, "__name__", "jit")
    pure = jw._ref_pure = JitWrapped(pure_fun, static_argnames=("meta",), backend=jw.backend)
    pure._ref_inner = True

  def run(found):
    closed = jw.__dict__.setdefault("_closed_refs", [])
    for r in found:
      if not any(r is c for c in closed):
        closed.append(r)
    refs, slots, vals = list(closed), [], list(leaves)
    for i, x in enumerate(leaves):
      if type(x) is Ref:
        j = next((k for k, r in enumerate(refs) if r is x), None)
        if j is None:
          j = len(refs)
          refs.append(x)
        slots.append((i, j))
        vals[i] = None
    stack = _pending.__dict__.setdefault("stack", [])
    stack.append((f, refs))
    try:
      out, new = pure(read_all(refs), vals, meta=(tree, tuple(slots), static_key))
    finally:
      stack.pop()
    write_all(refs, new)
    return out
  return threaded(run)


def _pure_call(ref_vals, vals, meta):
  from ourjax.tree_util import tree_leaves, tree_unflatten
  tree, slots, _ = meta
  f, refs = _pending.stack[-1]
  with bound(refs, ref_vals) as now:
    leaves = list(vals)
    for i, j in slots:
      leaves[i] = refs[j]
    dargs, dkwargs = tree_unflatten(tree, leaves)
    out = f(*dargs, **dkwargs)
    new = now()
  check_no_refs(tree_leaves(out), f"function {getattr(f, '__name__', f)} traced for jit")
  return out, new
