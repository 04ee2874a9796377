"""Indexing against NumPy: ``x[idx]`` for drawn shapes and index expressions (ints, slices with
negative steps and out-of-range bounds, None, Ellipsis, integer arrays, boolean masks), eager,
under jit with static and traced indices, under vmap and grad; ``x.at[idx]`` updates against
``ufunc.at`` on the flat positions an index selects; JAX's out-of-bounds modes; and the index
functions (take, take_along_axis, put, nonzero & co., unique, compress/extract, choose, ix_,
unravel_index, ravel_multi_index)."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import errors

# ------------------------------------------------------------------------------------------------
# Strategies: a shape, an index expression for it, and NumPy's answer


def _shape(min_dims=0, max_dims=4, max_side=4):
  return st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def _component(draw, shape, axis, adv_shape, kinds):
  """One index entry for ``shape[axis:]``: (entry, number of dims it consumes)."""
  n = shape[axis]
  choices = [k for k in kinds if not (k in ("int", "array") and n == 0)]
  if len(shape) - axis < 1:
    choices = []
  kind = draw(st.sampled_from(choices))
  if kind == "int":
    return draw(st.integers(-n, n - 1)), 1
  if kind == "slice":
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    step = st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, -3]))
    return slice(draw(bound), draw(bound), draw(step)), 1
  if kind == "array":
    # broadcastable to adv_shape: a suffix of it, some dims set to 1
    k = draw(st.integers(0, len(adv_shape)))
    shp = tuple(1 if draw(st.booleans()) else s for s in adv_shape[len(adv_shape) - k:])
    vals = draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(shp, dtype=int)),
                         max_size=int(np.prod(shp, dtype=int))))
    return np.array(vals, np.int32).reshape(shp), 1
  m = draw(st.integers(1, min(2, len(shape) - axis)))     # a mask over m dims
  mshape = shape[axis:axis + m]
  vals = draw(st.lists(st.booleans(), min_size=int(np.prod(mshape, dtype=int)),
                       max_size=int(np.prod(mshape, dtype=int))))
  return np.array(vals, bool).reshape(mshape), m


@st.composite
def indexed(draw, max_dims=4, arrays=True, masks=True):
  """(shape, index): a NumPy-valid index tuple (or a single entry) for ``shape``."""
  shape = draw(_shape(0, max_dims))
  nd = len(shape)
  use_mask = masks and nd and draw(st.integers(0, 3)) == 0
  kinds = ["int", "slice", "slice"] + (["array"] if arrays and not use_mask else [])
  adv_shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
  ellipsis = draw(st.booleans())
  k = draw(st.integers(0, nd))                 # dims indexed explicitly
  head = draw(st.integers(0, k)) if ellipsis else k
  parts, axis, mask_done = [], 0, False
  spans = [(0, head), (nd - (k - head), nd)] if ellipsis else [(0, k)]
  for si, (lo, hi) in enumerate(spans):
    axis = lo
    seg = []
    while axis < hi:
      if use_mask and not mask_done and draw(st.booleans()):
        m = draw(st.integers(1, min(2, hi - axis)))
        mshape = shape[axis:axis + m]
        size = int(np.prod(mshape, dtype=int))
        vals = draw(st.lists(st.booleans(), min_size=size, max_size=size))
        seg.append(np.array(vals, bool).reshape(mshape))
        axis += m
        mask_done = True
        continue
      entry, used = draw(_component(shape[:hi], axis, adv_shape, kinds))
      seg.append(entry)
      axis += used
    # new axes anywhere in the segment
    for _ in range(draw(st.integers(0, 2))):
      seg.insert(draw(st.integers(0, len(seg))), None)
    parts.append(seg)
  idx = parts[0] + ([Ellipsis] + parts[1] if ellipsis else [])
  if not any(isinstance(p, np.ndarray) for p in idx) and draw(st.integers(0, 5)) == 0:
    idx.insert(draw(st.integers(0, len(idx))), draw(st.booleans()))   # a scalar boolean
  if len(idx) == 1 and draw(st.booleans()):
    return shape, idx[0]
  return shape, tuple(idx)


def _x(shape, dtype=np.float32):
  return (np.arange(int(np.prod(shape, dtype=int))) * 3 % 17 - 5).astype(dtype).reshape(shape)


def _targets(shape, idx):
  """The flat positions ``X[idx]`` reads (NumPy's indexing of an iota)."""
  return np.arange(int(np.prod(shape, dtype=int))).reshape(shape)[idx]


def _check(got, want):
  got_np = np.asarray(got)
  assert got_np.shape == want.shape, (got_np.shape, want.shape)
  assert got_np.dtype == want.dtype, (got_np.dtype, want.dtype)
  np.testing.assert_array_equal(got_np, want)


def _traced_version(idx):
  """The index with ints and integer arrays replaced by placeholders; (rebuild, args)."""
  single = not isinstance(idx, tuple)
  entries = (idx,) if single else idx
  args, slots = [], []
  for e in entries:
    if isinstance(e, (int, np.ndarray)) and not isinstance(e, bool) and \
        (not isinstance(e, np.ndarray) or e.dtype != np.bool_):
      slots.append(len(args))
      args.append(jnp.asarray(e, jnp.int32))
    else:
      slots.append(None)

  def rebuild(traced):
    out = tuple(e if s is None else traced[s] for e, s in zip(entries, slots))
    return out[0] if single else out
  return rebuild, args


# ------------------------------------------------------------------------------------------------
# x[idx]


@given(si=indexed())
def test_getitem_matches_numpy(si):
  shape, idx = si
  X = _x(shape)
  want = X[idx]
  _check(jnp.asarray(X)[idx], want)
  _check(ourjax.jit(lambda a: a[idx])(X), want)              # static index under jit
  rebuild, args = _traced_version(idx)
  _check(ourjax.jit(lambda a, *t: a[rebuild(t)])(X, *args), want)   # traced ints and arrays


@given(si=indexed(max_dims=3), dt=st.sampled_from([np.int8, np.uint8, np.int32, np.bool_,
                                                   np.float32]))
def test_getitem_dtypes_and_index_dtypes(si, dt):
  shape, idx = si
  X = _x(shape).astype(dt)
  # index arrays of other integer types select the same elements
  entries = idx if isinstance(idx, tuple) else (idx,)
  retyped = tuple(e.astype(np.int8) if isinstance(e, np.ndarray) and e.dtype != np.bool_ else e
                  for e in entries)
  _check(jnp.asarray(X)[retyped], X[idx])


def test_getitem_weak_type_and_scalars():
  a = jnp.asarray(3.0)                    # weakly typed
  assert a.weak_type and a[None].weak_type and a[()].weak_type
  assert a[None].shape == (1,) and a[jnp.asarray(True)].shape == (1,)
  assert a[False].shape == (0,) and a[...].shape == ()
  x = jnp.arange(6, dtype=jnp.int16).reshape(2, 3)
  assert x[1, 2].dtype == jnp.int16 and int(x[1, 2]) == 5
  assert x[np.int64(1), np.uint8(0)].tolist() == 3
  assert x[jnp.asarray(1)].tolist() == [3, 4, 5]


def test_static_out_of_range_ints_clamp_like_jax():
  X = np.arange(10.0, dtype=np.float32).reshape(2, 5)
  x = jnp.asarray(X)
  # JAX clamps out-of-range static and traced integer indices on retrieval
  _check(x[7], X[1])
  _check(x[0, 7], X[0, 4])
  _check(x[0, -6], X[0, 0])
  _check(x[:, 9], X[:, 4])
  f = ourjax.jit(lambda a, i: a[:, i])
  _check(f(x, 7), X[:, 4])
  _check(f(x, -9), X[:, 0])
  _check(f(x, -2), X[:, 3])


def test_slices_prefer_static_slicing():
  x = jnp.zeros((3, 4, 5))
  jaxpr = str(ourjax.make_jaxpr(lambda a: a[1, ::-2, None, 1:3])(x))
  assert "slice" in jaxpr and "rev" in jaxpr and "gather" not in jaxpr
  jaxpr = str(ourjax.make_jaxpr(lambda a, i: a[i, 1:])(x, 1))
  assert "dynamic_slice" in jaxpr and "gather" not in jaxpr
  jaxpr = str(ourjax.make_jaxpr(lambda a, i: a[i, 1:])(x, jnp.array([0, 2])))
  assert jaxpr.count("gather") == 1


@given(shape=_shape(1, 3), data=st.data())
def test_traced_scalar_indices(shape, data):
  X = _x(shape)
  assume_nonempty = all(shape)
  if not assume_nonempty:
    return
  i = data.draw(st.integers(-2 * shape[0], 2 * shape[0]))
  want_i = min(max(i + shape[0] if i < 0 else i, 0), shape[0] - 1)   # wrap once, clamp
  _check(ourjax.jit(lambda a, j: a[j])(X, i), X[want_i])
  _check(ourjax.jit(lambda a, j: a[..., None, j])(X.T, i), X.T[..., None, want_i])


def test_getitem_errors():
  x = jnp.zeros((3, 4, 5))
  with pytest.raises(TypeError, match="non-tuple sequence"):
    x[[0, 1]]
  with pytest.raises(IndexError, match="Too many indices"):
    x[0, 1, 2, 3]
  with pytest.raises(IndexError, match="single ellipsis"):
    x[..., 0, ...]
  with pytest.raises(TypeError, match="integer or boolean"):
    x[1.0]
  with pytest.raises(TypeError, match="integer or boolean"):
    x[np.array([1.0])]
  with pytest.raises(TypeError, match="string"):
    x["a"]
  with pytest.raises(TypeError, match="not yet supported"):
    x[object()]
  with pytest.raises(IndexError, match="boolean index did not match"):
    x[np.array([True, False])]
  with pytest.raises(ValueError, match="step cannot be zero"):
    x[::0]
  with pytest.raises(ValueError, match="broadcast"):
    x[np.array([0, 1]), np.array([0, 1, 2])]
  with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
    jnp.zeros((0, 3))[0]
  with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
    jnp.zeros((0, 3))[np.array([0])]
  assert jnp.zeros((0, 3))[np.array([], np.int32)].shape == (0, 3)
  with pytest.raises(IndexError, match="Slice entries must be static"):
    ourjax.jit(lambda a, i: a[i:i + 2])(x, 1)
  with pytest.raises(IndexError, match="Too many indices"):
    jnp.float32(3)[0]
  with pytest.raises(TypeError, match="immutable"):
    x[0] = 1.0


def test_traced_boolean_mask_raises_with_advice():
  x = jnp.arange(12.0).reshape(3, 4)
  with pytest.raises(errors.NonConcreteBooleanIndexError, match="jnp.where") as info:
    ourjax.jit(lambda a: a[a > 3])(x)
  assert isinstance(info.value, IndexError)
  with pytest.raises(errors.NonConcreteBooleanIndexError):
    ourjax.jit(lambda a: a.at[a > 3].set(0.0))(x)
  # a concrete (NumPy) mask inside jit is fine; so is a mask of concrete values eagerly
  m = np.asarray(x) > 3
  _check(ourjax.jit(lambda a: a[m])(x), np.asarray(x)[m])
  _check(x[x > 3], np.asarray(x)[m])
  # the size= route works under jit
  _check(ourjax.jit(lambda a: jnp.where(a > 3, size=10, fill_value=-1)[1])(x),
         np.concatenate([np.nonzero(m)[1], [-1, -1]]).astype(np.int32))


def test_iteration_yields_rows():
  X = np.arange(6, dtype=np.int32).reshape(3, 2)
  assert [r.tolist() for r in jnp.asarray(X)] == X.tolist()
  out = ourjax.jit(lambda a: jnp.stack([r * i for i, r in enumerate(a)]))(X)
  _check(out, np.stack([r * i for i, r in enumerate(X)]))
  with pytest.raises(TypeError):
    iter(jnp.asarray(1.0))


# ------------------------------------------------------------------------------------------------
# x.at[idx]


def _updates_for(draw, tshape, dtype=np.float32):
  """Values that broadcast to the indexed shape: a suffix of it with some dims set to 1."""
  k = draw(st.integers(0, len(tshape)))
  vshape = tuple(1 if draw(st.booleans()) else s for s in tshape[len(tshape) - k:])
  return (np.arange(int(np.prod(vshape, dtype=int))) % 7 + 2).astype(dtype).reshape(vshape)


def _np_at(X, idx, v, ufunc):
  T = _targets(X.shape, idx)
  out = X.copy().reshape(-1)
  ufunc.at(out, T.reshape(-1), np.broadcast_to(v, T.shape).reshape(-1))
  return out.reshape(X.shape)


@given(si=indexed(), data=st.data(),
       op=st.sampled_from(["add", "subtract", "multiply", "min", "max"]))
def test_at_combining_updates_match_ufunc_at(si, data, op):
  shape, idx = si
  X = _x(shape)
  v = _updates_for(data.draw, _targets(shape, idx).shape)
  ufunc = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
           "min": np.minimum, "max": np.maximum}[op]
  want = _np_at(X, idx, v, ufunc)
  _check(getattr(jnp.asarray(X).at[idx], op)(v), want)
  rebuild, args = _traced_version(idx)
  f = ourjax.jit(lambda a, u, *t: getattr(a.at[rebuild(t)], op)(u))
  _check(f(X, v, *args), want)


