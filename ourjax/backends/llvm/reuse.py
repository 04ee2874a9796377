"""Buffer reuse between a value and the elementwise result computed from it (the CPU planner's
``reuse_buffers``), as XLA's buffer assignment shares the buffer of an operand that dies at an
elementwise instruction with its result:

* a group (fusion) whose result has the shape of a temporary operand that dies there, and that
  reads it only through elementwise operations ending at that result, computes the result in
  the operand's buffer (``share_results``);
* an entry output computed that way from such an operand has the operand computed straight in
  the output's buffer (``forward_outputs``: no temporary at all), as a dot does in the buffer
  of its consumer's output inside a group (``GroupPlanner._dot_home``), and so has the initial
  value of a loop's state element that ends in an output (it is not copied in).

* a fused value written to a planner-owned temporary (a convolution's input, which the GEMM
  packs its patches from) is read, not computed again, by later groups that compute the same
  value (``value_keys``, ``seed_computed``), and that input is computed over a convolution
  output it is made from elementwise when that output dies there or its later readers read it
  only through the input (``im2col.plan_sources``, ``read_only_through``): a ResNet's block
  outputs, duplicated by the fusion pass into each consumer, no longer keep every earlier
  convolution output alive.

Both are decided on the HLO (``outputs_reached``) and checked on the kernels planned
(``group_planner.overwrites_in_place``); a group whose kernels fail the check is planned again
without sharing (with a copy into an output that its operand was computed in).
"""
from __future__ import annotations

from ourjax.backends.llvm import kernels as K

_VIEWS = ("parameter", "constant", "tuple", "get-tuple-element", "reshape", "while",
          "conditional")
_IN_PLACE_ROOTS = ("dynamic-update-slice", "scatter")


def outputs_reached(starts, instrs, is_output):
  """The outputs of the group ``instrs`` (topological order, a tuple root last) that depend on
  the values ``starts``, when every value of the group that depends on them is elementwise over
  their shape (operands of one shape) or a reshape of one (the same row-major linear index)
  or a value over the rows (``by_rows``: the last dimension reduced, as a softmax does),
  except reductions of the outputs (``is_output``; the group's planner computes such an
  output first and the reduction reads it back from its buffer) and the root tuple; else
  None.  A loop kernel computing those outputs then reads each element of ``starts`` only
  where it writes that element of each output (or in its row, whose reductions it computes
  first), after evaluating them all (``kernels.store_outputs``), so any one of them may be
  written over a start's buffer."""
  group = {id(i) for i in instrs}
  root = instrs[-1] if instrs else None
  size = starts[0].shape.size
  full = tuple(starts[0].dims)
  outer = full[:-1]
  chain = {id(s) for s in starts}
  found, stack = [], list(starts)

  def by_rows(u) -> bool:
    """A value over the rows (the last dimension reduced, see ``reads_at_own_index``'s
    ``rows``) or its broadcast back."""
    if not full or u.shape.is_tuple:
      return False
    if u.opcode == "reduce":
      return (len(u.operands) == 2 and id(u.operands[1]) not in chain and
              sorted(u.attrs["dimensions"]) == [len(full) - 1] and
              tuple(u.operands[0].dims) == full)
    if u.opcode == "broadcast":
      return (tuple(u.dims) == full and tuple(u.operands[0].dims) == outer and
              list(u.attrs["dimensions"]) == list(range(len(outer))))
    return u.is_elementwise() and tuple(u.dims) == outer and all(
        tuple(o.dims) == outer for o in u.operands if id(o) in chain)
  while stack:
    x = stack.pop()
    for u in x.users:
      if id(u) not in group or id(u) in chain:
        continue
      if u is root and u.opcode == "tuple":
        continue
      if u.opcode == "reduce" and is_output(x):
        continue
      chain.add(id(u))
      if by_rows(u):
        stack.append(u)
        continue
      if u.shape.is_tuple or u.shape.size != size or not (
          u.opcode == "reshape" or u.is_elementwise() and
          all(tuple(o.dims) == tuple(u.dims) for o in u.operands if id(o) in chain)):
        return None
      if is_output(u):
        found.append(u)
      stack.append(u)
  return found


def _group(instr):
  """(instructions, root, outputs by index) of the group ``instr`` plans."""
  if instr.opcode == "fusion":
    fc = instr.attrs["calls"]
    root = fc.root
    outs = list(root.operands) if root.opcode == "tuple" else [root]
    return fc.instructions, root, outs
  return [instr], instr, [instr]


