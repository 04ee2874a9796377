"""Contractions against NumPy: dot, matmul (1-D rules, batch broadcasting), vdot, vecdot, inner,
outer, tensordot, einsum (explicit/implicit outputs, ellipsis, repeated labels, interleaved
form), kron, trace, diagonal; result dtypes and errors naming the shapes."""
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st
from hypothesis.extra import numpy as hnp

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import ALL, array_of, arrays, bf16, check

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
DTS = [np.dtype(np.int8), I32, np.dtype(np.float16), bf16, F32, np.dtype(np.bool_)]


def _ref(fn, *xs, out):
  """NumPy reference computed in float64 (ints exactly, wrapping to ``out``)."""
  out = np.dtype(out)
  if out.kind in "iu":
    args = [x.astype(np.int64) for x in xs]
  elif out == np.bool_:
    args = [x.astype(np.int64) for x in xs]
    return (fn(*args) != 0)
  else:
    args = [x.astype(np.float64) for x in xs]
  with np.errstate(all="ignore"):
    return np.asarray(fn(*args)).astype(out)


def _tol(dt):
  return {np.dtype(np.float16): 1e-2, bf16: 5e-2}.get(np.dtype(dt), 1e-5)


@st.composite
def pair_dtypes(draw):
  d1 = draw(st.sampled_from(DTS))
  d2 = draw(st.sampled_from([d1, d1, F32, np.dtype(np.int8)]))
  return d1, d2, np.dtype(jnp.promote_types(d1, d2))


@given(data=st.data())
def test_dot(data):
  d1, d2, out = data.draw(pair_dtypes(), label="dtypes")
  na = data.draw(st.integers(0, 3), label="na")
  nb = data.draw(st.integers(0, 3), label="nb")
  k = data.draw(st.integers(0, 3), label="k")
  sa = tuple(data.draw(st.lists(st.integers(0, 3), min_size=max(na - 1, 0),
                                max_size=max(na - 1, 0)), label="sa")) + ((k,) if na else ())
  sb = ()
  if nb == 1:
    sb = (k,)
  elif nb >= 2:
    sb = tuple(data.draw(st.lists(st.integers(0, 3), min_size=nb - 2, max_size=nb - 2),
                         label="sb")) + (k, data.draw(st.integers(0, 3), label="m"))
  if na == 0 or nb == 0:
    sa = sa if na else ()
  a = data.draw(arrays(d1, sa, -4, 4), label="a")
  b = data.draw(arrays(d2, sb, -4, 4), label="b")
  check(jnp.dot(a, b), _ref(np.dot, a, b, out=out), out, rtol=_tol(out), atol=_tol(out))


@given(data=st.data())
def test_matmul(data):
  d1, d2, out = data.draw(pair_dtypes(), label="dtypes")
  assume(out != np.bool_)
  shp = data.draw(hnp.mutually_broadcastable_shapes(signature=np.matmul.signature,
                                                    max_dims=3, max_side=3), label="shapes")
  sa, sb = shp.input_shapes
  a = data.draw(arrays(d1, sa, -4, 4), label="a")
  b = data.draw(arrays(d2, sb, -4, 4), label="b")
  ref = _ref(np.matmul, a, b, out=out)
  check(jnp.matmul(a, b), ref, out, rtol=_tol(out), atol=_tol(out))
  check(jnp.asarray(a) @ b, ref, out, rtol=_tol(out), atol=_tol(out))
  check(a @ jnp.asarray(b), ref, out, rtol=_tol(out), atol=_tol(out))