@given(si=indexed(), data=st.data())
def test_at_set(si, data):
  shape, idx = si
  X = _x(shape)
  T = _targets(shape, idx)
  v = _updates_for(data.draw, T.shape) + 100
  got = np.asarray(jnp.asarray(X).at[idx].set(v)).reshape(-1)
  V = np.broadcast_to(v, T.shape).reshape(-1)
  flat_t = T.reshape(-1)
  untouched = np.setdiff1d(np.arange(X.size), flat_t)
  np.testing.assert_array_equal(got[untouched], X.reshape(-1)[untouched])
  for pos in np.unique(flat_t):        # duplicates: one of the values written there wins
    assert got[pos] in V[flat_t == pos]
  if len(np.unique(flat_t)) == flat_t.size:
    want = X.copy()
    want[idx] = v
    rebuild, args = _traced_version(idx)
    _check(ourjax.jit(lambda a, u, *t: a.at[rebuild(t)].set(u))(X, v, *args), want)


@given(si=indexed(max_dims=3), data=st.data())
def test_at_get_matches_getitem(si, data):
  shape, idx = si
  X = _x(shape)
  _check(jnp.asarray(X).at[idx].get(), X[idx])
  _check(jnp.asarray(X).at[idx].get(mode="fill", fill_value=-1), X[idx])   # all in bounds


def test_at_divide_power_apply_like_jax():
  x = jnp.arange(4.0)
  i = np.array([2, 2, 0])
  _check(x.at[i].divide(2.0), np.array([0.0, 1, 0.5, 3], np.float32))
  _check(x.at[i].power(2.0), np.array([0.0, 1, 16, 3], np.float32))
  _check(x.at[i].apply(lambda v: v + 1), np.array([1.0, 1, 4, 3], np.float32))
  _check(ourjax.jit(lambda a, j: a.at[j].apply(lambda v: v * 3))(x, jnp.asarray(i)),
         np.array([0.0, 1, 18, 3], np.float32))
  _check(x.at[np.array([1, 9])].apply(jnp.negative), np.array([0.0, -1, 2, 3], np.float32))
  # divide of an integer array is a true division (JAX's result type)
  _check(jnp.array([5, -5]).at[:].divide(2), np.array([2.5, -2.5], np.float32))
  assert x.at[0].mul is not None and x.at[0].multiply(3.0).tolist() == [0.0, 1, 2, 3]


