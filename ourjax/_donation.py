"""Buffer donation: ``jit(f, donate_argnums=...)`` / ``donate_argnames=...``, with JAX's rules.

Pairing (at lowering, ``set_up``): each output, in order, takes the first donated parameter
with its shape and dtype (weak types do not matter) that no earlier output took: that output is
*aliased* to the parameter (XLA's ``input_output_alias``), and the backend writes it into the
parameter's buffer.  A donated parameter left over is still a *donor* when some unaliased
output has its element count (JAX hands those to XLA, which may reuse them); any other donated
parameter is *not usable*: ``UserWarning: Some donated buffers were not usable: float32[3].``
and its array stays alive.  Arguments that ``keep_unused=False`` pruned are neither donated nor
warned about.

Calls (``ModuleExecutable``, see ``run``): the arrays passed for aliased and donor parameters
are deleted after the call (``x.is_deleted()``; using them raises ``RuntimeError: Array has
been deleted with shape=float32[3].``).  An aliased parameter's buffer is handed to the
executable as the output's buffer only when the Array is its sole owner (no other Array views
the same NumPy block or device allocation, no NumPy array given out by ``np.asarray`` is still
alive); otherwise the call works on a copy, so nobody else sees the buffer change.  Passing the
same Array for a donated parameter and for another parameter raises JAX's
``JaxRuntimeError: INVALID_ARGUMENT: Attempt to use a buffer that was previously donated ...``.

How a backend honours an alias (``backends/donation.py``): the output is computed straight into
the parameter's buffer when no kernel reads the parameter afterwards (or only the kernel that
writes the output, element by element; a dynamic-update-slice or scatter then updates it in
place), else into a temporary copied over the parameter at the end.  Backends without aliasing
(the reference backend, a jaxpr run op by op) allocate the output; the donated array is deleted
all the same.  ``pmap`` and a sharded ``jit`` (``interpreters/spmd.py``, ``partition.py``)
use the same machinery per device: the compute segment that reads a donated argument last (no
collective or output reading it after) is compiled with that input donated, so on each device
the segment's executable writes a result of the same shape and dtype into the argument's block
(when its Array owns it alone, else into a copy) and deletes the block's Array; the pmap/jit
call deletes the global arrays and warns about unusable ones once, as JAX does.  Under ``jvp``
(``grad``) and ``vmap`` a jitted call keeps its donation for the primal inputs
(``interpreters/pjit.py``: ``donated_invars``), as JAX's does.
"""
from __future__ import annotations

import sys
import warnings
from collections import defaultdict, deque
from typing import NamedTuple

import numpy as np

__all__ = ["Donation", "set_up", "deleted_error", "MemoryStats"]

FAQ = "See an explanation at https://docs.jax.dev/en/latest/faq.html#buffer-donation."


class Donation(NamedTuple):
  """How a module uses its donated parameters: ``aliases`` {output j: parameter k} (written
  in place), ``donors`` (parameters matched by element count only), ``deleted`` (the
  parameters whose arrays a call deletes: both kinds, ascending)."""
  aliases: dict
  donors: tuple
  deleted: tuple


def set_up(in_avals, out_avals, donated, warn: bool = True, names=None) -> Donation | None:
  """The donation of a module with parameters of ``in_avals`` (``donated``: a bool for each,
  missing ones False) and results of ``out_avals``; None when nothing is donated.  Warns (as
  JAX does, once per lowering) about donated parameters that no result can use (named by
  their avals, or by ``names[k]``)."""
  donated = list(donated) + [False] * (len(in_avals) - len(donated))
  if not any(donated):
    return None
  key = lambda a: (tuple(a.shape), np.dtype(a.dtype))
  free = defaultdict(deque)
  for k, (a, d) in enumerate(zip(in_avals, donated)):
    if d:
      free[key(a)].append(k)
  aliases = {}
  for j, a in enumerate(out_avals):
    q = free.get(key(a))
    if q:
      aliases[j] = q.popleft()
  left = sorted(k for q in free.values() for k in q)
  by_size = defaultdict(deque)
  for j, a in enumerate(out_avals):
    if j not in aliases:
      by_size[int(np.prod(a.shape, dtype=np.int64))].append(j)
  donors, unusable = [], []
  for k in left:
    q = by_size.get(int(np.prod(in_avals[k].shape, dtype=np.int64)))
    if q:
      q.popleft()
      donors.append(k)
    else:
      unusable.append(k)
  if unusable and warn:
    text = ", ".join(names[k] if names is not None else
                     in_avals[k].str_short(short_dtypes=False) for k in unusable)
    warnings.warn(f"Some donated buffers were not usable: {text}.\n{FAQ}", stacklevel=4)
  if not aliases and not donors:
    return None
  return Donation(aliases, tuple(donors), tuple(sorted(set(aliases.values()) | set(donors))))


def deleted_error(aval) -> RuntimeError:
  """JAX's error for reading a deleted (or donated) array."""
  return RuntimeError(f"Array has been deleted with shape={aval.str_short(short_dtypes=False)}.")


# ---------------------------------------------------------------------------------------------
# calls
# ---------------------------------------------------------------------------------------------

