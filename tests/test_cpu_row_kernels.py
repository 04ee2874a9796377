"""Rows-mode loop kernels on the CPU (llvm/row_cache.py): a value a row reduction computed is
kept for the row's outputs (softmax's exp, computed once per element), and a concatenate along
the last dimension is written one column segment per part.  Results against NumPy in float64;
the structure (one exp per element, one column loop per part) from the kernel's LLVM IR."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.cpu import backend as cpu
from ourjax.lowering import hlo
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)




def _llvm_ir(f, *args):
  return f.lower(*args).compile()._executable.compiled.llvm_ir


def _exp_calls(ir_text, dtype):
  tag = "f32" if np.dtype(dtype) == np.float32 else "f64"
  return len(re.findall(rf"call \w+ @\"ojx_m_exp_{tag}\"", ir_text))


def _softmax64(x, axis=-1):
  x = np.asarray(x, np.float64)
  e = np.exp(x - x.max(axis=axis, keepdims=True))
  return e / e.sum(axis=axis, keepdims=True)


def _close(got, want, dtype):
  rtol = 2e-6 if np.dtype(dtype) == np.float32 else 1e-13
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol,
                             atol=rtol * np.abs(want).max())


# -- row caches --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 5), (64, 256), (2, 3, 130), (7, 1000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_computes_each_exp_once(shape, dtype):
  from ourjax.config import enable_x64
  x = (np.random.default_rng(sum(shape)).standard_normal(shape) * 3).astype(dtype)
  f = ourjax.jit(lambda x: ourjax.nn.softmax(x * 0.5, axis=-1))
  with enable_x64(dtype == np.float64):
    got = f(x)
    text = _llvm_ir(f, x)
  assert got.dtype == dtype
  _close(got, _softmax64(x.astype(np.float64) * 0.5), dtype)
  assert "%\"rowcache" in text
  assert _exp_calls(text, dtype) == 1


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_masked_narrow_softmax_with_a_row_cache(dtype):
  """A causal-masked softmax (-inf above the diagonal, a fully masked row, a NaN) in a narrow
  float type: the cached exp is the value computed in the reduction's loop, rounded to the type
  as the emitter keeps it; against NumPy float64 within the type's rounding."""
  import ml_dtypes
  dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
  n = 40
  x = np.random.default_rng(9).standard_normal((n, n)).astype(dt)
  x[3, 2] = np.nan                   # (below the diagonal: not masked)
  mask = np.tril(np.ones((n, n), bool))
  mask[7] = False
  f = ourjax.jit(lambda x, m: ourjax.nn.softmax(jnp.where(m, x, -jnp.inf), axis=-1))
  got = np.asarray(f(x, mask)).astype(np.float64)
  x64 = np.where(mask, x.astype(np.float64), -np.inf)
  with np.errstate(invalid="ignore"):
    want = _softmax64(x64)
  eps = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
  np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps)   # NaN rows match NaN
  assert np.isnan(got[7]).all() and np.isnan(got[3]).all()
  assert "%\"rowcache" in _llvm_ir(f, x, mask)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_narrow_row_max_is_exact_and_vectorizes(dtype):
  """A row max of a narrow float type is not rounded step by step (max returns an operand,
  already of the type): the max loop of a masked softmax vectorizes (the per-step rounding
  hid the reduction from LLVM: one scalar compare per element).  Values exact against NumPy,
  NaN rows included."""
  import ml_dtypes
  from ourjax.backends.cpu import jit
  dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
  n = 64
  x = np.random.default_rng(5).standard_normal((3, n, n)).astype(dt)
  x[1, 9, 4] = np.nan
  mask = np.tril(np.ones((n, n), bool))
  f = ourjax.jit(lambda x: jnp.max(jnp.where(mask, x * 3, -1e4), axis=-1))
  want = np.where(mask, x.astype(np.float64) * 3, -1e4).max(-1)
  got = np.asarray(f(x)).astype(np.float64)
  np.testing.assert_array_equal(got, np.asarray(want.astype(dt), np.float64))
  g = ourjax.jit(lambda x: ourjax.nn.softmax(jnp.where(mask, x, -1e4), axis=-1))
  opt = jit.optimize_for(g.lower(x).compile()._executable.compiled.llvm_ir)
  assert re.search(r"@llvm\.(vector\.reduce\.fmaximum|maximum)\.v\d+f32", opt)


