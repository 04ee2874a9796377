"""``ourjax.scipy.optimize``: ``minimize`` with BFGS, as ``jax.scipy.optimize`` has it.

The whole minimisation is one ``lax.while_loop`` (so it runs under ``jit`` and ``vmap``); each
BFGS step searches along ``-H g`` for a step length that satisfies the strong Wolfe conditions
(bracketing, then zooming with safeguarded quadratic interpolation, one function and gradient
evaluation per line-search iteration), then updates the inverse Hessian estimate ``H``.

``status``: 0 converged (gradient norm below ``gtol``), 1 ``maxiter`` reached, 3 the line search
found no acceptable step within ``line_search_maxiter`` evaluations, 4 the loss became
non-finite.  As in JAX, ``tol`` is accepted but the stopping rule is ``options['gtol']``."""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ourjax import lax
import ourjax.numpy as jnp

__all__ = ["minimize", "OptimizeResults"]


class OptimizeResults(NamedTuple):
  """The result of ``minimize``: the solution ``x``, whether it converged (``success``,
  ``status``), the objective ``fun`` and its gradient ``jac`` there, the inverse Hessian
  estimate ``hess_inv``, and the numbers of function/gradient evaluations and iterations."""
  x: Any
  success: Any
  status: Any
  fun: Any
  jac: Any
  hess_inv: Any
  nfev: Any
  njev: Any
  nit: Any


class _LineSearch(NamedTuple):
  alpha: Any
  f: Any
  g: Any
  nfev: Any
  failed: Any


def _line_search(value_and_grad, x, p, f0, g0, old_old_f, maxiter, c1=1e-4, c2=0.9):
  """A step length along ``p`` satisfying the strong Wolfe conditions."""
  dtype = f0.dtype
  dphi0 = jnp.real(jnp.vdot(g0, p))
  # first trial: a step that would repeat the last decrease, at most 1 (Nocedal & Wright 3.60)
  first = jnp.where(jnp.isfinite(old_old_f) & (dphi0 < 0),
                    jnp.minimum(1.0, 1.01 * 2 * (f0 - old_old_f) / dphi0), 1.0)
  first = jnp.where(first > 0, first, 1.0).astype(dtype)
  zero = jnp.zeros((), dtype)

  def cond(s):
    return ~s["done"] & (s["i"] < maxiter)

  def body(s):
    zoom = s["zoom"]
    lo, hi = s["a_lo"], s["a_hi"]
    # the zoom phase's trial: the minimiser of the quadratic through (lo, f_lo, dphi_lo) and
    # (hi, f_hi), kept inside the middle 80% of the bracket, else the midpoint
    d = hi - lo
    denom = 2 * (s["f_hi"] - s["f_lo"] - s["dphi_lo"] * d)
    quad = lo - s["dphi_lo"] * d * d / jnp.where(denom != 0, denom, 1)
    inside = (denom > 0) & (jnp.abs(quad - lo) > 0.1 * jnp.abs(d)) & \
        (jnp.abs(hi - quad) > 0.1 * jnp.abs(d))
    a_zoom = jnp.where(inside, quad, lo + 0.5 * d)
    a = jnp.where(zoom, a_zoom, s["a_try"])
    f, g = value_and_grad(x + a * p)
    dphi = jnp.real(jnp.vdot(g, p))
    armijo_fails = (f > f0 + c1 * a * dphi0) | ~jnp.isfinite(f)
    curvature_ok = jnp.abs(dphi) <= -c2 * dphi0

    # bracketing phase
    b_to_zoom_hi = armijo_fails | ((s["i"] > 0) & (f >= s["f_prev"]))
    b_done = ~b_to_zoom_hi & curvature_ok
    b_to_zoom_lo = ~b_to_zoom_hi & ~b_done & (dphi >= 0)
    # zoom phase
    z_shrink_hi = armijo_fails | (f >= s["f_lo"])
    z_done = ~z_shrink_hi & curvature_ok
    z_flip = ~z_shrink_hi & ~z_done & (dphi * (hi - lo) >= 0)

    done = jnp.where(zoom, z_done, b_done)
    new = dict(s)
    new["i"] = s["i"] + 1
    new["done"] = done
    new["a_star"] = jnp.where(done, a, s["a_star"])
    new["f_star"] = jnp.where(done, f, s["f_star"])
    new["g_star"] = jnp.where(done, g, s["g_star"])
    # (bracketing) [a_prev, a] or [a, a_prev] becomes the bracket; else double the step
    b_lo = jnp.where(b_to_zoom_hi, s["a_prev"], a)
    b_hi = jnp.where(b_to_zoom_hi, a, s["a_prev"])
    b_f_lo = jnp.where(b_to_zoom_hi, s["f_prev"], f)
    b_f_hi = jnp.where(b_to_zoom_hi, f, s["f_prev"])
    b_dphi_lo = jnp.where(b_to_zoom_hi, s["dphi_prev"], dphi)
    start_zoom = b_to_zoom_hi | b_to_zoom_lo
    # (zoom) a replaces hi, or becomes lo (the old lo becoming hi when the slope says so)
    z_lo = jnp.where(z_shrink_hi, lo, a)
    z_hi = jnp.where(z_shrink_hi, a, jnp.where(z_flip, lo, hi))
    z_f_lo = jnp.where(z_shrink_hi, s["f_lo"], f)
    z_f_hi = jnp.where(z_shrink_hi, f, jnp.where(z_flip, s["f_lo"], s["f_hi"]))
    z_dphi_lo = jnp.where(z_shrink_hi, s["dphi_lo"], dphi)
    new["zoom"] = zoom | start_zoom
    new["a_lo"] = jnp.where(zoom, z_lo, jnp.where(start_zoom, b_lo, lo))
    new["a_hi"] = jnp.where(zoom, z_hi, jnp.where(start_zoom, b_hi, hi))
    new["f_lo"] = jnp.where(zoom, z_f_lo, jnp.where(start_zoom, b_f_lo, s["f_lo"]))
    new["f_hi"] = jnp.where(zoom, z_f_hi, jnp.where(start_zoom, b_f_hi, s["f_hi"]))
    new["dphi_lo"] = jnp.where(zoom, z_dphi_lo, jnp.where(start_zoom, b_dphi_lo,
                                                           s["dphi_lo"]))
    new["a_prev"] = jnp.where(zoom, s["a_prev"], a)
    new["f_prev"] = jnp.where(zoom, s["f_prev"], f)
    new["dphi_prev"] = jnp.where(zoom, s["dphi_prev"], dphi)
    new["a_try"] = jnp.where(zoom, s["a_try"], jnp.minimum(2 * a, 1e10).astype(dtype))
    return new

  init = dict(i=jnp.int32(0), done=jnp.bool_(False), zoom=jnp.bool_(False), a_try=first,
              a_prev=zero, f_prev=f0, dphi_prev=dphi0, a_lo=zero, a_hi=zero, f_lo=f0, f_hi=f0,
              dphi_lo=dphi0, a_star=zero, f_star=f0, g_star=g0)
  out = lax.while_loop(cond, body, init)
  failed = ~out["done"] | (dphi0 >= 0)
  return _LineSearch(out["a_star"], out["f_star"], out["g_star"], out["i"], failed)