def check_reuse(args, deleted) -> None:
  """JAX's error when an Array given for a donated parameter is also given for another one."""
  from ourjax.array import Array
  from ourjax.errors import JaxRuntimeError
  dset = set(deleted)
  first = {}
  for i, a in enumerate(args):
    if type(a) is not Array:
      continue
    j = first.setdefault(id(a), i)
    if j == i:
      continue
    if j in dset:
      raise JaxRuntimeError(
          "INVALID_ARGUMENT: Attempt to use a buffer that was previously donated in the same "
          f"call to Execute() (flattened argument {i}, replica 0, partition 0, first use: {j})."
          " Toy example for this bug: `f(donate(a), a)`.")
    if i in dset:
      raise JaxRuntimeError(
          "INVALID_ARGUMENT: Attempt to donate a buffer which is also used by the same call to "
          f"Execute() (flattened argument {i}, replica 0, partition 0, first use: {j}). Toy "
          "example for this bug: `f(a, donate(a))`.")


# Whether an Array is the only owner of its memory is read from reference counts: the counts
# ``_host_counts``/``_device_counts`` see for an Array that owns its block alone are measured
# once (``_baseline``), so they do not depend on the interpreter's own bookkeeping.

def _host_counts(a):
  v = a._npy
  if v is None:
    return None
  r = v.base
  return (sys.getrefcount(v), None if r is None else sys.getrefcount(r))


def _device_counts(a):
  b = a._device_buf
  if b is None:
    return None
  return (sys.getrefcount(b), sys.getrefcount(b.allocation))


_BASE: dict = {}


class _Probe:
  __slots__ = ("_npy", "_device_buf", "allocation")


def _baseline():
  if not _BASE:
    p = _Probe()
    p._npy = np.empty(2, np.float32)
    _BASE["host"] = _host_counts(p)[0]
    r = np.empty(8, np.uint8)
    p._npy = r.view(np.float32)
    del r
    _BASE["host_base"] = _host_counts(p)[1]
    q = _Probe()
    q.allocation = object()
    p._device_buf = q
    del q
    _BASE["device"] = _device_counts(p)
  return _BASE


def sole_host_owner(a) -> bool:
  """Whether Array ``a``'s NumPy value is a C-contiguous block nothing else refers to (its
  own, or the recycled block of a result, ``cpu/backend.py: _OutputPool``)."""
  base = _baseline()
  counts = _host_counts(a)      # (first: the names below hold references too)
  if counts is None:
    return False
  v = a._npy
  if not (v.flags.c_contiguous and v.flags.aligned) or counts[0] != base["host"]:
    return False
  r = v.base
  if r is None:
    return bool(v.flags.owndata)
  if not isinstance(r, np.ndarray) or counts[1] != base["host_base"] or \
     r.nbytes != v.nbytes or r.ctypes.data != v.ctypes.data:
    return False
  o = r.base
  if o is None:
    return True
  from ourjax.backends.cpu.backend import _Owner
  return type(o) is _Owner


def sole_device_owner(a) -> bool:
  """Whether Array ``a``'s device buffer and its allocation belong to it alone."""
  if a._device_buf is None:
    return False
  return _device_counts(a) == _baseline()["device"]


def run(exe, compiled, args, call):
  """A call of ``exe`` (a ``ModuleExecutable`` with ``exe.donation``) on the module's
  arguments ``args`` (kept ones, hoisted constants excluded): ``call(args)`` runs ``compiled``;
  the donated Arrays are deleted once it returns."""
  from ourjax.array import Array, to_numpy
  d = exe.donation
  check_reuse(args, d.deleted)
  args = list(args)
  originals = [args[k] for k in d.deleted]
  device = getattr(compiled, "device_resident", False)
  reused = {k for _, k in getattr(compiled, "aliases", ())}
  for k in reused:
    a = args[k]
    if type(a) is Array:
      if a._npy is None and a._device_buf is None:
        raise deleted_error(a.aval)
      if device:
        # (an Array only on the host is uploaded into a block of its own: reusable)
        ok = a._device_buf is None or sole_device_owner(a)
      else:
        ok = sole_host_owner(a)
      if not ok:
        args[k] = np.array(a._value)          # (a copy the call may overwrite)
    else:
      args[k] = np.array(to_numpy(a))
  outs = call(args)
  for a in originals:
    if type(a) is Array:
      a._delete()
  return outs


# ---------------------------------------------------------------------------------------------
# Compiled.memory_analysis()
# ---------------------------------------------------------------------------------------------

class MemoryStats(NamedTuple):
  """What ``Compiled.memory_analysis()`` returns (JAX's ``CompiledMemoryStats`` fields), in
  bytes: the arguments, the outputs, the outputs that live in donated arguments' buffers
  (``alias_size_in_bytes``), the temporaries' arena, the machine code (0 where unknown) and
  ``peak_memory_in_bytes``: arguments + outputs + temporaries - aliased, what one call needs
  at once.  The ``host_*`` fields are 0 (no host memory space)."""
  generated_code_size_in_bytes: int = 0
  argument_size_in_bytes: int = 0
  output_size_in_bytes: int = 0
  alias_size_in_bytes: int = 0
  temp_size_in_bytes: int = 0
  host_generated_code_size_in_bytes: int = 0
  host_argument_size_in_bytes: int = 0
  host_output_size_in_bytes: int = 0
  host_alias_size_in_bytes: int = 0
  host_temp_size_in_bytes: int = 0

  @property
  def peak_memory_in_bytes(self) -> int:
    return (self.argument_size_in_bytes + self.output_size_in_bytes + self.temp_size_in_bytes
            - self.alias_size_in_bytes)

  serialized_buffer_assignment_proto = b""
