"""Slicing and structural primitives: rev, pad, concatenate, slice, dynamic_slice,
dynamic_update_slice, gather and the scatters.

Each primitive is compared with a plain Python/NumPy reference written here (loops over
positions, independent of ``backends/reference_ops.py``); derivatives with central finite
differences in float64 and with the identity <J v, u> = <v, J^T u>; vmap with a Python loop over
the batch.  Hypothesis draws shapes, indices (out of bounds and repeated ones included),
padding configurations, dimension numbers and in_axes."""
import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
from ourjax import core, lax
from ourjax.lax import GatherDimensionNumbers as GDN, GatherScatterMode as Mode
from ourjax.lax import ScatterDimensionNumbers as SDN

DTYPES = [np.float32, np.int32, np.bool_, np.float16, ml_dtypes.bfloat16, np.uint8, np.int8]


def rand(rng, shape, dtype=np.float32):
  dtype = np.dtype(dtype)
  shape = tuple(shape)
  if dtype == np.bool_:
    return np.asarray(rng.random(shape) < 0.5)
  if dtype.kind == "u":
    return rng.integers(0, 10, shape).astype(dtype)
  if dtype.kind == "i":
    return rng.integers(-6, 7, shape).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def npy(x):
  return np.asarray(x)


def assert_same(got, expected):
  """Same dtype, shape and values (NaNs equal; ml_dtypes types compared through float32)."""
  got = np.asarray(got)
  assert got.dtype == expected.dtype and got.shape == expected.shape
  if expected.dtype.kind == "V":
    got, expected = got.astype(np.float32), expected.astype(np.float32)
  np.testing.assert_array_equal(got, expected)


def traced(f, *args):
  """Run f with every argument traced (so indices are not static), through its jaxpr."""
  closed = ourjax.make_jaxpr(f)(*args)
  return core.jaxpr_as_fun(closed)(*args)[0]


seeds = st.integers(0, 2 ** 32 - 1)


# ------------------------------------------------------------------------------------------------
# Plain references


def ref_pad(x, pv, config):
  out_shape = [lo + hi + n + max(n - 1, 0) * i for (lo, hi, i), n in zip(config, x.shape)]
  out = np.full(out_shape, pv, x.dtype)
  for idx in np.ndindex(*x.shape):
    pos = tuple(lo + k * (i + 1) for k, (lo, _, i) in zip(idx, config))
    if all(0 <= p < s for p, s in zip(pos, out_shape)):
      out[pos] = x[idx]
  return out


def ref_dynamic_start(i, n, size):
  i = int(i)
  i = i + n if i < 0 else i
  return min(max(i, 0), n - size)


def ref_gather(x, idx, dn, slice_sizes, mode, fill=None):
  nb = idx.ndim - 1
  kept = [d for d in range(x.ndim)
          if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
  out_rank = len(dn.offset_dims) + nb
  batch_pos = [d for d in range(out_rank) if d not in dn.offset_dims]
  out_shape = [0] * out_rank
  for p, n in zip(batch_pos, idx.shape[:-1]):
    out_shape[p] = n
  for p, d in zip(dn.offset_dims, kept):
    out_shape[p] = slice_sizes[d]
  out = np.zeros(out_shape, x.dtype)
  for b in np.ndindex(*idx.shape[:-1]):
    start = [0] * x.ndim
    for k, d in enumerate(dn.start_index_map):
      start[d] = int(idx[b + (k,)])
    for od, ib in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
      start[od] = b[ib]
    oob = any(not 0 <= start[d] <= x.shape[d] - slice_sizes[d] for d in dn.start_index_map)
    start = [min(max(s, 0), n - k) for s, n, k in zip(start, x.shape, slice_sizes)]
    win = x[tuple(slice(s, s + k) for s, k in zip(start, slice_sizes))]
    win = win.reshape([slice_sizes[d] for d in kept])
    if mode == "fill" and oob:
      win = np.full(win.shape, fill, x.dtype)
    sel = [None] * out_rank
    for p, v in zip(batch_pos, b):
      sel[p] = v
    for p in dn.offset_dims:
      sel[p] = slice(None)
    out[tuple(sel)] = win
  return out


def ref_scatter(x, idx, upd, dn, combine, mode):
  out = x.copy()
  window_dims = [d for d in range(x.ndim)
                 if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
  wsize = [1] * x.ndim
  for od, ud in zip(window_dims, dn.update_window_dims):
    wsize[od] = upd.shape[ud]
  scatter_dims = [d for d in range(upd.ndim) if d not in dn.update_window_dims]
  for b in np.ndindex(*idx.shape[:-1]):
    start = [0] * x.ndim
    for k, d in enumerate(dn.scatter_dims_to_operand_dims):
      start[d] = int(idx[b + (k,)])
    for od, ib in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
      start[od] = b[ib]
    if mode == "clip":
      start = [min(max(s, 0), n - w) for s, n, w in zip(start, x.shape, wsize)]
    elif any(not 0 <= s <= n - w for s, n, w in zip(start, x.shape, wsize)):
      continue
    sel = [slice(None)] * upd.ndim
    for d, v in zip(scatter_dims, b):
      sel[d] = v
    win = upd[tuple(sel)]
    for w in np.ndindex(*win.shape):
      pos = list(start)
      for k, od in enumerate(window_dims):
        pos[od] += w[k]
      pos = tuple(pos)
      out[pos] = win[w] if combine is None else combine(out[pos], win[w])
  return out


# ------------------------------------------------------------------------------------------------
# Derivative and vmap checks


def check_jvp_fd(f, primals, rng, eps=1e-6, tol=1e-6):
  """The JVP against central finite differences (f piecewise linear or smooth, float64)."""
  tangents = tuple(rng.standard_normal(np.shape(p)) for p in primals)
  out, t_out = ourjax.jvp(f, tuple(primals), tangents)
  np.testing.assert_allclose(npy(out), npy(f(*primals)), rtol=1e-12, atol=0)
  fp = npy(f(*[p + eps * t for p, t in zip(primals, tangents)]))
  fm = npy(f(*[p - eps * t for p, t in zip(primals, tangents)]))
  np.testing.assert_allclose(npy(t_out), (fp - fm) / (2 * eps), rtol=tol, atol=tol)


def check_vjp(f, primals, rng):
  """<J v, u> == <v, J^T u> for random v and u."""
  out, f_vjp = ourjax.vjp(f, *primals)
  u = rng.standard_normal(np.shape(out))
  cts = f_vjp(u)
  vs = tuple(rng.standard_normal(np.shape(p)) for p in primals)
  _, t_out = ourjax.jvp(f, tuple(primals), vs)
  lhs = float(np.sum(npy(t_out) * u))
  rhs = sum(float(np.sum(npy(c) * v)) for c, v in zip(cts, vs))
  assert np.isclose(lhs, rhs, rtol=1e-9, atol=1e-9), (lhs, rhs)


def check_grads(f, primals, rng):
  check_jvp_fd(f, primals, rng)
  check_vjp(f, primals, rng)


def check_vmap(f, examples, in_axes):
  """vmap(f, in_axes) on the stacked examples equals the loop over them; an argument with axis
  None takes its value from the first example."""
  batched = []
  for i, ax in enumerate(in_axes):
    if ax is None:
      batched.append(examples[0][i])
    else:
      batched.append(np.stack([np.asarray(ex[i]) for ex in examples], axis=ax))
  per = [[batched[i] if ax is None else ex[i] for i, ax in enumerate(in_axes)]
         for ex in examples]
  expected = np.stack([npy(f(*args)) for args in per])
  got = npy(ourjax.vmap(f, in_axes=tuple(in_axes))(*batched))
  np.testing.assert_array_equal(got, expected)


def n_eqns(f, *args):
  return len(ourjax.make_jaxpr(f)(*args).jaxpr.eqns)


# ------------------------------------------------------------------------------------------------
# rev, pad, concatenate


@st.composite
def shapes(draw, min_rank=0, max_rank=3, max_dim=4):
  rank = draw(st.integers(min_rank, max_rank))
  return tuple(draw(st.lists(st.integers(0, max_dim), min_size=rank, max_size=rank)))


@given(shapes(), st.data(), seeds, st.sampled_from(DTYPES))
def test_rev(shape, data, seed, dtype):
  dims = data.draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True,
                            max_size=len(shape)))
  x = rand(np.random.default_rng(seed), shape, dtype)
  np.testing.assert_array_equal(npy(lax.rev(x, dims)), np.flip(x, tuple(dims)))


