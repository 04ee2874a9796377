"""The backward of fused attention: ``lowering/passes/attention_grad.py`` turns the gradients of
``softmax(q kᵀ * scale) v`` (through ``nn.softmax``) into one ``attention-grad`` instruction,
the reference evaluates it as the unfused backward, and the GPU's two ``FlashAttentionGrad``
kernels (``backends/cuda/attention_grad.py``) compute it (their PTX assembled here; their
numbers checked on a GPU).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends import reference
from ourjax.backends.cuda import attention as cuda_attention, attention_grad as cuda_grad
from ourjax.lowering import from_jaxpr, pipeline
from ourjax.lowering.passes import attention

from test_ptx import PTXAS, _assemble


def _attention(kind, scale=0.5):
  def f(q, k, v, extra):
    T, S = q.shape[-2], k.shape[-2]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if kind == "causal":
      s = jnp.where(jnp.tril(jnp.ones((T, S), dtype=bool)), s, -1e9)
    elif kind == "bias":
      s = s + extra
    elif kind == "padding":
      s = jnp.where((jnp.arange(S)[None, :] < extra[:, None])[:, None, None, :], s, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
  return f


def _loss(kind, argnums=(0, 1, 2), scale=0.5):
  att = _attention(kind, scale)
  # (a non-linear loss: the cotangent of the output differs from element to element)
  return ourjax.grad(lambda q, k, v, e: jnp.sum(jnp.sin(att(q, k, v, e))), argnums=argnums)


def _args(kind, B, H, T, S, D, Dv, seed):
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((B, H, T, D)).astype(np.float32)
  k = rng.standard_normal((B, H, S, D)).astype(np.float32)
  v = rng.standard_normal((B, H, S, Dv)).astype(np.float32)
  extra = {"none": np.zeros((), np.float32), "causal": np.zeros((), np.float32),
           "bias": rng.standard_normal((B, 1, T, S)).astype(np.float32),
           "padding": rng.integers(1, S + 1, B).astype(np.int32)}[kind]
  return q, k, v, extra


def _want(kind, q, k, v, extra, scale=0.5):
  """The gradients in float64, by the formulas: P = softmax(s), dP = dO vᵀ, dS = P (dP -
  rowsum(P dP)) through the mask, times the scale."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  T, S = q.shape[-2], k.shape[-2]
  s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
  keep = np.ones(s.shape, bool)
  if kind == "causal":
    keep = np.broadcast_to(np.tril(np.ones((T, S), bool)), s.shape)
  elif kind == "bias":
    s = s + extra
  elif kind == "padding":
    keep = np.broadcast_to((np.arange(S)[None, :] < extra[:, None])[:, None, None, :], s.shape)
  s = np.where(keep, s, -1e9)
  e = np.exp(s - s.max(-1, keepdims=True))
  p = e / e.sum(-1, keepdims=True)
  o = np.einsum("bhqk,bhkd->bhqd", p, v)
  do = np.cos(o)
  dv = np.einsum("bhqk,bhqd->bhkd", p, do)
  dp = np.einsum("bhqd,bhkd->bhqk", do, v)
  ds = p * (dp - (p * dp).sum(-1, keepdims=True))
  ds = np.where(keep, ds, 0.0) * scale
  return np.einsum("bhqk,bhkd->bhqd", ds, k), np.einsum("bhqk,bhqd->bhkd", ds, q), dv


def _optimized(f, args):
  closed = ourjax.jit(f).trace(*args).jaxpr
  m = from_jaxpr.lower(closed, "attn_grad").module
  m.fused_attention = lambda *a: None
  m.fused_attention_grad = lambda *a: None
  return pipeline.optimize(m, late_passes=[("attention", attention.run)])


def _ops(m):
  return [i.opcode for i in m.entry.instructions]


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(["none", "causal", "bias", "padding"]),
       B=st.integers(1, 2), H=st.integers(2, 3), T=st.integers(2, 9), S=st.integers(2, 9),
       D=st.integers(2, 5), Dv=st.integers(2, 5), scale=st.sampled_from([0.5, 1.0, 0.3]),
       seed=st.integers(0, 2 ** 31))
def test_pass_fuses_the_backward_and_the_reference_keeps_the_gradients(
        kind, B, H, T, S, D, Dv, scale, seed):
  if kind == "causal":
    S = max(S, T)
  args = _args(kind, B, H, T, S, D, Dv, seed)
  m = _optimized(_loss(kind, scale=scale), args)
  ops = _ops(m)
  assert ops.count("attention-grad") == 1 and ops.count("attention") == 1, m.to_string()
  assert "dot" not in ops and "exponential" not in ops, ops
  got = reference.compile(m)(*args)
  for g, w in zip(got, _want(kind, *args, scale=scale)):
    np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