def test_log_softmax_has_no_row_cache():
  """exp(x - max) only feeds the sum: nothing would read a cache."""
  x = np.random.default_rng(1).standard_normal((16, 100)).astype(np.float32)
  f = ourjax.jit(lambda x: ourjax.nn.log_softmax(x, axis=-1))
  x64 = x.astype(np.float64)
  m = x64.max(-1, keepdims=True)
  _close(f(x), x64 - m - np.log(np.exp(x64 - m).sum(-1, keepdims=True)), np.float32)
  assert "%\"rowcache" not in _llvm_ir(f, x)


def test_second_row_reduction_reads_the_cache():
  """exp feeds two row sums and the output: the first sum's loop fills the cache, the second
  and the output read it."""
  x = np.random.default_rng(2).standard_normal((33, 77)).astype(np.float32)

  def g(np_, x):
    e = np_.exp(x - x.max(-1, keepdims=True))
    s = e.sum(-1, keepdims=True)
    return e / s + (e * x).sum(-1, keepdims=True)
  f = ourjax.jit(lambda x: g(jnp, x))
  _close(f(x), g(np, x.astype(np.float64)), np.float32)
  text = _llvm_ir(f, x)
  assert "%\"rowcache" in text and _exp_calls(text, np.float32) == 1


@pytest.mark.parametrize("kind", ["reverse", "transpose", "roll"])
def test_value_read_at_other_positions_is_not_cached(kind):
  """An output that reads exp at another position of the row (reversed, rolled) or of another
  row (transposed) must not read a cache filled for the current row: either it is computed
  again or the cache is not used for it.  Values against NumPy."""
  x = np.random.default_rng(3).standard_normal((40, 40)).astype(np.float32)

  def g(np_, x):
    e = np_.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    other = {"reverse": e[:, ::-1], "transpose": e.T, "roll": np_.roll(e, 3, axis=1)}[kind]
    return p + other
  f = ourjax.jit(lambda x: g(jnp, x))
  _close(f(x), g(np, x.astype(np.float64)), np.float32)


@pytest.mark.parametrize("kind", ["transpose", "reverse", "slice"])
def test_hand_fused_softmax_reading_exp_elsewhere(kind):
  """One fusion (built by hand: the fusion pass would materialise ``e`` first) computes
  ``e / sum(e) + t(e)`` with ``t`` a transpose (``e`` of another row: it must not come from the
  row's cache), a reverse or a shifted slice of the row; against NumPy in float64."""
  m = Module("rows")
  add = scalar_computation(m, "add", "f32")
  mx = scalar_computation(m, "maximum", "f32")
  R = C = 24

  def body(fb, x, wide):
    mxr = fb.reduce(x, fb.constant(-np.inf, "f32"), (1,), mx)
    e = fb.exp(fb.sub(x, fb.broadcast(mxr, (R, C), (0,))))
    s = fb.reduce(e, fb.constant(0.0, "f32"), (1,), add)
    p = fb.div(e, fb.broadcast(s, (R, C), (0,)))
    if kind == "transpose":
      other = fb.emit("transpose", [e], {"dimensions": (1, 0)})
    elif kind == "reverse":
      other = fb.emit("reverse", [e], {"dimensions": (1,)})
    else:
      ew = fb.exp(fb.sub(wide, fb.broadcast(mxr, (R, C + 3), (0,))))
      other = fb.emit("slice", [ew], {"start_indices": (0, 3), "limit_indices": (R, C + 3),
                                      "strides": (1, 1)})
    return fb.add(p, other)

  fb = Builder(m, "rows_fused")
  ps = [fb.parameter(Shape("f32", (R, C))), fb.parameter(Shape("f32", (R, C + 3)))]
  comp = fb.build(body(fb, *ps))
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (R, C)), "x")
  w = b.parameter(Shape("f32", (R, C + 3)), "w")
  m.entry = b.build(b.tuple([b.fusion([x, w], comp, "kInput")]))
  hlo.verify(m)
  rng = np.random.default_rng(11)
  xv = rng.standard_normal((R, C)).astype(np.float32)
  wv = np.concatenate([rng.standard_normal((R, 3)).astype(np.float32), xv], axis=1)
  exe = cpu.compile(m)
  assert isinstance(exe, cpu.CpuExecutable)
  got = np.asarray(exe(xv, wv)[0], np.float64)
  x64 = xv.astype(np.float64)
  e = np.exp(x64 - x64.max(1, keepdims=True))
  other = {"transpose": e.T, "reverse": e[:, ::-1], "slice": e}[kind]
  want = e / e.sum(1, keepdims=True) + other
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_exp_as_a_second_output():
  """softmax and exp(x - max) both returned (a multi-output kernel)."""
  x = np.random.default_rng(4).standard_normal((12, 300)).astype(np.float32)

  def g(np_, x):
    e = np_.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), e
  f = ourjax.jit(lambda x: g(jnp, x))
  for got, want in zip(f(x), g(np, x.astype(np.float64))):
    _close(got, want, np.float32)


