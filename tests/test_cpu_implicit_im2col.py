"""Convolutions on the CPU GEMM without a patch matrix (llvm/gemm_im2col.py): the GEMM packs its
A panels straight from the convolution's input.  Hypothesis-drawn convolutions (1 to 3 spatial
dimensions, strides, rhs dilation, padding including negative, channel counts around the vector
width, f32 and f64, several dimension numbers) against NumPy float64, bit-identical to the
written patch matrix (``OURJAX_CPU_IMPLICIT_GEMM=0``); elementwise consumers run on the GEMM's
finished blocks (``OURJAX_CPU_GEMM_EPILOGUE=0``: a pass of their own); the same on AVX2 code
(``OURJAX_CPU=haswell``) and baseline SSE2 code in child processes."""
from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)




def _padded(x, padding):
  """``x`` (NHWC-like, float64) zero-padded on its spatial dimensions, negative padding
  cropping, as a convolution's ``padding`` does."""
  for d, (lo, hi) in enumerate(padding):
    widths = [(0, 0)] * x.ndim
    widths[1 + d] = (max(lo, 0), max(hi, 0))
    x = np.pad(x, widths)
    sl = [slice(None)] * x.ndim
    sl[1 + d] = slice(max(-lo, 0), x.shape[1 + d] - max(-hi, 0))
    x = x[tuple(sl)]
  return x


def _steps(f, *args):
  exe = f.lower(*args).compile()._executable.compiled
  return [s.split()[0] for s in exe.meta["steps"]]


def _reference(x, w, strides, padding, rd):
  """NumPy float64 convolution, NHWC x HWIO -> NHWC (any number of spatial dims), and the
  same of the magnitudes (a bound for the rounding of the sums)."""
  nd = x.ndim - 2
  x64, w64 = x.astype(np.float64), w.astype(np.float64)
  ks = w.shape[:nd]
  # pad (negative padding crops)
  xp, xa = _padded(x64, padding), _padded(np.abs(x64), padding)
  outs = [(xp.shape[1 + d] - (ks[d] - 1) * rd[d] - 1) // strides[d] + 1 for d in range(nd)]
  y = np.zeros((x.shape[0], *outs, w.shape[-1]))
  ya = np.zeros_like(y)
  for k in itertools.product(*(range(s) for s in ks)):
    sl = (slice(None),) + tuple(slice(k[d] * rd[d], k[d] * rd[d] + (outs[d] - 1) * strides[d] + 1,
                                      strides[d]) for d in range(nd)) + (slice(None),)
    y += np.tensordot(xp[sl], w64[k], axes=([x.ndim - 1], [0]))
    ya += np.tensordot(xa[sl], np.abs(w64[k]), axes=([x.ndim - 1], [0]))
  return y, ya


_SPECS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}


@st.composite
def convolutions(draw):
  nd = draw(st.sampled_from([2, 2, 2, 1, 3]))
  n = draw(st.integers(1, 3))
  c = draw(st.sampled_from([1, 3, 5, 8, 16, 17, 32, 40, 64]))
  o = draw(st.sampled_from([8, 9, 16, 24, 33, 130]))
  lim = {1: 12, 2: 9, 3: 4}[nd]
  spatial = [draw(st.integers(1, lim)) for _ in range(nd)]
  kernel = [draw(st.integers(1, 3)) for _ in range(nd)]
  strides = [draw(st.integers(1, 3)) for _ in range(nd)]
  rd = [draw(st.integers(1, 2)) for _ in range(nd)]
  padding = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(nd)]
  for i in range(nd):   # at least one output position
    size = spatial[i] + padding[i][0] + padding[i][1]
    need = (kernel[i] - 1) * rd[i] + 1
    if size < need:
      padding[i] = (padding[i][0] + need - size, padding[i][1])
  dtype = draw(st.sampled_from([np.float32, np.float32, np.float64]))
  return n, c, o, spatial, kernel, strides, rd, padding, dtype