def reached_from(instr, operand):
  """The output indices of the group ``instr`` computed from its ``operand`` as
  ``outputs_reached`` allows (None when it does not, or ``instr`` is not such a group)."""
  if instr.opcode == "fusion":
    instrs, root, outs = _group(instr)
    if root.opcode in _IN_PLACE_ROOTS:
      return None
    fc = instr.attrs["calls"]
    starts = [p for p, o in zip(fc.parameters, instr.operands) if o is operand]
    if not starts:
      return None
    ids = {id(o) for o in outs}
    found = outputs_reached(starts, instrs, lambda u: id(u) in ids)
    if found is None:
      return None
    return sorted({k for k, o in enumerate(outs) for f in found if f is o})
  if instr.is_elementwise() and not instr.shape.is_tuple and \
     instr.shape.size == operand.shape.size:
    return [0]
  return None


def _plain(x) -> bool:
  """Whether the entry instruction ``x`` is planned into a buffer of its own (a group)."""
  from ourjax.backends.llvm.planning import _reshape_view
  if x.opcode in _VIEWS or x.shape.is_tuple or _reshape_view(x) is not None:
    return False
  if x.opcode in _IN_PLACE_ROOTS:
    return False
  return not (x.opcode == "fusion" and x.attrs["calls"].root.opcode in _IN_PLACE_ROOTS)


def forward_outputs(comp, want, last_use) -> dict:
  """Entry outputs whose group reads a dying operand only elementwise (``reached_from``): the
  operand is planned straight into the output's buffer (``want`` gets it).  Returns {group:
  [(buffer, output index)]} for ``share_results`` to check.  So is a scatter's dying operand
  (the scatter then updates the output in place, ``Planner._dying_operand``)."""
  pos = {i: k for k, i in enumerate(comp.instructions)}
  count = {}
  for d in want.values():
    count[id(d)] = count.get(id(d), 0) + 1
  forwarded = {}
  for key, d in list(want.items()):
    if isinstance(key, tuple):
      e, k = key[1], key[2]
    else:
      e, k = key, 0
    if not isinstance(d, K.Buf) or d.kind != "output" or d.donated or count[id(d)] != 1:
      continue
    if e.opcode == "while" and e.operands[0].opcode == "tuple":
      # a loop's state element that ends in an output starts there: its initial value, when
      # it dies at the loop, is computed straight in it (not copied in)
      init = e.operands[0].operands
      x = init[k] if k < len(init) else None
      if x is not None and x not in want and _plain(x) and last_use.get(x) == pos[e] and \
         sum(1 for o in init if o is x) == 1 and K.np.dtype(x.dtype) == d.dtype and \
         tuple(x.dims) == d.dims:
        want[x] = d
      continue
    if e.opcode in _VIEWS:
      continue
    if e.opcode == "scatter":
      # a scatter updates its operand in place when it dies there: the operand is then
      # computed straight in the output (planning: the scatter finds it there)
      x = e.operands[0]
      if x not in want and _plain(x) and last_use.get(x) == pos[e] and \
         sum(1 for o in e.operands if o is x) == 1 and K.np.dtype(x.dtype) == d.dtype and \
         tuple(x.dims) == d.dims:
        want[x] = d
      continue
    for x in e.operands:
      if x in want or not _plain(x) or last_use.get(x) != pos[e] or \
         K.np.dtype(x.dtype) != d.dtype or tuple(x.dims) != d.dims or \
         sum(1 for o in e.operands if o is x) != 1:
        continue
      if k not in (reached_from(e, x) or ()):
        continue
      want[x] = d
      forwarded.setdefault(e, []).append((d, k))
      break
  return forwarded


def share_results(instr, res, fresh, vals, last_use, pos, comp, forwarded):
  """``res`` (the group's result buffer or tuple of them) with fresh temporaries replaced by
  dying operands' buffers where ``reached_from`` allows (``fresh``: ids of the buffers made
  for this group), and the list of (buffer, output index) pairs that the planned kernels must
  then compute in place (with those of ``forwarded``)."""
  from ourjax.backends.llvm.planning import _dies_at
  shared = list(forwarded)
  elems = list(res) if isinstance(res, tuple) else [res]
  used = {id(b) for b in elems}
  for x in dict.fromkeys(instr.operands):
    spec = vals.get(x)
    if type(spec) is not K.Buf or spec.kind != "temp" or id(spec) in used or \
       not _dies_at(x, comp, last_use, pos):
      continue
    if any(vals.get(o) is spec for o in instr.operands if o is not x):
      continue
    ks = [k for k in reached_from(instr, x) or ()
          if id(elems[k]) in fresh and elems[k].dtype == spec.dtype and
          elems[k].dims == spec.dims and not any(elems[k] is s for s, _ in shared)]
    if not ks:
      continue
    k = ks[0]
    elems[k] = spec
    used.add(id(spec))
    shared.append((spec, k))
  res = tuple(elems) if isinstance(res, tuple) else elems[0]
  return res, shared


