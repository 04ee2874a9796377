"""The backward pass of fused attention: where a training step differentiates
``softmax(q kᵀ · scale) v`` (``passes/attention.py``), the gradients of q, k and v become one
``attention-grad`` instruction, which a backend computes the way FlashAttention-2's backward does
(``backends/cuda/attention_grad.py``): the probabilities are recomputed tile by tile from q, k
and each row's log-sum-exp, and neither the scores nor their gradient are written to memory.

With ``P`` the probabilities and ``dO`` the output's cotangent, the gradient ``jax.nn.softmax``
(its custom JVP, transposed) and two dots give, and that this pass matches, is::

    dv  = dot(P, dO)                 over the query rows: [B..., Tk, Dv] (or dot(dO, P), its
                                     transpose, as nn.dot_product_attention's einsum gives)
    dP  = dot(dO, v)                 over Dv: [B..., Tq, Tk]
    t   = P * dP
    r   = reduce_sum(-t)  |  -reduce_sum(t)     over the keys (16-bit: summed in f32)
    w   = t + P * broadcast(r)       (= P (dP - rowsum(P dP)), the scores' cotangent)
    ds  = g(w)                       g: elementwise ops, one operand leading back to w (the
                                     transposes of the scores' mask and scale: select(m, w, 0),
                                     w * c, w / c)
    dq  = dot(ds, k)                 over the keys
    dk  = dot(ds, q)                 over the query rows

(operands in any dim order, as for the forward match).  It is replaced by ``attention-grad(q, k,
v, o, dO, arrays...)`` (q, k, v, dO in ``[B..., T, D]`` order, ``o`` the forward's output) with
``scale``, the forward's scores computation (``calls``) and ``g`` as the computation
``grad_calls`` (of ``w`` and the arrays it reads); its value is the tuple ``(dq, dk, dv)``.  The
rewrite needs every intermediate above to be read only inside the pattern (a differentiated
bias reads ``ds``: not matched), the backend's ``Module.fused_attention_grad`` to accept, and
the forward to be fused as well (the forward pass then finds its dot with no other readers of
the probabilities).  A softmax spelled out by hand (``exp(s - max) / sum``) differentiates
through the max and the division into another graph, which is not matched.

The reference semantics are the unfused computation's (``reference.py``).
"""
from __future__ import annotations

from ourjax.lowering.hlo import ELEMENTWISE_OPS, Computation, Instruction, Shape

PASS = "attention"

#: Most elementwise ops between the scores' cotangent and the dots of dq and dk.
MAX_GRAD_OPS = 16


def _other(x: Instruction, one: Instruction):
  """The operand of binary ``x`` that is not ``one`` (None when ``one`` is not exactly one)."""
  ops = x.operands
  if len(ops) != 2 or ops.count(one) != 1:
    return None
  return ops[1] if ops[0] is one else ops[0]


def _dot_dims(d: Instruction, nb: int, lhs_contract: int):
  """Whether ``d`` is a dot whose left operand, a ``[B..., Tq, Tk]`` array, has its batch dims
  in order and contracts dim ``lhs_contract`` (one dim)."""
  a = d.attrs
  return (d.opcode == "dot" and tuple(a["lhs_batch_dims"]) == tuple(range(nb))
          and tuple(a["lhs_contracting_dims"]) == (lhs_contract,))


