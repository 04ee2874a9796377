"""Kernels found alike before their IR is emitted (``llvm/kernel_key.py``): kernels that differ
only in a constant, a dtype, a shape, a broadcast or a parameter get different keys and each
computes its own result (against the reference backend and NumPy), and copies of one kernel are
emitted once.  The suite runs with ``OURJAX_CHECK_KERNEL_KEYS=1`` (tests/conftest.py): every
kernel of a key met before is emitted anyway and must print as the first."""
import numpy as np
import pytest
from hypothesis import given, settings

import ourjax
import ourjax.numpy as jnp
from jaxpr_programs import assert_outputs_close, programs
from ourjax import lax
from ourjax.backends.cpu import backend as cpu
from ourjax.backends.llvm import kernel_key as kk
from ourjax.backends.llvm import planning
from ourjax.config import config

F32 = np.float32


@pytest.fixture(autouse=True)
def _cpu_no_cache(monkeypatch):
  monkeypatch.setattr(config, "_values", dict(config._values, jax_platforms="cpu",
                                              jax_compilation_cache_dir="off"))


def test_the_suite_checks_kernel_keys():
  assert kk.CHECK, "tests/conftest.py sets OURJAX_CHECK_KERNEL_KEYS=1"


# Each output below is a kernel of its own (its own inputs, so no fusion joins two); the first
# of each pair is the base ``tanh(x) * 1.5 + b`` summed over rows, the second differs from it
# in one thing.
def _base(x, b):
  return jnp.sum(jnp.tanh(x) * 1.5 + b[None, :], axis=0)


VARIANTS = {
    "same": _base,
    "constant": lambda x, b: jnp.sum(jnp.tanh(x) * 2.5 + b[None, :], axis=0),
    "negative zero": lambda x, b: jnp.sum(jnp.maximum(jnp.tanh(x), -0.0) * 1.5 + b[None, :],
                                          axis=0),
    "op": lambda x, b: jnp.sum(jnp.sin(x) * 1.5 + b[None, :], axis=0),
    "reduce axis": lambda x, b: jnp.sum(jnp.tanh(x) * 1.5 + b[None, :], axis=1),
    "reducer": lambda x, b: jnp.max(jnp.tanh(x) * 1.5 + b[None, :], axis=0),
    "broadcast": lambda x, b: jnp.sum(jnp.tanh(x) * 1.5 + b[:, None], axis=0),
    "transpose": lambda x, b: jnp.sum(jnp.tanh(x.T) * 1.5 + b[None, :], axis=0),
    "slice": lambda x, b: jnp.sum(jnp.tanh(x[1:, :]) * 1.5 + b[None, :], axis=0),
    "compare": lambda x, b: jnp.sum(jnp.where(x > b[None, :], x, b[None, :]), axis=0),
    "compare direction": lambda x, b: jnp.sum(jnp.where(x < b[None, :], x, b[None, :]), axis=0),
    "iota": lambda x, b: jnp.sum(jnp.tanh(x) * lax.broadcasted_iota(F32, x.shape, 0)
                                 + b[None, :], axis=0),
    "iota dimension": lambda x, b: jnp.sum(jnp.tanh(x) * lax.broadcasted_iota(F32, x.shape, 1)
                                           + b[None, :], axis=0),
    "pad value": lambda x, b: jnp.sum(jnp.pad(jnp.tanh(x), ((1, 0), (0, 0)),
                                              constant_values=2.0)[:-1] + b[None, :], axis=0),
}


def _numpy(name, x, b):
  x, b = x.astype(np.float64), b.astype(np.float64)
  t = np.tanh(x)
  if name == "constant":
    return (t * 2.5 + b).sum(0)
  if name == "negative zero":
    return (np.maximum(t, -0.0) * 1.5 + b).sum(0)
  if name == "op":
    return (np.sin(x) * 1.5 + b).sum(0)
  if name == "reduce axis":
    return (t * 1.5 + b).sum(1)
  if name == "reducer":
    return (t * 1.5 + b).max(0)
  if name == "broadcast":
    return (t * 1.5 + b[:, None]).sum(0)
  if name == "transpose":
    return (np.tanh(x.T) * 1.5 + b).sum(0)
  if name == "slice":
    return (np.tanh(x[1:]) * 1.5 + b).sum(0)
  if name == "compare":
    return np.where(x > b, x, b).sum(0)
  if name == "compare direction":
    return np.where(x < b, x, b).sum(0)
  if name == "iota":
    return (t * np.arange(x.shape[0])[:, None] + b).sum(0)
  if name == "iota dimension":
    return (t * np.arange(x.shape[1])[None, :] + b).sum(0)
  if name == "pad value":
    return (np.concatenate([np.full((1, x.shape[1]), 2.0), t])[:-1] + b).sum(0)
  return (t * 1.5 + b).sum(0)


