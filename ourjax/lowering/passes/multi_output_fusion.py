"""Multi-output fusion: merge fusions that would otherwise hand arrays to each other through
memory. Runs after ``fusion``; every decision is noted with its reason.

Two merges:

producer-consumer
    A fusion P whose result a fusion C reads is merged into C. When P's result is also needed
    elsewhere it becomes an extra output of the merged fusion (a tuple root; the other users
    read it with get-tuple-element). This covers what instruction fusion must refuse: an
    expensive producer with several users (softmax's ``exp`` feeding both the row sum and the
    division: computed once, written once, never read back), and the consumers of a reduction
    (a reduction epilogue: softmax's division by the row sum, layernorm's normalisation).
siblings
    Two fusions that read the same array are merged so that it is read once (the max and the
    sum of one input; the mean and the mean of squares).

Legality, in the words the notes use:

* both fusions have an iteration space (``fusion.Space``) and the spaces combine: two loops
  over the same shape; a loop over a reduction's input shape (computed alongside the
  reduction) or over its kept shape (an epilogue, computed once a result element is complete);
  two reductions of the same shape over the same dimensions. Output fusions (dots) are not
  merged;
* the consumer reads the producer's results at the index it computes them (elementwise),
  except that a row reduction's results (reduced over the trailing dimensions) may also be
  read through a row broadcast, since a row is complete before its elements are revisited;
* no cycle: the consumer does not also depend on the producer through some other instruction
  (for siblings: neither depends on the other);
* the merged fusion takes at most ``fusion.MAX_FUSION_PARAMETERS`` operands.
"""
from __future__ import annotations

from ourjax.lowering.hlo import Builder, Computation, Instruction, Module
from ourjax.lowering.passes import fusion as fz
from ourjax.lowering.passes.fusion import Decision, Space, space_of

__all__ = ["run", "combine"]

PASS = "multi_output_fusion"

#: Rounds of (producer-consumer, siblings) merging per computation.
MAX_ROUNDS = 8
#: Siblings are merged only when the array they share has at least this many elements.
MIN_SHARED_ELEMENTS = 2


def combine(a: Space, b: Space) -> Space | None:
  """The space of a fusion doing the work of both, or None."""
  if a.kind == "loop" and b.kind == "loop":
    return a if a.dims == b.dims else None
  if a.kind == "loop":
    a, b = b, a
  if b.kind == "loop":
    return a if b.dims in (a.dims, a.kept) else None
  return a if a == b else None


def _ports(f: Instruction) -> list:
  return list(range(len(f.shape.tuple_shapes))) if f.shape.is_tuple else [None]


def _port_values(f: Instruction, k) -> list[Instruction]:
  """The top-level instructions that carry output ``k`` of ``f`` (``f`` itself, or its
  get-tuple-elements of index ``k``)."""
  if k is None:
    return [f]
  return [g for g in f.users if g.opcode == "get-tuple-element" and g.attrs["index"] == k]


def _producer_of(o: Instruction) -> Instruction | None:
  if o.opcode == "fusion":
    return o
  if o.opcode == "get-tuple-element" and o.operands[0].opcode == "fusion":
    return o.operands[0]
  return None


def _same_index_use(x: Instruction, hits: list[int], sp: Space) -> bool:
  """Whether ``x``, reading (some of) its operands ``hits`` from the producer, reads them at
  the index it computes, in the merged space ``sp``."""
  op = x.opcode
  if op in ("tuple", "get-tuple-element"):
    return True  # the root, or an element of a variadic reduce
  elementwise = x.is_elementwise() or (
      op == "bitcast-convert" and x.dtype.itemsize == x.operands[0].dtype.itemsize)
  if elementwise:
    level = (sp.dims,) if sp.kind == "loop" else (sp.dims, sp.kept)
    return x.dims in level and all(x.operands[k].dims == x.dims for k in hits)
  if op == "broadcast":
    return (sp.row and x.operands[0].dims == sp.kept and x.dims == sp.dims
            and tuple(x.attrs["dimensions"]) == tuple(range(len(sp.kept))))
  if op == "reduce":
    n = len(x.operands) // 2
    return (sp.kind == "reduce" and all(k < n for k in hits) and x.operands[0].dims == sp.dims
            and tuple(sorted(x.attrs["dimensions"])) == sp.reduced)
  return False