def _expect_implicit(n, c, o, spatial, kernel, strides, rd, padding, dtype) -> bool:
  """Whether conv_to_dot makes a patch matrix and the GEMM takes the dot."""
  nd = len(spatial)
  outs = [(spatial[d] + sum(padding[d]) - (kernel[d] - 1) * rd[d] - 1) // strides[d] + 1
          for d in range(nd)]
  M, K, taps = n * math.prod(outs), c * math.prod(kernel), math.prod(kernel)
  if taps == 1 and all(p == (0, 0) for p in padding) and all(s == 1 for s in strides):
    return False     # (a 1x1 convolution without strides or padding: a plain dot of the input)
  if K == 1:
    return False     # (one channel through a 1x1 kernel: a product of broadcasts, not a dot)
  # (patches per kernel position, or per output position where there are fewer of those;
  # a single window is no concatenation and is written)
  if taps > math.prod(outs) and (math.prod(outs) == 1 or c < 4):
    return False   # (per-window patches of fewer than 4 channels are written: _MIN_W_RUN)
  return min(taps, math.prod(outs)) <= 64 and M * o * K >= 4096 and o >= 8


def check_convolution(case, seed, bitwise=True):
  """The convolution ``case`` (see ``convolutions``) jitted against NumPy float64; it packs
  its patches in the GEMM when ``_expect_implicit``, and then (``bitwise``) gives the bits of
  the written patch matrix."""
  from ourjax.config import enable_x64
  with enable_x64(True):
    _check_convolution(case, seed, bitwise)


def _check_convolution(case, seed, bitwise):
  n, c, o, spatial, kernel, strides, rd, padding, dtype = case
  nd = len(spatial)
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, *spatial, c)).astype(dtype)
  w = rng.standard_normal((*kernel, c, o)).astype(dtype)

  def conv(x, w):
    return lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=rd,
                                    dimension_numbers=_SPECS[nd])
  f = ourjax.jit(conv)
  got = np.asarray(f(x, w))
  want, mag = _reference(x, w, strides, padding, rd)
  assert got.shape == want.shape and got.dtype == dtype
  eps = np.finfo(dtype).eps
  K = c * math.prod(kernel)
  assert np.all(np.abs(got - want) <= 2 * K * eps * mag + 1e-30), np.abs(got - want).max()
  implicit = "Im2colDotKernel" in _steps(f, x, w)
  assert implicit == _expect_implicit(*case)
  if implicit and bitwise:
    # the same GEMM blocks, sums in the same order: the written patch matrix's bits
    old = os.environ.get("OURJAX_CPU_IMPLICIT_GEMM")
    os.environ["OURJAX_CPU_IMPLICIT_GEMM"] = "0"
    try:
      g = ourjax.jit(conv)
      explicit = np.asarray(g(x, w))
      assert "Im2colDotKernel" not in _steps(g, x, w)
    finally:
      if old is None:
        del os.environ["OURJAX_CPU_IMPLICIT_GEMM"]
      else:
        os.environ["OURJAX_CPU_IMPLICIT_GEMM"] = old
    if got.size // o > 8:   # (up to 8 rows a written matrix takes the GEMM's axpy kernels)
      np.testing.assert_array_equal(got, explicit)
  if implicit and bitwise and c >= 32:
    # patch rows read in place by the GEMM's tiles (gemm_im2col.direct_a): the packed
    # panels' bits, and no more temporaries
    with _env("OURJAX_CPU_CONV_DIRECT_A", "0"):
      g = ourjax.jit(conv)
      packed = np.asarray(g(x, w))
      packed_temps = g.lower(x, w).compile().memory_analysis().temp_size_in_bytes
    np.testing.assert_array_equal(got, packed)
    assert f.lower(x, w).compile().memory_analysis().temp_size_in_bytes <= packed_temps


class _env:
  """An environment variable set for a ``with`` block."""

  def __init__(self, name, value):
    self.name, self.value = name, value

  def __enter__(self):
    self.old = os.environ.get(self.name)
    os.environ[self.name] = self.value

  def __exit__(self, *exc):
    if self.old is None:
      del os.environ[self.name]
    else:
      os.environ[self.name] = self.old


@settings(max_examples=30, deadline=None)
@given(case=convolutions(), seed=st.integers(0, 2 ** 31))
def test_implicit_im2col_matches_numpy_and_the_written_patches(case, seed):
  check_convolution(case, seed)


