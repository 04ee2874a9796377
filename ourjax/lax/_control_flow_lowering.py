"""The HLO lowerings of ``lax.cond``, ``lax.while_loop`` and ``lax.scan``'s primitives
(``cond_p``, ``while_p``, ``scan_p``: see ``control_flow.py``), registered on import."""
import builtins

import numpy as np

from ourjax.core import ShapedArray
from ourjax.lax.control_flow import _split, cond_p, scan_p, while_p

# ------------------------------------------------------------------------------------------------
# Lowerings.  cond: an HLO conditional on the clamped index, each branch taking the tuple of all
# operands.  while: an HLO while over the tuple (cond consts, body consts, carry).  scan: a while
# over (i, consts, carry, xs, ys) whose body reads x_i with dynamic-slice and writes y_i with
# dynamic-update-slice (from the end with ``reverse``), ``unroll`` steps per iteration.


def _register_lowerings():
  from ourjax.lowering import hlo
  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(cond_p)
  def _cond_lower(ctx, avals_in, avals_out, index, *ops, branches):
    b = ctx.builder
    n = len(branches)
    if n == 1:
      return ctx.inline(branches[0], ops)
    index = b.clamp(ctx.constant(0, np.int32), index, ctx.constant(n - 1, np.int32))
    op_avals = avals_in[1:]
    comps = [ctx.lower_tuple_jaxpr(f"branch_{i}", op_avals,
                                   lambda sub, xs, br=br: sub.inline(br, xs))
             for i, br in enumerate(branches)]
    arg = b.tuple(list(ops))
    out = b.conditional(index, [arg] * n, comps)
    return ctx.unpack(out)

  @register_lowering(while_p)
  def _while_lower(ctx, avals_in, avals_out, *args, cond_jaxpr, body_jaxpr, cond_nconsts,
                   body_nconsts):
    b = ctx.builder
    nc, nb = cond_nconsts, body_nconsts

    def cond_body(sub, xs):
      cconsts, _, carry = _split(xs, [nc, nb])
      return sub.inline(cond_jaxpr, cconsts + carry)[0]

    def body_body(sub, xs):
      cconsts, bconsts, carry = _split(xs, [nc, nb])
      return cconsts + bconsts + sub.inline(body_jaxpr, bconsts + carry)

    state_shape = hlo.Shape.tuple([ctx.shape(a) for a in avals_in])
    cond_comp = ctx.computation("while_cond", [state_shape],
                                lambda sub, ps: cond_body(sub, sub.unpack(ps[0])))
    body_comp = ctx.lower_tuple_jaxpr("while_body", avals_in, body_body)
    out = b.while_loop(b.tuple(list(args)), cond_comp, body_comp)
    return ctx.unpack(out)[nc + nb:]

  @register_lowering(scan_p)
  def _scan_lower(ctx, avals_in, avals_out, *args, jaxpr, length, reverse, num_consts,
                  num_carry, linear, unroll, **_):
    b = ctx.builder
    consts, carry, xs = _split(args, [num_consts, num_carry])
    x_avals = avals_in[num_consts + num_carry:]
    y_avals = avals_out[num_carry:]
    i32 = np.dtype(np.int32)
    ys_init = [ctx.full(0, a) for a in y_avals]
    if length == 0:
      return list(carry) + ys_init
    nx = len(xs)
    # ``unroll`` steps per loop iteration (0: every step, as True); the steps left over
    # (length % unroll) follow the loop, and a loop of one iteration is inlined
    u = length if unroll == 0 else builtins.max(1, builtins.min(int(unroll), length))
    blocks, rest = divmod(length, u)

    def steps(sub, first, count, cs, cr, xv, yv):
      """``count`` scan steps from step index ``first`` (an s32 instruction)."""
      sb = sub.builder
      zero = sub.constant(0, i32)
      for k in range(count):
        i = sb.add(first, sub.constant(k, i32)) if k else first
        t = sb.subtract(sub.constant(length - 1, i32), i) if reverse else i
        x_t = []
        for x, a in zip(xv, x_avals):
          sl = sb.dynamic_slice(x, [t] + [zero] * (len(a.shape) - 1), (1,) + a.shape[1:])
          x_t.append(sb.reshape(sl, a.shape[1:]))
        outs = sub.inline(jaxpr, cs + cr + x_t)
        cr, y_t = list(outs[:num_carry]), outs[num_carry:]
        yv = [sb.dynamic_update_slice(y, sb.reshape(v, (1,) + a.shape[1:]),
                                      [t] + [zero] * (len(a.shape) - 1))
              for y, v, a in zip(yv, y_t, y_avals)]
      return cr, yv

    if blocks == 1:
      carry_out, ys_out = steps(ctx, ctx.constant(0, i32), u, list(consts), list(carry),
                                list(xs), ys_init)
    else:
      state_avals = ([ShapedArray((), i32)] + list(avals_in) + list(y_avals))

      def cond_fn(sub, ps):
        i = sub.builder.get_tuple_element(ps[0], 0)
        return sub.builder.compare(i, sub.constant(blocks * u, i32), "LT")

      def body_fn(sub, state):
        i, cs, cr, xv, yv = _split(state, [1, num_consts, num_carry, nx])
        cr, yv = steps(sub, i[0], u, cs, cr, xv, yv)
        return [sub.builder.add(i[0], sub.constant(u, i32))] + cs + cr + xv + yv

      state_shape = hlo.Shape.tuple([ctx.shape(a) for a in state_avals])
      cond_comp = ctx.computation("scan_cond", [state_shape], cond_fn)
      body_comp = ctx.lower_tuple_jaxpr("scan_body", state_avals, body_fn)
      init = b.tuple([ctx.constant(0, i32)] + list(args) + ys_init)
      out = ctx.unpack(b.while_loop(init, cond_comp, body_comp))
      _, _, carry_out, _, ys_out = _split(out, [1, num_consts, num_carry, nx])
    if rest:
      carry_out, ys_out = steps(ctx, ctx.constant(blocks * u, i32), rest, list(consts),
                                list(carry_out), list(xs), list(ys_out))
    return list(carry_out) + list(ys_out)


_register_lowerings()
