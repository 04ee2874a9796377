"""Instruction fusion: fuse producers into their consumers, so that an intermediate array is
computed where it is read instead of going through memory.

A ``fusion`` instruction runs its fused computation (``calls``, an ordinary computation of the
module whose parameters are the fusion's operands) as one kernel. Its ``kind`` says how:

``kLoop``    one loop over the root's shape; every fused instruction is evaluated at the index it
             is needed at. Loop ops: elementwise ops (compare, select, clamp, convert included),
             broadcast, reshape, transpose, slice, pad, concatenate, iota, reverse,
             dynamic-slice, gather, same-width bitcast-convert, and constants of at most
             ``MAX_FUSED_CONSTANT_ELEMENTS`` elements.
``kInput``   a reduce or reduce-window (the "hero") whose inputs are computed on the fly from
             fused loop ops, so that the reduction reads its inputs once.
``kOutput``  a dot or convolution followed by an elementwise epilogue (bias add, tanh, ...),
             possibly ending in a reshape (a view); the dot's operands stay in memory, the
             epilogue is applied to each result element.

The pass goes consumer first (reverse topological order, as XLA's ``InstructionFusion``): each
consumer tries its operands one at a time, and every accepted producer is cloned into the
consumer's fusion (which is created on the first success and grows in place). Each decision is
recorded on the module with its reason (``module.note("fusion", ...)``):

* a parameter is an input, never fused (not noted: there is nothing to decide);
* reductions are roots of their own fusions: a reduce is never fused into a consumer here
  (``multi_output_fusion`` lets its consumers join it as a reduction epilogue);
* while, conditional, sort, scatter, attention and attention-grad (``passes/attention.py``),
  dynamic-update-slice,
  tuples and the like are never fused into a consumer; a dynamic-update-slice consumes the producers of its window (the update and
  the start indices: a kLoop fusion rooted at it, computing the window's values where they are
  stored, XLA's in-place DUS fusion), never of the array it updates in place;
* a dot (or convolution) is fused only into an elementwise consumer that is its only user, which
  makes a ``kOutput`` fusion; nothing is fused into a dot's operands;
* a producer with users outside the consumer is duplicated when cheap and when copies in its
  ``n`` users read no more memory than computing it once: ``n`` times the bytes of its
  operands that the consumer does not read already (``_duplicate_read_bytes``) against those
  bytes once plus its result written once and read ``n`` times, plus ``KERNEL_BYTES`` for the
  kernel that stores it.  Broadcasts, reshapes and
  slices are copied; an add of two arrays is copied into at most three users.  (Copied
  without that bound, a transformer's residual stream went through every layer, and each
  layer-norm read all the earlier layers' outputs.)  Where the backend asks
  (``Module.read_stored``: the CPU), a producer stored anyway (read by a tuple, a loop or a
  conditional: a loop body's next state) is not copied where the copy reads more bytes than
  its result (a reduction of the next state reads the state, not all the operands of its
  update).  An expensive producer
  (``is_expensive``: transcendental functions, divide, power, dot, reduce, large gathers, ...)
  is never duplicated;
* an expensive producer is not fused where the consumer reads each of its elements many times
  (a broadcast that grows it, a gather's operand, overlapping reduce-windows), which would
  recompute it for every read;
* a fusion takes at most ``MAX_FUSION_PARAMETERS`` operands;
* where the backend reads convolution patch matrices in place (``patches_read_in_place``),
  only the patches' own pads, slices, reshapes and concatenation are fused into them;
* where the backend runs a dot's elementwise epilogue in the dot's kernel
  (``Module.dot_epilogues``), a cheap producer that can be such an epilogue is not duplicated
  into its users (``_dot_epilogue_of``): stored in place of the dot's result, it is read
  instead of the dot's result and its other operands.

Afterwards every loop op, reduce and reduce-window left unfused becomes a fusion of one
instruction, so that each kernel a backend emits is a fusion. What stays unfused at top level:
parameters, large constants, tuples and get-tuple-elements, lone dots and convolutions, and the
ops that are never fused.

Fusion runs in the entry computation and, recursively, in the bodies and conditions of while
loops and the branches of conditionals (never in reducers, comparators or fused computations).

Reading a fusion (for emitters; these helpers, and those that build and edit fusions, live in
``fusion_ir.py`` and are imported here): ``attrs["calls"]`` is the fused computation, its
parameter ``k`` is operand ``k``; ``outputs_of(comp)`` lists what it returns (a tuple root after
multi-output fusion: the users then read ``get-tuple-element``). ``space_of(fusion)`` gives the
iteration space of kLoop and kInput fusions (``Space``: one loop, or reductions of one operand
shape over the same dimensions, possibly row by row), and ``check(fusion)`` states (and checks)
exactly which instructions may appear where for each kind.
"""
from __future__ import annotations

