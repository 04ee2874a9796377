"""Replayed eager calls of jnp functions (``ourjax/_eager_replay.py``): the third call of a
signature (replayed from its jaxpr) gives what the first (direct, op by op) gave, and what the
reference backend and NumPy give: values, dtypes, weak types, errors, the x64 switch."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import nn, random
from ourjax.config import config, debug_nans, enable_x64

_DTYPES = ["float32", "int32", "bool", "bfloat16", "float16", "uint8", "int8"]
_SHAPES = [(), (0,), (1,), (5,), (3, 4), (2, 0, 3), (2, 3, 2)]


def _value(dtype, shape, seed):
  rng = np.random.default_rng(seed)
  if dtype == "bool":
    return rng.random(shape) < 0.5
  if dtype in ("int32", "int8", "uint8"):
    lo = 0 if dtype == "uint8" else -9
    return rng.integers(lo, 10, size=shape).astype(dtype)
  x = rng.standard_normal(shape) * 3
  if x.size:
    x.flat[0] = -0.0
  dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
  return x.astype(dt)


def _same(a, b):
  """Same type of result, dtype, weak type, shape and bits (NaNs and zeros' signs included)."""
  if isinstance(a, (tuple, list)):
    assert type(a) is type(b) and len(a) == len(b)
    for x, y in zip(a, b):
      _same(x, y)
    return
  assert a.dtype == b.dtype, (a.dtype, b.dtype)
  assert a.weak_type == b.weak_type
  x, y = np.asarray(a), np.asarray(b)
  assert x.shape == y.shape
  if x.dtype.kind in "fcV" or x.dtype == ml_dtypes.bfloat16:
    x64, y64 = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64), \
        y.astype(np.complex128 if y.dtype.kind == "c" else np.float64)
    np.testing.assert_array_equal(x64, y64)
    assert np.array_equal(np.signbit(x64.real), np.signbit(y64.real))
  else:
    np.testing.assert_array_equal(x, y)


def _three_calls(f, *args, **kwargs):
  """(op-by-op result, replayed result); the second call is the one that traces."""
  first = f(*args, **kwargs)
  f(*args, **kwargs)
  return first, f(*args, **kwargs)


def _direct(f):
  return f.__wrapped__


# name, function, whether integer/bool operands are in its domain
FUNCS = [
    ("mean", lambda x: jnp.mean(x)),
    ("mean axis keepdims", lambda x: jnp.mean(x, axis=-1, keepdims=True)),
    ("var", lambda x: jnp.var(x)),
    ("var ddof", lambda x: jnp.var(x, axis=0, ddof=1)),
    ("std", lambda x: jnp.std(x, axis=None)),
    ("norm", lambda x: jnp.linalg.norm(x)),
    ("norm ord1", lambda x: jnp.linalg.norm(x.reshape(-1), ord=1)),
    ("clip", lambda x: jnp.clip(x, -1, 2)),
    ("clip float", lambda x: jnp.clip(x, -0.5, None)),
    ("where scalar", lambda x: jnp.where(x > 0, x, 0.0)),
    ("where int scalar", lambda x: jnp.where(x > 1, 7, x)),
    ("softmax", lambda x: nn.softmax(x)),
    ("log_softmax", lambda x: nn.log_softmax(x, axis=0)),
    ("logsumexp", lambda x: nn.logsumexp(x)),
    ("logsumexp sign", lambda x: nn.logsumexp(x, axis=0, return_sign=True)),
    ("stack", lambda x: jnp.stack([x, x[::-1]], axis=-1)),
    ("vstack", lambda x: jnp.vstack((x, x))), ("hstack", lambda x: jnp.hstack([x, x])),
    ("average", lambda x: jnp.average(x, axis=0)),
    ("average weights", lambda x: jnp.average(x, weights=x, returned=True)),
    ("ptp", lambda x: jnp.ptp(x, axis=0, keepdims=True)),
    ("isclose", lambda x: jnp.isclose(x, x[::-1], rtol=0.5)),
    ("allclose", lambda x: jnp.allclose(x, x, equal_nan=True)),
    ("nan_to_num", lambda x: jnp.nan_to_num(x / x, nan=-1.0)),
    ("outer", lambda x: jnp.outer(x, x)), ("kron", lambda x: jnp.kron(x, x[:1])),
    ("trace", lambda x: jnp.trace(x)),
    ("gelu", lambda x: nn.gelu(x)), ("gelu exact", lambda x: nn.gelu(x, approximate=False)),
    ("silu", lambda x: nn.silu(x)), ("softplus", lambda x: nn.softplus(x)),
    ("log_sigmoid", lambda x: nn.log_sigmoid(x)), ("elu", lambda x: nn.elu(x, 0.5)),
    ("selu", lambda x: nn.selu(x)), ("mish", lambda x: nn.mish(x)),
    ("glu", lambda x: nn.glu(x, axis=-1)), ("one_hot", lambda x: nn.one_hot(x, 5)),
    ("standardize", lambda x: nn.standardize(x, axis=0)),
]
_FLOAT_ONLY = {"softmax", "log_softmax", "logsumexp", "logsumexp sign", "gelu", "gelu exact",
               "silu", "softplus", "log_sigmoid", "elu", "selu", "mish", "glu", "standardize"}