def test_conv_bn_relu_layer_and_other_layouts():
  """A layer as the model suite's (3x3 SAME conv, per-channel scale and shift, relu; then a
  strided 1x1 projection) and an NCHW/OIHW convolution, whose channels-last input a kernel
  writes first: each dot packs its patches from the input."""
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 10, 9, 32)).astype(np.float32)
  w = (rng.standard_normal((3, 3, 32, 24)) * 0.2).astype(np.float32)
  wp = (rng.standard_normal((1, 1, 24, 16)) * 0.2).astype(np.float32)
  s = rng.uniform(0.5, 1.5, 24).astype(np.float32)
  t = rng.standard_normal(24).astype(np.float32)

  def layer(x, w, wp, s, t):
    h = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_SPECS[2])
    h = jnp.maximum(h * s + t, 0.0)
    return lax.conv_general_dilated(h, wp, (2, 2), "SAME", dimension_numbers=_SPECS[2])
  f = ourjax.jit(layer)
  got = np.asarray(f(x, w, wp, s, t))
  h, _ = _reference(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1))
  h = np.maximum(h * s + t, 0.0)
  want, _ = _reference(h, wp.astype(np.float64), (2, 2), [(0, 0), (0, 0)], (1, 1))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  steps = _steps(f, x, w, wp, s, t)
  # the scale, shift and relu run on the GEMM's finished blocks: no loop kernel of their own
  assert steps.count("Im2colDotKernel") == 2 and "LoopKernel" not in steps, steps

  xn = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
  wn = np.ascontiguousarray(w.transpose(3, 2, 0, 1))
  g = ourjax.jit(lambda x, w: lax.conv_general_dilated(x, w, (2, 1), [(1, 0), (2, 1)],
                                                       rhs_dilation=(1, 2)))
  got = np.asarray(g(xn, wn))
  want, mag = _reference(x, w, (2, 1), [(1, 0), (2, 1)], (1, 2))
  assert np.all(np.abs(got - want.transpose(0, 3, 1, 2)) <=
                2 * 288 * np.finfo(np.float32).eps * mag.transpose(0, 3, 1, 2))
  assert "Im2colDotKernel" in _steps(g, xn, wn)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_patch_rows_read_in_place_leave_no_scratch(threads):
  """A convolution of 64 channels (3x3, SAME, then scale, shift and relu on the GEMM's
  blocks, as the model suite's layer) whose GEMM tiles read the patch rows in the input
  (``gemm_im2col.direct_a``): no panel of A is packed, so the program has no temporaries at
  all (its weights are read in place too); packed panels (``OURJAX_CPU_CONV_DIRECT_A=0``),
  one at a time, live on the GEMM call's stack (``gemm.A_PANEL_STACK_BYTES``): none either
  (they took one area per thread of the arena before); the same bits, the reference's
  numbers."""
  from ourjax.backends.cpu import backend as cpu
  from ourjax.backends.llvm import dots, gemm, gemm_im2col
  rng = np.random.default_rng(21)
  x = rng.standard_normal((2, 12, 14, 64)).astype(np.float32)
  w = (rng.standard_normal((3, 3, 64, 64)) * 0.1).astype(np.float32)
  s = rng.uniform(0.5, 1.5, 64).astype(np.float32)
  t = rng.standard_normal(64).astype(np.float32)

  def layer(x, w, s, t):
    h = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_SPECS[2])
    return jnp.maximum(h * s + t, 0.0)
  old = cpu.num_threads()
  out, temps = {}, {}
  try:
    cpu.set_num_threads(threads)
    for direct in ("1", "0"):
      with _env("OURJAX_CPU_CONV_DIRECT_A", direct):
        c = ourjax.jit(layer).lower(x, w, s, t).compile()
        assert _steps_of(c) == ["Im2colDotKernel"]
        temps[direct] = c.memory_analysis().temp_size_in_bytes
        out[direct] = np.asarray(c(x, w, s, t))
        syms = c._executable.compiled.meta["symbols"]
        assert any("im2col_F" in x for x in syms) == (direct == "0"), syms
  finally:
    cpu.set_num_threads(old)
  assert temps["1"] == 0 and temps["0"] == 0
  spec = dots.DotSpec(_the_dot(c))
  bl = dots.gemm_blocking(spec, threads, im2col=True)
  assert gemm.pack_buffer_bytes("f32", spec.M, spec.N, spec.K, dots.dot_pieces(spec, threads),
                                bl, trans_b=False, im2col=True) == 0
  kc = (bl or gemm.default_blocking("f32")).kc
  assert (bl or gemm.default_blocking("f32")).mr * min(kc, spec.K) * 4 <= \
      gemm.A_PANEL_STACK_BYTES
  assert gemm.pack_buffer_bytes("f32", spec.M, spec.N, spec.K,
                                dots.dot_pieces(spec, threads), bl, trans_b=False,
                                im2col=True, direct_a=True) == 0
  np.testing.assert_array_equal(out["1"], out["0"])
  want, mag = _reference(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1))
  want = np.maximum(want * s + t, 0.0)
  assert np.all(np.abs(out["1"] - want) <= 2 * 576 * np.finfo(np.float32).eps * mag * 1.5 +
                1e-6)
  assert gemm_im2col.DIRECT_MIN_CHANNELS <= 64


