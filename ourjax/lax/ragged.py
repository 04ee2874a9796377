"""``ragged_dot`` and ``ragged_dot_general``: dot products whose lhs is split into groups of
consecutive positions along one "ragged" dimension, with ``group_sizes`` giving each group's
length.  They are compositions of ``dot_general`` with masks (no primitive of their own), so
their derivatives and batching are those of the pieces.

The three kinds, by what the lhs ragged dimension is:

* non-contracting (``ragged_dot``): rhs has a group dimension; the rows of group ``i`` are
  multiplied by ``rhs[i]``.  Rows past ``sum(group_sizes)`` give zeros.
* contracting: rhs has no group dimension; the result gets a leading group dimension, entry
  ``i`` contracting only over the positions of group ``i``.
* batch: an ordinary ``dot_general`` (the groups partition batch entries that are
  independent anyway).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ourjax import dtypes
from ourjax.config import internal_promotion
from ourjax.core import get_aval


class RaggedDotDimensionNumbers(NamedTuple):
  """``dot_dimension_numbers`` (as ``dot_general``'s), the lhs ragged dimension (a list of
  one) and the rhs group dimensions (one for a non-contracting ragged dimension, else
  none)."""
  dot_dimension_numbers: tuple
  lhs_ragged_dimensions: Sequence[int]
  rhs_group_dimensions: Sequence[int]


_DEFAULT_DNUMS = RaggedDotDimensionNumbers(dot_dimension_numbers=(([1], [1]), ([], [])),
                                           lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
  """``lhs`` [m, k] times ``rhs`` [g, k, n] with the m rows in ``g`` consecutive groups of
  ``group_sizes`` [g]: row ``j`` of group ``i`` is ``lhs[j] @ rhs[i]``; result [m, n]."""
  return ragged_dot_general(lhs, rhs, group_sizes, _DEFAULT_DNUMS, precision=precision,
                            preferred_element_type=preferred_element_type,
                            group_offset=group_offset, out_sharding=out_sharding)


def _check(lhs_shape, rhs_shape, gs_shape, dnums):
  """Validates the dimension numbers and shapes (TypeError, with JAX's words); returns
  (kind, ragged dim, rhs group dim or None, number of groups, prefix dims of group_sizes)."""
  (lc, rc), (lb, rb) = dnums.dot_dimension_numbers
  lc, rc, lb, rb = (tuple(int(d) for d in ds) for ds in (lc, rc, lb, rb))
  ragged = list(dnums.lhs_ragged_dimensions)
  groups = list(dnums.rhs_group_dimensions)
  if len(ragged) != 1:
    raise TypeError("ragged_dot_general expects exactly one lhs ragged dimension, got "
                    f"{ragged}")
  r = int(ragged[0])
  if not 0 <= r < len(lhs_shape):
    raise TypeError("ragged_dot_general requires lhs ragged dimension numbers to be "
                    "nonnegative and less than the number of axes of the lhs, got "
                    f"{ragged} for an lhs of rank {len(lhs_shape)}")
  for gd in groups:
    if gd in rc or gd in rb:
      raise TypeError("ragged_dot_general requires rhs group dimension numbers to be "
                      f"distinct from contracting and batch dimensions, got {groups}")
  kind = "contracting" if r in lc else "batch" if r in lb else "noncontracting"
  if kind == "noncontracting":
    if len(groups) != 1:
      raise TypeError("ragged_dot_general requires exactly one rhs group dimension when lhs "
                      f"ragged dimension is noncontracting, got {groups}")
    gd = int(groups[0])
    g = rhs_shape[gd]
    if gs_shape and gs_shape[-1] != g:
      raise TypeError(f"expected rhs group dimension size to be {gs_shape[-1]}, got {g}")
  else:
    if groups:
      raise TypeError("ragged_dot_general requires zero group dimensions in the rhs when lhs "
                      f"ragged dimension is contracting or batch, got {groups}")
    gd = None
    g = gs_shape[-1] if gs_shape else 0

  def kind_of(d):
    return "contracting" if d in lc else "batch" if d in lb else "noncontracting"
  prefix = [d for d in range(r) if d in lb or kind_of(d) == kind]
  expected = tuple(lhs_shape[d] for d in prefix) + (g,)
  if tuple(gs_shape) != expected:
    raise TypeError(f"expected group_sizes to have shape {expected}, got {tuple(gs_shape)}")
  return kind, r, gd, g, prefix, (lc, rc, lb, rb)


@internal_promotion      # (its masks are built with jnp, by rank promotion)
def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers,
                       precision=None, preferred_element_type=None, group_offset=None,
                       out_sharding=None):
  """The general ragged dot (see the module docstring for the three kinds)."""
  from ourjax import numpy as jnp
  from ourjax.lax.dot import dot_general
  from ourjax.lax.structural import broadcast_in_dim, transpose
  from ourjax.lax.reductions import reduce_sum
  if group_offset is not None:
    raise NotImplementedError("ragged_dot_general: group_offset is not supported")
  lhs, rhs, group_sizes = jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(group_sizes)
  la, ra, ga = get_aval(lhs), get_aval(rhs), get_aval(group_sizes)
  if not dtypes.is_integer(ga.dtype):
    raise TypeError(f"ragged_dot_general: group_sizes must be integers, got {ga.dtype.name}")
  kind, r, gd, g, prefix, (lc, rc, lb, rb) = _check(la.shape, ra.shape, ga.shape,
                                                     ragged_dot_dimension_numbers)
  opts = dict(precision=precision, preferred_element_type=preferred_element_type)
  if kind == "batch":
    return dot_general(lhs, rhs, ((lc, rc), (lb, rb)), **opts)
  # mask[prefix..., i, p] = position p of the ragged dimension lies in group i
  ends = jnp.cumsum(group_sizes, axis=-1)
  starts = ends - group_sizes
  pos = jnp.arange(la.shape[r], dtype=ga.dtype)
  mask = (pos >= starts[..., None]) & (pos < ends[..., None])
  # lhs_g[i, lhs...] = lhs where position is in group i, else 0
  mask = broadcast_in_dim(jnp.moveaxis(mask.astype(la.dtype), -2, 0), (g,) + tuple(la.shape),
                          (0,) + tuple(d + 1 for d in prefix) + (r + 1,))
  lhs_g = mask * lhs[None]
  lc1, lb1 = tuple(d + 1 for d in lc), tuple(d + 1 for d in lb)
  if kind == "noncontracting":
    # the group axis pairs with rhs's group dimension as a batch dimension, then is summed
    out = dot_general(lhs_g, rhs, ((lc1, rc), ((0,) + lb1, (gd,) + rb)), **opts)
    return reduce_sum(out, (0,)) if g else jnp.zeros(out.shape[1:], out.dtype)
  # contracting: the group axis is a free lhs dimension, moved to the front
  out = dot_general(lhs_g, rhs, ((lc1, rc), (lb1, rb)), **opts)
  nb = len(lb)
  perm = (nb,) + tuple(range(nb)) + tuple(range(nb + 1, out.ndim))
  return transpose(out, perm)