def test_matmul_errors_and_dtypes():
  with pytest.raises(TypeError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
    jnp.matmul(np.ones((2, 3)), np.ones((4, 5)))
  with pytest.raises(TypeError, match=r"matmul.*\(3,\).*\(4,\)"):
    jnp.matmul(np.ones(3), np.ones(4))
  with pytest.raises(ValueError, match="ndim at least 1"):
    jnp.matmul(np.float32(1), np.ones(3))
  with pytest.raises(ValueError, match=r"batch.*\(2, 1, 2\).*\(3, 2, 2\)"):
    jnp.matmul(np.ones((2, 1, 2)), np.ones((3, 2, 2)))
  with pytest.raises(TypeError, match=r"dot.*\(2, 3\).*\(2, 3\)"):
    jnp.dot(np.ones((2, 3)), np.ones((2, 3)))
  assert jnp.matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8)).dtype == np.int8
  r = jnp.dot(np.ones(3, np.int8), np.ones(3, np.int8), preferred_element_type=np.int32)
  check(r, np.int32(3))
  assert jnp.dot(2.0, 3.0).weak_type


@given(data=st.data())
def test_vdot_inner_outer(data):
  d1, d2, out = data.draw(pair_dtypes(), label="dtypes")
  a = data.draw(array_of([d1], lo=-4, hi=4, max_side=3), label="a")
  b = data.draw(arrays(d2, a.shape, -4, 4), label="b")
  check(jnp.vdot(a, b), _ref(np.vdot, a, b, out=out), out, rtol=_tol(out), atol=_tol(out))
  check(jnp.outer(a, b), _ref(np.outer, a, b, out=out), out, rtol=_tol(out), atol=_tol(out))
  if a.ndim:
    c = data.draw(arrays(d2, (2,) + a.shape[-1:], -4, 4), label="c")
    check(jnp.inner(a, c), _ref(np.inner, a, c, out=out), out, rtol=_tol(out),
          atol=_tol(out))
  else:
    check(jnp.inner(a, b), _ref(np.inner, a, b, out=out), out)


def test_vecdot():
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  b = np.arange(4, dtype=np.float32)
  check(jnp.vecdot(a, b), np.vecdot(a, b))
  check(jnp.vecdot(a, a, axis=1), np.vecdot(a, a, axis=1))
  z = np.array([1 + 2j, 3 - 1j], np.complex64)
  check(jnp.vecdot(z, z), np.vecdot(z, z))


@given(data=st.data())
def test_tensordot(data):
  d1, d2, out = data.draw(pair_dtypes(), label="dtypes")
  a = data.draw(array_of([d1], lo=-3, hi=3, max_dims=4, max_side=3), label="a")
  n = data.draw(st.integers(0, a.ndim), label="n")
  contracted = data.draw(st.permutations(range(a.ndim)), label="perm")[:n]
  # b's contracted axes, in a random order, plus up to two free axes
  free = data.draw(st.lists(st.integers(0, 3), max_size=2), label="free")
  b_axes_order = data.draw(st.permutations(range(n + len(free))), label="border")
  sb = [0] * (n + len(free))
  for i, ax in enumerate(contracted):
    sb[b_axes_order[i]] = a.shape[ax]
  for j, f in enumerate(free):
    sb[b_axes_order[n + j]] = f
  b = data.draw(arrays(d2, tuple(sb), -3, 3), label="b")
  axes = (list(contracted), [b_axes_order[i] for i in range(n)])
  check(jnp.tensordot(a, b, axes), _ref(lambda x, y: np.tensordot(x, y, axes), a, b, out=out),
        out, rtol=_tol(out), atol=_tol(out))
  m = min(a.ndim, b.ndim)
  k = data.draw(st.integers(0, m), label="int axes")
  if a.shape[a.ndim - k:] == b.shape[:k]:
    check(jnp.tensordot(a, b, k), _ref(lambda x, y: np.tensordot(x, y, k), a, b, out=out),
          out, rtol=_tol(out), atol=_tol(out))


