"""``lax.linalg``: the dense decompositions as primitives, each followed by all of its rules.

Primitives (JAX's names, parameters and result orders): ``cholesky_p``, ``lu_p`` (lu, pivots,
permutation), ``triangular_solve_p``, ``eigh_p`` (v, w), ``qr_p`` (q, r), ``svd_p`` (s[, u, vh]);
and, host only (``_linalg_host.py``, re-exported here): ``eig_p`` (w[, vl][, vr]), ``schur_p``,
``geqrf_p``, ``hessenberg_p``, ``tridiagonal_p``.  Operands are ``(..., m, n)``: leading dims are
batch dims, which every implementation handles itself, so the batching rule only moves the
mapped axis to the front.

* Eager: NumPy (``numpy.linalg``, i.e. LAPACK), in the operand's dtype, real or complex.  As
  JAX's, nothing raises on singular / non-positive-definite matrices: a failed Cholesky is all
  NaN, LU and triangular solves divide by zero pivots.  float16/bfloat16 are refused by the
  LAPACK decompositions (as JAX on the CPU) and computed in float32 by LU and triangular solves.
* Derivatives: the decompositions' own JVP rules (never the derivative of an iteration); the
  triangular solve is linear in ``b`` and has a transpose, so reverse mode works through all of
  them.  As JAX: no JVP for full-matrix SVD of non-square matrices, nor for ``eig``'s
  eigenvectors.
* jit: a real-dtype primitive lowers to a lax composition (``_linalg_algorithms.py``: pivoted
  LU, substitution, Householder QR, Jacobi eigh/svd up to 32 x 32) that compiles like any other
  code; complex operands, larger Jacobi problems and the host-only primitives raise
  ``LoweringError`` (or have no rule), so the jitted function runs op by op through the NumPy
  implementations (``backends.compile_jaxpr``).

Compositions without a primitive of their own: ``lu_pivots_to_permutation``,
``tridiagonal_solve``, ``householder_product``, ``symmetric_product``.
"""
from __future__ import annotations

import builtins
import enum
import math

import numpy as np

from ourjax import dtypes
from ourjax.config import internal_promotion
from ourjax.core import Primitive, ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax import _linalg_algorithms as alg

__all__ = ["cholesky", "cholesky_p", "lu", "lu_p", "triangular_solve", "triangular_solve_p",
           "eigh", "eigh_p", "qr", "qr_p", "svd", "svd_p", "eig", "eig_p", "schur", "schur_p",
           "lu_pivots_to_permutation", "tridiagonal_solve", "householder_product",
           "symmetric_product", "tridiagonal", "tridiagonal_p", "hessenberg", "hessenberg_p",
           "geqrf", "geqrf_p", "qr_pivots_p", "HOST_ONLY", "SvdAlgorithm", "EighImplementation",
           "EigImplementation"]


class SvdAlgorithm(enum.Enum):
  DEFAULT = "default"
  QR = "QR"
  JACOBI = "Jacobi"
  POLAR = "polar"
  DIVIDE_AND_CONQUER = "divide_and_conquer"


class EighImplementation(enum.Enum):
  QR = "qr"
  JACOBI = "jacobi"
  QDWH = "qdwh"


class EigImplementation(enum.Enum):
  CUSOLVER = "cusolver"
  MAGMA = "magma"
  LAPACK = "lapack"


#: Largest matrix whose Jacobi eigh/svd is compiled (the cyclic sweeps cost O(n^4) each)
_JACOBI_MAX_N = 32


# Signs of eigenvectors and singular vectors.  A compiled eigh/svd (real matrices up to
# _JACOBI_MAX_N) is a Jacobi iteration, whose vectors' signs are not LAPACK's (nor do LAPACK's
# follow a rule simple enough to reproduce); so that eager and jitted calls agree, both
# give those matrices' vectors a convention: each eigenvector, each left singular vector,
# has its largest-magnitude component (the first of equal ones) positive, and each right
# singular vector takes its left one's sign (columns of U beyond min(m, n), and rows of Vh,
# on their own).  Larger and complex matrices run on the host both ways: LAPACK's vectors, as
# JAX's on a CPU.

def _convention_applies(x_shape, dtype) -> bool:
  return (not dtypes.is_complex(dtype) and 0 < builtins.max(x_shape[-2:]) <= _JACOBI_MAX_N)


def _column_signs(v, xp):
  """+1/-1 per column of ``v`` (..., m, k): the sign of its largest-magnitude entry."""
  i = xp.argmax(xp.abs(v), axis=-2)
  pick = xp.take_along_axis(v, i[..., None, :], axis=-2)[..., 0, :]
  return xp.where(pick < 0, -1, 1).astype(v.dtype)


def _signed_svd(u, vh, xp):
  """(u, vh) with the sign convention above: u's first k columns and vh's first k rows flipped
  together, the rest of either on their own."""
  k = builtins.min(u.shape[-2], vh.shape[-1])
  su = _column_signs(u, xp)
  sv = _column_signs(xp.swapaxes(vh, -1, -2), xp)
  sv = xp.concatenate([su[..., :k], sv[..., k:]], axis=-1)
  return u * su[..., None, :], vh * sv[..., :, None]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _T(x):
  return _jnp().swapaxes(x, -1, -2)


