"""Buffer assignment of a planned entry (the second half of ``planning``'s docstring): the
temporaries of the steps get their places, inside an output not yet written while they live
(``_hosted``) or at arena offsets by a first-fit over their live ranges (``_arena``), after a
header the backend asks for (the CPU's profiling counters, ``cpu/profiling.py``).  The CPU
entry's dispatch words are not here: the thread pool owns them (``cpu/threads.py``), so the
arena holds only the program's buffers.  Moved out of planning.py, which makes the steps."""
from __future__ import annotations

from ourjax.backends.llvm.planning import ALIGN, CondStep, KernelStep, Planner, WhileStep


def _header_bytes(header: int = 0) -> int:
  """Bytes before the first temporary: ``header`` (the CPU's profiling counters) aligned."""
  return (header + ALIGN - 1) // ALIGN * ALIGN


def _assign(planner: Planner, steps, header: int = 0, skip=frozenset(),
            host_scratch: bool = False, aligned_min=None) -> int:
  """Give every temporary a place by a first-fit over live ranges: inside an output buffer
  that is not written yet while the temporary lives (``_hosted``), else in the arena from
  ``header`` bytes on (aligned); returns the arena size in bytes.  ``skip``: ids of
  temporaries placed elsewhere by the backend (the CPU's on the entry's stack), given no
  place here.  ``host_scratch``: a dot's per-thread
  scratch may live in an output too (the backend passes each thread its area from wherever
  the buffer is); ``aligned_min``: outputs of at least this many bytes are 64-byte aligned by
  the backend, so a packed B may live in them (None: none is)."""
  from ourjax.backends.llvm.dots import PackBKernel
  header = _header_bytes(header)
  first, last = {}, {}
  order = []
  out_first, outputs = {}, []     # output buffer -> the first step that touches it
  loop_start = []                 # (the outermost loop around the step being walked)
  packed = set()                  # (PackBKernel results: stored with aligned vectors)

  def touch(buf, t):
    if buf.kind == "output":
      k = id(buf)
      if k not in out_first:
        out_first[k] = loop_start[0] if loop_start else t
        outputs.append(buf)
      return
    if buf.kind not in ("temp", "scratch") or id(buf) in skip:
      return
    if buf.nbytes == 0:     # (nothing to hold: a GEMM's scratch when it packs nothing)
      buf.home, buf.offset = None, 0
      return
    k = id(buf)
    if k not in first:
      first[k] = t
      order.append(buf)
    last[k] = max(last.get(k, t), t)

  def walk(steps, t, loops):
    for s in steps:
      if isinstance(s, KernelStep):
        if isinstance(s.kernel, PackBKernel):
          packed.add(id(s.kernel.packed))
        for buf in s.kernel.buffers:
          touch(buf, t)
          if id(buf) not in first:
            continue
          for (ls, le) in loops:   # used inside a loop but defined before it: live to its end
            if first[id(buf)] < ls:
              last[id(buf)] = max(last[id(buf)], le)
        t += 1
      elif isinstance(s, WhileStep):
        start = t
        end = start + _count(s.cond_steps) + _count(s.body_steps) + 1
        touch(s.pred, t)
        for (ls, le) in loops:
          if id(s.pred) in first and first[id(s.pred)] < ls:
            last[id(s.pred)] = max(last[id(s.pred)], le)
        inner = loops + [(start, end)]
        loop_start.append(start)
        if s.double_buffered:   # the next state holds the carry every other iteration
          for c in s.copies_back:
            touch(c.src, start)
            touch(c.src, end - 1)
        t = walk(s.cond_steps, t, inner)
        touch(s.pred, t)
        t = walk(s.body_steps, t, inner)
        loop_start.pop()
        t = end
      elif isinstance(s, CondStep):
        touch(s.selector, t)
        t += 1
        for br in s.branches:
          t = walk(br, t, loops)
    return t

  walk(steps, 0, [])
  # a buffer first used inside a loop but read before written in a later iteration cannot
  # exist (values are defined before use in every iteration), so intervals are enough.
  spans = [(buf, (max(buf.nbytes, 1) + ALIGN - 1) // ALIGN * ALIGN, first[id(buf)],
            last[id(buf)]) for buf in order]
  for sp in spans:
    sp[0].home = None
  best, chosen = _arena(spans, header), {}
  # (temporaries only, then also scratch and packed B where allowed: the outputs' room goes
  # to the largest first, which need not leave the smaller arena)
  tries = [(False, None)] + ([(host_scratch, aligned_min)]
                             if host_scratch or aligned_min is not None else [])
  for hs, am in tries:
    hosted = _hosted(spans, outputs, out_first, packed, hs, am)
    if hosted:
      rest = _arena([sp for sp in spans if id(sp[0]) not in hosted], header)
      if rest[1] <= best[1]:
        best, chosen = rest, hosted
  for sp in spans:
    if id(sp[0]) in chosen:
      sp[0].home, sp[0].offset = chosen[id(sp[0])]
  for buf, off in best[0]:
    buf.offset = off
  return best[1]