from dataclasses import dataclass

from ourjax.lowering.hlo import Computation, Instruction, Module
from ourjax.lowering.passes.buffer_assignment import nbytes
# (the fusion instruction's vocabulary, spaces, contract and editing helpers live in
# ``fusion_ir``; imported here for this pass and for the passes and tests that read them here)
from ourjax.lowering.passes.fusion_ir import (  # noqa: F401
    CONTRACTION_OPS, LOOP_OPS, REDUCTION_OPS, Space, _kind, _remove_parameter, add_fusion,
    check, clone_into, dedupe, dus_root, fuse_into, new_parameter, outputs_of,
    remove_unreachable_computations, space_of, wrap)

__all__ = ["run", "check", "decide", "is_expensive", "is_loop_op", "fusible_computations",
           "Decision", "Space", "space_of", "outputs_of", "LOOP_OPS", "EXPENSIVE_OPS"]

PASS = "fusion"

#: Constants with at most this many elements are copied into fusions; larger ones stay in memory.
MAX_FUSED_CONSTANT_ELEMENTS = 64
#: A gather producing more elements than this counts as expensive (random reads).
MAX_CHEAP_GATHER_ELEMENTS = 1024
#: Most operands a fusion may take.
MAX_FUSION_PARAMETERS = 64
#: The most times one fused value may be computed per element of its fusion (see
#: ``emitted_count``): a value read at several positions (rolls, slices, stencils) is computed
#: once per position, and a chain of such fusions multiplies the positions (an RK4 step of
#: rolled stencils reached 3^4 per element and 30,000 lines of LLVM IR).  XLA's limit.
MAX_DUPLICATION = 15

#: What one more kernel costs, counted in bytes of memory traffic: a shared cheap producer is
#: stored once (a kernel of its own) rather than copied into its users only when the copies
#: would read more than this beyond what storing it costs (a launch and its ramp-up is a few
#: microseconds on a GPU, megabytes of traffic; on a CPU, tens of kilobytes).  Small arrays
#: (threefry's rounds on a few keys) are always copied.
KERNEL_BYTES = 1 << 18

#: Elementwise ops too costly to compute twice (XLA's ``IsExpensive``).
EXPENSIVE_OPS = frozenset({
    "exponential", "exp2", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic",
    "sine", "cosine", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "sqrt", "rsqrt", "cbrt", "erf", "erfc", "erf-inv", "lgamma", "digamma", "power", "atan2",
    "divide", "remainder"})


# ---------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------

def is_loop_op(instr: Instruction) -> bool:
  """Whether ``instr`` can be evaluated at any index on demand inside a loop fusion."""
  op = instr.opcode
  if op == "fusion":
    return (_kind(instr) == "kLoop" and not instr.shape.is_tuple
            and dus_root(instr) is None)
  if op not in LOOP_OPS:
    return False
  if op == "bitcast-convert":
    return instr.dtype.itemsize == instr.operands[0].dtype.itemsize
  if op == "constant":
    return instr.shape.size <= MAX_FUSED_CONSTANT_ELEMENTS
  return True


