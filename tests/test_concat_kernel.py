"""Many-part concatenations written part by part (llvm/concat.py) and reshapes indexed group by
group (hlo.reshape_groups): jitted results against NumPy."""
from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends.llvm import emitter as E
from ourjax.lowering import hlo
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)




def _kernel_kinds(fn, *args):
  exe = fn.lower(*args).compile()._executable.compiled
  return [s.split()[0] for s in exe.meta["steps"]]


@st.composite
def concat_cases(draw):
  rank = draw(st.integers(1, 4))
  dims = [draw(st.integers(1, 5)) for _ in range(rank)]
  axis = draw(st.integers(0, rank - 1))
  nparts = draw(st.integers(E.BRANCHY_CONCAT_PARTS + 1, 10))
  sizes = [draw(st.integers(0, 3)) for _ in range(nparts)]
  if sum(sizes) == 0:
    sizes[0] = 1
  pad = draw(st.integers(0, 2))
  reshape = draw(st.booleans())
  dtype = draw(st.sampled_from([np.float32, np.int32, np.float16]))
  return dims, axis, sizes, pad, reshape, dtype


@settings(max_examples=40, deadline=None)
@given(case=concat_cases(), seed=st.integers(0, 2 ** 31))
def test_many_part_concatenations_match_numpy(case, seed):
  """Parts are slices of a padded, scaled array (as im2col's are), concatenated along any axis,
  the result optionally flattened to a matrix; a ConcatKernel writes it."""
  dims, axis, sizes, pad, reshape, dtype = case
  rng = np.random.default_rng(seed)
  src_dims = list(dims)
  src_dims[axis] = max(sizes) + 3
  x = (rng.standard_normal(src_dims) * 10).astype(dtype)

  def build(np_, x):
    widths = [(0, 0)] * len(dims)
    widths[axis] = (pad, pad)
    p = np_.pad(x * 2, widths)
    parts = []
    for k, n in enumerate(sizes):
      start = k % (p.shape[axis] - n + 1)
      idx = [slice(None)] * len(dims)
      idx[axis] = slice(start, start + n)
      parts.append(p[tuple(idx)])
    out = np_.concatenate(parts, axis=axis)
    if reshape and out.ndim > 1:
      out = out.reshape(out.shape[0], -1)
    return out

  want = build(np, x)
  f = ourjax.jit(lambda x: build(jnp, x))
  got = np.asarray(f(x))
  assert got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got, want)
  if sum(1 for n in sizes if n) > E.BRANCHY_CONCAT_PARTS and want.size:
    assert "ConcatKernel" in _kernel_kinds(f, x)


def test_im2col_convolution_uses_the_concat_kernel():
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 9, 7, 5)).astype(np.float32)
  w = rng.standard_normal((3, 3, 5, 4)).astype(np.float32)
  f = ourjax.jit(lambda x, w: lax.conv_general_dilated(
      x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
  got = np.asarray(f(x, w))
  xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
  want = np.zeros((2, 9, 7, 4))
  for dy in range(3):
    for dx in range(3):
      want += np.einsum("nhwc,co->nhwo", xp[:, dy:dy + 9, dx:dx + 7], w[dy, dx])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  assert "ConcatKernel" in _kernel_kinds(f, x, w)
  # the profiler names the HLO the patch kernel covers
  rows = f.lower(x, w).compile().profile(x, w, reps=1).rows
  (patch,) = [r for r in rows if r["kind"] == "ConcatKernel"]
  assert "slice" in patch["hlo"] and "concatenate" in patch["hlo"]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 31), stride=st.integers(1, 2), taps=st.integers(3, 4),
       mixed=st.booleans(), dtype=st.sampled_from([np.float32, np.int32]))
def test_parts_alike_but_for_slice_starts_share_one_loop(seed, stride, taps, mixed, dtype):
  """Parts that are the same computation on windows at different starts (im2col's taps, in two
  dimensions, strided) are written by one loop over the parts; parts of another computation
  (``mixed``: every third tap from ``y``) form a group of their own.  Results against NumPy."""
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal((2, 7, 6, 3)) * 10).astype(dtype)
  y = (rng.standard_normal((2, 7, 6, 3)) * 10).astype(dtype)
  ho, wo = (7 + 2 - taps) // stride + 1, (6 + 2 - taps) // stride + 1

  def build(np_, x, y):
    xp = np_.pad(x * 2, ((0, 0), (1, 1), (1, 1), (0, 0)))
    yp = np_.pad(y + 1, ((0, 0), (1, 1), (1, 1), (0, 0)))
    parts = []
    for dy in range(taps):
      for dx in range(taps):
        src = yp if mixed and (dy * taps + dx) % 3 == 2 else xp
        parts.append(src[:, dy:dy + stride * (ho - 1) + 1:stride,
                         dx:dx + stride * (wo - 1) + 1:stride, :][:, :, :, None, :])
    return np_.concatenate(parts, axis=3).reshape(2 * ho * wo, -1)

  want = build(np, x, y)
  f = ourjax.jit(lambda x, y: build(jnp, x, y))
  got = np.asarray(f(x, y))
  assert got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got, want)
  exe = f.lower(x, y).compile()._executable.compiled
  assert "ConcatKernel" in [s.split()[0] for s in exe.meta["steps"]]
  # one loop over the parts per group of two or more: the x taps, and the y taps when there
  # are several
  loops = len(re.findall(r"^part\.head(\.\d+)?:", exe.llvm_ir, re.M))
  assert loops == 1 + mixed, loops


@st.composite
def reshapes(draw):
  """A source shape and a target shape of the same size, factors moved between dimensions and
  size-1 dimensions sprinkled on both sides."""
  factors = [draw(st.sampled_from([2, 3, 4, 5])) for _ in range(draw(st.integers(0, 4)))]

  def split(fs):
    dims, k = [], 0
    while k < len(fs):
      n = draw(st.integers(1, len(fs) - k))
      dims.append(math.prod(fs[k:k + n]))
      k += n
    for _ in range(draw(st.integers(0, 2))):
      dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(dims)
  return split(factors), split(factors)


@settings(max_examples=60, deadline=None)
@given(shapes=reshapes())
def test_reshape_groups_partition_both_shapes(shapes):
  src, dst = shapes
  groups = hlo.reshape_groups(src, dst)
  assert [g[0] for g in groups] == [(a, b) for (a, b), _ in groups]
  si = [i for (a, b), _ in groups for i in range(a, b)]
  di = [j for _, (c, d) in groups for j in range(c, d)]
  assert si == list(range(len(src))) and di == list(range(len(dst)))
  for (a, b), (c, d) in groups:
    assert math.prod(src[a:b]) == math.prod(dst[c:d])


@settings(max_examples=40, deadline=None)
@given(shapes=reshapes(), seed=st.integers(0, 2 ** 31))
def test_fused_reshapes_match_numpy(shapes, seed):
  """A reshape inside a loop kernel (between elementwise ops, so the emitter maps its index)."""
  src, dst = shapes
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(src).astype(np.float32)
  y = rng.standard_normal(dst).astype(np.float32)
  f = ourjax.jit(lambda x, y: jnp.reshape(x * 3.0 - 1.0, dst) * y + 0.5)
  want = (x.astype(np.float64) * 3.0 - 1.0).reshape(dst) * y + 0.5
  np.testing.assert_allclose(np.asarray(f(x, y)), want, rtol=1e-6, atol=1e-6)
