"""Autodiff: every differentiable primitive against central finite differences (float64), forward
mode against reverse mode (<J v, u> == <v, J^T u>), and the API around them: grad/vjp/jvp/
linearize/jacobians/hessian/linear_transpose, errors, pytrees, float0, jit and vmap compositions.

The primitive table is checked against the registries: a primitive that gains a JVP rule must
get an example here (or a reason in ``EXEMPT``), and primitives lacking JVP rules are listed.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ourjax
import ourjax.numpy as jnp
from ourjax import core, dtypes, lax
from ourjax.interpreters import ad

float0 = dtypes.float0
# the x64 fixture is entered once per test; it is a constant setting for every drawn input
_FIXTURE_OK = [HealthCheck.function_scoped_fixture]

# ------------------------------------------------------------------------------------------------
# The primitive table


class Ex(NamedTuple):
  prim: str                    # the primitive this example is for
  fn: Callable                 # fn(*float64 args) -> array or tuple of arrays
  shapes: tuple                # shapes of the differentiable (float) arguments
  lo: float = -2.0
  hi: float = 2.0
  mode: str = "range"          # "range": values in [lo, hi]; "mag": |x| in [lo, hi], any sign;
  #                              "distinct": all values (of all args) distinct by >= 0.05
  kind: str = "diff"           # "diff": compare with finite differences; "zero": derivative is
  #                              zero; "fwd": forward mode only (no reverse rule, e.g. while)
  rtol: float = 1e-5
  label: str = ""


EXAMPLES: list[Ex] = []


def _re_im(z):
  return lax.real(z), lax.imag(z)


def _cplx(x, y):
  return lax.add(lax.convert_element_type(x, np.complex128),
                 lax.mul(lax.convert_element_type(y, np.complex128), 1j))


def ex(prim, fn, shapes, **kw):
  EXAMPLES.append(Ex(prim, fn, tuple(shapes), **kw))


S, V, M = (), (3,), (2, 3)

# elementwise unary
for _name, _lo, _hi, _mode in [
    ("neg", -2, 2, "range"), ("exp", -2, 2, "range"), ("exp2", -2, 2, "range"),
    ("log", 0.2, 3, "range"), ("log1p", -0.5, 2, "range"), ("expm1", -2, 2, "range"),
    ("tanh", -2, 2, "range"), ("logistic", -3, 3, "range"), ("sin", -3, 3, "range"),
    ("cos", -3, 3, "range"), ("tan", -1.2, 1.2, "range"), ("asin", -0.8, 0.8, "range"),
    ("acos", -0.8, 0.8, "range"), ("atan", -3, 3, "range"), ("sinh", -2, 2, "range"),
    ("cosh", -2, 2, "range"), ("asinh", -3, 3, "range"), ("acosh", 1.2, 3, "range"),
    ("atanh", -0.8, 0.8, "range"), ("sqrt", 0.2, 3, "range"), ("rsqrt", 0.2, 3, "range"),
    ("cbrt", 0.2, 3, "mag"), ("erf", -2, 2, "range"), ("erfc", -2, 4, "range"),
    ("erf_inv", -0.9, 0.9, "range"),
    ("lgamma", 0.3, 4, "range"), ("digamma", 0.5, 4, "range"), ("abs", 0.1, 2, "mag"),
    ("square", -2, 2, "range")]:
  ex(_name, getattr(lax, _name), [V], lo=_lo, hi=_hi, mode=_mode)
ex("integer_pow", lambda x: lax.integer_pow(x, 3), [V], label="integer_pow:3")
ex("integer_pow", lambda x: lax.integer_pow(x, -2), [V], lo=0.5, mode="mag",
   label="integer_pow:-2")
ex("integer_pow", lambda x: lax.integer_pow(x, 1), [V], label="integer_pow:1")
ex("integer_pow", lambda x: lax.integer_pow(x, 0), [V], label="integer_pow:0")

# elementwise binary (also with a rank-0 operand, which lax broadcasts)
for _name in ("add", "sub", "mul"):
  ex(_name, getattr(lax, _name), [V, V])
  ex(_name, getattr(lax, _name), [S, V], label=f"{_name}:scalar-lhs")
ex("div", lax.div, [V, V], lo=0.5, mode="mag")
ex("div", lax.div, [V, S], lo=0.5, mode="mag", label="div:scalar-rhs")
ex("pow", lax.pow, [V, V], lo=0.3, hi=2.0, label="pow")
ex("pow", lambda x, y: lax.pow(x, y), [S, V], lo=0.3, hi=2.0, label="pow:scalar-base")
ex("rem", lambda x, y: lax.rem(lax.mul(x, 0.9), lax.add(lax.abs(y), 2.0)), [V, V], lo=0.1,
   hi=1.9, label="rem")   # x/y stays inside (0, 1): away from the jumps
ex("atan2", lax.atan2, [V, V], lo=0.3, mode="mag")
ex("max", lax.max, [V, V], mode="distinct")
ex("max", lax.max, [V, S], mode="distinct", label="max:scalar")
ex("min", lax.min, [V, V], mode="distinct")
ex("min", lax.min, [S, V], mode="distinct", label="min:scalar")
ex("clamp", lambda lo_, x, hi_: lax.clamp(lax.min(lo_, hi_), x, lax.max(lo_, hi_)), [S, V, S],
   mode="distinct")
ex("clamp", lambda lo_, x, hi_: lax.clamp(lax.min(lo_, hi_), x, lax.max(lo_, hi_)), [V, V, V],
   mode="distinct", label="clamp:arrays")
ex("select_n", lambda a, b: lax.select_n(np.array([True, False, True]), a, b), [V, V])
ex("select_n", lambda a, b, c: lax.select_n(np.array([0, 2, 1], np.int32), a, b, c),
   [V, V, V], label="select_n:3")
ex("convert_element_type",
   lambda x: lax.convert_element_type(lax.convert_element_type(x, np.float32), np.float64),
   [V], rtol=1e-3)
# reduce_precision to f64's own format is the identity, so its JVP (identity) is testable
ex("reduce_precision", lambda x: lax.reduce_precision(x, exponent_bits=11, mantissa_bits=52),
   [V])
ex("real", lambda x: lax.real(lax.mul(lax.convert_element_type(x, np.complex128), 1 + 2j)), [V])
ex("imag", lambda x: lax.imag(lax.mul(lax.convert_element_type(x, np.complex128), 1 + 2j)), [V])
ex("conj", lambda x: lax.real(lax.conj(lax.mul(lax.convert_element_type(x, np.complex128),
                                               1 + 2j))), [V])
ex("copy", lambda x: lax.copy_p.bind(x), [V])
ex("add_any", lambda x, y: ad.add_any_p.bind(x, y), [V, V])

# zero derivative (piecewise constant, predicates, integer results)
for _name in ("sign", "floor", "ceil", "round", "is_finite"):
  ex(_name, getattr(lax, _name), [V], kind="zero")
for _name in ("eq", "ne", "lt", "le", "gt", "ge", "nextafter"):
  ex(_name, getattr(lax, _name), [V, V], kind="zero")
ex("stop_gradient", lambda x: lax.mul(lax.stop_gradient(x), 2.0), [V], kind="zero")
ex("bitcast_convert_type", lambda x: lax.bitcast_convert_type(x, np.int64), [V], kind="zero")
ex("argmax", lambda x: lax.argmax(x, 1, np.int32), [M], mode="distinct", kind="zero")
ex("argmin", lambda x: lax.argmin(x, 0, np.int32), [M], mode="distinct", kind="zero")

# structural
ex("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1,)), [V])
ex("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3), ()), [S], label="bid:scalar")
ex("reshape", lambda x: lax.reshape(x, (3, 2)), [M])
ex("transpose", lambda x: lax.transpose(x, (1, 0)), [M])
ex("squeeze", lambda x: lax.squeeze(x, (0,)), [(1, 3)])
ex("rev", lambda x: lax.rev(x, (0, 1)), [M])
ex("pad", lambda x, v: lax.pad(x, v, ((1, 2, 1), (0, -1, 0))), [M, S])
ex("concatenate", lambda x, y: lax.concatenate([x, y], 1), [M, (2, 2)])
ex("slice", lambda x: lax.slice(x, (0, 1), (2, 3)), [M])
ex("slice", lambda x: lax.slice(x, (1,), (6,), (2,)), [(6,)], label="slice:strided")
ex("dynamic_slice", lambda x: lax.dynamic_slice(x, (np.int32(1), np.int32(0)), (1, 2)), [M])
ex("dynamic_update_slice",
   lambda x, u: lax.dynamic_update_slice(x, u, (np.int32(0), np.int32(1))), [M, (2, 2)])


def _gather_ex():
  from ourjax.lax import slicing as sl
  dn = sl.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                 start_index_map=(0,))
  idx = np.array([[2], [0], [2]], np.int32)
  ex("gather", lambda x: lax.gather(x, idx, dn, (1, 3)), [(4, 3)])
  sdn = sl.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,))
  uidx = np.array([[3], [1]], np.int32)
  ridx = np.array([[1], [3], [1]], np.int32)
  ex("scatter", lambda x, u: lax.scatter(x, uidx, u, sdn, unique_indices=True),
     [(4, 3), (2, 3)])
  ex("scatter-add", lambda x, u: lax.scatter_add(x, ridx, u, sdn), [(4, 3), (3, 3)])
  ex("scatter-sub", lambda x, u: lax.scatter_sub(x, ridx, u, sdn), [(4, 3), (3, 3)])
  ex("scatter-mul", lambda x, u: lax.scatter_mul(x, uidx, u, sdn, unique_indices=True),
     [(4, 3), (2, 3)])   # (JAX differentiates scatter_mul only with unique indices, too)
  ex("scatter-min", lambda x, u: lax.scatter_min(x, uidx, u, sdn), [(4, 3), (2, 3)],
     mode="distinct")
  ex("scatter-max", lambda x, u: lax.scatter_max(x, uidx, u, sdn), [(4, 3), (2, 3)],
     mode="distinct")


_gather_ex()

# reductions and scans
ex("reduce_sum", lambda x: lax.reduce_sum(x, (1,)), [M])
ex("reduce_sum", lambda x: lax.reduce_sum(x, (0, 1)), [M], label="reduce_sum:all")
ex("reduce_prod", lambda x: lax.reduce_prod(x, (1,)), [M], lo=0.5, mode="mag")
ex("reduce_max", lambda x: lax.reduce_max(x, (0,)), [M], mode="distinct")
ex("reduce_min", lambda x: lax.reduce_min(x, (0, 1)), [M], mode="distinct")
ex("reduce", lambda x: lax.reduce(x, 0.0, lambda a, b: a * b + b, (1,)), [M])
ex("reduce_and", lambda x: lax.reduce_and(lax.gt(x, 0.0), (0,)), [V], kind="zero")
ex("reduce_or", lambda x: lax.reduce_or(lax.gt(x, 0.0), (0,)), [V], kind="zero")
ex("reduce_xor", lambda x: lax.reduce_xor(lax.gt(x, 0.0), (0,)), [V], kind="zero")
ex("cumsum", lambda x: lax.cumsum(x, 1, True), [M])
ex("cumprod", lambda x: lax.cumprod(x, 1), [M], lo=0.5, mode="mag")
ex("cummax", lambda x: lax.cummax(x, 0), [(4,)], mode="distinct")
ex("cummin", lambda x: lax.cummin(x, 1, True), [M], mode="distinct")
ex("cumlogsumexp", lambda x: lax.cumlogsumexp(x, 1), [M])
ex("reduce_window_sum", lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (2, 1),
                                                    ((1, 0), (0, 1)), (2, 1), (1, 2)), [(3, 4)])
ex("reduce_window_max", lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 1), "SAME",
                                                    (2, 1)), [(3, 4)], mode="distinct")
ex("reduce_window_min", lambda x: lax.reduce_window(x, np.inf, lax.min, (2,), (1,), "VALID",
                                                    None, (2,)), [(5,)], mode="distinct")
ex("reduce_window", lambda x: lax.reduce_window(x, 1.0, lax.mul, (2, 2), (1, 1), "SAME"),
   [(2, 3)], kind="fwd")
ex("fft", lambda x: _re_im(lax.fft(x, "fft", (2, 3))), [M])
ex("fft", lambda x, y: _re_im(lax.fft(_cplx(x, y), "ifft", (3,))), [M, M], label="fft:ifft")
ex("fft", lambda x: _re_im(lax.fft(x, "rfft", (2, 4))), [(2, 4)], label="fft:rfft")
ex("fft", lambda x, y: lax.fft(_cplx(x, y), "irfft", (2, 4)), [(2, 3), (2, 3)],
   label="fft:irfft even")
ex("fft", lambda x, y: lax.fft(_cplx(x, y), "irfft", (5,)), [(3,), (3,)], label="fft:irfft odd")
# linear algebra: inputs made well conditioned inside fn (positive definite, diagonally
# dominant: pivots and eigenvalue order stay put), vectors with their signs fixed
_LA = lax.linalg
_Q = (3, 3)


def _pd(x):
  return x @ jnp.swapaxes(x, -1, -2) + 3 * jnp.eye(x.shape[-1])


def _pdc(x, y):
  z = _cplx(x, y)
  return z @ jnp.conj(jnp.swapaxes(z, -1, -2)) + 3 * jnp.eye(x.shape[-1])


def _dom(x, scale=6.0):
  # (plus a dense part: exactly triangular inputs are where LAPACK's Householder QR switches
  # between reflecting and not, a jump of the signs; not a constant, which a constant draw
  # cancels: hypothesis drew x = -0.5 everywhere, making a wide QR's input diagonal)
  m, n = x.shape[-2:]
  return x + scale * jnp.eye(m, n) + 0.5 + 0.37 * jnp.arange(m * n).reshape(m, n) / (m * n)


def _sfix(v, axis=-2):
  i = jnp.argmax(jnp.abs(v), axis=axis, keepdims=True)
  return v * jnp.sign(lax.stop_gradient(jnp.take_along_axis(v, i, axis=axis)))


_TS = dict(left_side=False, lower=False, transpose_a=False, conjugate_a=False,
           unit_diagonal=False)
ex("cholesky", lambda x: _LA.cholesky(_pd(x)), [_Q])
ex("cholesky", lambda x: _LA.cholesky(_pd(x)), [(2, 3, 3)], label="cholesky:batched")
ex("cholesky", lambda x, y: _re_im(_LA.cholesky(_pdc(x, y))), [_Q, _Q], label="cholesky:complex")
ex("triangular_solve", lambda a, b: _LA.triangular_solve(_dom(a), b, left_side=True, lower=True),
   [_Q, (3, 2)])
ex("triangular_solve", lambda a, b: _LA.triangular_solve(
    _dom(a), b, left_side=False, lower=False, transpose_a=True, unit_diagonal=True),
   [_Q, (2, 3)], label="triangular_solve:right transposed unit")
ex("triangular_solve", lambda a, b, c: _re_im(_LA.triangular_solve(
    _dom(_cplx(a, b)), _cplx(c, c), left_side=True, lower=False, transpose_a=True,
    conjugate_a=True)), [_Q, _Q, (3, 2)], label="triangular_solve:complex adjoint")
ex("lu", lambda x: _LA.lu(_dom(x))[0], [_Q])
ex("lu", lambda x: _LA.lu(_dom(x))[0], [(3, 4)], label="lu:wide")
ex("lu", lambda x: _LA.lu(_dom(x))[0], [(4, 3)], label="lu:tall")
ex("qr", lambda x: _LA.qr(_dom(x), full_matrices=False), [(4, 3)])
ex("qr", lambda x: _LA.qr(_dom(x), full_matrices=True), [_Q], label="qr:square")
# (the complete Q's last column is fixed only up to a rotation: its product with R is checked)
ex("qr", lambda x: (lambda q, r: (q[:, :3], r, q @ r))(*_LA.qr(_dom(x), full_matrices=True)),
   [(4, 3)], label="qr:tall complete")
ex("qr", lambda x: _LA.qr(_dom(x), full_matrices=False), [(3, 4)], label="qr:wide")
ex("qr", lambda x, y: _re_im(_LA.qr(_dom(_cplx(x, y)), full_matrices=False)[1]), [(4, 3)] * 2,
   label="qr:complex r")
ex("eigh", lambda x: (lambda v, w: (_sfix(v), w))(
    *_LA.eigh(x + jnp.diag(jnp.array([0.0, 5.0, 10.0])))), [_Q])
ex("eigh", lambda x, y: _LA.eigh(_pdc(x, y) + jnp.diag(jnp.array([0.0, 30.0, 60.0])))[1],
   [_Q, _Q], label="eigh:complex eigenvalues")
ex("svd", lambda x: (lambda u, s, vh: (_sfix(u), s, _sfix(vh, -1)))(
    *_LA.svd(x + jnp.array([[6.0, 0], [0, 3.0], [0, 0]]), full_matrices=False)), [(3, 2)])
ex("svd", lambda x: (lambda u, s, vh: (_sfix(u), s, _sfix(vh, -1)))(
    *_LA.svd(x + jnp.array([[6.0, 0, 0], [0, 3.0, 0]]), full_matrices=False)), [(2, 3)],
   label="svd:wide")
ex("svd", lambda x: _LA.svd(x + jnp.diag(jnp.array([9.0, 5.0, 0.0])) + 0.3, compute_uv=False), [_Q],
   label="svd:values")
# (plus a dense part: LAPACK's geev loses eigenvector components next to entries near 1e-304)
ex("eig", lambda x: jnp.sort(jnp.real(_LA.eig(x + jnp.diag(jnp.array([0.0, 15.0, 30.0])) + 0.25,
                                     compute_left_eigenvectors=False,
                                     compute_right_eigenvectors=False)[0])), [_Q])
ex("qr_pivots", lambda x: _LA.qr_pivots_p.bind(x)[0], [(3, 4)], kind="zero")
ex("eig", lambda x, y: _re_im(jnp.stack(_LA.eig(
    _cplx(x, y) + jnp.diag(jnp.array([0.0, 15.0, 30.0])) + 0.25, enable_eigvec_derivs=True)[1:])),
   [_Q, _Q], label="eig:left and right eigenvectors")
# special functions (float64 compositions): closed forms in x, central differences in a, b
_SP = lax.special
ex("igamma", lambda a, x: lax.igamma(a, x), [V, V], lo=0.5, hi=3.0, rtol=1e-4)
ex("igammac", lambda a, x: lax.igammac(a, x), [V, V], lo=0.5, hi=3.0, rtol=1e-4)
ex("igamma_grad_a", lambda a, x: lax.igamma_grad_a(a, x), [V, V], lo=0.5, hi=3.0, rtol=1e-3)
ex("regularized_incomplete_beta", lambda a, b, x: lax.betainc(a, b, x), [V, V, V], lo=0.2,
   hi=0.8, rtol=1e-4)
ex("betainc_grad_a", lambda a, b, x: _SP._betainc_grad_a_p.bind(a, b, x), [V, V, V], lo=0.2,
   hi=0.8, rtol=1e-3)
ex("betainc_grad_b", lambda a, b, x: _SP._betainc_grad_b_p.bind(a, b, x), [V, V, V], lo=0.2,
   hi=0.8, rtol=1e-3)
# (|x| >= 0.1: exp(-|x|) has a kink at 0, which central differences straddle)
ex("bessel_i0e", lambda x: lax.bessel_i0e(x), [V], lo=0.1, hi=40, mode="mag")
ex("bessel_i1e", lambda x: lax.bessel_i1e(x), [V], lo=0.1, hi=40, mode="mag")
ex("sort", lambda x: lax.sort(x), [M], mode="distinct")
ex("sort", lambda k, v: lax.sort_key_val(k, v, 1), [M, M], mode="distinct",
   label="sort:key_val")
ex("top_k", lambda x: lax.top_k(x, 2), [(4,)], mode="distinct")

# contractions
ex("dot_general", lambda x, y: lax.dot(x, y), [M, (3, 4)])
ex("dot_general", lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))),
   [(2, 3, 4), (2, 4, 2)], label="dot_general:batch")
ex("conv_general_dilated", lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID"),
   [(1, 2, 5), (3, 2, 2)])
ex("conv_general_dilated",
   lambda x, w: lax.conv_general_dilated(x, w, (2, 1), ((1, 0), (0, 1)), rhs_dilation=(1, 2)),
   [(1, 1, 4, 4), (2, 1, 2, 2)], label="conv:2d strided dilated")

# control flow and calls
ex("cond", lambda x, y: lax.cond(True, lambda a, b: lax.sin(a) * b, lambda a, b: a + b, x, y),
   [V, V])
ex("scan", lambda c, xs: lax.scan(lambda c, x: (lax.sin(c) * x, c * x), c, xs), [S, (4,)])
ex("while", lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, lax.sin(c[1])),
                                     (0, x))[1], [V], kind="fwd")
ex("jit", lambda x, y: ourjax.jit(lambda a, b: lax.sin(a) * b)(x, y), [V, V])
ex("name", lambda x: lax.mul(ourjax.ad_checkpoint.checkpoint_name(x, "a"), x), [V])

# Primitives with JVP rules that are tested elsewhere, with the reason.
EXEMPT = {
    "custom_jvp_call": "tests/test_custom_derivatives.py",
    "custom_vjp_call": "tests/test_custom_derivatives.py",
    "custom_lin": "the linear half of custom_vjp: tests/test_custom_derivatives.py",
    "custom_linear_solve": "lax.custom_linear_solve: tests/test_custom_solvers.py",
    "custom_vmap_call": "custom_batching.custom_vmap: tests/test_custom_batching.py",
    "checkpoint": "tests/test_remat.py",
    "debug_callback": "no outputs; the forward values reach the callback: tests/test_callbacks.py",
    "debug_print": "debug_callback's rules (debug.print): tests/test_callbacks.py",
    "pure_callback": "its JVP rule raises JAX's error: tests/test_callbacks.py",
    "io_callback": "its JVP rule raises JAX's error: tests/test_callbacks.py",
    **{n: "named-axis collectives: tests/test_spmd.py" for n in (
        "psum", "pmax", "pmin", "all_gather", "reduce_scatter", "all_to_all", "ppermute",
        "axis_index")},
}
# Integer-only primitives: their tangents are float0, checked by test_integer_primitives.
INT_ONLY = {"and", "or", "xor", "not", "shift_left", "shift_right_arithmetic",
            "shift_right_logical", "population_count", "clz"}
# Primitives with no JVP rule (and why that is fine); anything else without one is a gap.
NO_JVP_OK = {"iota": "takes no operands"}


def _prims_by_name():
  from ourjax import lax as L
  out = {}
  for mod in list(vars(L).values()):
    if isinstance(mod, core.Primitive):
      out[mod.name] = mod
  for p in list(ad.jvp_rules) + list(ad.transpose_rules):
    out.setdefault(p.name, p)
  return out


def test_every_primitive_with_a_jvp_rule_has_an_example():
  covered = {e.prim for e in EXAMPLES} | set(EXEMPT) | INT_ONLY
  missing = sorted(p.name for p in ad.jvp_rules if p.name not in covered)
  assert not missing, f"primitives with a JVP rule but no autodiff example here: {missing}"


def test_primitives_lacking_jvp_rules():
  """The gaps, visible: every primitive in ourjax.lax without a JVP rule."""
  lacking = sorted(name for name, p in _prims_by_name().items() if p not in ad.jvp_rules)
  unexpected = [n for n in lacking if n not in NO_JVP_OK]
  assert not unexpected, f"primitives without a JVP rule: {unexpected}"


def test_linear_primitives_have_transpose_rules():
  lacking = sorted(p.name for p in ad.linear_primitives if p not in ad.transpose_rules)
  assert not lacking


# ------------------------------------------------------------------------------------------------
# Drawing points


@st.composite
def _args_for(draw, e: Ex):
  sizes = [int(np.prod(s, dtype=np.int64)) for s in e.shapes]
  n = sum(sizes)
  if e.mode == "distinct":
    incs = draw(hnp.arrays(np.float64, (n,), elements=st.floats(0.05, 0.6)))
    vals = e.lo + np.cumsum(incs)
    perm = draw(st.permutations(list(range(n))))
    flat = vals[np.array(perm, dtype=np.int64)] if n else vals
  else:
    flat = draw(hnp.arrays(np.float64, (n,), elements=st.floats(e.lo, e.hi)))
    if e.mode == "mag":
      signs = draw(hnp.arrays(np.bool_, (n,)))
      flat = np.where(signs, -flat, flat)
  out, start = [], 0
  for s, k in zip(e.shapes, sizes):
    out.append(np.array(flat[start:start + k]).reshape(s))
    start += k
  return out


def _tree_leaves_np(x):
  return [np.asarray(v) for v in ourjax.tree_util.tree_leaves(x)]


def _labels(e: Ex) -> str:
  return e.label or e.prim


def _fd_jvp(f, args, tangents, eps):
  plus = f(*[a + eps * t for a, t in zip(args, tangents)])
  minus = f(*[a - eps * t for a, t in zip(args, tangents)])
  return [(np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * eps)
          for p, m in zip(_tree_leaves_np(plus), _tree_leaves_np(minus))]


def _inexact_leaves(tree):
  return [np.asarray(v) for v in ourjax.tree_util.tree_leaves(tree)
          if dtypes.is_inexact(np.asarray(v).dtype)]


# Examples that fail because of a bug in a rule owned elsewhere: xfail(strict) so the failure
# stays visible and the mark must go when the rule is fixed.
KNOWN_BUGS = {
    "reduce": "lax.reduce with a custom computation: its JVP gives zero tangents",
}


def _param(e):
  label = _labels(e)
  marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[label])] if label in KNOWN_BUGS \
      else []
  return pytest.param(e, id=label, marks=marks)


_DIFF = [e for e in EXAMPLES if e.kind in ("diff", "fwd")]
_ZERO = [e for e in EXAMPLES if e.kind == "zero"]


@pytest.mark.parametrize("e", [_param(e) for e in _DIFF])
@settings(max_examples=4, suppress_health_check=_FIXTURE_OK)
@given(data=st.data())
def test_jvp_and_vjp_match_finite_differences(x64, e, data):
  args = data.draw(_args_for(e))
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  tangents = [rng.standard_normal(a.shape) for a in args]
  primal_out, tangent_out = ourjax.jvp(e.fn, tuple(args), tuple(tangents))
  want_out = e.fn(*args)
  for got, want in zip(_tree_leaves_np(primal_out), _tree_leaves_np(want_out)):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  fd = _fd_jvp(e.fn, args, tangents, eps=1e-6 if e.rtol < 1e-4 else 1e-3)
  t_leaves = _tree_leaves_np(tangent_out)
  p_leaves = _tree_leaves_np(primal_out)
  for t, p, want in zip(t_leaves, p_leaves, fd):
    if not dtypes.is_inexact(p.dtype):
      assert t.dtype == float0
      continue
    np.testing.assert_allclose(t, want, rtol=e.rtol, atol=e.rtol)
  if e.kind == "fwd":
    return
  # reverse mode: <J v, u> == <v, J^T u>
  out, pullback = ourjax.vjp(e.fn, *args)
  cts = ourjax.tree_util.tree_map(
      lambda o: rng.standard_normal(np.shape(o)) if dtypes.is_inexact(np.asarray(o).dtype)
      else np.zeros(np.shape(o), float0), out)
  cts_in = pullback(cts)
  lhs = sum(float(np.sum(t * u)) for t, p, u in zip(t_leaves, p_leaves, _tree_leaves_np(cts))
            if dtypes.is_inexact(p.dtype))
  rhs = sum(float(np.sum(v * c)) for v, c in zip(tangents, _tree_leaves_np(cts_in)))
  assert math.isclose(lhs, rhs, rel_tol=max(e.rtol, 1e-9), abs_tol=1e-9), (lhs, rhs)
  for c, a in zip(_tree_leaves_np(cts_in), args):
    assert c.shape == a.shape and c.dtype == a.dtype


@pytest.mark.parametrize("e", [_param(e) for e in _ZERO])
@settings(max_examples=3, suppress_health_check=_FIXTURE_OK)
@given(data=st.data())
def test_zero_derivative_primitives(x64, e, data):
  args = data.draw(_args_for(e))
  tangents = [np.ones_like(a) for a in args]
  out, t_out = ourjax.jvp(e.fn, tuple(args), tuple(tangents))
  for o, t in zip(_tree_leaves_np(out), _tree_leaves_np(t_out)):
    if dtypes.is_inexact(o.dtype):
      assert t.dtype == o.dtype and not np.any(t)
    else:
      assert t.dtype == float0 and t.shape == o.shape
  _, pullback = ourjax.vjp(e.fn, *args)
  cts = ourjax.tree_util.tree_map(
      lambda o: np.ones(np.shape(o)) if dtypes.is_inexact(np.asarray(o).dtype)
      else np.zeros(np.shape(o), float0), out)
  for c, a in zip(_tree_leaves_np(pullback(cts)), args):
    assert c.shape == a.shape and not np.any(c)


@pytest.mark.parametrize("name", sorted(INT_ONLY))
def test_integer_primitives_have_float0_tangents(name):
  p = _prims_by_name().get(name)
  if p is None:
    pytest.skip(f"{name} not defined")
  x = np.array([3, 5, 12], np.int32)
  f = (lambda a: p.bind(a)) if name in ("not", "population_count", "clz") else \
      (lambda a: p.bind(a, np.ones_like(x)))
  out, t = ourjax.jvp(f, (x,), (np.zeros(x.shape, float0),))
  assert t.dtype == float0 and t.shape == np.shape(out)


# ------------------------------------------------------------------------------------------------
# Conventions at kinks (JAX's values)


def test_conventions_at_kinks(x64):
  g = ourjax.grad
  # max/min ties split the derivative evenly
  assert g(lambda x: lax.max(x, 1.0))(1.0) == 0.5
  assert g(lambda x: lax.min(x, x))(2.0) == 1.0
  np.testing.assert_array_equal(
      g(lambda x: jnp.sum(jnp.maximum(x, 2.0)))(np.array([1.0, 2.0, 3.0])), [0, 0.5, 1])
  # abs: as JAX, +1 at 0 (select(x >= 0, t, -t))
  assert g(lax.abs)(0.0) == 1.0 and g(lax.abs)(-3.0) == -1.0 and g(lax.abs)(2.0) == 1.0
  # sqrt at 0: inf
  assert g(lax.sqrt)(0.0) == np.inf
  # pow: d/dx x**y at x = 0 is 0 for y > 1; at y = 0 it is JAX's y * x**(y-1) = 0 * inf = nan;
  # d/dy at x = 0 is 0
  assert g(lax.pow)(0.0, 2.0) == 0.0
  assert np.isnan(g(lax.pow)(0.0, 0.0))
  assert g(lax.pow)(0.0, 1.0) == 1.0
  assert g(lax.pow, argnums=1)(0.0, 2.0) == 0.0
  assert np.isfinite(g(g(lax.pow, argnums=1), argnums=1)(0.0, 2.0))
  # integer_pow at 0
  assert g(lambda x: lax.integer_pow(x, 2))(0.0) == 0.0
  assert g(lambda x: lax.integer_pow(x, 0))(0.0) == 0.0
  # cbrt at 0: inf (not nan)
  assert g(lax.cbrt)(0.0) == np.inf
  # clamp: derivative of x is 1 strictly inside, 0 at the bounds and outside
  cl = g(lambda x: lax.clamp(-1.0, x, 1.0))
  assert (cl(0.5), cl(1.0), cl(-1.0), cl(3.0)) == (1.0, 0.0, 0.0, 0.0)
  # sign, floor, round: zero
  assert g(lax.sign)(0.0) == 0.0 and g(lax.floor)(1.5) == 0.0
  # where-style select does not leak nan from the branch not taken
  safe_log = lambda x: jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)), 0.0)
  assert g(safe_log)(0.0) == 0.0


# ------------------------------------------------------------------------------------------------
# API behaviour and errors


def test_grad_of_non_scalar_output_is_a_type_error():
  with pytest.raises(TypeError, match=r"Gradient only defined for scalar-output functions\. "
                     r"Output had shape: \(3,\)\."):
    ourjax.grad(lambda x: x * 2)(np.ones(3, np.float32))


def test_grad_with_respect_to_integer_input():
  with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs \\(input "
                     "dtype that is a sub-dtype of np.inexact\\), but got int32. If you want to "
                     "use Boolean- or integer-valued inputs, use vjp or set allow_int to True."):
    ourjax.grad(lambda x: x * 2)(3)
  g = ourjax.grad(lambda x, i: x * i, argnums=(0, 1), allow_int=True)(2.0, 3)
  assert float(g[0]) == 3.0
  assert g[1].dtype == float0 and g[1].shape == ()


def test_grad_of_integer_output_is_an_error():
  with pytest.raises(TypeError, match="grad requires real-valued outputs"):
    ourjax.grad(lambda x: lax.convert_element_type(x, np.int32))(1.5)


def test_jvp_argument_checks():
  f = lambda x, y: x * y
  one = np.float32(1)
  with pytest.raises(TypeError, match="primal and tangent arguments to jax.jvp must be tuples "
                     "or lists; found float and float"):
    ourjax.jvp(f, 1.0, 1.0)
  with pytest.raises(TypeError, match="primal and tangent arguments to jax.jvp must have the "
                     "same tree structure"):
    ourjax.jvp(f, (one, one), (one,))
  with pytest.raises(TypeError, match="primal and tangent arguments to jax.jvp do not match; "
                     "dtypes must be equal, or in case of int/bool primal dtype the tangent "
                     "dtype must be float0. Got primal dtype float32 and so expected tangent "
                     "dtype float32, but got tangent dtype int32 instead."):
    ourjax.jvp(f, (one, one), (np.int32(1), one))
  with pytest.raises(ValueError, match="jvp called with different primal and tangent shapes"):
    ourjax.jvp(f, (np.ones(3, np.float32), one), (np.ones(4, np.float32), one))
  with pytest.raises(TypeError, match="expected tangent dtype float0, but got tangent dtype "
                     "int32"):
    ourjax.jvp(f, (one, np.int32(2)), (one, np.int32(0)))


def test_float0_tangents_for_integer_arguments():
  f = lambda x, i: (x * i, i * 2)
  x = np.float32(1.5)
  (y, j), (ty, tj) = ourjax.jvp(f, (x, np.int32(3)), (np.float32(1), np.zeros((), float0)))
  assert float(ty) == 3.0 and tj.dtype == float0 and int(j) == 6
  out, pullback = ourjax.vjp(f, x, np.int32(3))
  cx, ci = pullback((np.float32(1), np.zeros((), float0)))
  assert float(cx) == 3.0 and ci.dtype == float0 and ci.shape == ()
  # linearize of a function of an int argument
  _, f_jvp = ourjax.linearize(lambda x, i: x * i, x, np.int32(4))
  assert float(f_jvp(np.float32(1), np.zeros((), float0))) == 4.0


def test_vjp_cotangent_checks():
  _, pullback = ourjax.vjp(lambda x: (x, x * 2), np.ones(3, np.float32))
  with pytest.raises(ValueError, match="unexpected tree structure"):   # (as JAX)
    pullback(np.ones(3, np.float32))
  with pytest.raises(ValueError, match=r"unexpected JAX type \(e.g. shape/dtype\) for argument "
                     r"to VJP function: got float32\[4\], but expected float32\[3\]"):
    pullback((np.ones(4, np.float32), np.ones(3, np.float32)))
  with pytest.raises(ValueError, match="unexpected JAX type"):
    pullback((np.ones(3, np.int32), np.ones(3, np.float32)))


def test_argnums_checks_and_forms():
  f = lambda x, y, z: x * y + z
  # (JAX's words: the argnums as given, an int or a tuple)
  with pytest.raises(TypeError, match="differentiating with respect to argnums=3 requires "
                     "at least 4 positional arguments"):
    ourjax.grad(f, argnums=3)(1.0, 2.0, 3.0)
  with pytest.raises(TypeError, match="argnums=\\(3,\\) requires at least 4"):
    ourjax.grad(f, argnums=(3,))(1.0, 2.0, 3.0)
  assert float(ourjax.grad(f, argnums=1)(1.0, 2.0, 3.0)) == 1.0
  gx, gz = ourjax.grad(f, argnums=(0, 2))(1.0, 2.0, 3.0)
  assert (float(gx), float(gz)) == (2.0, 1.0)
  assert float(ourjax.grad(f, argnums=-1)(1.0, 2.0, 3.0)) == 1.0
  (g1,) = ourjax.grad(f, argnums=(1,))(1.0, 2.0, 3.0)
  assert float(g1) == 1.0


def test_pytrees_of_parameters():
  params = {"w": [np.float32(2.0), (np.arange(3, dtype=np.float32),)], "b": np.float32(1.0)}

  def loss(p, x):
    return p["w"][0] * jnp.sum(p["w"][1][0] * x) + p["b"]

  g = ourjax.grad(loss)(params, np.ones(3, np.float32))
  assert ourjax.tree_util.tree_structure(g) == ourjax.tree_util.tree_structure(params)
  np.testing.assert_allclose(g["w"][0], 3.0)
  np.testing.assert_allclose(g["w"][1][0], [2, 2, 2])
  np.testing.assert_allclose(g["b"], 1.0)
  v, g2 = ourjax.value_and_grad(loss)(params, np.ones(3, np.float32))
  np.testing.assert_allclose(v, 7.0)
  np.testing.assert_allclose(g2["w"][1][0], [2, 2, 2])


def test_has_aux():
  f = lambda x: (jnp.sum(x ** 2), {"twice": x * 2})
  x = np.arange(3.0, dtype=np.float32)
  g, aux = ourjax.grad(f, has_aux=True)(x)
  np.testing.assert_allclose(g, 2 * x)
  np.testing.assert_allclose(aux["twice"], 2 * x)
  assert not isinstance(aux["twice"], core.Tracer)
  (v, aux2), g2 = ourjax.value_and_grad(f, has_aux=True)(x)
  assert float(v) == 5.0 and not isinstance(aux2["twice"], core.Tracer)
  out, pullback, aux3 = ourjax.vjp(f, x, has_aux=True)
  assert not isinstance(aux3["twice"], core.Tracer)
  np.testing.assert_allclose(pullback(np.float32(1))[0], 2 * x)
  _, t, aux4 = ourjax.jvp(f, (x,), (np.ones(3, np.float32),), has_aux=True)
  assert float(t) == 6.0 and not isinstance(aux4["twice"], core.Tracer)
  _, f_jvp, aux5 = ourjax.linearize(f, x, has_aux=True)
  assert float(f_jvp(np.ones(3, np.float32))) == 6.0
  jac, aux6 = ourjax.jacrev(lambda x: (jnp.sin(x), x * 3), has_aux=True)(x)
  np.testing.assert_allclose(jac, np.diag(np.cos(x)), rtol=1e-6)
  np.testing.assert_allclose(aux6, 3 * x)
  jac, aux7 = ourjax.jacfwd(lambda x: (jnp.sin(x), x * 3), has_aux=True)(x)
  np.testing.assert_allclose(jac, np.diag(np.cos(x)), rtol=1e-6)
  np.testing.assert_allclose(aux7, 3 * x)


def test_stop_gradient():
  f = lambda x: jnp.sum(lax.stop_gradient(x) * x + lax.stop_gradient(x ** 2))
  x = np.arange(3.0, dtype=np.float32)
  np.testing.assert_allclose(ourjax.grad(f)(x), x)
  g = ourjax.grad(lambda x: lax.stop_gradient({"a": x})["a"] + x)(1.0)
  assert float(g) == 1.0
  # integer leaves pass through stop_gradient
  assert ourjax.lax.stop_gradient(np.int32(3)) == 3


def test_weak_types_and_dtypes_of_gradients(x64):
  g = ourjax.grad(lambda x: x * 2.0)(1.0)
  assert g.dtype == np.float64 and g.weak_type
  g32 = ourjax.grad(lambda x: x * 2)(np.float32(1))
  assert g32.dtype == np.float32 and not g32.weak_type


# ------------------------------------------------------------------------------------------------
# Higher order and composition


def test_grad_of_grad(x64):
  f = lambda x: jnp.sin(x) * x
  d1 = ourjax.grad(f)
  d2 = ourjax.grad(d1)
  d3 = ourjax.grad(d2)
  x = 0.7
  assert math.isclose(float(d1(x)), math.cos(x) * x + math.sin(x), rel_tol=1e-12)
  assert math.isclose(float(d2(x)), -math.sin(x) * x + 2 * math.cos(x), rel_tol=1e-12)
  assert math.isclose(float(d3(x)), -math.cos(x) * x - 3 * math.sin(x), rel_tol=1e-12)


def _first(v):
  return lax.index_in_dim(v, 0, keepdims=False)


def _vec_fn(x, y):
  return {"a": jnp.sin(x) * _first(y), "b": jnp.sum(x ** 2) * y}


def test_jacfwd_matches_jacrev(x64):
  x = np.array([0.3, -1.2, 0.8])
  y = np.array([1.5, 0.5])
  jf = ourjax.jacfwd(_vec_fn, argnums=(0, 1))(x, y)
  jr = ourjax.jacrev(_vec_fn, argnums=(0, 1))(x, y)
  for a, b in zip(ourjax.tree_util.tree_leaves(jf), ourjax.tree_util.tree_leaves(jr)):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
  assert jf["a"][0].shape == (3, 3) and jf["b"][1].shape == (2, 2)
  np.testing.assert_allclose(jf["a"][0], np.diag(np.cos(x) * y[0]))
  np.testing.assert_allclose(jf["b"][0], np.outer(y, 2 * x))
  # single argnums gives the bare block
  assert ourjax.jacrev(_vec_fn)(x, y)["a"].shape == (3, 3)


def test_hessian_matches_jacfwd_of_jacrev_and_analytic(x64):
  f = lambda x: jnp.sum(jnp.sin(x) * x) * _first(x)
  x = np.array([0.4, -0.9, 1.3])
  h = ourjax.hessian(f)(x)
  np.testing.assert_allclose(h, ourjax.jacfwd(ourjax.jacrev(f))(x), rtol=1e-12)
  np.testing.assert_allclose(h, ourjax.jacrev(ourjax.jacfwd(f))(x), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
  # against finite differences of the gradient
  g = ourjax.grad(f)
  eps = 1e-6
  fd = np.stack([(np.asarray(g(x + eps * e)) - np.asarray(g(x - eps * e))) / (2 * eps)
                 for e in np.eye(3)], axis=1)
  np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)


def test_grad_under_jit_and_jit_under_grad(x64):
  f = lambda x, w: jnp.sum(jnp.tanh(x * w) ** 2)
  x, w = np.array([0.2, -0.5, 1.1]), np.array([1.5, 0.3, -0.7])
  want = ourjax.grad(f, argnums=(0, 1))(x, w)
  for got in (ourjax.jit(ourjax.grad(f, argnums=(0, 1)))(x, w),
              ourjax.grad(ourjax.jit(f), argnums=(0, 1))(x, w),
              ourjax.jit(ourjax.grad(ourjax.jit(f), argnums=(0, 1)))(x, w)):
    for a, b in zip(got, want):
      np.testing.assert_allclose(a, b, rtol=1e-12)
  # a jit inside a jit, under grad (the offline partial evaluation of the inner call)
  inner = ourjax.jit(lambda a: jnp.sin(a) * 2.0)
  h = ourjax.jit(lambda a: jnp.sum(inner(a) * a))
  np.testing.assert_allclose(ourjax.grad(h)(x), 2 * np.cos(x) * x + 2 * np.sin(x), rtol=1e-12)
  # integer outputs of a jitted function under grad
  k = ourjax.jit(lambda a: (a * 2.0, 3))
  np.testing.assert_allclose(ourjax.grad(lambda a: jnp.sum(k(a)[0]))(x), [2, 2, 2])


def test_jit_of_a_closure_over_traced_values(x64):
  # the jitted function closes over a value being differentiated (or batched)
  assert float(ourjax.grad(lambda x: ourjax.jit(lambda y: y * x)(3.0))(2.0)) == 3.0
  xs = np.arange(3.0)
  loss = lambda p: ourjax.jit(lambda x: jnp.sum(jnp.sin(x * p)))(xs)
  w = np.array([0.5, 1.0, -1.5])
  np.testing.assert_allclose(ourjax.grad(loss)(w), np.cos(xs * w) * xs, rtol=1e-12)
  np.testing.assert_allclose(ourjax.jit(ourjax.grad(loss))(w), np.cos(xs * w) * xs,
                             rtol=1e-12)
  f = ourjax.jit(lambda x: x * 2.0)
  np.testing.assert_allclose(ourjax.vmap(lambda p: ourjax.jit(lambda x: x * p)(2.0))(w), 2 * w)
  # the same jitted function called under two different grads (no stale tracer in a cache)
  g = lambda p: ourjax.jit(lambda x: x * p)(1.0) * f(p)
  assert float(ourjax.grad(g)(3.0)) == 12.0 and float(ourjax.grad(g)(1.0)) == 4.0


def test_pjit_rules_keep_the_call(x64):
  f = ourjax.jit(lambda x: jnp.sin(x) * x)
  x = np.array([0.5, 1.0])
  jvp_jaxpr = str(ourjax.make_jaxpr(lambda x, t: ourjax.jvp(f, (x,), (t,)))(x, x))
  assert "jvp(" in jvp_jaxpr
  grad_jaxpr = ourjax.make_jaxpr(ourjax.grad(lambda x: jnp.sum(f(x))))(x)
  names = [e.params.get("name") for e in grad_jaxpr.jaxpr.eqns if "name" in e.params]
  assert any(n and n.startswith("transpose(") for n in names), grad_jaxpr
  # the linear part of grad(jit) has one call (the tangent part), the primal call ran apart
  _, lin, consts, _ = ad.linearize_flat(lambda x: [jnp.sum(f(x))], [x])
  assert sum(e.primitive.name in ("pjit", "jit") for e in lin.eqns) == 1


def test_vmap_and_grad_compose(x64):
  f = lambda x, w: jnp.sin(x * w) * w
  xs, w = np.linspace(-1, 1, 4), 0.7
  per_example = ourjax.vmap(ourjax.grad(f), in_axes=(0, None))(xs, w)
  np.testing.assert_allclose(per_example, np.cos(xs * w) * w * w, rtol=1e-12)
  summed = ourjax.grad(lambda xs: jnp.sum(ourjax.vmap(f, in_axes=(0, None))(xs, w)))(xs)
  np.testing.assert_allclose(summed, per_example, rtol=1e-12)
  gw = ourjax.vmap(ourjax.grad(f, argnums=1), in_axes=(0, None))(xs, w)
  np.testing.assert_allclose(gw, np.cos(xs * w) * xs * w + np.sin(xs * w), rtol=1e-12)


def test_linearize_matches_jvp(x64):
  f = lambda x: jnp.sin(x) * jnp.exp(x)
  x = np.array([0.1, 0.2, 0.3])
  y, f_jvp = ourjax.linearize(f, x)
  t = np.array([1.0, -2.0, 0.5])
  np.testing.assert_allclose(f_jvp(t), ourjax.jvp(f, (x,), (t,))[1], rtol=1e-12)
  np.testing.assert_allclose(y, f(x))


def test_linear_transpose(x64):
  A = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])
  f = lambda x: (jnp.dot(A, x), jnp.sum(x) * 2.0)
  ft = ourjax.linear_transpose(f, np.zeros(3))
  u, s = np.array([1.0, -2.0]), 0.5
  (ct,) = ft((u, s))
  np.testing.assert_allclose(ct, A.T @ u + 2.0 * s, rtol=1e-12)
  with pytest.raises(TypeError, match="cotangent tree does not match function output"):
    ft(u)
  with pytest.raises(TypeError, match="cotangent type does not match function output"):
    ft((np.ones(3), 1.0))
  with pytest.raises(TypeError, match="linear_transpose only supports"):
    ourjax.linear_transpose(lambda x: x * 1.5, np.ones(2, np.int32))


def test_two_layer_mlp_gradients_match_finite_differences(x64):
  rng = np.random.default_rng(0)
  params = {"w1": rng.standard_normal((4, 5)) * 0.5, "b1": rng.standard_normal(5) * 0.1,
            "w2": rng.standard_normal((5, 2)) * 0.5, "b2": rng.standard_normal(2) * 0.1}
  x = rng.standard_normal((6, 4))
  y = rng.standard_normal((6, 2))

  def loss(p, x, y):
    h = jnp.tanh(jnp.matmul(x, p["w1"]) + p["b1"])
    out = jnp.dot(h, p["w2"]) + p["b2"]
    return jnp.mean((out - y) ** 2)

  g = ourjax.grad(loss)(params, x, y)
  gj = ourjax.jit(ourjax.grad(loss))(params, x, y)
  eps = 1e-6
  for k, v in params.items():
    fd = np.zeros_like(v)
    for idx in np.ndindex(v.shape):
      e = np.zeros_like(v)
      e[idx] = eps
      hi = float(loss({**params, k: v + e}, x, y))
      lo = float(loss({**params, k: v - e}, x, y))
      fd[idx] = (hi - lo) / (2 * eps)
    np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gj[k], g[k], rtol=1e-12, atol=1e-14)


def test_tanh_atanh_acosh_exp2_derivatives_have_jaxs_rounding():
  # JAX's forms: tanh' t = (t + t tanh)(1 - tanh), atanh' t = 1/(1+x) * (t/(1-x)),
  # acosh' = rsqrt(x^2-1), exp2' t = log(2) (t 2^x); reverse mode transposes them: a cotangent
  # c gives c(1 - tanh) + c(1 - tanh) tanh, and (c/(1+x)) / (1-x), rounded step by step
  f32 = np.float32
  x = (np.random.default_rng(0).standard_normal(500) * 2).astype(f32)
  t = np.asarray(jnp.tanh(x))
  g = np.asarray(ourjax.vmap(ourjax.grad(jnp.tanh))(x))
  c = f32(1) - t
  np.testing.assert_array_equal(g, c + c * t)
  np.testing.assert_allclose(g, 1 - np.tanh(x.astype(np.float64)) ** 2, rtol=1e-5, atol=1e-7)
  u = (np.tanh(x) * 0.9).astype(f32)
  g = np.asarray(ourjax.vmap(ourjax.grad(jnp.arctanh))(u))
  np.testing.assert_array_equal(g, (f32(1) / (f32(1) + u)) / (f32(1) - u))
  v = (np.abs(x) + 1.5).astype(f32)
  g = np.asarray(ourjax.vmap(ourjax.grad(jnp.arccosh))(v))
  np.testing.assert_allclose(g, 1 / np.sqrt(v.astype(np.float64) ** 2 - 1), rtol=1e-6)
  g = np.asarray(ourjax.vmap(ourjax.grad(jnp.exp2))(x))
  ln2 = np.asarray(jnp.log(f32(2)))
  np.testing.assert_array_equal(g, ln2 * np.asarray(jnp.exp2(x)))