def test_tensordot_errors():
  with pytest.raises(TypeError, match="exceeds"):
    jnp.tensordot(np.ones(3), np.ones(3), 2)
  with pytest.raises(TypeError, match="equal length"):
    jnp.tensordot(np.ones((2, 3)), np.ones((3, 2)), ((0, 1), (1,)))
  with pytest.raises(TypeError, match=r"tensordot.*\(2, 3\).*\(2, 3\)"):
    jnp.tensordot(np.ones((2, 3)), np.ones((2, 3)), ((0,), (1,)))
  check(jnp.tensordot(np.ones((2, 3)), np.ones((3, 2)), (1, 0)), np.full((2, 2), 3.0,
                                                                         np.float32))


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]), ("ij->", [(2, 3)]), ("ij->ji", [(2, 3)]), ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(2,), (3,)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]), ("...i,...i", [(2, 3), (3,)]),
    ("i...->...", [(3, 2, 2)]), ("ijk,kl,lm->im", [(2, 3, 4), (4, 2), (2, 3)]),
    ("abc,cd,ad->b", [(2, 3, 4), (4, 5), (2, 5)]), ("iij->j", [(3, 3, 2)]),
    ("ij,ij,ij->i", [(2, 3), (2, 3), (2, 3)]), ("i,i,i", [(3,), (3,), (3,)]),
    ("ba,ca->bc", [(2, 3), (4, 3)]), ("aA,Ab->ab", [(2, 3), (3, 2)]), ("", [()]),
    ("i,->i", [(3,), ()]), ("ij,j->i", [(2, 1), (3,)]), ("...,...", [(2, 3), (2, 3)]),
    ("ijij->ij", [(2, 3, 2, 3)]),
]


@pytest.mark.parametrize("subscripts,shapes_", EINSUM_CASES, ids=[c[0] or "scalar" for c in
                                                                  EINSUM_CASES])
@pytest.mark.parametrize("dt", [F32, I32, np.dtype(np.float16), np.dtype(np.bool_)])
def test_einsum(subscripts, shapes_, dt):
  rng = np.random.default_rng(0)
  ops = [rng.integers(-3, 4, size=s).astype(dt) for s in shapes_]
  ref = _ref(lambda *xs: np.einsum(subscripts, *xs), *ops, out=dt)
  check(jnp.einsum(subscripts, *ops), ref, dt, rtol=_tol(dt), atol=_tol(dt))


def test_einsum_interleaved_and_options():
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  b = np.arange(12, dtype=np.float32).reshape(3, 4)
  check(jnp.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum(a, [0, 1], b, [1, 2], [0, 2]))
  check(jnp.einsum(a, [0, 1], b, [1, 2]), np.einsum(a, [0, 1], b, [1, 2]))
  check(jnp.einsum(a, [Ellipsis, 1], [Ellipsis]), np.einsum(a, [Ellipsis, 1], [Ellipsis]))
  r = jnp.einsum("ij,jk->ik", a.astype(np.int8), b.astype(np.int8),
                 preferred_element_type=np.int32)
  check(r, (a @ b).astype(np.int32))
  f = ourjax.jit(lambda x, y: jnp.einsum("ij,jk->ki", x, y))
  check(f(a, b), (a @ b).T)
  g = ourjax.grad(lambda x: jnp.einsum("ij,ij->", x, x))(a)
  check(g, 2 * a)
  path, _ = jnp.einsum_path("ij,jk,kl", a, b, b.T)
  assert path[0] == "einsum_path"


def test_einsum_errors():
  with pytest.raises(ValueError, match="operand"):
    jnp.einsum("ij,jk->ik", np.ones((2, 3)))
  with pytest.raises(ValueError, match="size of label|differs"):
    jnp.einsum("ij,jk->ik", np.ones((2, 3)), np.ones((4, 2)))
  with pytest.raises(ValueError, match="output subscript"):
    jnp.einsum("ij->k", np.ones((2, 3)))
  with pytest.raises(ValueError, match="names 2 dimensions"):
    jnp.einsum("ij", np.ones(3))
  with pytest.raises(ValueError, match="invalid subscript"):
    jnp.einsum("i1", np.ones((2, 2)))


