"""Stencil chains (``backends/cuda/stencil.py``): dependent elementwise kernels whose reads are
shifts along the last axis run as one launch with their intermediates in shared memory.

Without a GPU: which reads are shifts (``read_offsets``), which programs form chains and with
what halos, that a chain's PTX assembles.  On a GPU: chained programs against the reference
backend and against the same program with chains off (elementwise results bit for bit)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as hst

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.cuda import codegen, driver, horizontal, stencil
from test_ptx import _assemble, needs_ptxas


def _rk(n_steps=6, dt=0.01):
  """An RK4 scan of coupled oscillators (rolled neighbours), a scalar per step."""
  def field(s, k):
    x, v = s[0], s[1]
    return jnp.stack([v, -x - 0.5 * x * x * x + k * (jnp.roll(x, 1) + jnp.roll(x, -1) - 2 * x)
                      - 0.1 * v])

  def run(s0, k):
    def step(s, _):
      k1 = field(s, k)
      k2 = field(s + 0.5 * dt * k1, k)
      k3 = field(s + 0.5 * dt * k2, k)
      k4 = field(s + dt * k3, k)
      s = s + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
      return s, jnp.mean(s[0] * s[0])
    return ourjax.lax.scan(step, s0, None, length=n_steps)
  return run


def _heat(u, a):
  """Explicit heat steps with zero boundaries (pads and shifted slices, no wrap-around); the
  first step's result is returned too (an intermediate needed outside the chain)."""
  def lap(u):
    p = jnp.pad(u, ((0, 0), (1, 1)))
    return p[:, :-2] + p[:, 2:] - 2 * u
  u1 = u + a * lap(u)
  u2 = u1 + a * lap(u1)
  u3 = u2 + a * jnp.tanh(lap(u2))
  return u3, u1


def _chains(fn, *args):
  exe = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  out = []
  for k in exe.kernels:
    parts = k.parts if isinstance(k, horizontal.Horizontal) else [k]
    out.extend(p for p in parts if isinstance(p, stencil.StencilChain))
  return exe, out


def _rk_args(n, rows=2, dtype=np.float32):
  rng = np.random.RandomState(n)
  return (rng.uniform(-0.5, 0.5, (rows, n)).astype(dtype),
          rng.uniform(0.1, 0.5, n).astype(dtype))


# -- analysis ---------------------------------------------------------------------------------

def _offsets_of(fn, *shapes):
  """read_offsets of the one elementwise kernel ``fn`` plans for the GPU: {parameter number:
  (axis, set of offsets normalised)}."""
  exe = ourjax.jit(fn, backend="cuda").lower(
      *[np.zeros(s, np.float32) for s in shapes]).compile().runtime_executable()
  (k,) = [k for k in exe.kernels if type(k) is codegen.Elementwise]
  res = stencil.read_offsets([i for i, _ in k.outputs], k.leafmap)
  out = {}
  for leaf, (a, o) in res.items():
    buf = k.leafmap[leaf]
    if isinstance(buf, tuple):
      continue
    n = int(buf.name[1:])
    out[n] = (a, set(stencil._normalize(o, leaf.dims[a])) if a is not None else set(o))
  return out


def test_read_offsets_of_shifts_rolls_and_pads():
  assert _offsets_of(lambda x: jnp.roll(x, 1) + jnp.roll(x, -2) * x, (64,)) == \
      {0: (0, {-1, 0, 2})}
  assert _offsets_of(lambda x: jnp.pad(x, ((0, 0), (2, 0)))[:, :-2] - x, (3, 32)) == \
      {0: (1, {-2, 0})}
  assert _offsets_of(lambda x, y: x[:, 1:] * y[None, :], (4, 33), (32,)) == \
      {0: (1, {1}), 1: (0, {0})}
  # a broadcast along the tile axis reads positions that do not follow the element
  assert _offsets_of(lambda x, c: x * c[:, None], (4, 32), (4,))[1][0] is None


@pytest.mark.parametrize("fn", [lambda x: x[::-1] + x, lambda x: x[::2].repeat(2) + x])
def test_reads_that_are_not_shifts_are_refused(fn):
  with pytest.raises(stencil.NotStencil):
    _offsets_of(fn, (64,))