def _errors_alike(f, x):
  """Run ``f(x)`` three times: either all three raise the same error type, or none does and the
  results are the same."""
  outs = []
  for _ in range(3):
    try:
      outs.append(f(x))
    except Exception as e:   # noqa: BLE001
      outs.append(type(e))
  if isinstance(outs[0], type):
    assert outs == [outs[0]] * 3, outs
    return None
  assert not any(isinstance(o, type) for o in outs), outs
  _same(outs[0], outs[2])
  return outs[2]


@settings(max_examples=60, deadline=None)
@given(name_f=st.sampled_from(FUNCS), dtype=st.sampled_from(_DTYPES),
       shape=st.sampled_from(_SHAPES), seed=st.integers(0, 3))
def test_replayed_calls_match_the_first_call(name_f, dtype, shape, seed):
  name, f = name_f
  x = jnp.asarray(_value(dtype, shape, seed))
  _errors_alike(f, x)


@pytest.mark.parametrize("name,f", FUNCS, ids=[c[0] for c in FUNCS])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
def test_replayed_calls_match_the_reference_backend(name, f, dtype):
  if name in _FLOAT_ONLY and dtype == "int32":
    dtype = "float32"
  x = jnp.asarray(_value(dtype, (3, 4), 1))
  first, replayed = _three_calls(f, x)
  _same(first, replayed)
  ref = ourjax.jit(f, backend="reference")(x)
  if isinstance(ref, tuple):
    for a, b in zip(replayed, ref):
      assert a.dtype == b.dtype and a.weak_type == b.weak_type
      np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                 rtol=1e-2 if dtype == "bfloat16" else 1e-5, atol=1e-6)
    return
  assert replayed.dtype == ref.dtype and replayed.weak_type == ref.weak_type
  np.testing.assert_allclose(np.asarray(replayed, np.float64), np.asarray(ref, np.float64),
                             rtol=1e-2 if dtype == "bfloat16" else 1e-5, atol=1e-6)