def test_row_too_long_for_a_cache_is_computed_twice():
  """A row of 20000 f32 (80 KB) exceeds row_cache.MAX_BYTES: no cache, the same values."""
  from ourjax.backends.llvm import row_cache
  n = row_cache.MAX_BYTES // 4 + 3616
  x = np.random.default_rng(5).standard_normal((3, n)).astype(np.float32)
  f = ourjax.jit(lambda x: ourjax.nn.softmax(x, axis=-1))
  _close(f(x), _softmax64(x), np.float32)
  text = _llvm_ir(f, x)
  assert "%\"rowcache" not in text and _exp_calls(text, np.float32) == 2


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 9), n=st.integers(2, 70), scale=st.sampled_from([0.1, 1.0, 30.0]),
       fn=st.sampled_from(["exp", "tanh", "div"]), seed=st.integers(0, 2 ** 31))
def test_cached_row_values_match_numpy(rows, n, scale, fn, seed):
  """y = v / sum(v) + v * mean(v) for a costly elementwise v of the row (any row length,
  including ones that are not a multiple of the vector width)."""
  x = (np.random.default_rng(seed).standard_normal((rows, n)) * scale).astype(np.float32)

  def g(np_, x):
    v = {"exp": lambda: np_.exp(x - x.max(-1, keepdims=True)),
         "tanh": lambda: np_.tanh(x) + 2.0,
         "div": lambda: 1.0 / (x * x + 1.0)}[fn]()
    return v / v.sum(-1, keepdims=True) + v * v.mean(-1, keepdims=True)
  f = ourjax.jit(lambda x: g(jnp, x))
  want = g(np, x.astype(np.float64))
  np.testing.assert_allclose(np.asarray(f(x), np.float64), want, rtol=1e-5,
                             atol=1e-6 * np.abs(want).max())


# -- column segments ---------------------------------------------------------------------------

def _col_loops(ir_text):
  return len(re.findall(r"^col\.head(\.\d+)?:", ir_text, re.M))


