"""Contractions: dot, matmul, vdot, vecdot, matvec/vecmat, inner, outer, tensordot, einsum,
kron, and the diagonal helpers trace/diagonal.  Everything that multiplies and sums goes through
``lax.dot_general``; operands are promoted to a common dtype first (the result keeps it, or
takes ``preferred_element_type``)."""
from __future__ import annotations

import operator
import string

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.config import config
from ourjax._eager_replay import replayed
from ourjax.array import Array
from ourjax.core import get_aval
from ourjax.lax.dot import canonicalize_precision, dot_general_p
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import (_as_operand, _same_strong_arrays, check_arraylike,
                                promote_dtypes, static_argnames)


def _operands(name, *args):
  if _same_strong_arrays(args, same_shape=False):
    return list(args)
  if type(args[0]) is not Array or type(args[-1]) is not Array:
    check_arraylike(name, *args)
    args = [_as_operand(a) for a in args]
  return [a if type(a) is Array else asarray(a) for a in promote_dtypes(*args)]


def _dot_operands(name, a, b):
  """``a, b, dtype``: the operands of a jnp product and its result dtype.  As JAX's jnp.dot and
  matmul, operands of different dtypes are not converted: dot_general takes them as they are,
  with the promoted dtype as its preferred_element_type (None when they already agree)."""
  if _same_strong_arrays((a, b), same_shape=False):
    return a, b, None
  check_arraylike(name, a, b)
  oa, ob = (x if isinstance(x, (Array, core.Tracer)) else asarray(_as_operand(x))
            for x in (a, b))
  la, lb = get_aval(oa), get_aval(ob)
  dt = dtypes.result_type(oa, ob)
  if (la.dtype == dt and lb.dtype == dt) or la.ndim == 0 or lb.ndim == 0:
    pa, pb = _operands(name, a, b)    # one dtype already, or a scalar product: promoted
    return pa, pb, None
  return oa, ob, dt


def _dot_general(lhs, rhs, contract, batch, precision, preferred_element_type):
  dn = ((tuple(contract[0]), tuple(contract[1])), (tuple(batch[0]), tuple(batch[1])))
  la, ra = get_aval(lhs), get_aval(rhs)
  weak = la.weak_type and ra.weak_type
  # as JAX's jnp, the result dtype is passed as preferred_element_type (it shows in the jaxpr)
  pref = preferred_element_type
  if pref is None and la.dtype == ra.dtype:
    pref = la.dtype
  out = lax.dot_general(lhs, rhs, dn, precision=precision, preferred_element_type=pref)
  if preferred_element_type is None and weak:
    out = lax._convert_element_type(out, get_aval(out).dtype, True)
  return out


_dg = _dot_general


def _pref(preferred_element_type, name):
  return None if preferred_element_type is None else \
      dtypes.check_user_dtype(preferred_element_type, name)


def _check_contract(name, a, b, da, db):
  sa, sb = get_aval(a).shape, get_aval(b).shape
  ca, cb = tuple(sa[i] for i in da), tuple(sb[i] for i in db)
  if ca != cb:
    raise TypeError(f"dot_general requires contracting dimensions to have the same shape, got "
                    f"{ca} and {cb}. ({name} of shapes {sa} and {sb}, contracting dimensions "
                    f"{tuple(da)} of the first and {tuple(db)} of the second)")


def dot(a, b, *, precision=None, preferred_element_type=None):
  """NumPy's ``dot``: products with scalars; the inner product of vectors; otherwise the sum
  over the last axis of ``a`` and the second-to-last of ``b`` (the last, if ``b`` is 1-D)."""
  a, b, mixed = _dot_operands("dot", a, b)
  pref = _pref(preferred_element_type, "dot")
  pref = mixed if pref is None else pref
  na, nb = get_aval(a).ndim, get_aval(b).ndim
  if na == 0 or nb == 0:
    from ourjax.numpy._ufuncs import multiply
    out = multiply(a, b)
    return out if pref is None else lax.convert_element_type(out, pref)
  db = 0 if nb == 1 else nb - 2
  _check_contract("dot", a, b, (na - 1,), (db,))
  return _dot_general(a, b, ((na - 1,), (db,)), ((), ()), precision, pref)


