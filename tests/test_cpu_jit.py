"""The llvmlite CPU engine (ourjax.backends.cpu.jit): compile, call, vectorize, report errors."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
import llvmlite.ir as ir

from ourjax.backends.cpu import jit

I64 = ir.IntType(64)


def _binary_loop(mod, name, fty, op, noalias=True):
  """void name(i64 n, fty* a, fty* b, fty* out): out[i] = op(a[i], b[i])."""
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64] + [fty.as_pointer()] * 3), name)
  if noalias:
    for a in fn.args[1:]:
      a.add_attribute("noalias")
  entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
  b = ir.IRBuilder(entry)
  n = fn.args[0]
  b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
  b.position_at_end(loop)
  i = b.phi(I64)
  i.add_incoming(ir.Constant(I64, 0), entry)
  x = b.load(b.gep(fn.args[1], [i]))
  y = b.load(b.gep(fn.args[2], [i]))
  b.store(op(b, x, y), b.gep(fn.args[3], [i]))
  i2 = b.add(i, ir.Constant(I64, 1))
  i.add_incoming(i2, loop)
  b.cbranch(b.icmp_signed("<", i2, n), loop, done)
  b.position_at_end(done)
  b.ret_void()
  return fn


ARGS = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


def _call(f, a, b):
  out = np.empty_like(a)
  f(a.size, a.ctypes.data, b.ctypes.data, out.ctypes.data)
  return out


def test_host_description():
  assert jit.cpu_name() and isinstance(jit.cpu_name(), str)
  assert isinstance(jit.cpu_features(), str)
  assert jit.triple() and jit.target_data_layout()
  mod = jit.new_module("m")
  assert mod.triple == jit.triple() and mod.data_layout == jit.target_data_layout()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_kernel_runs(dtype):
  fty = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
  mod = jit.new_module("add")
  _binary_loop(mod, "add", fty, lambda b, x, y: b.fadd(x, y))
  cm = jit.compile_module(mod, ["add"])
  f = cm.ctypes_function("add", None, ARGS)
  rng = np.random.default_rng(0)
  for n in (0, 1, 7, 16, 1000, 1037):
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    np.testing.assert_array_equal(_call(f, a, b), a + b)
  assert cm.address("add") == cm.address("add") != 0
  assert cm.entry_names == ("add",)


def test_elementwise_loop_vectorizes():
  mod = jit.new_module("vec")
  _binary_loop(mod, "mul_add", ir.FloatType(), lambda b, x, y: b.fadd(b.fmul(x, y), x))
  _binary_loop(mod, "dmul", ir.DoubleType(), lambda b, x, y: b.fmul(x, y))
  cm = jit.compile_module(mod, ["mul_add", "dmul"])
  ir_text = cm.optimized_ir
  isa = jit.vector_isa()
  if isa == "sse":      # 128-bit vectors only
    assert "<4 x float>" in ir_text and "<2 x double>" in ir_text
    return
  assert "<16 x float>" in ir_text or "<8 x float>" in ir_text
  assert "<8 x double>" in ir_text or "<4 x double>" in ir_text
  asm = cm.asm
  assert "ymm" in asm or (isa == "avx512" and "zmm" in asm)


@pytest.mark.parametrize("cpu,isa", [("haswell", "avx2"), ("znver3", "avx2"),
                                     ("skylake-avx512", "avx512"), ("znver4", "avx512"),
                                     ("x86-64", "sse")])
def test_vector_isa_of_named_cpus(cpu, isa):
  assert jit.vector_isa(jit.target_machine_for(cpu)) == isa


def test_ourjax_cpu_overrides_the_target():
  """OURJAX_CPU=x86-64 generates baseline SSE2 code, which every x86-64 host runs: a jitted
  program with a GEMM, inline math and a reduction gives NumPy's numbers through it."""
  import os, subprocess, sys
  code = """
import numpy as np, ourjax, ourjax.numpy as jnp
from ourjax.backends.cpu import jit
print(jit.cpu_name(), jit.vector_isa())
rng = np.random.default_rng(0)
a = rng.standard_normal((37, 70)).astype(np.float32)
b = rng.standard_normal((70, 45)).astype(np.float32)
f = ourjax.jit(lambda a, b: jnp.sum(jnp.tanh(a @ b) * 2.0 + jnp.exp(-a[:, :45] ** 2), axis=0))
want = np.sum(np.tanh(a.astype(np.float64) @ b) * 2.0 + np.exp(-a[:, :45].astype(np.float64) ** 2), axis=0)
np.testing.assert_allclose(np.asarray(f(a, b)), want, rtol=2e-5, atol=2e-5)
print("ok")
"""
  env = dict(os.environ, OURJAX_CPU="x86-64", OURJAX_CACHE_DIR="off")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.split() == ["x86-64", "sse", "ok"]


