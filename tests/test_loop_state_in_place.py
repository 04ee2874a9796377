"""A CPU while loop computes a result straight into its state buffer (no copy back per
iteration) when the planned body reads the old state before writing it, or reads it only at the
index it writes (``Planner._own_index_candidates``, ``_state_in_place_ok``); otherwise it keeps
the copy.  Values against NumPy in float64; the copies from the profiler's rows."""
from __future__ import annotations

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)




def _loop_copies(f, *args):
  """The kernels copying inside loops, from the profile of ``f``'s compiled code."""
  rows = ourjax.jit(f).lower(*args).compile().profile(*args, reps=1).rows
  return [r["hlo"] for r in rows if r.get("kind") == "CopyKernel" and r.get("loop")]


def _run(f, f64, args, steps):
  got = ourjax.jit(f)(*args)
  want = f64(*[np.asarray(a, np.float64) for a in args])
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5, atol=2e-5)


def _rng_args():
  rng = np.random.default_rng(0)
  acc = rng.standard_normal((24, 24)).astype(np.float32)
  h = rng.standard_normal((8, 24)).astype(np.float32)
  w = (rng.standard_normal((24, 24)) * 0.2).astype(np.float32)
  return acc, h, w


def test_accumulator_and_recurrence_update_in_place():
  """acc += h^T h (the old acc read at its own index) and h = tanh(h @ w) (the old h read by
  dots that run before it is written): both in their state buffers."""
  def f(acc, h, w):
    def body(i, c):
      acc, h = c
      return acc + h.T @ h, jnp.tanh(h @ w)
    return lax.fori_loop(0, 6, body, (acc, h))

  def f64(acc, h, w):
    for _ in range(6):
      acc, h = acc + h.T @ h, np.tanh(h @ w)
    return acc, h
  args = _rng_args()
  _run(f, f64, args, 6)
  assert _loop_copies(f, *args) == []
  # acc + h^T h: one GEMM adding into acc's state (the shared GEMM's ACCUMULATE bit)
  text = ourjax.jit(f).lower(*args).compile()._executable.compiled.llvm_ir
  assert _accumulating_calls(text, "f32") == 1


def _accumulating_calls(ir_text, tag):
  """Calls of the shared GEMM with gemm.ACCUMULATE set in transA (the 10th argument)."""
  import re
  from ourjax.backends.llvm import gemm
  n = 0
  for m in re.finditer(rf'call void @"ourjax_gemm_{tag}"\((.*)\)', ir_text):
    args = [x.strip() for x in m.group(1).split(",")]
    n += bool(int(args[9].split()[-1]) & gemm.ACCUMULATE)
  return n


def test_multi_output_fusion_results_update_in_place():
  """Two results of one multi-output kernel, each reading both old states at its own index
  (a, b) -> (a * b + 1, tanh(a - b)): both written over their states, no copies."""
  rng = np.random.default_rng(3)
  a0 = rng.standard_normal((16, 64)).astype(np.float32)
  b0 = rng.standard_normal((16, 64)).astype(np.float32)

  def step(np_, a, b):
    return a * b * 0.5 + 1.0, np_.tanh(a - b)

  def f(a, b):
    return lax.fori_loop(0, 5, lambda i, c: step(jnp, *c), (a, b))

  def f64(a, b):
    for _ in range(5):
      a, b = step(np, a, b)
    return a, b
  _run(f, f64, (a0, b0), 5)
  assert _loop_copies(f, a0, b0) == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["acc_first", "dot_first"])
def test_accumulating_dot_matches_numpy(dtype, order):
  """acc = acc + x_i^T @ y_i (or dot + acc) over a loop of slices, both float types, shapes
  that are no multiple of the vector width; against NumPy in float64."""
  from ourjax.config import enable_x64
  rng = np.random.default_rng(2)
  T, B, M, N = 7, 11, 13, 37        # (M*N*B >= 4096: the packed GEMM, dots.fast_dot_ok)
  xs = rng.standard_normal((T, B, M)).astype(dtype)
  ys = rng.standard_normal((T, B, N)).astype(dtype)
  acc0 = rng.standard_normal((M, N)).astype(dtype)

  def f(acc, xs, ys):
    def body(i, acc):
      d = xs[i].T @ ys[i]
      return acc + d if order == "acc_first" else d + acc
    return lax.fori_loop(0, T, body, acc)
  with enable_x64(dtype == np.float64):
    got = ourjax.jit(f)(acc0, xs, ys)
    text = ourjax.jit(f).lower(acc0, xs, ys).compile()._executable.compiled.llvm_ir
  assert got.dtype == dtype
  want = acc0.astype(np.float64) + np.einsum("tbm,tbn->mn", xs.astype(np.float64),
                                              ys.astype(np.float64))
  tol = 1e-5 if dtype == np.float32 else 1e-12
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol * 10)
  assert _accumulating_calls(text, "f32" if dtype == np.float32 else "f64") == 1


@pytest.mark.parametrize("case", ["swap", "old_read_later", "reversed", "row_sum", "dot_root",
                                  "self_product"])