@internal_promotion
def _mm(a, b):
  """The products inside derivative rules run at full precision (as JAX's)."""
  from ourjax.lax.dot import Precision
  return _jnp().matmul(a, b, precision=Precision.HIGHEST)


def _H(x):
  return _jnp().conj(_T(x))


def _check_matrix(name, x, square=False):
  aval = get_aval(x) if not isinstance(x, ShapedArray) else x
  if aval.ndim < 2 or (square and aval.shape[-1] != aval.shape[-2]):
    what = "square matrix" if square else "matrix"
    raise ValueError(f"{name}: argument must be a {what} or a batch of them (shape "
                     f"(..., m, {'m' if square else 'n'})), got {aval.str_short()}")
  if not dtypes.is_inexact(aval.dtype):
    raise TypeError(f"{name}: argument must be floating point or complex, got "
                    f"{aval.str_short()}")
  return aval


_LAPACK_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                                 np.complex128))


def _check_lapack_dtype(name, aval):
  """As JAX on the CPU: the decompositions that LAPACK computes take only its four dtypes."""
  if aval.dtype not in _LAPACK_DTYPES:
    raise NotImplementedError(f"{name}: Unsupported dtype {aval.dtype}.")


def _real_dtype(dtype):
  return np.finfo(np.dtype(dtype)).dtype


def _flat_batch(x):
  """``x`` (..., m, n) as (B, m, n) plus the batch shape."""
  return x.reshape((math.prod(x.shape[:-2]),) + x.shape[-2:]), x.shape[:-2]


def _front_batcher(prim):
  """Batching rule of a primitive whose operands share their leading batch dims: move the
  mapped axis (of every operand) to the front, bind, results mapped at 0."""
  def rule(vals, dims, **params):
    size = batching.axis_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    out = prim.bind(*vals, **params)
    return out, ([0] * len(out) if prim.multiple_results else 0)
  batching.batch_rules[prim] = rule


def _lowering(prim, single, max_n=None, widen=False):
  """Lower ``prim`` by inlining ``single`` (written for one real matrix, params as keywords)
  mapped over the batch dims.  Complex operands have no native code, and matrices larger than
  ``max_n`` (where the composition's cost, O(n^4) per Jacobi sweep, is far above LAPACK's) are
  left to the host: LoweringError, so the jitted function runs op by op.  ``widen``: narrower
  floats are computed in float64 and rounded once at the end (the Jacobi sweeps' rounding errors
  add up; so the compiled results agree with LAPACK's to float32's precision)."""
  from ourjax.config import default_matmul_precision
  from ourjax.interpreters import partial_eval as pe
  from ourjax.lowering.from_jaxpr import LoweringError, register_lowering

  @register_lowering(prim)
  def rule(ctx, avals_in, avals_out, *operands, **params):
    if any(dtypes.is_complex(a.dtype) for a in avals_in):
      raise LoweringError(f"{prim.name}: complex operands run on the host (NumPy/LAPACK)")
    if any(0 in a.shape for a in avals_in):
      raise LoweringError(f"{prim.name}: empty operands run on the host (NumPy)")
    if max_n is not None and max(avals_in[0].shape[-2:]) > max_n:
      raise LoweringError(f"{prim.name}: matrices over {max_n} x {max_n} run on the host "
                          f"(NumPy/LAPACK)")
    nb = avals_in[0].ndim - 2

    def flat(*args):
      # (the compositions' products, one-hot selections included, at full precision: a
      # GPU's default TF32 would round the matrices' elements, where JAX's solvers do not)
      with default_matmul_precision("highest"):
        return flat_highest(*args)

    def flat_highest(*args):
      fn = alg.batched(lambda *a: single(*a, **params), nb)
      if widen and any(a.dtype != np.float64 for a in avals_in):
        from ourjax.config import enable_x64
        from ourjax.lax.elementwise import convert_element_type
        with enable_x64(True):
          out = fn(*[convert_element_type(a, np.float64) for a in args])
          out = [convert_element_type(o, a.dtype) for o, a in zip(
              out if prim.multiple_results else [out], avals_out)]
        return out
      out = fn(*args)
      return list(out) if prim.multiple_results else [out]
    # (the algorithms mix dtypes and ranks as library code: the user's strict dtype / 'raise'
    # rank promotion settings do not apply inside them)
    closed = pe.trace_to_jaxpr(internal_promotion(flat), list(avals_in), prim.name)
    with ctx.library():     # (JAX's LAPACK call: XLA rewrites none of its divisions)
      outs = ctx.inline(closed, list(operands))
    return outs if prim.multiple_results else outs[0]


# ------------------------------------------------------------------------------------------------
# Cholesky


def cholesky(x, *, symmetrize_input: bool = True):
  """Lower Cholesky factor of (a batch of) Hermitian positive-definite matrices; NaN where a
  matrix is not positive definite."""
  jnp = _jnp()
  x = jnp.asarray(x)
  _check_matrix("cholesky", x, square=True)
  if symmetrize_input:
    x = (x + _H(x)) / 2
  return cholesky_p.bind(x)