def test_at_dtypes_casts_and_broadcasting():
  xi = jnp.zeros(3, jnp.int32)
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = xi.at[0].set(1.7)
  assert out.dtype == jnp.int32 and out.tolist() == [1, 0, 0]
  assert any(issubclass(m.category, FutureWarning) for m in w)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert xi.at[1].add(2).tolist() == [0, 2, 0]            # weak int: no warning
    assert jnp.zeros(2, jnp.uint8).at[0].add(-1).tolist() == [255, 0]
  with pytest.warns(FutureWarning):
    assert jnp.array([True, False]).at[1].set(1).tolist() == [True, True]
  assert jnp.array([True, False]).at[1].max(True).tolist() == [True, True]
  with pytest.raises(TypeError):
    jnp.array([True, False]).at[0].add(True)
  xw = jnp.asarray(2.0)[None]
  assert xw.weak_type and xw.at[0].set(1.0).weak_type
  with pytest.warns(FutureWarning):
    assert jnp.ones(2, jnp.float32).at[0].set(3 + 4j).tolist() == [3.0, 1.0]
  x = jnp.ones((2, 3))
  _check(x.at[:, None, 1].set(jnp.full((2, 1), 5.0)),
         np.array([[1, 5, 1], [1, 5, 1]], np.float32))
  _check(jnp.ones(3).at[None].set(jnp.arange(3.0)), np.arange(3.0, dtype=np.float32))
  _check(jnp.asarray(2.0).at[()].set(3.0), np.array(3.0, np.float32))
  with pytest.raises(ValueError, match="fewer dimensions"):
    jnp.arange(3).at[1].set(jnp.arange(1))
  with pytest.raises(ValueError, match="broadcast"):
    x.at[:, None, 1].set(jnp.ones(2))
  with pytest.raises(ValueError, match="Unknown gather mode"):
    jnp.arange(3.0).at[1].set(1, mode="bad")
  with pytest.raises(IndexError, match="size 0"):
    jnp.zeros((0, 3)).at[0].set(1.0)
  assert jnp.zeros((0, 3)).at[:, 1].set(1.0).shape == (0, 3)
  assert "_IndexUpdateRef" in repr(jnp.arange(2).at[0])


# ------------------------------------------------------------------------------------------------
# Out-of-bounds modes (JAX's): retrieval clamps, updates drop; 'fill' and 'clip' on request


@given(n=st.integers(1, 5), data=st.data())
def test_out_of_bounds_modes(n, data):
  X = _x((n, 2))
  i = np.array(data.draw(st.lists(st.integers(-2 * n, 2 * n), min_size=1, max_size=6)),
               np.int32)
  wrapped = np.where(i < 0, i + n, i)
  inside = (wrapped >= 0) & (wrapped < n)
  clamped = np.clip(wrapped, 0, n - 1)
  x = jnp.asarray(X)
  _check(x[i], X[clamped])
  _check(ourjax.jit(lambda a, j: a[j])(x, i), X[clamped])
  _check(x.at[i].get(mode="clip"), X[clamped])
  filled = np.where(inside[:, None], X[clamped], np.float32(-7))
  _check(x.at[i].get(mode="fill", fill_value=-7.0), filled)
  _check(ourjax.jit(lambda a, j: a.at[j].get(mode="fill", fill_value=-7.0))(x, i), filled)
  nan_filled = np.where(inside[:, None], X[clamped], np.float32(np.nan))
  _check(x.at[i].get(mode="fill"), nan_filled)
  ints = jnp.asarray(X.astype(np.int32))
  _check(ints.at[i].get(mode="fill")[:, 0],
         np.where(inside, X[clamped, 0].astype(np.int32), np.iinfo(np.int32).min))
  # updates: dropped by default, clamped with mode='clip'
  want = X.copy()
  np.add.at(want, wrapped[inside], 1.0)
  _check(x.at[i].add(1.0), want)
  _check(x.at[i].add(1.0, mode="drop"), want)
  _check(ourjax.jit(lambda a, j: a.at[j].add(1.0))(x, i), want)
  want = X.copy()
  np.add.at(want, clamped, 1.0)
  _check(x.at[i].add(1.0, mode="clip"), want)


def test_scalar_out_of_bounds_updates_drop():
  x = jnp.arange(10.0).reshape(2, 5)
  _check(x.at[7].set(1.0), np.asarray(x))
  _check(x.at[:, 7].set(1.0), np.asarray(x))
  _check(ourjax.jit(lambda a, i: a.at[i].set(1.0))(x, 7), np.asarray(x))
  assert float(jnp.arange(3.0).at[5].get(mode="fill", fill_value=-7)) == -7.0
  assert float(jnp.arange(3.0).at[5].get(mode="clip")) == 2.0


# ------------------------------------------------------------------------------------------------
# grad and vmap


@given(si=indexed(max_dims=3))
def test_grad_of_indexing_scatters_cotangent(si):
  shape, idx = si
  X = _x(shape)
  T = _targets(shape, idx)
  W = (np.arange(T.size) % 5 + 1).astype(np.float32).reshape(T.shape)
  want = np.zeros(X.size, np.float32)
  np.add.at(want, T.reshape(-1), W.reshape(-1))
  g = ourjax.grad(lambda a: (a[idx] * W).sum())(X)
  _check(g, want.reshape(shape))
  rebuild, args = _traced_version(idx)
  g = ourjax.jit(ourjax.grad(lambda a, *t: (a[rebuild(t)] * W).sum()))(X, *args)
  _check(g, want.reshape(shape))


def test_grad_one_hot():
  x = jnp.zeros((3, 4))
  g = ourjax.grad(lambda a: a[1, 2])(x)
  want = np.zeros((3, 4), np.float32)
  want[1, 2] = 1
  _check(g, want)
  g = ourjax.grad(lambda a, i: a[i, ::-1].sum())(x, 2)
  want = np.zeros((3, 4), np.float32)
  want[2] = 1
  _check(g, want)


@given(si=indexed(max_dims=3, masks=False), data=st.data())
def test_grad_of_at_set(si, data):
  shape, idx = si
  X = _x(shape)
  T = _targets(shape, idx)
  flat_t = T.reshape(-1)
  if len(np.unique(flat_t)) != flat_t.size:      # duplicates: which update wins is unspecified
    return
  v = _updates_for(data.draw, T.shape)
  W = (np.arange(X.size) % 3 + 1).astype(np.float32).reshape(shape)
  gx, gv = ourjax.grad(lambda a, u: (a.at[idx].set(u) * W).sum(), argnums=(0, 1))(X, v)
  want_x = W.copy().reshape(-1)
  want_x[flat_t] = 0
  _check(gx, want_x.reshape(shape))
  # d/dv: the weights at the written places, summed over broadcast dims of v
  Wt = W.reshape(-1)[T]
  lead = Wt.ndim - v.ndim
  want_v = Wt.sum(axis=tuple(range(lead))) if lead else Wt
  want_v = want_v.sum(axis=tuple(d for d, s in enumerate(v.shape) if s == 1 and
                                 want_v.shape[d] != 1), keepdims=True) if v.ndim else want_v
  np.testing.assert_allclose(np.asarray(gv), want_v.reshape(v.shape), rtol=1e-6)


