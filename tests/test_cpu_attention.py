"""The CPU's fused attention (``backends/llvm/attention.py``): ``softmax(f(q kᵀ * scale)) v``
becomes one ``AttentionKernel`` that never writes the scores, against float64 NumPy and the
reference backend, with masks and biases as the scores computation, key ranges longer than
one tile (the online softmax), odd sizes, and the memory it saves."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.llvm import attention as cpu_attention

from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU backend as the default)


def _attend(scale):
  def f(q, k, v):
    s = jnp.einsum("...qd,...kd->...qk", q, k) * np.float32(scale)
    return jnp.einsum("...qk,...kd->...qd", ourjax.nn.softmax(s, axis=-1), v)
  return f


def _masked(kind):
  def f(q, k, v, extra):
    T, S = q.shape[-2], k.shape[-2]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * np.float32(0.4)
    if kind == "causal":
      s = jnp.where(jnp.tril(jnp.ones((T, S), dtype=bool)), s, -1e9)
    elif kind == "tril_fill":   # (not causal: the hidden keys take part, with a score of 2)
      s = jnp.where(jnp.tril(jnp.ones((T, S), dtype=bool)), s, 2.0)
    elif kind == "bias":
      s = s + extra
    elif kind == "padding":     # keys past each batch entry's length (none masks a whole row)
      s = jnp.where((jnp.arange(S)[None, :] < extra[:, None])[:, None, None, :], s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
  return f


def _want(q, k, v, scale, kind=None, extra=None):
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  T, S = q.shape[-2], k.shape[-2]
  s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
  if kind == "causal":
    s = np.where(np.tril(np.ones((T, S), bool)), s, -1e9)
  elif kind == "tril_fill":
    s = np.where(np.tril(np.ones((T, S), bool)), s, 2.0)
  elif kind == "bias":
    s = s + extra
  elif kind == "padding":
    s = np.where((np.arange(S)[None, :] < extra[:, None])[:, None, None, :], s, -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return np.matmul(e / e.sum(-1, keepdims=True), v)


def _fused(f, *args):
  """The compiled executable, asserting that it runs the fused kernel (and no dot)."""
  c = ourjax.jit(f).lower(*args).compile()
  text = c.as_text()
  assert "attention(" in text and " dot(" not in text, text
  return c


def _check(f, args, want, rtol=2e-5):
  c = _fused(f, *args)
  got = np.asarray(c(*args))
  ref = np.asarray(ourjax.jit(f, backend="reference")(*args))
  scale = np.abs(want).max() + 1e-30
  np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)
  np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale)
  return c


@settings(max_examples=20, deadline=None)
@given(batch=st.lists(st.integers(1, 3), min_size=0, max_size=2), tq=st.integers(2, 70),
       tk=st.integers(2, 300), d=st.integers(2, 40), dv=st.integers(2, 40),
       scale=st.sampled_from([0.125, 0.37, 1.0, -0.5]), seed=st.integers(0, 2 ** 31))
def test_fused_attention_matches_numpy_and_the_reference(batch, tq, tk, d, dv, scale, seed):
  """Odd Tq and Tk (Tq != Tk, Tk past one key tile of 256 included), head sizes that are no
  multiple of the vector width, negative scales (the scale is then applied in place)."""
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((*batch, tq, d)).astype(np.float32)
  k = rng.standard_normal((*batch, tk, d)).astype(np.float32)
  v = rng.standard_normal((*batch, tk, dv)).astype(np.float32)
  _check(_attend(scale), (q, k, v), _want(q, k, v, scale))


@pytest.mark.parametrize("tq,tk", [(37, 515), (300, 257), (5, 1024)])
def test_several_key_tiles_use_the_online_softmax(tq, tk):
  """Key ranges of several tiles: the running max grows from tile to tile (scores made to
  increase along the keys) and the output rows are rescaled."""
  rng = np.random.default_rng(tq + tk)
  q = rng.standard_normal((2, tq, 24)).astype(np.float32)
  k = rng.standard_normal((2, tk, 24)).astype(np.float32)
  k += np.linspace(0, 3, tk, dtype=np.float32)[:, None] * np.sign(q.mean((0, 1)))[None, :]
  v = rng.standard_normal((2, tk, 17)).astype(np.float32)
  assert tk > cpu_attention.MAX_BK
  _check(_attend(0.3), (q, k, v), _want(q, k, v, 0.3))


@pytest.mark.parametrize("kind", ["causal", "tril_fill", "bias", "padding"])
@pytest.mark.parametrize("T,S", [(6, 9), (70, 300), (300, 290)])
def test_masks_and_biases(kind, T, S):
  """Masks and biases as the scores computation; a causal mask's blocks skip the key tiles
  past their last row (a tril mask of a finite fill keeps them)."""
  rng = np.random.default_rng(T * S)
  B, H, D = 2, 3, 12
  q = rng.standard_normal((B, H, T, D)).astype(np.float32)
  k = rng.standard_normal((B, H, S, D)).astype(np.float32)
  v = rng.standard_normal((B, H, S, D)).astype(np.float32)
  extra = {"causal": np.zeros((), np.float32), "tril_fill": np.zeros((), np.float32),
           "bias": rng.standard_normal((B, 1, T, S)).astype(np.float32),
           "padding": np.array([S, 3], np.int32)}[kind]
  _check(_masked(kind), (q, k, v, extra), _want(q, k, v, 0.4, kind, extra))


def test_the_scores_are_never_in_memory():
  """The benchmark's shape: no temporaries of the scores' size (JAX's peak: its arguments and
  output), and the fusion is noted with its reason."""
  rng = np.random.default_rng(1)
  q, k, v = (rng.standard_normal((4, 8, 256, 64)).astype(np.float32) for _ in range(3))
  c = _check(_attend(0.125), (q, k, v), _want(q, k, v, 0.125))
  mem = c.memory_analysis()
  assert mem.temp_size_in_bytes < 4 * 256 * 256, mem      # (one head's scores: 256 KiB)
  assert mem.argument_size_in_bytes == 3 * q.nbytes and mem.output_size_in_bytes == q.nbytes
  off = dict(os.environ)
  try:
    os.environ["OURJAX_CPU_ATTENTION"] = "0"
    # (the same program: the disk cache keys the switch too)
    unfused = ourjax.jit(_attend(0.125)).lower(q, k, v).compile()
  finally:
    os.environ.clear()
    os.environ.update(off)
  assert " dot(" in unfused.as_text() and "attention(" not in unfused.as_text()
  assert unfused.memory_analysis().temp_size_in_bytes >= 4 * 8 * 256 * 256 * 4


def test_refusals_leave_the_dots():
  """float64 and 16-bit attention and head sizes past MAX_HEAD run unfused (and right)."""
  assert cpu_attention.refuses(np.dtype(np.float64), (2, 4, 8), (2, 4, 8), (2, 4, 8), [])
  assert cpu_attention.refuses(np.dtype(np.float32), (2, 4, 300), (2, 4, 300), (2, 4, 8), [])
  assert cpu_attention.refuses(np.dtype(np.float32), (2, 4, 64), (2, 4, 64), (2, 4, 64),
                               []) is None
  import ml_dtypes
  rng = np.random.default_rng(2)
  q, k, v = (rng.standard_normal((2, 5, 8)).astype(ml_dtypes.bfloat16) for _ in range(3))
  c = ourjax.jit(_attend(0.5)).lower(q, k, v).compile()
  assert "attention(" not in c.as_text()
  got = np.asarray(c(q, k, v), np.float64)
  np.testing.assert_allclose(got, _want(q, k, v, 0.5), rtol=3e-2, atol=3e-2)


_HASWELL = r"""
import numpy as np, ourjax, ourjax.numpy as jnp
from ourjax.backends.llvm import gemm
print(gemm.vector_target().isa)
def f(q, k, v, n):
  s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * np.float32(0.3)
  s = jnp.where((jnp.arange(k.shape[-2])[None, :] < n[:, None])[:, None, None, :], s, -1e30)
  return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