def _cholesky_abstract_eval(x):
  _check_matrix("cholesky", x, square=True)
  _check_lapack_dtype("cholesky", x)
  return ShapedArray(x.shape, x.dtype)


def _cholesky_impl(x):
  out = np.empty_like(x)
  flat, _ = _flat_batch(x)
  res = out.reshape(flat.shape)
  for i, a in enumerate(flat):
    try:
      res[i] = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:      # (JAX's: NaN in the lower triangle, zeros above)
      res[i] = np.tril(np.full_like(a, np.nan))
  return out


@internal_promotion
def _cholesky_jvp(primals, tangents):
  jnp = _jnp()
  (x,), (dx,) = primals, tangents
  L = cholesky_p.bind(x)
  if type(dx) is ad.Zero:
    return L, ad.Zero.from_primal_value(L)
  dx = (dx + _H(dx)) / 2    # (the input is read as Hermitian)
  # L^{-1} dA L^{-H}, then dL = L phi(.), phi: lower triangle with the diagonal halved
  tmp = triangular_solve(L, dx, left_side=False, transpose_a=True, conjugate_a=True, lower=True)
  tmp = triangular_solve(L, tmp, left_side=True, transpose_a=False, lower=True)
  n = x.shape[-1]
  phi = jnp.tril(tmp, -1) + tmp * jnp.eye(n, dtype=x.dtype) / 2
  return L, _mm(L, phi)


cholesky_p = Primitive("cholesky")
cholesky_p.def_abstract_eval(_cholesky_abstract_eval)
cholesky_p.def_impl(_cholesky_impl)
ad.jvp_rules[cholesky_p] = _cholesky_jvp
_front_batcher(cholesky_p)
_lowering(cholesky_p, alg.cholesky, widen=True)   # (float32: as accurate as LAPACK's spotrf)


# ------------------------------------------------------------------------------------------------
# Triangular solve


def triangular_solve(a, b, *, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False):
  """``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b`` for triangular ``a``, reading only
  its ``lower`` or upper triangle; ``op`` transposes and/or conjugates as asked."""
  jnp = _jnp()
  a, b = jnp.asarray(a), jnp.asarray(b)
  params = dict(left_side=bool(left_side), lower=bool(lower), transpose_a=bool(transpose_a),
                conjugate_a=bool(conjugate_a), unit_diagonal=bool(unit_diagonal))
  if b.ndim == a.ndim - 1:      # one vector per matrix
    b = b[..., None] if left_side else b[..., None, :]
    out = triangular_solve_p.bind(a, b, **params)
    return out[..., 0] if left_side else out[..., 0, :]
  return triangular_solve_p.bind(a, b, **params)


def _triangular_solve_abstract_eval(a, b, *, left_side, lower, transpose_a, conjugate_a,
                                    unit_diagonal):
  _check_matrix("triangular_solve", a, square=True)
  if b.ndim < 2:
    raise ValueError(f"triangular_solve: b must have at least 2 dimensions, got "
                     f"{b.str_short()}")
  if a.dtype != b.dtype:
    raise TypeError(f"triangular_solve: a and b must have the same dtype, got "
                    f"{a.str_short()} and {b.str_short()}")
  if a.shape[:-2] != b.shape[:-2]:
    raise TypeError(f"triangular_solve: a and b must have equal batch dimensions, got "
                    f"{a.str_short()} and {b.str_short()}")
  common = b.shape[-2] if left_side else b.shape[-1]
  if common != a.shape[-1]:
    raise TypeError(f"triangular_solve: a {a.str_short()} does not match b {b.str_short()} "
                    f"(left_side={left_side})")
  return ShapedArray(b.shape, b.dtype)


def _op_matrix(a, lower, transpose_a, conjugate_a, unit_diagonal, xp):
  n = a.shape[-1]
  tri = xp.tril(a) if lower else xp.triu(a)
  if unit_diagonal:
    eye = xp.eye(n, dtype=bool)
    tri = xp.where(eye, xp.ones((), a.dtype), tri)
  if transpose_a:
    tri = xp.swapaxes(tri, -1, -2)
  if conjugate_a:
    tri = xp.conj(tri)
  return tri, lower != transpose_a


def _widen(*xs):
  """Narrow floats (float16, bfloat16) computed in float32; the caller casts back."""
  return [x.astype(np.float32) if x.dtype not in _LAPACK_DTYPES else x for x in xs]


def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
  # computed in double precision and rounded once, as the compiled path (``_lowering(...,
  # widen=True)``): eager and jitted solves agree to the last bit or so
  a, b = [x.astype(np.complex128 if np.iscomplexobj(x) else np.float64) for x in (a, b)]
  op, op_lower = _op_matrix(a, lower, transpose_a, conjugate_a, unit_diagonal, np)
  if not left_side:          # x op = b  <=>  op^T x^T = b^T
    op, op_lower, b = np.swapaxes(op, -1, -2), not op_lower, np.swapaxes(b, -1, -2)
  n = op.shape[-1]
  x = np.zeros(np.broadcast_shapes(b.shape), b.dtype)
  order = range(n) if op_lower else range(n - 1, -1, -1)
  with np.errstate(all="ignore"):
    for i in order:
      acc = b[..., i, :] - np.einsum("...j,...jk->...k", op[..., i, :], x)
      x[..., i, :] = acc / op[..., i, i][..., None]
  return x if left_side else np.swapaxes(x, -1, -2)