def test_grad_of_at_updates_vs_finite_differences(x64):
  rng = np.random.default_rng(0)
  x = rng.uniform(0.5, 2.0, (4, 3))
  v = rng.uniform(0.5, 2.0, (3, 3))
  idx = (np.array([0, 2, 0]), slice(None))     # row 0 twice
  ops = {
      "add": lambda a, u: a.at[idx].add(u),
      "multiply": lambda a, u: a.at[idx].multiply(u),
      "divide": lambda a, u: a.at[idx].divide(u),
      "power": lambda a, u: a.at[idx].power(u),
      "min": lambda a, u: a.at[idx].min(u * 0.9),
      "max": lambda a, u: a.at[idx].max(u * 1.1),
      "set_unique": lambda a, u: a.at[np.array([3, 1, 0]), ::-1].set(u),
      "get_fill": lambda a, u: a.at[np.array([0, 7, 2]), 1:].get(mode="fill", fill_value=0.0)
      * u[:, :2],
  }
  for name, op in ops.items():
    f = lambda a, u: (jnp.sin(op(jnp.asarray(a), u)) ** 2).sum()  # noqa: E731
    ga, gu = ourjax.grad(f, argnums=(0, 1))(x, v)
    eps = 1e-6
    for arg, g, k in ((x, ga, 0), (v, gu, 1)):
      num = np.zeros_like(arg)
      for j in np.ndindex(arg.shape):
        d = np.zeros_like(arg)
        d[j] = eps
        args_p = [x, v]
        args_m = [x, v]
        args_p[k] = arg + d
        args_m[k] = arg - d
        num[j] = (float(f(*args_p)) - float(f(*args_m))) / (2 * eps)
      np.testing.assert_allclose(np.asarray(g), num, rtol=1e-5, atol=1e-7, err_msg=name)


@given(n=st.integers(1, 4), data=st.data())
def test_vmap_of_indexing_matches_loop(n, data):
  X = _x((n, 3, 4))
  i = np.array(data.draw(st.lists(st.integers(-3, 2), min_size=n, max_size=n)), np.int32)
  j = np.array(data.draw(st.lists(st.integers(-4, 3), min_size=2 * n, max_size=2 * n)),
               np.int32).reshape(n, 2)
  cases = [
      (lambda r, a, b: r[a], (0, 0, None)),              # batched x and traced scalar
      (lambda r, a, b: r[:, b], (0, None, 0)),           # batched x and index array
      (lambda r, a, b: r[a, b], (None, 0, 0)),           # unbatched x, batched indices
      (lambda r, a, b: r[b, ::-1][:, a], (0, 0, 0)),
      (lambda r, a, b: r.at[a, b].add(1.0), (0, 0, 0)),
      (lambda r, a, b: r.at[:, b].set(-1.0), (None, None, 0)),
      (lambda r, a, b: r.at[a].multiply(2.0), (0, 0, None)),
  ]
  for f, axes in cases:
    got = ourjax.vmap(f, in_axes=axes)(jnp.asarray(X if axes[0] == 0 else X[0]), i, j)
    want = np.stack([np.asarray(f(jnp.asarray(X[k] if axes[0] == 0 else X[0]),
                                  int(i[k]) if axes[1] == 0 else i,
                                  j[k] if axes[2] == 0 else j)) for k in range(n)])
    _check(got, want)


# ------------------------------------------------------------------------------------------------
# take, take_along_axis, put


@given(shape=_shape(1, 3), data=st.data(),
       mode=st.sampled_from([None, "fill", "clip", "wrap"]))
def test_take(shape, data, mode):
  X = _x(shape)
  axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
  n = X.size if axis is None else shape[axis]
  ishape = data.draw(_shape(0, 2, 3))
  size = int(np.prod(ishape, dtype=int))
  i = np.array(data.draw(st.lists(st.integers(-2 * n - 1, 2 * n + 1), min_size=size,
                                  max_size=size)), np.int32).reshape(ishape)
  flat = X.reshape(-1) if axis is None else X
  ax = 0 if axis is None else axis % len(shape)
  if n == 0 and i.size:
    with pytest.raises(IndexError, match="empty axis"):
      jnp.take(X, i, axis=axis, mode=mode)
    return
  got = jnp.take(X, i, axis=axis, mode=mode)
  if mode == "wrap":
    want = np.take(flat, i, axis=ax, mode="wrap")
  elif mode == "clip":
    want = np.take(flat, i, axis=ax, mode="clip")      # negative indices clip to 0
  else:
    w = np.where(i < 0, i + n, i)
    ok = (w >= 0) & (w < n)
    want = np.take(flat, np.clip(w, 0, max(n - 1, 0)), axis=ax) if n else \
        np.zeros(np.take(flat, np.zeros(ishape, int), axis=ax, mode="wrap").shape, np.float32)
    okb = ok.reshape((1,) * ax + ishape + (1,) * (flat.ndim - ax - 1))
    want = np.where(okb, want, np.float32(np.nan))
  _check(got, want.astype(np.float32))
  _check(ourjax.jit(lambda a, j: jnp.take(a, j, axis=axis, mode=mode))(X, i), want)
  if axis is None and mode in (None, "fill"):
    _check(jnp.asarray(X).take(i), want)


def test_take_like_jax():
  a = jnp.arange(12.0).reshape(3, 4)
  i = jnp.array([0, 5, -1, -13, 12])
  _check(jnp.take(a, i), np.array([0, 5, 11, np.nan, np.nan], np.float32))
  _check(jnp.take(a, i, mode="wrap"), np.array([0, 5, 11, 11, 0], np.float32))
  _check(jnp.take(a, i, mode="clip"), np.array([0, 5, 0, 0, 11], np.float32))
  _check(jnp.take(a, i, fill_value=-1), np.array([0, 5, 11, -1, -1], np.float32))
  _check(jnp.take(a, 2, axis=1), np.array([2, 6, 10], np.float32))
  with pytest.raises(NotImplementedError):
    jnp.take(a, i, mode="raise")
  with pytest.raises(ValueError, match="Invalid mode"):
    jnp.take(a, i, mode="bogus")
  with pytest.raises(ValueError, match="integer"):
    jnp.take(a, jnp.array([1.0]))


