"""The HLO IR: shapes, the builder's shape rules and errors, editing, the printer, the verifier."""
import numpy as np
import pytest

from ourjax.lowering.hlo import (Builder, Module, Shape, ShapeError, VerifyError,
                                 scalar_computation, verify)


def S(dtype, *dims):
  return Shape(dtype, dims)


def new(name="m"):
  m = Module(name)
  return m, Builder(m, "main")


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------

def test_shape_text_and_equality():
  assert str(S("f32", 256, 512)) == "f32[256,512]"
  assert str(S("bf16")) == "bf16[]"
  assert str(Shape(np.bool_, (3,))) == "pred[3]"
  assert str(Shape.tuple([S("s32"), S("u8", 2)])) == "(s32[], u8[2])"
  assert S("f32", 2) == Shape(np.float32, [2]) and hash(S("f32", 2)) == hash(Shape("f32", (2,)))
  assert S("f32", 2) != S("f16", 2)
  assert S("s64", 3).dtype == np.dtype(np.longlong)
  with pytest.raises(ShapeError):
    Shape("f32", (-1,))
  with pytest.raises(ShapeError):
    Shape(np.dtype("U3"), ())


# ---------------------------------------------------------------------------------------------
# builder shape rules
# ---------------------------------------------------------------------------------------------

def _shape_cases():
  m, b = new()
  x = b.parameter(S("f32", 2, 3))
  y = b.parameter(S("f32", 3, 4))
  i = b.parameter(S("s32", 5, 1))
  k = b.parameter(S("s32"))
  add = scalar_computation(m, "add", "f32")
  lt = scalar_computation(m, "LT", "f32")
  z = b.constant(0.0, "f32")
  return [
      (lambda: b.add(x, x), "f32[2,3]"),
      (lambda: b.compare(x, x, "LT"), "pred[2,3]"),
      (lambda: b.is_finite(x), "pred[2,3]"),
      (lambda: b.select(b.lt(x, x), x, x), "f32[2,3]"),
      (lambda: b.clamp(z, x, z), "f32[2,3]"),
      (lambda: b.convert(x, "bf16"), "bf16[2,3]"),
      (lambda: b.bitcast_convert(x, "u8"), "u8[2,3,4]"),
      (lambda: b.bitcast_convert(b.bitcast_convert(x, "u8"), "f32"), "f32[2,3]"),
      (lambda: b.broadcast(x, (4, 2, 5, 3), (1, 3)), "f32[4,2,5,3]"),
      (lambda: b.reshape(x, (6, 1)), "f32[6,1]"),
      (lambda: b.transpose(x, (1, 0)), "f32[3,2]"),
      (lambda: b.slice(y, (0, 1), (3, 4), (2, 2)), "f32[2,2]"),
      (lambda: b.dynamic_slice(y, [k, k], (2, 2)), "f32[2,2]"),
      (lambda: b.dynamic_update_slice(y, x, [k, k]), "f32[3,4]"),
      (lambda: b.concatenate([x, x, x], 0), "f32[6,3]"),
      (lambda: b.pad(x, z, [(1, -1, 1), (0, 2, 0)]), "f32[3,5]"),
      (lambda: b.iota(S("s32", 4, 2), 1), "s32[4,2]"),
      (lambda: b.reverse(x, (0,)), "f32[2,3]"),
      (lambda: b.reduce(x, z, (1,), add), "f32[2]"),
      (lambda: b.reduce([x, x], [z, z], (0, 1), _variadic(m)), "(f32[], f32[])"),
      (lambda: b.reduce_window(y, z, add, (2, 2), (1, 2), ((0, 1), (1, 0))), "f32[3,2]"),
      (lambda: b.dot(x, y, (1,), (0,)), "f32[2,4]"),
      (lambda: b.dot(x, x, (), (), (0,), (0,)), "f32[2,3,3]"),
      (lambda: b.dot(b.convert(x, "bf16"), b.convert(y, "bf16"), (1,), (0,),
                     preferred_element_type="f32"), "f32[2,4]"),
      (lambda: b.convolution(b.parameter(S("f32", 1, 4, 5, 5)), b.parameter(S("f32", 6, 2, 3, 3)),
                             (2, 1), ((1, 1), (0, 0)), feature_group_count=2), "f32[1,6,3,3]"),
      (lambda: b.gather(y, i, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                        slice_sizes=(1, 4)), "f32[5,4]"),
      (lambda: b.scatter(y, i, b.parameter(S("f32", 5, 4)), add, update_window_dims=(1,),
                         inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)), "f32[3,4]"),
      (lambda: b.sort(x, 1, lt), "f32[2,3]"),
      (lambda: b.tuple([x, k]), "(f32[2,3], s32[])"),
      (lambda: b.get_tuple_element(b.tuple([x, k]), 1), "s32[]"),
      (lambda: b.real(b.emit("complex", (x, x))), "f32[2,3]"),
      (lambda: b.popcnt(k), "s32[]"),
  ]