def _steps_of(compiled):
  return [s.split()[0] for s in compiled._executable.compiled.meta["steps"]]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2 ** 31), o=st.sampled_from([16, 24, 40]),
       stride=st.integers(1, 2), residual=st.booleans(), relu=st.booleans())
def test_block_epilogues_match_a_separate_pass(seed, o, stride, residual, relu):
  """A convolution's elementwise consumer (per-channel scale and shift, optionally a residual
  of the output's shape and a relu; its last dimension the output channels) run by the GEMM
  on each finished block gives the bits of the same consumer as a pass of its own
  (``OURJAX_CPU_GEMM_EPILOGUE=0``) and NumPy's values."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((2, 11, 9, 16)).astype(np.float32)
  w = (rng.standard_normal((3, 3, 16, o)) * 0.2).astype(np.float32)
  s = rng.uniform(0.5, 1.5, o).astype(np.float32)
  t = rng.standard_normal(o).astype(np.float32)
  ho, wo = -(-11 // stride), -(-9 // stride)
  r = rng.standard_normal((2, ho, wo, o)).astype(np.float32)

  def layer(x, w, s, t, r):
    y = lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=_SPECS[2])
    y = y * s + t
    if residual:
      y = y + r
    return jnp.maximum(y, 0.0) if relu else y
  args = (x, w, s, t, r)
  f = ourjax.jit(layer)
  got = np.asarray(f(*args))
  assert "LoopKernel" not in _steps(f, *args)
  pad = [max(0, (m - 1) * stride + 3 - n) for m, n in ((ho, 11), (wo, 9))]
  want, mag = _reference(x, w, (stride, stride), [(p // 2, p - p // 2) for p in pad], (1, 1))
  want = want * s + t + (r if residual else 0)
  want = np.maximum(want, 0) if relu else want
  assert np.all(np.abs(got - want) <= 1e-5 * (mag * s + np.abs(t) + 1)), np.abs(got - want).max()
  old = os.environ.get("OURJAX_CPU_GEMM_EPILOGUE")
  os.environ["OURJAX_CPU_GEMM_EPILOGUE"] = "0"
  try:
    g = ourjax.jit(layer)
    apart = np.asarray(g(*args))
    assert "LoopKernel" in _steps(g, *args)
  finally:
    if old is None:
      del os.environ["OURJAX_CPU_GEMM_EPILOGUE"]
    else:
      os.environ["OURJAX_CPU_GEMM_EPILOGUE"] = old
  np.testing.assert_array_equal(got, apart)


@settings(max_examples=15, deadline=None)
@given(case=convolutions(), seed=st.integers(0, 2 ** 31))
def test_weight_gradients_match_numpy_and_the_written_patches(case, seed):
  """Weight gradients (a convolution of the input, channels and batch swapped, by the output
  gradient: patches of rows (input channel, kernel position), columns (output position, batch
  element), conv_to_dot's "W" layout) packed by the GEMM from the transposed input: against
  NumPy float64 and bitwise against the written patch matrix."""
  from ourjax.config import enable_x64
  n, c, o, spatial, kernel, strides, rd, padding, dtype = case
  nd = len(spatial)
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, *spatial, c)).astype(dtype)
  w = rng.standard_normal((*kernel, c, o)).astype(dtype)
  y, _ = _reference(x, w, strides, padding, rd)
  g = rng.standard_normal(y.shape).astype(dtype)

  def wgrad(w, x, g):
    return ourjax.grad(lambda w: jnp.sum(lax.conv_general_dilated(
        x, w, strides, padding, rhs_dilation=rd, dimension_numbers=_SPECS[nd]) * g))(w)
  # NumPy: dw[k] = sum over batch and output positions of x at the tap's window times g
  x64 = x.astype(np.float64)
  xp, xa = _padded(x64, padding), _padded(np.abs(x64), padding)
  outs = g.shape[1:-1]
  want, mag = np.zeros(w.shape), np.zeros(w.shape)
  axes = list(range(nd + 1))
  for k in itertools.product(*(range(s) for s in kernel)):
    sl = (slice(None),) + tuple(slice(k[d] * rd[d], k[d] * rd[d] + (outs[d] - 1) * strides[d] + 1,
                                      strides[d]) for d in range(nd)) + (slice(None),)
    want[k] = np.tensordot(xp[sl], g.astype(np.float64), axes=(axes, axes))
    mag[k] = np.tensordot(xa[sl], np.abs(g.astype(np.float64)), axes=(axes, axes))
  with enable_x64(True):
    f = ourjax.jit(wgrad)
    got = np.asarray(f(w, x, g))
    K = n * math.prod(outs)
    eps = np.finfo(dtype).eps
    assert np.all(np.abs(got - want) <= 2 * K * eps * mag + 1e-30), np.abs(got - want).max()
    if "Im2colDotKernel" not in _steps(f, w, x, g):
      return
    old = os.environ.get("OURJAX_CPU_IMPLICIT_GEMM")
    os.environ["OURJAX_CPU_IMPLICIT_GEMM"] = "0"
    try:
      explicit = np.asarray(ourjax.jit(wgrad)(w, x, g))
    finally:
      if old is None:
        del os.environ["OURJAX_CPU_IMPLICIT_GEMM"]
      else:
        os.environ["OURJAX_CPU_IMPLICIT_GEMM"] = old
  if c * math.prod(kernel) > 8:
    np.testing.assert_array_equal(got, explicit)


def test_a_weight_gradient_packs_from_the_transposed_input():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((4, 12, 12, 16)).astype(np.float32)
  w = rng.standard_normal((3, 3, 16, 24)).astype(np.float32)
  g = rng.standard_normal((4, 12, 12, 24)).astype(np.float32)
  f = ourjax.jit(lambda w, x, g: ourjax.grad(lambda w: jnp.sum(lax.conv_general_dilated(
      x, w, (1, 1), "SAME", dimension_numbers=_SPECS[2]) * g))(w))
  steps = _steps(f, w, x, g)
  assert "Im2colDotKernel" in steps and "ConcatKernel" not in steps, steps


def test_gradients_of_a_convolution_through_jit(x64):
  """The forward convolution inside value_and_grad (its patches packed by the GEMM; the
  gradients' convolutions as before) against finite differences of the float64 reference."""
  rng = np.random.default_rng(5)
  x = rng.standard_normal((2, 6, 6, 8))
  w = rng.standard_normal((3, 3, 8, 8)) * 0.3

  def loss(w, x):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_SPECS[2])
    return jnp.sum(jnp.tanh(y))
  f = ourjax.jit(ourjax.value_and_grad(loss))
  val, grad = f(w, x)
  assert "Im2colDotKernel" in _steps(f, w, x)
  want, _ = _reference(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1))
  np.testing.assert_allclose(float(val), np.sum(np.tanh(want)), rtol=1e-10)
  d = rng.standard_normal(w.shape)
  h = 1e-6
  fd = (np.sum(np.tanh(_reference(x, w + h * d, (1, 1), [(1, 1)] * 2, (1, 1))[0])) -
        np.sum(np.tanh(_reference(x, w - h * d, (1, 1), [(1, 1)] * 2, (1, 1))[0]))) / (2 * h)
  np.testing.assert_allclose(np.sum(np.asarray(grad) * d), fd, rtol=1e-6)


