"""Patch extraction and locally connected (unshared-weight) convolutions, as JAX's
``lax.conv_general_dilated_patches`` and ``lax.conv_general_dilated_local``.

Both are compositions of existing primitives, so they differentiate, batch and compile as
those do: the patches are a grouped convolution with a one-hot kernel (each input channel
``c`` produces ``prod(filter_shape)`` output channels ``c * S + s``, one per filter position
``s`` in row-major order of the filter's spatial dimensions, which follow the rhs spec's
order); a local convolution contracts those patches with a kernel that has one set of weights
per output position.
"""
from __future__ import annotations

import math

import numpy as np

from ourjax.core import get_aval
from ourjax.lax.dot import (ConvDimensionNumbers, conv_dimension_numbers, conv_general_dilated,
                            dot_general)


def _inverse(perm):
  inv = [0] * len(perm)
  for i, p in enumerate(perm):
    inv[p] = i
  return tuple(inv)


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
  """The patches a convolution with a kernel of spatial shape ``filter_shape`` reads: the
  output has the layout of a convolution's output (``dimension_numbers[2]``), with ``C *
  prod(filter_shape)`` features, channel-major (feature ``c * S + s`` is channel ``c`` at filter
  position ``s``); positions in the padding read zeros."""
  from ourjax import lax
  filter_shape = tuple(int(d) for d in filter_shape)
  lhs_shape = get_aval(lhs).shape
  nd = len(lhs_shape)
  if len(filter_shape) != nd - 2:
    raise ValueError(f"conv_general_dilated_patches: filter_shape {filter_shape} must have one "
                     f"entry per spatial dimension of lhs of shape {lhs_shape}")
  dn = conv_dimension_numbers(lhs_shape, (1, 1) + filter_shape, dimension_numbers)
  channels = lhs_shape[dn.lhs_spec[1]]
  size = math.prod(filter_shape)
  dtype = get_aval(lhs).dtype
  # canonical (O, I, *filter) layout: O = C * S, I = 1, grouped by channel
  eye = np.eye(size, dtype=np.float32).reshape((size, 1) + filter_shape)
  kernel = np.tile(eye, (channels,) + (1,) * (nd - 1))
  as_float = dtype == np.bool_
  if as_float:          # (a convolution of booleans has no sum; 0/1 products in a wider type)
    lhs = lax.convert_element_type(lhs, np.float32)
  kernel = kernel.astype(np.float32 if as_float else dtype)
  canonical = ConvDimensionNumbers(dn.lhs_spec, tuple(range(nd)), dn.out_spec)
  out = conv_general_dilated(lhs, kernel, window_strides, padding, lhs_dilation, rhs_dilation,
                             canonical, feature_group_count=channels, precision=precision,
                             preferred_element_type=preferred_element_type)
  return lax.convert_element_type(out, np.bool_) if as_float else out


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape,
                               lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                               precision=None):
  """A convolution whose weights differ at every output position: ``rhs`` has the rhs spec's
  layout with the output's spatial sizes in its spatial dimensions and ``C * prod(filter_shape)``
  input features (channel-major, the order of ``conv_general_dilated_patches``)."""
  from ourjax import lax
  patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding,
                                         lhs_dilation, rhs_dilation, dimension_numbers,
                                         precision)
  lhs_shape, rhs_shape = get_aval(lhs).shape, get_aval(rhs).shape
  dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
  n = len(lhs_shape) - 2
  p = lax.transpose(patches, tuple(dn.out_spec))        # (N, C*S, *X)
  w = lax.transpose(rhs, tuple(dn.rhs_spec))            # (O, C*S, *X)
  if get_aval(p).shape[1:2] != get_aval(w).shape[1:2] or \
      get_aval(p).shape[2:] != get_aval(w).shape[2:]:
    raise ValueError(f"conv_general_dilated_local: rhs of shape {rhs_shape} must have "
                     f"{get_aval(p).shape[1]} input features and spatial sizes "
                     f"{get_aval(p).shape[2:]} (the output's) in the layout of the rhs spec")
  spatial = tuple(range(2, n + 2))
  out = dot_general(p, w, (((1,), (1,)), (spatial, spatial)), precision=precision)  # (*X, N, O)
  out = lax.transpose(out, (n, n + 1) + tuple(range(n)))                          # (N, O, *X)
  return lax.transpose(out, _inverse(dn.out_spec))
