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
holds the segment.  Same values, a quarter of the work for four parts.  The same holds where a
concatenate is read at moved positions (a ``roll`` read by a stencil at its neighbours, or read
there instead of stored, ``READ_MOVED``): the cuts follow the shifts the index takes on the way
(``_column_cuts``), so that in every segment each such read falls in one part and its loads are
contiguous vector loads (a select per element between two clamped positions became vector
gathers).  For rolls by a few positions that leaves a loop over the middle of the row and a few
columns at each end, which stay one loop of selects (``MIN_SEGMENT``); the middle runs from and
to multiples of ``ALIGN_COLUMNS``, its last few columns in a loop of their own.  A flat kernel
of one dimension is cut the same way (its positions are its row's columns), each thread's share
of them segment by segment.  Stencils of rolls of stored values ran 1.8-2.1x faster cut (two
levels of rolls on (64, 4096) and (256, 256) f32, one thread) and 1-D ones 1.6-6x (65536 f32,
two threads); one level of rolls on (64, 4096) as fast (memory-bound).
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
#: Ranges narrower than this that follow one another in a row's column loop are one loop (see
#: ``column_segments``): the few columns at a row's ends where a stencil's rolls wrap around.
MIN_SEGMENT = 8
#: A cut range of the column loop (at least four times this many columns) is a loop from and to
#: multiples of this many columns, with the columns before and after it in loops of their own:
#: the vectorized loop then has no scalar remainder (LLVM left the 12 columns a (2, 4096) RK4
#: row's range [2, 4094) has past multiples of 16 to scalar code, 6% of the kernel).
ALIGN_COLUMNS = 16
#: Most reads ``_column_cuts`` follows in a kernel (positions of instructions at a shift).
MAX_WALK = 4096
#: Whether the CPU asks ``recompute_outputs`` to read an output that only moves a stored
#: value's elements (a roll) there, at the moved positions, instead of storing it
#: (``Module.read_moved``).  It took the RK4 scan of models.py (2 x 4096 state) from 217 to 184
#: KB (JAX: 184) and its loop from 24.4k to 22.9k cycles a step (2-core EPYC, one thread, the
#: least of ~300 calls), with the cuts above; with the row's ends cut 32 columns wide instead
#: (fixed, not the rolls' own shifts) it was slower than the rolls stored, 2.4x slower uncut.
#: Off: on two threads (the default on the 2-core EPYC, quiet, ``models.py --only ode_rk4
#: --repeat 5``, alternating) its step was 14.9 and 16.4 ms read in place against 10.4 and 11.8
#: stored, and 30.6 ms against 25-27 on the 16-core Xeon.
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
    # (named without the instruction's name: kernels alike but for their HLO names have the
    # same IR text, which the entry's dedupe and kernel_key's check compare)
    self.slot = E.alloca_entry(b, ty, name="rowcache")
    self.slot.align = 64
    self.filling = self.filled = False

  def element(self, b, index):
    return b.gep(self.slot, [E.i64(0), index.multi[-1]], inbounds=True)


def column_segments(dims, outputs, leafmap) -> list:
  """[(lo, hi)]: the column ranges of a rows-mode kernel's column loop (see the module
  docstring): cut wherever a concatenate along the last dimension that the outputs
  ``outputs`` (of the kernel's ``dims``) reach, at whatever shift of the column
  (``_column_cuts``), changes the part that holds the element; runs of two or more ranges
  narrower than ``MIN_SEGMENT`` joined into one (the rows' ends of a stencil: there its
  concatenates stay selects of clamped reads); one range ``(0, n)`` when there is no cut, or
  the cuts would make more than ``MAX_SEGMENTS`` loops."""
  n = tuple(dims)[-1]
  cuts = _column_cuts(n, outputs, leafmap)
  bounds = sorted({0, n} | {c for c in cuts if 0 < c < n})
  segments = list(zip(bounds, bounds[1:]))
  joined: list = []
  run = 0                      # how many narrow ranges joined[-1] holds
  for lo, hi in segments:
    narrow = hi - lo < MIN_SEGMENT
    if narrow and run:
      joined[-1] = (joined[-1][0], hi)
      run += 1
    else:
      joined.append((lo, hi))
      run = 1 if narrow else 0
  if len(joined) > MAX_SEGMENTS:
    return [(0, n)]
  if len(joined) == 1:
    return joined
  aligned = [p for lo, hi in joined for p in _aligned(lo, hi)]
  return aligned if len(aligned) <= MAX_SEGMENTS else joined


def _aligned(lo, hi) -> list:
  """A range of ``4 * ALIGN_COLUMNS`` columns or more as its main part, from and to multiples of
  ``ALIGN_COLUMNS``, and the columns before and after it (fewer than ``ALIGN_COLUMNS`` each)."""
  a = ALIGN_COLUMNS
  if hi - lo < 4 * a:
    return [(lo, hi)]
  start = -(-lo // a) * a
  end = start + (hi - start) // a * a
  return [(x, y) for x, y in ((lo, start), (start, end), (end, hi)) if x < y]


def _column_cuts(n, outputs, leafmap) -> set:
  """The columns (of a row of ``n``) where a concatenate along the last dimension changes
  part: walks from the outputs (column ``c`` read at ``c``) down every edge that hands the
  operand the column moved by a known shift -- ``0`` for elementwise ops, identity
  broadcasts and reshapes of the last dimension, concatenates along another dimension, ``+s``
  for a slice starting at ``s``, ``-off`` into the part at ``off`` of a concatenate along it:
  what ``Emitter.ranges`` follows -- with the columns each such read serves (a part of a
  concatenate serves only the columns that land in it).  A concatenate read at ``c + s`` over
  columns ``[lo, hi)`` is cut where ``c + s`` crosses a part's bounds.  At most ``MAX_WALK``
  reads are followed (the cuts found so far are kept: a cut is never wrong, only a loop
  more)."""
  cuts: set = set()
  seen: set = set()
  stack = [(i, 0, 0, n) for i, _ in outputs if _dims(i) and _dims(i)[-1] == n]
  while stack and len(seen) < MAX_WALK:
    x, s, lo, hi = stack.pop()
    key = (id(x), s, lo, hi)
    if key in seen or x in leafmap:
      continue
    seen.add(key)
    if x.opcode == "concatenate" and x.attrs["dimensions"][0] == len(x.dims) - 1:
      from ourjax.backends.llvm.elemental import concat_parts
      for o, off, size in concat_parts(x)[1]:
        a, z = max(lo, off - s), min(hi, off + size - s)
        if a < z:
          cuts.update((a, z))
          stack.append((o, s - off, a, z))
      continue
    for o, shift in _column_edges(x):
      stack.append((o, s + shift, lo, hi))
  return cuts


def _column_edges(x) -> list:
  """[(operand, shift)]: the operands of ``x`` whose last-dimension index the emitter makes
  from ``x``'s, as the same value moved by ``shift`` (so ``Emitter.ranges`` follows it).
  Concatenates along the last dimension are ``_column_cuts``' own."""
  dims = _dims(x)
  if not dims or x.opcode in ("reduce", "parameter", "constant"):
    return []
  out = []
  for o in x.operands:
    od = _dims(o)
    if not od or od[-1] != dims[-1] and x.opcode != "slice":
      continue
    op = x.opcode
    if op == "slice":
      strides = x.attrs.get("strides") or (1,) * len(od)
      if strides[-1] == 1:
        out.append((o, x.attrs["start_indices"][-1]))
    elif op == "concatenate" or _same_index(x, o):
      out.append((o, 0))
    elif op == "broadcast":
      if x.attrs["dimensions"] and x.attrs["dimensions"][-1] == len(dims) - 1 and od[-1] != 1:
        out.append((o, 0))
    elif op == "reshape" and dims[-1] != 1:
      groups = hlo.reshape_groups(od, dims)
      if groups:
        (s0, s1), (d0, d1) = groups[-1]
        if [k for k in od[s0:s1] if k != 1] == [k for k in dims[d0:d1] if k != 1]:
          out.append((o, 0))
    elif op == "transpose":
      if x.attrs["dimensions"][-1] == len(dims) - 1:
        out.append((o, 0))
  return out


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