def _keys(jitted, *args):
  """The kernel keys of ``jitted``'s program for ``args``, in kernel order."""
  exe = jitted.lower(*args).compile()._executable
  planner = planning.plan_entry(exe.module, cpu._Planner)[0]
  memo = {}
  return exe, [kk.kernel_key(k, memo) for k in planner.kernels]


@pytest.mark.parametrize("groups", [False, True])
def test_look_alike_kernels_are_not_merged(groups, monkeypatch):
  """Every variant next to the base (square inputs, so that a wrong axis, broadcast or transpose
  would still fit), in one module or spread over several: only the exact copy shares the
  base's kernel, and every result is right."""
  if groups:
    monkeypatch.setattr(cpu, "KERNELS_PER_MODULE", 2)
  else:
    monkeypatch.setattr(cpu, "compile_groups", lambda n, control_flow=False: 0)
  monkeypatch.setattr(cpu.os, "cpu_count", lambda: 4)
  rng = np.random.default_rng(3)
  names = list(VARIANTS)
  n = 9
  args = []
  for _ in names:
    args += [rng.standard_normal((n, n)).astype(F32), rng.standard_normal(n).astype(F32)]
  args += [rng.standard_normal((n, n)).astype(F32), rng.standard_normal(n).astype(F32)]

  def f(*a):
    outs = [VARIANTS[nm](a[2 * i], a[2 * i + 1]) for i, nm in enumerate(names)]
    return outs + [_base(a[-2], a[-1])]

  jitted = ourjax.jit(f, backend="cpu")
  exe, keys = _keys(jitted, *args)
  got = exe(*args)
  ref = ourjax.jit(f, backend="reference")(*args)
  for i, nm in enumerate(names + ["same"]):
    want = _numpy(nm, args[2 * i], args[2 * i + 1])
    np.testing.assert_allclose(np.asarray(got[i]), want, rtol=2e-5, atol=2e-5, err_msg=nm)
    np.testing.assert_allclose(np.asarray(got[i]), np.asarray(ref[i]), rtol=2e-5, atol=2e-5,
                               err_msg=nm)
  assert all(k is not None for k in keys)
  # the two copies of the base ("same" and the last output) share their kernels, nothing else
  # does; (the suite's check emits every kernel and compares: the keys agree with the IR)
  meta = exe.compiled.meta
  assert len(keys) - len(set(keys)) >= 1
  assert meta["distinct_kernels"] == len(set(keys))


def test_dtype_and_shape_give_different_keys(monkeypatch):
  """One body over int32 and float32, and over two shapes: four keys; the copy shares one, and
  is not emitted (the suite's check off here)."""
  monkeypatch.setattr(kk, "CHECK", False)
  def f(a, b, c, d, e):
    g = lambda x: jnp.sum(x * 3 + 1, axis=0)   # noqa: E731
    return g(a), g(b), g(c), g(d), g(e)
  rng = np.random.default_rng(0)
  a = rng.standard_normal((6, 5)).astype(F32)
  b = rng.integers(-9, 9, (6, 5)).astype(np.int32)
  c = rng.standard_normal((6, 4)).astype(F32)
  d = rng.standard_normal((7, 5)).astype(F32)
  e = rng.standard_normal((6, 5)).astype(F32)
  exe, keys = _keys(ourjax.jit(f, backend="cpu"), a, b, c, d, e)
  assert len(keys) == 5 and len(set(keys)) == 4
  assert keys[0] == keys[4]
  assert exe.compiled.meta["unemitted_kernels"] == 1
  for got, x in zip(exe(a, b, c, d, e), (a, b, c, d, e)):
    want = (x.astype(np.float64) * 3 + 1).sum(0)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5)
    assert got.dtype == x.dtype



