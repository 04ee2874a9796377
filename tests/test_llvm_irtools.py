"""ourjax/backends/llvm/irtools.py: dropping unused instructions and releasing modules."""
from __future__ import annotations

import llvmlite.ir as ir
from hypothesis import given, settings, strategies as st

from ourjax.backends.cpu import jit
from ourjax.backends.llvm import irtools

I64 = ir.IntType(64)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "mul", "sub", "udiv", "xor"]),
                          st.integers(0, 50), st.integers(1, 9), st.booleans()),
                min_size=1, max_size=12))
def test_drop_unused_keeps_what_is_stored_and_computes_the_same(ops):
  """A chain of arithmetic where some results are stored and others not: the unused ones
  (and what only they used) are dropped, the stored values are unchanged (run natively)."""
  import ctypes
  mod = jit.new_module("t")
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64, I64.as_pointer()]), "f")
  b = ir.IRBuilder(fn.append_basic_block("e"))
  vals, stored = [fn.args[0]], 0
  for op, pick, c, store in ops:
    v = getattr(b, op)(vals[pick % len(vals)], ir.Constant(I64, c))
    vals.append(v)
    if store:
      b.store(v, b.gep(fn.args[1], [ir.Constant(I64, stored)]))
      stored += 1
  b.ret_void()
  before = str(mod)
  dropped = irtools.drop_unused(fn)
  remaining = sum(len(blk.instructions) for blk in fn.blocks)
  assert remaining == before.count("\n  ") - dropped
  outs = []
  for text in (before, str(mod)):
    cm = jit.compile_module(text, ["f"])
    f = cm.ctypes_function("f", None, [ctypes.c_int64, ctypes.c_void_p])
    buf = (ctypes.c_int64 * max(stored, 1))()
    f(123456789, ctypes.addressof(buf))
    outs.append(list(buf))
  assert outs[0] == outs[1]
  # (nothing left unused: every arithmetic result is stored or feeds one that is)
  used = {id(o) for blk in fn.blocks for i in blk.instructions for o in i.operands}
  assert all(id(i) in used for blk in fn.blocks for i in blk.instructions
             if i.opname in ("add", "mul", "sub", "udiv", "xor"))


def test_release_empties_the_module_after_its_text_is_taken():
  mod = jit.new_module("t")
  fn = ir.Function(mod, ir.FunctionType(I64, [I64]), "f")
  b = ir.IRBuilder(fn.append_basic_block("e"))
  b.ret(b.add(fn.args[0], ir.Constant(I64, 1)))
  text = str(mod)
  irtools.release(mod)
  assert not mod.globals
  cm = jit.compile_module(text, ["f"])
  import ctypes
  assert cm.ctypes_function("f", ctypes.c_int64, [ctypes.c_int64])(41) == 42
