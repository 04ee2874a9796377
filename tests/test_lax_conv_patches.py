"""``lax.conv_general_dilated_patches`` and ``lax.conv_general_dilated_local`` against NumPy
loops over padded windows, and ``conv_transpose(use_consistent_padding=True)`` against the
gradient of the forward convolution with the same padding."""
import itertools

import numpy as np
import pytest

import ourjax
from ourjax import lax


def _patches_ref(x, filter_shape, strides, pads, dilation):
  """NCHW... input -> (N, C * S, *out) patches, channel-major, zeros in the padding."""
  n, c = x.shape[:2]
  xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
  eff = [(k - 1) * d + 1 for k, d in zip(filter_shape, dilation)]
  out_sp = [(xp.shape[2 + i] - eff[i]) // strides[i] + 1 for i in range(len(filter_shape))]
  out = np.zeros((n, c, int(np.prod(filter_shape, dtype=int))) + tuple(out_sp), x.dtype)
  for pos in itertools.product(*[range(o) for o in out_sp]):
    for s, f in enumerate(itertools.product(*[range(k) for k in filter_shape])):
      idx = tuple(p * st + fi * d for p, st, fi, d in zip(pos, strides, f, dilation))
      out[(slice(None), slice(None), s) + pos] = xp[(slice(None), slice(None)) + idx]
  return out.reshape((n, -1) + tuple(out_sp))


@pytest.mark.parametrize("shape,filter_shape,strides,pads,dilation", [
    ((2, 3, 7), (3,), (1,), [(1, 1)], (1,)),
    ((2, 3, 7), (2,), (2,), [(0, 2)], (2,)),
    ((1, 2, 5, 6), (2, 3), (1, 2), [(1, 0), (2, 1)], (1, 1)),
    ((2, 1, 6, 5), (3, 2), (2, 1), [(0, 0), (0, 0)], (2, 1)),
])
def test_patches_against_numpy(shape, filter_shape, strides, pads, dilation):
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  want = _patches_ref(x, filter_shape, strides, pads, dilation)
  f = lambda x: lax.conv_general_dilated_patches(x, filter_shape, strides, pads,
                                                 rhs_dilation=dilation)
  np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(x)), want, rtol=1e-6, atol=1e-6)


def test_patches_layouts_and_dtypes():
  x = np.array([1, 2, 3, 4, 5], np.float32).reshape((1, -1, 1))
  dn = ("NHC", "OIH", "NHC")
  got = lax.conv_general_dilated_patches(x, (3,), (1,), "SAME", rhs_dilation=(2,),
                                         dimension_numbers=dn)
  np.testing.assert_array_equal(np.asarray(got)[0], [[0, 1, 3], [0, 2, 4], [1, 3, 5],
                                                      [2, 4, 0], [3, 5, 0]])
  x = np.array([[1, 2, 3], [4, 5, 6]], np.float32).reshape((1, 2, 3, 1))
  got = lax.conv_general_dilated_patches(x, (2, 2), (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "OIHW", "NHWC"))
  np.testing.assert_array_equal(np.asarray(got).reshape(6, 4),
                                [[1, 2, 4, 5], [2, 3, 5, 6], [3, 0, 6, 0], [4, 5, 0, 0],
                                 [5, 6, 0, 0], [6, 0, 0, 0]])
  xi = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5).astype(np.int32) - 50
  got = lax.conv_general_dilated_patches(xi, (2, 2), (1, 1), [(0, 1), (1, 0)])
  assert got.dtype == np.int32
  np.testing.assert_array_equal(np.asarray(got),
                                _patches_ref(xi, (2, 2), (1, 1), [(0, 1), (1, 0)], (1, 1)))
  got = lax.conv_general_dilated_patches(xi > 0, (2, 2), (1, 1), "VALID")
  assert got.dtype == np.bool_
  np.testing.assert_array_equal(np.asarray(got), _patches_ref(xi > 0, (2, 2), (1, 1),
                                                              [(0, 0), (0, 0)], (1, 1)))


@pytest.mark.parametrize("lhs_spec,rhs_spec,out_spec", [
    ("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"), ("CWHN", "IOHW", "WNHC")])
def test_local_conv(lhs_spec, rhs_spec, out_spec):
  # (the filter shape, strides and padding follow the rhs spec's spatial order: H, W here)
  rng = np.random.default_rng(1)
  x_c = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)            # NCHW
  fs, strides, pads, dil = (2, 3), (1, 2), [(1, 0), (1, 1)], (2, 1)
  p = _patches_ref(x_c, fs, strides, pads, dil)                          # (N, C*S, H', W')
  w_c = rng.standard_normal((4, p.shape[1]) + p.shape[2:]).astype(np.float32)   # (O, C*S, ..)
  want_c = np.einsum("nihw,oihw->nohw", p.astype(np.float64), w_c.astype(np.float64))
  x = np.transpose(x_c, ["NCHW".index(c) for c in lhs_spec])
  w = np.transpose(w_c, ["OIHW".index(c) for c in rhs_spec])
  got = lax.conv_general_dilated_local(x, w, strides, pads, fs, rhs_dilation=dil,
                                       dimension_numbers=(lhs_spec, rhs_spec, out_spec))
  want = np.transpose(want_c, ["NCHW".index(c) for c in out_spec])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  # with the same weights at every position it is the ordinary convolution
  k = rng.standard_normal((4, 3) + fs).astype(np.float32)
  w_tiled = np.broadcast_to(k.reshape(4, -1, 1, 1), w_c.shape)
  got = lax.conv_general_dilated_local(x_c, w_tiled, strides, pads, fs, rhs_dilation=dil)
  conv = lax.conv_general_dilated(x_c, k, strides, pads, rhs_dilation=dil)
  np.testing.assert_allclose(np.asarray(got), np.asarray(conv), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strides", [(1, 1), (1, 2), (3, 3)])
@pytest.mark.parametrize("padding", [((0, 1), (2, 0)), ((2, 2), (1, 0)), "SAME", "VALID"])
@pytest.mark.parametrize("dilation", [None, (2, 2)])
def test_conv_transpose_consistent_padding(strides, padding, dilation):
  rng = np.random.default_rng(2)
  x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)
  rhs = rng.standard_normal((3, 3, 3, 2)).astype(np.float32)   # HWIO: 3 -> 2 features
  dn = ("NHWC", "HWIO", "NHWC")
  got = lax.conv_transpose(x, rhs, strides, padding, rhs_dilation=dilation,
                           dimension_numbers=dn, use_consistent_padding=True)
  w = np.ascontiguousarray(np.flip(rhs, (0, 1)).swapaxes(2, 3))   # the forward conv's kernel
  # the gradient of the forward convolution with the same padding, at an input of the size
  # that the forward convolution maps onto x's size
  dil = dilation or (1, 1)
  eff = [(3 - 1) * d + 1 for d in dil]
  if padding == "SAME":
    in_sp = [n * s for n, s in zip(x.shape[1:3], strides)]
  else:
    pads = [(0, 0)] * 2 if padding == "VALID" else padding
    in_sp = [n * s + max(e - s, 0) - lo - hi
             for n, s, e, (lo, hi) in zip(x.shape[1:3], strides, eff, pads)]
  fwd = lambda z: lax.conv_general_dilated(z, w, strides, padding, None, dilation, dn)
  _, vjp = ourjax.vjp(fwd, np.zeros((2, *in_sp, 2), np.float32))
  want, = vjp(x)
  assert got.shape == want.shape
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