def test_a_differentiated_bias_is_not_fused():
  """The scores' cotangent is the bias's gradient too: it must be written, so the backward
  (and the forward, whose probabilities it reads) stays unfused, and the numbers are right."""
  args = _args("bias", 2, 2, 5, 7, 4, 3, seed=1)
  m = _optimized(_loss("bias", argnums=(0, 3)), args)
  assert "attention-grad" not in _ops(m)
  assert any("backward not fused" in n for n in m.notes), m.notes
  got = reference.compile(m)(*args)
  want = ourjax.jit(_loss("bias", argnums=(0, 3)), backend="reference")(*args)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_hand_written_softmax_backward_is_left_alone():
  def loss(q, k, v, e):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    p = jnp.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    return jnp.sum(jnp.einsum("bhqk,bhkd->bhqd", p, v) ** 2)
  args = _args("none", 1, 2, 4, 5, 3, 3, seed=2)
  m = _optimized(ourjax.grad(loss, argnums=(0, 1, 2)), args)
  assert "attention-grad" not in _ops(m)
  got = reference.compile(m)(*args)
  want = ourjax.jit(ourjax.grad(loss, argnums=(0, 1, 2)), backend="reference")(*args)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_cuda_refusals():
  """The backward takes what the forward takes, 16-bit head sizes in multiples of 16."""
  import ml_dtypes
  f32, bf16 = np.dtype("float32"), np.dtype(ml_dtypes.bfloat16)
  assert cuda_grad.refuses(f32, (2, 8, 16), (2, 8, 16), (2, 8, 16), []) is None
  assert cuda_grad.refuses(bf16, (2, 8, 32), (2, 8, 32), (2, 8, 16), []) is None
  why = cuda_grad.refuses(bf16, (2, 8, 16), (2, 8, 16), (2, 8, 8), [])
  assert why and "16" in why
  assert "element type" in cuda_grad.refuses(np.dtype("float64"), (2, 8, 16), (2, 8, 16),
                                             (2, 8, 16), [])


def _has_gpu():
  try:
    return bool(ourjax.devices("cuda"))
  except Exception:
    return False


CUDA_CASES = [("none", 2, 2, 70, 100, 16, 16), ("causal", 2, 2, 130, 130, 64, 64),
              ("padding", 2, 3, 33, 47, 32, 8), ("bias", 1, 2, 64, 64, 128, 64)]


@pytest.mark.parametrize("case", CUDA_CASES)
def test_cuda_backward_kernels(case):
  kind = case[0]
  args = _args(*case, seed=3)
  f = _loss(kind)
  c = ourjax.jit(f, backend="cuda").lower(*args).compile()
  kinds = [type(k).__name__ for k in c.runtime_executable().kernels]
  assert kinds.count("FlashAttentionGrad") == 2 and "FlashAttention" in kinds, kinds
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))
  if _has_gpu():
    got = [np.asarray(x, np.float64) for x in c(*args)]
    for g, w in zip(got, _want(kind, *args)):
      # tf32 products: normwise, as the model benchmarks check the GPU
      assert np.linalg.norm(g - w) / np.linalg.norm(w) < 1e-2, (kind, g.shape)


def test_cuda_backward_off_with_the_forward():
  import os
  args = _args("none", 1, 2, 16, 16, 8, 8, seed=4)
  old = os.environ.get("OURJAX_CUDA_ATTENTION")
  os.environ["OURJAX_CUDA_ATTENTION"] = "0"
  try:
    assert not cuda_attention.enabled()
    c = ourjax.jit(_loss("none"), backend="cuda").lower(*args).compile()
  finally:
    if old is None:
      del os.environ["OURJAX_CUDA_ATTENTION"]
    else:
      os.environ["OURJAX_CUDA_ATTENTION"] = old
  kinds = [type(k).__name__ for k in c.runtime_executable().kernels]
  assert "FlashAttentionGrad" not in kinds and "FlashAttention" not in kinds, kinds


def test_layers_sharing_the_scale_each_fuse():
  """Two attentions in a row share the broadcast of their scale (one constant after CSE): each
  forward and backward still fuses, and the gradients match the unfused ones."""
  att = _attention("causal")

  def loss(q, k, v, e):
    h = att(q, k, v, e)
    return jnp.sum(jnp.sin(att(h, k, v, e)))
  f = ourjax.grad(loss, argnums=(0, 1, 2))
  args = _args("causal", 2, 2, 6, 6, 4, 4, seed=5)
  m = _optimized(f, args)
  ops = _ops(m)
  assert ops.count("attention-grad") == 2 and ops.count("attention") == 2, m.notes
  got = reference.compile(m)(*args)
  want = ourjax.jit(f, backend="reference")(*args)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("argnums", [(0,), (2,), (0, 2)])