_EAGER_MATMUL_DTYPES = frozenset(map(np.dtype, (np.float32, np.complex64)))
_VEC_DN, _MAT_DN = (((0,), (0,)), ((), ())), (((1,), (0,)), ((), ()))


def _eager_matmul(a, b):
  """The dot_general that the general path below binds for two float32/complex64 Arrays of rank
  1 or 2 with matching contracting sizes (not both weak), bound directly; None otherwise."""
  la, ra = a.aval, b.aval
  nl, nr = len(la.shape), len(ra.shape)
  if (la.dtype != ra.dtype or la.dtype not in _EAGER_MATMUL_DTYPES or
      (la.weak_type and ra.weak_type) or not 1 <= nl <= 2 or not 1 <= nr <= 2 or
      la.shape[-1] != ra.shape[0]):
    return None
  dn = _VEC_DN if nl == 1 else _MAT_DN
  # canonicalize_precision(None): None unless a default matmul precision is set
  prec = (canonicalize_precision(None) if config._local.overrides or
          config._values["jax_default_matmul_precision"] is not None else None)
  return dot_general_p.bind(a, b, dimension_numbers=dn, precision=prec,
                            preferred_element_type=la.dtype, out_sharding=None)


def matmul(a, b, *, precision=None, preferred_element_type=None):
  """Matrix product with NumPy's rules: 1-D operands are promoted to a matrix and the added
  axis removed afterwards; leading (batch) axes broadcast."""
  plain = precision is None and preferred_element_type is None
  if plain and type(a) is Array and type(b) is Array:
    out = _eager_matmul(a, b)     # (Arrays of one float32/complex64 dtype: nothing to promote)
    if out is not None:
      return out
  a, b, mixed = _dot_operands("matmul", a, b)
  if plain and mixed is None and type(a) is Array and type(b) is Array:
    out = _eager_matmul(a, b)
    if out is not None:
      return out
  pref = _pref(preferred_element_type, "matmul")
  pref = mixed if pref is None else pref
  sa, sb = get_aval(a).shape, get_aval(b).shape
  for i, s in enumerate((sa, sb)):
    if len(s) == 0:
      raise ValueError(f"matmul input operand {i} must have ndim at least 1, but it has ndim 0")
  a_vec, b_vec = len(sa) == 1, len(sb) == 1
  if a_vec or b_vec or (len(sa) == 2 and len(sb) == 2):
    # no batch dimensions to pair up: one dot_general contracting a's last axis with b's
    # second-to-last (its only one if b is a vector), as JAX's jnp.matmul does
    ka, kb = sa[-1], sb[0] if b_vec else sb[-2]
    if ka != kb:
      raise TypeError(f"matmul: contracting dimensions must have the same size, got shapes "
                      f"{'(' + str(ka) + ',)' if a_vec else sa} and "
                      f"{'(' + str(kb) + ',)' if b_vec else sb}: {ka} != {kb}")
    return _dot_general(a, b, ((len(sa) - 1,), (0 if b_vec else len(sb) - 2,)), ((), ()),
                        precision, pref)
  if a_vec:
    a = lax.reshape(a, (1,) + sa)
  if b_vec:
    b = lax.reshape(b, sb + (1,))
  sa, sb = get_aval(a).shape, get_aval(b).shape
  if sa[-1] != sb[-2]:
    raise TypeError(f"matmul: contracting dimensions must have the same size, got shapes "
                    f"{'(' + str(sa[-1]) + ',)' if a_vec else sa} and "
                    f"{'(' + str(sb[-2]) + ',)' if b_vec else sb}: {sa[-1]} != {sb[-2]}")
  ba, bb = sa[:-2], sb[:-2]
  nbatch = max(len(ba), len(bb))
  ba_p = (None,) * (nbatch - len(ba)) + ba
  bb_p = (None,) * (nbatch - len(bb)) + bb
  try:
    np.broadcast_shapes(tuple(d or 1 for d in ba_p), tuple(d or 1 for d in bb_p))
  except ValueError:
    raise ValueError(f"matmul: batch dimensions of shapes {get_aval(a).shape} and "
                     f"{get_aval(b).shape} do not broadcast") from None
  # Each batch position is shared (a batch dim of dot_general) when both sides have it with
  # the same size; where one side is 1 or missing, the other side's axis is a free dimension;
  # where both are 1 (or missing) it is squeezed out of both, as JAX does.
  a_squeeze, b_squeeze, a_batch, b_batch = [], [], [], []
  a_free_batch, b_free_batch = [], []   # (output position, operand axis)
  out_kind = []                         # per batch position: 'shared', 'a', 'b' or 'one'
  for i, (x, y) in enumerate(zip(ba_p, bb_p)):
    ax_a = None if x is None else i - (nbatch - len(ba))
    ax_b = None if y is None else i - (nbatch - len(bb))
    if x is not None and y is not None and x == y and not (x == 1 and y == 1):
      a_batch.append(ax_a)
      b_batch.append(ax_b)
      out_kind.append("shared")
    elif x is None or x == 1:
      if ax_a is not None:
        a_squeeze.append(ax_a)
      if y is None or y == 1:
        if ax_b is not None:
          b_squeeze.append(ax_b)
        out_kind.append("one")
      else:
        b_free_batch.append(ax_b)
        out_kind.append("b")
    else:
      if ax_b is not None:
        b_squeeze.append(ax_b)
      a_free_batch.append(ax_a)
      out_kind.append("a")

  def renumber(axes, squeezed):
    return [x - sum(s < x for s in squeezed) for x in axes]
  a2 = lax.squeeze(a, tuple(a_squeeze)) if a_squeeze else a
  b2 = lax.squeeze(b, tuple(b_squeeze)) if b_squeeze else b
  na2, nb2 = get_aval(a2).ndim, get_aval(b2).ndim
  out = _dot_general(a2, b2, ((na2 - 1,), (nb2 - 2,)),
                     (renumber(a_batch, a_squeeze), renumber(b_batch, b_squeeze)),
                     precision, pref)
  # dot_general output: shared batch, then a's free dims (free batch..., row), then b's
  # (free batch..., col).  Reorder to (batch in order..., row, col).
  nshared = len(a_batch)
  n_afree = len(a_free_batch)
  n_bfree = len(b_free_batch)
  pos_shared = iter(range(nshared))
  pos_a = iter(range(nshared, nshared + n_afree))
  pos_b = iter(range(nshared + n_afree + 1, nshared + n_afree + 1 + n_bfree))
  perm, ones = [], []
  for k, kind in enumerate(out_kind):
    if kind == "shared":
      perm.append(next(pos_shared))
    elif kind == "a":
      perm.append(next(pos_a))
    elif kind == "b":
      perm.append(next(pos_b))
    else:
      ones.append(k)
  row = nshared + n_afree
  col = nshared + n_afree + 1 + n_bfree
  perm += [row, col]
  out = lax.transpose(out, tuple(perm))
  final_batch = tuple(1 if k == "one" else
                      (ba_p[i] if k in ("shared", "a") else bb_p[i])
                      for i, k in enumerate(out_kind))
  shape = final_batch + ((sa[-2],) if not a_vec else ()) + ((sb[-1],) if not b_vec else ())
  return lax.reshape(out, shape)


