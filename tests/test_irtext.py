"""irtext.function_text prints an llvmlite function exactly as ``str(fn)`` does."""
import llvmlite.ir as ir
import numpy as np
import pytest

from ourjax.backends.llvm import irtext

F32, I1, I32, I64 = ir.FloatType(), ir.IntType(1), ir.IntType(32), ir.IntType(64)


def _function():
  """A function using every instruction kind irtext writes itself, with and without flags,
  alignment, names that need quoting and metadata, and a few it leaves to llvmlite."""
  m = ir.Module("m")
  fty = ir.FunctionType(ir.VoidType(), [F32.as_pointer(), I64, ir.VectorType(F32, 4)])
  fn = ir.Function(m, fty, name="k\"ernel")
  p, n, v = fn.args
  entry = fn.append_basic_block("entry")
  loop = fn.append_basic_block("loop body")
  mid = fn.append_basic_block("mid")
  done = fn.append_basic_block("done")
  b = ir.IRBuilder(entry)
  callee = ir.Function(m, ir.FunctionType(F32, [F32]), name="llvm.sqrt.f32")
  b.cbranch(ir.Constant(I1, 1), loop, mid)
  b.position_at_end(mid)
  b.branch(done)
  b.position_at_end(loop)
  i = b.phi(I64, name="i")
  i.add_incoming(ir.Constant(I64, 0), entry)
  q = b.gep(p, [i], inbounds=True, name="q")
  q2 = b.gep(p, [i])
  x = b.load(q, name="x\\y")
  y = b.load(q2, align=16)
  s = b.fadd(x, y, flags=("fast",))
  s2 = b.fmul(s, ir.Constant(F32, 1.5))
  s3 = b.call(callee, [s2])
  # calls: void, of several arguments (a negative integer, a boolean), with attributes, a
  # tail marker, fast-math flags, a calling convention and a variadic callee
  sink = ir.Function(m, ir.FunctionType(ir.VoidType(), [F32.as_pointer(), I64, I1]),
                     name="sink")
  b.call(sink, [p, ir.Constant(I64, -7), ir.Constant(I1, True)])
  b.call(sink, [p, n, ir.Constant(I1, 0)], attrs=("noinline",))
  b.call(sink, [p, n, ir.Constant(I1, 0)], arg_attrs={0: ("noalias",)})
  b.call(callee, [s2], tail=True)
  b.call(callee, [s2], fastmath=("fast",))
  b.call(callee, [s2], cconv="fastcc")
  printf = ir.Function(m, ir.FunctionType(I32, [I64], var_arg=True), name="printf")
  b.call(printf, [n, n])
  s4 = b.fneg(s3)
  t = b.add(i, ir.Constant(I64, 1), name="")
  t2 = b.mul(t, n)
  t3 = b.udiv(t2, ir.Constant(I64, 3))
  c = b.icmp_signed("<", t3, n)
  c2 = b.fcmp_ordered("<", s4, ir.Constant(F32, 0.0), flags=("nnan",))
  c3 = b.fcmp_unordered("!=", x, y)
  sel = b.select(c2, s4, x)
  cast = b.bitcast(q, I32.as_pointer())
  b.store(b.fptosi(sel, I32), cast)
  st = b.store(sel, q, align=4)
  st.set_metadata("nontemporal", m.add_metadata([ir.Constant(I32, 1)]))
  w = b.fadd(v, v)
  e = b.extract_element(w, ir.Constant(I32, 0))
  b.store(e, q2)
  b.and_(c, c3)
  i.add_incoming(t, loop)
  br = b.cbranch(c, loop, done)
  br.set_weights([3, 1])
  b.position_at_end(done)
  b.ret_void()
  return m, fn


def test_function_text_is_llvmlites():
  m, fn = _function()
  assert irtext.function_text(fn) == str(fn)


def test_function_text_after_llvmlite_printed_it():
  m, fn = _function()
  want = str(fn)
  assert irtext.function_text(fn) == want
  assert str(m).count(want.strip()) == 1


def test_function_text_returning_a_value_and_a_declaration():
  m = ir.Module("m")
  fn = ir.Function(m, ir.FunctionType(I32, [I32, I32]), name="f")
  b = ir.IRBuilder(fn.append_basic_block())
  b.ret(b.sdiv(*fn.args))
  assert irtext.function_text(fn) == str(fn)
  decl = ir.Function(m, ir.FunctionType(I32, [I32]), name="g")
  assert irtext.function_text(decl) == str(decl)


@pytest.mark.parametrize("shape", [(3,), (4, 5)])
def test_compiled_kernels_run_as_before(shape):
  # (the CPU backend prints its kernels with irtext: a program still computes what NumPy does)
  import ourjax
  import ourjax.numpy as jnp
  x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7
  got = ourjax.jit(lambda a: jnp.tanh(a) * 2 + jnp.sum(a))(x)
  want = np.tanh(x.astype(np.float64)) * 2 + x.astype(np.float64).sum()
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
