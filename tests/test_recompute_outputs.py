"""Cheap outputs recomputed by their readers (``lowering/passes/recompute_outputs.py``): an RK4
step of ``lax.scan`` (benchmarks/models.py's ode_rk4 program) (a chain of oscillators coupled
through ``roll``) stores intermediate states its last stage reads at many positions; the outputs
that are cheap functions of one of them (twice its x, half its square) are not stored, and the
two rolls of one are read from the state another fusion stores, at moved positions.  The arena is
smaller than the plan without the pass (six rows of the state, as JAX's), and the results equal
the reference backend's (hypothesis: sizes, steps, step lengths)."""
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)
from ourjax.lowering import pipeline

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import models  # noqa: E402


def _rk4(steps, dt=0.01):
  """benchmarks/models.py's ode_rk4 program (its scan of ``steps`` RK4 steps of length dt)."""
  return models.ode_make(ourjax, {"steps": steps, "dt": dt})


@pytest.fixture
def no_disk_cache(monkeypatch):
  # (its key holds the passes' sources, not which passes run)
  monkeypatch.setenv("OURJAX_CACHE_DIR", "off")


def _without_the_pass(monkeypatch):
  for name in ("LATE_PASSES", "NATIVE_LATE_PASSES"):
    monkeypatch.setattr(pipeline, name, [p for p in getattr(pipeline, name)
                                         if p[0] != "recompute_outputs"])


def _compile(f, *args):
  ourjax.clear_caches()
  return ourjax.jit(f).lower(*args).compile()


def test_an_rk4_step_stores_fewer_arrays(no_disk_cache, monkeypatch):
  rng = np.random.default_rng(0)
  s0 = (rng.standard_normal((2, 256)) * 0.5).astype(np.float32)
  k = rng.uniform(0.1, 0.5, 256).astype(np.float32)
  f = _rk4(5)
  c = _compile(f, s0, k)
  notes = [n for n in c._executable.module.notes if n.startswith("recompute_outputs:")]
  assert notes, c._executable.module.notes
  got = c(s0, k)
  with_pass = c.memory_analysis().temp_size_in_bytes
  _without_the_pass(monkeypatch)
  plain = _compile(f, s0, k)
  assert not [n for n in plain._executable.module.notes if n.startswith("recompute_outputs:")]
  # (each output not stored is a row of the state: 256 floats)
  assert with_pass <= plain.memory_analysis().temp_size_in_bytes - len(notes) * 256 * 4
  want = ourjax.jit(f, backend="reference")(s0, k)
  for a, b in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  for a, b in zip(ourjax.tree_util.tree_leaves(got),
                  ourjax.tree_util.tree_leaves(plain(s0, k))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(3, 300), steps=st.integers(1, 4), dt=st.floats(0.001, 0.05),
       seed=st.integers(0, 2 ** 31))
def test_rk4_steps_with_recomputed_outputs_match_the_reference(n, steps, dt, seed):
  rng = np.random.default_rng(seed)
  s0 = (rng.standard_normal((2, n)) * 0.5).astype(np.float32)
  k = rng.uniform(0.1, 0.5, n).astype(np.float32)
  f = _rk4(steps, dt)
  c = ourjax.jit(f).lower(s0, k).compile()
  assert any(m.startswith("recompute_outputs:") for m in c._executable.module.notes)
  got, want = c(s0, k), ourjax.jit(f, backend="reference")(s0, k)
  for a, b in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [256, 1000])
def test_an_rk4_step_holds_six_rows_of_its_state(no_disk_cache, monkeypatch, n):
  """With the rolls read in place (``row_cache.READ_MOVED``) the loop's temporaries are six rows of n floats (aligned) and the control block (64
  bytes), as the three stages' values XLA keeps (JAX 0.10's CPU: 98464 bytes for n = 4096, six
  rows and 160):
  the rolls of an intermediate state are read at moved positions of the stored state, twice
  and half the square of it recomputed.  Values against the reference backend."""
  from ourjax.backends.llvm import row_cache
  monkeypatch.setattr(row_cache, "READ_MOVED", True)
  rng = np.random.default_rng(n)
  s0 = (rng.standard_normal((2, n)) * 0.5).astype(np.float32)
  k = rng.uniform(0.1, 0.5, n).astype(np.float32)
  f = _rk4(4)
  c = _compile(f, s0, k)
  notes = [m for m in c._executable.module.notes if m.startswith("recompute_outputs:")]
  assert sum("read at moved positions" in m for m in notes) == 2, notes
  row = -(-n * 4 // 64) * 64            # (the planner's buffers are 64-byte aligned)
  assert c.memory_analysis().temp_size_in_bytes <= 6 * row + 64
  got, want = c(s0, k), ourjax.jit(f, backend="reference")(s0, k)
  for a, b in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint16])
@pytest.mark.parametrize("shape,pad", [((2, 3, 4), 10), ((2, 3), 5), ((4,), 9)])
def test_a_recomputed_output_read_before_the_readers_last_parameter(no_disk_cache, dtype, shape,
                                                                    pad):
  """jnp.pad's symmetric 'odd' mode: a reader fusion read the dropped output's parameter before
  its last parameter, and the recomputed slice was put after that parameter (the module failed
  to verify).  Against NumPy, with the pass's note to show it ran."""
  x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
  f = lambda a: ourjax.numpy.pad(a, pad, mode="symmetric", reflect_type="odd")
  c = _compile(f, x)
  np.testing.assert_array_equal(np.asarray(c(x)), np.pad(x, pad, mode="symmetric",
                                                         reflect_type="odd"))
  if shape == (2, 3, 4):
    assert any(m.startswith("recompute_outputs:") for m in c._executable.module.notes)