@pytest.mark.parametrize("sizes", [(128, 128, 128, 128), (3, 17, 1, 40), (5, 9)])
def test_concatenate_along_rows_writes_each_part_in_its_own_loop(sizes):
  """Four (or two) parts side by side along the last axis, each its own elementwise function
  of different inputs (an LSTM's gate gradients), and their column sums."""
  rng = np.random.default_rng(sum(sizes))
  rows = 32
  args = [rng.standard_normal((rows, n)).astype(np.float32) for n in sizes]
  args += [rng.standard_normal((rows, n)).astype(np.float32) for n in sizes]

  def g(np_, *a):
    k = len(sizes)
    xs, ys = a[:k], a[k:]
    parts = [(x * y + 1.0) * (j + 1) if j % 2 else x - y * y for j, (x, y) in
             enumerate(zip(xs, ys))]
    z = np_.concatenate(parts, axis=-1)
    return z, z.sum(0)
  f = ourjax.jit(lambda *a: g(jnp, *a))
  got = f(*args)
  want = g(np, *[a.astype(np.float64) for a in args])
  for gv, wv in zip(got, want):
    np.testing.assert_allclose(np.asarray(gv, np.float64), wv, rtol=1e-6, atol=1e-5)
  # (a concatenation reads its parts at other positions: rows mode from 4 columns on)
  assert _col_loops(_llvm_ir(f, *args)) == (len(sizes) if sum(sizes) >= 4 else 0)


def test_softmax_of_a_concatenation():
  """A row reduction and the output both over a concatenate along the row."""
  rng = np.random.default_rng(7)
  a = rng.standard_normal((10, 24)).astype(np.float32)
  b = rng.standard_normal((10, 40)).astype(np.float32)
  f = ourjax.jit(lambda a, b: ourjax.nn.softmax(jnp.concatenate([a, jnp.tanh(b)], -1), axis=-1))
  want = _softmax64(np.concatenate([a, np.tanh(b.astype(np.float64))], -1))
  _close(f(a, b), want, np.float32)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 20), min_size=2, max_size=12), rows=st.integers(1, 6),
       seed=st.integers(0, 2 ** 31))
def test_concatenations_along_rows_match_numpy(sizes, rows, seed):
  """Any number of parts (past ``MAX_SEGMENTS`` the loop is not cut), empty ones included,
  under an elementwise op with a row sum."""
  if sum(sizes) < 2:
    sizes = sizes + [2]
  rng = np.random.default_rng(seed)
  parts = [rng.standard_normal((rows, n)).astype(np.float32) for n in sizes]

  def g(np_, *p):
    z = np_.concatenate([q * (k + 1) for k, q in enumerate(p)], axis=-1)
    return z * 2.0 - z.sum(-1, keepdims=True)
  f = ourjax.jit(lambda *p: g(jnp, *p))
  want = g(np, *[q.astype(np.float64) for q in parts])
  np.testing.assert_allclose(np.asarray(f(*parts), np.float64), want, rtol=1e-5,
                             atol=1e-5 * max(1.0, np.abs(want).max()))



def _stencil(np_, x, k, a, b):
  """A diffusion step whose result is read through two more rolls: the first rolls are read at
  the positions the later ones move to."""
  y = np_.roll(x, a, axis=-1) + np_.roll(x, -1, axis=-1) - 2.0 * x
  z = x + 0.1 * k * y
  return np_.roll(z, 1, axis=-1) * np_.roll(z, b, axis=-1) - z


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 300), rows=st.integers(1, 4), a=st.integers(-3, 3),
       b=st.integers(-3, 3), seed=st.integers(0, 2 ** 31))
def test_rolls_read_at_shifted_positions_match_numpy(n, rows, a, b, seed):
  """Rolls read at other positions than their own (the column loop cut where the moved
  positions wrap around, ``row_cache.column_segments``)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((rows, n)).astype(np.float32)
  k = rng.standard_normal(n).astype(np.float32)
  f = ourjax.jit(lambda x, k: _stencil(jnp, x, k, a, b))
  want = _stencil(np, x.astype(np.float64), k.astype(np.float64), a, b)
  np.testing.assert_allclose(np.asarray(f(x, k), np.float64), want, rtol=1e-5, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 700), a=st.integers(-3, 3), b=st.integers(-3, 3),
       seed=st.integers(0, 2 ** 31))
def test_rolls_of_a_vector_read_at_shifted_positions_match_numpy(n, a, b, seed):
  """The same stencil on one dimension: a flat kernel's positions are its row's columns, cut
  the same way within each thread's share of them (shares of 64 from 256 positions on)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(n).astype(np.float32)
  k = rng.standard_normal(n).astype(np.float32)
  f = ourjax.jit(lambda x, k: _stencil(jnp, x, k, a, b))
  want = _stencil(np, x.astype(np.float64), k.astype(np.float64), a, b)
  np.testing.assert_allclose(np.asarray(f(x, k), np.float64), want, rtol=1e-5, atol=1e-5)


