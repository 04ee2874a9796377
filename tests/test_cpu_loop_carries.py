"""Loops of small state on the CPU: the small temporaries only thread 0 touches (a loop's scalar
carries, its predicate, the values between its kernels) live on the entry's stack
(``cpu/entry.py: stack_buffers``), where LLVM keeps them in registers; NumPy scalar arguments
take jit's dispatch fast path; a conditional's results are computed by its branches straight
into the output buffers.  Results are compared with the reference backend and float64 NumPy,
under jit, grad and vmap; the plans are compared with the plans the same programs get without
the mechanism."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ourjax
import ourjax.numpy as jnp
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)
from ourjax import lax
from ourjax.backends.cpu import backend as cpu
from ourjax.backends.cpu import entry
from ourjax.backends.llvm import kernels

F32 = np.float32


@pytest.fixture
def no_disk_cache(monkeypatch):
  monkeypatch.setenv("OURJAX_CACHE_DIR", "off")


def _compiled(f, *args):
  ourjax.clear_caches()
  return ourjax.jit(f).lower(*args).compile()


def _reference(f, *args):
  return ourjax.jit(f, backend="reference")(*args)


def _scalar_loop(steps):
  def f(x):
    def body(c):
      return c[0] + 1, c[1] * 0.999 + jnp.sin(c[1]) * 1e-3, c[2] + jnp.cos(c[1])
    return lax.while_loop(lambda c: c[0] < steps, body, (0, x, jnp.zeros((), x.dtype)))[1:]
  return f


# ---------------------------------------------------------------------------------------------
# the plan: carries on the stack, out of the arena


def test_scalar_carries_leave_the_arena(no_disk_cache, monkeypatch):
  """The loop's counter, predicate and the carry that is no output live on the stack: the
  arena is smaller than the plan without stack temporaries (``STACK_MAX_BYTES = 0``), the
  entry allocates them, and the results are the reference backend's."""
  f = _scalar_loop(50)
  x = F32(0.5)
  comp = _compiled(f, x)
  text = comp.as_text(dialect="llvm")
  entry_ir = text[text.index('@"ourjax_entry"'):]
  assert "alloca [" in entry_ir
  with_stack = comp.memory_analysis().temp_size_in_bytes
  monkeypatch.setattr(entry, "STACK_MAX_BYTES", 0)
  without = _compiled(f, x).memory_analysis().temp_size_in_bytes
  assert with_stack < without, (with_stack, without)
  got, want = comp(x), _reference(f, x)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_stack_buffers_are_only_thread_0s(no_disk_cache, monkeypatch):
  """A scalar carry that a parallel kernel of the loop body reads (its pieces run on other
  threads, which cannot see thread 0's stack) stays in the arena; the others go to the
  stack.  Several thread counts give the same bits and the float64 NumPy result.  (The
  kernels beside the entry: a loop of parallel kernels is otherwise compiled apart,
  ``backend.SPLIT_HEAVY_LOOPS``, where no temporary lives on the stack.)"""
  from ourjax.backends.cpu import backend
  monkeypatch.setattr(backend, "SPLIT_HEAVY_LOOPS", False)
  monkeypatch.setattr(kernels, "PARALLEL_MIN_WORK", 512)
  monkeypatch.setattr(entry, "LOOP_JOB_MIN_WORK", 512)
  seen = []
  orig = entry.stack_buffers

  def spy(steps):
    out = orig(steps)
    seen.append((steps, out))
    return out
  monkeypatch.setattr(entry, "stack_buffers", spy)

  def f(x):
    def body(i, c):
      s, x = c
      return s * 0.5 + 0.25, jnp.tanh(x * s + 0.1)      # (the big kernel reads the carry s)
    return lax.fori_loop(0, 7, body, (F32(1.5), x))
  x = np.random.default_rng(0).standard_normal((64, 64)).astype(F32)
  comp = _compiled(f, x)
  steps, chosen = seen[-1]
  from ourjax.backends.llvm.planning import KernelStep, WhileStep

  def kernels_of(steps):
    for s in steps:
      if isinstance(s, KernelStep):
        yield s.kernel
      elif isinstance(s, WhileStep):
        yield from kernels_of(s.cond_steps)
        yield from kernels_of(s.body_steps)
  ks = list(kernels_of(steps))
  assert any(k.parallel for k in ks) and chosen
  for k in ks:
    for b in k.buffers:
      if id(b) in chosen:
        assert not k.parallel, (k.name, b)
  saved = cpu.num_threads()
  try:
    outs = []
    for n in (1, 2, 3):
      cpu.set_num_threads(n)
      outs.append([np.asarray(v) for v in comp(x)])
  finally:
    cpu.set_num_threads(saved)
  for o in outs[1:]:
    for a, b in zip(outs[0], o):
      np.testing.assert_array_equal(a, b)
  s, want = 1.5, x.astype(np.float64)
  for _ in range(7):
    s, want = s * 0.5 + 0.25, np.tanh(want * s + 0.1)
  np.testing.assert_allclose(outs[0][1], want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# results: loops of small state under the transformations


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(-3, 3, width=32), st.integers(0, 40))
def test_scalar_while_loop_matches_numpy(x0, steps):
  f = ourjax.jit(_scalar_loop(steps))
  got = f(F32(x0))
  x, acc = np.float64(x0), 0.0
  for _ in range(steps):
    x, acc = x * 0.999 + np.sin(x) * 1e-3, acc + np.cos(x)
  np.testing.assert_allclose(np.asarray(got[0]), x, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(got[1]), acc, rtol=1e-4, atol=1e-4)