def is_expensive(instr: Instruction) -> bool:
  """Whether computing ``instr`` twice costs more than reading its result from memory."""
  op = instr.opcode
  if op in EXPENSIVE_OPS:
    return True
  if op == "gather":
    return instr.shape.size > MAX_CHEAP_GATHER_ELEMENTS
  if op == "fusion":
    return any(is_expensive(i) for i in instr.attrs["calls"].instructions)
  return op not in LOOP_OPS and op not in ("parameter", "tuple", "get-tuple-element")


def _reads_repeatedly(instr: Instruction, k: int) -> bool:
  """Whether ``instr`` reads the elements of its operand ``k`` more than once."""
  op = instr.opcode
  if op == "broadcast":
    return instr.shape.size > instr.operands[0].shape.size
  if op == "gather":
    return k == 0
  if op == "reduce-window":
    a = instr.attrs
    return any(w > s for w, s in zip(a["window_dimensions"], a["window_strides"]))
  if op == "reduce":
    return k >= len(instr.operands) // 2 and instr.shape.size != 1  # the init value, per result
  if op == "dynamic-slice":
    return k >= 1  # the start indices, for every element
  if op == "pad":
    return k == 1
  if op == "clamp":
    return instr.operands[k].dims != instr.dims  # scalar bounds
  return op in CONTRACTION_OPS


def fusible_computations(module: Module) -> list[Computation]:
  """The computations fusion works in: the entry, and while bodies/conditions and conditional
  branches reachable from it (not reducers, comparators or fused computations)."""
  out, seen, stack = [], set(), [module.entry]
  while stack:
    comp = stack.pop()
    if comp in seen:
      continue
    seen.add(comp)
    out.append(comp)
    for instr in comp.instructions:
      if instr.opcode == "while":
        stack += [instr.attrs["condition"], instr.attrs["body"]]
      elif instr.opcode == "conditional":
        stack += list(instr.attrs["branches"])
  return out


@dataclass
class Decision:
  """A yes/no answer with the reason (XLA's ``FusionDecision``).  ``lasting``: a refusal that
  stays as it is while what is fused into the consumer neither reads the producer nor changes
  its users (it depends on the producer, its users and what in the consumer reads it, not on
  the consumer's other operands)."""
  ok: bool
  reason: str
  lasting: bool = False

  def __bool__(self):
    return self.ok



# ---------------------------------------------------------------------------------------------
# the decision
# ---------------------------------------------------------------------------------------------

def _source(producer: Instruction, consumer: Instruction) -> Instruction:
  """``producer``'s value as ``consumer`` sees it: the producer, or the fused parameter it
  feeds."""
  if consumer.opcode != "fusion":
    return producer
  return consumer.attrs["calls"].parameters[consumer.operands.index(producer)]


def _tainted(src: Instruction, consumer: Instruction) -> set:
  """Every instruction of ``consumer`` that depends on ``src`` (``_source``), ``src``
  included."""
  if consumer.opcode != "fusion":
    return {src, consumer}
  # (everything that reads it, directly or not: its users' closure, not a walk of the whole
  # fused computation for every operand decided)
  tainted, todo = {src}, [src]
  while todo:
    for u in todo.pop().users:
      if u not in tainted:
        tainted.add(u)
        todo.append(u)
  return tainted


def _has_contraction(consumer: Instruction, memo: dict | None) -> bool:
  """Whether ``consumer`` (a fusion: its computation) holds a dot or convolution; kept in
  ``memo`` (``decide``'s) until something is fused in."""
  fc = consumer.attrs["calls"]
  key = ("contraction", id(fc))
  has = None if memo is None else memo.get(key)
  if has is None:
    has = any(x.opcode in CONTRACTION_OPS for x in fc.instructions)
    if memo is not None:
      memo[key] = has
  return has


