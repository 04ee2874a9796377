"""Eager NumPy calls split across threads (``ourjax/_eager.py``: ``_split_plan``, ``_run_split``):
a large elementwise ufunc call runs in contiguous parts on several threads; the result is
NumPy's one-thread result bit for bit, with the eager dtype and weak type, and the split is kept
only where it was timed faster."""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax.numpy as jnp
from ourjax import _eager, _eager_loops, core, lax
from ourjax.backends.cpu import threads
from ourjax.config import enable_x64


@contextlib.contextmanager
def _splitting():
  """Small signatures count as large, any NumPy call is worth splitting, three threads (three
  parts: the last one shorter), no compiled kernel; the choices start afresh."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 64)
    mp.setattr(_eager, "_SPLIT_MIN_SECONDS", 0.0)
    mp.setattr(_eager, "_NATIVE_SPLIT_MIN_SECONDS", 0.0)
    mp.setattr(_eager, "_kernel_threads", lambda: 3)
    mp.setattr(_eager, "_consider_kernel", lambda *a: None)
    _eager.clear_cache()
    try:
      yield mp
    finally:
      _eager.clear_cache()


@pytest.fixture
def split():
  with _splitting() as mp:
    yield mp


def _choices(name):
  return [c for k, c in _eager._choices.items() if k[0].name == name]


UNARY = [(lax.exp_p, np.exp), (lax.tanh_p, np.tanh), (lax.sin_p, np.sin), (lax.log_p, np.log),
         (lax.sqrt_p, np.sqrt), (lax.neg_p, np.negative), (lax.abs_p, np.abs)]
BINARY = [(lax.add_p, np.add), (lax.mul_p, np.multiply), (lax.max_p, np.maximum),
          (lax.sub_p, np.subtract), (lax.atan2_p, np.arctan2)]


@settings(max_examples=40, deadline=None)
@given(which=st.integers(0, len(UNARY) + len(BINARY) - 1),
       dtype=st.sampled_from([np.float32, np.float64, np.int32, np.complex64]),
       size=st.integers(64, 5000), seed=st.integers(0, 3))
def test_a_split_call_gives_numpys_result(which, dtype, size, seed):
  """Every call of a large signature (one-thread calls first, then split ones, then the
  choice) gives the one-thread NumPy result, bit for bit (NaNs and signed zeros included)."""
  prim, np_fn = (UNARY + BINARY)[which]
  rng = np.random.default_rng(seed)
  args = []
  for _ in range(1 if which < len(UNARY) else 2):
    v = rng.standard_normal(size) * 4
    if np.dtype(dtype).kind == "c":
      v = v + 1j * rng.standard_normal(size)
    v[rng.integers(0, size, 3)] = 0.0
    args.append(v.astype(dtype))
  try:
    with np.errstate(all="ignore"):
      want = np_fn(*args)
  except TypeError:     # (no loop: int32 log, complex max...)
    return
  with enable_x64(True):
    _split_calls(prim, args, want)


def _split_calls(prim, args, want):
  fn = prim.bind
  try:
    fn(*map(jnp.asarray, args))
  except TypeError:     # (the primitive does not take the dtype: int32 exp, complex atan2)
    return
  if want.dtype != args[0].dtype:
    return
  xs = [jnp.asarray(a) for a in args]
  with _splitting():
    for _ in range(_eager._MIN_CALLS + _eager._TRIALS + 2):
      r = fn(*xs)
      assert r.dtype == want.dtype and not r.weak_type and r.shape == want.shape
      np.testing.assert_array_equal(np.asarray(r), want)
      assert np.array_equal(np.signbit(np.asarray(r).real), np.signbit(want.real))
    (choice,) = _choices(prim.name)
    assert choice.plan is core.impl_rules[prim].numpy_fn
    assert choice.sp_calls == _eager._TRIALS and choice.split is not None
    assert choice.split == (choice.sp_best < choice.np_single)


def test_parts_cover_every_element_once(split):
  """Sizes around the part boundaries (multiples of the alignment, one more, one less) and a
  size with fewer elements than threads times the alignment (fewer parts than threads)."""
  a = _eager._SPLIT_ALIGN
  for size in (64, 65, 3 * a - 1, 3 * a, 3 * a + 1, 7 * a + 5, 1000):
    x = np.arange(size, dtype=np.float32) - 0.5 * size
    out = core.ShapedArray((size,), np.dtype(np.float32))
    r = _eager._run_split(np.negative, [jnp.asarray(x)], out)
    np.testing.assert_array_equal(np.asarray(r), -x)
    y = np.arange(size, dtype=np.float32)[::-1].copy()
    r = _eager._run_split(np.add, [jnp.asarray(x), jnp.asarray(y)], out)
    np.testing.assert_array_equal(np.asarray(r), x + y)


def test_what_is_not_split(split):
  """No plan where an operand is broadcast, the dtype narrower than 32 bits or not the result's
  (a comparison), the implementation replaced, or the backend has one thread."""
  f32 = core.ShapedArray((64, 64), np.dtype(np.float32))
  row = core.ShapedArray((64,), np.dtype(np.float32))
  f16 = core.ShapedArray((64, 64), np.dtype(np.float16))
  b = core.ShapedArray((64, 64), np.dtype(np.bool_))
  assert _eager._split_plan(lax.add_p, (f32, f32), f32, {}) is np.add
  assert _eager._split_plan(lax.add_p, (f32, row), f32, {}) is None
  assert _eager._split_plan(lax.exp_p, (f16,), f16, {}) is None
  assert _eager._split_plan(lax.lt_p, (f32, f32), b, {}) is None
  assert _eager._split_plan(lax.erf_p, (f32,), f32, {}) is None          # (not a ufunc)
  old = core.impl_rules[lax.exp_p]
  try:
    lax.exp_p.def_impl(lambda x: np.exp(x))
    assert _eager._split_plan(lax.exp_p, (f32,), f32, {}) is None
  finally:
    lax.exp_p.def_impl(old)
  assert _eager._split_plan(lax.exp_p, (f32,), f32, {}) is np.exp


def test_one_thread_backend_does_not_split(split):
  split.setattr(_eager, "_kernel_threads", lambda: 1)
  f32 = core.ShapedArray((64, 64), np.dtype(np.float32))
  assert _eager._split_plan(lax.exp_p, (f32,), f32, {}) is None


@pytest.fixture(params=["native", "python"])
def threads_kind(request, split):
  """Split calls on the CPU backend's native pool (NumPy's loop; ``_eager_loops``), or on the
  Python threads of ``_SplitPool`` (where no native loop is found)."""
  if request.param == "python":
    split.setattr(_eager_loops, "loop_of", lambda ufunc, dtype: None)
  return request.param


def test_strided_operands_split_by_rows(threads_kind):
  """A non-contiguous operand (a strided or broadcast view) is cut along the leading axis: the
  values are NumPy's; a 1-d strided operand is split by the native loop (which takes strides),
  not by the Python threads."""
  x = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64)
  out = core.ShapedArray((64, 32), np.dtype(np.float32))
  r = _eager._run_split(np.exp, [x[:, ::2]], out)
  np.testing.assert_array_equal(np.asarray(r), np.exp(x[:, ::2]))
  row = np.broadcast_to(np.linspace(0, 1, 32, dtype=np.float32), (64, 32))
  r = _eager._run_split(np.add, [x[:, :32], row], out)
  np.testing.assert_array_equal(np.asarray(r), x[:, :32] + row)
  out1 = core.ShapedArray((2048,), np.dtype(np.float32))
  r = _eager._run_split(np.exp, [x.reshape(-1)[::2]], out1)
  if threads_kind == "python":
    assert r is None
  else:
    np.testing.assert_array_equal(np.asarray(r), np.exp(x.reshape(-1)[::2]))
  assert np.array_equal(np.asarray(lax.exp(x[:, ::2])), np.exp(x[:, ::2]))


def test_eager_broadcast_is_a_view_of_arrays_only():
  """broadcast_in_dim of an Array reads its buffer in place (no copy); of a caller's writable
  NumPy array it copies (the result must not change when the caller writes)."""
  row = np.arange(4, dtype=np.float32)
  b = lax.broadcast_in_dim(row, (3, 4), (1,))
  row[0] = 99.0
  np.testing.assert_array_equal(np.asarray(b), np.broadcast_to(np.arange(4.0), (3, 4)))
  a = jnp.asarray(np.arange(4, dtype=np.float32))
  b = lax.broadcast_in_dim(a, (3, 4), (1,))
  assert np.shares_memory(np.asarray(b), np.asarray(a))
  np.testing.assert_array_equal(np.asarray(b + 1), np.broadcast_to(np.arange(4.0) + 1, (3, 4)))


def test_a_busy_pool_runs_on_one_thread(threads_kind):
  """A split call that finds the pool in use (another Python thread's call) runs on its own
  thread: the native pool's pieces all on the caller's, the Python pool's as one NumPy call."""
  x = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64)
  xa = jnp.asarray(x)
  out = core.ShapedArray((64, 64), np.dtype(np.float32))
  assert _eager._run_split(np.exp, [xa], out) is not None       # (starts the pool)
  busy = _eager._split_pool.busy if threads_kind == "python" else threads.get_pool()._busy
  with busy:
    r = _eager._run_split(np.exp, [xa], out)
    if threads_kind == "python":
      assert r is None
    else:
      np.testing.assert_array_equal(np.asarray(r), np.exp(x))
    for _ in range(_eager._MIN_CALLS + _eager._TRIALS + 1):
      np.testing.assert_array_equal(np.asarray(lax.exp(xa)), np.exp(x))


