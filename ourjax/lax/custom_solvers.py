"""``lax.custom_root`` and ``lax.custom_linear_solve``: run a user's solver forwards, and
differentiate through the solution by the implicit function theorem instead of through the
solver's iterations (JAX's semantics: the solver itself is never differentiated).

Both are built on ``custom_jvp`` (forward mode, and reverse mode by linearising the JVP rule).
The functions the user passes (``f``, ``matvec``) are closure-converted, so derivatives flow to
the arrays they close over.  The tangent linear solve of ``custom_linear_solve`` is a
``custom_vjp`` whose backward pass calls ``transpose_solve`` (or ``solve`` when ``symmetric``),
so reverse mode never transposes the solver."""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes
from ourjax._pytree import tree_flatten, tree_map, tree_structure, tree_unflatten
from ourjax.core import Primitive, get_aval


def _api():
  from ourjax import api
  return api


def _cd():
  from ourjax import custom_derivatives
  return custom_derivatives


def _zero_tangent(x):
  aval = get_aval(x)
  if dtypes.issubdtype(aval.dtype, np.inexact):
    import ourjax.numpy as jnp
    return jnp.zeros(aval.shape, aval.dtype)
  return np.zeros(aval.shape, dtypes.float0)


def _neg(tree):
  import ourjax.numpy as jnp
  return tree_map(jnp.negative, tree)


def _sub(a, b):
  import ourjax.numpy as jnp
  return tree_map(jnp.subtract, a, b)


def _check_tree(what, expected_tree, got):
  got_tree = tree_structure(got)
  if got_tree != expected_tree:
    raise TypeError(f"{what} output must have the same tree structure as its input: expected "
                    f"{expected_tree}, got {got_tree}")


def _jvp_wrt_consts(fun, consts, consts_dot, like):
  """The JVP of ``fun(*consts)`` in the direction ``consts_dot`` (zeros of ``like`` if there
  are no constants to differentiate)."""
  if not consts:
    return tree_map(_zero_tangent, like)
  return _api().jvp(fun, tuple(consts), tuple(consts_dot))[1]