@internal_promotion
def _tri_part(da, lower, unit_diagonal):
  jnp = _jnp()
  t = jnp.tril(da) if lower else jnp.triu(da)
  if unit_diagonal:
    t = t * (1 - jnp.eye(da.shape[-1], dtype=da.dtype))
  return t


@internal_promotion
def _triangular_solve_jvp_a(da, a, b, *, left_side, lower, transpose_a, conjugate_a,
                            unit_diagonal):
  jnp = _jnp()
  params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
  x = triangular_solve_p.bind(a, b, **params)
  dt = _tri_part(da, lower, unit_diagonal)
  if transpose_a:
    dt = _T(dt)
  if conjugate_a:
    dt = jnp.conj(dt)
  # left: op(a) x = b -> op(a) dx = -op(da) x ; right: x op(a) = b -> dx op(a) = -x op(da)
  rhs = -_mm(dt, x) if left_side else -_mm(x, dt)
  return triangular_solve_p.bind(a, rhs, **params)


def _triangular_solve_jvp_b(db, a, b, **params):
  return triangular_solve_p.bind(a, db, **params)


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a,
                                unit_diagonal):
  if ad.is_undefined_primal(a):
    raise ValueError("triangular_solve: the transpose with respect to a is not defined "
                     "(the solve is not linear in a)")
  ct_b = triangular_solve_p.bind(a, ad.instantiate_zeros(ct), left_side=left_side, lower=lower,
                                 transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                 unit_diagonal=unit_diagonal)
  return [None, ct_b]


triangular_solve_p = Primitive("triangular_solve")
triangular_solve_p.def_abstract_eval(_triangular_solve_abstract_eval)
triangular_solve_p.def_impl(_triangular_solve_impl)
ad.defjvp(triangular_solve_p, _triangular_solve_jvp_a, _triangular_solve_jvp_b)
ad.transpose_rules[triangular_solve_p] = ad._zero_aware_transpose(_triangular_solve_transpose)
_front_batcher(triangular_solve_p)
_lowering(triangular_solve_p, alg.triangular_solve, widen=True)


# ------------------------------------------------------------------------------------------------
# LU


def lu(x):
  """LU with partial pivoting of (a batch of) m x n matrices: ``(lu, pivots, permutation)``;
  ``lu`` packs L (unit lower, below the diagonal) and U, ``pivots`` (int32, min(m, n)) are
  LAPACK's row swaps and ``x[..., permutation, :] == L @ U``."""
  x = _jnp().asarray(x)
  return tuple(lu_p.bind(x))


def _lu_abstract_eval(x):
  _check_matrix("lu", x)
  m, n = x.shape[-2:]
  k = builtins.min(m, n)
  return [ShapedArray(x.shape, x.dtype), ShapedArray(x.shape[:-2] + (k,), np.dtype(np.int32)),
          ShapedArray(x.shape[:-2] + (m,), np.dtype(np.int32))]


def _lu_one(a):
  a = a.copy()
  m, n = a.shape
  k = builtins.min(m, n)
  piv = np.zeros(k, np.int32)
  perm = np.arange(m, dtype=np.int32)
  with np.errstate(all="ignore"):
    for j in range(k):
      col = a[j:, j]
      # LAPACK's pivot: the largest |re| + |im| (i?amax), not the modulus, for complex values
      mag = np.abs(col.real) + np.abs(col.imag) if np.iscomplexobj(col) else np.abs(col)
      p = j + int(np.argmax(mag))
      piv[j] = p
      if p != j:
        a[[j, p]] = a[[p, j]]
        perm[[j, p]] = perm[[p, j]]
      if a[j, j] != 0:
        a[j + 1:, j] /= a[j, j]
      a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
  return a, piv, perm


def _lu_impl(x):
  x, = _widen(x)
  flat, batch = _flat_batch(x)
  m, n = x.shape[-2:]
  k = builtins.min(m, n)
  lus = np.empty_like(flat)
  pivs = np.empty((flat.shape[0], k), np.int32)
  perms = np.empty((flat.shape[0], m), np.int32)
  for i, a in enumerate(flat):
    lus[i], pivs[i], perms[i] = _lu_one(a)
  return [lus.reshape(x.shape), pivs.reshape(batch + (k,)), perms.reshape(batch + (m,))]