@st.composite
def pad_cases(draw):
  shape = draw(shapes())
  config = []
  for n in shape:
    interior = draw(st.integers(0, 2))
    full = n + max(n - 1, 0) * interior
    lo = draw(st.integers(-full - 1, 3))
    hi = draw(st.integers(-(full + lo), 3))
    config.append((lo, hi, interior))
  return shape, config


@given(pad_cases(), seeds, st.sampled_from(DTYPES))
def test_pad(case, seed, dtype):
  shape, config = case
  rng = np.random.default_rng(seed)
  x, pv = rand(rng, shape, dtype), rand(rng, (), dtype)
  np.testing.assert_array_equal(npy(lax.pad(x, pv, config)), ref_pad(x, pv, config))


@given(shapes(min_rank=1), st.data(), seeds, st.sampled_from(DTYPES))
def test_concatenate(shape, data, seed, dtype):
  rng = np.random.default_rng(seed)
  dim = data.draw(st.integers(0, len(shape) - 1))
  sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
  xs = [rand(rng, shape[:dim] + (k,) + shape[dim + 1:], dtype) for k in sizes]
  np.testing.assert_array_equal(npy(lax.concatenate(xs, dim)), np.concatenate(xs, dim))


def test_structural_errors():
  x = np.zeros((2, 3), np.float32)
  with pytest.raises(TypeError, match="pad operand and padding_value must be same dtype"):
    lax.pad(x, np.int32(0), [(0, 0, 0)] * 2)
  with pytest.raises(ValueError, match="length of padding_config"):
    lax.pad(x, np.float32(0), [(0, 0, 0)])
  with pytest.raises(ValueError, match="interior padding"):
    lax.pad(x, np.float32(0), [(0, 0, -1), (0, 0, 0)])
  with pytest.raises(ValueError, match="not at least 0"):
    lax.pad(x, np.float32(0), [(-2, -1, 0), (0, 0, 0)])
  with pytest.raises(TypeError, match=r"same dtypes, got float32, int32"):
    lax.concatenate([x, np.zeros((2, 3), np.int32)], 0)
  with pytest.raises(TypeError, match="different numbers of dimensions"):
    lax.concatenate([x, np.zeros((3,), np.float32)], 0)
  with pytest.raises(TypeError, match=r"differ in dimensions other.*\(2, 3\), \(2, 4\)"):
    lax.concatenate([x, np.zeros((2, 4), np.float32)], 0)
  with pytest.raises(TypeError, match="dimension out of bounds"):
    lax.concatenate([x, x], 2)
  with pytest.raises(TypeError, match="rev dimensions must be unique"):
    lax.rev(x, (0, 0))
  with pytest.raises(TypeError, match=r"rev dimensions must all be in the range \[0, 2\)"):
    lax.rev(x, (2,))


def test_structural_grads(x64):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 4))
  pv = np.float64(0.5)
  for config in ([(1, 2, 1), (-1, 0, 2)], [(-3, -2, 2), (2, -5, 0)], [(0, 0, 0), (0, 0, 3)]):
    check_grads(lambda x, p: lax.pad(x, p, config), (x, pv), rng)
  # the padding value's cotangent is the sum over the padded positions
  g = ourjax.grad(lambda p: lax.pad(x, p, [(1, -1, 1), (0, 2, 0)]).sum())(pv)
  assert float(g) == 5 * 6 - 2 * 4
  check_grads(lambda x: lax.rev(x, (0, 1)), (x,), rng)
  check_grads(lambda a, b, c: lax.concatenate([a, b, c], 1),
              (x, rng.standard_normal((3, 0)), rng.standard_normal((3, 2))), rng)
  # some operands constant: their cotangents are not computed, the others are slices
  ga, gc = ourjax.grad(lambda a, c: (lax.concatenate([a, x, c], 0) * 2.0).sum(),
                       argnums=(0, 1))(x[:1], x[:2])
  np.testing.assert_array_equal(npy(ga), np.full((1, 4), 2.0))
  np.testing.assert_array_equal(npy(gc), np.full((2, 4), 2.0))


@st.composite
def axes_for(draw, ranks):
  """One in_axes entry per argument rank (None or a valid position), at least one mapped."""
  axes = [draw(st.one_of(st.none(), st.integers(0, r))) for r in ranks]
  if all(a is None for a in axes):
    axes[draw(st.integers(0, len(ranks) - 1))] = 0
  return axes


