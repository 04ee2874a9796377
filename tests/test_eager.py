"""The eager path (``ourjax/_eager.py`` and the fast paths in front of it): results, dtypes and
weak types as the traced path gives them, errors every time, the x64 switch, and the choice
between a compiled kernel and NumPy for large operands."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import _eager, lax
from ourjax.config import enable_x64


def _reference(f):
  return ourjax.jit(f, backend="reference")


def _same(eager, ref):
  """Same dtype, weak type, shape and values (NaNs and the sign of zeros included)."""
  assert eager.dtype == ref.dtype
  assert eager.weak_type == ref.weak_type
  e, r = np.asarray(eager), np.asarray(ref)
  assert e.shape == r.shape
  if e.dtype.kind in "fc":
    np.testing.assert_allclose(e, r, rtol=2e-6, atol=0)
    assert np.array_equal(np.signbit(e.real), np.signbit(r.real))
  else:
    assert np.array_equal(e, r)


_f32 = np.array([[-1.5, -0.0, 0.0, 2.25], [3.0, -4.0, 0.5, 7.0]], np.float32)
_i32 = np.array([[-3, 0, 5, 7], [1, -2, 9, 4]], np.int32)

CASES = [
    ("add", lambda x, y: x + y), ("mul scalar", lambda x, y: x * 2.0),
    ("int scalar", lambda x, y: x * 3), ("rsub", lambda x, y: 1.0 - x),
    ("compare", lambda x, y: x < y), ("compare scalar", lambda x, y: x > 0),
    ("where", lambda x, y: jnp.where(x > 0, x, y)), ("where scalar", lambda x, y: jnp.where(x > 0, x, 0.0)),
    ("exp", lambda x, y: jnp.exp(x)), ("sign", lambda x, y: jnp.sign(x)),
    ("sum", lambda x, y: jnp.sum(x)), ("sum axis", lambda x, y: jnp.sum(x, axis=0)),
    ("max", lambda x, y: jnp.max(x, axis=1)), ("min keepdims", lambda x, y: x.min(0, keepdims=True)),
    ("prod", lambda x, y: jnp.prod(x, axis=(0, 1))), ("matmul", lambda x, y: x @ y.T),
    ("vec matmul", lambda x, y: x[0] @ y.T), ("matvec", lambda x, y: x @ y[1]),
    ("vecvec", lambda x, y: x[0] @ y[1]), ("dot -0", lambda x, y: x[:, 1] @ jnp.ones(2, x.dtype)),
    ("transpose", lambda x, y: x.T), ("reshape", lambda x, y: x.reshape(4, 2)),
    ("slice", lambda x, y: x[1:2, 1:3]), ("at set", lambda x, y: x.at[1].set(0)),
    ("at add", lambda x, y: x.at[0, 2].add(5)), ("at set oob", lambda x, y: x.at[7].set(1)),
    ("astype int", lambda x, y: x.astype(jnp.int32)), ("astype f16", lambda x, y: x.astype(jnp.float16)),
    ("concatenate", lambda x, y: jnp.concatenate([x, y])),
]


@pytest.mark.parametrize("name,f", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_eager_matches_the_reference_backend(name, f, dtype):
  x = _f32 if dtype == "float32" else _i32
  y = x[::-1] * 2
  if dtype == "int32" and name in ("exp", "dot -0"):
    pytest.skip("float only")
  _same(f(jnp.asarray(x), jnp.asarray(y)), _reference(f)(x, y))


def test_weak_types_through_the_fast_paths():
  w = jnp.asarray(2.0) * 1.0                # weak f32 (a Python scalar times a weak array)
  s = jnp.asarray(np.float32(2.0))          # strong f32
  for f in (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: jnp.maximum(a, b),
            lambda a, b: jnp.where(True, a, b)):
    for a, b in ((w, w), (w, s), (s, w), (s, s)):
      _same(f(a, b), _reference(f)(a, b))


def test_matmul_of_weak_and_strong_operands():
  """The eager matmul path (Arrays of one float32 dtype: no promotion) gives the general path's
  dtype, weak type and values for every mix of weak and strong, vector and matrix operands."""
  wv = jnp.broadcast_to(jnp.asarray(-0.0), (2,)) + jnp.asarray([1.5, -0.0])  # strong f32
  sv = jnp.asarray(np.array([1.5, -2.0], np.float32))
  wk = jnp.broadcast_to(jnp.asarray(-0.0), (2,))                              # weak f32
  sm = jnp.asarray(np.array([[0.5, -0.0], [-0.0, 3.0]], np.float32))
  wm = jnp.broadcast_to(jnp.asarray(2.0), (2, 2))
  assert wk.weak_type and wm.weak_type and not wv.weak_type
  for a, b in ((wk, sv), (sv, wk), (wk, wk), (wv, sm), (sm, wk), (wm, sm), (sm, wm),
               (wm, wm), (wm, wk), (sm, sm)):
    f = lambda a, b: a @ b          # noqa: E731
    _same(f(a, b), _reference(f)(a, b))


def test_float64_and_python_scalars_under_x64():
  x = np.array([1.5, -0.0, 2.0])
  with enable_x64():
    for f in (lambda v: v * 2.0, lambda v: 1 - v, lambda v: v > 0, lambda v: jnp.sum(v),
              lambda v: jnp.where(v > 0, v, 0.5)):
      _same(f(jnp.asarray(x)), _reference(f)(x))


def test_reductions_without_identity_reject_empty_axes():
  for _ in range(2):
    with pytest.raises(ValueError, match="zero-size array to reduction operation max"):
      jnp.max(jnp.zeros((0, 3), jnp.float32), axis=0)
  assert np.asarray(jnp.max(jnp.zeros((0, 3), jnp.float32), axis=1)).shape == (0,)


def test_abstract_eval_errors_are_raised_every_time():
  a, b = jnp.ones(3, jnp.float32), jnp.ones(3, jnp.int32)
  for _ in range(3):
    with pytest.raises(TypeError, match="add requires arguments to have the same dtypes"):
      lax.add(a, b)
  for _ in range(3):
    with pytest.raises(TypeError, match="incompatible shapes"):
      lax.add(a, jnp.ones(4, jnp.float32))


def test_cached_abstract_eval_follows_the_x64_switch():
  x = np.arange(3, dtype=np.float64)
  assert lax.neg(x).dtype == np.float32
  with enable_x64():
    assert lax.neg(x).dtype == np.float64
    assert (jnp.ones(2) + 1).dtype == np.float64
  assert lax.neg(x).dtype == np.float32
  assert (jnp.ones(2) + 1).dtype == np.float32


def test_python_scalars_keep_their_conversion_rules():
  x8 = jnp.asarray(np.array([1, 2], np.int8))
  _same(x8 + 300, _reference(lambda v: v + 300)(np.array([1, 2], np.int8)))   # wraps, as JAX
  for x in (jnp.ones(2, jnp.int32), jnp.ones(2, jnp.float32)):   # (as JAX: beyond int32)
    with pytest.raises(OverflowError):
      x + 2 ** 40
  with np.errstate(over="ignore"):
    big = jnp.ones(2, jnp.float32) * 1e300     # overflows float32 to inf, as a conversion does
  assert np.isinf(np.asarray(big)).all()
  assert np.signbit(np.asarray(jnp.zeros(2, jnp.float32) * -0.0)).all()


def test_float_to_int_conversion_truncates_and_saturates():
  v = np.array([-2.7, -0.5, -0.0, 0.5, 2.9, np.nan, 3e9, -3e9, np.inf, -np.inf], np.float32)
  got = np.asarray(lax.convert_element_type(v, np.int32))
  with np.errstate(invalid="ignore"):
    want = np.where(np.isnan(v), 0, np.clip(np.trunc(v.astype(np.float64)), -2 ** 31, 2 ** 31 - 1))
  assert np.array_equal(got, want.astype(np.int32))
  h = np.array([255.9, -0.0, 256.0, -1.0], np.float16)
  assert np.array_equal(np.asarray(lax.convert_element_type(h, np.uint8)), [255, 0, 255, 0])


_EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 2.0 ** 31, -2.0 ** 31, 2.0 ** 31 - 128,
          2.0 ** 63, -2.0 ** 63, 3e9, -3e9, 1e19, -1e19, 255.5, -129.0]


@settings(max_examples=40, deadline=None)
@given(src=st.sampled_from([np.float32, np.float64]),
       dst=st.sampled_from([np.int32, np.int64, np.int8, np.uint8, np.uint32, np.int16]),
       n=st.integers(0, 40), picks=st.lists(st.integers(0, len(_EDGES) - 1), max_size=8),
       seed=st.integers(0, 9))
def test_float_to_int_conversions_saturate_for_every_shape(src, dst, n, picks, seed):
  """Each element as XLA converts it (NaN -> 0, truncation, saturation at the type's bounds),
  whether the array holds in-range values only or some NaN/out-of-range ones."""
  rng = np.random.default_rng(seed)
  v = (rng.standard_normal(n) * 10.0 ** rng.integers(0, 12)).astype(src)
  for i, k in enumerate(picks):
    if i < n:
      v[rng.integers(0, n)] = _EDGES[k]
  with enable_x64(True):
    got = np.asarray(lax.convert_element_type(v, dst))
  info = np.iinfo(dst)
  with np.errstate(invalid="ignore"):
    t = np.trunc(np.where(np.isnan(v), 0.0, v.astype(np.float64)))
    high, low = t >= float(info.max) + 1.0, t < float(info.min)
    want = np.where(high | low, 0.0, t).astype(dst)     # (exact: in range)
  want[high], want[low] = info.max, info.min
  assert got.dtype == np.dtype(dst)
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,perm", [((300, 520), (1, 0)), ((4, 260, 300), (0, 2, 1)),
                                        ((260, 300, 3), (2, 1, 0)), ((260, 300, 3), (1, 0, 2)),
                                        ((130, 2100), (1, 0))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_transposes_are_exact_copies(shape, perm, dtype):
  x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
  with enable_x64(dtype == np.float64):
    out = np.asarray(lax.transpose(x, perm))
  assert out.flags.c_contiguous and out.dtype == dtype
  assert np.array_equal(out, np.transpose(x, perm))


@pytest.mark.parametrize("mode", [None, "clip", "drop"])
def test_single_window_scatters_match_numpy(mode):
  x = np.arange(20, dtype=np.float32).reshape(4, 5)
  for idx, val in (((1,), 9.0), ((slice(None), 2), 7.0), ((2, slice(1, 3)), -1.0), ((-1, 0), 3.0),
                   ((6,), 1.0), ((1, 9), 2.0)):
    in_bounds = all(not isinstance(i, int) or -n <= i < n for i, n in zip(idx, x.shape))
    want = x.copy()
    if in_bounds:
      want[idx] = val
    elif mode == "clip":
      want[tuple(min(i, n - 1) if isinstance(i, int) else i for i, n in zip(idx, x.shape))] = val
    got = np.asarray(jnp.asarray(x).at[idx].set(val, mode=mode))
    assert np.array_equal(got, want), (idx, mode)
    want_add = x.copy()
    if in_bounds:
      want_add[idx] += val
    if mode != "clip":
      assert np.array_equal(np.asarray(jnp.asarray(x).at[idx].add(val, mode=mode)), want_add)


@pytest.fixture
def eager_kernels(monkeypatch):
  """Kernels of small signatures, compiled in the call that decides to (not on the worker)."""
  monkeypatch.setattr(_eager, "_BACKGROUND", False)
  monkeypatch.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 64)
  monkeypatch.setattr(_eager, "_DISPATCH_SECONDS", 0.0)
  _eager.clear_cache()
  yield
  _eager.clear_cache()


def _choice(prim_name):
  return [c for k, c in _eager._choices.items() if k[0].name == prim_name]


def test_a_kernel_replaces_numpy_where_it_is_faster(eager_kernels, monkeypatch):
  rng = np.random.default_rng(1)
  m, a, b = rng.random((64, 64)) > 0.5, rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
  m, a, b = (jnp.asarray(v.astype(np.float32) if v.dtype != bool else v) for v in (m, a, b))
  want = np.where(np.asarray(m), np.asarray(a), np.asarray(b))
  monkeypatch.setitem(_eager.KERNEL_COST, "select_n", 0.0)       # predicted free
  results = [lax.select(m, a, b) for _ in range(_eager._MIN_CALLS + 2 * _eager._TRIALS + 1)]
  for r in results:
    assert r.dtype == np.float32 and not r.weak_type
    assert np.array_equal(np.asarray(r), want)
  (choice,) = _choice("select_n")
  assert choice.state in ("kernel", "numpy")
  assert choice.k_calls == _eager._TRIALS == choice.np_trials
  assert (choice.state == "kernel") == (choice.k_best < choice.np_best)


@pytest.mark.parametrize("x64", [False, True])
def test_a_kernel_is_built_on_the_worker_while_numpy_answers(monkeypatch, x64):
  """The kernel of a repeated signature is compiled on the worker thread (the calls meanwhile
  are NumPy's), under the calling thread's flags (x64: float64 operands stay float64); once
  built, it is timed against NumPy and the faster one is kept."""
  monkeypatch.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 64)
  monkeypatch.setattr(_eager, "_DISPATCH_SECONDS", 0.0)
  monkeypatch.setitem(_eager.KERNEL_COST, "select_n", 0.0)
  _eager.clear_cache()
  dt = np.float64 if x64 else np.float32
  rng = np.random.default_rng(2)
  m, a, b = rng.random((64, 64)) > 0.5, rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
  want = np.where(m, a, b).astype(dt)
  try:
    with enable_x64(x64):
      m, a, b = jnp.asarray(m), jnp.asarray(a.astype(dt)), jnp.asarray(b.astype(dt))
      results = [lax.select(m, a, b) for _ in range(_eager._MIN_CALLS)]
      (choice,) = _choice("select_n")
      assert choice.np_calls == _eager._MIN_CALLS and choice.state in ("compiling", "trial")
      assert _eager.wait_for_kernels(120)
      assert choice.state == "trial" and choice.fn is not None
      results += [lax.select(m, a, b) for _ in range(2 * _eager._TRIALS + 2)]
    for r in results:
      assert r.dtype == dt and not r.weak_type
      assert np.array_equal(np.asarray(r), want)
    assert choice.k_calls == _eager._TRIALS == choice.np_trials
    assert choice.state in ("kernel", "numpy")
    assert (choice.state == "kernel") == (choice.k_best < choice.np_best)
  finally:
    _eager.clear_cache()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_during_a_kernel_compile_leaves_a_child_that_compiles(monkeypatch):
  """A fork waits for the worker's compile under way: the child can compile (it would otherwise
  inherit the compiler's locks held by a thread it does not have, and hang)."""
  monkeypatch.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 64)
  monkeypatch.setitem(_eager.KERNEL_COST, "select_n", 0.0)
  _eager.clear_cache()
  rng = np.random.default_rng(3)
  m = jnp.asarray(rng.random((64, 64)) > 0.5)
  a, b = (jnp.asarray(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
  want = np.where(np.asarray(m), np.asarray(a), np.asarray(b))
  for _ in range(_eager._MIN_CALLS):
    lax.select(m, a, b)
  pid = os.fork()
  if pid == 0:      # the child: a compile of its own, then exit (status 0: it worked)
    ok = False
    try:
      # (on the CPU: a process forked from one that initialised CUDA cannot use the GPU)
      r = ourjax.jit(lambda m, a, b: lax.select(m, b, a), backend="cpu")(m, a, b)
      ok = np.array_equal(np.asarray(r), np.where(np.asarray(m), np.asarray(b), np.asarray(a)))
    finally:
      os._exit(0 if ok else 1)
  deadline = time.monotonic() + 60
  while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
      break
    if time.monotonic() > deadline:
      os.kill(pid, 9)
      os.waitpid(pid, 0)
      pytest.fail("the child process hung compiling")
    time.sleep(0.05)
  assert os.waitstatus_to_exitcode(status) == 0
  assert _eager.wait_for_kernels(120)
  for _ in range(2 * _eager._TRIALS + 1):
    assert np.array_equal(np.asarray(lax.select(m, a, b)), want)
  _eager.clear_cache()


def test_no_compile_is_queued_past_the_limit(monkeypatch):
  monkeypatch.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 64)
  monkeypatch.setattr(_eager, "_MAX_PENDING", 0)
  monkeypatch.setitem(_eager.KERNEL_COST, "erf", 0.0)
  _eager.clear_cache()
  x = jnp.asarray(np.linspace(-2, 2, 4096, dtype=np.float32))
  for _ in range(4):
    lax.erf(x)
  (choice,) = _choice("erf")
  assert choice.state == "numpy" and choice.fn is None and not choice.settled
  assert choice.np_calls == 4
  _eager.clear_cache()


def test_the_kernel_and_numpy_are_timed_again_after_a_while(eager_kernels, monkeypatch):
  """Some calls after a trial's choice (``_FIRST_RECHECK`` after the first, then ``_RECHECK``
  times the loser's time over the winner's), the kernel and NumPy are timed in turn again, and
  the faster one stays; every call's result is the same."""
  monkeypatch.setitem(_eager.KERNEL_COST, "select_n", 0.0)
  monkeypatch.setattr(_eager, "_RECHECK", 2)
  monkeypatch.setattr(_eager, "_FIRST_RECHECK", 3)
  rng = np.random.default_rng(4)
  m = jnp.asarray(rng.random((64, 64)) > 0.5)
  a, b = (jnp.asarray(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
  want = np.where(np.asarray(m), np.asarray(a), np.asarray(b))

  def call():
    assert np.array_equal(np.asarray(lax.select(m, a, b)), want)

  for _ in range(_eager._MIN_CALLS + 1 + 2 * _eager._TRIALS):   # the first trial
    call()
  (choice,) = _choice("select_n")
  assert choice.state in ("kernel", "numpy") and choice.k_calls == _eager._TRIALS
  assert choice.recheck == 3
  for _ in range(2):
    for _ in range(choice.recheck):
      call()
    assert choice.state == "trial" and choice.k_calls == choice.np_trials == 0
    for _ in range(2 * _eager._TRIALS):       # the next trial (the kernel is warm)
      call()
    assert choice.state in ("kernel", "numpy")
    assert choice.k_calls == choice.np_trials == _eager._TRIALS
    assert (choice.state == "kernel") == (choice.k_best < choice.np_best)
    best = (choice.k_best, choice.np_best)
    assert choice.recheck == int(2 * min(max(best) / min(best), 1000.0))


def test_no_kernel_where_none_is_predicted_to_help(eager_kernels, monkeypatch):
  x = jnp.asarray(np.linspace(-2, 2, 4096, dtype=np.float32))
  monkeypatch.setitem(_eager.KERNEL_COST, "tanh", 1e6)           # predicted far slower
  for _ in range(4):
    r = jnp.tanh(x)
  assert np.allclose(np.asarray(r), np.tanh(np.linspace(-2, 2, 4096, dtype=np.float32)))
  (choice,) = _choice("tanh")
  assert choice.state == "numpy" and choice.fn is None and choice.np_calls == 4
  assert not choice.settled


def test_no_kernel_under_disable_jit(eager_kernels, monkeypatch):
  x = jnp.asarray(np.linspace(-2, 2, 4096, dtype=np.float32))
  monkeypatch.setitem(_eager.KERNEL_COST, "erf", 0.0)
  with ourjax.disable_jit():
    for _ in range(3):
      r = lax.erf(x)
  (choice,) = _choice("erf")
  assert choice.fn is None
  ref = np.asarray(_reference(lax.erf)(x))
  np.testing.assert_allclose(np.asarray(r), ref, rtol=1e-6, atol=1e-7)


def test_eager_ops_in_one_thread_while_another_traces():
  """Per-thread trace state: a thread inside a jit trace does not make another thread's eager
  operations traced (the fast path reads the calling thread's state)."""
  inside, release, errors = threading.Event(), threading.Event(), []

  def tracer_thread():
    def f(x):
      inside.set()
      release.wait(10)
      return x + 1
    try:
      ourjax.jit(f)(np.ones(3, np.float32))
    except Exception as e:   # noqa: BLE001
      errors.append(e)

  t = threading.Thread(target=tracer_thread)
  t.start()
  assert inside.wait(10)
  try:
    r = jnp.asarray(np.arange(3, dtype=np.float32)) * 2.0 + 1.0
    assert isinstance(r, ourjax.array.Array)
    assert np.array_equal(np.asarray(r), [1.0, 3.0, 5.0])
  finally:
    release.set()
    t.join()
  assert not errors


def test_primitive_impl_read_as_a_value_wraps_and_restores():
  """``p.impl`` as JAX code uses it: read, wrapped with def_impl, then restored."""
  from ourjax import core
  original = core.impl_rules[lax.sin_p]
  old = lax.sin_p.impl
  calls = []
  lax.sin_p.def_impl(lambda x, **kw: calls.append(np.shape(x)) or old(x, **kw))
  try:
    x = np.array([0.5, 1.5], np.float32)
    np.testing.assert_allclose(np.asarray(jnp.sin(x)), np.sin(x), rtol=1e-6)
    assert calls == [(2,)]
    np.testing.assert_allclose(np.asarray(old(x)), np.sin(x), rtol=1e-6)
    assert calls == [(2,)]          # the value read before def_impl keeps the old rule
  finally:
    lax.sin_p.def_impl(old)
  assert core.impl_rules[lax.sin_p] is original
  np.testing.assert_allclose(float(lax.sin_p.impl(np.float32(1.0))), np.sin(1.0), rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.int8, np.uint16, np.int32, np.bool_, np.float16]),
       shape=st.sampled_from([(0,), (3, 0), (0, 4), (2, 3), (5,), ()]),
       axes=st.sampled_from([(0,), (-1,), None]), seed=st.integers(0, 5))
def test_max_and_min_reductions_give_the_identity_only_when_empty(dtype, shape, axes, seed):
  v = (np.random.default_rng(seed).standard_normal(shape) * 50).astype(dtype)
  axes = tuple(range(len(shape))) if axes is None or not shape else \
      tuple(a % len(shape) for a in axes)
  for prim, np_fn, is_max in ((lax.reduce_max_p, np.max, True), (lax.reduce_min_p, np.min, False)):
    got = prim.bind(jnp.asarray(v), axes=axes, out_sharding=None)
    if v.dtype == np.bool_:
      ident = not is_max
    elif v.dtype.kind == "f":
      ident = -np.inf if is_max else np.inf
    else:
      ident = np.iinfo(v.dtype).min if is_max else np.iinfo(v.dtype).max
    want = np_fn(v, axis=axes, initial=ident)
    assert got.dtype == v.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int8, np.uint8, np.complex64,
                              np.float16, "bfloat16", np.int64]),
       shape=st.sampled_from([(), (0,), (7,), (2, 3)]), y=st.integers(-4, 17),
       seed=st.integers(0, 5))
