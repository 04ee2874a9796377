"""Row caches and column segments of a rows-mode ``LoopKernel``.

Row caches: a value computed for a row reduction is kept for the row's outputs.

A rows-mode kernel prefetches each row reduction of the row (a loop over the row's elements)
and then writes the row's outputs (another loop over them).  Softmax is
``e / sum(e)`` with ``e = exp(x - max(x))``: the sum's loop evaluates ``e`` at every element of
the row, and the output loop would evaluate it again -- every ``exp`` twice.  A *row cache*
keeps such a value: the first loop that evaluates it stores it, element by element, into an
array of one row (``alloca`` in the kernel's entry, private to the thread and in L1), and later
loops of the same row load it from there instead of computing it again.

``plan_row_caches`` decides which instructions get one, from the structure of the kernel alone:

* an instruction ``x`` of the kernel's dims (not a leaf) is evaluated only at positions of the
  row being written: every path to it from the kernel's outputs and from the operands of its row
  reductions passes only *same-index* edges (elementwise ops, identity broadcasts and reshapes:
  the emitter hands the operand the very index of the user), and the reductions whose loops
  reach it are *row* reductions (a single operand of the kernel's dims reduced over its last
  dimension, so their loop visits every element of the row, in order, before anything later);
* the first row reduction (in prefetch order) that reaches ``x`` fills the cache, and a later
  one or an output of the row also reaches it (else nothing would read the cache);
* ``x`` is costly: a transcendental function, a division, a square root, ... below it (a load
  and a multiply are cheaper recomputed than stored and loaded);
* it is outermost: an ``x`` whose every user is cached as well is never evaluated after the
  fill, so it is not cached;
* the caches fit ``MAX_BYTES`` together (stack space of every thread).

Results are bit for bit what evaluating twice gives: the cached value is the very value the
reduction's loop computed (the emitter is deterministic), in the compute type.  The emitter's
side is ``Emitter.row_caches`` (``elemental.py``): an instruction in it is stored after being
computed while its cache fills, and loaded afterwards.

Column segments: a concatenate along the last dimension (an LSTM's gate gradients, four
``[B, H]`` blocks side by side in ``[B, 4H]``) is evaluated element by element as every part
at a clamped position and a select of the one that holds the element (branch-free, so the loop
vectorizes): the work of all the parts for every element.  ``column_segments`` cuts the column
loop at the parts' boundaries instead, one loop per segment, and the emitter is told the range
of each loop's index (``Emitter.ranges``), so that the concatenate evaluates only the part that
holds the segment.  Same values, a quarter of the work for four parts.  A concatenate reached
only at shifted positions (a ``roll`` of a value read by a stencil at its neighbours) gets the
row's ends cut off as segments of their own (``HALO`` columns): between them the shifted
positions fall in one part, so its loads stay contiguous (a select per element between two
clamped positions became vector gathers).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ourjax.backends.llvm import emitter as E
from ourjax.lowering import hlo

__all__ = ["plan_row_caches", "RowCache", "MAX_BYTES", "column_segments", "MAX_SEGMENTS"]

#: Most bytes of row caches a kernel keeps (on each thread's stack).
MAX_BYTES = 64 * 1024
#: Most loops a row's column loop is cut into (each has a copy of the loop body).
MAX_SEGMENTS = 8
#: Columns at each end of a row cut off as segments of their own where a concatenate along the
#: row is read at shifted positions (a roll read by a stencil): in the segment between, every
#: such position within ``HALO`` of the column falls in one part of it, which the emitter then
#: reads alone (``Emitter.ranges`` follows the index through slices and concatenates).
HALO = 32
#: Whether those end segments are cut (``HALO``).  Off: the RK4 scan of models.py (2 x 4096
#: state, rolls stored) ran 10.1 ms a step without them and 13.2 with them; read in place
#: (``Module.read_moved``) its rolls took 39.5 ms without and 15.5 with them (2-core EPYC,
#: quiet, medians of 15 calls).  A two-level roll stencil on (64, 4096) ran 193 -> 90 us with
#: them: which of the two a kernel is, nothing decides yet.
HALO_CUTS = False
#: Whether the CPU asks ``recompute_outputs`` to read an output that only moves a stored
#: value's elements (a roll) there, at the moved positions, instead of storing it
#: (``Module.read_moved``).  Off: it took the RK4 scan's peak from 217 to 184 KB (JAX: 184) but
#: its step from 10.1 to 15.5 ms (with ``HALO_CUTS``; 39.5 without), figures above.
READ_MOVED = False

_SAME_INDEX = set(hlo.ELEMENTWISE_OPS)
_COSTLY = set(E._MATH_UNARY) | {"power", "atan2", "remainder", "divide", "sqrt", "rsqrt"}


def _dims(instr):
  return None if instr.shape.is_tuple else tuple(instr.dims)


def _same_index(user, operand) -> bool:
  """Whether the emitter evaluates ``operand`` at the very index ``user`` is evaluated at."""
  if user.shape.is_tuple or operand.shape.is_tuple or _dims(operand) != _dims(user):
    return False
  op = user.opcode
  if op in _SAME_INDEX or op in ("copy", "reshape"):
    return True
  if op == "bitcast-convert":
    return operand.dtype.itemsize == user.dtype.itemsize
  if op == "broadcast":
    return tuple(user.attrs["dimensions"]) == tuple(range(len(operand.dims)))
  return False


def row_reductions(dims, prefetch_outer) -> list:
  """The prefetched reductions whose loop visits the row's elements in order: one operand of
  the kernel's ``dims`` reduced over its last dimension."""
  rank = len(dims)
  return [r for r in prefetch_outer
          if len(r.operands) == 2 and not r.shape.is_tuple
          and list(r.attrs["dimensions"]) == [rank - 1]
          and _dims(r.operands[0]) == tuple(dims)]