def _select_shuffle_select(n: int) -> str:
  """out = select(c, reverse(select(c, a, b)), d) with c = (x == y): the shape LLVM 22's AVX-512
  code generator gets wrong (jit.masked_select_hazard)."""
  v = f"<{n} x float>"
  rev = ", ".join(f"i32 {n - 1 - i}" for i in range(n))
  return f"""
define void @f(ptr noalias %px, ptr noalias %py, ptr noalias %pa, ptr noalias %pb,
               ptr noalias %pd, ptr noalias %po) {{
  %x = load {v}, ptr %px, align 4
  %y = load {v}, ptr %py, align 4
  %a = load {v}, ptr %pa, align 4
  %b = load {v}, ptr %pb, align 4
  %d = load {v}, ptr %pd, align 4
  %c = fcmp oeq {v} %x, %y
  %s = select <{n} x i1> %c, {v} %a, {v} %b
  %p = shufflevector {v} %s, {v} poison, <{n} x i32> <{rev}>
  %r = select <{n} x i1> %c, {v} %p, {v} %d
  store {v} %r, ptr %po, align 4
  ret void
}}
"""


def test_masked_select_hazard_is_detected():
  assert jit.masked_select_hazard(_select_shuffle_select(8))
  # the same selects without the shuffle between them, or with another condition: no hazard
  plain = _select_shuffle_select(8).replace("%p = shufflevector <8 x float> %s", "%p = fneg <8 x float> %s").replace(", <8 x float> poison, <8 x i32> <i32 7, i32 6, i32 5, i32 4, i32 3, i32 2, i32 1, i32 0>", "")
  assert not jit.masked_select_hazard(plain)
  other = _select_shuffle_select(8).replace("%s = select <8 x i1> %c", "%s = select <8 x i1> %e").replace("%c = fcmp", "%e = fcmp one <8 x float> %x, %y\n  %c = fcmp")
  assert not jit.masked_select_hazard(other)
  # found after functions that have no shuffle or no vector select (skipped unread)
  benign = "\ndefine void @g(ptr %p) {\n  %v = load <8 x float>, ptr %p\n  ret void\n}\n"
  assert jit.masked_select_hazard(benign + plain + _select_shuffle_select(8))
  assert not jit.masked_select_hazard(benign + plain + other)


def _check_select_shuffle_select(f, n):
  """``f`` (the compiled ``_select_shuffle_select(n)``) gives NumPy's values on drawn inputs."""
  rng = np.random.default_rng(n)
  x = rng.integers(0, 2, n).astype(np.float32)
  y = np.zeros(n, np.float32)
  a, b, d = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
  out = np.empty(n, np.float32)
  f(*(v.ctypes.data for v in (x, y, a, b, d, out)))
  c = x == y
  np.testing.assert_array_equal(out, np.where(c, np.where(c, a, b)[::-1], d))


@pytest.mark.parametrize("n", [4, 8, 16])
def test_select_of_shuffled_select_runs_right(n):
  """The pattern gives NumPy's values through compile_module, on whatever this host has (on an
  AVX-512 host the module is code-generated without AVX-512)."""
  cm = jit.compile_module(_select_shuffle_select(n), ["f"])
  f = cm.ctypes_function("f", None, [ctypes.c_void_p] * 6)
  _check_select_shuffle_select(f, n)


def test_gradient_of_cumsum_of_cummax():
  """The fuzzer's reproducer of the miscompile, end to end, against finite differences' exact
  values (cummax of an increasing input passes each element's cotangent through)."""
  import ourjax
  import ourjax.numpy as jnp
  from ourjax import lax
  g = ourjax.jit(ourjax.grad(lambda x: jnp.sum(jnp.cumsum(lax.cummax(x)))))
  for x, want in (([0., 1.], [2., 1.]), ([1., 0.], [3., 0.]), ([0., 1., 2., 3.], [4., 3., 2., 1.])):
    np.testing.assert_array_equal(np.asarray(g(jnp.array(x, jnp.float32))), want)


