"""The GEMM's autotuned cache blocking (ourjax.backends.llvm.gemm_tune): every candidate blocking
the tuner may try computes the product NumPy does (float64 reference, within the scratch it is
sized for), the tune word checks what it is given, tuned results are stored per host (CPU name
and features) and shape class, the tuner keeps to its time budget (a fake clock) and picks what
is faster, ``OURJAX_GEMM_AUTOTUNE=0`` ignores stored results, and a jitted program runs with
the blocking tuned for its dot.  Run under ``OURJAX_CPU=haswell`` too (AVX2 code)."""
from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ourjax.backends.cpu import jit
from ourjax.backends.llvm import gemm, gemm_library, gemm_tune

NP = {"f32": np.float32, "f64": np.float64}
_P, _L, _I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
_PROTO = ctypes.CFUNCTYPE(None, _P, _P, _P, _L, _L, _L, _L, _L, _L, _I, _I, _L, _L, _L, _L, _L,
                          _L, _P, _L)
_fns = {}


def shared(dtype):
  if dtype not in _fns:
    _fns[dtype] = _PROTO(gemm_library.shared_gemm_address(dtype))
  return _fns[dtype]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
  """A tuner with no results in memory and a disk cache of its own, in its default (auto)
  mode (conftest turns tuning off for the other tests)."""
  monkeypatch.setenv("OURJAX_CACHE_DIR", str(tmp_path))
  monkeypatch.delenv("OURJAX_GEMM_AUTOTUNE", raising=False)
  monkeypatch.setattr(gemm_tune, "_memo", {})
  monkeypatch.setattr(gemm_tune, "_table", None)
  return tmp_path


def call(dtype, bl, a_mem, b_mem, M, N, K, ta, tb, batch, pieces):
  """C from the shared kernel with ``bl``'s tune word, the pieces called one after another,
  each with exactly ``pack_buffer_elements`` of scratch followed by guards."""
  fn = shared(dtype)
  c = np.full((batch, M, N), np.nan, NP[dtype])
  n = gemm.pack_buffer_elements(dtype, M, N, K, pieces, bl, trans_b=tb, batch=batch)
  mem = np.full(n + 64, 7.0, NP[dtype])
  for t in range(pieces):
    fn(a_mem.ctypes.data, b_mem.ctypes.data, c.ctypes.data, M, N, K, M if ta else K,
       K if tb else N, N, int(ta), int(tb), batch, M * K, K * N, M * N, t, pieces,
       mem.ctypes.data, gemm.tune_word(bl, dtype))
    assert (mem[n:] == 7.0).all(), f"{bl} wrote past its {n} scratch elements"
  return c


@settings(max_examples=25, deadline=None)
@given(M=st.integers(1, 150), N=st.integers(1, 150), K=st.integers(1, 700), ta=st.booleans(),
       tb=st.booleans(), dtype=st.sampled_from(["f32", "f64"]), batch=st.integers(1, 2),
       pieces=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_every_candidate_matches_numpy(M, N, K, ta, tb, dtype, batch, pieces, seed):
  rng = np.random.default_rng(seed)
  a = rng.standard_normal((batch, K, M) if ta else (batch, M, K)).astype(NP[dtype])
  b = rng.standard_normal((batch, N, K) if tb else (batch, K, N)).astype(NP[dtype])
  opa = a.transpose(0, 2, 1) if ta else a
  opb = b.transpose(0, 2, 1) if tb else b
  want = opa.astype(np.float64) @ opb.astype(np.float64)
  tol = (1e-4 if dtype == "f32" else 1e-12) * max(1.0, np.sqrt(K))
  cands = gemm_tune.candidates(dtype, M, N, K, ta, tb, batch, pieces)
  assert cands[0] == gemm.default_blocking(dtype) and len(set(cands)) == len(cands)
  # and a blocking made of the last variant of every knob at once
  mixed = dataclasses.replace(cands[0], **{
      f: getattr(c, f) for c in cands[1:] for f in ("kc", "mc", "nc", "direct_b_rows",
                                                    "stream_rows")
      if getattr(c, f) != getattr(cands[0], f)})
  for bl in cands + [mixed]:
    got = call(dtype, bl, a, b, M, N, K, ta, tb, batch, pieces)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(bl))


def test_tune_word_checks_its_blocking():
  for dtype in ("f32", "f64"):
    d = gemm.default_blocking(dtype)
    assert gemm.tune_word(d, dtype) == 0
    assert gemm.tune_word(dataclasses.replace(d, kc=100), dtype) != 0
    with pytest.raises(ValueError, match="register blocking"):
      gemm.tune_word(dataclasses.replace(d, mr=d.mr + 1, mc=(d.mr + 1) * 4), dtype)
    with pytest.raises(ValueError, match="multiple"):
      gemm.tune_word(dataclasses.replace(d, mc=d.mr * 3 + 1), dtype)
    with pytest.raises(ValueError, match="fit"):
      gemm.tune_word(dataclasses.replace(d, kc=1 << 20), dtype)