def plan_row_caches(dims, outputs, leafmap, prefetch_outer, prefetch_elem) -> list:
  """[(instr, filling reduction)] of the instructions a rows-mode kernel caches (see the
  module docstring), in the order the planner found them."""
  dims = tuple(dims)
  if len(dims) < 2 or dims[-1] < 2:
    return []
  rows = row_reductions(dims, prefetch_outer)
  if not rows:
    return []
  row_ids = {id(r) for r in rows}

  def operands(x):
    return [] if x in leafmap else list(x.operands)

  # 1. where each instruction is evaluated: 'E' (at an element of the row being written,
  #    including the loops of row reductions) or 'O' (anywhere else)
  labels: dict = {}
  parents: dict = {}
  stack = [(i, "E" if _dims(i) == dims else "O") for i, _ in outputs]
  stack += [(r, "O") for r in list(prefetch_outer) + list(prefetch_elem)]
  seen = set()
  while stack:
    x, lab = stack.pop()
    if (id(x), lab) in seen:
      continue
    seen.add((id(x), lab))
    labels.setdefault(id(x), set()).add(lab)
    for o in operands(x):
      parents.setdefault(id(o), set()).add(id(x))
      if x.opcode == "reduce":
        lo = "E" if id(x) in row_ids and o is x.operands[0] else "O"
      else:
        lo = lab if lab == "E" and _same_index(x, o) else "O"
      stack.append((o, lo))

  # 2. what each row loop reaches through same-index edges (where it evaluates the row)
  def closure(roots):
    out, st = {}, list(roots)
    while st:
      x = st.pop()
      if id(x) in out or x in leafmap:
        continue
      out[id(x)] = x
      st.extend(o for o in operands(x) if _same_index(x, o))
    return out

  fills = [closure([r.operands[0]]) for r in rows]
  outs = closure([i for i, _ in outputs if _dims(i) == dims])

  costly_memo: dict = {}

  def costly(x):
    v = costly_memo.get(id(x))
    if v is None:
      costly_memo[id(x)] = False
      v = x.opcode in _COSTLY or any(costly(o) for o in operands(x) if o.opcode != "reduce")
      costly_memo[id(x)] = v
    return v

  chosen = {}
  for k, r in enumerate(rows):
    later = dict(outs)
    for f in fills[k + 1:]:
      later.update(f)
    for xid, x in fills[k].items():
      if xid in chosen or any(xid in f for f in fills[:k]):
        continue
      if (xid in later and labels.get(xid) == {"E"} and x.opcode not in ("reduce", "parameter",
                                                                        "constant")
          and _dims(x) == dims and costly(x)):
        chosen[xid] = (x, r)
  # 3. outermost only: an instruction whose every user is cached is not evaluated again
  keep = [(x, r) for xid, (x, r) in chosen.items()
          if not parents.get(xid) or not parents[xid] <= set(chosen)]
  out, total = [], 0
  for x, r in keep:
    nbytes = dims[-1] * _compute_bytes(x)
    if total + nbytes > MAX_BYTES:
      continue
    total += nbytes
    out.append((x, r))
  return out