def test_integer_pow_by_its_static_exponent(dtype, shape, y, seed):
  """lax.integer_pow (eager) is the repeated squaring of the reference executor's integer_pow,
  bit for bit, in the operand's dtype (float32 for 16-bit floats), and close to float64 pow."""
  import ml_dtypes
  from ourjax.backends import reference_ops as rops
  dt = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
  if y < 0 and dt.kind in "iu":
    return
  v = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dt)
  with enable_x64(True):
    got = np.asarray(lax.integer_pow(v, y))
  low = dt.itemsize < 4 and dt.kind in "fV"
  with np.errstate(all="ignore"):
    base = v.astype(np.float32) if low else v
    want = rops.integer_pow(base, np.array(abs(y)))
    if y < 0:
      want = np.asarray(1, base.dtype) / want
    want = want.astype(dt)
  assert got.dtype == dt and got.shape == v.shape
  np.testing.assert_array_equal(got, want)
  if dt.kind in "fc" and not low and v.size:
    with np.errstate(all="ignore"):
      close = np.power(v.astype(np.complex128 if dt.kind == "c" else np.float64), y)
    np.testing.assert_allclose(got, close, rtol=1e-5 * (abs(y) + 1))


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32,
                              np.uint64, np.int64]),
       amount_dtype=st.sampled_from([np.int32, np.uint32, np.int8, np.uint8]),
       shape=st.sampled_from([(), (5,), (2, 3)]),
       amount=st.sampled_from([0, 1, 3, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, -1, -8, 100]),
       seed=st.integers(0, 9))