@given(data=st.data())
def test_kron(data):
  a = data.draw(array_of([F32, I32], lo=-3, hi=3, max_dims=3, max_side=3), label="a")
  b = data.draw(array_of([a.dtype], lo=-3, hi=3, max_dims=3, max_side=3), label="b")
  check(jnp.kron(a, b), np.kron(a, b))


@given(data=st.data())
def test_trace_diagonal(data):
  x = data.draw(array_of(ALL, lo=-5, hi=5, min_dims=2, max_dims=4), label="x")
  nd = x.ndim
  a1, a2 = data.draw(st.permutations(range(nd)), label="axes")[:2]
  a1 = a1 - nd if data.draw(st.booleans(), label="neg") else a1
  off = data.draw(st.integers(-4, 4), label="offset")
  xr = x.astype(np.float32) if x.dtype == bf16 else x
  ref = np.diagonal(xr, off, a1, a2)
  check(jnp.diagonal(x, off, a1, a2), ref.astype(x.dtype), x.dtype)
  check(jnp.asarray(x).diagonal(off, a1, a2), ref.astype(x.dtype), x.dtype)
  if x.dtype not in (bf16, np.dtype(np.float16)):
    out = {np.dtype(np.bool_): I32, np.dtype(np.int8): I32, np.dtype(np.int16): I32,
           np.dtype(np.uint8): np.dtype(np.uint32)}.get(x.dtype, x.dtype)
    check(jnp.trace(x, off, a1, a2), np.trace(x, off, a1, a2, dtype=out), out)


def test_diagonal_errors():
  with pytest.raises(ValueError, match="two dimensions"):
    jnp.diagonal(np.ones(3))
  with pytest.raises(ValueError, match="axis1 and axis2 can not be same"):
    jnp.diagonal(np.ones((2, 2)), 0, 1, 1)
  with pytest.raises(ValueError, match="axis 2"):
    jnp.diagonal(np.ones((2, 2)), 0, 0, 2)


def test_contractions_under_vmap_and_grad():
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  b = np.arange(8, dtype=np.float32).reshape(4, 2)
  check(ourjax.vmap(jnp.matmul, in_axes=(0, None))(a, b), a @ b)
  check(ourjax.vmap(lambda x: jnp.einsum("ij,jk->ik", x, b))(a), a @ b)
  check(ourjax.vmap(jnp.trace)(a[:, :, :3]), np.trace(a[:, :, :3], axis1=1, axis2=2))
  g = ourjax.grad(lambda x: jnp.sum(jnp.dot(x, b)))(a[0])
  check(g, np.broadcast_to(b.sum(1), (3, 4)))


@given(data=st.data())
def test_matvec_vecmat(data):
  n, m = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
  b1, b2 = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2,
                                                       max_side=3)).input_shapes
  mat = data.draw(arrays(np.float32, b1 + (n, m), lo=-3, hi=3))
  vec = data.draw(arrays(np.float32, b2 + (m,), lo=-3, hi=3))
  check(jnp.matvec(mat, vec), np.matvec(mat, vec), rtol=1e-5, atol=1e-5)
  vec = data.draw(arrays(np.float32, b2 + (n,), lo=-3, hi=3))
  check(jnp.vecmat(vec, mat), np.vecmat(vec, mat), rtol=1e-5, atol=1e-5)


def test_matvec_vecmat_complex_jit_errors():
  a = (np.arange(6).reshape(2, 3) + 1j).astype(np.complex64)
  v = np.array([1j, 2.0, -1], np.complex64)
  check(jnp.matvec(a, v), np.matvec(a, v), rtol=1e-6, atol=1e-6)
  check(jnp.vecmat(v[:2], a), np.vecmat(v[:2], a), rtol=1e-6, atol=1e-6)   # conjugates v
  check(ourjax.jit(jnp.matvec)(np.ones((2, 3), np.int32), np.arange(3, dtype=np.int32)),
        np.array([3, 3], np.int32))
  check(ourjax.grad(lambda x: jnp.vecmat(x, np.ones((2, 3), np.float32)).sum())(
      np.ones(2, np.float32)), np.full(2, 3, np.float32))
  with pytest.raises(ValueError):
    jnp.matvec(np.ones(3), np.ones(3))
  with pytest.raises(ValueError):
    jnp.vecmat(np.ones(3), np.ones((2, 3)))