def vdot(a, b, *, precision=None, preferred_element_type=None):
  """Dot product of the flattened arrays, conjugating ``a``."""
  a, b = _operands("vdot", a, b)
  from ourjax.numpy._shape import ravel
  from ourjax.numpy._ufuncs import conjugate
  return dot(conjugate(ravel(a)), ravel(b), precision=precision,
             preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis: int = -1, precision=None, preferred_element_type=None):
  """Conjugated dot product of vectors along ``axis``, broadcasting the other axes."""
  from ourjax.numpy._shape import broadcast_arrays, moveaxis
  from ourjax.numpy._ufuncs import conjugate
  x1, x2 = _operands("vecdot", x1, x2)
  n1, n2 = get_aval(x1).ndim, get_aval(x2).ndim
  if n1 == 0 or n2 == 0:
    raise ValueError("vecdot requires at least one-dimensional arguments")
  ax = operator.index(axis)
  if not (-n1 <= ax < n1 and -n2 <= ax < n2):
    raise ValueError(f"vecdot: axis {axis} is out of bounds for shapes {get_aval(x1).shape} "
                     f"and {get_aval(x2).shape}")
  x1, x2 = moveaxis(x1, ax, -1), moveaxis(x2, ax, -1)
  if get_aval(x1).shape[-1] != get_aval(x2).shape[-1]:
    raise ValueError(f"vecdot: the vector axes must have the same size, got shapes "
                     f"{get_aval(x1).shape} and {get_aval(x2).shape}")
  x1, x2 = broadcast_arrays(x1, x2)
  nd = get_aval(x1).ndim
  batch = tuple(range(nd - 1))
  return _dot_general(conjugate(x1), x2, ((nd - 1,), (nd - 1,)), (batch, batch), precision,
                      _pref(preferred_element_type, "vecdot"))