def test_shifts_by_one_amount_match_the_elementwise_shift(dtype, amount_dtype, shape, amount,
                                                          seed):
  """A shift by a 0-d amount (the common case: a constant) takes a one-shift path; it gives
  what shifting by the same amount broadcast to every element gives (XLA's rules for amounts
  of the bit width or more, and negative ones)."""
  from ourjax.backends import reference_ops as rops
  info = np.iinfo(dtype)
  x = np.random.default_rng(seed).integers(info.min, info.max, size=shape, dtype=dtype,
                                           endpoint=True)
  with np.errstate(all="ignore"):
    y = np.asarray(amount).astype(amount_dtype)
  for fn in (rops.shift_left, rops.shift_right_logical, rops.shift_right_arithmetic):
    fast = np.asarray(fn(x, y))
    slow = np.asarray(fn(x.reshape(x.shape or (1,)), np.full(x.shape or (1,), y))).reshape(
        x.shape)
    assert fast.dtype == slow.dtype == x.dtype
    np.testing.assert_array_equal(fast, slow)
  bits = 8 * np.dtype(dtype).itemsize
  u = np.dtype(f"u{np.dtype(dtype).itemsize}")
  s = int(y)
  want = (x.view(u) << u.type(s)).view(dtype) if 0 <= s < bits else np.zeros_like(x)
  np.testing.assert_array_equal(np.asarray(rops.shift_left(x, y)), want)


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64, np.int8, np.uint16, np.int64, np.bool_,
                              np.complex64, np.float16]),
       size=st.sampled_from([1, 100, 8191, 8192, 20000]), seed=st.integers(0, 5))