def test_lstsq_residual_shapes_and_rank_type_as_jax():
  """A vector b is one column: residuals of shape (1,), the squared norm of b - a x (also for
  systems that are not tall, unless numpy_resid); the rank has the default int type."""
  rng = np.random.default_rng(3)
  a = rng.standard_normal((6, 3)).astype(np.float32)
  b = rng.standard_normal(6).astype(np.float32)
  x, resid, rank, s = jnp.linalg.lstsq(a, b)
  want = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64), rcond=None)
  assert x.shape == (3,) and resid.shape == (1,) and rank.dtype == np.int32 and rank == 3
  np.testing.assert_allclose(resid, want[1], rtol=1e-4)
  _, resid2, _, _ = jnp.linalg.lstsq(a, b[:, None])
  assert resid2.shape == (1,)
  _, wide, _, _ = jnp.linalg.lstsq(a[:2], b[:2])
  assert wide.shape == (1,) and abs(float(wide[0])) < 1e-8
  assert jnp.linalg.lstsq(a[:2], b[:2], numpy_resid=True)[1].shape == (0,)


_NARROW_PREF = [(np.dtype(np.int8), I32), (np.dtype(np.float16), F32), (bf16, F32),
                (np.dtype("float8_e4m3fn"), F32)]


@given(st.sampled_from(["ij,jk->ik", "bij,bjk->bik", "ij,jk->i", "ij,kj->", "i,i->"]),
       st.sampled_from(_NARROW_PREF), st.integers(1, 9), st.integers(0, 2 ** 16))
def test_einsum_preferred_element_type_accumulates_wide(subscripts, dts, n, seed):
  """As JAX's: narrow operands are contracted (and their unused labels summed) in the preferred
  type, not contracted in their own type and converted after (int8 sums would wrap, float8
  ones round to 3 bits)."""
  src, pref = dts
  rng = np.random.default_rng(seed)
  dims = {"i": n, "j": 2 * n + 3, "k": n + 1, "b": 2}
  ins = subscripts.split("->")[0].split(",")
  if src.kind == "i":
    ops = [rng.integers(-100, 100, size=[dims[c] for c in s]).astype(src) for s in ins]
  else:
    ops = [(rng.standard_normal([dims[c] for c in s]) * 4).astype(np.float32).astype(src)
           for s in ins]
  ins_, out_ = subscripts.split("->")
  summed_alone = any(c not in out_ and sum(c in t for t in ins_.split(",")) == 1 for c in ins_)
  if src.itemsize == 1 and src.kind not in "iu" and summed_alone:    # (float8)
    # a label summed within one operand is summed in the preferred type, and float8 does not
    # promote implicitly: JAX's TypePromotionError
    with pytest.raises(ourjax.dtypes.TypePromotionError):
      jnp.einsum(subscripts, *ops, preferred_element_type=pref)
    return
  want = np.einsum(subscripts, *[o.astype(np.int64 if src.kind == "i" else np.float64)
                                 for o in ops])
  got = jnp.einsum(subscripts, *ops, preferred_element_type=pref)
  assert got.dtype == pref
  if src.kind == "i":
    np.testing.assert_array_equal(np.asarray(got), want.astype(pref))
  else:
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5,
                               atol=1e-5 * max(1.0, float(np.abs(want).max())))
  jaxpr = ourjax.make_jaxpr(lambda *xs: jnp.einsum(subscripts, *xs,
                                                   preferred_element_type=pref))(*ops)
  dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
  assert all(e.params["preferred_element_type"] == pref for e in dots), jaxpr