def _compute_bytes(x) -> int:
  ty = E.compute_type(x.dtype)
  if isinstance(ty, ir.IntType):
    return max(1, ty.width // 8)
  return 8 if isinstance(ty, ir.DoubleType) else 4


class RowCache:
  """The emitter's side of one row cache: ``slot`` (an array of one row of compute values),
  ``filling`` while the reduction that fills it is emitted, ``filled`` after it."""
  __slots__ = ("slot", "filling", "filled")

  def __init__(self, b, instr, n: int):
    ty = ir.ArrayType(E.compute_type(instr.dtype), n)
    self.slot = E.alloca_entry(b, ty, name=f"rowcache.{instr.name}")
    self.slot.align = 64
    self.filling = self.filled = False

  def element(self, b, index):
    return b.gep(self.slot, [E.i64(0), index.multi[-1]], inbounds=True)


def column_segments(dims, outputs, leafmap) -> list:
  """[(lo, hi)]: the column ranges of a rows-mode kernel's column loop (see the module
  docstring): cut at the part boundaries of every concatenate along the last dimension that the
  outputs ``outputs`` (of the kernel's ``dims``) reach through same-index edges; one range
  ``(0, n)`` when there is none, or the cuts would make more than ``MAX_SEGMENTS`` loops."""
  from ourjax.backends.llvm.elemental import concat_parts
  dims = tuple(dims)
  n = dims[-1]
  cuts, seen, stack = set(), set(), [i for i, _ in outputs]
  while stack:
    x = stack.pop()
    if id(x) in seen or x in leafmap:
      continue
    seen.add(id(x))
    if (x.opcode == "concatenate" and _dims(x) == dims
        and x.attrs["dimensions"][0] == len(dims) - 1):
      for _, off, size in concat_parts(x)[1]:
        cuts.update((off, off + size))
      continue
    stack.extend(o for o in x.operands if _same_index(x, o))
  if HALO_CUTS and n >= 4 * HALO and _shifted_concat(outputs, leafmap, n):
    cuts.update((HALO, n - HALO))
  bounds = sorted({0, n} | {c for c in cuts if 0 < c < n})
  if len(bounds) - 1 > MAX_SEGMENTS:
    return [(0, n)]
  return list(zip(bounds, bounds[1:]))


def _shifted_concat(outputs, leafmap, n) -> bool:
  """Whether the outputs reach a concatenate along the last dimension of a row's length ``n``
  (a ``roll``) through an edge that moves the index (a slice, a concatenate's part: a
  stencil's neighbours), not only through same-index ones."""
  seen, stack = set(), [(i, False) for i, _ in outputs]
  while stack:
    x, moved = stack.pop()
    if (id(x), moved) in seen or x in leafmap or x.shape.is_tuple:
      continue
    seen.add((id(x), moved))
    if (moved and x.opcode == "concatenate" and x.dims and x.dims[-1] == n
        and x.attrs["dimensions"][0] == len(x.dims) - 1):
      return True
    stack.extend((o, moved or not _same_index(x, o)) for o in x.operands)
  return False


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