def matvec(x1, x2, /):
  """Matrix-vector products over the last axes, ``(..., n, m) x (..., m) -> (..., n)``; the
  leading (batch) axes broadcast."""
  from ourjax.numpy._misc import vectorize
  check_arraylike("matvec", x1, x2)
  return vectorize(matmul, signature="(n,m),(m)->(n)")(x1, x2)


def vecmat(x1, x2, /):
  """Conjugated vector-matrix products over the last axes, ``(..., n) x (..., n, m) ->
  (..., m)``; the leading (batch) axes broadcast."""
  from ourjax.numpy._misc import vectorize
  from ourjax.numpy._ufuncs import conjugate
  check_arraylike("vecmat", x1, x2)
  return vectorize(matmul, signature="(n),(n,m)->(m)")(conjugate(_as_operand(x1)), x2)


def inner(a, b, *, precision=None, preferred_element_type=None):
  """Sum over the last axes of both (a product for scalars)."""
  a, b = _operands("inner", a, b)
  na, nb = get_aval(a).ndim, get_aval(b).ndim
  pref = _pref(preferred_element_type, "inner")
  if na == 0 or nb == 0:
    from ourjax.numpy._ufuncs import multiply
    out = multiply(a, b)
    return out if pref is None else lax.convert_element_type(out, pref)
  _check_contract("inner", a, b, (na - 1,), (nb - 1,))
  return _dot_general(a, b, ((na - 1,), (nb - 1,)), ((), ()), precision, pref)