# ---------------------------------------------------------------------------------------------
# values read where they were written before, not recomputed
# ---------------------------------------------------------------------------------------------
# The fusion pass duplicates cheap elementwise producers into each consumer, so a ResNet's block
# output relu(bn(conv) + x), which feeds the next convolution and the next block's residual
# add, is recomputed by both from the convolution outputs that it depends on: each block's
# output is a chain over every earlier block's convolution output, all kept alive to the last
# block that recomputes it (the 2-core ResNet step held 3 of them more than XLA).  The planner
# writes such a value once anyway where a convolution reads it (the GEMM's patches are packed
# from it, ``im2col.plan_sources``); later groups that compute the same value read that
# buffer instead (``seed_computed``), and the chain's inputs die where it is first written.

def value_keys(fc, entry_of) -> dict:
  """{instruction of the fused computation ``fc``: key}: equal keys, equal values, for values
  made from the entry values ``entry_of(parameter)`` by elementwise ops, broadcasts, reshapes
  and scalar constants (others have none).  A key names at least one entry value."""
  keys = {}
  for i in fc.instructions:
    if i.opcode == "parameter":
      keys[i] = ("v", id(entry_of(i)))
      continue
    if i.opcode == "constant":
      v = K.np.asarray(i.attrs["value"])
      if v.size == 1:
        keys[i] = ("c", str(v.dtype), tuple(i.dims), v.tobytes())
      continue
    if not (i.is_elementwise() or i.opcode in ("broadcast", "reshape")) or i.shape.is_tuple:
      continue
    ops = [keys.get(o) for o in i.operands]
    if any(k is None for k in ops):
      continue
    try:
      attrs = repr(sorted((k, v) for k, v in i.attrs.items()))
    except TypeError:
      continue
    keys[i] = (i.opcode, str(i.dtype), tuple(i.dims), attrs, tuple(ops))
  return {i: k for i, k in keys.items() if _names_value(k)}


def _names_value(key) -> bool:
  if key[0] == "v":
    return True
  return key[0] != "c" and any(_names_value(k) for k in key[4])


def peeled_key(keys, x):
  """The key of ``x`` under its reshapes (a buffer holds the value in row-major order, which a
  reshape keeps)."""
  while x.opcode == "reshape":
    x = x.operands[0]
  return keys.get(x)


def remember_computed(planner, keys, value, buf) -> None:
  """Note that ``buf`` (a planner-owned temporary that no later group writes in place) holds
  the fused ``value`` (``keys``: ``value_keys`` of its computation)."""
  key = peeled_key(keys, value)
  if key is not None and buf.kind == "temp" and buf.size == value.shape.size:
    planner.computed.setdefault(key, buf)


def seed_computed(planner, keys, leafmap) -> int:
  """Map the values of a fused computation (``keys``) that earlier groups wrote
  (``remember_computed``) to those buffers in ``leafmap`` (its kernels read them instead of
  computing them); returns how many."""
  n = 0
  if not planner.computed:
    return 0
  for i, key in keys.items():
    if i.opcode in ("parameter", "constant") or i in leafmap:
      continue
    buf = planner.computed.get(key)
    if buf is not None and buf.size == i.shape.size and buf.dtype == K.np.dtype(i.dtype):
      leafmap[i] = buf
      n += 1
  return n


def read_only_through(users, x, keys_known, operand_map) -> bool:
  """Whether every one of ``users`` (entry instructions after the current one that read the
  entry value ``x``) is a fusion that reads ``x`` only through values whose keys are in
  ``keys_known`` (which ``seed_computed`` will map to the buffers holding them): then ``x``'s
  buffer is dead once those are written.  ``operand_map(fusion)``: its {parameter: operand}."""
  for u in users:
    if u.opcode != "fusion":
      return False
    fc = u.attrs["calls"]
    operand = operand_map(u)
    keys = value_keys(fc, operand.__getitem__)
    stop = {id(i) for i, k in keys.items()
            if k in keys_known and i.opcode not in ("parameter", "constant")}
    seen, stack = set(), [fc.root]
    while stack:
      i = stack.pop()
      if id(i) in seen or id(i) in stop:
        continue
      seen.add(id(i))
      if i.opcode == "parameter" and operand[i] is x:
        return False
      stack.extend(i.operands)
  return True


def check_clobbered(planner, fc, leafmap, roots) -> None:
  """Raise ``PlanError`` if the values ``roots`` of the fused computation ``fc`` still read a
  parameter whose buffer was written over (``planner.clobbered``) on the promise that it would
  be read only through values computed since (``read_only_through``): a safety net, never
  expected to fire."""
  if not planner.clobbered:
    return
  from ourjax.backends.llvm.group_planner import _reachable
  needed = _reachable(list(roots), leafmap)
  for p in fc.parameters:
    spec = leafmap.get(p)
    if id(p) in needed and isinstance(spec, K.Buf) and id(spec) in planner.clobbered:
      raise K.PlanError(f"%{p.name}: its buffer was written over by a value computed from it")