def emitted_count(fused: Computation, value: Instruction, counts: dict | None = None) -> int:
  """How many times ``value`` (an instruction of ``fused``) is computed per element of the
  fusion's iteration: once per distinct index it is read at (XLA's fusion indexing evaluation).
  An elementwise user of the same shape reads its operand at its own index, so it passes its
  readers on (two such paths to one value share its evaluation, as the emitter memoises by
  index); any other user (slice, pad, broadcast, reshape, concatenate, reduce, ...) reads at
  an index of its own and counts as one reader, each reader weighing its own count.
  ``counts``: ``emitted_counts(fused)`` when the caller has it (one walk answers every value
  of an unchanged computation)."""
  if counts is None:
    counts = emitted_counts(fused)
  return counts.get(value, 1)


def emitted_counts(fused: Computation) -> dict:
  """``emitted_count`` of every instruction of ``fused`` (one walk, users first)."""
  return _Counts(fused).count


class _Counts:
  """``emitted_count`` of every instruction of a fused computation and its readers' sets (see
  ``emitted_count``), kept up to date as single instructions are fused in (``fused_in``)
  instead of a walk of the whole computation per fusion.  A value whose only reader passes its
  readers on shares that reader's set (copied when a second one adds to it): along an
  elementwise chain no set is copied."""

  def __init__(self, fused: Computation):
    self.fused = fused
    self.readers: dict = {}
    self.own: set = set()        # the instructions whose set is their own (not a user's)
    self.count: dict = {}
    root = fused.root
    for x in reversed(fused.instructions):
      if x is root:
        mine, c = {x}, 1
      else:
        mine = self.readers.get(x, ())
        c = 0
        for u in mine:
          c += self.count[u]
      self.count[x] = c
      if x.operands:
        self._read(x, mine)

  def _read(self, x, mine) -> None:
    """Record that ``x`` (whose readers are ``mine``) reads its operands."""
    passes = x.is_elementwise()
    readers, own = self.readers, self.own
    for o in x.operands:
      if o.parent is not self.fused:
        continue
      add = mine if passes and o.dims == x.dims else (x,)
      r = readers.get(o)
      if r is None:
        if add is mine and mine:
          readers[o] = mine
        else:
          readers[o] = set(add)
          own.add(o)
      else:
        if o not in own:
          r = readers[o] = set(r)
          own.add(o)
        r.update(add)

  def fused_in(self, param: Instruction, clone: Instruction) -> bool:
    """Update after ``clone`` (one instruction reading parameters only) took the place of
    ``param``: it has the parameter's readers, and its operands gain it as a reader; False
    when the change is of another kind (then compute the counts again)."""
    fused = self.fused
    if (clone.parent is not fused or clone is fused.root or param not in self.count
        or clone.opcode == "parameter" or clone in self.count or any(o.opcode != "parameter" or o.parent is not fused for o in clone.operands)):
      return False
    mine = self.readers.get(param, ())
    self.readers[clone] = mine
    self.count[clone] = self.count[param]
    fresh = set(dict.fromkeys(clone.operands)) - set(self.count)
    self._read(clone, mine)
    for o in dict.fromkeys(clone.operands):
      if o in fresh:
        self.count[o] = 0
      c = 0
      for u in self.readers.get(o, ()):
        c += self.count[u]
      self.count[o] = c
    return True


def _refused_as_such(producer: Instruction, consumer: Instruction) -> bool:
  """Whether ``decide`` refuses ``producer`` for what it is, before looking at ``consumer``'s
  contents (a parameter, a tuple, a reduction, an op that is never fused, a dot into a
  reduction): nothing fused into the consumer changes that, so the consumer need not ask
  again.  (The other refusals depend on the producer's users, the consumer's operands and
  what it reads the producer with, which fusing other producers changes.)"""
  op = producer.opcode
  if op == "parameter" or op == "get-tuple-element" or producer.shape.is_tuple:
    return True
  if op in REDUCTION_OPS or _kind(producer) == "kInput":
    return True
  contraction = op in CONTRACTION_OPS or _kind(producer) == "kOutput"
  if not contraction and not is_loop_op(producer):
    return True
  return contraction and (_kind(consumer) == "kInput" or consumer.opcode in REDUCTION_OPS)


