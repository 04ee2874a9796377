"""The HLO passes: each rewrite (text before/after and bitwise-equal results), constant folding,
CSE, DCE, the pipeline, and the main guard: random programs give bitwise the same results on the
reference executor before and after ``optimize``."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_programs import assert_bitwise_equal, programs, random_array
from ourjax.backends import reference
from ourjax.lowering import hlo, pipeline
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation, verify
from ourjax.lowering.passes import constant_folding, cse, dce, simplify


def S(dtype, *dims):
  return Shape(dtype, dims)


def module(build, *shapes):
  m = Module("t")
  b = Builder(m, "main")
  ps = [b.parameter(s) for s in shapes]
  m.entry = b.build(build(b, *ps))
  verify(m)
  return m


def entry_ops(m):
  return [i.opcode for i in m.entry.instructions if i.opcode not in ("parameter",)]


def args_for(m, seed=0):
  rng = np.random.default_rng(seed)
  return [random_array(rng, p.dtype, p.dims) for p in m.entry.parameters]


def check_same_results(before, after, seeds=range(4)):
  for seed in seeds:
    args = args_for(before, seed)
    for a, b in zip(reference.compile(before)(*args), reference.compile(after)(*args)):
      assert_bitwise_equal(a, b)


def simplified(build, *shapes, fast_math=False, run_dce=True):
  """(original, simplified) modules; checks that the results agree bitwise."""
  m = module(build, *shapes)
  m0 = m.clone()
  simplify.run(m, fast_math=fast_math)
  if run_dce:
    dce.run(m)
  verify(m)
  if not fast_math:
    check_same_results(m0, m)
  return m0, m


F8 = S("f32", 8)


def full(b, v, shape=F8):
  return b.full(v, shape)


# ---------------------------------------------------------------------------------------------
# simplify: one test per rule
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("build, ops_after", [
    (lambda b, x: b.multiply(x, full(b, 1.0)), []),
    (lambda b, x: b.multiply(b.constant(np.ones(8, np.float32)), x), []),
    (lambda b, x: b.multiply(x, full(b, -1.0)), ["negate"]),
    (lambda b, x: b.add(x, full(b, -0.0)), []),
    (lambda b, x: b.add(full(b, 0.0), x), ["constant", "broadcast", "add"]),   # -0+0 is +0
    (lambda b, x: b.subtract(x, full(b, 0.0)), []),
    (lambda b, x: b.subtract(x, full(b, -0.0)), ["constant", "broadcast", "subtract"]),
    (lambda b, x: b.subtract(full(b, -0.0), x), ["negate"]),
    (lambda b, x: b.subtract(full(b, 0.0), x), ["constant", "broadcast", "subtract"]),
    (lambda b, x: b.multiply(x, full(b, 0.0)), ["constant", "broadcast", "multiply"]),  # NaN*0
    (lambda b, x: b.divide(x, full(b, 1.0)), []),
    (lambda b, x: b.divide(x, full(b, 4.0)), ["constant", "broadcast", "multiply"]),
    (lambda b, x: b.divide(x, full(b, 3.0)), ["constant", "broadcast", "divide"]),
    (lambda b, x: b.negate(b.negate(x)), []),
    (lambda b, x: b.power(x, full(b, 1.0)), []),
    (lambda b, x: b.power(x, full(b, 0.0)), ["constant", "broadcast"]),
    (lambda b, x: b.power(x, full(b, 2.0)), ["multiply"]),
    (lambda b, x: b.power(x, full(b, 0.5)), ["constant", "broadcast", "power"]),
    (lambda b, x: b.maximum(x, x), []),
    (lambda b, x: b.abs(b.abs(x)), ["abs"]),
    (lambda b, x: b.abs(b.negate(x)), ["abs"]),
    (lambda b, x: b.select(full(b, True, S("pred", 8)), x, b.negate(x)), []),
    (lambda b, x: b.select(b.constant(np.zeros(8, bool)), b.negate(x), x), []),
    (lambda b, x: b.select(b.lt(x, x), x, x), []),
    (lambda b, x: b.select(b.not_(b.lt(x, full(b, 1.0))), x, b.exp(x)),
     ["constant", "broadcast", "compare", "exponential", "select"]),
    (lambda b, x: b.convert(x, "f32"), []),
    (lambda b, x: b.convert(b.convert(x, "f64"), "f32"), []),
    (lambda b, x: b.convert(b.convert(x, "f16"), "f32"), ["convert", "convert"]),
    (lambda b, x: b.reshape(x, (8,)), []),
    (lambda b, x: b.reshape(b.reshape(x, (2, 4)), (4, 2)), ["reshape"]),
    (lambda b, x: b.transpose(b.reshape(x, (2, 4)), (0, 1)), ["reshape"]),
    (lambda b, x: b.broadcast(x, (8,), (0,)), []),
    (lambda b, x: b.slice(x, (0,), (8,), (1,)), []),
    (lambda b, x: b.slice(b.slice(x, (1,), (8,), (2,)), (1,), (4,), (2,)), ["slice"]),
    (lambda b, x: b.reverse(b.reverse(x, (0,)), (0,)), []),
    (lambda b, x: b.pad(x, b.constant(0.0), [(0, 0, 0)]), []),
    (lambda b, x: b.concatenate([x], 0), []),
    (lambda b, x: b.get_tuple_element(b.tuple([b.negate(x), x]), 1), []),
    (lambda b, x: b.dynamic_slice(x, [b.constant(9)], (3,)), ["slice"]),
])
def test_simplify_rule(build, ops_after):
  _, m = simplified(build, F8)
  assert entry_ops(m) == ops_after, m.to_string()


@pytest.mark.parametrize("build, ops_after", [
    (lambda b, x: b.multiply(x, b.full(0, x.shape)), ["constant", "broadcast"]),
    (lambda b, x: b.subtract(x, x), ["constant", "broadcast"]),
    (lambda b, x: b.add(b.full(0, x.shape), x), []),
    (lambda b, x: b.subtract(b.full(0, x.shape), x), ["negate"]),
    (lambda b, x: b.and_(x, b.full(-1, x.shape)), []),
    (lambda b, x: b.or_(x, b.full(0, x.shape)), []),
    (lambda b, x: b.xor(b.full(0, x.shape), x), []),
    (lambda b, x: b.and_(x, b.full(0, x.shape)), ["constant", "broadcast"]),
    (lambda b, x: b.divide(x, b.full(2, x.shape)), ["constant", "broadcast", "divide"]),
    (lambda b, x: b.power(x, b.full(2, x.shape)), ["multiply"]),
    (lambda b, x: b.not_(b.not_(x)), []),
    (lambda b, x: b.convert(b.convert(x, "f64"), "s8"), ["convert", "convert"]),  # saturates
    (lambda b, x: b.convert(b.convert(x, "s16"), "u8"), ["convert", "convert"]),  # lossy
    (lambda b, x: b.convert(b.convert(x, "s64"), "u8"), ["convert"]),
    (lambda b, x: b.convert(b.convert(x, "f64"), "s64"), ["convert"]),
    (lambda b, x: b.convert(b.convert(x, "f64"), "bf16"), ["convert"]),
])
def test_simplify_integer_rules(build, ops_after):
  _, m = simplified(build, S("s32", 6))
  assert entry_ops(m) == ops_after, m.to_string()


def test_unsigned_abs_and_negate():
  _, m = simplified(lambda b, x: b.abs(b.negate(x)), S("u8", 5))
  assert entry_ops(m) == ["negate"]


def test_fast_math_rules():
  for build, op in [(lambda b, x: b.add(x, full(b, 0.0)), None),
                    (lambda b, x: b.power(x, full(b, 0.5)), "sqrt"),
                    (lambda b, x: b.power(b.convert(x, "f64"), b.full(2.0, S("f64", 8))),
                     "multiply")]:
    _, strict = simplified(build, F8)
    _, fast = simplified(build, F8, fast_math=True)
    assert strict.to_string() != fast.to_string()
    if op:
      assert op in entry_ops(fast)


def test_division_by_power_of_two_is_exact_in_narrow_types():
  for dt, c in [("f16", 2.0 ** -14), ("bf16", 2.0 ** 100), ("f32", 2.0 ** 127), ("f16", -0.5)]:
    shape = S(dt, 64)
    _, m = simplified(lambda b, x: b.divide(x, b.full(c, shape)), shape)
    assert "multiply" in entry_ops(m), dt
  # 1/2^-24 = 2^24 is not a float16: kept as a division
  shape = S("f16", 4)
  _, m = simplified(lambda b, x: b.divide(x, b.full(2.0 ** -24, shape)), shape)
  assert "divide" in entry_ops(m)


def test_sink_broadcast_below_elementwise():
  def build(b, s, t):
    return b.multiply(b.broadcast(s, (4, 3), ()), b.exp(b.broadcast(t, (4, 3), ())))
  _, m = simplified(build, S("f32"), S("f32"))
  assert entry_ops(m) == ["exponential", "multiply", "broadcast"]
  assert "f32[] multiply(" in m.to_string()


def test_sink_reshape_below_elementwise():
  # mean(x, keepdims=True)-style: [4] -> [4,1], scaled, back to [4]: the reshapes meet and cancel
  def build(b, s, t):
    k = b.multiply(b.reshape(s, (4, 1)), b.full(0.25, S("f32", 4, 1)))
    k = b.add(k, b.broadcast(b.reshape(t, (1, 1)), (4, 1), (0, 1)))
    return b.sqrt(b.reshape(k, (4,)))
  _, m = simplified(build, S("f32", 4), S("f32"))
  assert "reshape" not in entry_ops(m)
  assert "f32[4] multiply(" in m.to_string() and "f32[4] add(" in m.to_string()
  # operands reshaped from different shapes stay as they are
  _, m = simplified(lambda b, x, y: b.add(b.reshape(x, (2, 3)), b.reshape(y, (2, 3))),
                    S("f32", 6), S("f32", 3, 2))
  assert entry_ops(m).count("reshape") == 2


def test_sink_reshape_past_broadcasts_along_kept_dimensions():
  # a convolution's GEMM result [N*H*W, C] -> [N, H, W, C], then a per-channel scale, shift and
  # relu: the reshape moves below them (bitwise the same results), so they can be the GEMM's
  # epilogue
  def build(b, y, scale, shift):
    r = b.reshape(y, (2, 3, 4, 5))
    z = b.add(b.multiply(r, b.broadcast(scale, (2, 3, 4, 5), (3,))),
              b.broadcast(shift, (2, 3, 4, 5), (3,)))
    return b.maximum(z, b.full(0.0, S("f32", 2, 3, 4, 5)))
  _, m = simplified(build, S("f32", 24, 5), S("f32", 5), S("f32", 5))
  assert m.entry.root.opcode == "reshape"
  assert "f32[24,5] multiply(" in m.to_string() and "f32[24,5] maximum(" in m.to_string()
  # a broadcast along a dimension the reshape splits or merges keeps the reshape where it is
  def split(b, y, v):
    return b.add(b.reshape(y, (4, 6)), b.broadcast(v, (4, 6), (1,)))
  _, m = simplified(split, S("f32", 24), S("f32", 6))
  assert m.entry.root.opcode == "add"


@settings(max_examples=30, deadline=None)
@given(nb=st.integers(0, 2), nl=st.integers(1, 2), nr=st.integers(1, 2), seed=st.integers(0, 99))
def test_transpose_of_a_dot_swaps_its_operands(nb, nl, nr, seed):
  """transpose(dot(a, b)) that swaps the free dimensions -> dot(b, a): no transpose left, the
  same numbers (up to the order of the sums)."""
  rng = np.random.default_rng(seed)
  bs = [int(v) for v in rng.integers(1, 4, nb)]
  ls, rs, k = [int(v) for v in rng.integers(1, 5, nl)], [int(v) for v in rng.integers(1, 5, nr)], 3

  def build(b, x, y):
    d = b.dot(x, y, lhs_batch_dims=tuple(range(nb)), rhs_batch_dims=tuple(range(nb)),
              lhs_contracting_dims=(nb + nl,), rhs_contracting_dims=(nb,))
    perm = tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr)) + tuple(range(nb, nb + nl))
    return b.transpose(d, perm)
  m = module(build, S("f32", *bs, *ls, k), S("f32", *bs, k, *rs))
  m0 = m.clone()
  simplify.run(m)
  dce.run(m)
  verify(m)
  assert entry_ops(m) == ["dot"]
  # finite values: with infinities the order of the sums decides between inf and NaN
  args = [rng.standard_normal(p.dims).astype(np.float32) for p in m0.entry.parameters]
  np.testing.assert_allclose(reference.compile(m)(*args)[0], reference.compile(m0)(*args)[0],
                             rtol=1e-5, atol=1e-5)


def test_broadcast_rules():
  _, m = simplified(lambda b, s: b.broadcast(b.broadcast(s, (3,), (0,)), (2, 3, 4), (1,)),
                    S("f32", 3))
  assert entry_ops(m) == ["broadcast"] and m.entry.root.attrs["dimensions"] == (1,)
  _, m = simplified(lambda b, s: b.transpose(b.reshape(b.broadcast(s, (2, 6), ()), (3, 4)),
                                             (1, 0)), S("f32"))
  assert entry_ops(m) == ["broadcast"] and m.entry.root.dims == (4, 3)


def test_transpose_and_slice_composition():
  _, m = simplified(lambda b, x: b.transpose(b.transpose(x, (1, 2, 0)), (2, 0, 1)),
                    S("f32", 2, 3, 4))
  assert entry_ops(m) == []
  _, m = simplified(lambda b, x: b.transpose(b.transpose(x, (1, 2, 0)), (1, 0, 2)),
                    S("f32", 2, 3, 4))
  assert entry_ops(m) == ["transpose"] and m.entry.root.attrs["dimensions"] == (2, 1, 0)
  _, m = simplified(lambda b, x: b.slice(b.slice(x, (1, 0), (9, 5), (2, 1)), (1, 1), (4, 4),
                                         (2, 2)), S("f32", 10, 5))
  root = m.entry.root
  assert entry_ops(m) == ["slice"]
  assert (root.attrs["start_indices"], root.attrs["strides"]) == ((3, 1), (4, 2))


def test_dot_transpose_folding():
  def build(b, x, y):
    return b.dot(b.transpose(x, (1, 0)), y, (1,), (0,))  # x^T @ y
  m0, m = simplified(build, S("f32", 5, 3), S("f32", 5, 4))
  assert entry_ops(m) == ["dot"]
  assert m.entry.root.attrs["lhs_contracting_dims"] == (0,)
  # a transpose that would reorder the free dims is not folded
  def build2(b, x, y):
    return b.dot(b.transpose(x, (2, 1, 0)), y, (2,), (0,))
  _, m2 = simplified(build2, S("f32", 5, 3, 2), S("f32", 5, 4))
  assert "transpose" in entry_ops(m2)


@pytest.mark.parametrize("lhs, rhs, dims, pet", [
    ((3, 1), (1, 4), ((1,), (0,), (), ()), None),
    ((2, 3, 1), (2, 1, 4), ((2,), (1,), (0,), (0,)), None),
    ((3,), (4,), ((), (), (), ()), None),
    ((1, 3), (4, 1), ((0,), (1,), (), ()), "f32"),
])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "s32"])
def test_dot_with_unit_contraction_becomes_multiply(lhs, rhs, dims, pet, dtype):
  def build(b, x, y):
    return b.dot(x, y, *dims, preferred_element_type=pet)
  m0, m = simplified(build, S(dtype, *lhs), S(dtype, *rhs))
  assert "dot" not in entry_ops(m) and "multiply" in entry_ops(m)


def test_select_and_sink_keep_nan_and_signed_zero():
  x = np.array([np.nan, -0.0, 0.0, np.inf, -1.0, 5.0, 1e-40, -np.inf], np.float32)
  for build in [lambda b, v: b.add(v, full(b, -0.0)), lambda b, v: b.multiply(full(b, 1.0), v),
                lambda b, v: b.divide(v, full(b, 0.5)), lambda b, v: b.power(v, full(b, 2.0))]:
    m0, m = simplified(build, F8)
    assert_bitwise_equal(reference.compile(m0)(x)[0], reference.compile(m)(x)[0])


def test_simplify_inside_sub_computations_and_notes():
  m = Module("sub")
  rb = Builder(m, "red")
  a, v = rb.parameter(S("f32")), rb.parameter(S("f32"))
  rb.build(rb.add(a, rb.multiply(v, rb.constant(1.0, "f32"))))
  b = Builder(m, "main")
  x = b.parameter(S("f32", 4))
  m.entry = b.build(b.reduce(x, b.constant(0.0, "f32"), (0,), rb.computation))
  assert simplify.run(m)
  assert "multiply" not in rb.computation.to_string()
  assert any("x*1 -> x" in n for n in m.notes)
  assert not simplify.run(m)  # fixed point


# ---------------------------------------------------------------------------------------------
# constant folding
# ---------------------------------------------------------------------------------------------

def test_constant_folding():
  def build(b, x):
    c = b.add(b.constant(np.arange(4, dtype=np.int32)), b.constant(np.int32(10)).__class__ and
              b.constant(np.full(4, 10, np.int32)))
    d = b.divide(c, b.constant(np.array([1, 0, 3, -1], np.int32)))
    return b.add(x, d)
  m = module(build, S("s32", 4))
  m0 = m.clone()
  assert constant_folding.run(m) and dce.run(m)
  assert entry_ops(m) == ["constant", "add"]
  assert m.entry.root.operands[1].value.tolist() == [10, -1, 4, -13]  # x/0 is -1
  check_same_results(m0, m)
  assert not constant_folding.run(m)


def test_constant_folding_leaves_splats_iotas_and_big_results(monkeypatch):
  def build(b, x):
    bc = b.broadcast(b.constant(2.0, "f32"), (4,), ())
    io = b.iota(S("f32", 4), 0)
    big = b.negate(b.constant(np.zeros(4, np.float32)))
    return b.add(b.add(x, bc), b.add(io, big))
  monkeypatch.setattr(constant_folding, "MAX_ELEMENTS", 3)
  m = module(build, S("f32", 4))
  assert not constant_folding.run(m)
  monkeypatch.setattr(constant_folding, "MAX_ELEMENTS", 1 << 16)
  assert constant_folding.run(m)
  assert "negate" not in entry_ops(m) and "iota" in entry_ops(m) and "broadcast" in entry_ops(m)


def test_constant_folding_through_sub_computations():
  def build(b, x):
    r = b.reduce(b.constant(np.arange(5, dtype=np.float32)), b.constant(0.0, "f32"), (0,),
                 scalar_computation(b.module, "add", "f32"))
    return b.multiply(x, r)
  m = module(build, S("f32"))
  constant_folding.run(m)
  dce.run(m)
  assert entry_ops(m) == ["constant", "multiply"] and len(m.computations) == 1


# ---------------------------------------------------------------------------------------------
# CSE and DCE
# ---------------------------------------------------------------------------------------------

def test_cse_merges_structurally_equal_instructions():
  def build(b, x, y):
    a1, a2 = b.add(x, y), b.add(y, x)               # commutative
    s1, s2 = b.subtract(x, y), b.subtract(y, x)     # not
    c1, c2 = b.constant(1.5, "f32"), b.constant(1.5, "f32")
    z1, z2 = b.constant(0.0, "f32"), b.constant(-0.0, "f32")  # different bits
    t1, t2 = b.transpose(x, (1, 0)), b.transpose(x, (1, 0))
    return b.tuple([a1, a2, s1, s2, c1, c2, z1, z2, t1, t2])
  m = module(build, S("f32", 2, 2), S("f32", 2, 2))
  m0 = m.clone()
  assert cse.run(m)
  dce.run(m)
  ops = entry_ops(m)
  assert ops.count("add") == 1 and ops.count("subtract") == 2 and ops.count("transpose") == 1
  assert ops.count("constant") == 3
  check_same_results(m0, m)


def test_cse_merges_identical_sub_computations():
  m = Module("subs")
  b = Builder(m, "main")
  x = b.parameter(S("f32", 3, 4))
  r1 = b.reduce(x, b.constant(0.0, "f32"), (1,), scalar_computation(m, "add", "f32"))
  r2 = b.reduce(x, b.constant(0.0, "f32"), (1,), scalar_computation(m, "add", "f32"))
  r3 = b.reduce(x, b.constant(0.0, "f32"), (1,), scalar_computation(m, "maximum", "f32"))
  m.entry = b.build(b.tuple([r1, r2, r3]))
  assert cse.run(m) and dce.run(m)
  verify(m)
  assert entry_ops(m).count("reduce") == 2 and len(m.computations) == 3


def test_dce():
  m = Module("dead")
  b = Builder(m, "main")
  x = b.parameter(S("f32", 3))
  unused = b.parameter(S("f32", 3))
  dead = b.exp(b.negate(x))
  b.reduce(dead, b.constant(0.0, "f32"), (0,), scalar_computation(m, "add", "f32"))
  m.entry = b.build(b.abs(x))
  assert dce.run(m)
  assert entry_ops(m) == ["abs"] and len(m.entry.parameters) == 2 and len(m.computations) == 1
  assert not dce.run(m)
  assert unused.parent is m.entry


# ---------------------------------------------------------------------------------------------
# pipeline
# ---------------------------------------------------------------------------------------------

def _pipeline_module():
  def build(b, x):
    y = b.multiply(x, full(b, 1.0, x.shape))
    z = b.add(y, b.multiply(x, full(b, 1.0, x.shape)))
    t = b.transpose(b.transpose(z, (1, 0)), (1, 0))
    return b.tuple([t, b.divide(t, full(b, 2.0, x.shape))])
  return module(build, S("f32", 2, 3))


def test_optimize_reaches_fixed_point_and_records_notes():
  m = _pipeline_module()
  m0 = m.clone()
  out = pipeline.optimize(m, late_passes=[])     # the fixed-point passes only (no fusion)
  assert out is m
  assert entry_ops(m) == ["add", "constant", "broadcast", "multiply", "tuple"]
  check_same_results(m0, m)
  assert any(n.startswith("simplify:") for n in m.notes)
  text = m.to_string()
  pipeline.optimize(m, late_passes=[])
  assert m.to_string() == text


def test_optimize_dumps(tmp_path, monkeypatch):
  monkeypatch.setenv("OURJAX_DUMP", str(tmp_path))
  m = _pipeline_module()
  pipeline.optimize(m)
  files = sorted(os.listdir(tmp_path))
  assert files[0] == "t.00-input.txt" and files[1] == "t.01-simplify.txt"
  assert all(f.startswith("t.") and f.endswith(".txt") for f in files)
  first = (tmp_path / files[1]).read_text()
  assert "ENTRY %main" in first and "# notes" in first and "x*1 -> x" in first


def test_verifier_runs_after_each_pass():
  def broken(module):
    module.entry.root.shape = S("f32", 1)
    return True
  m = _pipeline_module()
  with pytest.raises(pipeline.PassError, match="after pass broken"):
    pipeline.optimize(m, passes=[("broken", broken)], check=True)
  # without per-pass checks (users' default) the module is still verified once, at the end
  m = _pipeline_module()
  with pytest.raises(pipeline.PassError, match="after the passes"):
    pipeline.optimize(m, passes=[("broken", broken)], late_passes=[], check=False)


def test_verifier_runs_once_without_per_pass_checks(monkeypatch):
  # users' default: the module is verified once, after the passes (not also as it comes in)
  calls = []
  real = hlo.verify
  monkeypatch.setattr(hlo, "verify", lambda m: (calls.append(1), real(m))[1])
  pipeline.optimize(_pipeline_module(), check=False)
  assert len(calls) == 1
  calls.clear()
  runs = []
  passes = [("nop", lambda m: runs.append(1) or False)]
  pipeline.optimize(_pipeline_module(), passes=passes, late_passes=[], check=True)
  assert len(calls) == 1 + len(runs) and runs


def test_late_passes_run_once_after_the_fixed_point(monkeypatch):
  seen = []

  def late(module):
    seen.append(entry_ops(module))
    return False
  monkeypatch.setattr(pipeline, "LATE_PASSES", [("fusion", late)])
  m = _pipeline_module()
  pipeline.optimize(m)
  assert seen == [entry_ops(m)] and "transpose" not in seen[0]


# ---------------------------------------------------------------------------------------------
# the main guard
# ---------------------------------------------------------------------------------------------

@settings(max_examples=int(os.environ.get("OURJAX_HLO_GUARD_EXAMPLES", "200")), deadline=None)
@given(programs())
def test_optimize_preserves_reference_results_bitwise(prog):
  m, args = prog
  want = reference.compile(m)(*args)
  opt = pipeline.optimize(m.clone())
  got = reference.compile(opt)(*args)
  assert len(got) == len(want)
  for i, (a, b) in enumerate(zip(want, got)):
    assert_bitwise_equal(a, b, f"output {i} of\n{m}\noptimized to\n{opt}\n")


_RED_OPS = {"add": np.sum, "maximum": np.max, "minimum": np.min, "and": np.bitwise_and.reduce,
            "or": np.bitwise_or.reduce}


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_reduce_of_broadcast(data):
  """reduce(broadcast(x)) becomes a reduction of x (times the broadcast count for add): the
  same values as the reference on the unsimplified module (integers bitwise, wrapping
  included; floats to rounding), and no reduction over the broadcast left."""
  op = data.draw(st.sampled_from(sorted(_RED_OPS)), label="op")
  dt = data.draw(st.sampled_from(["s32", "u8"] if op in ("and", "or") else
                                 ["f32", "f64", "s32", "u8"]), label="dt")
  rank = data.draw(st.integers(1, 4), label="rank")
  out_dims = data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank), label="dims")
  kept = sorted(data.draw(st.sets(st.integers(0, rank - 1)), label="x dims"))
  x_dims = [out_dims[d] if data.draw(st.booleans(), label="full") else 1 for d in kept]
  red = sorted(data.draw(st.sets(st.integers(0, rank - 1), min_size=1), label="reduced"))
  m = Module("rb")
  comp = scalar_computation(m, op, dt)
  b = Builder(m, "main")
  x = b.parameter(S(dt, *x_dims))
  bc = b.broadcast(x, tuple(out_dims), tuple(kept))
  init = {"add": 0, "maximum": -10 ** 6, "minimum": 10 ** 6, "and": -1, "or": 0}[op]
  if dt == "u8":
    init = {"maximum": 0, "minimum": 255, "and": 255}.get(op, init)
  m.entry = b.build(b.reduce(bc, b.constant(init, dt), tuple(red), comp))
  verify(m)
  xv = random_array(np.random.default_rng(data.draw(st.integers(0, 99), label="seed")), dt,
                    tuple(x_dims))
  if dt in ("f32", "f64"):
    xv = np.round(np.clip(xv, -1e3, 1e3) * 4) / 4      # quarter-integers: exact sums
  want = reference.compile(m)(xv)[0]
  simplify.run(m)
  verify(m)
  got = reference.compile(m)(xv)[0]
  np.testing.assert_array_equal(got, want)
  count = np.prod([out_dims[d] for d in red if d not in kept] +
                  [out_dims[d] for d, xd in zip(kept, x_dims) if d in red and xd != out_dims[d]])
  expanded_kept = any(d not in red and xd != out_dims[d] for d, xd in zip(kept, x_dims))
  if count > 1 and not expanded_kept:
    text = m.entry.to_string()
    assert not any(i.opcode == "reduce" and i.operands[0].opcode == "broadcast"
                   for i in m.entry.instructions), text


def test_sum_of_a_huge_broadcast_answers_at_once():
  """jit(sum(broadcast_to(x, (10^6, 10^6)))) is 10^12 x computed by one multiply (10^12
  additions before), integers wrapping as the additions would."""
  import ourjax
  import ourjax.numpy as jnp
  f = ourjax.jit(lambda x: jnp.sum(jnp.broadcast_to(x, (10 ** 6, 10 ** 6))))
  assert f(np.float32(1.5)) == np.float32(1.5e12)
  assert int(f(np.int32(3))) == np.int64(3 * 10 ** 12).astype(np.int32)
  g = ourjax.jit(lambda x: jnp.max(jnp.broadcast_to(x, (10 ** 6, 10 ** 6, 3)), axis=(0, 1)))
  np.testing.assert_array_equal(np.asarray(g(np.float32([1, -2, 3]))), [1, -2, 3])


@pytest.mark.parametrize("dtype", ["f32", "s32"])
@pytest.mark.parametrize("windows, overlap", [
    ([(0, 3), (3, 5), (8, 4)], False),          # the gradient of a split, with a gap of zeros
    ([(2, 4), (7, 5)], False),
    ([(0, 6), (4, 8)], True),                    # overlapping windows: a real sum, kept
])
def test_sum_of_disjoint_zero_pads_becomes_a_concatenate(dtype, windows, overlap):
  """add(pad(a, 0), pad(b, 0), ...) over disjoint windows of one dimension is their
  concatenation (zeros between), bit for bit (a float part is added to +0.0, as the sum does:
  -0.0 becomes +0.0); overlapping windows stay a sum."""
  n = 12

  def build(b, *xs):
    total = None
    for (lo, size), x in zip(windows, xs):
      p = b.pad(x, b.constant(np.zeros((), hlo.to_dtype(dtype))),
                [(0, 0, 0), (lo, n - lo - size, 0)])
      total = p if total is None else b.add(total, p)
    return total
  shapes = [S(dtype, 3, size) for _, size in windows]
  m0, m = simplified(build, *shapes)
  ops = entry_ops(m)
  assert ("concatenate" in ops) != overlap and ("pad" in ops) == overlap
  if dtype == "f32":       # signed zeros, NaNs and infinities as the sum gives them
    xs = [np.array([[-0.0, np.nan, np.inf] + [1.5] * (size - 3)] * 3, np.float32)[:, :size]
          for _, size in windows]
    for a, c in zip(reference.compile(m0)(*xs), reference.compile(m)(*xs)):
      assert_bitwise_equal(a, c)


def test_opt_barrier_keeps_cse_apart_until_the_barriers_pass_removes_it():
  from ourjax.lowering.passes import barriers

  def build(b, x):
    s1 = b.sine(x)
    (xb,) = b.opt_barrier([x])
    s2 = b.sine(xb)                                # equal work, read through the barrier
    return b.tuple([b.add(s1, s2), b.multiply(s1, s2)])
  m = module(build, S("f32", 5))
  m0 = m.clone()
  assert entry_ops(m).count("opt-barrier") == 1
  pipeline.optimize(m, late_passes=[])            # the fixed point: CSE cannot merge the sines
  assert entry_ops(m).count("sine") == 2 and entry_ops(m).count("opt-barrier") == 1
  check_same_results(m0, m)
  assert barriers.run(m)
  verify(m)
  assert "opt-barrier" not in entry_ops(m) and "get-tuple-element" not in entry_ops(m)
  check_same_results(m0, m)
  assert cse.run(m)                               # (without it the sines merge)
  dce.run(m)
  assert entry_ops(m).count("sine") == 1
  check_same_results(m0, m)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_reduce_of_broadcast_keeps_the_order_of_signed_zeros(op):
  """reduce(op, broadcast(x), init) over the broadcast dimension alone becomes op(init, x),
  the init first as the reduction combines it: max and min of +0 and -0 follow their
  operands' order, so the other order changed a -0.0 init's result (a CI draw: max of +0.0
  copies from -0.0 gave -0.0)."""
  for x_val, init_val in ((0.0, -0.0), (-0.0, 0.0)):
    m = Module("zeros")
    b = Builder(m, "main")
    p = b.parameter(Shape("f32", (2,)))
    x = b.broadcast(b.constant(x_val, "f32"), (2, 1), ())
    r = b.reduce([x], [b.constant(init_val, "f32")], (0,), scalar_computation(m, op, "f32"))
    m.entry = b.build(b.tuple([r, p]))
    args = [np.zeros(2, np.float32)]
    want = reference.compile(m)(*args)
    opt = m.clone()
    assert simplify.run(opt)
    assert not any(i.opcode == "reduce" for i in opt.entry.instructions)
    assert_bitwise_equal(want[0], reference.compile(opt)(*args)[0], f"{op} {x_val} {init_val}")