def _variadic(m):
  b = Builder(m, "argmax")
  a0, a1, x0, x1 = (b.parameter(S("f32")) for _ in range(4))
  take = b.gt(x0, a0)
  return b.build(b.tuple([b.select(take, x0, a0), b.select(take, x1, a1)]))


def test_shape_rules():
  for build, want in _shape_cases():
    assert str(build().shape) == want


@pytest.mark.parametrize("build, message", [
    (lambda b, x, y: b.add(x, y), "operand shapes f32[2,3] and f32[3,4] differ"),
    (lambda b, x, y: b.add(x, b.convert(x, "f16")), "element types differ"),
    (lambda b, x, y: b.and_(x, x), "unsupported element type f32"),
    (lambda b, x, y: b.broadcast(x, (3, 2), (1, 0)), "must increase"),
    (lambda b, x, y: b.broadcast(x, (2, 4), (0, 1)), "does not fit output dimension 1"),
    (lambda b, x, y: b.reshape(x, (5,)), "cannot reshape f32[2,3] (6 elements)"),
    (lambda b, x, y: b.transpose(x, (0, 0)), "is not a permutation"),
    (lambda b, x, y: b.slice(x, (0, 0), (3, 3)), "bad slice [0:3:1] of dimension 0"),
    (lambda b, x, y: b.dot(x, y, (0,), (0,)), "contracting dims lhs 0 and rhs 0 differ"),
    (lambda b, x, y: b.dot(x, b.convert(y, "f16"), (1,), (0,)), "give preferred_element_type"),
    (lambda b, x, y: b.concatenate([x, y], 0), "differ outside dimension 0"),
    (lambda b, x, y: b.pad(x, b.constant(0.0), [(-3, 0, 0), (0, 0, 0)]), "negative size"),
    (lambda b, x, y: b.pad(x, b.constant(0), [(0, 0, 0), (0, 0, 0)]), "padding value"),
    (lambda b, x, y: b.bitcast_convert(b.convert(x, "u8"), "f32"), "needs a last dimension of 4"),
    (lambda b, x, y: b.compare(x, x, "LESS"), "direction must be one of"),
    (lambda b, x, y: b.select(x, x, x), "predicate must be pred"),
    (lambda b, x, y: b.iota(S("f32", 2), 1), "iota_dimension 1 out of range"),
    (lambda b, x, y: b.reverse(x, (2,)), "out of range for rank 2"),
    (lambda b, x, y: b.dynamic_slice(x, [b.constant(0)], (1, 1)), "needs 2 scalar start"),
    (lambda b, x, y: b.get_tuple_element(x, 0), "needs a tuple operand"),
])
def test_shape_errors(build, message):
  m, b = new()
  x = b.parameter(S("f32", 2, 3))
  y = b.parameter(S("f32", 3, 4))
  with pytest.raises(ShapeError) as e:
    build(b, x, y)
  assert message in str(e.value)
  assert "[operands:" in str(e.value) or "operands" in str(e.value)


def test_sub_computation_signature_errors():
  m, b = new()
  x = b.parameter(S("f32", 2, 3))
  with pytest.raises(ShapeError, match="reducer %add_s32 must take scalars"):
    b.reduce(x, b.constant(0.0), (0,), scalar_computation(m, "add", "s32"))
  with pytest.raises(ShapeError, match="init value s32\\[\\] must be a scalar"):
    b.reduce(x, b.constant(0), (0,), scalar_computation(m, "add", "f32"))
  with pytest.raises(ShapeError, match="comparator .* must return \\(pred\\[\\]\\)"):
    b.sort(x, 0, scalar_computation(m, "add", "f32"))
  cb = Builder(m, "cond")
  cp = cb.parameter(S("s32"))
  cond = cb.build(cp)
  with pytest.raises(ShapeError, match="must return pred\\[\\]"):
    b.while_loop(b.constant(0), cond, cond)
  bb = Builder(m, "branch")
  bb.build(bb.negate(bb.parameter(S("f32"))))
  with pytest.raises(ShapeError, match="branch %branch must take f32\\[2,3\\]"):
    b.conditional(b.constant(True), [x, x], [bb.computation, bb.computation])
  with pytest.raises(ShapeError, match="do not match %branch's parameters"):
    b.fusion([x], bb.computation)
  with pytest.raises(ShapeError, match="feature_group_count"):
    b.convolution(b.parameter(S("f32", 1, 3, 4, 4)), b.parameter(S("f32", 2, 2, 1, 1)),
                  (1, 1), ((0, 0), (0, 0)))
  with pytest.raises(ShapeError, match="start_index_map"):
    b.gather(x, b.parameter(S("s32", 4, 2)), offset_dims=(1,), collapsed_slice_dims=(0,),
             start_index_map=(0,), slice_sizes=(1, 3))