def test_fori_and_scan_of_scalars_under_grad_and_vmap():
  def fori(x, a):
    return lax.fori_loop(0, 12, lambda i, c: c * a + jnp.sin(c) * 0.1 + i * 1e-2, x)

  def scan(x, a):
    def step(c, t):
      c = c * a + jnp.cos(c + t) * 0.05
      return c, c * c
    c, ys = lax.scan(step, x, jnp.arange(10, dtype=F32) * 0.1)
    return c + ys.sum()
  xs = np.linspace(-1.0, 1.5, 5).astype(F32)
  a = F32(0.9)
  for fn in (fori, scan):
    for make, args in ((lambda b: ourjax.grad(fn, argnums=(0, 1)), (xs[1], a)),
                       (lambda b: ourjax.vmap(fn, in_axes=(0, None)), (xs, a)),
                       (lambda b: ourjax.vmap(ourjax.grad(fn), in_axes=(0, None)), (xs, a))):
      got = ourjax.jit(make(None))(*args)
      want = ourjax.jit(make(None), backend="reference")(*args)
      for g, w in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)
  # the gradient against central differences of the loop evaluated in float64 NumPy
  def fori64(x):
    for i in range(12):
      x = x * 0.9 + np.sin(x) * 0.1 + i * 1e-2
    return x
  g = ourjax.jit(ourjax.vmap(ourjax.grad(fori), in_axes=(0, None)))(xs, a)
  x64 = xs.astype(np.float64)
  np.testing.assert_allclose(np.asarray(g), (fori64(x64 + 1e-6) - fori64(x64 - 1e-6)) / 2e-6,
                             rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# dispatch: NumPy scalars


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.float16, np.uint8])
def test_numpy_scalars_take_the_fast_path(dtype):
  """NumPy scalar arguments give what their 0-d arrays give (value, dtype, not weak), from the
  dispatch fast path on the second call."""
  f = ourjax.jit(lambda a, b: a * b + a)
  v = dtype(3) if dtype is not np.bool_ else dtype(True)
  want = _reference(lambda a, b: a * b + a, np.asarray(v), np.asarray(v))
  for _ in range(3):
    got = f(v, v)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert got.dtype == want.dtype and not got.weak_type
  assert any(f._fast.values())
  # a 0-d array of the same type shares the signature; float64 (no x64) is canonicalised
  np.testing.assert_array_equal(np.asarray(f(np.asarray(v), v)), np.asarray(want))
  if dtype is np.float32:
    got = f(np.float64(2.5), np.float64(2.0))
    assert got.dtype == np.float32 and float(got) == 7.5


# ---------------------------------------------------------------------------------------------
# conditionals: results computed by the branches in place


def test_conditional_results_written_by_the_branches(no_disk_cache):
  """A conditional whose results are the program's outputs has its branches compute them in
  the output buffers: no temporary of their size, no copy after the conditional (a tuple of
  results, one a passed-through operand)."""
  n = 1 << 14
  x = np.random.default_rng(1).standard_normal(n).astype(F32)

  def f(x, p):
    return lax.cond(p > 0, lambda y: (jnp.tanh(y * 3) + y, y), lambda y: (y * 2, jnp.exp(-y)),
                    x)
  comp = _compiled(f, x, F32(1))
  assert comp.memory_analysis().temp_size_in_bytes < 4 * n
  steps = comp._executable.compiled.meta["steps"]
  assert not any(s.startswith("CopyKernel") and f"[{n}]" in s and "out" in s
                 for s in steps[steps.index("CondStep") + 1:]), steps
  for p in (1.0, -1.0):
    got, want = comp(x, F32(p)), _reference(f, x, F32(p))
    for g, w in zip(got, want):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# loops: the next state over a dying value; a reduction of the next state reads it