def test_calls_from_several_threads_at_once(split):
  """Python threads calling split signatures at once: each gets its own result (one uses the
  pool, the others run on their own thread)."""
  xs = [np.linspace(-i, i + 1, 8192, dtype=np.float32) for i in range(4)]
  wants = [np.tanh(x) for x in xs]
  errors = []

  def work(i):
    try:
      a = jnp.asarray(xs[i])
      for _ in range(20):
        np.testing.assert_array_equal(np.asarray(lax.tanh(a)), wants[i])
    except BaseException as e:   # noqa: BLE001
      errors.append(e)

  ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
  for t in ts:
    t.start()
  for t in ts:
    t.join()
  assert not errors, errors[0]


def test_a_fast_signature_is_not_split(split):
  split.setattr(_eager, "_SPLIT_MIN_SECONDS", 1e3)
  split.setattr(_eager, "_NATIVE_SPLIT_MIN_SECONDS", 1e3)
  x = jnp.asarray(np.linspace(-2, 2, 4096, dtype=np.float32))
  for _ in range(_eager._MIN_CALLS + 2):
    lax.exp(x)
  (choice,) = _choices("exp")
  assert choice.split is False and choice.sp_calls == 0


def test_the_split_is_timed_again_after_a_while(split):
  """Some calls after the choice between one thread and the split (``_RECHECK`` times the
  slower one's time over the faster one's), both are timed again and the faster one stays:
  a choice made while the other cores were busy does not stay for good."""
  split.setattr(_eager, "_RECHECK", 2)
  split.setattr(_eager, "_FIRST_RECHECK", 3)
  x = np.linspace(-2, 2, 4096, dtype=np.float32)
  xa = jnp.asarray(x)
  for _ in range(_eager._MIN_CALLS + _eager._TRIALS):
    np.testing.assert_array_equal(np.asarray(lax.tanh(xa)), np.tanh(x))
  (choice,) = _choices("tanh")
  assert choice.split is not None and choice.sp_calls == _eager._TRIALS
  assert choice.sp_recheck == 3           # (the first choice: looked at again soon)
  for round_ in range(2):
    for _ in range(choice.sp_recheck):
      np.testing.assert_array_equal(np.asarray(lax.tanh(xa)), np.tanh(x))
    assert choice.split is None and choice.sp_calls == choice.single_calls == 0
    for _ in range(_eager._MIN_CALLS + _eager._TRIALS):
      np.testing.assert_array_equal(np.asarray(lax.tanh(xa)), np.tanh(x))
    assert choice.split == (choice.sp_best < choice.np_single)
    assert choice.sp_calls == _eager._TRIALS and choice.single_calls == _eager._MIN_CALLS
    one, sp = choice.np_single, choice.sp_best
    assert choice.sp_recheck == int(2 * min(max(one, sp) / min(one, sp), 1000.0))


def test_no_split_is_timed_while_a_kernel_compiles(split):
  """While a compile is under way on the worker thread (it has a core), a signature's calls run
  on one thread and are not timed; the split is timed once the compile is done, or after
  ``_MAX_DEFERRED`` calls."""
  split.setattr(_eager, "_MAX_DEFERRED", 5)
  x = np.linspace(-2, 2, 4096, dtype=np.float32)
  xa = jnp.asarray(x)
  split.setitem(_eager._pending, object(), None)       # (a compile under way)
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(lax.sin(xa)), np.sin(x))
  (choice,) = _choices("sin")
  assert choice.deferred == 3 and choice.single_calls == choice.sp_calls == 0
  for _ in range(2 + _eager._MIN_CALLS + _eager._TRIALS):
    np.testing.assert_array_equal(np.asarray(lax.sin(xa)), np.sin(x))
  assert choice.deferred == 5 and choice.split is not None
  assert choice.single_calls == _eager._MIN_CALLS and choice.sp_calls == _eager._TRIALS
  _eager._pending.clear()
  for _ in range(_eager._MIN_CALLS + _eager._TRIALS):
    lax.cos(xa)
  (choice,) = _choices("cos")
  assert choice.deferred == 0 and choice.split is not None