@settings(max_examples=15)
@given(pad_cases(), st.data(), seeds, st.integers(1, 3))
def test_pad_vmap(case, data, seed, B):
  shape, config = case
  rng = np.random.default_rng(seed)
  axes = data.draw(axes_for([len(shape), 0]))
  examples = [(rand(rng, shape), rand(rng, ())) for _ in range(B)]
  check_vmap(lambda x, p: lax.pad(x, p, config), examples, axes)


@settings(max_examples=15)
@given(shapes(min_rank=1), st.data(), seeds, st.integers(1, 3))
def test_concatenate_rev_vmap(shape, data, seed, B):
  rng = np.random.default_rng(seed)
  dim = data.draw(st.integers(0, len(shape) - 1))
  shapes3 = [shape[:dim] + (k,) + shape[dim + 1:] for k in (1, 0, 2)]
  axes = data.draw(axes_for([len(shape)] * 3))
  examples = [tuple(rand(rng, s) for s in shapes3) for _ in range(B)]
  check_vmap(lambda a, b, c: lax.rev(lax.concatenate([a, b, c], dim), (dim,)), examples, axes)


# ------------------------------------------------------------------------------------------------
# slice, slice_in_dim, index_in_dim


@st.composite
def slice_cases(draw):
  shape = draw(shapes())
  start, limit, strides = [], [], []
  for n in shape:
    s = draw(st.integers(0, n))
    start.append(s)
    limit.append(draw(st.integers(s, n)))
    strides.append(draw(st.integers(1, 3)))
  return shape, start, limit, draw(st.one_of(st.none(), st.just(strides)))


@given(slice_cases(), seeds, st.sampled_from(DTYPES))
def test_slice(case, seed, dtype):
  shape, start, limit, strides = case
  x = rand(np.random.default_rng(seed), shape, dtype)
  st_ = strides or [1] * len(shape)
  expected = x[tuple(slice(a, b, c) for a, b, c in zip(start, limit, st_))]
  np.testing.assert_array_equal(npy(lax.slice(x, start, limit, strides)), expected)


def test_slice_in_dim_index_in_dim():
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  np.testing.assert_array_equal(npy(lax.slice_in_dim(x, 1, None, 2, axis=2)), x[..., 1::2])
  np.testing.assert_array_equal(npy(lax.slice_in_dim(x, -2, -1, axis=1)), x[:, -2:-1])
  np.testing.assert_array_equal(npy(lax.index_in_dim(x, -1, axis=1)), x[:, -1:])
  np.testing.assert_array_equal(npy(lax.index_in_dim(x, 2, 2, keepdims=False)), x[..., 2])
  with pytest.raises(IndexError, match="index 3 is out of bounds for axis 1 with size 3"):
    lax.index_in_dim(x, 3, 1)


def test_slice_errors():
  x = np.zeros((2, 3), np.float32)
  with pytest.raises(TypeError, match=r"limit_indices must be less than or equal to operand "
                                      r"shape, got limit_indices \(2, 4\)"):
    lax.slice(x, (0, 0), (2, 4))
  with pytest.raises(TypeError, match="start_indices must be greater than or equal to zero"):
    lax.slice(x, (-1, 0), (2, 3))
  with pytest.raises(TypeError, match="must have length equal to the number of dimensions"):
    lax.slice(x, (0,), (2,))
  with pytest.raises(TypeError, match="greater than or equal to start_indices"):
    lax.slice(x, (2, 0), (1, 3))
  with pytest.raises(TypeError, match="strides must be positive"):
    lax.slice(x, (0, 0), (2, 3), (1, 0))


@given(slice_cases(), seeds)
def test_slice_grads(case, seed):
  shape, start, limit, strides = case
  rng = np.random.default_rng(seed)
  with ourjax.enable_x64(True):
    check_grads(lambda x: lax.slice(x, start, limit, strides), (rng.standard_normal(shape),), rng)


@settings(max_examples=15)
@given(slice_cases(), st.data(), seeds, st.integers(1, 3))
def test_slice_vmap(case, data, seed, B):
  shape, start, limit, strides = case
  rng = np.random.default_rng(seed)
  ax = data.draw(st.integers(0, len(shape)))
  check_vmap(lambda x: lax.slice(x, start, limit, strides),
             [(rand(rng, shape),) for _ in range(B)], [ax])


# ------------------------------------------------------------------------------------------------
# dynamic_slice, dynamic_update_slice


@st.composite
def dynamic_cases(draw, min_rank=0):
  shape = draw(shapes(min_rank=min_rank))
  sizes = [draw(st.integers(0, n)) for n in shape]
  starts = [draw(st.integers(-n - 3, n + 3)) for n in shape]
  return shape, sizes, starts


@given(dynamic_cases(), seeds, st.sampled_from(DTYPES), st.booleans())
def test_dynamic_slice(case, seed, dtype, trace_indices):
  shape, sizes, starts = case
  x = rand(np.random.default_rng(seed), shape, dtype)
  begin = [ref_dynamic_start(i, n, k) for i, n, k in zip(starts, shape, sizes)]
  expected = x[tuple(slice(b, b + k) for b, k in zip(begin, sizes))]
  if trace_indices:
    got = traced(lambda x, *i: lax.dynamic_slice(x, i, sizes), x,
                 *[np.int32(i) for i in starts])
  else:
    got = lax.dynamic_slice(x, starts, sizes)
  np.testing.assert_array_equal(npy(got), expected)


@given(dynamic_cases(), seeds, st.sampled_from(DTYPES), st.booleans())
def test_dynamic_update_slice(case, seed, dtype, trace_indices):
  shape, sizes, starts = case
  rng = np.random.default_rng(seed)
  x, u = rand(rng, shape, dtype), rand(rng, sizes, dtype)
  begin = [ref_dynamic_start(i, n, k) for i, n, k in zip(starts, shape, sizes)]
  expected = x.copy()
  expected[tuple(slice(b, b + k) for b, k in zip(begin, sizes))] = u
  if trace_indices:
    got = traced(lambda x, u, *i: lax.dynamic_update_slice(x, u, i), x, u,
                 *[np.int32(i) for i in starts])
  else:
    got = lax.dynamic_update_slice(x, u, starts)
  np.testing.assert_array_equal(npy(got), expected)