_CHILD = """
import sys
import numpy as np
from ourjax.backends.cpu import jit
from ourjax.config import config
config.update("jax_platforms", "cpu")
sys.path.insert(0, {tests!r})
import test_cpu_implicit_im2col as T
print(jit.cpu_name(), jit.vector_isa())
rng = np.random.default_rng(11)
n = 0
for dtype in (np.float32, np.float64):
  for c, o, spatial, kernel, strides, rd, padding in [
      (16, 16, [7, 9], [3, 3], [1, 1], [1, 1], [(1, 1), (1, 1)]),
      (8, 24, [9, 8], [3, 3], [2, 2], [1, 1], [(1, 1), (0, 1)]),
      (3, 9, [11, 10], [3, 3], [1, 2], [2, 1], [(2, 2), (-1, 1)]),
      (17, 8, [6, 7], [2, 3], [1, 1], [1, 2], [(0, 1), (2, 2)]),
      (40, 33, [13], [3], [2], [1], [(1, 1)]),
      (48, 40, [7, 9], [3, 3], [1, 1], [1, 1], [(1, 1), (1, 1)]),
      (64, 24, [9, 6], [3, 2], [2, 1], [1, 2], [(2, 0), (1, 2)]),
      (5, 16, [4, 3, 5], [2, 2, 2], [1, 1, 2], [1, 1, 1], [(1, 0), (0, 1), (1, 1)])]:
    T.check_convolution((2, c, o, spatial, kernel, strides, rd, padding, dtype),
                        int(rng.integers(1 << 30)))
    n += 1
print("ok", n)
"""