# ---------------------------------------------------------------------------------------------
# editing
# ---------------------------------------------------------------------------------------------

def test_users_and_replace_all_uses():
  m, b = new()
  x = b.parameter(S("f32", 3))
  n = b.negate(x)
  a = b.add(n, n)
  c = b.multiply(a, n)
  comp = b.build(c)
  assert n.users == [a, c] and a.users == [c]
  e = b.exp(x)
  comp.replace_all_uses(n, e)
  assert a.operands == [e, e] and c.operands == [a, e] and n.users == []
  assert set(e.users) == {a, c}
  comp.remove(n)
  assert n not in comp.instructions and x.users == [e]
  with pytest.raises(Exception, match="still used"):
    comp.remove(e)
  with pytest.raises(Exception, match="has shape"):
    comp.replace_all_uses(e, b.reshape(e, (3, 1)))
  comp.replace_all_uses(c, a)
  assert comp.root is a
  m.entry = comp
  with pytest.raises(VerifyError, match="not defined before use"):
    verify(m)  # e was appended after its users
  comp.topological_sort()
  verify(m)


def test_clone_is_independent():
  m, b = new()
  x = b.parameter(S("f32", 3))
  m.entry = b.build(b.reduce(b.negate(x), b.constant(0.0), (0,),
                             scalar_computation(m, "add", "f32")))
  c = m.clone()
  verify(c)
  assert str(c) == str(m)
  c.entry.root.operands[0].opcode = "abs"
  assert "negate" in str(m) and "abs" not in str(m)
  assert c.entry.root.attrs["to_apply"] is not m.entry.root.attrs["to_apply"]


def test_unique_names():
  m, b = new()
  x = b.parameter(S("f32"), name="x")
  y = b.parameter(S("f32"), name="x")
  assert (x.name, y.name) == ("x", "x.1")
  assert [b.add(x, y).name, b.add(x, y).name] == ["add.1", "add.2"]


# ---------------------------------------------------------------------------------------------
# printer
# ---------------------------------------------------------------------------------------------

def test_printer_module_text():
  m = Module("jit_f")
  b = Builder(m, "main")
  p0 = b.parameter(S("f32", 256, 512))
  p1 = b.parameter(S("f32", 256, 512))
  add = b.add(p0, p1)
  red = b.reduce(add, b.constant(0.0, "f32"), (1,), scalar_computation(m, "add", "f32", "sum"))
  m.entry = b.build(b.tuple([add, red]))
  assert str(m) == """HloModule jit_f

%sum (lhs: f32[], rhs: f32[]) -> f32[] {
  %lhs = f32[] parameter(0)
  %rhs = f32[] parameter(1)
  ROOT %add.2 = f32[] add(f32[] %lhs, f32[] %rhs)
}

ENTRY %main (p0: f32[256,512], p1: f32[256,512]) -> (f32[256,512], f32[256]) {
  %p0 = f32[256,512] parameter(0)
  %p1 = f32[256,512] parameter(1)
  %add.1 = f32[256,512] add(f32[256,512] %p0, f32[256,512] %p1)
  %constant.1 = f32[] constant(0.0)
  %reduce.1 = f32[256] reduce(f32[256,512] %add.1, f32[] %constant.1), dimensions={1}, to_apply=%sum
  ROOT %tuple.1 = (f32[256,512], f32[256]) tuple(f32[256,512] %add.1, f32[256] %reduce.1)
}
"""