def test_rolls_of_a_vector_cut_its_loop():
  """A flat kernel reading rolls of a vector at moved positions runs its positions in several
  loops (the wrapped ends, the middle); one without rolls in one."""
  x = np.arange(1000, dtype=np.float32)
  k = np.ones(1000, np.float32)
  loops = lambda f: len(re.findall(r"^i\.head(\.\d+)?:", _llvm_ir(f, x, k), re.M))
  rolled = ourjax.jit(lambda x, k: _stencil(jnp, x, k, 1, -2))
  plain = ourjax.jit(lambda x, k: x * k + 1.0)
  assert loops(rolled) > 1 and loops(plain) == 1
  want = _stencil(np, x.astype(np.float64), k.astype(np.float64), 1, -2)
  np.testing.assert_allclose(np.asarray(rolled(x, k), np.float64), want, rtol=1e-6)


def _parts_read(x, p, memo):
  """The parts of the concatenates along the last dimension that evaluating ``x`` at position
  ``p`` of its last dimension reads, as ((concatenate, part), ...) in walk order: position by
  position, independent of the interval walk of ``row_cache._column_cuts``."""
  key = (id(x), p)
  if key in memo:
    return memo[key]
  out = ()
  last = len(x.dims) - 1 if not x.shape.is_tuple else -1
  op = x.opcode
  if last < 0 or op in ("parameter", "constant", "reduce", "iota"):
    pass
  elif op == "concatenate" and x.attrs["dimensions"][0] == last:
    at = 0
    for k, o in enumerate(x.operands):
      if at <= p < at + o.dims[-1]:
        out = ((x.name, k),) + _parts_read(o, p - at, memo)
        break
      at += o.dims[-1]
  else:
    for o in x.operands:
      if not o.dims:
        continue
      if op == "slice":
        q = p + x.attrs["start_indices"][-1]
      elif op == "broadcast" and (not x.attrs["dimensions"] or
                                  x.attrs["dimensions"][-1] != last):
        continue                       # (the operand does not vary along the row)
      elif op == "reshape" and o.dims[-1] != x.dims[-1]:
        continue
      else:
        q = p
      out += _parts_read(o, q, memo)
  memo[key] = out
  return out


@settings(max_examples=25, deadline=None)
@given(n=st.integers(16, 300), a=st.integers(-3, 3), b=st.integers(-3, 3))
def test_column_segments_keep_each_moved_read_in_one_part(n, a, b):
  """Each loop of a stencil's row (its rolls read at moved positions) reads one part of every
  concatenate at all its columns -- so its loads are contiguous -- except a loop that joins
  several narrow ranges (a row's ends); a loop joining k ranges is narrower than k *
  ``MIN_SEGMENT`` columns.  Checked against the parts read column by column."""
  from ourjax.backends.llvm import row_cache
  x = np.zeros((2, n), np.float32)
  k = np.zeros(n, np.float32)
  module = ourjax.jit(lambda x, k: _stencil(jnp, x, k, a, b)).lower(x, k).compile() \
      ._executable.module
  fusions = [i for c in module.computations for i in c.instructions
             if i.opcode == "fusion" and any(j.opcode == "concatenate"
                                              for j in i.attrs["calls"].instructions)]
  assert fusions
  for f in fusions:
    fc = f.attrs["calls"]
    roots = list(fc.root.operands) if fc.root.shape.is_tuple else [fc.root]
    outs = [(r, None) for r in roots if r.dims == tuple(f.shape.tuple_shapes[0].dims
                                                        if f.shape.is_tuple else f.dims)]
    leafmap = {p: None for p in fc.parameters}
    dims = outs[0][0].dims
    segments = row_cache.column_segments(dims, outs, leafmap)
    assert segments[0][0] == 0 and segments[-1][1] == dims[-1]
    assert all(s[1] == t[0] for s, t in zip(segments, segments[1:]))
    assert len(segments) <= row_cache.MAX_SEGMENTS
    memo: dict = {}
    reads = [tuple(_parts_read(r, c, memo) for r, _ in outs) for c in range(dims[-1])]
    for lo, hi in segments:
      runs = 1 + sum(reads[c] != reads[c - 1] for c in range(lo + 1, hi))
      assert runs == 1 or hi - lo < runs * row_cache.MIN_SEGMENT, (lo, hi, runs, segments)
    widest = max(segments, key=lambda s: s[1] - s[0])
    assert widest[1] - widest[0] >= dims[-1] - 2 * (row_cache.ALIGN_COLUMNS + 8)