@internal_promotion
def _lu_jvp(primals, tangents):
  jnp = _jnp()
  (x,), (dx,) = primals, tangents
  lu_, piv, perm = lu_p.bind(x)
  zeros = [ad.Zero.from_primal_value(piv), ad.Zero.from_primal_value(perm)]
  if type(dx) is ad.Zero:
    return [lu_, piv, perm], [ad.Zero.from_primal_value(lu_)] + zeros
  m, n = x.shape[-2:]
  k = builtins.min(m, n)
  dt = x.dtype
  # L padded to a unit lower m x m matrix, U padded to an n x n upper matrix with I below
  l_ = jnp.tril(lu_[..., :, :k], -1)
  l_ = jnp.concatenate([l_, jnp.zeros(l_.shape[:-1] + (m - k,), dt)], axis=-1) + jnp.eye(m, dtype=dt)
  u_ = jnp.triu(lu_[..., :k, :])
  u_ = jnp.concatenate([u_, jnp.zeros(u_.shape[:-2] + (n - k, n), dt)], axis=-2)
  u_ = u_ + jnp.pad(jnp.eye(n - k, dtype=dt), ((k, 0), (k, 0)))
  pdx = jnp.take_along_axis(dx, perm[..., :, None].astype(jnp.int32), axis=-2)
  la = triangular_solve(l_, pdx, left_side=True, lower=True, unit_diagonal=True)
  lau = triangular_solve(u_, la, left_side=False, lower=False)
  dlu = _mm(l_, jnp.tril(lau, -1)) + _mm(jnp.triu(lau), u_)
  return [lu_, piv, perm], [dlu] + zeros


lu_p = Primitive("lu")
lu_p.multiple_results = True
lu_p.def_abstract_eval(_lu_abstract_eval)
lu_p.def_impl(_lu_impl)
ad.jvp_rules[lu_p] = _lu_jvp
_front_batcher(lu_p)
_lowering(lu_p, alg.lu)


def lu_pivots_to_permutation(pivots, permutation_size: int):
  """The permutation that LAPACK's row swaps ``pivots`` (int32, ``(..., k)``) produce on
  ``range(permutation_size)``."""
  jnp = _jnp()
  from ourjax.lax import control_flow
  pivots = jnp.asarray(pivots)
  if not dtypes.is_integer(pivots.dtype):
    raise TypeError(f"lu_pivots_to_permutation: pivots must be integers, got {pivots.dtype}")
  k = pivots.shape[-1] if pivots.ndim else 0
  size = int(permutation_size)
  if k > size:
    raise ValueError(f"lu_pivots_to_permutation: the number of pivots ({k}) must not exceed "
                     f"permutation_size ({size})")
  pivots = pivots.astype(jnp.int32)
  idx = jnp.arange(size, dtype=jnp.int32)
  perm = jnp.broadcast_to(idx, pivots.shape[:-1] + (size,))

  def body(i, perm):
    p = jnp.take(pivots, i, axis=-1)[..., None]
    a = jnp.take(perm, i, axis=-1)[..., None]
    b = jnp.take_along_axis(perm, p, axis=-1)
    return jnp.where(idx == i, b, jnp.where(idx == p, a, perm))

  return control_flow.fori_loop(0, k, body, perm)


# ------------------------------------------------------------------------------------------------
# eigh


def eigh(x, *, lower: bool = True, symmetrize_input: bool = True,
         sort_eigenvalues: bool = True, subset_by_index=None, implementation=None):
  """Eigendecomposition of (a batch of) Hermitian matrices: ``(v, w)``, eigenvectors in the
  columns of ``v``, eigenvalues ``w`` (real, ascending)."""
  jnp = _jnp()
  x = jnp.asarray(x)
  _check_matrix("eigh", x, square=True)
  if symmetrize_input:
    x = (x + _H(x)) / 2
  v, w = eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues))
  if subset_by_index is not None:
    lo, hi = subset_by_index
    v, w = v[..., lo:hi], w[..., lo:hi]
  return v, w


def _eigh_abstract_eval(x, *, lower, sort_eigenvalues):
  _check_matrix("eigh", x, square=True)
  _check_lapack_dtype("eigh", x)
  return [ShapedArray(x.shape, x.dtype), ShapedArray(x.shape[:-1], _real_dtype(x.dtype))]


def _eigh_impl(x, *, lower, sort_eigenvalues):
  if x.shape[-1] == 0:
    return [x.copy(), np.zeros(x.shape[:-1], _real_dtype(x.dtype))]
  w, v = np.linalg.eigh(x, UPLO="L" if lower else "U")
  if _convention_applies(x.shape, x.dtype):
    v = v * _column_signs(v, np)[..., None, :]
  return [v, w]


@internal_promotion
def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues):
  jnp = _jnp()
  (x,), (dx,) = primals, tangents
  v, w = eigh_p.bind(x, lower=lower, sort_eigenvalues=sort_eigenvalues)
  if type(dx) is ad.Zero:
    return [v, w], [ad.Zero.from_primal_value(v), ad.Zero.from_primal_value(w)]
  # C = V^H dA V; dw = Re diag(C); dV = V (F * C), F_ij = 1/(w_j - w_i) off the diagonal
  n = x.shape[-1]
  eye = jnp.eye(n, dtype=bool)
  gap = w[..., None, :] - w[..., :, None]
  fmat = jnp.where(eye, 0, 1 / jnp.where(eye, 1, gap)).astype(w.dtype)
  c = _mm(_mm(_H(v), dx), v)
  dw = jnp.real(jnp.diagonal(c, axis1=-2, axis2=-1))
  return [v, w], [_mm(v, fmat.astype(c.dtype) * c), dw]