def test_dynamic_in_dim_wrappers():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(npy(lax.dynamic_slice_in_dim(x, 4, 3, axis=1)), x[:, 1:])
  np.testing.assert_array_equal(npy(lax.dynamic_slice_in_dim(x, -1, 2)), x[1:])
  np.testing.assert_array_equal(npy(lax.dynamic_index_in_dim(x, 1, 1, keepdims=False)), x[:, 1])
  np.testing.assert_array_equal(npy(lax.dynamic_index_in_dim(x, -1)), x[2:])
  y = np.ones((2, 3), np.float32)
  e = x.copy()
  e[1:3, :3] = 1
  np.testing.assert_array_equal(npy(lax.dynamic_update_slice_in_dim(x, y, 1, axis=0)), e)
  e = x.copy()
  e[:, 3] = [7, 8, 9]
  np.testing.assert_array_equal(
      npy(lax.dynamic_update_index_in_dim(x, np.array([7, 8, 9], np.float32), 10, 1)), e)
  # start indices given as one integer array
  np.testing.assert_array_equal(npy(lax.dynamic_slice(x, np.array([1, 2]), (2, 2))), x[1:, 2:])
  np.testing.assert_array_equal(
      npy(traced(lambda x, i: lax.dynamic_slice(x, i, (2, 2)), x, np.array([2, -1], np.int32))),
      x[1:, 2:])


def test_dynamic_errors():
  x = np.zeros((2, 3), np.float32)
  with pytest.raises(TypeError, match=r"slice_sizes must be less than or equal to operand "
                                      r"shape, got slice_sizes \(3, 1\) for operand shape"):
    lax.dynamic_slice(x, (0, 0), (3, 1))
  with pytest.raises(ValueError, match=r"Length of slice indices must match number of operand "
                                       r"dimensions \(1 vs 2\)"):
    lax.dynamic_slice(x, (0,), (1, 1))
  with pytest.raises(TypeError, match="index arguments to dynamic_slice must be integers of "
                                      "the same type, got: float32, int32"):
    lax.dynamic_slice(x, (np.float32(0), np.int32(0)), (1, 1))
  with pytest.raises(TypeError, match="must be integers of the same type, got: int32, int16"):
    traced(lambda x, i, j: lax.dynamic_slice(x, (i, j), (1, 1)), x, np.int32(0), np.int16(0))
  with pytest.raises(TypeError, match="update shape must be smaller than operand shape"):
    lax.dynamic_update_slice(x, np.zeros((3, 1), np.float32), (0, 0))
  with pytest.raises(TypeError, match="update must have the same rank as operand"):
    lax.dynamic_update_slice(x, np.zeros((1,), np.float32), (0, 0))
  with pytest.raises(TypeError, match="same dtypes, got float32, int32"):
    lax.dynamic_update_slice(x, np.zeros((1, 1), np.int32), (0, 0))


@given(dynamic_cases(min_rank=1), seeds)
def test_dynamic_grads(case, seed, ):
  shape, sizes, starts = case
  rng = np.random.default_rng(seed)
  with ourjax.enable_x64(True):
    x, u = rng.standard_normal(shape), rng.standard_normal(sizes)
    idx = [np.int64(i) for i in starts]
    check_grads(lambda x: lax.dynamic_slice(x, idx, sizes), (x,), rng)
    check_grads(lambda x, u: lax.dynamic_update_slice(x, u, idx), (x, u), rng)
    # with the indices traced too (their tangents are ignored)
    f = lambda x, u, *i: lax.dynamic_update_slice(x, lax.dynamic_slice(x, i, sizes) * u, i)  # noqa
    closed = ourjax.make_jaxpr(f)(x, u, *idx)
    g = lambda x, u: core.jaxpr_as_fun(closed)(x, u, *idx)[0]  # noqa: E731
    check_grads(g, (x, u), rng)


@settings(max_examples=20)
@given(dynamic_cases(min_rank=1), st.data(), seeds, st.integers(1, 3))
def test_dynamic_slice_vmap(case, data, seed, B):
  shape, sizes, starts = case
  rng = np.random.default_rng(seed)
  n = len(shape)
  axes = data.draw(axes_for([n] + [0] * n))
  examples = [(rand(rng, shape),) + tuple(np.int32(rng.integers(-m - 2, m + 3)) for m in shape)
              for _ in range(B)]
  check_vmap(lambda x, *i: lax.dynamic_slice(x, i, sizes), examples, axes)


@settings(max_examples=20)
@given(dynamic_cases(min_rank=1), st.data(), seeds, st.integers(1, 3))
def test_dynamic_update_slice_vmap(case, data, seed, B):
  shape, sizes, starts = case
  rng = np.random.default_rng(seed)
  n = len(shape)
  axes = data.draw(axes_for([n, n] + [0] * n))
  examples = [(rand(rng, shape), rand(rng, sizes))
              + tuple(np.int32(rng.integers(-m - 2, m + 3)) for m in shape) for _ in range(B)]
  check_vmap(lambda x, u, *i: lax.dynamic_update_slice(x, u, i), examples, axes)


def test_batched_dynamic_indices_become_gather_and_scatter():
  x = np.zeros((5, 4, 6), np.float32)
  i = np.arange(5, dtype=np.int32)
  f = ourjax.vmap(lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 3)))
  prims = [e.primitive.name for e in ourjax.make_jaxpr(f)(x, i).eqns]
  assert "gather" in prims and "dynamic_slice" not in prims
  u = np.ones((5, 2, 3), np.float32)
  g = ourjax.vmap(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 1)))
  prims = [e.primitive.name for e in ourjax.make_jaxpr(g)(x, u, i).eqns]
  assert "scatter" in prims and "dynamic_update_slice" not in prims
  # only the operand batched: stays a dynamic slice
  h = ourjax.vmap(lambda x: lax.dynamic_slice(x, (1, 1), (2, 3)))
  assert [e.primitive.name for e in ourjax.make_jaxpr(h)(x).eqns] == ["dynamic_slice"]


# ------------------------------------------------------------------------------------------------
# gather and scatter: random dimension numbers