def _what(instr: Instruction) -> str:
  if instr.opcode == "fusion":
    return f"{instr.attrs['kind']} fusion"
  return "elementwise" if instr.is_elementwise() else instr.opcode


def decide(comp: Computation, producer: Instruction, consumer: Instruction,
           memo: dict | None = None) -> Decision | None:
  """Whether to fuse ``producer`` into ``consumer`` (an instruction, or a fusion made from
  one), and why; None when there is nothing to decide (a parameter).  ``memo``: a dict the
  caller keeps for ``consumer`` (what is computed once for all its operands: the ``_Counts``
  of its fused computation), updated or cleared when something is fused into it."""
  P, op = producer, producer.opcode
  if op == "parameter":
    return None
  no = lambda why: Decision(False, why)  # noqa: E731
  held = lambda why: Decision(False, why, True)  # noqa: E731  (see Decision.lasting)
  if op == "get-tuple-element" or P.shape.is_tuple:
    return no("its result is a tuple (element)")
  if op in REDUCTION_OPS or _kind(P) == "kInput":
    return no("a reduction is the root of its own fusion")
  contraction = op in CONTRACTION_OPS or _kind(P) == "kOutput"
  if op not in PATCH_OPS and patches_read_in_place(comp, consumer):
    return no("the consumer is a convolution's patch matrix, which the backend reads in place "
              "from its input: the input stays in memory (computed by its producer's kernel, "
              "a dot's epilogue)")
  if not contraction and not is_loop_op(P):
    if op == "constant":
      return no(f"a constant of {P.shape.size} elements stays in memory")
    if op == "bitcast-convert":
      return no("bitcast-convert changes the element width")
    return no(f"{op} is never fused")
  src = _source(P, consumer)
  inside = None     # (what in the consumer depends on the producer: found only when asked)

  def get_inside():
    nonlocal inside
    if inside is None:
      inside = [x for x in _tainted(src, consumer) if x is not src]
    return inside
  ckind = _kind(consumer)
  dus = dus_root(consumer)
  if dus is not None:
    # an in-place update computes its window's values (and start indices) on the fly; the
    # array it updates stays in memory, updated where it is
    target = dus.operands[0]
    if target is P or target is src or target in get_inside() or contraction:
      return held("the array a dynamic-update-slice updates in place stays in memory")
  if consumer.opcode != "fusion":
    reads_dot = consumer.opcode in CONTRACTION_OPS
  else:
    reads_dot = _has_contraction(consumer, memo) and any(
        x.opcode in CONTRACTION_OPS for x in get_inside())
  if reads_dot:
    return held("the operands of a dot or convolution stay in memory")
  n_users = len(P.users) + (P is comp.root)
  shared = n_users > 1
  if not contraction and _swaps_group_order(comp, consumer, src):
    dot = _dot_epilogue_of(P) if P.is_elementwise() else None
    if dot is not None:
      return no(f"the epilogue of %{dot.name}, a batched product whose batch and rows the "
                f"consumer swaps: that dot stores its result swapped itself")
  if contraction:
    if ckind == "kOutput":
      return held("a fusion holds at most one dot or convolution")
    if ckind == "kInput" or consumer.opcode in REDUCTION_OPS:
      return held("a dot is not fused into a reduction")
    if not all((x.is_elementwise() and x.dims == P.dims) or _trailing_reshape(x, consumer)
               for x in get_inside()):
      return held("a dot is fused only into an elementwise epilogue")
    if shared:
      return held(f"expensive and has {n_users} users")
    return Decision(True, f"{_what(P)} into its elementwise epilogue (output fusion)")
  expensive = is_expensive(P)
  if shared and expensive:
    return held(f"expensive and has {n_users} users")
  if expensive:
    tainted = set(get_inside())
    tainted.add(src)
    for x in get_inside():
      for k, o in enumerate(x.operands):
        if o in tainted and _reads_repeatedly(x, k):
          return held(f"expensive, and %{x.name} reads each of its elements many times")
  if consumer.opcode == "fusion":
    new = len(set(P.operands) - set(consumer.operands))
    total = len(consumer.operands) - 1 + new
    if total > MAX_FUSION_PARAMETERS and new > 1:
      return no(f"the fusion would take {total} operands (limit {MAX_FUSION_PARAMETERS})")
    fc = consumer.attrs["calls"]
    counts = None
    if memo is not None:
      st = memo.get(id(fc))
      if st is None:
        st = memo[id(fc)] = _Counts(fc)
      counts = st.count
    times = emitted_count(fc, src, counts)
    if times > MAX_DUPLICATION and not (op == "constant" and P.shape.size == 1):
      # (a scalar constant costs nothing where it is read, however many times)
      return no(f"it would be computed {times} times per element (read at that many "
                f"positions; limit {MAX_DUPLICATION})")
  if shared:
    dot = _dot_epilogue_of(P) if getattr(comp.module, "dot_epilogues", False) else None
    if dot is not None:
      return no(f"cheap, but the epilogue of %{dot.name}: computed once where "
                f"the dot's result would be stored, and read by its {n_users} users instead "
                f"of the dot's result and its other operands")
    # copies in all n users read n * extra; one stored result costs its own reads (about
    # extra), its write and n reads of it
    extra, own = _duplicate_read_bytes(P, consumer), nbytes(P.shape)
    if (extra > own and getattr(comp.module, "read_stored", False)
        and any(u.opcode in _STORING_USERS for u in P.users)):
      # (its result is stored anyway, for a user that takes it from memory: a copy only adds
      # reads; a loop body's next state read by a reduction of it, say)
      return no(f"cheap, but stored anyway (read by %{_storing_user(P).name}): a copy would "
                f"read {extra} bytes of its operands, reading its result {own}")
    if (n_users - 1) * extra > (n_users + 1) * own + KERNEL_BYTES:
      return no(f"cheap, but a copy in each of its {n_users} users would read {extra} bytes of "
                f"its operands each, more than computing it once and reading its {own}")
    return Decision(True, f"cheap {_what(P)} producer, duplicated (it has {n_users} users)")
  if ckind == "kInput" or consumer.opcode in REDUCTION_OPS:
    return Decision(True, f"{_what(P)} producer into the input of a reduction")
  if ckind == "kOutput":
    return Decision(True, f"{_what(P)} producer into a dot's epilogue")
  if dus is not None:
    return Decision(True, f"{_what(P)} producer into the window of an in-place "
                          f"dynamic-update-slice")
  return Decision(True, f"{_what(P)} producer into {_what(consumer)} consumer")