@given(shape=_shape(1, 3, 4), data=st.data())
def test_take_along_axis(shape, data):
  X = _x(shape)
  nd = len(shape)
  axis = data.draw(st.integers(-nd, nd - 1))
  ax = axis % nd
  n = shape[ax]
  ishape = tuple(data.draw(st.integers(0, 3)) if d == ax else
                 data.draw(st.sampled_from([1, s])) for d, s in enumerate(shape))
  size = int(np.prod(ishape, dtype=int))
  i = np.array(data.draw(st.lists(st.integers(-n - 2, n + 2), min_size=size, max_size=size)),
               np.int32).reshape(ishape)
  bshape = tuple(np.broadcast_shapes((a,), (b,))[0] if d != ax else b
                 for d, (a, b) in enumerate(zip(shape, ishape)))
  if n == 0 and size:
    return
  w = np.where(i < 0, i + n, i)
  ok = (w >= 0) & (w < n)
  ib = np.broadcast_to(np.clip(w, 0, max(n - 1, 0)), bshape)
  if n:
    want = np.take_along_axis(X, ib, axis=ax)
  else:
    want = np.zeros(bshape, np.float32)
  want_fill = np.where(np.broadcast_to(ok, bshape), want, np.float32(np.nan))
  _check(jnp.take_along_axis(X, i, axis=axis), want_fill)
  _check(jnp.take_along_axis(X, i, axis=axis, mode="clip"), want)
  _check(ourjax.jit(lambda a, j: jnp.take_along_axis(a, j, axis))(X, i), want_fill)
  if n and all(ok.reshape(-1)):
    # the gradient puts the cotangent back where each element came from
    g = ourjax.grad(lambda a: (jnp.take_along_axis(a, i, axis) * 2).sum())(X)
    want_g = np.zeros_like(X)
    rows = np.indices(bshape)
    rows[ax] = ib
    np.add.at(want_g, tuple(np.broadcast_to(r, bshape) for r in rows), 2.0)
    _check(g, want_g)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_take_along_axis_one_hot(axis):
  """mode='one_hot' (a one-hot mask contracted with arr): NumPy's take_along_axis for in-bounds
  indices (negatives wrapped unless wrap_negative_indices=False), 0 out of bounds, for
  float/int/bool arrays, with broadcasting, under jit, and its gradient."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 3, 4)).astype(np.float32)
  if axis is None:
    xa, ax, ishape = x.reshape(-1), 0, (7,)
  else:
    ax = axis % 3
    xa, ishape = x, tuple(5 if d == ax else (1 if d == 0 else x.shape[d]) for d in range(3))
  n = xa.shape[ax]
  i = rng.integers(-n - 2, n + 2, ishape).astype(np.int32)
  bshape = tuple(ishape[d] if d == ax else xa.shape[d] for d in range(xa.ndim))
  for wrap in (True, False):
    w = np.where(i < 0, i + n, i) if wrap else i
    ok = np.broadcast_to((w >= 0) & (w < n), bshape)
    for a in (x, (x * 4).astype(np.int32), x > 0):
      an = a.reshape(-1) if axis is None else a
      ref = np.where(ok, np.take_along_axis(an, np.broadcast_to(np.clip(w, 0, n - 1), bshape),
                                            axis=ax), np.zeros((), a.dtype))
      _check(jnp.take_along_axis(a, i, axis=axis, mode="one_hot", wrap_negative_indices=wrap),
             ref)
  ok = np.broadcast_to((np.where(i < 0, i + n, i) >= 0) & (np.where(i < 0, i + n, i) < n),
                       bshape)
  near = np.take_along_axis(xa, np.broadcast_to(np.clip(np.where(i < 0, i + n, i), 0, n - 1),
                                                bshape), axis=ax)
  f = ourjax.jit(lambda a, j: jnp.take_along_axis(a, j, axis=axis, mode="one_hot"))
  _check(f(x, i), np.where(ok, near, np.float32(0)))
  g = ourjax.grad(lambda a: (jnp.take_along_axis(a, i, axis=axis, mode="one_hot") * 3).sum())(x)
  want = np.zeros_like(xa)
  rows = list(np.indices(bshape))
  rows[ax] = np.broadcast_to(np.clip(np.where(i < 0, i + n, i), 0, n - 1), bshape)
  np.add.at(want, tuple(r[ok] for r in rows), 3.0)
  _check(g, want.reshape(x.shape))


def test_take_along_axis_like_jax():
  a = jnp.arange(12.0).reshape(3, 4)
  _check(jnp.take_along_axis(a, jnp.array([[0, 1, -1]]).reshape(-1), axis=None),
         np.array([0, 1, 11], np.float32))
  _check(jnp.take_along_axis(jnp.arange(5.0), jnp.array([-1, -7, 9]), 0,
                             wrap_negative_indices=False), np.full(3, np.nan, np.float32))
  with pytest.raises(ValueError, match="same number of dimensions"):
    jnp.take_along_axis(a, jnp.array([0, 1]), axis=1)
  with pytest.raises(ValueError, match="1D if axis=None"):
    jnp.take_along_axis(a, jnp.array([[0, 1]]), axis=None)
  with pytest.raises(ValueError, match="broadcasting"):
    jnp.take_along_axis(a, jnp.array([[0, 1]]), axis=0)
  with pytest.raises(TypeError, match="integer"):
    jnp.take_along_axis(a, jnp.array([[0.0]]), axis=0)
  # mode= and fill_value= as JAX takes them ('fill' is the default; 'wrap'/'raise' are refused)
  i = np.array([[0, 5, -1, -6], [1, 2, 3, 4], [-4, -5, 0, 0]], np.int32)
  A = np.asarray(a)
  w = np.where(i < 0, i + 4, i)
  ok = (w >= 0) & (w < 4)
  near = np.take_along_axis(A, np.clip(w, 0, 3), axis=1)
  _check(jnp.take_along_axis(a, i, axis=1, mode="fill", fill_value=-9),
         np.where(ok, near, np.float32(-9)))
  _check(jnp.take_along_axis(a, i, axis=1, fill_value=3), np.where(ok, near, np.float32(3)))
  _check(jnp.take_along_axis(a, i, axis=1, mode="clip"), near)
  ok_raw = (i >= 0) & (i < 4)
  _check(jnp.take_along_axis(a, i, axis=1, mode="clip", wrap_negative_indices=False),
         np.take_along_axis(A, np.clip(i, 0, 3), axis=1))
  _check(jnp.take_along_axis(a, i, axis=1, mode="fill", wrap_negative_indices=False),
         np.where(ok_raw, np.take_along_axis(A, np.clip(i, 0, 3), axis=1), np.nan))
  for bad in ("wrap", "raise", "bogus"):
    with pytest.raises(ValueError, match="Unknown gather mode"):
      jnp.take_along_axis(a, i, axis=1, mode=bad)
  # wrap_negative_indices=None (the default) wraps, except for 'promise_in_bounds', which
  # promises indices in [0, n) and so is left without the wrap's compare/add/select
  x3 = jnp.array([10, 20, 30])
  neg = jnp.array([-1, -2])
  _check(jnp.take_along_axis(x3, neg, axis=0, mode="promise_in_bounds",
                             wrap_negative_indices=True), np.array([30, 20], np.int32))
  _check(jnp.take_along_axis(x3, jnp.array([2, 0]), axis=0, mode="promise_in_bounds"),
         np.array([30, 10], np.int32))

  def prims(**kw):
    jaxpr = ourjax.make_jaxpr(lambda v, j: jnp.take_along_axis(v, j, axis=0, **kw))(x3, neg)
    return {e.primitive.name for e in jaxpr.jaxpr.eqns}
  assert "select_n" not in prims(mode="promise_in_bounds")
  assert "select_n" in prims(mode="promise_in_bounds", wrap_negative_indices=True)
  assert "select_n" in prims(mode="clip")
  # batched arr and indices under vmap
  X = _x((3, 4, 5))
  I = (np.arange(3 * 4 * 2).reshape(3, 4, 2) % 5).astype(np.int32)
  _check(ourjax.vmap(lambda r, j: jnp.take_along_axis(r, j, axis=1))(X, I),
         np.take_along_axis(X, I, axis=2))


def test_put():
  a = jnp.arange(12.0).reshape(3, 4)
  A = np.asarray(a)
  with pytest.raises(ValueError, match="in-place"):
    jnp.put(a, jnp.array([0]), 1.0)
  got = jnp.put(a, jnp.array([0, 13, 2]), jnp.array([5.0, 6.0]), inplace=False)
  want = A.copy().reshape(-1)
  want[[0, 11, 2]] = [5.0, 6.0, 5.0]           # values repeat; out of range is clipped
  _check(got, want.reshape(3, 4))
  # mode='clip' is NumPy's: negative indices clip to 0; the default (None, JAX's) counts them
  # from the end and clips only those out of range
  for ind in ([-2, 20, 5], [-1], [-13, 3], [[-20], [14]]):
    for jit in (False, True):
      f = lambda a, i: jnp.put(a, i, jnp.array([7.0, 8.0, 9.0]), mode="clip", inplace=False)
      got = (ourjax.jit(f) if jit else f)(a, np.array(ind, np.int32))
      want = A.copy()
      np.put(want, ind, [7.0, 8.0, 9.0], mode="clip")
      _check(got, want)
  got = jnp.put(a, np.array([-2, 20]), jnp.array([7.0, 8.0]), inplace=False)
  want = A.copy().reshape(-1)
  want[[10, 11]] = [7.0, 8.0]
  _check(got, want.reshape(3, 4))
  with pytest.raises(ValueError, match="mode should be one of 'wrap' or 'clip'; got mode='x'"):
    jnp.put(a, 0, 1.0, mode="x", inplace=False)
  got = jnp.put(a, jnp.array([0, 13, -1]), jnp.array([5.0, 6.0, 7.0]), mode="wrap",
                inplace=False)
  want = A.copy()
  np.put(want, [0, 13, -1], [5.0, 6.0, 7.0], mode="wrap")
  _check(got, want)
  got = jnp.put(a, jnp.array([0, 13]), 9.0, mode="fill", inplace=False)
  want = A.copy().reshape(-1)
  want[0] = 9.0
  _check(got, want.reshape(3, 4))


# ------------------------------------------------------------------------------------------------
# nonzero, flatnonzero, argwhere, where(condition), compress, extract


@given(shape=_shape(1, 3), data=st.data())
def test_nonzero_family(shape, data):
  size = int(np.prod(shape, dtype=int))
  X = np.array(data.draw(st.lists(st.integers(-1, 1), min_size=size, max_size=size)),
               np.int32).reshape(shape)
  for got, want in zip(jnp.nonzero(X), np.nonzero(X)):
    _check(got, want.astype(np.int32))
  for got, want in zip(jnp.where(X), np.nonzero(X)):
    _check(got, want.astype(np.int32))
  for got, want in zip(jnp.asarray(X).nonzero(), np.nonzero(X)):
    _check(got, want.astype(np.int32))
  _check(jnp.flatnonzero(X), np.flatnonzero(X).astype(np.int32))
  _check(jnp.argwhere(X), np.argwhere(X).astype(np.int32))
  k = data.draw(st.integers(0, size + 2))
  fill = data.draw(st.one_of(st.none(), st.integers(-9, -1)))
  count = int(np.count_nonzero(X))
  for got, want in zip(ourjax.jit(lambda a: jnp.nonzero(a, size=k, fill_value=fill))(X),
                       np.nonzero(X)):
    pad = np.full(max(k - count, 0), 0 if fill is None else fill)
    _check(got, np.concatenate([want[:k], pad]).astype(np.int32))
  got = ourjax.jit(lambda a: jnp.argwhere(a, size=k, fill_value=fill))(X)
  pad = np.full((max(k - count, 0), len(shape)), 0 if fill is None else fill)
  _check(got, np.concatenate([np.argwhere(X)[:k], pad]).astype(np.int32))
  # batched under vmap
  rows = X.reshape(shape[0], int(np.prod(shape[1:], dtype=int)))
  got = ourjax.vmap(lambda r: jnp.flatnonzero(r, size=3, fill_value=-1))(rows)
  want = [np.concatenate([np.flatnonzero(r)[:3], [-1] * max(0, 3 - np.count_nonzero(r))])
          for r in rows]
  _check(got, np.array(want, np.int32).reshape(shape[0], 3))


def test_nonzero_like_jax():
  x = jnp.array([[3, 1, 3], [2, 0, 0]])
  r = jnp.nonzero(x, size=6, fill_value=(7, 8))
  _check(r[0], np.array([0, 0, 0, 1, 7, 7], np.int32))
  _check(r[1], np.array([0, 1, 2, 0, 8, 8], np.int32))
  with pytest.raises(ValueError, match="0d"):
    jnp.nonzero(jnp.array(3))
  assert jnp.argwhere(jnp.array(3)).shape == (1, 0)
  assert jnp.argwhere(jnp.array(0)).shape == (0, 0)
  with pytest.raises(errors.ConcretizationTypeError, match="size"):
    ourjax.jit(jnp.nonzero)(x)
  with pytest.raises(ValueError, match="fill_value"):
    jnp.nonzero(x, size=3, fill_value=(1, 2, 3))


@given(shape=_shape(1, 3), data=st.data())
def test_compress_extract(shape, data):
  X = _x(shape)
  axis = data.draw(st.one_of(st.none(), st.integers(0, len(shape) - 1)))
  n = X.size if axis is None else shape[axis]
  m = data.draw(st.integers(0, n))
  c = np.array(data.draw(st.lists(st.booleans(), min_size=m, max_size=m)), bool)
  _check(jnp.compress(c, X, axis=axis), np.compress(c, X, axis=axis))
  k = data.draw(st.integers(0, m + 1))
  want = np.compress(c, X, axis=axis)
  ax = 0 if axis is None else axis
  got = ourjax.jit(lambda cc, a: jnp.compress(cc, a, axis=axis, size=k, fill_value=-1))(c, X)
  want = np.take(want, np.arange(min(k, want.shape[ax])), axis=ax)
  pad_shape = list(want.shape)
  pad_shape[ax] = k - want.shape[ax]
  _check(got, np.concatenate([want, np.full(pad_shape, -1, np.float32)], axis=ax))
  cond = X > 0
  _check(jnp.extract(cond, X), np.extract(cond, X))
  _check(jnp.extract(cond, X, size=3),
         np.concatenate([np.extract(cond, X), np.zeros(3, np.float32)])[:3])


def test_compress_errors():
  with pytest.raises(ValueError, match="out of bounds"):
    jnp.compress(jnp.array([1, 0, 1, 1, 1]), jnp.arange(4))
  _check(jnp.compress(jnp.array([1, 0, 1, 1, 0]), jnp.arange(4)), np.array([0, 2, 3], np.int32))
  with pytest.raises(ValueError, match="1D"):
    jnp.compress(jnp.ones((2, 2), bool), jnp.arange(4))


# ------------------------------------------------------------------------------------------------
# unique


@given(shape=_shape(0, 2, 5), data=st.data())
def test_unique(shape, data):
  size = int(np.prod(shape, dtype=int))
  X = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, -2.0, 3.5, np.nan]),
                                  min_size=size, max_size=size)), np.float32).reshape(shape)
  flags = dict(return_index=True, return_inverse=True, return_counts=True)
  got = jnp.unique(X, **flags)
  want = np.unique(X, **flags)       # NumPy also keeps one NaN (equal_nan=True)
  for g, w in zip(got, want):
    w = w.astype(np.int32) if w.dtype.kind == "i" else w
    _check(g, w.reshape(X.shape) if g.ndim == X.ndim and w.size == X.size and X.ndim > 1 else w)
  _check(jnp.unique(X), want[0])
  _check(jnp.unique(X, equal_nan=False), np.unique(X, equal_nan=False))
  # with a static size under jit: cut or padded (values with the smallest, counts with 0)
  u = want[0]
  k = data.draw(st.integers(1, 8))
  if X.size == 0:
    got = ourjax.jit(lambda a: jnp.unique(a, size=k, fill_value=9.0))(X)
    _check(got, np.full(k, 9.0, np.float32))
    return
  vals, idx, inv, cnt = ourjax.jit(lambda a: jnp.unique(a, size=k, **flags))(X)
  pad = max(k - u.size, 0)
  _check(vals, np.concatenate([u[:k], np.full(pad, u[0])]).astype(np.float32))
  _check(idx, np.concatenate([want[1][:k], np.full(pad, want[1][0])]).astype(np.int32))
  _check(cnt, np.concatenate([want[3][:k], np.zeros(pad)]).astype(np.int32))
  _check(inv, want[2].reshape(X.shape).astype(np.int32))


@given(shape=_shape(2, 3, 4), data=st.data())
def test_unique_axis(shape, data):
  size = int(np.prod(shape, dtype=int))
  X = np.array(data.draw(st.lists(st.integers(0, 1), min_size=size, max_size=size)),
               np.int32).reshape(shape)
  axis = data.draw(st.integers(0, len(shape) - 1))
  flags = dict(return_index=True, return_inverse=True, return_counts=True)
  got = jnp.unique(X, axis=axis, **flags)
  want = np.unique(X, axis=axis, **flags)
  for g, w in zip(got, want):
    _check(g, w.astype(np.int32).reshape(g.shape) if w.ndim <= 1 else w.astype(np.int32))


def test_unique_like_jax():
  x = jnp.array([[3, 1, 3], [2, 1, 0]])
  vals, idx, inv, cnt = jnp.unique(x, return_index=True, return_inverse=True,
                                   return_counts=True, size=6, fill_value=-1)
  _check(vals, np.array([0, 1, 2, 3, -1, -1], np.int32))
  _check(idx, np.array([5, 1, 3, 0, 5, 5], np.int32))
  _check(inv, np.array([[3, 1, 3], [2, 1, 0]], np.int32))
  _check(cnt, np.array([1, 2, 1, 2, 0, 0], np.int32))
  _check(jnp.unique(jnp.array(2.0)), np.array([2.0], np.float32))
  with pytest.raises(errors.ConcretizationTypeError, match="size"):
    ourjax.jit(jnp.unique)(x)
  with pytest.raises(ValueError, match="fill_value"):
    jnp.unique(jnp.zeros(0), size=2)


# ------------------------------------------------------------------------------------------------
# choose, ix_, unravel_index, ravel_multi_index


@given(data=st.data(), mode=st.sampled_from(["raise", "wrap", "clip"]))
def test_choose(data, mode):
  n = data.draw(st.integers(1, 4))
  shape = data.draw(_shape(0, 2, 3))
  size = int(np.prod(shape, dtype=int))
  lo, hi = (0, n - 1) if mode == "raise" else (-n - 2, n + 2)
  a = np.array(data.draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size)),
               np.int32).reshape(shape)
  choices = [(np.arange(4, dtype=np.float32) + 10 * k).reshape(1, 4)[:, :shape[-1]]
             if shape and shape[-1] <= 4 else np.float32(10 * k) for k in range(n)]
  want = np.choose(a, choices, mode=mode)
  _check(jnp.choose(a, choices, mode=mode), want.astype(np.float32))
  if mode != "raise":
    _check(ourjax.jit(lambda x: jnp.choose(x, choices, mode=mode))(a), want)


def test_choose_errors():
  c = [jnp.arange(4), jnp.arange(4) * 10]
  with pytest.raises(ValueError, match="invalid entry"):
    jnp.choose(jnp.array([0, 2, 0, 1]), c)
  with pytest.raises(errors.ConcretizationTypeError, match="mode='raise'"):
    ourjax.jit(lambda a: jnp.choose(a, c))(jnp.array([0, 1, 0, 1]))


def test_ix_():
  a, b = np.array([0, 2]), np.array([1, 3, 0])
  X = _x((3, 4))
  for g, w in zip(jnp.ix_(a, b), np.ix_(a, b)):
    _check(g, w.astype(np.int32))
  _check(jnp.asarray(X)[jnp.ix_(a, b)], X[np.ix_(a, b)])
  assert jnp.ix_() == ()
  with pytest.raises(NotImplementedError):
    jnp.ix_(np.array([True, False]))
  with pytest.raises(ValueError, match="1-dimensional"):
    jnp.ix_(np.zeros((2, 2), np.int32))


@given(dims=_shape(1, 3), data=st.data())
def test_unravel_and_ravel_multi_index(dims, data):
  size = int(np.prod(dims, dtype=int))
  if size == 0:
    return
  i = np.array(data.draw(st.lists(st.integers(0, size - 1), min_size=0, max_size=6)), np.int32)
  for g, w in zip(jnp.unravel_index(i, dims), np.unravel_index(i, dims)):
    _check(g, w.astype(np.int32))
  coords = np.unravel_index(i, dims)
  for order in ("C", "F"):
    want = np.ravel_multi_index(coords, dims, order=order).astype(np.int32)
    _check(jnp.ravel_multi_index(coords, dims, order=order), want)
    _check(ourjax.jit(lambda *c: jnp.ravel_multi_index(c, dims, mode="clip", order=order))(
        *coords), want)
  # out of range: unravel clips (negatives count from the end); ravel wraps or clips
  j = np.array([-1, -size - 3, size, size + 5], np.int32)
  jw = np.clip(j, -size, size - 1)
  jw = np.where(jw < 0, jw + size, jw)
  for g, w in zip(jnp.unravel_index(j, dims), np.unravel_index(jw, dims)):
    _check(g, w.astype(np.int32))
  big = tuple(np.array([d, -1, 2 * d + 1], np.int32) for d in dims)
  _check(jnp.ravel_multi_index(big, dims, mode="wrap"),
         np.ravel_multi_index(big, dims, mode="wrap").astype(np.int32))
  _check(jnp.ravel_multi_index(big, dims, mode="clip"),
         np.ravel_multi_index(big, dims, mode="clip").astype(np.int32))
  with pytest.raises(ValueError, match="invalid entry"):
    jnp.ravel_multi_index(big, dims)


def test_ravel_multi_index_errors():
  with pytest.raises(ValueError, match="length"):
    jnp.ravel_multi_index((np.array([0]),), (2, 3))
  with pytest.raises(errors.ConcretizationTypeError, match="mode='raise'"):
    ourjax.jit(lambda i: jnp.ravel_multi_index((i, i), (3, 4)))(jnp.array([1]))
  with pytest.raises(TypeError, match="int"):
    jnp.ravel_multi_index((np.array([0.0]), np.array([1])), (2, 3))


def test_at_get_fill_under_jit_vmap_grad():
  # a composition: vmap over rows of grad of a gather-based loss, jitted
  X = _x((3, 5))
  idx = np.array([[0, 4], [1, 1], [3, 2]], np.int32)

  def loss(row, i):
    return (row.at[i].get(mode="fill", fill_value=0.0) ** 2).sum()
  got = ourjax.jit(ourjax.vmap(ourjax.grad(loss)))(X, idx)
  want = np.zeros_like(X)
  for r in range(3):
    np.add.at(want[r], idx[r], 2 * X[r, idx[r]])
  _check(got, want)


# ------------------------------------------------------------------------------------------------
# put_along_axis, place


@given(shape=_shape(1, 3, 4).filter(lambda s: all(s)), data=st.data())
def test_put_along_axis(shape, data):
  X = _x(shape)
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  n = shape[axis]
  ishape = list(shape)
  ishape[axis] = data.draw(st.integers(1, n))
  # distinct positions along the axis (duplicates leave which write wins unspecified)
  perm = np.argsort(np.random.default_rng(data.draw(st.integers(0, 99))).random(shape), axis)
  idx = np.take(perm, np.arange(ishape[axis]), axis=axis).astype(np.int32)
  idx = np.where(data.draw(st.booleans()), idx - n, idx)     # negative indices count from the end
  vals = np.arange(idx.size, dtype=np.float32).reshape(idx.shape) + 100
  want = X.copy()
  np.put_along_axis(want, idx, vals, axis)
  _check(jnp.put_along_axis(X, idx, vals, axis, inplace=False), want)
  want = X.copy()
  np.put_along_axis(want, idx, np.float32(-1), axis)           # a scalar broadcasts
  _check(jnp.put_along_axis(X, idx, -1.0, axis, inplace=False), want)
  want = X.reshape(-1).copy()
  flat = np.arange(min(3, X.size), dtype=np.int32)
  np.put_along_axis(want, flat, np.float32(7), None)
  _check(jnp.put_along_axis(X, flat, 7.0, None, inplace=False), want.reshape(shape))


def test_put_along_axis_jit_grad_and_errors():
  X = _x((3, 4))
  idx = np.array([[1], [0], [3]], np.int32)
  f = ourjax.jit(lambda a, v: jnp.put_along_axis(a, idx, v, 1, inplace=False))
  want = X.copy()
  np.put_along_axis(want, idx, np.float32(5), 1)
  _check(f(X, np.float32(5)), want)
  # the gradient: zero where overwritten; the value's is the sum over its copies
  ga, gv = ourjax.grad(lambda a, v: (jnp.put_along_axis(a, idx, v, 1, inplace=False) ** 2)
                       .sum(), argnums=(0, 1))(X, np.float32(2))
  mask = np.ones_like(X)
  np.put_along_axis(mask, idx, np.float32(0), 1)
  _check(ga, 2 * X * mask)
  _check(gv, np.array(12, np.float32))
  with pytest.raises(ValueError, match="in-place"):
    jnp.put_along_axis(X, idx, 1.0, 1)
  with pytest.raises(ValueError, match="ndim"):
    jnp.put_along_axis(X, idx[:, 0], 1.0, 1, inplace=False)
  with pytest.raises(ValueError, match="broadcastable"):
    jnp.put_along_axis(X, idx, np.ones(2), 1, inplace=False)


@given(shape=_shape(0, 3, 4), data=st.data())
def test_place(shape, data):
  X = _x(shape)
  mask = np.array(data.draw(st.lists(st.booleans(), min_size=X.size, max_size=X.size)),
                  bool).reshape(shape)
  vals = np.arange(data.draw(st.integers(1, 4)), dtype=np.float32) - 10
  want = X.copy()
  np.place(want, mask, vals)
  _check(jnp.place(X, mask, vals, inplace=False), want)
  _check(ourjax.jit(lambda a, m: jnp.place(a, m, vals, inplace=False))(X, mask), want)


def test_place_errors():
  X = _x((2, 3))
  with pytest.raises(ValueError, match="in-place"):
    jnp.place(X, X > 0, 1.0)
  with pytest.raises(ValueError, match="same size"):
    jnp.place(X, np.array([True]), 1.0, inplace=False)
  with pytest.raises(ValueError, match="empty"):
    jnp.place(X, X > 0, np.zeros(0), inplace=False)


@given(data=st.data())
def test_grad_of_out_of_bounds_indexing_drops_cotangents(data):
  """x[idx] with out-of-bounds integer indices (after negative ones are wrapped once): the
  values clamp, as JAX's, and the gradient drops those cotangents, as JAX's (mode
  promise_in_bounds: its transpose is a scatter-add that skips them); x.at[idx].get(mode="clip")
  sends them to the clamped element."""
  n = data.draw(st.integers(1, 6), label="n")
  idx = np.array(data.draw(st.lists(st.integers(-2 * n, 2 * n), min_size=1, max_size=7),
                           label="idx"), np.int32)
  w = np.arange(1, idx.size + 1, dtype=np.float32) * 10.0 ** np.arange(idx.size) % 997
  x = np.arange(n, dtype=np.float32) + 1
  wrapped = np.where(idx < 0, idx + n, idx)
  inb = (wrapped >= 0) & (wrapped < n)
  clamped = np.clip(wrapped, 0, n - 1)
  np.testing.assert_array_equal(np.asarray(jnp.asarray(x)[idx]), x[clamped])
  want = np.zeros(n, np.float32)
  np.add.at(want, wrapped[inb], w[inb])
  for fn in (lambda f: f, ourjax.jit):
    g = fn(ourjax.grad(lambda v: jnp.sum(v[idx] * w)))(x)
    np.testing.assert_array_equal(np.asarray(g), want)
  want_clip = np.zeros(n, np.float32)
  np.add.at(want_clip, clamped, w)
  g = ourjax.grad(lambda v: jnp.sum(v.at[idx].get(mode="clip") * w))(x)
  np.testing.assert_array_equal(np.asarray(g), want_clip)


@given(data=st.data())
def test_at_add_multiply_on_bool_arrays(data):
  """bool_arr.at[i].add(v) / .mul(v) with integer values run, as in JAX: computed in the
  promoted dtype and cast back to bool (True + 1 is True, True + -1 and True * 0 are False);
  with bool values they are an error, as in JAX.  Eager and jitted."""
  n = data.draw(st.integers(1, 5), label="n")
  x = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="x"))
  idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4),
                           label="idx"), np.int32)
  v = np.array(data.draw(st.lists(st.integers(-2, 2), min_size=idx.size, max_size=idx.size),
                         label="v"), np.int32)
  want_add, want_mul = x.astype(np.int32), x.astype(np.int32)
  np.add.at(want_add, idx, v)
  np.multiply.at(want_mul, idx, v)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    for fn in (lambda f: f, ourjax.jit):
      got = fn(lambda a, b: jnp.asarray(a).at[idx].add(b))(x, v)
      assert got.dtype == np.bool_
      np.testing.assert_array_equal(np.asarray(got), want_add != 0)
      got = fn(lambda a, b: jnp.asarray(a).at[idx].mul(b))(x, v)
      np.testing.assert_array_equal(np.asarray(got), want_mul != 0)
    first = np.arange(n) == 0
    np.testing.assert_array_equal(np.asarray(jnp.asarray(x).at[0].add(1)), x | first)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(x).at[0].mul(0)), x & ~first)
  with pytest.raises(TypeError):
    jnp.asarray(x).at[0].add(True)


@pytest.mark.parametrize("method", ["add", "mul", "max", "min", "set"])
def test_at_updates_with_nothing_to_update(method):
  """Zero-size index arrays and empty slices update nothing (as JAX's), eager and jitted."""
  x = np.arange(3, dtype=np.float32) + 1
  empty = np.zeros((0,), np.int32)
  for fn in (lambda f: f, ourjax.jit):
    got = fn(lambda a: getattr(jnp.asarray(a).at[empty], method)(2.0))(x)
    np.testing.assert_array_equal(np.asarray(got), x)
    got = fn(lambda a: getattr(jnp.asarray(a).at[3:], method)(jnp.ones(0)))(x)
    np.testing.assert_array_equal(np.asarray(got), x)
    got = fn(lambda a: getattr(jnp.asarray(a[:1]).at[1:], method)(jnp.ones(0)))(x)
    np.testing.assert_array_equal(np.asarray(got), x[:1])


@pytest.mark.parametrize("shape,idx", [
    ((2, 3, 4), (slice(None), 0, Ellipsis, np.array([0]))),
    ((2, 3, 4, 5), (slice(None), 0, Ellipsis, 0, np.array([0, 2]))),
    ((0, 1, 1, 1), (slice(None), 0, Ellipsis, 0, np.array([0]))),
    ((2, 3, 4), (slice(None), np.array([0, 1]), Ellipsis, np.array([1]))),
    ((2, 3), (np.array([0]), Ellipsis, np.array([1]))),
    ((2, 3, 4), (Ellipsis, np.array([1]), 0)),
])
def test_an_ellipsis_of_no_axes_separates_advanced_indices(shape, idx):
  """NumPy (and JAX) put the broadcast index dimensions first when an Ellipsis stands between
  advanced indices, even an Ellipsis that stands for no axes (found by the device's run of
  test_getitem_matches_numpy: (1, 0) expected, (0, 1) given)."""
  x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
  want = x[idx]
  _check(jnp.asarray(x)[idx], want)
  _check(ourjax.jit(lambda a: a[idx])(x), want)
  upd = np.full(want.shape, -1.0, np.float32)
  ref = x.copy()
  ref[idx] = upd
  _check(jnp.asarray(x).at[idx].set(upd), ref)


def test_scatter_with_values_the_dtype_cannot_hold_computes_in_the_promoted_dtype():
  # as JAX: x.at[i].op(y) with y not safely castable to x's dtype runs op in the promoted
  # dtype and casts the result back (with a FutureWarning)
  x = jnp.asarray(np.arange(5, dtype=np.int32))
  with pytest.warns(FutureWarning, match="scatter inputs have incompatible types"):
    got = x.at[2].mul(2.5)
  np.testing.assert_array_equal(np.asarray(got), [0, 1, 5, 3, 4])      # 2 * 2.5, not 2 * 2
  assert got.dtype == np.int32
  with pytest.warns(FutureWarning):
    got = (x - 3).at[0].add(0.5)
  np.testing.assert_array_equal(np.asarray(got), [-2, -2, -1, 0, 1])   # trunc(-3 + 0.5)
  with pytest.warns(FutureWarning):
    got = x.at[1].max(1.5)
  np.testing.assert_array_equal(np.asarray(got), [0, 1, 2, 3, 4])      # trunc(max(1, 1.5))
  with pytest.warns(FutureWarning):
    got = jnp.asarray(3).at[()].mul(2.5)
  assert int(got) == 7 and got.weak_type
