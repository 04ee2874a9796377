"""lax.ragged_dot(_general), nn.dot_product_attention, lax.mulhi and the bitwise_* names,
against float64 NumPy references written here."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax, nn


def _groups(data, m, g):
  cuts = sorted(data.draw(st.lists(st.integers(0, m), min_size=g, max_size=g)))
  return np.diff([0] + cuts).astype(np.int32)      # sums to cuts[-1] <= m


@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.data())
def test_ragged_dot_matches_a_loop_over_groups(m, k, n, g, data):
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  lhs = rng.normal(size=(m, k)).astype(np.float32)
  rhs = rng.normal(size=(g, k, n)).astype(np.float32)
  gs = _groups(data, m, g)
  want = np.zeros((m, n))
  start = 0
  for i, size in enumerate(gs):
    want[start:start + size] = lhs[start:start + size].astype(np.float64) @ rhs[i]
    start += size
  got = lax.ragged_dot(lhs, rhs, gs)
  assert got.shape == (m, n) and got.dtype == np.float32
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ourjax.jit(lax.ragged_dot)(lhs, rhs, gs)), want,
                             rtol=1e-5, atol=1e-5)
  # d/dlhs of sum(out * w): row j of group i gets w[j] @ rhs[i].T; rows past the groups, 0
  w = rng.normal(size=(m, n)).astype(np.float32)
  dl = ourjax.grad(lambda a: (lax.ragged_dot(a, rhs, gs) * w).sum())(lhs)
  want_dl = np.zeros((m, k))
  start = 0
  for i, size in enumerate(gs):
    want_dl[start:start + size] = w[start:start + size].astype(np.float64) @ rhs[i].T
    start += size
  np.testing.assert_allclose(np.asarray(dl), want_dl, rtol=1e-5, atol=1e-5)


@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 3), st.data())
def test_ragged_dot_general_contracting_and_vmap(b, k, g, data):
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  lhs = rng.normal(size=(b, 3, k)).astype(np.float32)
  rhs = rng.normal(size=(b, k, 2)).astype(np.float32)
  gs = np.stack([_groups(data, k, g) for _ in range(b)])
  dn = lax.RaggedDotDimensionNumbers((([2], [1]), ([0], [0])), [2], [])
  got = lax.ragged_dot_general(lhs, rhs, gs, dn)
  want = np.zeros((g, b, 3, 2))
  for j in range(b):
    start = 0
    for i, size in enumerate(gs[j]):
      want[i, j] = lhs[j, :, start:start + size].astype(np.float64) @ rhs[j, start:start + size]
      start += size
  assert got.shape == (g, b, 3, 2)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  # vmap of ragged_dot over a batch of problems equals the problems one by one
  lhs2 = rng.normal(size=(b, 4, k)).astype(np.float32)
  rhs2 = rng.normal(size=(b, g, k, 2)).astype(np.float32)
  gs2 = np.stack([_groups(data, 4, g) for _ in range(b)])
  batched = ourjax.vmap(lax.ragged_dot)(lhs2, rhs2, gs2)
  for j in range(b):
    np.testing.assert_allclose(np.asarray(batched[j]),
                               np.asarray(lax.ragged_dot(lhs2[j], rhs2[j], gs2[j])),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lhs_shape,rhs_shape,gs_shape,dn,msg", [
    ((11, 5), (3, 5, 7), (3,), ((([1], [1]), ([], [])), [0, 1], [0]), "exactly one lhs ragged"),
    ((11, 5), (3, 5, 7), (2, 3), ((([1], [1]), ([], [])), [0], [0]),
     r"expected group_sizes to have shape \(3,\), got \(2, 3\)"),
    ((11, 5), (3, 5, 7), (2,), ((([1], [1]), ([], [])), [0], [0]),
     "expected rhs group dimension size to be 2, got 3"),
    ((11, 5), (5, 7), (3,), ((([1], [0]), ([], [])), [0], []), "exactly one rhs group"),
    ((11, 5), (3, 5, 7), (3,), ((([1], [1]), ([], [])), [1], [0]), "zero group dimensions"),
])
def test_ragged_dot_general_shape_errors(lhs_shape, rhs_shape, gs_shape, dn, msg):
  with pytest.raises(TypeError, match=msg):
    lax.ragged_dot_general(jnp.ones(lhs_shape), jnp.ones(rhs_shape),
                           jnp.ones(gs_shape, jnp.int32), lax.RaggedDotDimensionNumbers(*dn))


def _attention_reference(q, k, v, bias, keep, scale):
  """float64 loops: q [B,T,N,H], k/v [B,S,K,H], keep [B,N,T,S] booleans."""
  B, T, N, H = q.shape
  K = k.shape[2]
  out = np.zeros((B, T, N, H))
  lse = np.zeros((B, T, N))
  for b in range(B):
    for n in range(N):
      kh = n // (N // K)
      logits = q[b, :, n].astype(np.float64) @ k[b, :, kh].T.astype(np.float64) * scale
      logits = logits + bias[b, n]
      logits = np.where(keep[b, n], logits, -0.7 * np.finfo(np.float32).max)
      mx = logits.max(-1, keepdims=True)
      e = np.exp(logits - mx)
      out[b, :, n] = (e / e.sum(-1, keepdims=True)) @ v[b, :, kh]
      lse[b, :, n] = np.log(e.sum(-1)) + mx[:, 0]
  return out, lse


@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4), st.sampled_from([(2, 1), (2, 2), (4, 2)]),
       st.booleans(), st.booleans(), st.integers(0, 2**31))
def test_dot_product_attention_matches_loops(B, T, S, heads, causal, use_mask, seed):
  N, K = heads
  H = 3
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, T, N, H)).astype(np.float32)
  k = rng.normal(size=(B, S, K, H)).astype(np.float32)
  v = rng.normal(size=(B, S, K, H)).astype(np.float32)
  bias = rng.normal(size=(1, N, T, S)).astype(np.float32)
  mask = rng.random((B, 1, T, S)) > 0.3 if use_mask else None
  keep = np.ones((B, N, T, S), bool)
  if use_mask:
    keep &= mask
  if causal:
    keep &= np.tril(np.ones((T, S), bool))
  out, lse = nn.dot_product_attention(q, k, v, bias, mask, is_causal=causal,
                                      return_residual=True)
  want, want_lse = _attention_reference(q, k, v, np.broadcast_to(bias, (B, N, T, S)), keep,
                                        1 / np.sqrt(H))
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-5, atol=2e-5)
  np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=2e-5, atol=2e-5)


def test_dot_product_attention_padding_window_unbatched_and_grad():
  rng = np.random.default_rng(1)
  q = rng.normal(size=(2, 5, 2, 3)).astype(np.float32)
  k = rng.normal(size=(2, 6, 2, 3)).astype(np.float32)
  v = rng.normal(size=(2, 6, 2, 3)).astype(np.float32)
  qlen, kvlen = np.array([3, 5], np.int32), np.array([2, 6], np.int32)
  out = nn.dot_product_attention(q, k, v, query_seq_lengths=qlen, key_value_seq_lengths=kvlen,
                                 local_window_size=(1, 2), scale=0.5)
  t, s = np.arange(5)[:, None], np.arange(6)[None, :]
  keep = np.broadcast_to((t <= s + 1) & (t >= s - 2), (2, 2, 5, 6)).copy()
  for b in range(2):
    keep[b, :, :, kvlen[b]:] = False
    keep[b, :, qlen[b]:, :] = False
  want, _ = _attention_reference(q, k, v, np.zeros((2, 2, 5, 6)), keep, 0.5)
  for b in range(2):
    want[b, qlen[b]:] = 0                      # padded query rows are zeros
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-5, atol=2e-5)
  one = nn.dot_product_attention(q[0], k[0], v[0])
  np.testing.assert_allclose(np.asarray(one), np.asarray(nn.dot_product_attention(q, k, v)[0]),
                             rtol=1e-6, atol=1e-6)
  # the gradient against central differences in float64-free form: a directional check
  f = lambda a: (nn.dot_product_attention(a, k, v, is_causal=True) ** 2).sum()  # noqa: E731
  g = np.asarray(ourjax.grad(f)(q))
  d = rng.normal(size=q.shape).astype(np.float32)
  eps = 1e-2
  num = (float(f(q + eps * d)) - float(f(q - eps * d))) / (2 * eps)
  np.testing.assert_allclose((g * d).sum(), num, rtol=2e-2, atol=2e-3)


int_dtypes = st.sampled_from([np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32])


@given(int_dtypes, st.data())
def test_mulhi_is_the_high_half_of_the_wide_product(dt, data):
  info = np.iinfo(dt)
  xs = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=8))
  ys = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=len(xs),
                          max_size=len(xs)))
  bits = 8 * np.dtype(dt).itemsize
  want = np.array([(a * b) >> bits for a, b in zip(xs, ys)], dtype=np.int64).astype(dt)
  got = lax.mulhi(np.array(xs, dt), np.array(ys, dt))
  assert got.dtype == dt
  np.testing.assert_array_equal(np.asarray(got), want)


@given(st.lists(st.integers(-128, 127), min_size=1, max_size=6), st.integers(-128, 127))
def test_bitwise_names(xs, y):
  x = np.array(xs, np.int8)
  yy = np.full_like(x, y)
  np.testing.assert_array_equal(np.asarray(lax.bitwise_and(x, yy)), x & yy)
  np.testing.assert_array_equal(np.asarray(lax.bitwise_or(x, yy)), x | yy)
  np.testing.assert_array_equal(np.asarray(lax.bitwise_xor(x, yy)), x ^ yy)
  np.testing.assert_array_equal(np.asarray(lax.bitwise_not(x)), ~x)