eigh_p = Primitive("eigh")
eigh_p.multiple_results = True
eigh_p.def_abstract_eval(_eigh_abstract_eval)
eigh_p.def_impl(_eigh_impl)
ad.jvp_rules[eigh_p] = _eigh_jvp
_front_batcher(eigh_p)


@internal_promotion
def _eigh_single(a, *, lower, sort_eigenvalues):
  jnp = _jnp()
  a = jnp.tril(a) + jnp.tril(a, -1).T if lower else jnp.triu(a) + jnp.triu(a, 1).T
  # (eigenvalues ascending whatever sort_eigenvalues says, as LAPACK's, so JAX's on a CPU)
  v, w = alg.eigh(a, True)
  return [v * _column_signs(v, jnp)[None, :], w]


_lowering(eigh_p, _eigh_single, max_n=_JACOBI_MAX_N, widen=True)


# ------------------------------------------------------------------------------------------------
# QR


def qr(x, *, pivoting: bool = False, full_matrices: bool = True, use_magma=None):
  """QR decomposition: ``(q, r)`` with ``x = q @ r`` (``full_matrices``: q is m x m); with
  ``pivoting``, ``(q, r, p)`` with ``x[..., p] = q @ r``, p LAPACK's column pivots."""
  jnp = _jnp()
  x = jnp.asarray(x)
  if pivoting:     # the QR of the columns in LAPACK's pivoted order (host), then as usual
    from ourjax.lax._linalg_host import qr_pivots
    p = qr_pivots(x)
    xp = jnp.take_along_axis(x, jnp.broadcast_to(p[..., None, :], x.shape), axis=-1)
    q, r = qr_p.bind(xp, full_matrices=bool(full_matrices))
    return q, r, p
  q, r = qr_p.bind(x, full_matrices=bool(full_matrices))
  return q, r


def _qr_abstract_eval(x, *, full_matrices):
  _check_matrix("qr", x)
  _check_lapack_dtype("qr", x)
  m, n = x.shape[-2:]
  k = m if full_matrices else builtins.min(m, n)
  b = x.shape[:-2]
  return [ShapedArray(b + (m, k), x.dtype), ShapedArray(b + (k, n), x.dtype)]


def _qr_impl(x, *, full_matrices):
  m, n = x.shape[-2:]
  if builtins.min(m, n) == 0:
    k = m if full_matrices else 0
    b = x.shape[:-2]
    return [np.broadcast_to(np.eye(m, k, dtype=x.dtype), b + (m, k)).copy(),
            np.zeros(b + (k, n), x.dtype)]
  q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
  return [q, r]


@internal_promotion
def _qr_jvp_tall(q, r, dx):
  """Tangents of the reduced QR of a tall or square matrix (q m x n, r n x n): with
  X = dA R^{-1} and C = Q^H X, Omega = Q^H dQ is the skew-Hermitian matrix whose strict lower
  triangle is C's (its diagonal keeps C's imaginary part, the phase freedom LAPACK fixes by a
  real diagonal of R); dQ = Q (Omega - C) + X, dR = (C - Omega) R.  Also returns X."""
  jnp = _jnp()
  n = r.shape[-1]
  x = triangular_solve(r, dx)                       # dA R^{-1}
  c = _mm(_H(q), x)
  low = jnp.tril(c, -1)
  omega = low - _H(low)
  eye = jnp.eye(n, dtype=c.dtype)
  omega = omega + eye * (c - jnp.real(c).astype(c.dtype))
  return _mm(q, omega - c) + x, _mm(c - omega, r), x, omega


@internal_promotion
def _qr_jvp(primals, tangents, *, full_matrices):
  jnp = _jnp()
  (x,), (dx,) = primals, tangents
  q, r = qr_p.bind(x, full_matrices=full_matrices)
  if type(dx) is ad.Zero:
    return [q, r], [ad.Zero.from_primal_value(q), ad.Zero.from_primal_value(r)]
  m, n = x.shape[-2:]
  if m < n:
    # A = Q [R1 R2] with A1 = Q R1 square: R2 = Q^H A2, so dR2 = dQ^H A2 + Q^H dA2
    dq, dr1, _, _ = _qr_jvp_tall(q, r[..., :, :m], dx[..., :, :m])
    dr2 = _mm(_H(dq), x[..., :, m:]) + _mm(_H(q), dx[..., :, m:])
    return [q, r], [dq, jnp.concatenate([dr1, dr2], axis=-1)]
  if not full_matrices or m == n:
    dq, dr, _, _ = _qr_jvp_tall(q, r, dx)
    return [q, r], [dq, dr]
  # complete Q of a tall matrix: Q = [Q1 Q2], R = [R1; 0].  Omega's lower-left block is
  # Q2^H dA R1^{-1} (so that dR stays zero below R1); its lower-right block (a rotation within
  # the complement, which no equation fixes) is taken as zero.
  q1, q2, r1 = q[..., :, :n], q[..., :, n:], r[..., :n, :]
  dq1, dr1, xr, _ = _qr_jvp_tall(q1, r1, dx)
  c2 = _mm(_H(q2), xr)
  dq2 = -_mm(q1, _H(c2))
  dr = jnp.concatenate([dr1, jnp.zeros(r.shape[:-2] + (m - n, n), r.dtype)], axis=-2)
  return [q, r], [jnp.concatenate([dq1, dq2], axis=-1), dr]