@pytest.mark.parametrize("cpu,isa,flag", [("haswell", "avx2", "avx2"), ("x86-64", "sse", None)])
def test_implicit_im2col_on_narrower_targets(cpu, isa, flag):
  """The cases above on AVX2 code (8 f32 lanes, 6-row tiles) and baseline SSE2 code (4 lanes,
  no FMA), in a child process whose code is generated for ``cpu`` (``OURJAX_CPU``)."""
  from cpu_targets import skip_unless_host_runs
  skip_unless_host_runs(flag)
  env = dict(os.environ, OURJAX_CPU=cpu, OURJAX_CACHE_DIR="off", OURJAX_PLATFORMS="cpu")
  code = _CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(
                           __file__))))
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert out.stdout.split() == [cpu, isa, "ok", "16"]


_CHILD_LIBRARIES = r"""
import numpy as np
import ourjax
from ourjax import lax
from ourjax.backends.llvm import gemm_library as L
spec = ("NHWC", "HWIO", "NHWC")
rng = np.random.default_rng(0)
x = rng.standard_normal((4, 9, 9, 8)).astype(np.float32)
w = (rng.standard_normal((3, 3, 8, 16)) * 0.2).astype(np.float32)
conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=spec)
y = np.asarray(ourjax.jit(conv)(x, w))
print(" ".join(sorted(L._shared)))
ref = np.asarray(ourjax.jit(conv, backend="reference")(x, w))
np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
loss = lambda x, w: (conv(x, w) ** 2).sum()
gx, gw = ourjax.jit(ourjax.grad(loss, argnums=(0, 1)))(x, w)
print(" ".join(sorted(L._shared)))
rx, rw = ourjax.jit(ourjax.grad(loss, argnums=(0, 1)), backend="reference")(x, w)
np.testing.assert_allclose(np.asarray(gx), np.asarray(rx), rtol=1e-3, atol=1e-3)
np.testing.assert_allclose(np.asarray(gw), np.asarray(rw), rtol=1e-3, atol=1e-3)
print("ok")
"""


def test_only_the_packers_a_program_needs_are_built():
  """A fresh process builds the shared GEMM and only the packers of the patch layouts its
  programs use (gemm_library.py): a forward convolution the "F" packer alone; its gradient
  (an input gradient, "F", and a weight gradient, "W") adds the "W" packer; the results match
  the reference backend's."""
  env = dict(os.environ, OURJAX_CACHE_DIR="off", OURJAX_PLATFORMS="cpu")
  env.pop("OURJAX_CPU_IMPLICIT_GEMM", None)
  out = subprocess.run([sys.executable, "-c", _CHILD_LIBRARIES], env=env, capture_output=True,
                       text=True, timeout=600, cwd=os.path.dirname(os.path.dirname(
                           os.path.abspath(__file__))))
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert out.stdout.splitlines() == ["f32 f32_im2col_F", "f32 f32_im2col_F f32_im2col_W", "ok"]