@st.composite
def gather_cases(draw, max_rank=3, unique=False):
  """(operand shape, GatherDimensionNumbers, slice_sizes, indices)."""
  rank = draw(st.integers(1, max_rank))
  shape = tuple(draw(st.lists(st.integers(0, 4) if draw(st.booleans()) else st.integers(1, 4),
                              min_size=rank, max_size=rank)))
  perm = draw(st.permutations(range(rank)))
  n_ob = draw(st.integers(0, min(1, rank - 1)))
  obatch = tuple(sorted(perm[:n_ob]))
  n_map = draw(st.integers(0, rank - n_ob))
  start_index_map = tuple(perm[n_ob:n_ob + n_map])
  rest = [d for d in range(rank) if d not in obatch]
  collapsed = tuple(sorted(d for d in rest if shape[d] and draw(st.booleans())))
  sizes = tuple(1 if d in collapsed else min(1, shape[d]) if d in obatch
                else draw(st.integers(0, shape[d])) for d in range(rank))
  n_ib = draw(st.integers(n_ob, n_ob + 2))
  ishape = [draw(st.integers(0, 3)) for _ in range(n_ib)]
  ipos = tuple(draw(st.permutations(range(n_ib)))[:n_ob])
  for od, p in zip(obatch, ipos):
    ishape[p] = shape[od]
  kept = rank - len(collapsed) - len(obatch)
  offset_dims = tuple(sorted(draw(st.permutations(range(kept + n_ib)))[:kept]))
  dn = GDN(offset_dims=offset_dims, collapsed_slice_dims=collapsed,
           start_index_map=start_index_map, operand_batching_dims=obatch,
           start_indices_batching_dims=ipos)
  rng = np.random.default_rng(draw(seeds))
  if unique:
    # distinct, non-overlapping windows: starts on a grid of the window sizes, each grid cell
    # used at most once per operand batch entry
    choices = list(itertools.product(*[range(0, shape[d] - sizes[d] + 1, max(sizes[d], 1))
                                       for d in start_index_map]))
    free = [p for p in range(n_ib) if p not in ipos]
    if int(np.prod([ishape[p] for p in free])) > len(choices):
      for p in free:
        ishape[p] = min(ishape[p], 1)
    idx = np.zeros(tuple(ishape) + (n_map,), np.int32)
    order = {}
    for b in np.ndindex(*ishape):
      key = tuple(b[p] for p in ipos)
      k = order.setdefault(key, rng.permutation(len(choices)).tolist())
      idx[b] = choices[k.pop()]
  else:
    hi = max(shape) + 2
    idx = rng.integers(-2, hi + 1, tuple(ishape) + (n_map,)).astype(np.int32)
  return shape, dn, sizes, idx


def scatter_dnums(dn):
  return SDN(update_window_dims=dn.offset_dims, inserted_window_dims=dn.collapsed_slice_dims,
             scatter_dims_to_operand_dims=dn.start_index_map,
             operand_batching_dims=dn.operand_batching_dims,
             scatter_indices_batching_dims=dn.start_indices_batching_dims)


def update_shape(shape, dn, sizes, idx):
  return ourjax.eval_shape(lambda x, i: lax.gather(x, i, dn, sizes),
                           ourjax.ShapeDtypeStruct(shape, np.float32),
                           ourjax.ShapeDtypeStruct(idx.shape, np.int32)).shape


MODES = {"clip": ("clip", "clip"), "fill": ("fill", "fill"), None: ("clip", None),
         "promise_in_bounds": ("clip", None), Mode.FILL_OR_DROP: ("fill", None),
         Mode.CLIP: ("clip", None)}


@given(gather_cases(), seeds, st.sampled_from(DTYPES), st.sampled_from(list(MODES)))
def test_gather(case, seed, dtype, mode):
  shape, dn, sizes, idx = case
  x = rand(np.random.default_rng(seed), shape, dtype)
  ref_mode = MODES[mode][0]
  fill = {np.dtype(np.bool_): True}.get(np.dtype(dtype))
  if fill is None:
    d = np.dtype(dtype)
    fill = np.nan if d.kind not in "iu" else (np.iinfo(d).min if d.kind == "i" else
                                              np.iinfo(d).max)
  expected = ref_gather(x, idx, dn, sizes, ref_mode, fill)
  assert_same(lax.gather(x, idx, dn, sizes, mode=mode), expected)


def test_gather_fill_value_and_jnp_style():
  x = np.arange(10, dtype=np.float32) * 10
  idx = np.array([[0], [9], [10], [-1], [3]], np.int32)
  dn = GDN(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
  np.testing.assert_array_equal(npy(lax.gather(x, idx, dn, (1,), mode="fill", fill_value=-5)),
                                [0, 90, -5, -5, 30])
  np.testing.assert_array_equal(npy(lax.gather(x, idx, dn, (1,))), [0, 90, 90, 0, 30])
  # the jaxpr records the parsed mode and fill value, as JAX's does
  eqn = ourjax.make_jaxpr(lambda x: lax.gather(x, idx, dn, (1,), mode="fill"))(x).eqns[0]
  assert eqn.params["mode"] is Mode.FILL_OR_DROP and np.isnan(eqn.params["fill_value"])
  eqn = ourjax.make_jaxpr(lambda x: lax.gather(x, idx, dn, (1,)))(x).eqns[0]
  assert eqn.params["mode"] is Mode.PROMISE_IN_BOUNDS and eqn.params["fill_value"] is None
  with pytest.raises(ValueError, match='Unknown gather mode "wrap"'):
    lax.gather(x, idx, dn, (1,), mode="wrap")


SCATTERS = [(lax.scatter, None), (lax.scatter_add, np.add), (lax.scatter_sub, np.subtract),
            (lax.scatter_mul, np.multiply), (lax.scatter_min, np.minimum),
            (lax.scatter_max, np.maximum)]


@given(gather_cases(), seeds, st.sampled_from(DTYPES), st.sampled_from(SCATTERS),
       st.sampled_from([None, "clip", "drop", "promise_in_bounds"]))
def test_scatter(case, seed, dtype, op, mode):
  shape, gdn, sizes, idx = case
  fn, combine = op
  if np.dtype(dtype) == np.bool_ and combine in (np.add, np.subtract, np.multiply):
    return  # as lax.add/sub/mul, these do not accept bool (checked below)
  rng = np.random.default_rng(seed)
  dn = scatter_dnums(gdn)
  x = rand(rng, shape, dtype)
  u = rand(rng, update_shape(shape, gdn, sizes, idx), dtype)
  expected = ref_scatter(x, idx, u, dn, combine, "clip" if mode == "clip" else "drop")
  got = npy(fn(x, idx, u, dn, mode=mode))
  assert got.dtype == expected.dtype
  if np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize < 4:
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=1e-2)
  else:
    np.testing.assert_array_equal(got, expected)