def g(q, k, v):
  s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * np.float32(0.3)
  return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
rng = np.random.default_rng(3)
for (T, S, D) in [(13, 19, 7), (65, 300, 33)]:
  q = rng.standard_normal((2, 2, T, D)).astype(np.float32)
  k = rng.standard_normal((2, 2, S, D)).astype(np.float32)
  v = rng.standard_normal((2, 2, S, D + 3)).astype(np.float32)
  n = np.array([S, S // 2 + 1], np.int32)
  for fn, args, mask in ((f, (q, k, v, n), True), (g, (q, k, v), False)):
    c = ourjax.jit(fn).lower(*args).compile()
    assert "attention(" in c.as_text()
    qq, kk, vv = (x.astype(np.float64) for x in (q, k, v))
    s = qq @ np.swapaxes(kk, -1, -2) * 0.3
    if mask:
      s = np.where((np.arange(S)[None, :] < n[:, None])[:, None, None, :], s, -1e30)
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ vv
    np.testing.assert_allclose(np.asarray(c(*args)), want, rtol=2e-5, atol=2e-5)
print("ok")
"""


def test_avx2_code():
  """The kernel generated for haswell (8-lane vectors, the AVX2 GEMM) in a child process."""
  from cpu_targets import skip_unless_host_runs
  skip_unless_host_runs("avx2")
  env = dict(os.environ, OURJAX_CPU="haswell", OURJAX_CACHE_DIR="off", OURJAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _HASWELL], env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert out.stdout.split() == ["avx2", "ok"]


def test_transformer_training_keeps_the_probabilities():
  """A training step's backward reads P: the forward's attention stays unfused, noted."""
  rng = np.random.default_rng(4)
  q, k, v = (rng.standard_normal((2, 7, 8)).astype(np.float32) for _ in range(3))

  def loss(q, k, v):
    return jnp.sum(_attend(0.35)(q, k, v) ** 2)
  c = ourjax.jit(ourjax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
  assert "attention(" not in c.as_text()
  got = c(q, k, v)
  want = ourjax.jit(ourjax.grad(loss, argnums=(0, 1, 2)), backend="reference")(q, k, v)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)
  assert math.isfinite(float(np.sum(np.asarray(got[0]))))


def test_only_a_mask_that_hides_its_keys_skips_them():
  """``causal``: a tril mask filled with -1e9 (or less) is causal, one filled with a finite
  score that still counts is not (its hidden keys take part in the softmax)."""
  from ourjax.lowering import from_jaxpr, pipeline
  from ourjax.lowering.passes import attention
  rng = np.random.default_rng(5)
  q, k, v = (rng.standard_normal((1, 2, 6, 4)).astype(np.float32) for _ in range(3))
  extra = np.zeros((), np.float32)
  for kind, want in (("causal", True), ("tril_fill", False)):
    closed = ourjax.jit(_masked(kind)).trace(q, k, v, extra).jaxpr
    m = from_jaxpr.lower(closed, "attn").module
    m.fused_attention = lambda *a: None
    m = pipeline.optimize(m, late_passes=[("attention", attention.run)])
    (att,) = [i for i in m.entry.instructions if i.opcode == "attention"]
    assert attention.causal(att.attrs["calls"]) is want, kind


def test_in_a_loop_and_in_jax_layout():
  """``nn.dot_product_attention`` on ``[B, T, N, H]`` operands (transposed into the kernel's
  layout) inside a ``fori_loop`` (the kernel's pieces dispatched as a loop's job)."""
  rng = np.random.default_rng(6)
  x = rng.standard_normal((2, 40, 3, 16)).astype(np.float32)
  w = (rng.standard_normal((16, 16)) / 4).astype(np.float32)

  def f(x, w):
    def body(i, h):
      return ourjax.nn.dot_product_attention(h, h @ w, h, is_causal=True) + 0.5 * h
    return ourjax.lax.fori_loop(0, 3, body, x)
  c = ourjax.jit(f).lower(x, w).compile()
  assert "attention(" in c.as_text()
  got = np.asarray(c(x, w))
  h = x.astype(np.float64)
  for _ in range(3):
    q, k = np.swapaxes(h, 1, 2), np.swapaxes(h @ w, 1, 2)
    s = q @ np.swapaxes(k, -1, -2) / 4.0
    s = np.where(np.tril(np.ones((40, 40), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    h = np.swapaxes((e / e.sum(-1, keepdims=True)) @ q, 1, 2) + 0.5 * h
  np.testing.assert_allclose(got, h, rtol=1e-4, atol=1e-4)


def _row_kernels():
  """Two compiled functions ``f(row, n, scale_unused, base) -> sum`` doing the softmax's
  ``row[j] = exp(row[j] * 0.37 - base)``: through the process-wide row function (a module
  whose math is shared) and inline (one whose math is not)."""
  import ctypes
  import llvmlite.ir as ir
  from ourjax.backends.cpu import jit, libraries
  from ourjax.backends.llvm import emitter as E, gemm, row_math
  F = ir.FloatType()
  fnty = ir.FunctionType(F, [F.as_pointer(), E.I64, F])
  W = gemm.vector_target().lanes["f32"]
  out = []
  for shared in (True, False):
    mod = jit.new_module(f"rows_{shared}")
    if shared:
      E.use_outlined_math(mod, "shared")
    f = ir.Function(mod, fnty, name="k")
    b = ir.IRBuilder(f.append_basic_block("entry"))
    row, n, base = f.args
    total = row_math.exp_and_sum_call(b, row, n, base, 0.37) if shared else None
    assert (total is None) != shared
    if total is None:
      total = row_math._exp_and_sum(b, row, n, W, base, 0.37)
    b.ret(total)
    syms = ["math:%s:%s:%d" % u for u in E.math_symbols(mod)]
    assert syms == (["math:expsum:f32:4"] if shared else [])
    libraries._link_symbols(syms)
    cm = jit.compile_module(E.finalize_module_text(mod), ["k"])
    cfn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64,
                           ctypes.c_float)(cm.address("k"))
    out.append((cm, cfn))
  return out


@pytest.mark.parametrize("n", [0, 1, 7, 15, 16, 17, 64, 255, 256, 300])
def test_the_softmax_exponential_is_one_process_wide_function(n):
  """A kernel whose module shares its math calls ``ojx_m_expsum_f32`` (one function per
  process, compiled beside the kernel) for each row of scores: its rows and sums are those of
  the inline loop, bit for bit, for rows with and without scalars past the last vector, and
  match float64 NumPy."""
  kernels = _row_kernels()      # (holds the compiled modules while their functions run)
  shared, inline = kernels[0][1], kernels[1][1]
  rng = np.random.default_rng(n)
  x = (rng.standard_normal(n + 5) * 4).astype(np.float32)
  base = np.float32(x[:n].max() * 0.37) if n else np.float32(0)
  got = {}
  for name, fn in (("shared", shared), ("inline", inline)):
    row = x.copy()
    total = fn(row.ctypes.data, n, base)
    got[name] = (row, np.float32(total))
  want = np.exp(x[:n].astype(np.float64) * np.float32(0.37) - base)
  np.testing.assert_array_equal(got["shared"][0], got["inline"][0])
  assert got["shared"][1] == got["inline"][1]
  np.testing.assert_array_equal(got["shared"][0][n:], x[n:])      # (nothing past the row)
  np.testing.assert_allclose(got["shared"][0][:n], want, rtol=2e-6)
  np.testing.assert_allclose(got["shared"][1], want.sum(), rtol=1e-5)


_TWO_PROGRAMS = r"""
import numpy as np, ourjax, ourjax.numpy as jnp
from ourjax.backends.cpu import libraries
def g(q, k, v):
  s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * np.float32(0.3)
  return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
rng = np.random.default_rng(4)
linked = []
for (T, S, D) in [(40, 70, 16), (33, 300, 8)]:
  q, k, v = (rng.standard_normal((2, 3, n, D)).astype(np.float32) for n in (T, S, S))
  c = ourjax.jit(g).lower(q, k, v).compile()
  assert "attention(" in c.as_text()
  qq, kk, vv = (x.astype(np.float64) for x in (q, k, v))
  s = qq @ np.swapaxes(kk, -1, -2) * 0.3
  e = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(np.asarray(c(q, k, v)), (e / e.sum(-1, keepdims=True)) @ vv,
                             rtol=2e-5, atol=2e-5)
  linked.append(("expsum", "f32") in libraries._math_done)
print(linked)
"""


def test_attention_programs_share_the_exponential():
  """In a fresh process the first attention kernel already links the process-wide ``expsum``
  (built beside it) and the second one too, both right."""
  env = dict(os.environ, OURJAX_CACHE_DIR="off", OURJAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _TWO_PROGRAMS], env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert out.stdout.split("\n")[-2] == "[True, True]"
