"""Fused attention: ``lowering/passes/attention.py`` turns ``softmax(q kᵀ * scale) v`` into one
``attention`` instruction where the backend takes it, the reference evaluates that instruction
as the unfused computation, and the GPU's ``FlashAttention`` kernel (``backends/cuda/
attention.py``) computes it (its PTX assembled here; its numbers checked on a GPU).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends import reference
from ourjax.lowering import from_jaxpr, hlo, pipeline
from ourjax.lowering.passes import attention

from test_ptx import PTXAS, _assemble, needs_ptxas


def _attend(scale_kind="divide", k_layout="last", axis_names="bhqd"):
  """(Scales as Python floats: weakly typed, they keep 16-bit scores 16-bit.)"""
  def f(q, k, v):
    d = q.shape[-1]
    kt = jnp.swapaxes(k, -1, -2) if k_layout == "last" else k
    s = jnp.matmul(q, kt)
    if scale_kind == "divide":
      s = s / math.sqrt(d)
    elif scale_kind == "multiply":
      s = 0.3 * s
    return jnp.matmul(ourjax.nn.softmax(s, axis=-1), v)
  return f


def _module(f, *args):
  closed = ourjax.jit(f).trace(*args).jaxpr
  return from_jaxpr.lower(closed, "attn").module


def _optimized(f, args, refuses=lambda *a: None):
  m = _module(f, *args)
  m.fused_attention = refuses
  return pipeline.optimize(m, late_passes=[("attention", attention.run)])


def _opcodes(m):
  return [i.opcode for i in m.entry.instructions]


def _numpy_attention(q, k, v, scale):
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
  e = np.exp(s - s.max(-1, keepdims=True))
  return np.matmul(e / e.sum(-1, keepdims=True), v)


@settings(max_examples=25, deadline=None)
@given(batch=st.lists(st.integers(2, 3), min_size=0, max_size=2), tq=st.integers(2, 9),
       tk=st.integers(2, 9), d=st.integers(2, 6), dv=st.integers(2, 6),
       scale_kind=st.sampled_from(["divide", "multiply", "none"]),
       k_layout=st.sampled_from(["last", "first"]), seed=st.integers(0, 2 ** 31))
def test_pass_fuses_and_the_reference_keeps_the_result(batch, tq, tk, d, dv, scale_kind,
                                                       k_layout, seed):
  # (sizes of 1 are simplified into other ops first: no dots left to match)
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((*batch, tq, d)).astype(np.float32)
  kshape = (*batch, tk, d) if k_layout == "last" else (*batch, d, tk)
  k = rng.standard_normal(kshape).astype(np.float32)
  v = rng.standard_normal((*batch, tk, dv)).astype(np.float32)
  f = _attend(scale_kind, k_layout)
  m = _optimized(f, (q, k, v))
  hlo.verify(m)
  ops = _opcodes(m)
  assert ops.count("attention") == 1 and "dot" not in ops and "exponential" not in ops, ops
  (att,) = [i for i in m.entry.instructions if i.opcode == "attention"]
  scale = {"divide": 1 / math.sqrt(d), "multiply": 0.3, "none": 1.0}[scale_kind]
  assert att.attrs["scale"] == pytest.approx(scale, rel=1e-6)
  got = reference.compile(m)(q, k, v)[0]
  kk = k if k_layout == "last" else np.swapaxes(k, -1, -2)
  want = _numpy_attention(q, kk, v, scale)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  assert any("as one kernel" in n for n in m.notes)


@pytest.mark.parametrize("use_nn", [False, True])
def test_jax_layout_and_dot_product_attention_fuse(use_nn):
  """``[B, T, N, H]`` operands (JAX's layout: heads inside, so the dots' batch dims are not
  leading) and ``nn.dot_product_attention`` become one attention of transposed operands."""
  rng = np.random.default_rng(6)
  B, T, S, N, H = 2, 5, 7, 3, 4
  q = rng.standard_normal((B, T, N, H)).astype(np.float32)
  k = rng.standard_normal((B, S, N, H)).astype(np.float32)
  v = rng.standard_normal((B, S, N, H)).astype(np.float32)

  def f(q, k, v):
    if use_nn:
      return ourjax.nn.dot_product_attention(q, k, v)
    s = jnp.einsum("btnh,bsnh->bnts", q, k) * np.float32(0.5)
    return jnp.einsum("bnts,bsnh->btnh", ourjax.nn.softmax(s, axis=-1), v)
  m = _optimized(f, (q, k, v))
  assert _opcodes(m).count("attention") == 1, m.to_string()
  got = reference.compile(m)(q, k, v)[0]
  scale = 1 / math.sqrt(H) if use_nn else 0.5
  want = _numpy_attention(*(np.swapaxes(x, 1, 2) for x in (q, k, v)), scale)
  np.testing.assert_allclose(got, np.swapaxes(want, 1, 2), rtol=1e-4, atol=1e-5)


def _masked(kind):
  """Attention whose scores a mask or a bias modifies before the softmax."""
  def f(q, k, v, extra):
    T, S = q.shape[-2], k.shape[-2]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 2.0
    if kind == "causal":
      s = jnp.where(jnp.tril(jnp.ones((T, S), dtype=bool)), s, -1e9)
    elif kind == "bias":
      s = s + extra                                   # a [B, 1, T, S] bias, read from memory
    elif kind == "padding":                           # keys past each batch entry's length
      s = jnp.where((jnp.arange(S)[None, :] < extra[:, None])[:, None, None, :], s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
  return f


def _masked_args(kind, B=2, H=3, T=6, S=9, D=4, seed=7):
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((B, H, T, D)).astype(np.float32)
  k = rng.standard_normal((B, H, S, D)).astype(np.float32)
  v = rng.standard_normal((B, H, S, D)).astype(np.float32)
  extra = {"causal": np.zeros((), np.float32),
           "bias": rng.standard_normal((B, 1, T, S)).astype(np.float32),
           "padding": np.array([S, 3] + [S - 1] * (B - 2), np.int32)}[kind]
  return q, k, v, extra


def _masked_want(kind, q, k, v, extra):
  """``_masked(kind)`` in float64 (the CPU attention tests' reference; scale 1/2)."""
  from test_cpu_attention import _want
  return _want(q, k, v, 0.5, kind, extra)


@pytest.mark.parametrize("kind", ["causal", "bias", "padding"])
def test_masks_and_biases_fuse_as_a_scores_computation(kind):
  args = _masked_args(kind)
  m = _optimized(_masked(kind), args)
  hlo.verify(m)
  ops = _opcodes(m)
  assert ops.count("attention") == 1 and "dot" not in ops and "exponential" not in ops, ops
  (att,) = [i for i in m.entry.instructions if i.opcode == "attention"]
  assert att.attrs["calls"].parameters[0].dims == (2, 3, 6, 9)
  # the causal mask is computed from iotas inside; a bias or lengths are read from memory
  assert len(att.operands) == (3 if kind == "causal" else 4)
  got = reference.compile(m)(*args)[0]
  np.testing.assert_allclose(got, _masked_want(kind, *args), rtol=1e-4, atol=1e-5)


def test_causal_masks_are_recognized():
  """The kernel skips key tiles past a block's last row only for masks that hide every key
  after its query: jnp.where(tril), nn.dot_product_attention(is_causal=True), and-ed with
  another mask; not a padding mask or the mirror image of causal."""
  from ourjax.backends.cuda.attention import causal
  args = _masked_args("causal")

  def scores_of(f, *a):
    m = _optimized(f, a)
    (att,) = [i for i in m.entry.instructions if i.opcode == "attention"]
    return att.attrs["calls"]
  assert causal(scores_of(_masked("causal"), *args))
  assert not causal(scores_of(_masked("padding"), *_masked_args("padding")))
  q, k, v = (np.swapaxes(x, 1, 2) for x in args[:3])
  assert causal(scores_of(lambda q, k, v: ourjax.nn.dot_product_attention(q, k, v,
                                                                          is_causal=True),
                          q, k, v))
  lens = np.array([9, 4], np.int32)
  assert causal(scores_of(lambda q, k, v, n: ourjax.nn.dot_product_attention(
      q, k, v, is_causal=True, key_value_seq_lengths=n), q, k, v, lens))

  def mirrored(q, k, v):
    T, S = q.shape[-2], k.shape[-2]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    s = jnp.where(jnp.triu(jnp.ones((T, S), dtype=bool)), s, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
  assert not causal(scores_of(mirrored, *args[:3]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_attention_fuses(dtype):
  """bf16/f16 attention (whose softmax sums in f32: convert(reduce(convert(e)))) becomes one
  attention instruction, and the reference's value stays within the type's precision."""
  import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
  rng = np.random.default_rng(8)
  q, k, v = (rng.standard_normal((2, 3, 6, 16)).astype(dtype) for _ in range(3))
  m = _optimized(_attend("multiply"), (q, k, v))
  assert _opcodes(m).count("attention") == 1 and "exponential" not in _opcodes(m), m.to_string()
  got = np.asarray(reference.compile(m)(q, k, v)[0], np.float64)
  want = _numpy_attention(q, k, v, 0.3)
  assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2


def test_probabilities_read_elsewhere_are_not_fused():
  """A training step's backward pass reads the probabilities: nothing is fused, and the
  reason is noted."""
  rng = np.random.default_rng(1)
  q, k, v = (rng.standard_normal((2, 5, 4)).astype(np.float32) for _ in range(3))

  def f(q, k, v):
    p = ourjax.nn.softmax(jnp.matmul(q, jnp.swapaxes(k, -1, -2)), axis=-1)
    return jnp.matmul(p, v), p
  m = _optimized(f, (q, k, v))
  assert "attention" not in _opcodes(m)
  assert any("not fused" in n and "read elsewhere" in n for n in m.notes), m.notes


def test_backend_refusal_is_noted_and_leaves_the_module():
  rng = np.random.default_rng(2)
  q, k, v = (rng.standard_normal((3, 6, 8)).astype(np.float32) for _ in range(3))
  m = _optimized(_attend(), (q, k, v), refuses=lambda *a: "no kernel for this")
  assert "attention" not in _opcodes(m)
  assert any("not fused: no kernel for this" in n for n in m.notes)


def test_modules_without_a_fused_kernel_are_left_alone():
  rng = np.random.default_rng(3)
  q, k, v = (rng.standard_normal((3, 6, 8)).astype(np.float32) for _ in range(3))
  m = _module(_attend(), q, k, v)
  assert not attention.run(m)        # (Module.fused_attention is None: the CPU, the reference)


def test_jit_on_the_cpu_is_unchanged():
  rng = np.random.default_rng(4)
  q, k, v = (rng.standard_normal((2, 3, 7, 8)).astype(np.float32) for _ in range(3))
  got = ourjax.jit(_attend(), backend="cpu")(q, k, v)
  np.testing.assert_allclose(got, _numpy_attention(q, k, v, 1 / math.sqrt(8)), rtol=1e-4,
                             atol=1e-5)


# -- the GPU kernel --------------------------------------------------------------------------

CUDA_CASES = [   # (q dims, Tk, Dv): tails in Tq and Tk, head sizes 8..128, batch dims 0..2
    ((2, 3, 100, 64), 70, 64),
    ((130, 32), 200, 16),
    ((4, 64, 128), 64, 128),
    ((2, 2, 3, 8), 5, 8),
]


def _cuda_args(qdims, tk, dv, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.standard_normal(qdims).astype(np.float32)
  k = rng.standard_normal((*qdims[:-2], tk, qdims[-1])).astype(np.float32)
  v = rng.standard_normal((*qdims[:-2], tk, dv)).astype(np.float32)
  return q, k, v


def _cuda_compiled(args):
  return ourjax.jit(_attend(), backend="cuda").lower(*args).compile()


@pytest.mark.parametrize("case", CUDA_CASES)
def test_cuda_kernel_is_chosen(case):
  c = _cuda_compiled(_cuda_args(*case))
  kinds = [type(k).__name__ for k in c.runtime_executable().kernels]
  assert kinds == ["FlashAttention"], kinds


@needs_ptxas
@pytest.mark.parametrize("case", CUDA_CASES[:2])
def test_cuda_kernel_ptx_assembles(case):
  _assemble(_cuda_compiled(_cuda_args(*case)).as_text(dialect="ptx"))


def test_cuda_highest_precision_is_not_fused():
  args = _cuda_args((2, 16, 8), 16, 8)
  with ourjax.default_matmul_precision("highest"):
    c = ourjax.jit(_attend(), backend="cuda").lower(*args).compile()
  assert "FlashAttention" not in [type(k).__name__ for k in c.runtime_executable().kernels]


def _has_gpu():
  try:
    return bool(ourjax.devices("cuda"))
  except Exception:
    return False


@pytest.mark.parametrize("kind", ["causal", "bias", "padding"])
def test_cuda_masked_kernel(kind):
  args = _masked_args(kind, B=2, H=2, T=70, S=100, D=16)
  c = ourjax.jit(_masked(kind), backend="cuda").lower(*args).compile()
  assert "FlashAttention" in [type(k).__name__ for k in c.runtime_executable().kernels]
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))
  if _has_gpu():
    got = np.asarray(c(*args))
    want = _masked_want(kind, *args)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3
    np.testing.assert_allclose(got, want, rtol=0.05, atol=0.02)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["none", "causal"])
def test_cuda_16bit_kernel(dtype, kind):
  """bf16/f16 operands run on m16n8k16 tiles (f32 sums, P rounded to the type for p v)."""
  import ml_dtypes  # noqa: F401
  q, k, v, extra = _masked_args("causal", B=2, H=2, T=70, S=100, D=64)
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  f = _masked(kind) if kind != "none" else (lambda q, k, v, e: _attend("divide")(q, k, v))
  c = ourjax.jit(f, backend="cuda").lower(q, k, v, extra).compile()
  assert "FlashAttention" in [type(x).__name__ for x in c.runtime_executable().kernels]
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))
  if _has_gpu():
    got = np.asarray(c(q, k, v, extra), np.float64)
    if kind == "none":
      want = _numpy_attention(q, k, v, 1 / math.sqrt(64))
    else:
      want = _masked_want(kind, q, k, v, extra)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2


@pytest.mark.skipif(not _has_gpu(), reason="no GPU")
@pytest.mark.parametrize("case", CUDA_CASES)
def test_cuda_kernel_matches_float64(case):
  q, k, v = _cuda_args(*case, seed=5)
  got = np.asarray(ourjax.jit(_attend(), backend="cuda")(q, k, v))
  want = _numpy_attention(q, k, v, 1 / math.sqrt(q.shape[-1]))
  # tf32 products (10-bit significands): normwise, as the model benchmarks check the GPU
  err = np.linalg.norm(got - want) / np.linalg.norm(want)
  assert err < 5e-3, err
  np.testing.assert_allclose(got, want, rtol=0.05, atol=0.02)