def test_scatter_repeated_indices():
  x = np.zeros(4, np.float32)
  idx = np.array([[1], [1], [3], [1], [7]], np.int32)
  u = np.array([1, 2, 3, 4, 5], np.float32)
  dn = SDN(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
  np.testing.assert_array_equal(npy(lax.scatter_add(x, idx, u, dn)), [0, 7, 0, 3])
  np.testing.assert_array_equal(npy(lax.scatter_add(x, idx, u, dn, mode="clip")), [0, 7, 0, 8])
  np.testing.assert_array_equal(npy(lax.scatter_mul(x + 1, idx, u, dn)), [1, 8, 1, 3])
  np.testing.assert_array_equal(npy(lax.scatter_max(x, idx, -u, dn)), [0, 0, 0, 0])
  np.testing.assert_array_equal(npy(lax.scatter_min(x, idx, -u, dn)), [0, -4, 0, -3])


def test_gather_scatter_errors():
  x = np.zeros((3, 4), np.float32)
  i = np.zeros((2, 1), np.int32)
  ok = GDN(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
  with pytest.raises(ValueError, match="indices must have an integer type"):
    lax.gather(x, i.astype(np.float32), ok, (1, 4))
  with pytest.raises(TypeError, match="2 elements in start_index_map"):
    lax.gather(x, i, ok._replace(start_index_map=(0, 1)), (1, 4))
  with pytest.raises(TypeError, match="can only collapse slice dims with bound 1"):
    lax.gather(x, i, ok, (2, 4))
  with pytest.raises(TypeError, match=r"Slice size at index 1 in gather op is out of range"):
    lax.gather(x, i, ok, (1, 5))
  with pytest.raises(TypeError, match="offset_dims in gather op must be sorted"):
    lax.gather(x, np.zeros((2, 0), np.int32),
               GDN(offset_dims=(2, 1), collapsed_slice_dims=(), start_index_map=()), (3, 4))
  with pytest.raises(TypeError, match="one slice size for every input dimension"):
    lax.gather(x, i, ok, (1,))
  with pytest.raises(TypeError, match="either be a offset dimension or explicitly collapsed"):
    lax.gather(x, i, ok._replace(collapsed_slice_dims=()), (1, 4))
  with pytest.raises(TypeError, match="start_index_map and operand_batching_dims in gather op "
                                      "must be disjoint"):
    lax.gather(x, np.zeros((3, 1), np.int32),
               GDN(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,),
                   operand_batching_dims=(0,), start_indices_batching_dims=(0,)), (1, 4))
  with pytest.raises(TypeError, match="batching dimensions to have the same shape"):
    lax.gather(x, np.zeros((2, 1), np.int32),
               GDN(offset_dims=(), collapsed_slice_dims=(), start_index_map=(1,),
                   operand_batching_dims=(0,), start_indices_batching_dims=(0,)), (1, 1))
  sdn = SDN(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
  with pytest.raises(TypeError, match="scatter-add does not accept dtype bool"):
    lax.scatter_add(x > 0, i, np.zeros((2, 4), np.bool_), sdn)
  with pytest.raises(TypeError, match="same dtypes, got float32, int32"):
    lax.scatter_add(x, i, np.zeros((2, 4), np.int32), sdn)
  with pytest.raises(TypeError, match="Updates tensor must be of rank 2; got 1"):
    lax.scatter(x, i, np.zeros((2,), np.float32), sdn)
  with pytest.raises(TypeError, match="updates bound is 5, operand bound is 4"):
    lax.scatter(x, i, np.zeros((2, 5), np.float32), sdn)
  with pytest.raises(TypeError, match="updates bound is 3, indices bound is 2"):
    lax.scatter(x, i, np.zeros((3, 4), np.float32), sdn)
  with pytest.raises(TypeError, match="window of size 1; doesn't match operand of rank 2"):
    lax.scatter(x, i, np.zeros((2, 4), np.float32), sdn._replace(inserted_window_dims=()))


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_])
def test_gather_by_no_indices_takes_slices_larger_than_the_operand(dtype):
  # JAX checks slice sizes against the operand only when there are indices: with none, no slice
  # is taken and the result is empty (eager, jit, vmap); with indices the TypeError stays
  take = lambda x, dn, sizes: (lambda a, i: lax.gather(a, i, dn, sizes))
  none = np.zeros((0, 1), np.int32)
  collapse = GDN(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
  window = GDN(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,))
  for x, dn, sizes, shape in [(np.zeros((0,), dtype), collapse, (1,), (0,)),
                              (np.ones((2,), dtype), window, (3,), (0, 3))]:
    f = take(x, dn, sizes)
    for g in (f, ourjax.jit(f)):
      out = g(x, none)
      assert out.shape == shape and out.dtype == dtype
    out = ourjax.vmap(f, in_axes=(0, None))(np.stack([x] * 4), none)
    assert out.shape == (4,) + shape
  with pytest.raises(TypeError, match=r"Slice size at index 0 in gather op is out of range"):
    lax.gather(np.zeros((0,), dtype), np.zeros((1, 1), np.int32), collapse, (1,))


@settings(max_examples=20)
@given(gather_cases(), seeds, st.sampled_from([None, "clip", "fill"]))
def test_gather_grads(case, seed, mode):
  shape, dn, sizes, idx = case
  rng = np.random.default_rng(seed)
  with ourjax.enable_x64(True):
    # out-of-bounds windows are filled with a constant (not NaN, so differences apply)
    f = lambda x, mode=mode: lax.gather(x, idx, dn, sizes, mode=mode, fill_value=1.5)  # noqa
    x = rng.standard_normal(shape)
    if mode is not None:
      check_grads(f, (x,), rng)
      return
    # PROMISE_IN_BOUNDS (mode None): the forward gather (and its JVP) clamps windows outside,
    # while the transpose drops their cotangents, as JAX's: the VJP is the one of mode "fill"
    check_jvp_fd(f, (x,), rng)
    out, vjp = ourjax.vjp(f, x)
    u = rng.standard_normal(np.shape(out))
    want = ourjax.vjp(lambda x: f(x, "fill"), x)[1](u)[0]
    np.testing.assert_allclose(npy(vjp(u)[0]), npy(want), rtol=1e-12, atol=1e-12)