@replayed()
def outer(a, b, out=None):
  """All products ``a[i] * b[j]`` of the flattened inputs."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.outer is not supported.")
  from ourjax.numpy._shape import ravel
  from ourjax.numpy._ufuncs import multiply
  a, b = _operands("outer", a, b)
  a, b = ravel(a), ravel(b)
  return multiply(lax.reshape(a, (get_aval(a).size, 1)), lax.reshape(b, (1, get_aval(b).size)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
  """Sum products over ``axes``: an int N (the last N axes of ``a`` with the first N of
  ``b``) or a pair of axis sequences (or of ints)."""
  a, b = _operands("tensordot", a, b)
  na, nb = get_aval(a).ndim, get_aval(b).ndim
  if isinstance(axes, (int, np.integer)):
    n = int(axes)
    if n < 0:
      raise ValueError(f"tensordot: axes must be non-negative, got {axes}")
    if n > min(na, nb):
      raise TypeError(f"Number of tensordot axes (axes {n}) exceeds input ranks "
                      f"({get_aval(a).shape} and {get_aval(b).shape})")
    ca, cb = tuple(range(na - n, na)), tuple(range(n))
  elif isinstance(axes, (list, tuple)) and len(axes) == 2:
    ax_a, ax_b = axes
    if isinstance(ax_a, (int, np.integer)) and isinstance(ax_b, (int, np.integer)):
      ax_a, ax_b = (ax_a,), (ax_b,)
    if not all(isinstance(x, (int, np.integer, list, tuple)) for x in (ax_a, ax_b)):
      raise TypeError(f"tensordot requires both axes lists to be either ints, tuples or lists, "
                      f"got {ax_a} and {ax_b}")
    ax_a, ax_b = tuple(ax_a), tuple(ax_b)
    if len(ax_a) != len(ax_b):
      raise TypeError(f"tensordot requires axes lists to have equal length, got {ax_a} and "
                      f"{ax_b}.")
    ca = tuple(_canon(x, na, "tensordot") for x in ax_a)
    cb = tuple(_canon(x, nb, "tensordot") for x in ax_b)
    if len(set(ca)) != len(ca) or len(set(cb)) != len(cb):
      raise ValueError(f"tensordot requires unique axes, got {axes}")
  else:
    raise TypeError(f"tensordot axes argument must be an int, a pair of ints, or a pair of "
                    f"lists/tuples of ints; got {axes}")
  _check_contract("tensordot", a, b, ca, cb)
  return _dot_general(a, b, (ca, cb), ((), ()), precision,
                      _pref(preferred_element_type, "tensordot"))


def _canon(ax, nd, name):
  ax = operator.index(ax)
  if not -nd <= ax < nd:
    raise ValueError(f"{name}: axis {ax} is out of bounds for array of dimension {nd}")
  return ax % nd


@replayed()
def kron(a, b):
  """Kronecker product: blocks ``a[i, j] * b``."""
  from ourjax.numpy._ufuncs import multiply
  a, b = _operands("kron", a, b)
  sa, sb = get_aval(a).shape, get_aval(b).shape
  nd = max(len(sa), len(sb))
  sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
  a = lax.reshape(a, tuple(d for x in sa for d in (x, 1)))
  b = lax.reshape(b, tuple(d for x in sb for d in (1, x)))
  return lax.reshape(multiply(a, b), tuple(x * y for x, y in zip(sa, sb)))


# ------------------------------------------------------------------------------------------------
# Diagonals


@static_argnames("offset", "axis1", "axis2")
def diagonal(a, offset=0, axis1: int = 0, axis2: int = 1):
  """The ``offset`` diagonal of the (axis1, axis2) planes, as the last axis of the result."""
  check_arraylike("diagonal", a)
  a = asarray(_as_operand(a))
  aval = get_aval(a)
  if aval.ndim < 2:
    raise ValueError("diagonal requires an array of at least two dimensions.")
  offset = core.concrete_or_error(operator.index, offset, "diagonal offset must be concrete")
  ax1, ax2 = _canon(axis1, aval.ndim, "diagonal"), _canon(axis2, aval.ndim, "diagonal")
  if ax1 == ax2:
    raise ValueError(f"axis1 and axis2 can not be same. axis1={axis1} and axis2={axis2}")
  from ourjax.numpy._shape import moveaxis, _slice_axis
  a = moveaxis(a, (ax1, ax2), (-2, -1))
  *batch, n, m = get_aval(a).shape
  nd = len(batch) + 2
  # cut the plane to the d x (d + something) block that starts at the diagonal's first element
  d = max(0, min(n, m - offset)) if offset >= 0 else max(0, min(n + offset, m))
  if d == 0:
    return lax.full(tuple(batch) + (0,), 0, get_aval(a).dtype)
  if offset >= 0:
    a = _slice_axis(_slice_axis(a, 0, d, nd - 2), offset, offset + d, nd - 1)
  else:
    a = _slice_axis(_slice_axis(a, -offset, -offset + d, nd - 2), 0, d, nd - 1)
  # now (..., d, d): element (i, i) sits at flat position i * (d + 1)
  flat = lax.reshape(a, tuple(batch) + (d * d,))
  return _slice_axis(flat, 0, d * d, nd - 2, stride=d + 1)


@replayed(static=("offset", "axis1", "axis2", "dtype"))
def trace(a, offset=0, axis1: int = 0, axis2: int = 1, dtype=None, out=None):
  """Sum of the ``offset`` diagonal (over axis1, axis2)."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.trace is not supported.")
  from ourjax.numpy._reductions import sum as _sum
  return _sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


# ------------------------------------------------------------------------------------------------
# einsum