def _split_aux(out, has_aux, name):
  if not has_aux:
    return out, None
  if not (isinstance(out, (tuple, list)) and len(out) == 2):
    raise TypeError(f"{name} with has_aux=True must return a pair (solution, aux); got "
                    f"{type(out).__name__}")
  return out[0], out[1]


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
  """Find a root of ``f`` with ``solve(f, initial_guess)``, differentiable by implicit
  differentiation: ``tangent_solve(g, y)`` must solve the linear system ``g(x) = y`` (``g`` is
  the JVP of ``f`` at the root; for a scalar ``lambda g, y: y / g(1.0)``).  With
  ``has_aux=True`` ``solve`` returns ``(root, aux)``; ``aux`` carries no derivative.  The
  derivative with respect to ``initial_guess`` is zero (as JAX)."""
  guess_tree = tree_structure(initial_guess)
  cd = _cd()
  f_conv, consts = cd.closure_convert(f, initial_guess)
  _check_tree("custom_root f", guess_tree, _api().eval_shape(f, initial_guess))
  consts = tuple(consts)
  # the solver's own closed-over arrays are explicit (derivative-free) arguments
  solve_conv, solve_consts = cd.closure_convert(
      lambda c, guess: solve(lambda x: f_conv(x, *c), guess), consts, initial_guess)

  def run(consts, solve_consts, guess):
    out = solve_conv(consts, guess, *solve_consts)
    sol, aux = _split_aux(out, has_aux, "custom_root's solve")
    _check_tree("custom_root's solve", guess_tree, sol)
    return (sol, aux) if has_aux else sol

  root = cd.custom_jvp(run)

  def root_jvp(primals, tangents):
    consts, solve_consts, guess = primals
    consts_dot = tangents[0]
    out = root(consts, solve_consts, guess)
    sol = out[0] if has_aux else out
    rhs = _jvp_wrt_consts(lambda *c: f_conv(sol, *c), consts, consts_dot, sol)
    lin = lambda v: _api().jvp(lambda x: f_conv(x, *consts), (sol,), (v,))[1]
    sol_dot = _neg(tangent_solve(lin, rhs))
    if has_aux:
      return out, (sol_dot, tree_map(_zero_tangent, out[1]))
    return out, sol_dot

  root.defjvp(root_jvp)
  from ourjax.lax import stop_gradient
  return root(consts, tuple(solve_consts), tree_map(stop_gradient, initial_guess))


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False,
                        has_aux=False):
  """Solve ``matvec(x) = b`` with ``solve(matvec, b)``, differentiable without differentiating
  ``solve``: the JVP solves once more with ``solve``; the VJP solves the transposed system with
  ``transpose_solve(vecmat, ct)`` (``solve`` when ``symmetric=True``), so an iterative solver
  (a ``while_loop``) never needs to be transposed.  With ``has_aux=True`` ``solve`` returns
  ``(x, aux)``; ``aux`` carries no derivative."""
  from ourjax import ShapeDtypeStruct
  if symmetric:
    transpose_solve = solve
  cd, api = _cd(), _api()
  b_leaves, b_tree = tree_flatten(b)
  b_like = tree_unflatten(b_tree, [ShapeDtypeStruct(get_aval(x).shape, get_aval(x).dtype)
                                   for x in b_leaves])
  mv_conv, consts = cd.closure_convert(matvec, b)
  _check_tree("custom_linear_solve matvec", b_tree, api.eval_shape(matvec, b_like))
  consts = tuple(consts)
  # the solvers' own closed-over arrays are explicit operands (with no derivative)
  solve_conv, sconsts = cd.closure_convert(
      lambda c, rhs: solve(lambda x: mv_conv(x, *c), rhs), consts, b)
  tsolve_conv, tconsts = None, ()
  if transpose_solve is not None:
    def _tsolve(c, ct):
      vecmat_t = api.linear_transpose(lambda v: mv_conv(v, *c), b_like)
      return transpose_solve(lambda u: vecmat_t(u)[0], ct)
    tsolve_conv, tconsts = cd.closure_convert(_tsolve, consts, b)
  n_c, n_s, n_t = len(consts), len(sconsts), len(tconsts)
  aux_tree: list = []

  def solve_flat(*args):
    c, s, rhs = args[:n_c], args[n_c:n_c + n_s], args[n_c + n_s:]
    out = solve_conv(c, tree_unflatten(b_tree, list(rhs)), *s)
    x, aux = _split_aux(out, has_aux, "custom_linear_solve's solve")
    _check_tree("custom_linear_solve's solve", b_tree, x)
    aux_leaves, tree = tree_flatten(aux)
    aux_tree[:] = [tree]
    return tree_flatten(x)[0] + aux_leaves

  def matvec_flat(c, x_leaves):
    return tree_flatten(mv_conv(tree_unflatten(b_tree, list(x_leaves)), *c))[0]

  def tsolve_flat(c, t, ct_leaves):
    if tsolve_conv is None:
      raise TypeError("transpose_solve required for backwards mode automatic differentiation "
                      "of custom_linear_solve")
    out = tsolve_conv(tuple(c), tree_unflatten(b_tree, list(ct_leaves)), *t)
    return tree_flatten(out[0] if has_aux else out)[0]

  avals = [get_aval(v) for v in (*consts, *sconsts, *b_leaves)]
  from ourjax.interpreters import partial_eval as pe
  solve_jaxpr = pe.trace_to_jaxpr(solve_flat, avals, "custom_linear_solve")
  outs = linear_solve_p.bind(*consts, *sconsts, *tconsts, *b_leaves, solve_jaxpr=solve_jaxpr,
                             matvec=matvec_flat, tsolve=tsolve_flat, n_c=n_c, n_s=n_s, n_t=n_t,
                             n_x=len(b_leaves))
  x = tree_unflatten(b_tree, outs[:len(b_leaves)])
  if has_aux:
    return x, tree_unflatten(aux_tree[0], outs[len(b_leaves):])
  return x


# ------------------------------------------------------------------------------------------------
# the linear-solve primitive: operands are matvec's constants, solve's constants, transpose
# solve's constants, then b's leaves; results are x's leaves then aux's leaves.  ``solve_jaxpr``
# computes the results from (matvec consts, solve consts, rhs); ``matvec(c, x)`` and
# ``tsolve(c, t, ct)`` are the flat Python functions the JVP and transpose rules call.

linear_solve_p = Primitive("custom_linear_solve")
linear_solve_p.multiple_results = True


def _split_operands(args, n_c, n_s, n_t):
  return (list(args[:n_c]), list(args[n_c:n_c + n_s]), list(args[n_c + n_s:n_c + n_s + n_t]),
          list(args[n_c + n_s + n_t:]))


@linear_solve_p.def_abstract_eval
def _linear_solve_abstract_eval(*avals, solve_jaxpr, **_):
  return list(solve_jaxpr.out_avals)


@linear_solve_p.def_custom_impl
def _linear_solve_impl(*args, solve_jaxpr, n_c, n_s, n_t, **_):
  c, s, _t, rhs = _split_operands(args, n_c, n_s, n_t)
  return core.eval_jaxpr(solve_jaxpr.jaxpr, solve_jaxpr.consts, *c, *s, *rhs)