def test_block_epilogues_alike_are_emitted_once():
  """Convolutions of one output shape with the same consumer (3x3 convolutions, plain and
  dilated, each with scale, shift and relu run as its GEMM's block epilogue; enough layers for
  several LLVM modules) share one block epilogue, named by its IR and defined in one module of
  the program (the others declare it); the result matches NumPy's."""
  import re
  rng = np.random.default_rng(5)
  c, layers = 16, 20
  x = rng.standard_normal((2, 12, 12, c)).astype(np.float32)
  ws = [(rng.standard_normal((3, 3, c, c)) * 0.15).astype(np.float32) for _ in range(layers)]
  ss = [rng.uniform(0.5, 1.5, c).astype(np.float32) for _ in range(layers)]
  ts = [(rng.standard_normal(c) * 0.1).astype(np.float32) for _ in range(layers)]

  def net(x, ws, ss, ts):
    for k, (w, s, t) in enumerate(zip(ws, ss, ts)):
      d = 1 + k % 2
      h = lax.conv_general_dilated(x, w, (1, 1), [(d, d), (d, d)], rhs_dilation=(d, d),
                                   dimension_numbers=_SPECS[2])
      x = jnp.maximum(h * s + t, 0.0)
    return x
  f = ourjax.jit(net)
  got = np.asarray(f(x, ws, ss, ts))
  want = x.astype(np.float64)
  for k, (w, s, t) in enumerate(zip(ws, ss, ts)):
    d = 1 + k % 2
    h, _ = _reference(want, w, (1, 1), [(d, d), (d, d)], (d, d))
    want = np.maximum(h * s + t, 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
  ex = f.lower(x, ws, ss, ts).compile()._executable.compiled
  # (each dot ran its consumer as its block epilogue: no loop kernel of its own)
  assert all(s.startswith("Im2colDotKernel") for s in ex.meta["steps"]), ex.meta["steps"]
  modules = ex.llvm_ir.split("; ---- next module ----")
  defined = re.findall(r'^define .*@"(im2col\.epilogue\.\w+)"\(', ex.llvm_ir, re.M)
  assert defined and len(defined) == len(set(defined)), defined     # (each once)
  declared = re.findall(r'^declare .*@"(im2col\.epilogue\.\w+)"\(', ex.llvm_ir, re.M)
  assert set(declared) <= set(defined), (declared, defined)
  if len(modules) >= 3:     # (an entry and two kernel modules: kernels of both call one)
    assert declared, [re.findall(r'^define .*@"(\S+)"\(', m, re.M) for m in modules]


def test_block_epilogues_of_other_shapes_are_shared():
  """Convolutions of different shapes (channels 8 -> 16 -> 32, a stride-2 one halving the
  image) with the same consumer (scale, shift, relu) share one block epilogue: its code takes
  the row length from its context and computes no position it does not use, so nothing in it
  names a shape; the shapes' kernels that call the GEMM are left unoptimised (``optnone``:
  they only fill the descriptor and call); the result matches NumPy's."""
  import re
  rng = np.random.default_rng(7)
  chans, strides = (8, 16, 16, 32), (1, 1, 2)
  x = rng.standard_normal((2, 12, 12, chans[0])).astype(np.float32)
  ws = [(rng.standard_normal((3, 3, a, b)) * 0.2).astype(np.float32)
        for a, b in zip(chans, chans[1:])]
  ss = [rng.uniform(0.5, 1.5, b).astype(np.float32) for b in chans[1:]]
  ts = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in chans[1:]]

  def net(x, ws, ss, ts):
    for w, s, t, st_ in zip(ws, ss, ts, strides):
      h = lax.conv_general_dilated(x, w, (st_, st_), [(1, 1), (1, 1)],
                                   dimension_numbers=_SPECS[2])
      x = jnp.maximum(h * s + t, 0.0)
    return x
  f = ourjax.jit(net)
  got = np.asarray(f(x, ws, ss, ts))
  want = x.astype(np.float64)
  for w, s, t, st_ in zip(ws, ss, ts, strides):
    h, _ = _reference(want, w, (st_, st_), [(1, 1), (1, 1)], (1, 1))
    want = np.maximum(h * s + t, 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
  ex = f.lower(x, ws, ss, ts).compile()._executable.compiled
  assert all(s.startswith("Im2colDotKernel") for s in ex.meta["steps"]), ex.meta["steps"]
  defined = set(re.findall(r'^define .*@"(im2col\.epilogue\.\w+)"\(', ex.llvm_ir, re.M))
  assert len(defined) == 1, defined
  callers = re.findall(r'^define [^\n]*@"(k\w+)"\([^\n]*\boptnone\b', ex.llvm_ir, re.M)
  assert len(callers) == len(ws), ex.llvm_ir[:3000]


@pytest.mark.parametrize("cout", [64, 40])
def test_a_tall_convolution_reads_its_weights_in_place(monkeypatch, cout):
  """A convolution whose pieces have more rows than the GEMM's own ``direct_b_rows`` reads its
  HWIO weights in place (``dots._conv_blocking``), packing one ``mr``-row panel of A at a
  time: its scratch is smaller than with B's column block packed in each thread's area, and
  its bits are the same (40 output channels: a partial last column panel, packed)."""
  from ourjax.backends.cpu import backend as cpu
  from ourjax.backends.llvm import dots, gemm
  from ourjax.config import config
  # (no disk cache: its key does not hold the monkeypatched blocking)
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir="off"))
  rng = np.random.default_rng(11)
  x = rng.standard_normal((2, 30, 30, 32)).astype(np.float32)
  w = (rng.standard_normal((3, 3, 32, cout)) * 0.2).astype(np.float32)

  def conv(x, w):   # (the relu runs on the GEMM's blocks: it writes the output itself)
    return jnp.maximum(
        lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_SPECS[2]), 0.0)
  own = dots._conv_blocking
  old = cpu.num_threads()
  out, temps, direct = {}, {}, {}
  try:
    cpu.set_num_threads(3)
    for in_place in (True, False):
      monkeypatch.setattr(dots, "_conv_blocking", own if in_place else lambda s, t: None)
      c = ourjax.jit(conv).lower(x, w).compile()
      steps = c._executable.compiled.meta["steps"]
      assert [s.split()[0] for s in steps] == ["Im2colDotKernel"], steps
      temps[in_place] = c.memory_analysis().temp_size_in_bytes
      bl = dots.gemm_blocking(dots.DotSpec(_the_dot(c)), 3, im2col=True)
      direct[in_place] = (bl or gemm.default_blocking("f32")).direct_b_rows
      out[in_place] = np.asarray(c(x, w))
  finally:
    cpu.set_num_threads(old)
  assert direct[True] > direct[False]
  assert temps[True] < temps[False]
  np.testing.assert_array_equal(out[True], out[False])
  want, mag = _reference(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1))
  assert np.all(np.abs(out[True] - np.maximum(want, 0.0)) <=
                2 * 288 * np.finfo(np.float32).eps * mag)