# -- pieces ------------------------------------------------------------------------------------

def test_transcendental_kernels_are_cut_by_their_cost():
  """A kernel of three transcendental functions an element is cut into pieces by what they cost
  (kernels.TRANSCENDENTAL_COST), not as three cheap ops: 16 pieces here, not 3; the values do
  not depend on the pieces (against NumPy in float64)."""
  x = np.random.default_rng(8).standard_normal((64, 256)).astype(np.float32)
  f = ourjax.jit(lambda x: jnp.tanh(x) * ourjax.nn.sigmoid(x) + jnp.tanh(2.0 * x))
  x64 = x.astype(np.float64)
  want = np.tanh(x64) / (1 + np.exp(-x64)) + np.tanh(2 * x64)
  np.testing.assert_allclose(np.asarray(f(x), np.float64), want, rtol=1e-6, atol=1e-6)
  steps = f.lower(x).compile()._executable.compiled.meta["steps"]
  pieces = [int(s.split(" x")[1].split()[0]) for s in steps
            if s.startswith("LoopKernel") and " x" in s]
  assert pieces == [16], steps


@pytest.mark.parametrize("n", [10, 5])
def test_short_rows_that_need_a_position_loop_over_columns(n):
  """An outer product over (b, i, k) with k short (per-example gradients of a 10-class output
  layer) reads its operands at positions other than its own: a column loop per row (no
  division of the flat index by the dimensions at every element), while a purely elementwise
  kernel of the same shape keeps its flat loop.  Values against NumPy."""
  rng = np.random.default_rng(n)
  a = rng.standard_normal((6, n)).astype(np.float32)
  h = rng.standard_normal((6, 7)).astype(np.float32)
  lab = rng.integers(0, n, 6).astype(np.int32)
  f = ourjax.jit(lambda a, h, lab: (a - jax_one_hot(lab, n))[:, None, :] *
                 jnp.maximum(h, 0.0)[:, :, None])
  want = ((a.astype(np.float64) - np.eye(n)[lab])[:, None, :] *
          np.maximum(h.astype(np.float64), 0)[:, :, None])
  np.testing.assert_allclose(np.asarray(f(a, h, lab), np.float64), want, rtol=1e-6, atol=1e-6)
  assert _col_loops(_llvm_ir(f, a, h, lab)) == 1
  x = rng.standard_normal((6, 7, n)).astype(np.float32)
  g = ourjax.jit(lambda x: jnp.tanh(x) * 2.0 + x)
  np.testing.assert_allclose(np.asarray(g(x), np.float64),
                             np.tanh(x.astype(np.float64)) * 2 + x, rtol=2e-6, atol=1e-6)
  assert _col_loops(_llvm_ir(g, x)) == 0


def jax_one_hot(lab, n):
  return (lab[:, None] == jnp.arange(n)[None, :]).astype(jnp.float32)