def _arena(spans, header: int):
  """([(buffer, offset)], the arena's top) of ``spans`` ((buffer, aligned size, first step,
  last step)) placed by a first-fit in the order of first use, and (as XLA's heap simulator
  also tries) in orders of decreasing size: the smaller arena wins (the first on a tie)."""
  orders = [sorted(spans, key=lambda x: (x[2], -x[1]))]
  if len(spans) <= _BEST_OF_MAX:
    orders.append(sorted(spans, key=lambda x: (-x[1], x[2])))
    orders.append(sorted(spans, key=lambda x: (-x[1] * (x[3] - x[2] + 1), x[2])))
    orders.append(sorted(spans, key=lambda x: (-(x[3] - x[2]), -x[1], x[2])))
  best = None
  for spans_in_order in orders:
    offsets, top = _first_fit(spans_in_order, header)
    if best is None or top < best[1]:
      best = offsets, top
  return best


#: Programs with more temporaries than this are placed in one order only (the other is
#: quadratic in the number of temporaries: 400 took ~40 ms on the 2-core host).
_BEST_OF_MAX = 400


def _hosted(spans, outputs, out_first, packed, host_scratch=False, aligned_min=None) -> dict:
  """{id(temporary): (output slot, offset)}: temporaries placed inside output buffers, each in
  one that no step touches until after the temporary's last use (XLA's buffer assignment
  shares an output's allocation with values that die before it is defined likewise), largest
  first, at the lowest 64-byte offset where it overlaps no temporary placed there before it
  and live at the same time.  Scratch (a GEMM's areas per thread, which align themselves)
  only with ``host_scratch``; packed B panels, which rely on 64-byte alignment, only in
  outputs of at least ``aligned_min`` bytes, which the backend aligns so; everything of
  outputs that a donated parameter may alias stays in the arena."""
  hosts = [o for o in outputs if not o.donated and o.nbytes >= ALIGN and o.slot is not None]
  if not hosts:
    return {}
  hosts.sort(key=lambda o: -out_first[id(o)])
  placed = {id(o): [] for o in hosts}
  out = {}
  for buf, size, f, last in sorted(spans, key=lambda x: (-x[1], x[2])):
    scratch = buf.kind == "scratch" or buf.slot_bytes is not None
    if buf.kind not in ("temp", "scratch") or (scratch and not host_scratch):
      continue
    for o in hosts:
      if out_first[id(o)] <= last:
        break      # (hosts by their first touch, latest first: none later fits either)
      if id(buf) in packed and (aligned_min is None or o.nbytes < aligned_min):
        continue
      busy = sorted((a, e) for a, e, pf, pl in placed[id(o)] if pf <= last and f <= pl)
      off = 0
      for a, e in busy:
        if off + size <= a:
          break
        off = max(off, e)
      if off + buf.nbytes <= o.nbytes:
        placed[id(o)].append((off, off + size, f, last))
        out[id(buf)] = (o.slot, off)
        break
  return out


#: Programs with more temporaries than this are placed in one order only (the other is
#: quadratic in the number of temporaries: 400 took ~40 ms on the 2-core host).
_BEST_OF_MAX = 400


def _first_fit(spans, header: int):
  """[(buffer, offset)] and the arena's top: each of ``spans`` ((buffer, aligned size, first
  step, last step), in order) at the lowest offset from ``header`` where it overlaps no
  buffer placed before it that is live at the same time."""
  placed, out, top = [], [], header
  by_first = all(a[2] <= b[2] for a, b in zip(spans, spans[1:]))
  for buf, size, f, last in spans:
    if by_first:       # (what was placed is live at f if it ends at f or later)
      placed = [a for a in placed if a[3] >= f]
    busy = sorted((o, e) for o, e, pf, pl in placed if pf <= last and f <= pl)
    off = header
    for a_off, a_end in busy:
      if off + size <= a_off:
        break
      off = max(off, a_end)
    placed.append((off, off + size, f, last))
    out.append((buf, off))
    top = max(top, off + size)
  return out, top


def _count(steps) -> int:
  n = 0
  for s in steps:
    if isinstance(s, KernelStep):
      n += 1
    elif isinstance(s, WhileStep):
      n += _count(s.cond_steps) + _count(s.body_steps) + 1
    elif isinstance(s, CondStep):
      n += 1 + sum(_count(b) for b in s.branches)
  return n