def _bad_read(consumer: Instruction, producer: Instruction, sp: Space) -> Instruction | None:
  """The first instruction of ``consumer`` that reads ``producer``'s results at another index
  (or None if all reads are at the same index)."""
  fc = consumer.attrs["calls"]
  tainted = {p for p, o in zip(fc.parameters, consumer.operands) if _producer_of(o) is producer}
  for x in fc.instructions:
    if x in tainted:
      continue
    hits = [k for k, o in enumerate(x.operands) if o in tainted]
    if not hits:
      continue
    if not _same_index_use(x, hits, sp):
      return x
    tainted.add(x)
  return None


def _move_into(b: Builder, i: Instruction, operands) -> Instruction:
  """``i``, an instruction of a fused computation that is dropped after the merge, moved to
  the end of ``b``'s computation, reading ``operands``: what ``fusion.clone_into`` would add,
  without a copy (its name, unique in the module, stays).  Its users there are moved after
  it (the computation's order is topological), and register themselves again."""
  comp = b.computation
  i.operands = list(operands)
  i.users = []
  i.parent = comp
  for o in (i.operands if len(i.operands) < 2 else dict.fromkeys(i.operands)):
    o.users.append(i)
  comp.instructions.append(i)
  return i


class _Merger:
  def __init__(self, module: Module, comp: Computation):
    self.module, self.comp = module, comp
    self.noted = set()
    self.pos: dict[Instruction, int] = {}
    self.spaces: dict[Instruction, Space | None] = {}
    self.renumber()

  def space(self, f: Instruction) -> Space | None:
    if f not in self.spaces:
      self.spaces[f] = space_of(f)
    return self.spaces[f]

  def renumber(self):
    self.pos = {i: k for k, i in enumerate(self.comp.instructions)}

  def renumber_span(self, a: int, b: int) -> None:
    """Positions for the instructions ``a:b`` of the computation, the others unchanged (the
    positions only order the instructions: those of a merge's window go between their
    neighbours' instead of numbering the whole computation again after every merge)."""
    insts, pos = self.comp.instructions, self.pos
    n = b - a
    lo = pos[insts[a - 1]] if a > 0 else None
    hi = pos[insts[b]] if b < len(insts) else None
    if hi is None:
      start, step = (lo if lo is not None else -1) + 1, 1
    elif lo is None:
      start, step = hi - n, 1
    else:
      step = (hi - lo) / (n + 1)
      start = lo + step
      if step < 1e-6:         # (the gaps are used up: number them all again)
        self.renumber()
        return
    for k in range(n):
      pos[insts[a + k]] = start + k * step

  def note(self, text):
    if text not in self.noted:
      self.noted.add(text)
      self.module.note(PASS, text)

  # -- analysis --------------------------------------------------------------------------------
  def depends(self, a: Instruction, b: Instruction, skip_direct: bool = False):
    """An operand of ``a`` through which ``a`` depends on ``b`` (None if it does not). With
    ``skip_direct``, ``a``'s direct reads of ``b``'s results do not count."""
    pos, pb = self.pos, self.pos[b]
    for start in a.operands:
      if skip_direct and _producer_of(start) is b:
        continue
      stack, seen = [start], set()
      while stack:
        x = stack.pop()
        if x is b:
          return start
        if x in seen or pos[x] < pb:
          continue
        seen.add(x)
        stack.extend(x.operands)
    return None

  def outside_users(self, f: Instruction, members) -> list[Instruction]:
    out = []
    for k in _ports(f):
      for v in _port_values(f, k):
        out += [u for u in v.users if u not in members]
        if v is self.comp.root:
          out.append(v)
    return out

  def too_many_operands(self, a, b) -> int:
    ops = {o for o in a.operands + b.operands
           if _producer_of(o) not in (a, b)}
    return len(ops) if len(ops) > fz.MAX_FUSION_PARAMETERS else 0

  def decide_producer(self, p: Instruction, c: Instruction) -> Decision:
    no = lambda why: Decision(False, why)  # noqa: E731
    sp, sc = self.space(p), self.space(c)
    if sp is None or sc is None:
      f = p if sp is None else c
      return no(f"%{f.name} ({f.attrs['kind']}) has no single iteration space")
    sm = combine(sp, sc)
    if sm is None:
      return no(f"iteration spaces differ: {sp} vs {sc}")
    bad = _bad_read(c, p, sm)
    if bad is not None:
      return no(f"%{bad.name} reads the producer's result at other indices")
    via = self.depends(c, p, skip_direct=True)
    if via is not None:
      return no(f"%{c.name} also depends on %{p.name} through %{via.name} (a cycle)")
    n = self.too_many_operands(p, c)
    if n:
      return no(f"the merged fusion would take {n} operands")
    read = {o.dims for o in c.operands if _producer_of(o) is p}
    if sp.kind == "reduce" and sp.kept != sp.dims and sp.kept in read:
      why = f"reduction epilogue: %{c.name} uses the reduced result"
    else:
      why = f"%{p.name}'s result is computed where %{c.name} reads it"
    others = self.outside_users(p, {c})
    if others:
      u = others[0]
      why += ("; it stays an output (the computation's result)" if _producer_of(u) is p
              else f"; it stays an output for %{u.name}")
    return Decision(True, f"{why} ({sm})")

  def decide_siblings(self, a: Instruction, b: Instruction, x: Instruction) -> Decision:
    """(``a`` before ``b``, and ``b`` does not depend on ``a``: checked by the caller.)"""
    no = lambda why: Decision(False, why)  # noqa: E731
    sm = combine(self.space(a), self.space(b))
    if sm is None:
      return no(f"iteration spaces differ: {self.space(a)} vs {self.space(b)}")
    n = self.too_many_operands(a, b)
    if n:
      return no(f"the merged fusion would take {n} operands")
    return Decision(True, f"both read %{x.name}, which is then read once ({sm})")

  def earlier_dependencies(self, users: list[Instruction]) -> dict:
    """For each of ``users`` (in schedule order), the earlier ones it depends on. One walk per
    user, which stops at earlier users (their own dependencies are known by then)."""
    uset, lo, deps = set(users), self.pos[users[0]], {}
    for u in users:
      d, seen, stack = set(), set(), list(u.operands)
      while stack:
        y = stack.pop()
        if y in seen or self.pos[y] < lo:
          continue
        seen.add(y)
        if y in uset:
          d.add(y)
          d |= deps[y]
        else:
          stack.extend(y.operands)
      deps[u] = d
    return deps

  # -- merging ---------------------------------------------------------------------------------
  def merge(self, members: list[Instruction], output_order: list[Instruction]) -> Instruction:
    """Replace the fusions ``members`` (in topological order) by one fusion computing all of
    them; its outputs are the members' outputs still needed outside, in ``output_order``."""
    comp, module = self.comp, self.module
    mset = set(members)
    outs = []
    for f in output_order:
      for k in _ports(f):
        if any(v is comp.root or any(u not in mset for u in v.users)
               for v in _port_values(f, k)):
          outs.append((f, k))
    if not outs:
      outs.append((output_order[0], _ports(output_order[0])[0]))
    b = Builder(module, "fusion_body")
    operands, params, roots, inner = [], {}, {}, {}

    def port(f, k):
      if (f, k) not in inner:
        r = roots[f]
        inner[(f, k)] = r if k is None else r[k] if isinstance(r, list) else \
            b.get_tuple_element(r, k)
      return inner[(f, k)]

    def resolve(o):
      if o in mset:
        return port(o, None)
      if o.opcode == "get-tuple-element" and o.operands[0] in mset:
        return port(o.operands[0], o.attrs["index"])
      if o not in params:
        params[o] = fz.new_parameter(b, o.shape)
        operands.append(o)
      return params[o]

    # (the members' computations go with them: their instructions move into the merged one
    # instead of being copied, unless one computation is called twice)
    move = len({id(f.attrs["calls"]) for f in members}) == len(members)
    for f in members:
      sub, local = f.attrs["calls"], {}

      def get(i, f=f, local=local):
        if i.opcode == "parameter":
          return resolve(f.operands[i.attrs["parameter_number"]])
        return local[i]
      for i in list(sub.instructions):
        if i.opcode == "parameter" or (i is sub.root and i.opcode == "tuple"):
          continue
        ops = [get(o) for o in i.operands]
        local[i] = (_move_into(b, i, ops) if move else
                    fz.clone_into(b, i, ops, from_fused=True))
      r = sub.root
      roots[f] = [get(o) for o in r.operands] if r.opcode == "tuple" else get(r)
    values = [port(f, k) for f, k in outs]
    fused = b.build(values[0] if len(values) == 1 else b.tuple(values))
    fz.dedupe(fused)
    kind = "kInput" if any(f.attrs["kind"] == "kInput" for f in members) else "kLoop"
    first, last = members[0], members[-1]
    # What reads the first member's results between the two members must move after the
    # merged fusion (nothing else there depends on it: the merge was checked for cycles).
    moved, end = set(), self.pos[last]
    stack = [u for k in _ports(first) for v in _port_values(first, k) for u in v.users]
    while stack:
      u = stack.pop()
      if u not in moved and u not in mset and self.pos[u] < end:
        moved.add(u)
        stack.extend(u.users)
    first_at = comp.instructions.index(first)
    new = fz.add_fusion(comp, operands, fused, kind, before=last)
    top = Builder.into(comp, before=last)
    gtes = []
    for n, (f, k) in enumerate(outs):
      value = new
      if len(outs) > 1:
        value = top.get_tuple_element(new, n)
        gtes.append(value)
      for v in _port_values(f, k):
        comp.replace_all_uses(v, value)
    pos = self.pos
    for f in reversed(members):
      for g in list(f.users):
        if g.opcode == "get-tuple-element" and not g.users and g is not comp.root:
          comp.remove(g)
          pos.pop(g, None)
      comp.remove(f)
      pos.pop(f, None)
      module.remove_computation(f.attrs["calls"])
    insts = comp.instructions
    at = insts.index(new)
    window = insts[first_at:at]
    insts[first_at:at + 1 + len(gtes)] = ([x for x in window if x not in moved] + [new] + gtes
                                          + [x for x in window if x in moved])
    self.renumber_span(first_at, at + 1 + len(gtes))
    return new

  # -- rounds ----------------------------------------------------------------------------------
  def producer_consumer(self) -> bool:
    changed = False
    for c in list(self.comp.instructions):
      while c.parent is self.comp and c.opcode == "fusion":
        merged = None
        for p in dict.fromkeys(filter(None, map(_producer_of, c.operands))):
          d = self.decide_producer(p, c)
          if not d:
            self.note(f"not merging %{p.name} into %{c.name}: {d.reason}")
            continue
          self.note(f"merged %{p.name} into %{c.name}: {d.reason}")
          merged = self.merge([p, c], [c, p])
          break
        if merged is None:
          break
        c, changed = merged, True
    return changed

  def siblings(self) -> bool:
    changed = False
    for x in list(self.comp.instructions):
      if x.parent is not self.comp or x.shape.is_tuple or x.shape.size < MIN_SHARED_ELEMENTS:
        continue
      while True:
        users = []
        for u in dict.fromkeys(x.users):
          if u.opcode == "fusion" and self.space(u) is None:
            self.note(f"not merging %{u.name} with siblings: a {u.attrs['kind']} fusion has no "
                      "single iteration space")
          elif u.opcode == "fusion":
            users.append(u)
        if len(users) < 2:
          break
        users.sort(key=self.pos.get)
        deps = self.earlier_dependencies(users)
        pair, dependent = None, []
        for j, b in enumerate(users):
          for a in users[:j]:
            if a in deps[b]:
              dependent.append((a, b))
              continue
            d = self.decide_siblings(a, b, x)
            self.note(f"{'merged' if d else 'not merging'} siblings %{a.name} and %{b.name}: "
                      f"{d.reason}")
            if d:
              pair = (a, b)
              break
          if pair:
            break
        if dependent and not pair:
          shown = ", ".join(f"%{b.name} on %{a.name}" for a, b in dependent[:3])
          self.note(f"not merging siblings that read %{x.name} and depend on each other (a "
                    f"cycle): {shown}" + (f" and {len(dependent) - 3} more pair(s)"
                                          if len(dependent) > 3 else ""))
        if not pair:
          break
        self.merge(list(pair), list(pair))
        changed = True
    return changed


def run(module: Module) -> bool:
  changed = False
  for comp in fz.fusible_computations(module):
    m = _Merger(module, comp)
    for _ in range(MAX_ROUNDS):
      step = m.producer_consumer()
      step |= m.siblings()
      if not step:
        break
      changed = True
  if changed:
    fz.remove_unreachable_computations(module)
  return changed
