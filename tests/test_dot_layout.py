"""The dot_layout pass: dot operands whose batch/free/contracting dimensions are not runs are
transposed into a layout the GEMMs take; the results stay the dot's (reference: the module
before the pass, and float64 NumPy einsum through jit)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends import reference
from ourjax.backends.cpu import backend as cpu_backend
from ourjax.lowering import pipeline
from ourjax.lowering.hlo import Builder, Module, Shape, verify
from ourjax.lowering.passes import dot_layout

LETTERS = "abcdefgh"


@st.composite
def dots(draw):
  """A dot_general over operands whose dimensions come in any order: nb batch, one or two free
  dimensions per side and nc contracting dimensions, sizes 1..5."""
  nb, nc = draw(st.integers(0, 2)), draw(st.integers(1, 2))
  nlf, nrf = draw(st.integers(0, 2)), draw(st.integers(0, 2))
  size = st.integers(1, 5)
  bsz = [draw(size) for _ in range(nb)]
  csz = [draw(size) for _ in range(nc)]
  lfs = [draw(size) for _ in range(nlf)]
  rfs = [draw(size) for _ in range(nrf)]
  # logical order per side: batch, free, contract; then a random placement in memory
  lperm = draw(st.permutations(range(nb + nlf + nc)))
  rperm = draw(st.permutations(range(nb + nrf + nc)))
  # the contracting (and batch) pairs may also be listed in another order on each side
  cpair = draw(st.permutations(range(nc)))
  lsizes = bsz + lfs + csz
  rsizes = bsz + rfs + csz
  ldims = [0] * len(lsizes)
  rdims = [0] * len(rsizes)
  for logical, phys in enumerate(lperm):
    ldims[phys] = lsizes[logical]
  for logical, phys in enumerate(rperm):
    rdims[phys] = rsizes[logical]
  lb = tuple(lperm[i] for i in range(nb))
  rb = tuple(rperm[i] for i in range(nb))
  lc = tuple(lperm[nb + nlf + i] for i in cpair)
  rc = tuple(rperm[nb + nrf + i] for i in cpair)
  return ldims, rdims, dict(lhs_batch_dims=lb, rhs_batch_dims=rb, lhs_contracting_dims=lc,
                            rhs_contracting_dims=rc)


def _module(ldims, rdims, attrs, dtype="f32"):
  m = Module("dot")
  b = Builder(m, "main")
  x = b.parameter(Shape(dtype, ldims))
  y = b.parameter(Shape(dtype, rdims))
  m.entry = b.build(b.dot(x, y, **attrs))
  verify(m)
  return m


def _dots(m):
  return [i for c in m.computations for i in c.instructions if i.opcode == "dot"]


@settings(max_examples=60, deadline=None)
@given(case=dots(), seed=st.integers(0, 2 ** 31))
def test_pass_makes_runs_and_keeps_the_result(case, seed):
  ldims, rdims, attrs = case
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(ldims).astype(np.float32)
  y = rng.standard_normal(rdims).astype(np.float32)
  before = reference.compile(_module(ldims, rdims, attrs))(x, y)[0]
  m = _module(ldims, rdims, attrs)
  was_ok = all(dot_layout.layout_ok(d, k) for d in _dots(m) for k in (0, 1))
  changed = dot_layout.run(m)
  verify(m)
  assert changed == (not was_ok)
  (d,) = _dots(m)
  assert dot_layout.layout_ok(d, 0) and dot_layout.layout_ok(d, 1)
  after = reference.compile(m)(x, y)[0]
  assert after.shape == before.shape
  k = int(np.prod([ldims[i] for i in attrs["lhs_contracting_dims"]]))
  np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6 * k)
  # and the CPU backend (GEMM or not) agrees with float64 NumPy
  got = cpu_backend.compile(pipeline.optimize(_module(ldims, rdims, attrs),
                                              late_passes=pipeline.NATIVE_LATE_PASSES))(x, y)[0]
  np.testing.assert_allclose(got, before, rtol=1e-5, atol=1e-5 * k)


def test_runs_are_left_alone():
  # [b, m, k] x [b, k, n] and an M-major A [b, k, m] are GEMM layouts already
  for ldims, lc in (((2, 3, 4), 2), ((2, 4, 3), 1)):
    m = _module(ldims, (2, 4, 5), dict(lhs_batch_dims=(0,), rhs_batch_dims=(0,),
                                       lhs_contracting_dims=(lc,), rhs_contracting_dims=(1,)))
    assert not dot_layout.run(m)


def test_integer_dots_are_left_alone():
  m = _module((3, 2, 4), (2, 4, 5), dict(lhs_batch_dims=(1,), rhs_batch_dims=(0,),
                                         lhs_contracting_dims=(2,), rhs_contracting_dims=(1,)),
              dtype="s32")
  assert not dot_layout.run(m)


def test_attention_einsums_run_as_gemms_through_jit():
  """The [b, t, h, d] attention products (head transposes folded into the dots) get operands
  the GEMMs take, with forward and gradient equal to float64 NumPy's (and its differences)."""
  rng = np.random.default_rng(0)
  B, T, H, Dh = 2, 16, 3, 8
  q, k, v = (rng.standard_normal((B, T, H, Dh)).astype(np.float32) for _ in range(3))

  def attn(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(Dh)
    a = ourjax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", a, v)

  def attn64(q, k, v):
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(Dh)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", a, v)

  q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
  np.testing.assert_allclose(np.asarray(ourjax.jit(attn)(q, k, v)), attn64(q64, k64, v64),
                             rtol=1e-4, atol=1e-5)
  g = ourjax.jit(ourjax.grad(lambda q, k, v: jnp.sum(attn(q, k, v) ** 2), argnums=(0, 1, 2)))
  got = g(q, k, v)
  eps = 1e-6
  # the gradient against central differences of the float64 NumPy function, along a direction
  for t, arg in zip(got, range(3)):
    d = rng.standard_normal(q.shape)
    args = [q64, k64, v64]
    plus = list(args)
    minus = list(args)
    plus[arg] = args[arg] + eps * d
    minus[arg] = args[arg] - eps * d
    fd = (np.sum(attn64(*plus) ** 2) - np.sum(attn64(*minus) ** 2)) / (2 * eps)
    np.testing.assert_allclose(np.sum(np.asarray(t, np.float64) * d), fd, rtol=2e-3, atol=1e-3)
  # every dot of the gradient program has runs for operands (so it can take the GEMM)
  c = g.lower(q, k, v).compile()
  module = c._executable.module
  for d in _dots(module):
    assert dot_layout.layout_ok(d, 0) and dot_layout.layout_ok(d, 1), d