def match(o: Instruction, fwd):
  """``(dq, dk, dv, do, do_perm, chain, w, inner)`` for the backward of the forward attention
  ``fwd`` (``attention.match(o, readers=False)``'s tuple) when its probabilities are read by
  that backward (module docstring); a string saying why not; None when nothing else reads the
  probabilities (no backward to fuse)."""
  from ourjax.lowering.passes.attention import (_constant_broadcast, _perms, _row_broadcast,
                                                _row_reduce)
  q, k, v, scale, inner, perms, path, base = fwd
  nb = len(o.attrs["lhs_batch_dims"])
  rank = nb + 2
  P = o.operands[0]
  others = [u for u in P.users if u is not o]
  if not others:
    return None
  # dv = dot(P, dO) over the query rows, or dot(dO, P) (dv transposed: [B..., Dv, Tk])
  dvs = [u for u in others if u.opcode == "dot" and (
      (u.operands[0] is P and _dot_dims(u, nb, nb)) or
      (u.operands[1] is P and tuple(u.attrs["rhs_batch_dims"]) == tuple(range(nb))
       and tuple(u.attrs["rhs_contracting_dims"]) == (nb,)))]
  if len(dvs) != 1:
    return "the probabilities are read by something other than a softmax backward"
  dv = dvs[0]
  dv_t = dv.operands[0] is not P
  if dv_t:
    pdv = _perms(dv, nb)            # dO: (batch, Dv, Tq); P: (batch, Tk, Tq)
    if pdv is None or pdv[1] != tuple(range(nb)) + (nb + 1, nb):
      return "the dot of dv is not over the query rows"
    do, do_perm = dv.operands[0], pdv[0][:nb] + (pdv[0][nb + 1], pdv[0][nb])
  else:
    pdv = _perms(dv, nb, rhs_contract_first=True)
    if pdv is None or pdv[0] != tuple(range(nb)) + (nb + 1, nb):
      return "the dot of dv is not over the query rows"
    do, do_perm = dv.operands[1], pdv[1]
  # t = P * dP, dP = dot(dO, v) over Dv
  ts = [u for u in others if u.opcode == "multiply" and _other(u, P) is not None
        and _other(u, P).opcode == "dot"]
  if len(ts) != 1:
    return "no product of the probabilities with dot(dO, v)"
  t = ts[0]
  dP = _other(t, P)
  pp = _perms(dP, nb)
  if pp is None or dP.operands[0] is not do or dP.operands[1] is not v or \
     pp[0] != do_perm or pp[1] != perms[2] or len(dP.users) != 1:
    return "the probabilities' cotangent is not dot(dO, v)"
  # w = t + P * broadcast(-rowsum(t))
  us = [u for u in others if u is not dv and u is not t]
  if len(us) != 1 or us[0].opcode != "multiply" or _other(us[0], P) is None:
    return "the probabilities are read by something other than a softmax backward"
  u = us[0]
  rb = _other(u, P)
  r = _row_broadcast(rb, rank)
  if r is None:
    return "no row sum in the softmax backward"
  # -rowsum(t): negate(reduce(t)) or reduce(negate(t)); 16-bit types sum in f32, with a
  # convert after the reduce and one before it
  inner_chain, x = [], r          # (rb's operand down to t, each read once)
  if x.opcode == "convert":
    inner_chain.append(x)
    x = x.operands[0]
  negated = False
  if x.opcode == "negate":
    inner_chain.append(x)
    x, negated = x.operands[0], True
  summed = _row_reduce(x, "add", rank, 0.0)
  if summed is None:
    return "no row sum in the softmax backward"
  inner_chain.append(x)
  x = summed
  if x.opcode == "convert":
    inner_chain.append(x)
    x = x.operands[0]
  if not negated and x.opcode == "negate":
    inner_chain.append(x)
    x, negated = x.operands[0], True
  if x is not t or not negated:
    return "the softmax backward's row sum is not of P * dP"
  head = inner_chain[-1]          # (the chain's node that reads t)
  ws = [y for y in t.users if y is not head]
  if len(ws) != 1 or ws[0].opcode != "add" or _other(ws[0], t) is not u or \
     len(t.users) != 2 or len(u.users) != 1 or len(rb.users) != 1 or \
     any(len(y.users) != 1 for y in inner_chain):
    return "the softmax backward is not P * dP - P * rowsum(P * dP)"
  w = ws[0]
  # ds = g(w): a chain of elementwise ops
  chain, x = [], w
  while len(x.users) == 1 and len(chain) <= MAX_GRAD_OPS:
    y = x.users[0]
    if y.opcode not in ELEMENTWISE_OPS or y.shape != w.shape or y.operands.count(x) != 1:
      break
    chain.append(y)
    x = y
  ds = x
  if len(ds.users) != 2:
    return f"%{ds.name}, the scores' cotangent, is read outside dq and dk"
  dq = [y for y in ds.users if y.operands[0] is ds and _dot_dims(y, nb, nb + 1)]
  dk = [y for y in ds.users if y.operands[0] is ds and _dot_dims(y, nb, nb)]
  if len(dq) != 1 or len(dk) != 1:
    return "the scores' cotangent is not multiplied by k and q"
  dq, dk = dq[0], dk[0]
  pq, pk = _perms(dq, nb, rhs_contract_first=True), _perms(dk, nb, rhs_contract_first=True)
  if pq is None or pk is None or dq.operands[1] is not k or dk.operands[1] is not q or \
     pq[1] != perms[1] or pk[1] != perms[0] or pk[0] != tuple(range(nb)) + (nb + 1, nb):
    return "dq and dk are not dot(ds, k) and dot(dsᵀ, q)"
  mine = [dP, t] + list(reversed(inner_chain)) + [rb, u, w] + chain
  # the forward's intermediates are read by the forward and this backward alone
  ok = set(inner) | {o, dv, dq, dk} | set(mine)
  for x in inner:
    if _constant_broadcast(x):
      continue
    if any(y not in ok for y in x.users) or x is x.parent.root:
      return f"%{x.name} is read elsewhere (the scores or probabilities are needed)"
  return dq, dk, dv, do, do_perm, chain, w, mine, dv_t