qr_p = Primitive("qr")
qr_p.multiple_results = True
qr_p.def_abstract_eval(_qr_abstract_eval)
qr_p.def_impl(_qr_impl)
ad.jvp_rules[qr_p] = _qr_jvp
_front_batcher(qr_p)
_lowering(qr_p, alg.qr)


# ------------------------------------------------------------------------------------------------
# SVD


def svd(x, *, full_matrices: bool = True, compute_uv: bool = True, subset_by_index=None,
        algorithm=None):
  """Singular value decomposition: ``(u, s, vh)`` (``s`` descending), or ``s`` alone when
  ``compute_uv`` is False."""
  x = _jnp().asarray(x)
  outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
  if subset_by_index is not None:
    lo, hi = subset_by_index
    outs = [outs[0][..., lo:hi]] + ([outs[1][..., lo:hi], outs[2][..., lo:hi, :]]
                                    if compute_uv else [])
  if not compute_uv:
    return outs[0]
  s, u, vh = outs
  return u, s, vh


def _svd_abstract_eval(x, *, full_matrices, compute_uv):
  _check_matrix("svd", x)
  _check_lapack_dtype("svd", x)
  m, n = x.shape[-2:]
  k = builtins.min(m, n)
  b = x.shape[:-2]
  s = ShapedArray(b + (k,), _real_dtype(x.dtype))
  if not compute_uv:
    return [s]
  ku, kv = (m, n) if full_matrices else (k, k)
  return [s, ShapedArray(b + (m, ku), x.dtype), ShapedArray(b + (kv, n), x.dtype)]


def _svd_impl(x, *, full_matrices, compute_uv):
  m, n = x.shape[-2:]
  b = x.shape[:-2]
  if builtins.min(m, n) == 0:
    s = np.zeros(b + (0,), _real_dtype(x.dtype))
    if not compute_uv:
      return [s]
    ku, kv = (m, n) if full_matrices else (0, 0)
    return [s, np.broadcast_to(np.eye(m, ku, dtype=x.dtype), b + (m, ku)).copy(),
            np.broadcast_to(np.eye(kv, n, dtype=x.dtype), b + (kv, n)).copy()]
  if not compute_uv:
    return [np.linalg.svd(x, compute_uv=False)]
  u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
  if _convention_applies(x.shape, x.dtype):
    u, vh = _signed_svd(u, vh, np)
  return [s, u, vh]


@internal_promotion
def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
  jnp = _jnp()
  (x,), (dx,) = primals, tangents
  outs = svd_p.bind(x, full_matrices=full_matrices, compute_uv=compute_uv)
  if type(dx) is ad.Zero:
    return outs, [ad.Zero.from_primal_value(o) for o in outs]
  m, n = x.shape[-2:]
  if compute_uv and full_matrices and m != n:
    raise NotImplementedError("Singular value decomposition JVP not implemented for full "
                              "matrices")
  s, u, vh = svd_p.bind(x, full_matrices=False, compute_uv=True)
  v, ut = _H(vh), _H(u)
  ds_mat = _mm(_mm(ut, dx), v)
  ds = jnp.real(jnp.diagonal(ds_mat, axis1=-2, axis2=-1))
  if not compute_uv:
    return outs, [ds]
  dt = x.dtype
  k = s.shape[-1]
  s_row = s[..., None, :]
  s_col = s[..., :, None]
  eye = jnp.eye(k, dtype=s.dtype)
  diffs = (s_row + s_col) * (s_row - s_col)                   # s_j^2 - s_i^2
  fmat = (1 / (diffs + eye) - eye).astype(dt)
  s_row_c, s_col_c = s_row.astype(dt), s_col.astype(dt)
  dss = s_row_c * ds_mat                                      # dS S
  sds = s_col_c * ds_mat                                      # S dS
  s_zero = (s == 0).astype(s.dtype)
  s_inv = (1 / (s + s_zero) - s_zero).astype(dt)
  # the imaginary diagonal part (complex inputs): shared phase of u_i and v_i
  du_dv_diag = 0.5 * (ds_mat - _H(ds_mat)) * (jnp.eye(k, dtype=dt) * s_inv[..., None, :])
  du = _mm(u, fmat * (dss + _H(dss)) + du_dv_diag)
  dv = _mm(v, fmat * (sds + _H(sds)))
  if m > n:
    dav = _mm(dx, v)
    du = du + (dav - _mm(u, _mm(ut, dav))) * s_inv[..., None, :]
  if n > m:
    dahu = _mm(_H(dx), u)
    dv = dv + (dahu - _mm(v, _mm(vh, dahu))) * s_inv[..., None, :]
  return outs, [ds, du, _H(dv)]


svd_p = Primitive("svd")
svd_p.multiple_results = True
svd_p.def_abstract_eval(_svd_abstract_eval)
svd_p.def_impl(_svd_impl)
ad.jvp_rules[svd_p] = _svd_jvp
_front_batcher(svd_p)
def _svd_single(a, *, full_matrices, compute_uv):
  outs = alg.svd(a, full_matrices, compute_uv)
  if not compute_uv:
    return outs
  s, u, vh = outs
  u, vh = _signed_svd(u, vh, _jnp())
  return [s, u, vh]