def test_a_large_two_way_select_is_numpys_where_bit_for_bit(dtype, size, seed):
  """select_n with a boolean mask (large operands: bit operations instead of NumPy's where)
  gives NumPy's where, bit for bit (NaN payloads, signed zeros)."""
  from ourjax.lax.elementwise import _select_n_impl
  rng = np.random.default_rng(seed)
  m = rng.random(size) > 0.5
  raw = rng.integers(0, 256, size=(2, size * np.dtype(dtype).itemsize), dtype=np.uint8)
  f, t = raw[0].view(dtype), raw[1].view(dtype)
  if dtype == np.bool_:
    f, t = f > 127, t > 127
  want = np.where(m, t, f)
  got = _select_n_impl(m, f, t)
  assert got.dtype == want.dtype and got.shape == want.shape
  assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
  with enable_x64(True):
    eager = np.asarray(lax.select_n(jnp.asarray(m), jnp.asarray(f), jnp.asarray(t)))
  assert np.array_equal(eager.view(np.uint8), want.view(np.uint8))


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.int32, np.bool_, np.uint8, np.float16]),
       n=st.integers(1, 5), nd=st.integers(1, 3), axis=st.integers(-3, 2),
       sizes=st.lists(st.integers(0, 3), min_size=5, max_size=5), seed=st.integers(0, 3))
def test_concatenate_of_arrays_matches_numpy(dtype, n, nd, axis, sizes, seed):
  """jnp.concatenate of Arrays (its one-bind path where nothing is promoted or dropped, and the
  general one) gives NumPy's result, the arrays' dtype (or the promoted one) and errors."""
  rng = np.random.default_rng(seed)
  base = [2, 3, 4][:nd]
  parts = []
  for i in range(n):
    shape = list(base)
    if -nd <= axis < nd:
      shape[axis % nd] = sizes[i]
    parts.append((rng.standard_normal(shape) * 5).astype(dtype))
  arrays = [jnp.asarray(p) for p in parts]
  try:
    want = np.concatenate(parts, axis=axis)
  except (ValueError, np.exceptions.AxisError):
    with pytest.raises((ValueError, TypeError)):
      jnp.concatenate(arrays, axis=axis)
    return
  got = jnp.concatenate(arrays, axis=axis)
  assert got.dtype == want.dtype and got.shape == want.shape and not got.weak_type
  np.testing.assert_array_equal(np.asarray(got), want)
  ref = ourjax.jit(lambda *a: jnp.concatenate(list(a), axis=axis), backend="reference")(*arrays)
  _same(got, ref)