def test_dots_reading_a_packed_b_are_keyed_without_their_b(monkeypatch):
  """A dot whose B is packed by a kernel before it (``dots.share_b``) holds B without taking a
  pointer to it: it is keyed by B's type, dims and size, so two such dots of one shape share a
  key (one is not emitted; the suite's check emits it and compares its IR) and a dot whose B
  has other dims does not; every product is right."""
  from ourjax.backends.llvm.dots import DotKernel
  monkeypatch.setattr(cpu._Planner, "threads", lambda self: 4)
  rng = np.random.default_rng(5)
  x = [rng.standard_normal((2048, 128)).astype(F32) for _ in range(3)]
  w = [rng.standard_normal(s).astype(F32) for s in ((128, 512), (128, 512), (128, 1024))]

  def f(x0, x1, x2, w0, w1, w2):
    return x0 @ w0, x1 @ w1, x2 @ w2
  exe = ourjax.jit(f, backend="cpu").lower(*x, *w).compile()._executable
  planner = planning.plan_entry(exe.module, cpu._Planner)[0]
  dots = [k for k in planner.kernels if type(k) is DotKernel]
  assert len(dots) == 3 and all(k.packed_b is not None for k in dots)
  memo = {}
  keys = [kk.kernel_key(k, memo) for k in dots]
  assert None not in keys and keys[0] == keys[1] and keys[2] != keys[0]
  for got, a, b in zip(exe(*x, *w), x, w):
    np.testing.assert_allclose(np.asarray(got, np.float64), a.astype(np.float64) @ b,
                               rtol=1e-4, atol=1e-3)

def test_scalars_are_keyed_by_type_and_bits():
  """1, 1.0 and True, 0.0 and -0.0, and two NaN payloads are different values to the key."""
  w = kk._Walk((), None, {})
  vals = [1, 1.0, True, 0.0, -0.0, float("nan"), np.float32(0.0), np.float32(-0.0),
          np.frombuffer(np.uint32(0x7FC00001).tobytes(), np.float32)[0],
          np.frombuffer(np.uint32(0x7FC00002).tobytes(), np.float32)[0],
          np.array([1, 2], np.int32), np.array([1, 2], np.int64), (1, 2), [1, 2]]
  keys = [w.value(v) for v in vals]
  for i in range(len(keys)):
    for j in range(i + 1, len(keys)):
      assert keys[i] != keys[j], (vals[i], vals[j])


def test_a_kernel_holding_an_unknown_object_has_no_key():
  """An attribute of a kind the key does not know makes the kernel unkeyed (emitted and keyed
  by its IR as before), never keyed without it."""
  from ourjax.backends.llvm.kernels import Buf, CopyKernel
  a, b = Buf(F32, (4,)), Buf(F32, (4,))
  k = CopyKernel("k", a, b)
  assert kk.kernel_key(k) is not None
  k.extra = object()
  assert kk.kernel_key(k) is None


@settings(max_examples=8)
@given(prog=programs(max_ops=20))
def test_random_programs_next_to_a_copy_of_themselves(prog):
  """A random program beside itself over other inputs (its inputs reversed): the copy's kernels
  are not emitted (the suite's check emits them and compares their IR), and both results match
  eager evaluation."""
  n = len(prog.inputs)
  other = [np.flip(np.asarray(x)).copy() for x in prog.inputs]

  def twice(*a):
    return list(prog(*a[:n])) + list(prog(*a[n:]))
  got = ourjax.jit(twice, backend="cpu")(*prog.inputs, *other)
  k = len(got) // 2
  assert_outputs_close(got[:k], prog(*prog.inputs), repr(prog))
  assert_outputs_close(got[k:], prog(*other), repr(prog))


def test_emitter_memo_keys_constant_indices_by_value():
  """The emitter's memo keys an index of constants by their values: equal constant indices
  share entries and other ones never do, however Python reuses the ids of freed constants (keyed
  by id, the same program emitted its kernels differently from run to run, and an index could
  hit the entry of another one)."""
  import gc
  import llvmlite.ir as ir
  from ourjax.backends.llvm.emitter import Index, i64
  fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f")
  b = ir.IRBuilder(fn.append_basic_block())
  keys = []
  for row, col in [(0, 3), (1, 2), (0, 3), (2, 1)]:
    keys.append(Index(b, (4, 4), multi=[i64(row), i64(col)]).key)
    gc.collect()
  assert keys[0] == keys[2]
  assert len({keys[0], keys[1], keys[3]}) == 3


def test_a_donated_output_is_part_of_the_key():
  """Emission reads an output buffer's ``donated`` flag (a plain transpose into a buffer that may
  be a donated parameter's is not tiled): two kernels that differ only there get two keys."""
  from ourjax.backends.llvm.kernels import Buf, CopyKernel
  a, b, c = Buf(F32, (64, 64)), Buf(F32, (64, 64)), Buf(F32, (64, 64))
  c.donated = True
  assert kk.kernel_head(CopyKernel("k", a, b)) != kk.kernel_head(CopyKernel("k", a, c))
  assert kk.kernel_key(CopyKernel("k", a, b)) != kk.kernel_key(CopyKernel("k", a, c))