def _linear_solve_jvp(primals, tangents, **params):
  from ourjax.interpreters import ad
  n_c, n_s, n_t, n_x = params["n_c"], params["n_s"], params["n_t"], params["n_x"]
  c, s, t, b = _split_operands(primals, n_c, n_s, n_t)
  c_dot, _, _, b_dot = _split_operands(tangents, n_c, n_s, n_t)
  outs = linear_solve_p.bind(*primals, **params)
  x = outs[:n_x]
  out_avals = params["solve_jaxpr"].out_avals
  zeros_out = [ad.Zero(ad.tangent_aval(a)) for a in out_avals]
  live_c = [i for i, (v, d) in enumerate(zip(c, c_dot))
            if type(d) is not ad.Zero and dtypes.issubdtype(get_aval(v).dtype, np.inexact)]
  if not live_c and all(type(d) is ad.Zero for d in b_dot):
    return outs, zeros_out
  # A x = b  =>  A dx = db - dA x
  rhs = [ad.instantiate_zeros(d) for d in b_dot]
  if live_c:
    def mv_of_live(*live):
      cc = list(c)
      for i, v in zip(live_c, live):
        cc[i] = v
      return params["matvec"](cc, x)
    _, dA_x = _api().jvp(mv_of_live, tuple(c[i] for i in live_c),
                         tuple(c_dot[i] for i in live_c))
    rhs = [r - d for r, d in zip(rhs, dA_x)]
  x_dot = linear_solve_p.bind(*c, *s, *t, *rhs, **params)[:n_x]
  return outs, list(x_dot) + zeros_out[n_x:]


def _linear_solve_transpose(cts, *args, n_c, n_s, n_t, n_x, tsolve, **_):
  from ourjax.interpreters import ad
  c, s, t, b = _split_operands(args, n_c, n_s, n_t)
  if any(ad.is_undefined_primal(v) for v in (*c, *s, *t)):
    raise NotImplementedError("custom_linear_solve is linear in b only; its matrix and solver "
                              "constants cannot be transposed")
  ct_b = tsolve(c, t, [ad.instantiate_zeros(ct) for ct in cts[:n_x]])
  return [None] * (n_c + n_s + n_t) + list(ct_b)


def _linear_solve_batch(vals, dims, *, solve_jaxpr, matvec, tsolve, n_c, n_s, n_t, n_x,
                        axis_size):
  from ourjax.interpreters import batching
  api = _api()
  vals = [batching.bdim_at_front(v, d, axis_size) for v, d in zip(vals, dims)]
  n_in = len(vals)
  keep = [i for i in range(n_in) if not (n_c + n_s <= i < n_c + n_s + n_t)]
  new_jaxpr, _ = batching.vmap_jaxpr(solve_jaxpr, axis_size, [0] * len(keep))

  def matvec_b(c, x):
    return api.vmap(lambda cc, xx: matvec(list(cc), list(xx)))(tuple(c), tuple(x))

  def tsolve_b(c, t, ct):
    return api.vmap(lambda cc, tt, kk: tsolve(list(cc), list(tt), list(kk)))(
        tuple(c), tuple(t), tuple(ct))

  outs = linear_solve_p.bind(*vals, solve_jaxpr=new_jaxpr, matvec=matvec_b, tsolve=tsolve_b,
                             n_c=n_c, n_s=n_s, n_t=n_t, n_x=n_x)
  return outs, [0] * len(outs)


def _register_linear_solve_rules():
  from ourjax.interpreters import ad, batching
  ad.jvp_rules[linear_solve_p] = _linear_solve_jvp
  ad.transpose_rules[linear_solve_p] = _linear_solve_transpose
  batching.register_rule_with_axis_size(linear_solve_p, _linear_solve_batch)
  from ourjax.lowering import from_jaxpr

  @from_jaxpr.register_lowering(linear_solve_p)
  def _lower(ctx, avals_in, avals_out, *args, solve_jaxpr, n_c, n_s, n_t, **_):
    c, s, _t, rhs = _split_operands(args, n_c, n_s, n_t)
    consts = [ctx.constant(np.asarray(v), var.aval.dtype)
              for var, v in zip(solve_jaxpr.jaxpr.constvars, solve_jaxpr.consts)]
    return from_jaxpr.lower_eqns(ctx, solve_jaxpr.jaxpr, consts, [*c, *s, *rhs])


_register_linear_solve_rules()


def _instantiate(tangent, primal):
  leaves, tree = tree_flatten(tangent)
  pleaves = tree_flatten(primal)[0]
  out = [t if getattr(t, "dtype", None) != dtypes.float0 else _zero_tangent(p)
         for t, p in zip(leaves, pleaves)]
  return tree_unflatten(tree, out)