def test_values_against_numpy():
  xn = _value("float32", (4, 5), 2)
  x = jnp.asarray(xn)
  x64 = xn.astype(np.float64)
  for _ in range(3):
    np.testing.assert_allclose(jnp.mean(x, axis=0), x64.mean(0), rtol=1e-6)
    np.testing.assert_allclose(jnp.var(x, axis=1, ddof=1), x64.var(1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(jnp.std(x), x64.std(), rtol=1e-6)
    np.testing.assert_allclose(jnp.linalg.norm(x), np.linalg.norm(x64), rtol=1e-6)
    np.testing.assert_array_equal(jnp.clip(x, -1, 1), np.clip(xn, -1, 1))
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(nn.softmax(x), e / e.sum(1, keepdims=True), rtol=1e-6)
  assert jnp.mean._replay_cache      # (what this test measures went through the replay)


def test_python_scalars_are_part_of_the_signature():
  x = jnp.asarray(np.array([-2.0, -0.0, 0.0, 3.0], np.float32))
  for lo in (0.0, -0.0, 1.0, -1.0, 1, True, 0.0, -0.0, 1.0, -1.0, 1, True):
    got = jnp.clip(x, lo, None)
    want = _direct(jnp.clip)(x, lo, None)
    _same(got, want)
  for fill in (0.0, -0.0, 2, 2.5, 0.0, -0.0, 2, 2.5):
    _same(jnp.where(x > 0, x, fill), _direct(jnp.where)(x > 0, x, fill))


def test_weak_types_and_dtypes_follow_the_operands():
  w = jnp.asarray(2.0) + 0        # (a weakly typed 0-d Array)
  assert w.weak_type
  for _ in range(3):
    r = jnp.where(w > 0, w, 1.0)
    assert r.weak_type and r.dtype == np.float32
    r = jnp.clip(jnp.arange(4, dtype=jnp.int8), 1, 2)
    assert r.dtype == np.int8 and not r.weak_type
    r = jnp.mean(jnp.arange(4, dtype=jnp.int32))
    assert r.dtype == np.float32
    r = jnp.mean(jnp.ones(3, jnp.bfloat16))
    assert r.dtype == jnp.bfloat16


def test_the_x64_switch_is_part_of_the_signature():
  x = jnp.asarray(np.arange(6, dtype=np.int32))
  for _ in range(3):
    assert jnp.mean(x).dtype == np.float32
  with enable_x64(True):
    for _ in range(3):
      assert jnp.mean(x).dtype == np.float32            # (as JAX: int32 -> float32)
      assert jnp.mean(jnp.asarray(np.arange(6))).dtype == np.float64
      assert jnp.mean(jnp.asarray(np.arange(6.0))).dtype == np.float64
      assert jnp.clip(x, 1, 2**40 if _ == 2 else 2).dtype == np.int32
  for _ in range(3):
    assert jnp.mean(x).dtype == np.float32


def test_errors_are_raised_every_time():
  x = jnp.asarray(np.ones((2, 3), np.float32))
  for _ in range(4):
    with pytest.raises(ValueError, match="out of bounds"):
      jnp.mean(x, axis=2)
    with pytest.raises(TypeError):     # (JAX's array check of the missing y)
      jnp.where(x > 0, x)
    with pytest.raises(ValueError, match="duplicate"):
      jnp.var(x, axis=(0, 0))


def test_nan_checks_see_the_replayed_functions():
  x = jnp.asarray(np.array([-1.0, 4.0], np.float32))
  for _ in range(3):
    jnp.std(x)
  with debug_nans(True):
    with pytest.raises(FloatingPointError):
      for _ in range(3):
        jnp.log(jnp.std(x) - 10)
    with pytest.raises(FloatingPointError):
      for _ in range(3):
        jnp.var(jnp.asarray(np.array([np.inf], np.float32)))


def test_traced_calls_are_not_replayed():
  x = jnp.asarray(np.arange(4.0, dtype=np.float32))
  for _ in range(3):
    jnp.var(x)
  jaxpr = ourjax.make_jaxpr(jnp.var)(x)
  assert "reduce_sum" in str(jaxpr)
  g = ourjax.grad(lambda x: jnp.var(x))(x)
  np.testing.assert_allclose(g, 2 * (np.arange(4.0) - 1.5) / 4, rtol=1e-6)
  v = ourjax.vmap(jnp.mean)(jnp.ones((3, 2)))
  assert v.shape == (3,)


def test_other_operands_go_the_direct_way():
  xn = np.arange(5.0, dtype=np.float64)
  for _ in range(3):
    r = jnp.mean(xn)
    assert r.dtype == (np.float64 if config.x64_enabled else np.float32)
    assert math.isclose(float(jnp.clip(np.array([1.0, 5.0]), 2, 3)[0]), 2.0)
    with pytest.raises(TypeError, match="clip requires ndarray"):
      jnp.clip([1.0, 5.0], 2, 3)
    assert float(jnp.where(np.array([True]), 1, 2)[0]) == 1
  xn[0] = 100.0                  # the caller's array stays writable and unaliased
  assert float(jnp.mean(xn)) == pytest.approx(22.0)


def test_global_flags_are_part_of_the_signature():
  x, row = jnp.ones((2, 3), jnp.float32), jnp.arange(3, dtype=jnp.float32)
  for _ in range(3):
    assert jnp.clip(x, row, None).shape == (2, 3)
  config.update("jax_numpy_rank_promotion", "raise")
  try:
    for _ in range(3):
      with pytest.raises(ValueError, match="rank"):
        jnp.clip(x, row, None)
  finally:
    config.update("jax_numpy_rank_promotion", "allow")


def test_inf_and_nan_are_values_not_numpy_warnings():
  import warnings
  x = jnp.asarray(np.array([np.inf, -np.inf, 3e38, 0.0], np.float32))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for _ in range(3):
      v = jnp.var(x)
      n = jnp.linalg.norm(x)
      s = nn.softmax(x)
    assert np.isnan(np.asarray(v)) and np.isinf(np.asarray(n))
    assert np.isnan(np.asarray(s)).any()


RANDOM = [
    ("normal", lambda k: random.normal(k, (5,))),
    ("normal f16", lambda k: random.normal(k, (2, 3), dtype=jnp.float16)),
    ("uniform", lambda k: random.uniform(k, (4,), minval=-2.0, maxval=0.5)),
    ("split", lambda k: random.split(k, 3)), ("fold_in", lambda k: random.fold_in(k, 7)),
    ("bits", lambda k: random.bits(k, (3,), dtype=jnp.uint8)),
    ("randint", lambda k: random.randint(k, (6,), -3, 9)),
    ("bernoulli", lambda k: random.bernoulli(k, 0.3, (7,))),
    ("categorical", lambda k: random.categorical(k, jnp.log(jnp.arange(1.0, 5.0)), shape=(3,))),
    ("permutation", lambda k: random.permutation(k, 6)),
    ("choice", lambda k: random.choice(k, 9, (4,), replace=False)),
    ("truncated_normal", lambda k: random.truncated_normal(k, -0.5, 1.0, (3,))),
    ("gumbel", lambda k: random.gumbel(k, (2,))),
]


def _unwrapped(f):
  while not hasattr(f, "_replay_cache") and hasattr(f, "__wrapped__"):
    f = f.__wrapped__
  return f


@pytest.mark.parametrize("name,f", RANDOM, ids=[r[0] for r in RANDOM])
@pytest.mark.parametrize("x64", [False, True])
def test_random_functions_replay_their_loops_bit_for_bit(name, f, x64):
  """Random functions (threefry's rounds are a scan) replay the values the op-by-op path gives,
  for legacy keys; typed keys go the direct way and agree."""
  with enable_x64(x64):
    k = random.PRNGKey(3)
    first, replayed = _three_calls(f, k)
    _same(first, replayed)
    fn_name = name.split()[0]
    entries = _unwrapped(getattr(random, fn_name))._replay_cache.values()
    assert any(type(e).__name__ == "_Entry" for e in entries), fn_name
    typed = f(random.wrap_key_data(k))
    if name in ("split", "fold_in"):
      typed = random.key_data(typed)
    np.testing.assert_array_equal(np.asarray(typed), np.asarray(replayed))
    assert typed.dtype == replayed.dtype


def test_slow_replays_are_compiled_and_give_the_same_values(monkeypatch):
  """Once replays of a signature have cost a compile's worth of time, its jaxpr is compiled
  (here at once: the thresholds patched to zero) and timed against the replay; either way the
  values, dtypes and structure are the op-by-op ones."""
  from ourjax import _eager_replay
  monkeypatch.setattr(_eager_replay, "_compile_seconds", [0.0])
  monkeypatch.setattr(_eager_replay, "_MIN_REPLAY_SECONDS", 0.0)
  fns = (random.randint, random.split, nn.logsumexp, jnp.clip)
  for fn in fns:
    _unwrapped(fn)._replay_cache.clear()
  k = random.PRNGKey(11)
  cases = [(lambda: random.randint(k, (5,), 0, 100)), (lambda: random.split(k, 2)),
           (lambda: nn.logsumexp(jnp.arange(4.0), return_sign=True)),
           (lambda: jnp.clip(jnp.arange(6), 1, 4))]
  for f in cases:
    want = f()
    for _ in range(6):
      _eager_replay._compile_seconds[0] = 0.0     # (each compile updates the estimate)
      _same(f(), want)
  states = {e.state for fn in fns for e in _unwrapped(fn)._replay_cache.values() if type(e).__name__ == "_Entry"}
  assert states & {"kernel", "replay"} and None not in states, states


@pytest.mark.parametrize("name,f,ref", [
    ("softmax", lambda x: nn.softmax(x, axis=-1),
     lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(
         x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    ("var", lambda x: jnp.var(x, axis=0), lambda x: x.var(axis=0)),
    ("norm", lambda x: jnp.linalg.norm(x, axis=1), lambda x: np.sqrt((x * x).sum(axis=1))),
])
def test_large_signatures_are_compiled_whole_and_kept_if_faster(monkeypatch, name, f, ref):
  """Large operands: the direct calls go on while the whole function compiles on the worker
  (at once here), then the compiled program is timed and kept if faster; every call's result
  has the direct call's dtype and shape and NumPy's float64 values (to float32 rounding)."""
  from ourjax import _eager, _eager_replay
  monkeypatch.setattr(_eager_replay, "_LARGE_COMPILE_SHARE", 0.0)
  monkeypatch.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 256)
  x = np.random.default_rng(5).standard_normal((64, 96)).astype(np.float32)
  xa = jnp.asarray(x)
  want = ref(x.astype(np.float64))
  direct = f(xa)
  results = []
  for _ in range(3):
    results.append(f(xa))
    assert _eager.wait_for_kernels(120)
  results += [f(xa) for _ in range(2 * _eager_replay._TRIALS + 2)]
  for r in results:
    assert r.dtype == direct.dtype == np.float32 and r.shape == direct.shape == want.shape
    assert r.weak_type == direct.weak_type
    np.testing.assert_allclose(np.asarray(r), want, rtol=2e-5, atol=1e-6)
  fn = _unwrapped({"softmax": nn.softmax, "var": jnp.var, "norm": jnp.linalg.norm}[name])
  (entry,) = [e for e in fn._replay_cache.values() if type(e).__name__ == "_LargeEntry"]
  assert entry.state in ("kernel", "direct")
  assert entry.k_calls == entry.d_calls == _eager_replay._TRIALS
  assert (entry.state == "kernel") == (entry.k_best < entry.best)
  fn._replay_cache.clear()


def test_a_large_signature_runs_directly_under_disable_jit(monkeypatch):
  from ourjax import _eager, _eager_replay
  monkeypatch.setattr(_eager_replay, "_LARGE_COMPILE_SHARE", 0.0)
  monkeypatch.setattr(_eager, "_MIN_KERNEL_ELEMENTS", 256)
  x = jnp.asarray(np.random.default_rng(6).standard_normal((32, 40)).astype(np.float32))
  with ourjax.disable_jit():
    for _ in range(4):
      r = nn.softmax(x, axis=-1)
  assert _eager.wait_for_kernels(120)
  fn = _unwrapped(nn.softmax)
  entries = [e for e in fn._replay_cache.values() if type(e).__name__ == "_LargeEntry"]
  assert all(e.fn is None for e in entries)
  np.testing.assert_allclose(np.asarray(r).sum(-1), np.ones(32), rtol=1e-5)
  fn._replay_cache.clear()
