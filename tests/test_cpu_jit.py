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
  assert "<16 x float>" in ir_text or "<8 x float>" in ir_text
  assert "<8 x double>" in ir_text or "<4 x double>" in ir_text
  asm = cm.asm
  assert "zmm" in asm or "ymm" in asm


def test_module_from_text_and_int_function():
  text = """
  define i64 @twice(i64 %x) {
    %y = shl i64 %x, 1
    ret i64 %y
  }
  """
  cm = jit.compile_module(text, ["twice"])
  f = cm.ctypes_function("twice", ctypes.c_int64, [ctypes.c_int64])
  assert f(21) == 42
  assert "twice" in cm.optimized_ir


def test_malformed_module_raises_compile_error():
  with pytest.raises(jit.CompileError, match="LLVM rejected the module"):
    jit.compile_module("define i32 @f( { ret i32 0 }", ["f"])
  bad = "define i32 @f(i32 %x) {\n  %y = add i64 %x, 1\n  ret i32 %y\n}\n"
  with pytest.raises(jit.CompileError) as info:
    jit.compile_module(bad, ["f"])
  assert "add i64" in str(info.value)            # the IR excerpt is part of the message
  assert isinstance(info.value, Exception)


def test_compile_error_is_ourjax_error_when_available():
  try:
    from ourjax.errors import CompileError
  except Exception:  # package mid-construction: the local fallback is a RuntimeError
    assert issubclass(jit.CompileError, RuntimeError)
  else:
    assert jit.CompileError is CompileError


def test_missing_entry_and_unknown_symbol():
  mod = jit.new_module("m")
  _binary_loop(mod, "add", ir.FloatType(), lambda b, x, y: b.fadd(x, y))
  with pytest.raises(jit.CompileError, match="not defined"):
    jit.compile_module(mod, ["nope"])
  cm = jit.compile_module(mod, ["add"])
  with pytest.raises(KeyError):
    cm.address("nope")
  # a call to an external function no process symbol provides is refused (MCJIT would abort)
  mod2 = jit.new_module("ext")
  ext = ir.Function(mod2, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]),
                    "ourjax_no_such_symbol_xyz")
  fn = ir.Function(mod2, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]), "g")
  b = ir.IRBuilder(fn.append_basic_block())
  b.ret(b.call(ext, [fn.args[0]]))
  with pytest.raises(jit.CompileError, match="ourjax_no_such_symbol_xyz"):
    jit.compile_module(mod2, ["g"])


def test_code_lives_as_long_as_the_function():
  mod = jit.new_module("life")
  _binary_loop(mod, "sub", ir.DoubleType(), lambda b, x, y: b.fsub(x, y))
  f = jit.compile_module(mod, ["sub"]).ctypes_function("sub", None, ARGS)
  gc.collect()
  a = np.arange(10.0)
  np.testing.assert_array_equal(_call(f, a, a), np.zeros(10))


def test_concurrent_compiles():
  results, errors = [], []

  def work(k):
    try:
      mod = jit.new_module(f"t{k}")
      _binary_loop(mod, "f", ir.DoubleType(), lambda b, x, y: b.fmul(x, y))
      f = jit.compile_module(mod, ["f"]).ctypes_function("f", None, ARGS)
      a = np.full(33, float(k))
      results.append(np.array_equal(_call(f, a, a), a * a))
    except Exception as e:  # pragma: no cover - reported below
      errors.append(e)

  threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors and results == [True] * 4