def test_results_are_kept_per_host_and_class(fresh, monkeypatch):
  path = gemm_tune.table_path()
  assert path.startswith(str(fresh))
  monkeypatch.setattr(jit, "cpu_features", lambda: "+sse2,-avx512f")
  assert gemm_tune.table_path() != path        # (other CPU features: another file)
  monkeypatch.undo()
  monkeypatch.setenv("OURJAX_CACHE_DIR", str(fresh))
  assert gemm_tune.table_path() == path
  c = gemm_tune.shape_class
  assert c("f32", 100, 512, 784, False, False) == c("f32", 128, 300, 600, False, False)
  assert len({c("f32", 128, 512, 784, False, False), c("f64", 128, 512, 784, False, False),
              c("f32", 128, 512, 784, True, False), c("f32", 128, 512, 784, False, True),
              c("f32", 129, 512, 784, False, False), c("f32", 128, 512, 784, False, False, 2),
              c("f32", 128, 512, 784, False, False, 1, 2)}) == 7


def _store_kc(path, dtype, cls, kc):
  entry = {k: getattr(gemm.default_blocking(dtype), k)
           for k in ("kc", "mc", "nc", "direct_b_rows", "stream_rows")}
  entry["kc"] = kc
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump({cls: entry}, f)


def test_stored_result_is_used_and_off_mode_ignores_it(fresh, monkeypatch):
  dtype, shape = "f32", (100, 200, 300, False, True, 1, 1)
  _store_kc(gemm_tune.table_path(), dtype, gemm_tune.shape_class(dtype, *shape), 64)
  monkeypatch.setenv("OURJAX_GEMM_AUTOTUNE", "0")
  assert gemm_tune.choose(dtype, *shape) == gemm.default_blocking(dtype)
  monkeypatch.delenv("OURJAX_GEMM_AUTOTUNE")
  assert gemm_tune.choose(dtype, *shape).kc == 64
  # another host's results are not this one's
  monkeypatch.setattr(gemm_tune, "_memo", {})
  monkeypatch.setattr(jit, "cpu_features", lambda: "+sse2")
  assert gemm_tune.choose(dtype, *shape) == gemm.default_blocking(dtype)


def test_auto_mode_does_not_tune_small_products_or_without_a_disk_cache(fresh, monkeypatch):
  def boom(*a, **k):
    raise AssertionError("tuned")
  monkeypatch.setattr(gemm_tune, "tune", boom)
  d = gemm.default_blocking("f32")
  assert gemm_tune.choose("f32", 8, 8, 8, False, False) == d
  monkeypatch.setenv("OURJAX_CACHE_DIR", "off")
  assert gemm_tune.choose("f32", 512, 512, 512, False, False) == d


def test_auto_mode_tunes_large_products_once_within_its_process_budget(fresh, monkeypatch):
  d = gemm.default_blocking("f32")
  calls = []

  def fake_tune(dtype, M, N, K, ta, tb, batch, pieces):
    calls.append((M, N, K))
    bl = dataclasses.replace(d, kc=128)
    return bl, [(d, 1.0), (bl, 0.5)]
  monkeypatch.setattr(gemm_tune, "tune", fake_tune)
  monkeypatch.setattr(gemm_library, "is_built", lambda dtype: True)
  monkeypatch.setattr(gemm_tune, "_spent", 0.0)
  assert gemm_tune.choose("f32", 512, 512, 512, False, False).kc == 128
  assert gemm_tune.choose("f32", 500, 400, 300, False, False).kc == 128   # (its class)
  assert calls == [(512, 512, 512)]
  with open(gemm_tune.table_path()) as f:
    assert list(json.load(f)) == [gemm_tune.shape_class("f32", 512, 512, 512, False, False)]
  monkeypatch.setattr(gemm_tune, "_spent", gemm_tune.AUTOTUNE_PROCESS_S)
  assert gemm_tune.choose("f32", 1024, 512, 512, False, False) == d
  assert len(calls) == 1
  # a call far slower than the cost model's (a loaded machine): nothing stored, tried again
  monkeypatch.setattr(gemm_tune, "_spent", 0.0)
  monkeypatch.setattr(gemm_tune, "tune", lambda *a: (d, [(d, 1.0)]))
  assert gemm_tune.choose("f32", 256, 256, 256, False, False) == d
  assert gemm_tune.shape_class("f32", 256, 256, 256, False, False) not in gemm_tune._results()
  # a product too large to tune within the budget: its default is stored
  assert gemm_tune.choose("f32", 2048, 2048, 2048, False, False) == d
  assert gemm_tune.shape_class("f32", 2048, 2048, 2048, False, False) in gemm_tune._results()
  monkeypatch.setattr(gemm_tune, "tune", fake_tune)
  # a new process reads the result from disk
  monkeypatch.setattr(gemm_tune, "_memo", {})
  monkeypatch.setattr(gemm_tune, "_table", None)
  assert gemm_tune.choose("f32", 512, 512, 512, False, False).kc == 128 and len(calls) == 1