@settings(max_examples=20)
@given(gather_cases(), seeds,
       st.sampled_from([lax.scatter_add, lax.scatter_sub, lax.scatter, lax.scatter_mul]),
       st.sampled_from(["clip", "drop", "promise_in_bounds"]))
def test_scatter_grads(case, seed, fn, mode):
  # scatter (overwrite) with repeated indices: the winning update's tangent survives
  shape, gdn, sizes, idx = case
  rng = np.random.default_rng(seed)
  dn = scatter_dnums(gdn)
  with ourjax.enable_x64(True):
    x, u = rng.standard_normal(shape), rng.standard_normal(update_shape(shape, gdn, sizes, idx))
    check_grads(lambda x, u: fn(x, idx, u, dn, mode=mode), (x, u), rng)


@settings(max_examples=15)
@given(gather_cases(unique=True), seeds,
       st.sampled_from([lax.scatter_mul, lax.scatter, lax.scatter_min, lax.scatter_max]))
def test_scatter_grads_unique(case, seed, fn):
  shape, gdn, sizes, idx = case
  rng = np.random.default_rng(seed)
  dn = scatter_dnums(gdn)
  with ourjax.enable_x64(True):
    x, u = rng.standard_normal(shape), rng.standard_normal(update_shape(shape, gdn, sizes, idx))
    check_grads(lambda x, u: fn(x, idx, u, dn, unique_indices=True), (x, u), rng)


@settings(max_examples=15)
@given(gather_cases(), seeds, st.sampled_from([lax.scatter_min, lax.scatter_max]))
def test_scatter_extremal_grads_repeated(case, seed, fn):
  # without ties the output is piecewise linear: finite differences apply
  shape, gdn, sizes, idx = case
  rng = np.random.default_rng(seed)
  dn = scatter_dnums(gdn)
  with ourjax.enable_x64(True):
    x, u = rng.standard_normal(shape), rng.standard_normal(update_shape(shape, gdn, sizes, idx))
    check_grads(lambda x, u: fn(x, idx, u, dn), (x, u), rng)