def _dot_epilogue_of(p: Instruction, depth: int = 8) -> Instruction | None:
  """The dot whose elementwise epilogue ``p`` can be: ``p`` is elementwise over the dot's
  shape, of the dot's result (within ``depth`` elementwise steps), every step read only by
  the next one, so that the dot's result is read by nothing else; or None."""
  if not p.is_elementwise() or depth <= 0:
    return None
  for o in p.operands:
    if o.dims != p.dims or len(o.users) != 1:
      continue
    if o.opcode == "dot":
      return o
    d = _dot_epilogue_of(o, depth - 1)
    if d is not None:
      return d
  return None


def _swaps_group_order(comp: Computation, consumer: Instruction, src: Instruction) -> bool:
  """Whether ``consumer`` reads ``src`` only through transposes swapping its first two of
  three dimensions (a grouped convolution's product [G, rows, Og] put back in the output's
  order, ``conv_to_dot._rewrite_grouped``), in a module whose backend runs dots' epilogues
  in the dot's kernel and reads patches in place (the GPU): there the dot stores its result
  swapped (``cuda/fold_transposes.py``), its epilogue (``simplify_sinks.sink_group_transpose``)
  before the swap."""
  m = comp.module
  if not (getattr(m, "dot_epilogues", False) and getattr(m, "patches_in_place", False)):
    return False
  if consumer.opcode == "fusion":
    readers = [x for x in consumer.attrs["calls"].instructions if src in x.operands]
  else:
    readers = [consumer]
  return bool(readers) and all(
      x.opcode == "transpose" and tuple(x.attrs["dimensions"]) == (1, 0, 2) for x in readers)