def test_rk4_scan_step_is_one_chain_and_one_finishing_launch(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_TIME_BLOCKING", "0")       # (one iteration per launch)
  exe, chains = _chains(_rk(), *_rk_args(4096))
  assert len(chains) == 1
  (ch,) = chains
  assert ch.stages[-1].kind == "partials" and ch.n == 4096
  assert max(st.lo for st in ch.stages) >= 3             # four stages of +-1 neighbours
  # only the next state and the partials go to memory; the stages' results stay on chip
  assert {b.name for b in ch.writes} == {b.name for b in ch.writes
                                         if "next" in b.name or "tile" in b.name}
  (loop,) = [op for op in exe.program if op[0] == "repeat"]
  assert len([op for op in loop[2] if op[0] == "k"]) == 2
  # the profiler names every stage's HLO, and counts only the chain's own buffers
  from ourjax.backends.llvm import kernel_info
  d = kernel_info.describe(ch)
  assert d["hlo"] == " > ".join(kernel_info.describe(st.kernel)["hlo"] for st in ch.stages)
  assert d["bytes"] == sum(b.nbytes for b in {id(b): b for b in ch.reads + ch.writes}.values())
  assert d["bytes"] < sum(kernel_info.describe(st.kernel)["bytes"] for st in ch.stages)


def test_a_short_axis_chains_too():
  """An axis shorter than a tile: the window wraps around it several times."""
  _, chains = _chains(_rk(), *_rk_args(5))
  assert len(chains) == 1 and chains[0].n == 5 and chains[0].tiles == 1


def test_no_chain_without_a_dependency_or_with_the_switch_off(monkeypatch):
  _, chains = _chains(lambda x: (jnp.roll(x, 1) * 2, jnp.exp(x)), np.ones(4096, np.float32))
  assert chains == []
  monkeypatch.setenv("OURJAX_CUDA_STENCIL", "0")
  _, chains = _chains(_rk(), *_rk_args(4096))
  assert chains == []


def test_heat_chain_writes_what_is_read_outside():
  u = np.random.RandomState(0).randn(3, 1000).astype(np.float32)
  _, chains = _chains(_heat, u, np.float32(0.1))
  assert chains
  written = {b.name for ch in chains for b in ch.writes}
  assert any(b.kind == "output" for ch in chains for b in ch.writes), written


@needs_ptxas
def test_chain_ptx_assembles():
  for fn, args in ((_rk(), _rk_args(1000)), (_rk(), _rk_args(5)),
                   (_heat, (np.ones((3, 700), np.float32), np.float32(0.1)))):
    ptx = ourjax.jit(fn, backend="cuda").lower(*args).compile().as_text(dialect="ptx")
    assert "bar.sync" in ptx
    _assemble(ptx)                            # (each module for its own .target)


# -- on the GPU ---------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not driver.available(), reason="no CUDA GPU")


def _both(monkeypatch, fn, *args):
  """(chained result, unchained result, reference result)."""
  monkeypatch.setenv("OURJAX_CUDA_STENCIL", "1")
  on = ourjax.jit(fn, backend="cuda")(*args)
  monkeypatch.setenv("OURJAX_CUDA_STENCIL", "0")
  off = ourjax.jit(lambda *a: fn(*a), backend="cuda")(*args)
  ref = ourjax.jit(lambda *a: fn(*a), backend="reference")(*args)
  leaves = ourjax.tree_util.tree_leaves
  return ([np.asarray(x) for x in leaves(on)], [np.asarray(x) for x in leaves(off)],
          [np.asarray(x) for x in leaves(ref)])


@needs_gpu
@pytest.mark.parametrize("n", [5, 256, 1000, 4096, 70001])
def test_rk4_chain_matches_separate_kernels_and_reference(monkeypatch, n):
  on, off, ref = _both(monkeypatch, _rk(), *_rk_args(n))
  np.testing.assert_array_equal(on[0], off[0])              # the state: bit for bit
  np.testing.assert_allclose(on[1], off[1], rtol=1e-5)      # means: other summation order
  np.testing.assert_allclose(on[0], ref[0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(on[1], ref[1], rtol=1e-4)


@needs_gpu
@settings(max_examples=12, deadline=None)
@given(hst.integers(1, 3), hst.integers(3, 3000), hst.sampled_from([np.float32, np.float64]),
       hst.integers(-5, 5), hst.integers(-5, 5))
def test_random_stencils_match(rows, n, dtype, s1, s2):
  rng = np.random.RandomState(n)
  x = rng.randn(rows, n).astype(dtype)

  def fn(x):
    a = jnp.roll(x, s1, axis=1) * 0.5 + x
    b = jnp.sin(jnp.roll(a, s2, axis=1)) - a
    c = jnp.pad(b, ((0, 0), (2, 2)))[:, 1:-3] + jnp.roll(b, -1, axis=1)
    return c * a, jnp.sum(c * c)
  with pytest.MonkeyPatch.context() as mp:
    on, off, ref = _both(mp, fn, x)
  np.testing.assert_array_equal(on[0], off[0])
  tol = 1e-4 if on[0].dtype == np.float32 else 1e-10
  np.testing.assert_allclose(on[0], ref[0], rtol=tol, atol=tol)
  np.testing.assert_allclose(on[1], ref[1], rtol=tol * 10)


@needs_gpu
def test_heat_chain_matches(monkeypatch):
  u = np.random.RandomState(1).randn(3, 1000).astype(np.float32)
  on, off, ref = _both(monkeypatch, _heat, u, np.float32(0.1))
  for a, b, c in zip(on, off, ref):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)