class FakeClock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_tuner_keeps_its_budget_and_picks_the_faster_blocking():
  clock = FakeClock()
  calls = []
  M, N, K = 100, 300, 600

  d = gemm.default_blocking("f32")
  direct = d.direct_b_rows >= M

  def run(bl):          # the other choice than the default's, B packed or read in place, is
    calls.append(bl)    # 20% faster
    clock.now += 1e-3 * (0.8 if (bl.direct_b_rows >= M) != direct else 1.0)
  budget = 0.05
  best, trials = gemm_tune.tune("f32", M, N, K, False, False, 1, 1, budget=budget,
                                clock=clock, run=run)
  assert (best.direct_b_rows >= M) != direct
  assert clock.now <= budget + 2e-3          # (at most one call's overrun)
  assert trials[0][0] == d and len(calls) <= budget / 0.8e-3 + 2

  # nothing faster: the default stays; a budget below a call still makes a decision
  clock.now = 0.0
  best, _ = gemm_tune.tune("f32", M, N, K, False, False, 1, 1, budget=budget, clock=clock,
                           run=lambda bl: setattr(clock, "now", clock.now + 1e-3))
  assert best == d
  clock.now = 0.0
  best, trials = gemm_tune.tune("f32", M, N, K, False, False, 1, 1, budget=1e-4, clock=clock,
                                run=lambda bl: setattr(clock, "now", clock.now + 1e-3))
  assert best == d and clock.now <= 5e-3


_JIT = r"""
import json, os, numpy as np, ourjax, ourjax.numpy as jnp
from ourjax.backends.llvm import gemm_tune
rng = np.random.default_rng(0)
x = rng.standard_normal((96, 320)).astype(np.float32)
w = rng.standard_normal((512, 320)).astype(np.float32)
f = ourjax.jit(lambda x, w: jnp.tanh(x @ w.T) @ w)
out = np.asarray(f(x, w))
want = np.tanh(x.astype(np.float64) @ w.T) @ w
np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-3)
path = gemm_tune.table_path()
print(json.dumps(sorted(json.load(open(path))) if path and os.path.exists(path) else []))
"""


@pytest.mark.parametrize("how", ["1", "0"])
def test_jitted_dots_run_with_tuned_blocking(tmp_path, how):
  env = dict(os.environ, OURJAX_CACHE_DIR=str(tmp_path), OURJAX_GEMM_AUTOTUNE=how,
             OURJAX_GEMM_AUTOTUNE_MS="100")
  out = subprocess.run([sys.executable, "-c", _JIT], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert out.returncode == 0, out.stderr[-3000:]
  classes = json.loads(out.stdout.strip().splitlines()[-1])
  if how == "1":      # both dots tuned (forced), their classes stored
    assert len(classes) >= 2 and all(c.startswith("f32/") for c in classes)
  else:
    assert classes == []


def _dot_module(M, K, N, name):
  from ourjax.lowering.hlo import Builder, Module, Shape
  m = Module(name)
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (M, K)), "x")
  w = b.parameter(Shape("f32", (K, N)), "w")
  m.entry = b.build(b.dot(x, w, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)))
  return m


def test_cached_programs_are_made_again_only_when_a_class_they_use_is_tuned(fresh, monkeypatch):
  """The disk cache keys programs by the tuning mode, not by the host's whole table: a program
  records the blockings it chose, and is compiled again only when one of its classes has
  another result now (a class tuned since), with that result."""
  from ourjax.backends.cpu import backend as cpu
  compiled = []
  real = cpu._plan_and_emit
  monkeypatch.setattr(cpu, "_plan_and_emit", lambda m, *a, **k: (compiled.append(m.name),
                                                                 real(m, *a, **k))[1])
  monkeypatch.setattr(gemm_tune, "AUTOTUNE_MIN_WORK", 1 << 40)     # (auto mode: no tuning)
  rng = np.random.default_rng(0)
  shapes = {"a": (96, 200, 80), "b": (40, 300, 500)}
  args = {n: (rng.standard_normal((M, K)).astype(np.float32),
              rng.standard_normal((K, N)).astype(np.float32)) for n, (M, K, N) in shapes.items()}
  exes = {n: cpu.compile(_dot_module(*shapes[n], n)) for n in shapes}
  assert compiled == ["a", "b"]
  chosen = {n: e.meta.get("gemm_blockings") for n, e in exes.items()}
  assert all(chosen.values()), chosen        # (both dots run on the shared GEMM)
  assert not set(chosen["a"]) & set(chosen["b"])
  for n in shapes:                            # hits, whatever the table holds of other classes
    cpu.compile(_dot_module(*shapes[n], n))
  assert compiled == ["a", "b"]
  (cls, (dtype, fields)), = chosen["a"].items()
  _store_kc(gemm_tune.table_path(), dtype, cls, 64 if fields["kc"] != 64 else 128)
  monkeypatch.setattr(gemm_tune, "_memo", {})
  monkeypatch.setattr(gemm_tune, "_table", None)
  again = {n: cpu.compile(_dot_module(*shapes[n], n)) for n in shapes}
  assert compiled == ["a", "b", "a"]          # only the program whose class was tuned
  assert again["a"].meta["gemm_blockings"][cls][1]["kc"] != fields["kc"]
  for n, (x, w) in args.items():
    want = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(again[n](x, w)[0], want, rtol=1e-4, atol=1e-3)