def _trailing_reshape(x: Instruction, consumer: Instruction) -> bool:
  """Whether ``x`` is a reshape that ends ``consumer``'s computation (its root, read by
  nothing else inside): a view of the epilogue's result, which the dot's kernel stores in
  the dot's own order (a convolution's ``[N*H*W, C]`` product seen as ``[N, H, W, C]``)."""
  if x.opcode != "reshape" or consumer.opcode != "fusion":
    return False
  return x is consumer.attrs["calls"].root and not x.users


#: What a convolution's patch matrix is made of (``conv_to_dot``): the input's padding (and
#: its value), its shifted slices, their reshapes and concatenation.
PATCH_OPS = frozenset({"pad", "slice", "reshape", "concatenate", "constant"})


def patches_read_in_place(comp: Computation, consumer: Instruction) -> bool:
  """Whether ``consumer`` is a fusion computing convolution patch matrices (a 2-D reshape of a
  concatenation, per tuple element) read only by dots, in a module whose backend reads such
  matrices in place from their input (``Module.patches_in_place``: the GPU's implicit GEMM).
  Nothing but the patches' own structure is fused into it then: its input has to be in memory
  anyway, and an elementwise producer is better computed once, in the epilogue of the dot that
  makes it, than at every kernel position of the patch matrix."""
  if not getattr(comp.module, "patches_in_place", False) or consumer.opcode != "fusion":
    return False
  root = consumer.attrs["calls"].root
  roots = root.operands if root.opcode == "tuple" else [root]
  if not all(r.opcode == "reshape" and len(r.dims) == 2 and
             r.operands[0].opcode == "concatenate" for r in roots):
    return False
  readers = [g for u in consumer.users for g in (u.users if u.opcode == "get-tuple-element"
                                                 else [u])]
  return bool(readers) and all(r.opcode == "dot" or _kind(r) == "kOutput" for r in readers)


#: Users that take an operand from memory whatever is fused (its result is stored anyway).
_STORING_USERS = ("tuple", "while", "conditional")


def _storing_user(p: Instruction) -> Instruction:
  return next(u for u in p.users if u.opcode in _STORING_USERS)


def _duplicate_read_bytes(producer: Instruction, consumer: Instruction) -> int:
  """Bytes a copy of ``producer`` inside ``consumer`` reads from memory that the consumer does
  not read already: each of its other operands, at most one element per element of the
  producer's result (a slice or a gather reads a part; a broadcast its small operand whole)."""
  have = set(consumer.operands)
  n = producer.shape.size
  return sum(min(o.shape.size, n) * o.dtype.itemsize
             for o in dict.fromkeys(producer.operands)
             if o not in have and o is not consumer and not o.shape.is_tuple)


def _is_consumer(instr: Instruction) -> bool:
  return instr.opcode in ("fusion", "dynamic-update-slice") or instr.opcode in REDUCTION_OPS \
      or (instr.operands and is_loop_op(instr))


# ---------------------------------------------------------------------------------------------
# the pass
# ---------------------------------------------------------------------------------------------

