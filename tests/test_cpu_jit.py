"""The llvmlite CPU engine (ourjax.backends.cpu.jit): compile, call, vectorize, report errors."""
from __future__ import annotations

import ctypes
import gc
import threading

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