def test_next_state_computed_over_a_dying_value(no_disk_cache, monkeypatch):
  """A next state that cannot be computed in its state buffer (it reads the state at other
  indices, a roll) is computed in the buffer of a value of the body that dies where it is
  read elementwise, and copied back from there: one loop-sized buffer less than with a next
  buffer of its own (``share_loop_next`` off); the results are the reference backend's."""
  def f(x):
    def body(i, x):
      t = jnp.exp(-x * x)
      return jnp.roll(x, 1) * 0.5 + t * jnp.mean(t)
    return lax.fori_loop(0, 6, body, x)
  n = 4096
  x = np.random.default_rng(2).standard_normal(n).astype(F32)
  comp = _compiled(f, x)
  shared = comp.memory_analysis().temp_size_in_bytes
  monkeypatch.setattr(cpu._Planner, "share_loop_next", False)
  own = _compiled(f, x).memory_analysis().temp_size_in_bytes
  assert shared <= own - 4 * n, (shared, own)
  np.testing.assert_allclose(np.asarray(comp(x)), np.asarray(_reference(f, x)), rtol=1e-5,
                             atol=1e-6)


def test_reduction_of_the_next_state_reads_it(no_disk_cache):
  """A loop body returning a stencil update and a reduction of it (an ODE step and its energy):
  the fusion pass does not copy the update's computation into the reduction (its result is
  stored anyway, for the loop: a copy would read all its operands again), so the reduction
  reads the one buffer; results as the reference backend's."""
  def f(s):
    def step(s, _):
      x, v = s[0], s[1]
      a = -x - 0.5 * x ** 3 + 0.3 * (jnp.roll(x, 1) + jnp.roll(x, -1) - 2 * x) - 0.1 * v
      s = s + 0.01 * jnp.stack([v, a])
      return s, jnp.mean(s[0] * s[0])
    return lax.scan(step, s, None, length=20)
  s0 = np.random.default_rng(3).standard_normal((2, 512)).astype(F32) * 0.5
  comp = _compiled(f, s0)
  notes = comp._executable.module.notes
  assert any("stored anyway" in n for n in notes), notes[-5:]
  got, want = comp(s0), _reference(f, s0)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=1e-5)


def test_state_updated_in_place_when_later_kernels_read_the_new_state(no_disk_cache,
                                                                       monkeypatch):
  """A scan whose next state is elementwise in the state and also reduced (a slice of it: a
  kernel of its own after the update): the reduction reads the new state where the update
  wrote it, so the state is updated in place (no next buffer, no copy back), which the plan
  that counts every later reader as reading the old state could not do."""
  def f(x):
    def step(x, _):
      x = jnp.tanh(x * 0.9 + 0.1)
      return x, jnp.mean(x[0] * x[0])
    return lax.scan(step, x, None, length=8)
  x = np.random.default_rng(4).standard_normal((2, 2048)).astype(F32)
  comp = _compiled(f, x)
  in_place = comp.memory_analysis().temp_size_in_bytes
  from ourjax.backends.llvm import planning
  monkeypatch.setattr(planning, "_old_readers", lambda body, k: None)
  copied = _compiled(f, x).memory_analysis().temp_size_in_bytes
  assert in_place <= copied - x.nbytes, (in_place, copied)
  got, want = comp(x), _reference(f, x)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations([0, 1, 2]), st.integers(1, 5))
def test_loops_permuting_their_state(perm, steps):
  """A body that returns its state elements in another order (threefry's rotating keys), some
  of them updated over values of the body: the copies back read every element before any is
  overwritten (the next state of a permuted element is not taken from the state in place)."""
  def f(a, b, c):
    def body(i, s):
      t = jnp.exp(-s[0] * s[0])            # (a value of the body: the next state over it)
      new = (s[perm[0]], s[perm[1]] + 1.0, jnp.roll(s[perm[2]], 1) * 0.5 + t * jnp.mean(t))
      return new
    return lax.fori_loop(0, steps, body, (a, b, c))
  rng = np.random.default_rng(5)
  xs = [rng.standard_normal(64).astype(F32) for _ in range(3)]
  got = ourjax.jit(f)(*xs)
  s = [x.astype(np.float64) for x in xs]
  for _ in range(steps):
    t = np.exp(-s[0] * s[0])
    s = [s[perm[0]], s[perm[1]] + 1.0, np.roll(s[perm[2]], 1) * 0.5 + t * t.mean()]
  for g, w in zip(got, s):
    np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)


def test_next_state_from_a_conditional_with_a_pass_through_branch():
  """A loop whose next state is a conditional's result, one branch passing an operand through
  unchanged and the other computing it: whichever branch runs, the next state is that branch's
  value (a next state kept where one branch left it would miss the other's)."""
  def f(x, flags):
    def step(c, flag):
      a = c * 0.5 + 1.0               # (a value of the body, dying at the conditional)
      nxt = lax.cond(flag > 0, lambda ab: ab[0], lambda ab: jnp.sin(ab[1]) * 2.0, (a, c))
      return nxt, jnp.sum(nxt)
    return lax.scan(step, x, flags)
  x = np.linspace(-1.0, 1.0, 7, dtype=np.float32)
  for flags in ([1, 1, 1], [-1, -1, -1], [1, -1, 1], [-1, 1, -1]):
    flags = np.array(flags, np.int32)
    got = ourjax.jit(f, backend="cpu")(x, flags)
    want = ourjax.jit(f, backend="reference")(x, flags)
    for g, w in zip(got, want):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)
