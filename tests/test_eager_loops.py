"""NumPy's ufunc loops on the CPU backend's native thread pool (``ourjax/_eager_loops.py``): the
loop found for a ufunc and dtype is the one NumPy runs (bit for bit NumPy's values), the pieces
cover every element once whatever the layout (contiguous, a broadcast row, strided rows, a
strided vector), and what cannot be run so is refused."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ourjax import _eager_loops
from ourjax.backends.cpu import threads

UFUNCS = [np.exp, np.tanh, np.sin, np.log, np.sqrt, np.negative, np.absolute, np.expm1,
          np.add, np.multiply, np.maximum, np.subtract, np.arctan2, np.true_divide, np.power]


def _run(ufunc, *ins, shape=None):
  shape = ins[0].shape if shape is None else shape
  loop = _eager_loops.loop_of(ufunc, ins[0].dtype)
  assert loop is not None, (ufunc, ins[0].dtype)
  return _eager_loops.run(loop, list(ins), shape, ins[0].dtype, threads.get_pool())


def _inputs(ufunc, dtype, shape, rng):
  out = []
  for _ in range(ufunc.nin):
    v = rng.standard_normal(shape) * 4
    if np.dtype(dtype).kind == "c":
      v = v + 1j * rng.standard_normal(shape)
    v.reshape(-1)[rng.integers(0, v.size, 3)] = 0.0
    out.append(v.astype(dtype))
  return out


@pytest.fixture
def small_pieces(monkeypatch):
  """Pieces of 128 elements: many pieces even in small arrays, so both threads take some."""
  monkeypatch.setattr(_eager_loops, "_PIECE_ELEMENTS", 128)


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(UFUNCS) - 1),
       dtype=st.sampled_from([np.float32, np.float64, np.complex64, np.complex128]),
       size=st.integers(1, 3000), seed=st.integers(0, 3))
def test_contiguous_operands_give_numpys_values(which, dtype, size, seed):
  ufunc = UFUNCS[which]
  rng = np.random.default_rng(seed)
  ins = _inputs(ufunc, dtype, (size,), rng)
  with np.errstate(all="ignore"):
    try:
      want = ufunc(*ins)
    except TypeError:          # (no loop: complex maximum of arctan2...)
      return
  loop = _eager_loops.loop_of(ufunc, np.dtype(dtype))
  if want.dtype != np.dtype(dtype):
    assert loop is None
    return
  if loop is None:             # (none of this dtype's in the ufunc's table)
    return
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(_eager_loops, "_PIECE_ELEMENTS", 128)
    got = _run(ufunc, *ins)
  assert got.dtype == want.dtype and got.shape == want.shape
  assert got.tobytes() == want.tobytes()         # (NaNs and signed zeros included)


def test_piece_boundaries(small_pieces):
  """Sizes around multiples of the piece (one less, one more), one element, none."""
  p = _eager_loops._PIECE_ELEMENTS
  for size in (0, 1, 63, 64, 65, p - 1, p, p + 1, 3 * p, 3 * p + 17, 10 * p - 5):
    x = np.arange(size, dtype=np.float32) - 0.5 * size
    y = np.arange(size, dtype=np.float32)[::-1].copy()
    assert _run(np.negative, x).tobytes() == (-x).tobytes()
    assert _run(np.add, x, y).tobytes() == (x + y).tobytes()


def test_views(small_pieces):
  """A broadcast row, strided rows (every other column), a strided vector, a broadcast of
  three dimensions (its leading two merged into rows), a transposed operand with a contiguous
  one, and a column broadcast: NumPy's values."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((40, 50)).astype(np.float64)
  row = np.broadcast_to(rng.standard_normal(50), (40, 50))
  np.testing.assert_array_equal(_run(np.add, x, row), x + row)
  np.testing.assert_array_equal(_run(np.exp, x[:, ::2], shape=(40, 25)), np.exp(x[:, ::2]))
  v = x.reshape(-1)[::3]
  np.testing.assert_array_equal(_run(np.tanh, v), np.tanh(v))
  x3 = rng.standard_normal((4, 10, 50))
  b3 = np.broadcast_to(rng.standard_normal(50), (4, 10, 50))
  np.testing.assert_array_equal(_run(np.multiply, x3, b3), x3 * b3)
  sq = rng.standard_normal((50, 50))
  np.testing.assert_array_equal(_run(np.subtract, sq.T, sq), sq.T - sq)
  col = np.broadcast_to(rng.standard_normal((40, 1)), (40, 50))
  np.testing.assert_array_equal(_run(np.maximum, x, col), np.maximum(x, col))


def test_a_layout_that_cannot_be_cut_is_refused():
  """Dimensions that do not merge into rows without a copy (a transposed 3-d view): None, so
  that NumPy runs it."""
  x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4).transpose(1, 0, 2)
  loop = _eager_loops.loop_of(np.exp, x.dtype)
  assert _eager_loops.run(loop, [x], x.shape, x.dtype, threads.get_pool()) is None


def test_a_busy_pool_runs_every_piece_on_the_callers_thread(small_pieces):
  pool = threads.get_pool()
  x = np.linspace(-3, 3, 5000)
  with pool._busy:
    np.testing.assert_array_equal(_run(np.sin, x), np.sin(x))


def test_what_has_no_loop():
  """Integer and bool dtypes (their loops may call back into Python to raise), narrower
  floats' mixed signatures, dtypes the ufunc has no loop of, non-ufuncs."""
  assert _eager_loops.loop_of(np.add, np.dtype(np.int32)) is None
  assert _eager_loops.loop_of(np.logical_and, np.dtype(np.bool_)) is None
  assert _eager_loops.loop_of(np.isnan, np.dtype(np.float32)) is None     # (f -> ?)
  assert _eager_loops.loop_of(np.maximum, np.dtype(np.float64)) is not None
  assert _eager_loops.loop_of(np.exp, np.dtype(np.float32).newbyteorder()) is None
  assert _eager_loops.loop_of(lambda x: x, np.dtype(np.float32)) is None


def test_a_loop_that_disagrees_with_numpy_is_not_used(monkeypatch):
  """The loop found is checked on probe values against the ufunc's own call: another ufunc's
  loop in its place (a struct read wrong, or a ufunc NumPy runs another way) is refused."""
  exp_loop = _eager_loops._find_loop(np.exp, np.dtype(np.float32))
  assert exp_loop is not None
  monkeypatch.setattr(_eager_loops, "_loops", {})
  monkeypatch.setattr(_eager_loops, "_find_loop", lambda ufunc, dtype: exp_loop)
  assert _eager_loops.loop_of(np.sin, np.dtype(np.float32)) is None
  assert _eager_loops.loop_of(np.exp, np.dtype(np.float32)) == exp_loop