def _parse_einsum(subscripts, shapes):
  """Subscripts to per-operand label lists and an output label list.  Labels are ints; an
  ellipsis becomes as many fresh labels as the dimensions it covers (right-aligned, so that
  ellipsis dimensions broadcast as NumPy's do)."""
  subscripts = subscripts.replace(" ", "")
  if "->" in subscripts:
    ins, out = subscripts.split("->")
    explicit = True
  else:
    ins, out, explicit = subscripts, "", False
  in_specs = ins.split(",")
  if len(in_specs) != len(shapes):
    raise ValueError(f"einsum: {len(in_specs)} operand specs in {subscripts!r} but "
                     f"{len(shapes)} operands were given")
  letters = {}

  def label(ch):
    if ch not in string.ascii_letters:
      raise ValueError(f"einsum: invalid subscript {ch!r} in {subscripts!r}")
    return letters.setdefault(ch, len(letters))
  ell_rank = 0
  parsed = []
  for spec, shape in zip(in_specs, shapes):
    if spec.count("...") > 1 or spec.replace("...", "").count(".") or \
        (spec.count(".") % 3):
      raise ValueError(f"einsum: invalid ellipsis in {spec!r}")
    named = len(spec.replace("...", ""))
    if "..." in spec:
      k = len(shape) - named
      if k < 0:
        raise ValueError(f"einsum: operand spec {spec!r} has more labels than the operand's "
                         f"{len(shape)} dimensions")
      ell_rank = max(ell_rank, k)
    elif named != len(shape):
      raise ValueError(f"einsum: operand spec {spec!r} names {named} dimensions but the "
                       f"operand has shape {tuple(shape)}")
    parsed.append(spec)
  for ch in "".join(s.replace("...", "") for s in in_specs) + out.replace("...", ""):
    if ch != ".":
      label(ch)
  base = 1000
  ell_labels = [base + i for i in range(ell_rank)]
  in_labels = []
  for spec, shape in zip(parsed, shapes):
    if "..." in spec:
      pre, post = spec.split("...")
      k = len(shape) - len(pre) - len(post)
      in_labels.append([letters[c] for c in pre] + ell_labels[ell_rank - k:] +
                       [letters[c] for c in post])
    else:
      in_labels.append([letters[c] for c in spec])
  if explicit:
    if out.count("...") > 1:
      raise ValueError(f"einsum: invalid ellipsis in output {out!r}")
    for ch in out.replace("...", ""):
      if ch not in "".join(in_specs):
        raise ValueError(f"einsum: output subscript {ch!r} does not appear in the inputs")
    if len(set(out.replace("...", ""))) != len(out.replace("...", "")):
      raise ValueError(f"einsum: output subscript in {out!r} appears more than once")
    if "..." in out:
      pre, post = out.split("...")
      out_labels = [letters[c] for c in pre] + ell_labels + [letters[c] for c in post]
    else:
      out_labels = [letters[c] for c in out]
  else:
    flat = "".join(s.replace("...", "") for s in in_specs)
    once = sorted(c for c in set(flat) if flat.count(c) == 1)
    out_labels = ell_labels + [letters[c] for c in once]
  return in_labels, out_labels


def _diagonal_labels(x, labels):
  """Collapse repeated labels within one operand by taking diagonals."""
  from ourjax.numpy._shape import moveaxis
  while True:
    seen = {}
    dup = None
    for i, lab in enumerate(labels):
      if lab in seen:
        dup = (seen[lab], i)
        break
      seen[lab] = i
    if dup is None:
      return x, labels
    i, j = dup
    if get_aval(x).shape[i] != get_aval(x).shape[j]:
      raise ValueError(f"einsum: repeated label needs equal dimensions, got sizes "
                       f"{get_aval(x).shape[i]} and {get_aval(x).shape[j]}")
    x = diagonal(x, 0, i, j)          # removes i and j, appends the diagonal last
    lab = labels[i]
    labels = [l for k, l in enumerate(labels) if k not in (i, j)] + [lab]