class _Fuser:
  def __init__(self, module: Module, comp: Computation):
    self.module, self.comp = module, comp
    self.noted = set()
    self.origin: dict[Instruction, str] = {}   # fusion -> the consumer it was made from
    self.inner: dict[Instruction, dict] = {}   # fusion -> {top-level instr: its clone inside}

  def note(self, text: str) -> None:
    if text not in self.noted:
      self.noted.add(text)
      self.module.note(PASS, text)

  def label(self, consumer: Instruction) -> str:
    o = self.origin.get(consumer)
    return f"%{consumer.name} (%{o})" if o else f"%{consumer.name}"

  def consume(self, consumer: Instruction) -> bool:
    """Fuse into ``consumer`` every operand that may be fused, one at a time."""
    target, changed = consumer, False
    progress = True
    memo: dict = {}     # (what decide keeps for the target: its _Counts, kept up to date)
    # operands refused for what they are (``_refused_as_such``), whatever is fused into the
    # target meanwhile: decided (and noted) once per target
    settled: set = set()
    # operands refused for a lasting reason (``Decision.lasting``): {operand: (the refusal, its
    # number of users then)}, asked again once something fused in reads them or changes what
    # reads them
    lasting: dict = {}
    while progress:
      progress = False
      for P in list(dict.fromkeys(target.operands)):
        if P in settled:
          continue
        kept = lasting.get(P)
        if kept is not None and kept[1] == len(P.users):
          continue          # (refused, and noted, as before)
        d = decide(self.comp, P, target, memo)
        if d is None:
          settled.add(P)
          continue
        if not d:
          self.note(f"not fusing %{P.name} into {self.label(target)}: {d.reason}")
          if _refused_as_such(P, target):
            settled.add(P)
          elif d.lasting:
            lasting[P] = (d, len(P.users))
          continue
        self.note(f"fused %{P.name} into {self.label(target)}: {d.reason}")
        if target.opcode != "fusion":
          name = target.name
          kind = "kInput" if target.opcode in REDUCTION_OPS else "kLoop"
          target = wrap(self.comp, target, kind)
          self.origin[target] = name
          settled.clear()     # (the notes name the new target)
          lasting.clear()
        if P.opcode in CONTRACTION_OPS or _kind(P) == "kOutput":
          target.attrs["kind"] = "kOutput"
        fc = target.attrs["calls"]
        param = fc.parameters[target.operands.index(P)]
        inner = self.inner.setdefault(target, {})
        if (P.opcode == "fusion" or P.opcode in CONTRACTION_OPS
            or any(o in inner for o in P.operands)):
          # (a fused computation's instructions may merge with others (dedupe); a dot changes
          # the target's kind; a clone reading an earlier clone reads what that one reads)
          lasting.clear()
        else:        # (the clone of P reads its operands: what reads them inside changes)
          for o in P.operands:
            lasting.pop(o, None)
        key = ("contraction", id(fc))
        if memo.get(key) is False:      # (kept up to date: what P brings in)
          sub = P.attrs["calls"].instructions if P.opcode == "fusion" else (P,)
          memo[key] = any(x.opcode in CONTRACTION_OPS for x in sub)
        fuse_into(self.comp, target, P, inner)
        st = memo.get(id(fc))
        if st is not None and (P.opcode == "fusion" or not st.fused_in(param, inner[P])):
          del memo[id(fc)]        # (counted again when next asked for)
        progress = changed = True
        break
    return changed

  def run(self) -> bool:
    changed = False
    for instr in reversed(list(self.comp.instructions)):
      if instr.parent is self.comp and _is_consumer(instr):
        changed |= self.consume(instr)
    for instr in list(self.comp.instructions):
      if instr.opcode != "fusion" and instr.opcode != "constant" and (
          instr.opcode in REDUCTION_OPS or is_loop_op(instr)):
        kind = "kInput" if instr.opcode in REDUCTION_OPS else "kLoop"
        f = wrap(self.comp, instr, kind)
        self.note(f"%{instr.name} alone in %{f.name} ({kind}): nothing to fuse with")
        changed = True
    return changed


def run(module: Module) -> bool:
  changed = False
  for comp in fusible_computations(module):
    changed |= _Fuser(module, comp).run()
  if changed:
    remove_unreachable_computations(module)
  return changed