def test_scatter_extremal_ties_average(x64):
  x = np.array([1.0, 0.0])
  idx = np.array([[0], [0], [1]], np.int32)
  u = np.array([1.0, 0.5, -1.0])
  dn = SDN(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
  tx, tu = np.array([3.0, 5.0]), np.array([6.0, 100.0, 7.0])
  out, t = ourjax.jvp(lambda x, u: lax.scatter_max(x, idx, u, dn), (x, u), (tx, tu))
  np.testing.assert_allclose(npy(out), [1.0, 0.0])
  # x[0] and u[0] tie at the max: their tangents are averaged; u[1] loses; x[1] wins alone
  np.testing.assert_allclose(npy(t), [(3.0 + 6.0) / 2, 5.0])
  out, t = ourjax.jvp(lambda x, u: lax.scatter_min(x, idx, u, dn), (x, u), (tx, tu))
  np.testing.assert_allclose(npy(out), [0.5, -1.0])
  np.testing.assert_allclose(npy(t), [100.0, 7.0])


def test_scatter_mul_repeated_indices_with_zeros(x64):
  # (JAX raises NotImplementedError here; the derivative is the product of the other factors)
  x = np.array([1.0, 2.0, 3.0])
  idx = np.array([[1], [1], [1], [2]], np.int32)
  dn = SDN(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
  f = lambda x, u: lax.scatter_mul(x, idx, u, dn).sum()  # noqa: E731
  gx, gu = ourjax.grad(f, argnums=(0, 1))(x, np.array([0.0, 2.0, 3.0, 5.0]))
  np.testing.assert_allclose(npy(gu), [2.0 * 6.0, 0.0, 0.0, 3.0])
  np.testing.assert_allclose(npy(gx), [1.0, 0.0, 5.0])
  _, gu = ourjax.grad(f, argnums=(0, 1))(x, np.array([0.0, 0.0, 3.0, 5.0]))
  np.testing.assert_allclose(npy(gu), [0.0, 0.0, 0.0, 3.0])
  _, gu = ourjax.grad(f, argnums=(0, 1))(x, np.array([4.0, 2.0, 3.0, 5.0]))
  np.testing.assert_allclose(npy(gu), [2.0 * 6.0, 2.0 * 12.0, 2.0 * 8.0, 3.0])


def test_second_order_through_gather_scatter(x64):
  rng = np.random.default_rng(1)
  x = rng.standard_normal((5, 3))
  idx = np.array([[4], [0], [4], [2]], np.int32)
  dn = GDN(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
  f = lambda x: (lax.gather(x, idx, dn, (1, 3)) ** 3).sum()  # noqa: E731
  # Hessian-vector product (forward over reverse) vs finite differences of the gradient
  v = rng.standard_normal(x.shape)
  _, hv = ourjax.jvp(ourjax.grad(f), (x,), (v,))
  eps = 1e-6
  fd = (npy(ourjax.grad(f)(x + eps * v)) - npy(ourjax.grad(f)(x - eps * v))) / (2 * eps)
  np.testing.assert_allclose(npy(hv), fd, rtol=1e-6, atol=1e-6)
  # reverse over reverse
  g2 = ourjax.grad(lambda x: (ourjax.grad(f)(x) * v).sum())(x)
  np.testing.assert_allclose(npy(g2), npy(hv), rtol=1e-10, atol=1e-10)


def test_indices_have_no_tangent(x64):
  x = np.arange(5.0)
  i = np.int32(2)
  out, t = ourjax.jvp(lambda x: lax.dynamic_index_in_dim(x, i, keepdims=False), (x,),
                      (np.ones(5),))
  assert float(out) == 2.0 and float(t) == 1.0
  idx = np.array([[3]], np.int32)
  dn = GDN(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
  gx, gi = ourjax.grad(lambda x, i: lax.gather(x, i, dn, (1,)).sum(), argnums=(0, 1),
                       allow_int=True)(x, idx)
  np.testing.assert_array_equal(npy(gx), [0, 0, 0, 1, 0])
  assert npy(gi).dtype == ourjax.dtypes.float0


@settings(max_examples=20)
@given(gather_cases(max_rank=2), st.data(), seeds, st.integers(1, 3),
       st.sampled_from([None, "clip", "fill"]))
def test_gather_vmap(case, data, seed, B, mode):
  shape, dn, sizes, idx = case
  rng = np.random.default_rng(seed)
  axes = data.draw(axes_for([len(shape), idx.ndim]))
  hi = max(shape) + 2
  examples = [(rand(rng, shape), rng.integers(-2, hi + 1, idx.shape).astype(np.int32))
              for _ in range(B)]
  check_vmap(lambda x, i: lax.gather(x, i, dn, sizes, mode=mode), examples, axes)


@settings(max_examples=20)
@given(gather_cases(max_rank=2), st.data(), seeds, st.integers(1, 3),
       st.sampled_from(SCATTERS), st.sampled_from(["clip", "drop"]))
def test_scatter_vmap(case, data, seed, B, op, mode):
  shape, gdn, sizes, idx = case
  fn = op[0]
  rng = np.random.default_rng(seed)
  dn = scatter_dnums(gdn)
  us = update_shape(shape, gdn, sizes, idx)
  axes = data.draw(axes_for([len(shape), idx.ndim, len(us)]))
  hi = max(shape) + 2
  examples = [(rand(rng, shape, np.int32), rng.integers(-2, hi + 1, idx.shape).astype(np.int32),
               rand(rng, us, np.int32)) for _ in range(B)]
  check_vmap(lambda x, i, u: fn(x, i, u, dn, mode=mode), examples, axes)


def test_vmap_has_no_per_example_loop():
  """The vmapped jaxpr does not grow with the batch size."""
  rng = np.random.default_rng(0)
  gdn = GDN(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
  sdn = scatter_dnums(gdn)
  cases = [
      (lambda x, p: lax.pad(x, p, [(1, -1, 1), (0, 2, 0)]), [(3, 4), ()]),
      (lambda x, y: lax.concatenate([x, y, x], 1), [(3, 4), (3, 2)]),
      (lambda x: lax.rev(lax.slice(x, (0, 1), (3, 4), (2, 1)), (1,)), [(3, 4)]),
      (lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 2)), [(3, 4), (), ()]),
      (lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)), [(3, 4), (2, 2), ()]),
      (lambda x, i: lax.gather(x, i, gdn, (1, 4)), [(3, 4), (2, 1)]),
      (lambda x, i, u: lax.scatter_add(x, i, u, sdn), [(3, 4), (2, 1), (2, 4)]),
      (lambda x, i, u: lax.scatter(x, i, u, sdn), [(3, 4), (2, 1), (2, 4)]),
  ]
  for f, arg_shapes in cases:
    def args(B):
      # (2, 1) and () are index shapes, except the padding value (the second argument of pad)
      return [rng.standard_normal((B,) + s).astype(np.float32)
              if s not in ((), (2, 1)) or (f is cases[0][0] and k == 1)
              else rng.integers(0, 3, (B,) + s).astype(np.int32)
              for k, s in enumerate(arg_shapes)]
    a2, a7 = args(2), args(7)
    vf = ourjax.vmap(f)
    assert n_eqns(vf, *a2) == n_eqns(vf, *a7)
    expected = np.stack([npy(f(*[a[b] for a in a7])) for b in range(7)])
    np.testing.assert_array_equal(npy(vf(*a7)), expected)


def test_weak_types_and_jaxpr_params():
  x = np.zeros((3, 4), np.float32)
  closed = ourjax.make_jaxpr(lambda x: lax.slice_in_dim(x, 1, 3, axis=1))(x)
  assert closed.eqns[0].params == dict(start_indices=(0, 1), limit_indices=(3, 3),
                                       strides=(1, 1))
  closed = ourjax.make_jaxpr(lambda x: lax.pad(x, np.float32(0), [(1, 1, 0)] * 2))(x)
  assert closed.eqns[0].params == dict(padding_config=((1, 1, 0), (1, 1, 0)))
  sd = ourjax.eval_shape(lambda: lax.dynamic_slice(lax.full((3,), 1.0), (1,), (2,)))
  assert sd.shape == (2,)


# ------------------------------------------------------------------------------------------------
# jit: every primitive has a lowering, and the compiled module agrees with eager evaluation


def _jit_agrees(f, *args):
  expected = npy(f(*args))
  assert_same(ourjax.jit(f)(*args), expected)


def test_jit_lowerings(monkeypatch):
  monkeypatch.setenv("OURJAX_STRICT_LOWERING", "1")
  rng = np.random.default_rng(3)
  x = rng.standard_normal((4, 5)).astype(np.float32)
  u = rng.standard_normal((2, 3)).astype(np.float32)
  _jit_agrees(lambda x: lax.rev(x, (1,)), x)
  _jit_agrees(lambda x, p: lax.pad(x, p, [(1, -2, 1), (-1, 2, 0)]), x, np.float32(7))
  _jit_agrees(lambda x: lax.concatenate([x, lax.slice_in_dim(x, 0, 2, axis=1) * 2], 1), x)
  _jit_agrees(lambda x: lax.slice(x, (1, 0), (4, 5), (2, 3)), x)
  _jit_agrees(lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)), x, np.int32(-1), np.int32(9))
  _jit_agrees(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 1)), x, u, np.int32(3))


@settings(max_examples=10)
@given(gather_cases(), seeds, st.sampled_from(SCATTERS),
       st.sampled_from([None, "clip", "fill"]))
def test_jit_gather_scatter(case, seed, op, mode):
  import os
  os.environ["OURJAX_STRICT_LOWERING"] = "1"
  try:
    shape, gdn, sizes, idx = case
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, np.int32)
    _jit_agrees(lambda x, i: lax.gather(x, i, gdn, sizes, mode=mode), x, idx)
    u = rand(rng, update_shape(shape, gdn, sizes, idx), np.int32)
    smode = "drop" if mode == "fill" else mode
    f = lambda x, i, u: op[0](x, i, u, scatter_dnums(gdn), mode=smode)  # noqa: E731
    hits = npy(lax.scatter_add(np.zeros(shape, np.int32), idx, np.ones(u.shape, np.int32),
                               scatter_dnums(gdn), mode=smode))
    if op[0] is lax.scatter and hits.max(initial=0) > 1:
      # updates of one element: which one lands is unspecified (XLA's too; on the GPU the
      # order differs between launches), so each element is the operand's or an update's
      got = npy(ourjax.jit(f)(x, idx, u))
      assert got.shape == x.shape and set(got.ravel()) <= set(x.ravel()) | set(u.ravel())
    else:
      _jit_agrees(f, x, idx, u)
  finally:
    del os.environ["OURJAX_STRICT_LOWERING"]