def test_state_read_elsewhere_keeps_its_copy(case):
  """Results whose old state is still needed after (or while) they are written: the values
  must be the loop's, whatever the planner chose."""
  def step(np_, acc, h, w):
    if case == "swap":                  # the old acc is the next h's value source
      return h.T @ h * 0.1 + 1.0, acc[:8] * 0.5
    if case == "old_read_later":        # new acc, then h reads the old acc
      new = acc * 0.5 + 1.0
      return new, np_.tanh(h @ acc) * 0.1
    if case == "reversed":              # acc read at another index of the same kernel
      return acc[:, ::-1] * 0.5 + acc, np_.tanh(h)
    if case == "row_sum":               # a reduction of acc in the kernel writing acc
      return acc - acc.sum(-1, keepdims=True) * 0.01, np_.tanh(h)
    if case == "self_product":          # acc + acc @ w: the dot reads the accumulator
      return acc + acc @ w, np_.tanh(h)
    return acc @ w, h                   # dot_root: the dot itself writes acc

  def f(acc, h, w):
    def body(i, c):
      return step(jnp, *c, w)
    return lax.fori_loop(0, 4, body, (acc, h))

  def f64(acc, h, w):
    for _ in range(4):
      acc, h = step(np, acc, h, w)
    return acc, h
  _run(f, f64, _rng_args(), 4)


def test_scan_gradient_accumulators():
  """The LSTM pattern: value_and_grad of a scan, whose backward loop accumulates dW += x^T dz;
  against NumPy's hand-written gradient in float64."""
  rng = np.random.default_rng(1)
  T, B, I, H = 5, 3, 4, 6
  xs = rng.standard_normal((T, B, I)).astype(np.float32)
  w = (rng.standard_normal((I, H)) * 0.3).astype(np.float32)
  u = (rng.standard_normal((H, H)) * 0.3).astype(np.float32)

  def loss(w, u, xs):
    def cell(h, x):
      h = jnp.tanh(x @ w + h @ u)
      return h, h
    _, hs = lax.scan(cell, jnp.zeros((B, H), jnp.float32), xs)
    return jnp.sum(hs * hs)

  def grads64(w, u, xs):
    hs, h = [], np.zeros((B, H))
    for t in range(T):
      h = np.tanh(xs[t] @ w + h @ u)
      hs.append(h)
    dw, du, dh = np.zeros_like(w), np.zeros_like(u), np.zeros((B, H))
    for t in reversed(range(T)):
      dh = dh + 2 * hs[t]
      dz = dh * (1 - hs[t] ** 2)
      hprev = hs[t - 1] if t else np.zeros((B, H))
      dw += xs[t].T @ dz
      du += hprev.T @ dz
      dh = dz @ u.T
    return dw, du
  gw, gu = ourjax.jit(ourjax.grad(loss, argnums=(0, 1)))(w, u, xs)
  ww, wu = grads64(*[a.astype(np.float64) for a in (w, u, xs)])
  np.testing.assert_allclose(np.asarray(gw, np.float64), ww, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(gu, np.float64), wu, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("second", [False, True])
def test_accumulating_dot_into_a_donated_argument(second):
  """acc + x^T @ y with acc donated: the GEMM adds into acc's own buffer; with a second
  result reading acc (acc * 2), the values must still be those of the old acc.  Against NumPy
  in float64."""
  rng = np.random.default_rng(6)
  acc = rng.standard_normal((48, 40)).astype(np.float32)
  x = rng.standard_normal((32, 48)).astype(np.float32)
  y = rng.standard_normal((32, 40)).astype(np.float32)

  def f(acc, x, y):
    new = acc + x.T @ y
    return (new, acc * 2.0) if second else new
  want = acc.astype(np.float64) + x.astype(np.float64).T @ y
  g = ourjax.jit(f, donate_argnums=0)
  got = g(ourjax.device_put(acc), x, y)
  if second:
    got, twice = got
    np.testing.assert_allclose(np.asarray(twice, np.float64), 2.0 * acc, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)
  if not second:
    text = g.lower(acc, x, y).compile()._executable.compiled.llvm_ir
    assert _accumulating_calls(text, "f32") == 1


@pytest.mark.parametrize("rows", [64, 2])
def test_residual_stores_run_side_by_side(rows):
  """A scan stacking several outputs (an LSTM's residuals): the in-place stores of one step are
  independent serial kernels, run as the pieces of one parallel kernel (llvm/horizontal.py)
  when they store horizontal.MIN_WORK elements together (4 x 64 x 128 here; not 4 x 2 x 128);
  the stacks against NumPy in float64."""
  rng = np.random.default_rng(7)
  xs = rng.standard_normal((6, rows, 128)).astype(np.float32)

  def f(xs):
    def cell(h, x):
      a = jnp.tanh(x + h)
      b = a * x
      c = 1.0 - a * a
      return a * 0.5, (a, b, c, x * 2.0)
    return lax.scan(cell, jnp.zeros((rows, 128), jnp.float32), xs)

  def f64(xs):
    h, outs = np.zeros((rows, 128)), []
    for x in xs:
      a = np.tanh(x + h)
      outs.append((a, a * x, 1.0 - a * a, x * 2.0))
      h = a * 0.5
    return h, [np.stack(o) for o in zip(*outs)]
  got_h, got = ourjax.jit(f)(xs)
  want_h, want = f64(xs.astype(np.float64))
  np.testing.assert_allclose(np.asarray(got_h, np.float64), want_h, rtol=2e-6, atol=2e-6)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-6, atol=2e-6)
  prof = ourjax.jit(f).lower(xs).compile().profile(xs, reps=1).rows
  merged = any(r.get("kind") == "Horizontal" and r.get("loop") for r in prof)
  assert merged == (rows == 64), prof