def test_partial_gradients_stay_unfused_and_right(argnums):
  """Gradients of only some of q, k, v: the backward is not the whole pattern (no dk, or no
  dP at all), so nothing of it is rewritten, and the numbers are the unfused ones."""
  args = _args("causal", 2, 2, 5, 5, 3, 4, seed=6)
  f = _loss("causal", argnums=argnums)
  m = _optimized(f, args)
  assert "attention-grad" not in _ops(m)
  got = reference.compile(m)(*args)
  want = ourjax.jit(f, backend="reference")(*args)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", ["plain", "is_causal", "mask", "bias", "grouped"])
def test_dot_product_attention_backward_fuses(kw):
  """``nn.dot_product_attention`` ([B, T, N, H] operands; its einsum gives dv transposed;
  grouped key/value heads repeated for their query heads): the gradients of all three
  operands become one attention-grad, with the unfused numbers; on the GPU its kernels are
  chosen and assemble."""
  rng = np.random.default_rng(7)
  B, T, N, H = 2, 12, 4, 8
  Nk = 2 if kw == "grouped" else N
  q = rng.standard_normal((B, T, N, H)).astype(np.float32)
  k, v = (rng.standard_normal((B, T, Nk, H)).astype(np.float32) for _ in range(2))
  e = {"plain": np.zeros((), np.float32), "is_causal": np.zeros((), np.float32),
       "grouped": np.zeros((), np.float32),
       "mask": np.tril(np.ones((T, T), bool))[None, None],
       "bias": rng.standard_normal((1, N, T, T)).astype(np.float32)}[kw]

  def att(q, k, v, e):
    extra = {"plain": {}, "is_causal": {"is_causal": True}, "mask": {"mask": e},
             "bias": {"bias": e}, "grouped": {"is_causal": True}}[kw]
    return ourjax.nn.dot_product_attention(q, k, v, **extra)
  f = ourjax.grad(lambda q, k, v, e: jnp.sum(jnp.sin(att(q, k, v, e))), argnums=(0, 1, 2))
  args = (q, k, v, e)
  m = _optimized(f, args)
  assert _ops(m).count("attention-grad") == 1, m.notes
  got = reference.compile(m)(*args)
  want = ourjax.jit(f, backend="reference")(*args)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
  c = ourjax.jit(f, backend="cuda").lower(*args).compile()
  kinds = [type(x).__name__ for x in c.runtime_executable().kernels]
  assert kinds.count("FlashAttentionGrad") == 2, kinds
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))
  if _has_gpu():
    for g, w in zip(c(*args), want):
      g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
      assert np.linalg.norm(g - w) / np.linalg.norm(w) < 1e-2


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["none", "causal"])
def test_16bit_backward(dtype, kind):
  """bf16/f16 (the row sums taken in f32): the backward fuses, the reference keeps the unfused
  numbers, the m16n8k16 kernels assemble and, on a GPU, match float64 within 16-bit error."""
  import ml_dtypes  # noqa: F401
  q, k, v, e = _args(kind, 2, 2, 70, 100 if kind == "none" else 70, 64, 32, seed=8)
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  f = _loss(kind)
  m = _optimized(f, (q, k, v, e))
  assert _ops(m).count("attention-grad") == 1, m.notes
  got = reference.compile(m)(q, k, v, e)
  want = ourjax.jit(f, backend="reference")(q, k, v, e)
  # (two chains of 16-bit roundings, ~1% apart from each other normwise)
  for g, w in zip(got, want):
    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
    assert np.linalg.norm(g - w) / np.linalg.norm(w) < 3e-2
  c = ourjax.jit(f, backend="cuda").lower(q, k, v, e).compile()
  kinds = [type(x).__name__ for x in c.runtime_executable().kernels]
  assert kinds.count("FlashAttentionGrad") == 2, kinds
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))
  if _has_gpu():
    exact = _want(kind, *(np.asarray(x, np.float32) for x in (q, k, v)), e)
    for g, w in zip(c(q, k, v, e), exact):
      g = np.asarray(g, np.float64)
      assert np.linalg.norm(g - w) / np.linalg.norm(w) < 3e-2, (kind, dtype, g.shape)