def test_object_builds_leave_the_caller_a_core_until_it_waits(monkeypatch):
  """While the caller is still handing modules over, ``ObjectBuilds`` runs one build fewer
  than it has threads (the caller's emission keeps a core); once the caller waits in
  ``results`` the last slot opens, and the results come in submission order."""
  import os
  import threading
  monkeypatch.setattr(os, "cpu_count", lambda: 3)
  entered, go, lock = [], threading.Event(), threading.Lock()

  def fake_object(text, *a, **k):
    with lock:
      entered.append(text)
    assert go.wait(30)
    return text.encode(), text

  monkeypatch.setattr(jit, "_object", fake_object)
  builds = jit.ObjectBuilds(3)
  for t in ("a", "b", "c"):
    builds.submit(t)
  for _ in range(3000):                     # (until the two slots are taken)
    if len(entered) == 2:
      break
    threading.Event().wait(0.001)
  assert len(entered) == 2 and builds._slots._value == 0
  out = []
  waiter = threading.Thread(target=lambda: out.append(builds.results()))
  waiter.start()
  go.set()
  waiter.join(30)
  assert out == [[(b"a", "a"), (b"b", "b"), (b"c", "c")]] and len(entered) == 3


def test_modules_compiled_apart_hand_the_gil_back_quickly(monkeypatch):
  """While a module compiles outside llvmlite's lock (``object_apart``, on a builder thread)
  the interpreter's switch interval is at most ``QUICK_SWITCH_INTERVAL``, so that the thread
  gets the GIL back soon after each call into LLVM; it is restored when the last such build
  ends, also when two overlap, and a build on the caller's thread (under the lock) leaves it
  alone.  The object code is the same."""
  import sys
  import threading
  old = sys.getswitchinterval()
  seen, inside, release = [], threading.Barrier(3), threading.Event()
  real = jit._object_steps

  def spy(*a, **k):
    seen.append(sys.getswitchinterval())
    if threading.current_thread().name.startswith("build"):
      inside.wait(30)                       # (both builds are in flight at once)
      assert release.wait(30)
    return real(*a, **k)

  monkeypatch.setattr(jit, "_object_steps", spy)
  mod = jit.new_module("add")
  _binary_loop(mod, "add", ir.FloatType(), lambda b, x, y: b.fadd(x, y))
  text = str(mod)
  jit.compile_to_object(text, keep_ir=False)              # (the caller's own: locked)
  assert seen == [old]
  objs = []
  threads = [threading.Thread(target=lambda: objs.append(jit.object_apart(text, keep_ir=False)),
                              name=f"build{i}") for i in range(2)]
  for t in threads:
    t.start()
  inside.wait(30)
  assert abs(sys.getswitchinterval() - min(old, jit.QUICK_SWITCH_INTERVAL)) < 1e-6
  release.set()
  for t in threads:
    t.join(30)
  assert sys.getswitchinterval() == old
  assert seen[1:] == pytest.approx([min(old, jit.QUICK_SWITCH_INTERVAL)] * 2, abs=1e-6)
  assert len(objs) == 2
  assert objs[0][0] == objs[1][0] and objs[0][0][:4] == b"\x7fELF"


@pytest.mark.parametrize("n", [8, 16])
def test_unoptimised_modules_are_checked_for_the_hazard_only_with_a_shuffle(n, monkeypatch):
  """A module code-generated at O0 (an entry in a module of its own) is looked at for the
  select-of-shuffled-select hazard only when its text has a shuffle (at O0 LLVM makes none):
  the reproducer still is, and gives NumPy's values; a module without shuffles is not
  printed for it."""
  real, looked = jit.masked_select_hazard, []
  monkeypatch.setattr(jit, "masked_select_hazard", lambda t: looked.append(t) or real(t))
  mod = jit.new_module("add")
  _binary_loop(mod, "add", ir.FloatType(), lambda b, x, y: b.fadd(x, y))
  jit.object_apart(str(mod), 0, keep_ir=False)
  assert looked == []
  obj, _ = jit.object_apart(_select_shuffle_select(n), 0, keep_ir=False)
  assert len(looked) == int(jit._has_avx512(jit._setup()))
  assert all(real(t) for t in looked)
  f = jit.load_object(obj, ["f"]).ctypes_function("f", None, [ctypes.c_void_p] * 6)
  _check_select_shuffle_select(f, n)