def grad_computation(module, chain, w: Instruction):
  """``g`` (module docstring) as a computation of ``w`` (parameter 0) and of the arrays it reads
  (the other parameters), and those arrays; (None, []) for an empty chain."""
  from ourjax.lowering.passes.attention import _score_computation
  if not chain:
    return None, []
  return _score_computation(module, list(reversed(chain)), w, "attention_grad")


def rewrite(comp: Computation, o: Instruction, m, canon, scores, fwd_leaves, grad_comp,
            grad_leaves, scale: float) -> Instruction | None:
  """Replace the backward ``m`` (``match``) by one ``attention-grad``; ``canon(x, perm)`` gives
  an operand in ``[B..., T, D]`` order.  None (nothing changed) when an operand is computed
  after the first of the dots it replaces."""
  dq, dk, dv, do, do_perm, chain, w, mine, dv_t = m
  q, k, v = (x for x in canon["qkv"])
  order = {x: i for i, x in enumerate(comp.instructions)}
  first = min((dq, dk, dv), key=lambda x: order[x])
  reads = [do] + list(fwd_leaves) + list(grad_leaves)
  if any(order.get(x, -1) >= order[first] for x in reads):
    return None
  doc = canon["make"](do, do_perm, first)
  nb = len(q.dims) - 2
  swap = tuple(range(nb)) + (nb + 1, nb)
  shapes = [Shape(x.dtype, x.dims) for x in (dq, dk, dv)]
  if dv_t:                 # (the instruction's dv is [B..., Tk, Dv]; the dot gave its transpose)
    shapes[2] = Shape(dv.dtype, tuple(dv.dims[i] for i in swap))
  attrs = {"scale": scale}
  if scores is not None:
    attrs["calls"] = scores
  if grad_comp is not None:
    attrs["grad_calls"] = grad_comp
  g = comp.add(Instruction("attention-grad", [q, k, v, o, doc] + list(fwd_leaves)
                           + list(grad_leaves), Shape.tuple(shapes), attrs), before=first)
  for i, x in enumerate((dq, dk, dv)):
    e = comp.add(Instruction("get-tuple-element", [g], shapes[i], {"index": i}), before=first)
    if i == 2 and dv_t:
      e = comp.add(Instruction("transpose", [e], Shape(dv.dtype, dv.dims),
                               {"dimensions": swap}), before=first)
    comp.replace_all_uses(x, e)
  dead = [dq, dk, dv] + list(reversed(mine))
  changed = True
  while changed:
    changed = False
    for x in dead:
      if x.parent is comp and not x.users and x is not comp.root:
        comp.remove(x)
        changed = True
  return g