def _minimize_bfgs(fun, x0, maxiter=None, norm=np.inf, gtol=1e-5, line_search_maxiter=10):
  from ourjax import value_and_grad
  x0 = jnp.asarray(x0)
  if x0.ndim != 1:
    raise TypeError(f"minimize: x0 must be a 1-dimensional array; got shape {x0.shape}")
  if not jnp.issubdtype(x0.dtype, jnp.inexact):
    x0 = x0.astype(jnp.result_type(x0.dtype, jnp.float32))
  d = x0.shape[0]
  maxiter = d * 200 if maxiter is None else maxiter
  vg = value_and_grad(fun)
  f0, g0 = vg(x0)
  dtype = x0.dtype
  eye = jnp.eye(d, dtype=dtype)

  def gnorm(g):
    return jnp.linalg.norm(g, ord=norm)

  def cond(s):
    return (s["status"] < 0) & (s["k"] < maxiter)

  def body(s):
    p = -(s["H"] @ s["g"])
    ls = _line_search(vg, s["x"], p, s["f"], s["g"], s["old_f"], line_search_maxiter)
    step = ls.alpha * p
    x_new = s["x"] + step
    y = ls.g - s["g"]
    ys = jnp.real(jnp.vdot(y, step))
    rho = jnp.where(ys != 0, 1.0 / jnp.where(ys != 0, ys, 1), 0).astype(dtype)
    left = eye - rho * jnp.outer(step, jnp.conj(y))
    right = eye - rho * jnp.outer(y, jnp.conj(step))
    H_new = left @ s["H"] @ right + rho * jnp.outer(step, jnp.conj(step))
    H_new = jnp.where(jnp.isfinite(rho) & (rho != 0), H_new, s["H"])
    ok = ~ls.failed
    new = dict(s)
    new["k"] = s["k"] + 1
    new["nfev"] = s["nfev"] + ls.nfev
    new["x"] = jnp.where(ok, x_new, s["x"])
    new["f"] = jnp.where(ok, ls.f, s["f"])
    new["g"] = jnp.where(ok, ls.g, s["g"])
    new["old_f"] = jnp.where(ok, s["f"], s["old_f"])
    new["H"] = jnp.where(ok, H_new, s["H"])
    converged = gnorm(new["g"]) < gtol
    status = jnp.where(converged, 0, jnp.where(ls.failed, 3, jnp.where(
        ~jnp.isfinite(new["f"]), 4, -1)))
    new["status"] = status.astype(jnp.int32)
    return new

  init = dict(k=jnp.int32(0), nfev=jnp.int32(1), x=x0, f=f0, g=g0, H=eye,
              old_f=f0 + gnorm(g0) / 2,
              status=jnp.where(gnorm(g0) < gtol, 0, -1).astype(jnp.int32))
  s = lax.while_loop(cond, body, init)
  status = jnp.where(s["status"] < 0, 1, s["status"]).astype(jnp.int32)
  return OptimizeResults(x=s["x"], success=status == 0, status=status, fun=s["f"], jac=s["g"],
                         hess_inv=s["H"], nfev=s["nfev"], njev=s["nfev"], nit=s["k"])


def minimize(fun: Callable, x0, args: tuple = (), *, method: str, tol: float | None = None,
             options: Mapping[str, Any] | None = None) -> OptimizeResults:
  """Minimise ``fun(x, *args)`` (a scalar function of a 1-D array) from ``x0``.  ``method``
  must be ``'BFGS'``; ``options``: ``maxiter`` (default 200 per dimension), ``norm`` (of the
  gradient, default inf), ``gtol`` (default 1e-5), ``line_search_maxiter`` (default 10).
  ``tol`` is accepted for scipy compatibility (as JAX, it does not change the stopping rule)."""
  if options is None:
    options = {}
  if not isinstance(args, tuple):
    raise TypeError(f"args argument to jax.scipy.optimize.minimize must be a tuple, got "
                    f"{args}")

  def fun_with_args(x):
    return fun(x, *args)

  if method.lower() == "bfgs":
    return _minimize_bfgs(fun_with_args, x0, **options)
  raise ValueError(f"Method {method} not recognized")