def test_printer_fusion_and_attributes():
  m = Module("fused")
  fb = Builder(m, "fused_computation")
  a, c = fb.parameter(S("f32", 4, 8), "a"), fb.parameter(S("f32", 4, 8), "c")
  fb.build(fb.multiply(fb.add(a, c), c))
  b = Builder(m, "main")
  p0, p1 = b.parameter(S("f32", 4, 8)), b.parameter(S("f32", 4, 8))
  f = b.fusion([p0, p1], fb.computation, "kLoop")
  m.entry = b.build(f)
  text = m.to_string(operand_shapes=False)
  assert "%fusion.1 = f32[4,8] fusion(%p0, %p1), kind=kLoop, calls=%fused_computation" in text
  assert text.index("%fused_computation (") < text.index("ENTRY %main")
  verify(m)

  m2, b = new()
  x = b.parameter(S("f32", 1, 5, 5, 2))
  w = b.parameter(S("f32", 3, 3, 2, 4))
  conv = b.convolution(x, w, (1, 2), ((1, 1), (0, -1)), rhs_dilation=(2, 1),
                       dimension_numbers=((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)))
  assert ("window={size=3x3 stride=1x2 pad=1_1x0_-1 rhs_dilate=2x1}, "
          "dim_labels=b01f_01io->b01f") in conv.to_string()
  sl = b.slice(x, (0, 1, 0, 0), (1, 5, 5, 2), (1, 2, 1, 1))
  assert "slice={[0:1], [1:5:2], [0:5], [0:2]}" in sl.to_string()
  pd = b.pad(b.parameter(S("f32", 3)), b.constant(0.0), [(1, -1, 2)])
  assert "padding=1_-1_2" in pd.to_string()
  d = b.dot(b.parameter(S("f32", 2, 3, 4)), b.parameter(S("f32", 2, 4, 5)), (2,), (1,), (0,), (0,))
  assert ("lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
          "rhs_contracting_dims={1}") in d.to_string()
  c = b.constant(np.array([[1, 2], [3, 4]], np.int32))
  assert "s32[2,2] constant({ {1, 2}, {3, 4} })" in c.to_string()
  assert "constant(-inf)" in b.constant(-np.inf, "f32").to_string()
  assert "constant(true)" in b.constant(True).to_string()
  assert "constant({...})" in b.constant(np.zeros(100, np.float32)).to_string()
  assert "direction=LT, type=TOTALORDER" in b.compare(x, x, "LT", total_order=True).to_string()


# ---------------------------------------------------------------------------------------------
# verifier
# ---------------------------------------------------------------------------------------------

def _valid():
  m, b = new()
  x = b.parameter(S("f32", 2, 3))
  n = b.negate(x)
  m.entry = b.build(b.reduce(n, b.constant(0.0), (1,), scalar_computation(m, "add", "f32")))
  return m, n


def test_verify_accepts_valid():
  m, _ = _valid()
  verify(m)


def test_verify_catches_wrong_shape():
  m, n = _valid()
  n.shape = S("f32", 3, 2)
  with pytest.raises(VerifyError, match=r"%negate.1 \(negate\) in %main: .*operand shapes|"
                     r"%negate.1 \(negate\) in %main: shape f32\[3,2\]|%reduce"):
    verify(m)


def test_verify_catches_use_before_def_and_dangling_users():
  m, n = _valid()
  comp = m.entry
  comp.instructions.remove(n)
  comp.instructions.append(n)
  with pytest.raises(VerifyError, match="is not defined before use"):
    verify(m)
  m, n = _valid()
  n.users.append(m.entry.parameters[0])
  with pytest.raises(VerifyError, match="dangling user %p0"):
    verify(m)
  m, n = _valid()
  n.operands[0].users.clear()
  with pytest.raises(VerifyError, match="missing from the users of its operand %p0"):
    verify(m)


def test_verify_catches_bad_sub_computation():
  m, n = _valid()
  reducer = m.entry.root.attrs["to_apply"]
  b = Builder.into(reducer)
  reducer.set_root(b.convert(reducer.root, "f16"))
  with pytest.raises(VerifyError, match=r"%reduce.1 \(reduce\) in %main: reduce: reducer "
                     r"%add_f32 must return \(f32\[\]\), returns f16\[\]"):
    verify(m)


def test_verify_catches_module_level_problems():
  m = Module("empty")
  with pytest.raises(VerifyError, match="no entry"):
    verify(m)
  m, n = _valid()
  n.name = "p0"
  with pytest.raises(VerifyError, match="duplicate instruction name %p0"):
    verify(m)
  m, n = _valid()
  other = Module("other")
  stray = scalar_computation(other, "add", "f32")
  m.entry.root.attrs["to_apply"] = stray
  with pytest.raises(VerifyError, match="not in the module"):
    verify(m)
  m, n = _valid()
  const = m.entry.root.operands[1]
  object.__setattr__(const, "attrs", dict(const.attrs, value=np.zeros((), np.float32)))
  with pytest.raises(VerifyError, match="read-only"):
    verify(m)