def einsum(subscripts, /, *operands, out=None, optimize="auto", precision=None,
           preferred_element_type=None, _dot_general=None):
  """Einstein summation: ``einsum('ij,jk->ik', a, b)``; also the interleaved form
  ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.  Implicit outputs are the labels used once, in
  alphabetical order.  Contracts operands pairwise from the left with ``dot_general``."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.einsum is not supported.")
  if not isinstance(subscripts, str):
    subscripts, operands = _interleaved_to_str(subscripts, operands)
  check_arraylike("einsum", *operands)
  ops = [asarray(_as_operand(o)) for o in operands]
  if not ops:
    raise ValueError("einsum: no operands given")
  pref = _pref(preferred_element_type, "einsum")
  ops = promote_dtypes(*ops) if len(ops) > 1 else ops
  in_labels, out_labels = _parse_einsum(subscripts, [get_aval(o).shape for o in ops])
  # label sizes (size-1 dimensions broadcast)
  sizes = {}
  for o, labs in zip(ops, in_labels):
    for lab, d in zip(labs, get_aval(o).shape):
      if lab in sizes and sizes[lab] != d and d != 1 and sizes[lab] != 1:
        raise ValueError(f"einsum: size of label in {subscripts!r} differs between operands: "
                         f"{sizes[lab]} vs {d} (shapes "
                         f"{[get_aval(x).shape for x in ops]})")
      if lab not in sizes or sizes[lab] == 1:
        sizes[lab] = d
  terms = []
  for o, labs in zip(ops, in_labels):
    o, labs = _diagonal_labels(o, list(labs))
    # broadcast size-1 dimensions whose label is larger elsewhere
    shape = get_aval(o).shape
    full = tuple(sizes[lab] for lab in labs)
    if full != shape:
      from ourjax.numpy._util import _broadcast_to
      o = _broadcast_to(o, full)
    terms.append((o, labs))

  def needed_later(k):
    s = set(out_labels)
    for _, labs in terms[k:]:
      s |= set(labs)
    return s

  def sum_unused(x, labs, keep):
    drop = [i for i, lab in enumerate(labs) if lab not in keep]
    if drop:
      # as JAX's: a sum is taken in the preferred type where that type is the wider
      if pref is not None and dtypes.result_type(get_aval(x).dtype, pref) != get_aval(x).dtype:
        x = lax.convert_element_type(x, pref)
      x = lax.reduce_sum(x, tuple(drop)) if get_aval(x).dtype != np.bool_ else \
          lax.reduce_or(x, tuple(drop))
      labs = [lab for i, lab in enumerate(labs) if i not in drop]
    return x, labs

  x, labs = terms[0]
  x, labs = sum_unused(x, labs, needed_later(1))
  for k in range(1, len(terms)):
    y, ylabs = terms[k]
    later = needed_later(k + 1)
    y, ylabs = sum_unused(y, ylabs, later | set(labs))
    x, labs = sum_unused(x, labs, later | set(ylabs))
    shared = [lab for lab in labs if lab in ylabs]
    batch = [lab for lab in shared if lab in later]
    contract = [lab for lab in shared if lab not in later]
    out = _dg(x, y, ([labs.index(l) for l in contract],
                              [ylabs.index(l) for l in contract]),
                       ([labs.index(l) for l in batch], [ylabs.index(l) for l in batch]),
                       precision, pref)
    x = out
    labs = batch + [l for l in labs if l not in shared] + [l for l in ylabs if l not in shared]
  x, labs = sum_unused(x, labs, set(out_labels))
  perm = tuple(labs.index(l) for l in out_labels)
  x = lax.transpose(x, perm)
  if pref is not None:
    x = lax.convert_element_type(x, pref)
  return x


def _interleaved_to_str(first, rest):
  args = (first,) + tuple(rest)
  operands, specs = list(args[0::2]), list(args[1::2])
  out_spec = None
  if len(args) % 2 == 1:
    out_spec = args[-1]
    operands = list(args[0:-1:2])
    specs = list(args[1:-1:2])
  symbols = {}

  def sym(v):
    if v is Ellipsis:
      return "..."
    v = operator.index(v)
    if v not in symbols:
      if len(symbols) >= 52:
        raise ValueError("einsum: too many distinct labels (at most 52)")
      symbols[v] = string.ascii_letters[len(symbols)]
    return symbols[v]
  sub = ",".join("".join(sym(v) for v in s) for s in specs)
  if out_spec is not None:
    sub += "->" + "".join(sym(v) for v in out_spec)
  return sub, operands


def einsum_path(subscripts, *operands, optimize="greedy"):
  """The contraction order einsum uses (left to right), in NumPy's format."""
  n = len(operands) if isinstance(subscripts, str) else (len(operands) + 1) // 2
  path = ["einsum_path"] + [(0, 1)] * max(0, n - 1)
  return path, f"  Left-to-right pairwise contraction of {n} operands"
