"""Side by side on the CPU: independent serial kernels in a row become the pieces of one
parallel kernel (``Horizontal``), so that threads run them at once.

A serial kernel runs on thread 0 while the pool's other threads wait.  An LSTM's forward scan
step stores a dozen residuals, each its own in-place ``dynamic-update-slice`` of 4096 elements
into its stacked array (about 1.5-2.5 us each, mostly writing cold memory): one after the other
on thread 0, with 15 threads idle on a 16-core host.  ``merge_steps`` groups runs of
consecutive steps inside loops and conditionals whose kernels are serial in-place updates
(``DynamicUpdateInPlace``) that neither read nor write what another of the run writes; each run
of two or more, ``MIN_WORK`` elements together, becomes one
``Horizontal`` kernel whose piece ``i`` is part ``i`` (called with ``nthreads = 1``: every part
whole; in general part ``i`` runs where ``i mod nthreads == tid``).  It is parallel, so inside a
loop whose kernels are compiled apart it runs as a job (``cpu/entry.py``).  Merging runs after
planning and before buffer assignment: the parts' buffers are all alive at the merged step, so
they get disjoint memory.  The GPU has its own (``cuda/horizontal.py``).
``OURJAX_CPU_HORIZONTAL=0`` turns it off.
"""
from __future__ import annotations

from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import i64

__all__ = ["Horizontal", "merge_steps", "MAX_PARTS"]

#: Most parts in one merged kernel (a piece each: ``kernels.MAX_CHUNKS``).
MAX_PARTS = K.MAX_CHUNKS
#: Least elements the parts of a merged kernel store together.  Inside a loop the merged kernel
#: is a job of the loop's region, whose publication, claims and wait cost thread 0 a microsecond
#: or two on an idle host (far more with its cores busy): the LSTM step's 13 stores of 4096
#: elements took 25-30 us one after the other; a tiny scan's stores would take less than the job.
MIN_WORK = 1 << 15

#: The kernel classes merged (serial, independent of the thread count, no scratch).
_PARTS = (K.DynamicUpdateInPlace,)


class Horizontal(K.Kernel):
  """``parts`` (independent serial kernels) as the pieces of one parallel kernel."""

  def __init__(self, name, parts):
    self.parts = list(parts)
    reads, writes, seen = [], [], set()
    for p in self.parts:
      for x in p.writes:
        if id(x) not in seen:
          seen.add(id(x))
          writes.append(x)
    for p in self.parts:
      for x in p.reads:
        if id(x) not in seen:
          seen.add(id(x))
          reads.append(x)
    super().__init__(name, reads, writes, work=sum(p.work for p in self.parts))

  @property
  def parallel(self) -> bool:
    return len(self.parts) >= 2

  @property
  def chunks(self) -> int:
    return len(self.parts)

  @property
  def symbols(self) -> list:
    return [s for p in self.parts for s in getattr(p, "symbols", ())]

  def body(self, b, ptr, tid, nthreads):
    for i, p in enumerate(self.parts):
      mine = b.icmp_signed("==", b.srem(i64(i), nthreads), tid)
      with b.if_then(mine):
        p.body(b, ptr, i64(0), i64(1))


def _mergeable(step, step_type) -> bool:
  k = getattr(step, "kernel", None)
  return (isinstance(step, step_type) and type(k) in _PARTS and not k.parallel
          and not k.scratch)


def merge_steps(steps, planner, step_type, top: bool = True):
  """``steps`` with runs of mergeable, mutually independent kernels inside loops and
  conditionals as ``Horizontal`` kernels (the top level's stay: a program of serial kernels
  runs on its caller's thread without waking the pool); ``planner.kernels`` updated to match."""
  for s in steps:
    for name in ("cond_steps", "body_steps"):
      sub = getattr(s, name, None)
      if sub:
        setattr(s, name, merge_steps(sub, planner, step_type, False))
    if getattr(s, "branches", None):
      s.branches = [merge_steps(br, planner, step_type, False) for br in s.branches]
  if top:
    return steps
  out, run = [], []

  def flush():
    if len(run) >= 2 and sum(s.kernel.work for s in run) >= MIN_WORK:
      parts = [s.kernel for s in run]
      h = Horizontal(parts[0].name + "h", parts)
      h.hlo_group = getattr(parts[0], "hlo_group", None)
      at = min(planner.kernels.index(p) for p in parts)
      ids = {id(p) for p in parts}
      planner.kernels[:] = [k for k in planner.kernels if id(k) not in ids]
      planner.kernels.insert(min(at, len(planner.kernels)), h)
      out.append(step_type(h))
    else:
      out.extend(run)
    run.clear()

  for s in steps:
    if _mergeable(s, step_type) and len(run) < MAX_PARTS and all(
        _independent(s.kernel, r.kernel) for r in run):
      run.append(s)
      continue
    flush()
    if _mergeable(s, step_type):
      run.append(s)
    else:
      out.append(s)
  flush()
  return out


def _independent(a, b) -> bool:
  """Neither kernel writes what the other reads or writes."""
  def ids(bufs):
    out = set()
    for x in bufs:
      out.add(id(x))
      src = getattr(x, "source", None)
      if src is not None:
        out.add(id(src))
    return out
  wa, wb = ids(a.writes), ids(b.writes)
  return not (wa & (ids(b.reads) | wb) or wb & ids(a.reads))


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