def _the_dot(compiled):
  """The one dot instruction of a compiled module (in its entry or a fusion)."""
  dots_ = [i for comp in compiled._executable.module.computations for i in comp.instructions
           if i.opcode == "dot"]
  assert len(dots_) == 1
  return dots_[0]


_CHILD_DIRECT = r"""
import numpy as np
import ourjax
from ourjax import lax
from ourjax.backends.llvm import gemm_library as L
rng = np.random.default_rng(0)
a, b = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((64, 48)).astype(
    np.float32)
np.testing.assert_allclose(np.asarray(ourjax.jit(lambda a, b: a @ b)(a, b)),
                           a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
print(" ".join(sorted(L._shared)))
spec = ("NHWC", "HWIO", "NHWC")
x = rng.standard_normal((2, 7, 9, 32)).astype(np.float32)
w = (rng.standard_normal((3, 3, 32, 40)) * 0.2).astype(np.float32)
conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=spec)
y = np.asarray(ourjax.jit(conv)(x, w))
print(" ".join(sorted(L._shared)))
ref = np.asarray(ourjax.jit(conv, backend="reference")(x, w))
np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_the_direct_micro_kernel_is_a_library_of_its_own():
  """A fresh process whose first program has a dot builds the shared GEMM alone (no direct
  micro-kernel in it); a convolution whose patch rows are read in place then builds the
  direct micro-kernel's library ("f32_im2col_D") and no packer, and matches the reference
  backend's result (the direct tiles, on a narrow last column panel too: 40 channels)."""
  env = dict(os.environ, OURJAX_CACHE_DIR="off", OURJAX_PLATFORMS="cpu")
  for k in ("OURJAX_CPU_IMPLICIT_GEMM", "OURJAX_CPU_CONV_DIRECT_A"):
    env.pop(k, None)
  out = subprocess.run([sys.executable, "-c", _CHILD_DIRECT], env=env, capture_output=True,
                       text=True, timeout=600, cwd=os.path.dirname(os.path.dirname(
                           os.path.abspath(__file__))))
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert out.stdout.splitlines() == ["f32", "f32 f32_im2col_D", "ok"]


def test_the_shared_gemm_holds_no_direct_micro_kernel():
  """The shared GEMM's IR calls the direct micro-kernel only through the descriptor: it
  defines no tile that reads patch rows (those are ``emit_direct_library``'s), which defines
  the exported kernel and calls its wide and (on targets with narrow kernels) narrow tiles."""
  from ourjax.backends.cpu.jit import new_module
  from ourjax.backends.llvm import gemm, gemm_im2col
  mod = new_module("g")
  gemm.emit_gemm(mod, "ourjax_gemm_f32", "f32", im2col=True)
  text = str(mod)
  assert "im2col.direct" not in text and "ukernel_c" not in text
  lib = new_module("d")
  gemm_im2col.emit_direct_library(lib, "f32")
  ltext = str(lib)
  assert re.search(r'^define void @"ourjax_gemm_f32_im2col_D"\(', ltext, re.M)
  assert 'call void @"ourjax_gemm_f32_im2col_D.wide"(' in ltext
  with pytest.raises(ValueError, match="im2col only"):
    gemm.emit_gemm(new_module("e"), "g", "f32", im2col=True, accumulate=True)