_lowering(svd_p, _svd_single, max_n=_JACOBI_MAX_N, widen=True)


# ------------------------------------------------------------------------------------------------
# Compositions


@internal_promotion       # (the band matrix is assembled with mixed dtypes and ranks)
def tridiagonal_solve(dl, d, du, b, *, perturb_singular: bool = False):
  """Solve the tridiagonal systems with sub-diagonal ``dl`` (``dl[..., 0]`` unused), diagonal
  ``d`` and super-diagonal ``du`` (``du[..., -1]`` unused), all ``(..., m)``, for ``b``
  ``(..., m, n)``: LU with partial pivoting of the dense matrix.  ``perturb_singular``
  replaces zero pivots by ``eps * max|A|``, so singular systems give large finite results."""
  jnp = _jnp()
  dl, d, du, b = (jnp.asarray(v) for v in (dl, d, du, b))
  if b.ndim < 2:
    raise ValueError(f"tridiagonal_solve: b must have at least 2 dimensions, got shape "
                     f"{b.shape}")
  m = b.shape[-2]
  for name, v in (("dl", dl), ("d", d), ("du", du)):
    if v.shape != b.shape[:-2] + (m,):
      raise ValueError(f"tridiagonal_solve: {name} must have shape {b.shape[:-2] + (m,)} "
                       f"(b's batch dims and its {m} rows), got {v.shape}")
    if v.dtype != b.dtype:
      raise ValueError(f"tridiagonal_solve: dl, d, du and b must have the same dtype, got "
                       f"{name}: {v.dtype} and b: {b.dtype}")
  if not dtypes.is_inexact(b.dtype):
    raise ValueError(f"tridiagonal_solve: only floating point and complex types are "
                     f"supported, got {b.dtype}")
  if m == 0:
    return b
  idx = jnp.arange(m)
  a = (d[..., :, None] * (idx[:, None] == idx[None, :])
       + dl[..., :, None] * (idx[:, None] == idx[None, :] + 1)
       + du[..., :, None] * (idx[:, None] + 1 == idx[None, :])).astype(b.dtype)
  from ourjax.numpy import linalg as jla
  lu_, _, perm = lu(a)
  if perturb_singular:
    # zero pivots replaced by eps * max|A| (eps where A is zero): large but finite results
    diag = jnp.diagonal(lu_, axis1=-2, axis2=-1)
    scale = jnp.max(jnp.abs(a), axis=(-2, -1))
    eps = jnp.finfo(b.dtype).eps
    tiny = (eps * jnp.where(scale > 0, scale, 1)).astype(b.dtype)[..., None]
    diag = jnp.where(diag == 0, tiny, diag)
    lu_ = jnp.where(jnp.eye(m, dtype=bool), diag[..., None, :], lu_)
  return jla._lu_solve(lu_, perm, b)


def householder_product(a, taus):
  """The first n columns of ``H_0 H_1 ... H_{k-1}``, ``H_i = I - taus[i] v_i v_i^H`` with
  ``v_i`` = (0, ..., 0, 1, a[i+1:, i]) (LAPACK's orgqr/ungqr)."""
  jnp = _jnp()
  a, taus = jnp.asarray(a), jnp.asarray(taus)
  m, n = a.shape[-2:]
  k = taus.shape[-1]
  if m < n:
    raise ValueError(f"householder_product: a must have at least as many rows as columns, "
                     f"got shape {a.shape}")
  if k > n:
    raise ValueError(f"householder_product: taus must have at most {n} elements, got shape "
                     f"{taus.shape}")
  if a.shape[:-2] != taus.shape[:-1]:
    raise ValueError(f"householder_product: a {a.shape} and taus {taus.shape} must have the "
                     f"same batch dimensions")
  idx = jnp.arange(m)[:, None]
  q = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)
  for i in reversed(range(k)):
    v = jnp.where(idx > i, a[..., :, i:i + 1], jnp.where(idx == i, 1, 0).astype(a.dtype))
    tau = taus[..., i, None, None]
    q = q - tau * v @ (_H(v) @ q)
  return q


def symmetric_product(a_matrix, c_matrix, *, alpha: float = 1.0, beta: float = 0.0,
                      symmetrize_output: bool = False):
  """``alpha * a @ a^T + beta * c`` (only the lower triangle meaningful unless
  ``symmetrize_output``)."""
  jnp = _jnp()
  a, c = jnp.asarray(a_matrix), jnp.asarray(c_matrix)
  out = alpha * (a @ _T(a)) + beta * c
  if symmetrize_output:
    low = jnp.tril(out)
    out = low + _T(jnp.tril(out, -1))
  return out.astype(c.dtype)


# the host-only primitives (eig, schur, geqrf, hessenberg, tridiagonal)
from ourjax.lax._linalg_host import (  # noqa: E402,F401
    eig, eig_p, schur, schur_p, geqrf, geqrf_p, hessenberg, hessenberg_p, tridiagonal,
    tridiagonal_p, qr_pivots_p, HOST_ONLY)
