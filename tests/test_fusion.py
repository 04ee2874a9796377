"""Fusion (loop, input, output), multi-output fusion and reduction epilogues: how many kernels the
target programs become, what is never fused or duplicated, the recorded reasons, the printed
form, and the main guard: fused modules give bitwise the results of unfused ones on the
reference executor (random programs from ``hlo_programs`` and random reduction-heavy programs)."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_programs import assert_bitwise_equal, programs, random_array
from ourjax.backends import reference
from ourjax.lowering import pipeline
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation, verify
from ourjax.lowering.passes import fusion, multi_output_fusion

NOT_KERNELS = ("parameter", "constant", "tuple", "get-tuple-element")


def S(dtype, *dims):
  return Shape(dtype, dims)


def module(build, *shapes, name="t"):
  m = Module(name)
  b = Builder(m, "main")
  ps = [b.parameter(s) for s in shapes]
  m.entry = b.build(build(b, *ps))
  verify(m)
  return m


def optimized(m, late=("fusion", "multi_output_fusion")):
  """(original, optimized) where the optimized copy ran the simplifier passes and the named late
  passes; checks the results agree bitwise."""
  m0 = m.clone()
  passes = {"fusion": fusion.run, "multi_output_fusion": multi_output_fusion.run}
  pipeline.optimize(m, late_passes=[(n, passes[n]) for n in late])
  check_contracts(m)
  check_same_results(m0, m)
  return m0, m


def check_contracts(m):
  """Every fusion keeps the promises of its kind (``fusion.check``)."""
  for comp in fusion.fusible_computations(m):
    for i in comp.instructions:
      if i.opcode == "fusion":
        problem = fusion.check(i)
        assert problem is None, f"%{i.name}: {problem}\n{m}"


def check_same_results(before, after, seeds=range(3)):
  for seed in seeds:
    rng = np.random.default_rng(seed)
    args = [random_array(rng, p.dtype, p.dims) for p in before.entry.parameters]
    want, got = reference.compile(before)(*args), reference.compile(after)(*args)
    assert len(want) == len(got)
    for a, b in zip(want, got):
      assert_bitwise_equal(a, b)


def kernels(m):
  return [i for i in m.entry.instructions if i.opcode not in NOT_KERNELS]


def fusions(m):
  return [i for i in m.entry.instructions if i.opcode == "fusion"]


def count_ops(m, opcode):
  return sum(i.opcode == opcode for c in m.computations for i in c.instructions)


def notes(m, prefix):
  return [n for n in m.notes if n.startswith(prefix + ":")]


# ---------------------------------------------------------------------------------------------
# the target programs
# ---------------------------------------------------------------------------------------------

def gelu(b, x):
  s = x.shape
  inner = b.multiply(b.full(0.7978845608, s), b.add(x, b.multiply(
      b.full(0.044715, s), b.multiply(x, b.multiply(x, x)))))
  return b.multiply(b.multiply(b.full(0.5, s), x), b.add(b.full(1.0, s), b.tanh(inner)))


def softmax(b, x):
  m, (n, d) = b.module, x.dims
  mx = b.reduce(x, b.constant(-np.inf, "f32"), (1,), scalar_computation(m, "maximum", "f32"))
  e = b.exp(b.subtract(x, b.broadcast(mx, (n, d), (0,))))
  s = b.reduce(e, b.constant(0.0, "f32"), (1,), scalar_computation(m, "add", "f32"))
  return b.divide(e, b.broadcast(s, (n, d), (0,)))


def layernorm(b, x, gamma, beta):
  m, (n, d) = b.module, x.dims
  add = scalar_computation(m, "add", "f32")
  row = S("f32", n)
  mean = b.divide(b.reduce(x, b.constant(0.0, "f32"), (1,), add), b.full(float(d), row))
  xc = b.subtract(x, b.broadcast(mean, (n, d), (0,)))
  var = b.divide(b.reduce(b.multiply(xc, xc), b.constant(0.0, "f32"), (1,), add),
                 b.full(float(d), row))
  rstd = b.rsqrt(b.add(var, b.full(1e-5, row)))
  y = b.multiply(b.multiply(xc, b.broadcast(rstd, (n, d), (0,))), b.broadcast(gamma, (n, d), (1,)))
  return b.add(y, b.broadcast(beta, (n, d), (1,)))


def dense_tanh(b, x, w, bias):
  y = b.dot(x, w, (1,), (0,))
  return b.tanh(b.add(y, b.broadcast(bias, y.dims, (1,))))


def test_gelu_is_one_loop_fusion():
  _, m = optimized(module(gelu, S("f32", 16, 32)))
  (f,) = kernels(m)
  assert f.opcode == "fusion" and f.attrs["kind"] == "kLoop"
  assert count_ops(m, "tanh") == 1


def test_chain_of_ten_elementwise_ops_is_one_fusion():
  def chain(b, x, y):
    v = x
    for op in ["add", "multiply", "exponential", "negate", "subtract", "tanh", "maximum",
               "abs", "multiply", "log-plus-one"]:
      v = b.emit(op, (v, y) if op in ("add", "multiply", "subtract", "maximum") else (v,))
    return v
  _, m = optimized(module(chain, S("f32", 8, 8), S("f32", 8, 8)))
  (f,) = kernels(m)
  assert f.opcode == "fusion" and f.attrs["kind"] == "kLoop" and len(f.operands) == 2
  assert len(f.attrs["calls"].instructions) == 12  # 2 parameters + the 10 ops


@pytest.mark.parametrize("late", [("fusion",), ("fusion", "multi_output_fusion")])
def test_softmax_over_the_last_axis(late):
  _, m = optimized(module(softmax, S("f32", 8, 128)), late)
  ks = kernels(m)
  assert all(k.opcode == "fusion" for k in ks)
  assert count_ops(m, "exponential") == 1
  if "multi_output_fusion" in late:
    (f,) = ks   # max, exp, sum and the division in one row kernel
    assert f.attrs["kind"] == "kInput"
    assert fusion.space_of(f) == fusion.Space("reduce", (8, 128), (1,))
    assert fusion.space_of(f).row
    assert any("reduction epilogue" in n for n in notes(m, "multi_output_fusion"))
  else:
    assert len(ks) == 4  # max | exp | sum | divide: reductions are roots of their own fusions


def test_layernorm_is_at_most_two_fusions():
  _, m = optimized(module(layernorm, S("f32", 8, 64), S("f32", 64), S("f32", 64)))
  ks = kernels(m)
  assert len(ks) <= 2 and all(k.opcode == "fusion" for k in ks)
  assert count_ops(m, "rsqrt") == 1


def test_jnp_layernorm_with_keepdims_is_one_row_kernel():
  # keepdims puts [n] -> [n,1] reshapes between the reductions and their users; simplify moves
  # them out of the way so the row reductions and the normalisation become one fusion
  import ourjax
  import ourjax.numpy as jnp

  def ln(x, g, b):
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g + b
  rng = np.random.default_rng(0)
  x = rng.standard_normal((16, 96)).astype(np.float32)
  g, bias = rng.standard_normal((2, 96)).astype(np.float32)
  text = ourjax.jit(ln).lower(x, g, bias).compile().as_text()
  assert text.count(" fusion(") == 1, text
  want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + bias
  np.testing.assert_allclose(np.asarray(ourjax.jit(ln)(x, g, bias)), want, rtol=2e-5, atol=2e-5)


def test_dense_tanh_is_one_output_fusion():
  _, m = optimized(module(dense_tanh, S("f32", 4, 16), S("f32", 16, 8), S("f32", 8)))
  (f,) = kernels(m)
  assert f.attrs["kind"] == "kOutput"
  fc = f.attrs["calls"]
  dot = next(i for i in fc.instructions if i.opcode == "dot")
  assert all(o.opcode == "parameter" for o in dot.operands)  # the dot reads memory
  assert fc.root.opcode == "tanh" and fc.root.shape == f.shape
  assert any("output fusion" in n for n in notes(m, "fusion"))


def test_a_dots_epilogue_may_end_in_a_reshape():
  """A dot's elementwise epilogue whose result is reshaped at the end (a convolution's
  [N*H*W, C] product seen as [N, H, W, C]) is one kOutput fusion rooted at the reshape, a view
  of the epilogue's result (``fusion.check`` accepts it); results bitwise unchanged."""
  def f(b, x, w):
    y = b.abs(b.dot(x, w, (1,), (0,)))
    return b.reshape(y, (2, 3, 8))
  _, m = optimized(module(f, S("f32", 6, 16), S("f32", 16, 8)))
  (k,) = kernels(m)
  assert k.attrs["kind"] == "kOutput" and k.attrs["calls"].root.opcode == "reshape"


def test_nothing_is_fused_into_a_dots_operands():
  def f(b, x, w):
    return b.dot(b.exp(x), b.negate(w), (1,), (0,))
  _, m = optimized(module(f, S("f32", 4, 6), S("f32", 6, 5)))
  dot = next(i for i in m.entry.instructions if i.opcode == "dot")
  assert all(o.opcode == "fusion" and o.attrs["kind"] == "kLoop" for o in dot.operands)
  assert [c for c in m.computations for i in c.instructions if i.opcode == "dot"] == [m.entry]


def test_a_dot_reads_memory_even_when_its_operand_is_already_fused():
  def f(b, x, w):
    a = b.abs(x)                       # duplicated into the add first, then read by the dot
    return b.add(a, b.dot(a, w, (1,), (0,)))
  _, m = optimized(module(f, S("f32", 1, 3), S("f32", 3, 3)))   # (checks fusion.check)
  assert sorted(k.attrs["kind"] for k in kernels(m)) == ["kLoop", "kOutput"]  # abs in memory


def test_kernel_counts_are_what_the_tests_claim():
  """The counting helpers see unfused kernels (guards the tests above against vacuity)."""
  m = module(softmax, S("f32", 4, 8))
  assert len(kernels(m)) == 7 and not fusions(m)


# ---------------------------------------------------------------------------------------------
# expensive producers, reuse, and what is never fused
# ---------------------------------------------------------------------------------------------

def test_expensive_producer_with_two_users_is_not_duplicated():
  def f(b, x, y):
    e = b.exp(x)
    return b.tuple([b.transpose(e, (1, 0)), b.add(e, y)])
  m = module(f, S("f32", 6, 6), S("f32", 6, 6))
  _, m1 = optimized(m.clone(), ("fusion",))
  assert count_ops(m1, "exponential") == 1
  assert any(n.endswith("expensive and has 2 users") and "%exponential" in n
             for n in notes(m1, "fusion"))
  assert len(kernels(m1)) == 3
  # multi-output fusion folds exp into the add (same index) and keeps it an output for the
  # transpose (which reads it at other indices)
  _, m2 = optimized(m, ("fusion", "multi_output_fusion"))
  assert count_ops(m2, "exponential") == 1
  ks = kernels(m2)
  assert len(ks) == 2
  multi = [k for k in ks if k.shape.is_tuple]
  assert len(multi) == 1 and len(multi[0].shape.tuple_shapes) == 2
  assert any("other indices" in n for n in notes(m2, "multi_output_fusion"))


def test_cheap_producer_is_duplicated():
  def f(b, x, y):
    a = b.add(x, y)
    return b.tuple([b.transpose(a, (1, 0)), b.reverse(a, (0,))])
  _, m = optimized(module(f, S("f32", 4, 4), S("f32", 4, 4)), ("fusion",))
  assert count_ops(m, "add") == 2
  assert all(k.opcode == "fusion" for k in kernels(m)) and len(kernels(m)) == 2
  assert any("duplicated" in n for n in notes(m, "fusion"))


def test_expensive_producer_is_not_recomputed_per_broadcast_element():
  def f(b, x, v):
    return b.add(x, b.broadcast(b.exp(v), x.dims, (0,)))
  _, m = optimized(module(f, S("f32", 4, 32), S("f32", 4)), ("fusion",))
  assert len(kernels(m)) == 2
  assert any("reads each of its elements many times" in n for n in notes(m, "fusion"))
  # cheap: fused
  def g(b, x, v):
    return b.add(x, b.broadcast(b.negate(v), x.dims, (0,)))
  _, m = optimized(module(g, S("f32", 4, 32), S("f32", 4)), ("fusion",))
  assert len(kernels(m)) == 1


def test_sort_scatter_while_stay_unfused():
  def f(b, x, y):
    m = b.module
    s = b.sort([b.exp(x)], 1, scalar_computation(m, "LT", "f32"))
    return b.add(b.sort([b.negate(s)], 0, scalar_computation(m, "GT", "f32")), y)
  _, m = optimized(module(f, S("f32", 4, 5), S("f32", 4, 5)))
  ops = [i.opcode for i in kernels(m)]
  assert ops.count("sort") == 2 and ops.count("fusion") == 3
  for c in m.computations:
    if c is not m.entry:
      assert all(i.opcode != "sort" for i in c.instructions)
  assert any("sort is never fused" in n for n in notes(m, "fusion"))


def make_while(m, n):
  """while i < 5: (i + 1, tanh(x) * 2 + 1) on (s32[], f32[n])."""
  st = S("f32", n)
  ts = Shape.tuple([S("s32"), st])
  cb = Builder(m, "cond")
  p = cb.parameter(ts)
  cond = cb.build(cb.lt(cb.get_tuple_element(p, 0), cb.constant(5, "s32")))
  bb = Builder(m, "body")
  p = bb.parameter(ts)
  i, x = bb.get_tuple_element(p, 0), bb.get_tuple_element(p, 1)
  x = bb.add(bb.multiply(bb.tanh(x), bb.full(2.0, st)), bb.full(1.0, st))
  body = bb.build(bb.tuple([bb.add(i, bb.constant(1, "s32")), x]))
  return cond, body


def test_fusion_inside_while_bodies_but_not_across_the_loop():
  m = Module("w")
  cond, body = make_while(m, 16)
  b = Builder(m, "main")
  x = b.parameter(S("f32", 16))
  w = b.while_loop(b.tuple([b.constant(0, "s32"), b.exp(x)]), cond, body)
  m.entry = b.build(b.negate(b.get_tuple_element(w, 1)))
  _, m = optimized(m)
  ops = [i.opcode for i in kernels(m)]
  assert ops == ["fusion", "while", "fusion"]
  body = next(i for i in m.entry.instructions if i.opcode == "while").attrs["body"]
  body_fusions = [i for i in body.instructions if i.opcode == "fusion"]
  assert len(body_fusions) == 2  # the counter increment, the tanh chain
  assert count_ops(m, "tanh") == 1


# ---------------------------------------------------------------------------------------------
# multi-output fusion
# ---------------------------------------------------------------------------------------------

def mixing_rounds(b, x, y, rounds):
  """threefry-like: every value is read twice, by the next round and by its mixing."""
  for r in range(rounds):
    x = b.add(x, y)
    rot = b.full(13 + r % 7, y.shape)
    y = b.or_(b.shift_left(y, rot), b.shift_right_logical(y, b.subtract(b.full(32, y.shape), rot)))
    y = b.xor(y, x)
  return b.tuple([x, y])


@pytest.mark.parametrize("rounds", [10, 40])
def test_duplicated_producers_are_copied_once_per_fusion(rounds):
  """Cheap producers read twice are duplicated, but each fusion holds one copy of each, so the
  fused code grows with the program, not with the number of paths through it."""
  m = module(lambda b, x, y: mixing_rounds(b, x, y, rounds), S("u32", 64), S("u32", 64))
  _, m1 = optimized(m.clone(), ("fusion",))
  assert len(kernels(m1)) == 2    # one per output, each with one copy of what it needs
  assert count_ops(m1, "add") <= 2 * rounds
  _, m = optimized(m)
  (k,) = kernels(m)   # the two outputs' fusions, merged as siblings (and their copies deduped)
  assert count_ops(m, "add") == rounds
  assert count_ops(m, "xor") == rounds


def test_sibling_reductions_read_their_input_once():
  def f(b, x):
    m = b.module
    mx = b.reduce(x, b.constant(-np.inf, "f32"), (0,), scalar_computation(m, "maximum", "f32"))
    sm = b.reduce(x, b.constant(0.0, "f32"), (0,), scalar_computation(m, "add", "f32"))
    return b.tuple([mx, sm])
  _, m = optimized(module(f, S("f32", 32, 8)))
  (k,) = kernels(m)
  assert k.attrs["kind"] == "kInput" and len(k.shape.tuple_shapes) == 2
  assert count_ops(m, "reduce") == 2
  assert any("merged siblings" in n for n in notes(m, "multi_output_fusion"))


def argmax_computation(m):
  rb = Builder(m, "argmax")
  av, ai = rb.parameter(S("f32")), rb.parameter(S("s32"))
  bv, bi = rb.parameter(S("f32")), rb.parameter(S("s32"))
  keep = rb.ge(av, bv)
  return rb.build(rb.tuple([rb.select(keep, av, bv), rb.select(keep, ai, bi)]))


def test_variadic_reduction_with_a_sibling_and_an_epilogue():
  def f(b, x):
    m, (n, d) = b.module, x.dims
    am = b.reduce([x, b.iota(S("s32", n, d), 1)], [b.constant(-np.inf, "f32"),
                                                   b.constant(0, "s32")], (1,),
                  argmax_computation(m))
    total = b.reduce(x, b.constant(0.0, "f32"), (1,), scalar_computation(m, "add", "f32"))
    best = b.get_tuple_element(am, 0)
    return b.tuple([b.get_tuple_element(am, 1), b.divide(best, total)])
  _, m = optimized(module(f, S("f32", 6, 10)))
  (k,) = kernels(m)
  assert k.attrs["kind"] == "kInput" and count_ops(m, "reduce") == 2


def test_sibling_loops_over_one_input():
  def f(b, x):
    return b.tuple([b.exp(x), b.log(x), b.sqrt(x)])
  _, m = optimized(module(f, S("f32", 4, 8)))
  (k,) = kernels(m)
  assert k.attrs["kind"] == "kLoop" and len(k.shape.tuple_shapes) == 3


def test_producer_with_outside_user_becomes_an_extra_output():
  def f(b, x):
    e = b.exp(x)
    col = b.reduce(e, b.constant(0.0, "f32"), (0,), scalar_computation(b.module, "add", "f32"))
    return b.tuple([col, b.transpose(e, (1, 0))])
  _, m = optimized(module(f, S("f32", 8, 8)))
  ks = kernels(m)
  assert len(ks) == 2 and count_ops(m, "exponential") == 1
  (multi,) = [k for k in ks if k.shape.is_tuple]
  assert multi.attrs["kind"] == "kInput"
  assert any("stays an output" in n for n in notes(m, "multi_output_fusion"))


def test_no_merge_that_would_create_a_cycle():
  def f(b, x):
    e = b.exp(x)
    s = b.sort([e], 1, scalar_computation(b.module, "LT", "f32"))  # never fused
    return b.add(e, s)
  _, m = optimized(module(f, S("f32", 4, 4)))
  assert count_ops(m, "exponential") == 1
  assert any("a cycle" in n for n in notes(m, "multi_output_fusion"))


def test_column_reduction_epilogue_but_no_broadcast_back():
  def f(b, x):
    n, d = x.dims
    s = b.reduce(x, b.constant(0.0, "f32"), (0,), scalar_computation(b.module, "add", "f32"))
    mean = b.divide(s, b.full(float(n), S("f32", d)))
    return b.subtract(x, b.broadcast(mean, (n, d), (1,)))
  _, m = optimized(module(f, S("f32", 16, 4)))
  # the division joins the column sum as an epilogue; the subtraction needs the finished
  # column means at every row, which a non-row reduction cannot provide in the same pass
  assert len(kernels(m)) == 2
  assert any("reads the producer's result at other indices" in n
             for n in notes(m, "multi_output_fusion"))


def test_column_result_read_along_rows_is_not_an_epilogue():
  def f(b, x):
    s = b.reduce(x, b.constant(0.0, "f32"), (0,), scalar_computation(b.module, "add", "f32"))
    return b.add(x, b.broadcast(s, (4, 4), (0,)))   # shapes fit, but s[i] is a column total
  _, m = optimized(module(f, S("f32", 4, 4)))
  assert len(kernels(m)) == 2


def test_check_names_a_broken_contract():
  def f(b, x):
    s = b.reduce(x, b.constant(0.0, "f32"), (0,), scalar_computation(b.module, "add", "f32"))
    return b.add(x, b.broadcast(s, (4, 4), (0,)))
  m = module(f, S("f32", 4, 4))
  root = m.entry.root
  fusion.wrap(m.entry, root, "kInput")   # everything in one fusion, by hand
  (f1,) = [i for i in m.entry.instructions if i.opcode == "fusion"]
  fusion.fuse_into(m.entry, f1, root.operands[1])
  fusion.fuse_into(m.entry, f1, next(o for o in f1.operands if o.opcode == "reduce"))
  verify(m)
  assert "uses a reduction's result outside of reduction of [4,4] over {0}" in fusion.check(f1)


def test_output_fusions_are_not_merged():
  def f(b, x, w, bias):
    y = dense_tanh(b, x, w, bias)
    return b.tuple([y, b.exp(y)])
  _, m = optimized(module(f, S("f32", 4, 16), S("f32", 16, 8), S("f32", 8)))
  assert sorted(k.attrs["kind"] for k in kernels(m)) == ["kLoop", "kOutput"]


# ---------------------------------------------------------------------------------------------
# printing and notes
# ---------------------------------------------------------------------------------------------

def test_printed_form_and_dumped_reasons(tmp_path):
  m = module(softmax, S("f32", 256, 512), name="softmax")
  pipeline.optimize(m, dump_dir=str(tmp_path))
  text = m.to_string(operand_shapes=False)
  (f,) = fusions(m)
  n = f.name.split(".")[1]
  assert f"%fusion.{n} = f32[256,512] fusion(%p0), kind=kInput, calls=%fused_computation.{n}" \
      in text
  assert text.index(f"%fused_computation.{n} (") < text.index("ENTRY %main")
  dumped = {p.name.split("-", 1)[1]: p.read_text() for p in tmp_path.iterdir()}
  assert "fused %subtract" in dumped["fusion.txt"]
  assert "not fusing %exponential" in dumped["fusion.txt"]
  assert "reduction epilogue" in dumped["multi_output_fusion.txt"]
  assert "arena of" in dumped["buffer_assignment.txt"]


def test_every_decision_has_a_reason():
  m = module(layernorm, S("f32", 8, 64), S("f32", 64), S("f32", 64))
  pipeline.optimize(m)
  for n in notes(m, "fusion") + notes(m, "multi_output_fusion"):
    assert ": " in n.split(": ", 1)[1], n   # "<decision>: <reason>"


def test_fusion_pass_is_idempotent():
  m = module(layernorm, S("f32", 8, 64), S("f32", 64), S("f32", 64))
  pipeline.optimize(m)
  text = m.to_string()
  assert not fusion.run(m) and not multi_output_fusion.run(m)
  assert m.to_string() == text


# ---------------------------------------------------------------------------------------------
# the guard: fused modules compute bitwise what unfused ones do
# ---------------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(programs(max_ops=40))
def test_fusion_preserves_results_on_random_programs(prog):
  m, args = prog
  want = reference.compile(m)(*args)
  opt = pipeline.optimize(m.clone())
  check_contracts(opt)
  got = reference.compile(opt)(*args)
  for i, (a, b) in enumerate(zip(want, got)):
    assert_bitwise_equal(a, b, f"output {i} of\n{m}\nfused to\n{opt}\n")


_UNARY = ["exponential", "tanh", "negate", "abs", "log", "sqrt", "logistic", "sine"]
_BINARY = ["add", "subtract", "multiply", "divide", "maximum"]


@st.composite
def reduction_programs(draw):
  """Random DAGs over a row shape R + C and its rows R (and its columns C): elementwise ops
  (many expensive), row and column reductions, broadcasts back, transposes and reverses, dots,
  reused values — the patterns of softmax, layernorm and their gradients."""
  rows = draw(st.sampled_from([(3,), (4,), (2, 3)]))
  cols = draw(st.sampled_from([(4,), (2, 2)]))
  full, nr = rows + cols, len(rows)
  m = Module("reductions")
  b = Builder(m, "main")
  levels = {"full": [b.parameter(S("f32", *full))], "rows": [], "cols": []}
  add = scalar_computation(m, "add", "f32")
  mx = scalar_computation(m, "maximum", "f32")

  def pick(level):
    vals = levels[level]
    return vals[-1] if draw(st.booleans()) else draw(st.sampled_from(vals))

  for _ in range(draw(st.integers(3, 14))):
    kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "rowreduce", "colreduce",
                                 "bcast", "bcast", "permute", "dot", "param"]))
    level = draw(st.sampled_from([k for k, v in levels.items() if v]))
    if kind == "unary":
      v = b.emit(draw(st.sampled_from(_UNARY)), (pick(level),))
    elif kind == "binary":
      v = b.emit(draw(st.sampled_from(_BINARY)), (pick(level), pick(level)))
    elif kind in ("rowreduce", "colreduce"):
      dims = tuple(range(nr, len(full))) if kind == "rowreduce" else tuple(range(nr))
      comp, init = (add, 0.0) if draw(st.booleans()) else (mx, -np.inf)
      v = b.reduce(pick("full"), b.constant(init, "f32"), dims, comp)
      level = "rows" if kind == "rowreduce" else "cols"
    elif kind == "bcast":
      if level == "full":
        continue
      x = pick(level)
      # any placement the sizes allow: [4] goes to either dimension of [4,4]
      options = [d for d in itertools.combinations(range(len(full)), x.shape.rank)
                 if all(full[p] == n for p, n in zip(d, x.dims))]
      v, level = b.broadcast(x, full, draw(st.sampled_from(options))), "full"
    elif kind == "permute":
      x = pick("full")
      v = b.reverse(x, (0,)) if draw(st.booleans()) or len(full) != 2 or full[0] != full[1] \
          else b.transpose(x, (1, 0))
      level = "full"
    elif kind == "dot":
      if len(full) != 2:
        continue
      w = b.parameter(S("f32", full[1], full[1]))
      v, level = b.dot(pick("full"), w, (1,), (0,)), "full"
    else:
      v = b.parameter(S("f32", *(full if level == "full" else rows if level == "rows"
                                 else cols)))
    levels[level].append(v)
  vals = [v for vs in levels.values() for v in vs if v.opcode != "parameter"]
  if not vals:
    vals = levels["full"]
  outs = vals[-draw(st.integers(1, min(3, len(vals)))):]
  m.entry = b.build(b.tuple(outs))
  rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
  args = [rng.standard_normal(p.dims).astype(np.float32) for p in m.entry.parameters]
  return m, args


@settings(max_examples=200, deadline=None)
@given(reduction_programs())
def test_fusion_preserves_results_on_reduction_programs(prog):
  m, args = prog
  want = reference.compile(m)(*args)
  # the fixed-point passes alone (no fusion): the simplifier may rewrite a sum of a broadcast as
  # a product (reduce_of_broadcast), which rounds differently in the last bits, and a later exp
  # magnifies that difference; fusion itself changes nothing, so the fused program is compared
  # tightly with this one and loosely with the original
  simplified = reference.compile(pipeline.optimize(m.clone(), late_passes=()))(*args)
  opt = pipeline.optimize(m.clone())
  check_contracts(opt)
  got = reference.compile(opt)(*args)
  for k in kernels(opt):  # every kernel is a fusion or an op that is never fused
    assert k.opcode in ("fusion", "dot"), k
  for i, (a, s, b) in enumerate(zip(want, simplified, got)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(s), rtol=1e-6, atol=0,
                               err_msg=f"output {i} of\n{m}\nfused to\n{opt}\n")
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=0,
                               err_msg=f"output {i} of\n{m}\nfused to\n{opt}\n")


# ------------------------------------------------------------------------------------------------
# code duplication: a value read at many positions is not fused without bound


def test_emitted_count_counts_distinct_read_positions():
  from ourjax.lowering.passes.fusion import emitted_count
  m = Module("dup")
  b = Builder(m, "fused")
  x = b.parameter(Shape("f32", (8,)))
  e = b.multiply(b.exp(x), b.add(x, x))            # a diamond of elementwise reads: one index
  s1 = b.slice(x, (0,), (6,))
  s2 = b.slice(x, (1,), (7,))
  s3 = b.slice(e, (2,), (8,))
  comp = b.build(b.add(b.add(s1, s2), s3))
  assert emitted_count(comp, e) == 1
  assert emitted_count(comp, x) == 3               # at i, i+1 (slices) and i+2 (through e)


def _counts_by_definition(comp):
  """``emitted_count`` of every instruction, straight from its definition: each instruction's
  readers (the non-elementwise users, and what an elementwise user of the same shape passes
  on), a count the sum of its readers' counts."""
  readers, count = {}, {}
  for x in reversed(comp.instructions):
    mine = {x} if x is comp.root else readers.get(x, set())
    count[x] = 1 if x is comp.root else sum(count[u] for u in mine)
    for o in x.operands:
      if x.is_elementwise() and o.dims == x.dims:
        readers.setdefault(o, set()).update(mine)
      else:
        readers.setdefault(o, set()).add(x)
  return count


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "exp", "slice"]), st.integers(0, 10 ** 6),
                          st.integers(0, 10 ** 6)), min_size=1, max_size=30))
def test_emitted_counts_match_their_definition(ops):
  """The one-walk ``emitted_counts`` (readers' sets shared along elementwise chains) against
  the definition, on random DAGs of elementwise ops (diamonds) and shifting slices."""
  m = Module("dup")
  b = Builder(m, "fused")
  vals = [b.parameter(S("f32", 16))]
  for op, i, j in ops:
    x, y = vals[i % len(vals)], vals[j % len(vals)]
    if op == "exp":
      vals.append(b.exp(x))
    elif op == "add":
      vals.append(b.add(x, y))
    else:      # a slice read at a shift, padded back to 16 elements
      k = 1 + j % 3
      vals.append(b.pad(b.slice(x, (k,), (16,)), b.constant(np.float32(0)), [(0, k, 0)]))
  out = vals[-1]
  for v in vals[:-1]:
    if not v.users:
      out = b.add(out, v)
  comp = b.build(out)
  assert fusion.emitted_counts(comp) == _counts_by_definition(comp)


@settings(max_examples=60, deadline=None)
@given(programs(max_ops=40))
def test_counts_kept_up_to_date_while_fusing_match_a_fresh_count(prog):
  """The fusion pass keeps each consumer's counts (``_Counts``) up to date as producers are
  fused in one at a time; at every decision they equal a fresh count of the fused
  computation (random programs, slices and pads among them)."""
  m, _ = prog
  checked = []
  real = fusion.decide

  def checking(comp, P, consumer, memo=None):
    if memo and consumer.opcode == "fusion":
      fc = consumer.attrs["calls"]
      kept = memo.get(id(fc))
      if kept is not None:
        fresh = fusion._Counts(fc).count
        assert {x: kept.count.get(x) for x in fc.instructions} == fresh, fc
        checked.append(1)
    return real(comp, P, consumer, memo)
  fusion.decide = checking
  try:
    pipeline.optimize(m.clone())
  finally:
    fusion.decide = real


def test_stencil_chains_stop_fusing_at_the_duplication_limit(monkeypatch):
  """Four stages of a rolled stencil (an RK4 step's shape): fused without a limit, each stage
  triples the positions the first is computed at.  With MAX_DUPLICATION the fusion stops
  (noted), the LLVM IR is less than half as long, and the result is still NumPy's."""
  import ourjax
  import ourjax.numpy as jnp

  def field(x):
    return 0.5 * (jnp.roll(x, 1) + jnp.roll(x, -1)) - x * x * 0.1

  def step(x):
    k1 = field(x)
    k2 = field(x + 0.1 * k1)
    k3 = field(x + 0.1 * k2)
    k4 = field(x + 0.2 * k3)
    return x + (k1 + 2 * k2 + 2 * k3 + k4) / 6

  def step64(x):
    f = lambda v: 0.5 * (np.roll(v, 1) + np.roll(v, -1)) - v * v * 0.1  # noqa: E731
    k1 = f(x)
    k2 = f(x + 0.1 * k1)
    k3 = f(x + 0.1 * k2)
    k4 = f(x + 0.2 * k3)
    return x + (k1 + 2 * k2 + 2 * k3 + k4) / 6

  x = np.random.default_rng(0).standard_normal(257).astype(np.float32)
  want = step64(x.astype(np.float64))
  sizes = {}
  limits = (fusion.MAX_DUPLICATION, 10 ** 9)
  for limit in limits:
    monkeypatch.setattr(fusion, "MAX_DUPLICATION", limit)
    jitted = ourjax.jit(lambda v: step(v))          # a new function: compiled again
    np.testing.assert_allclose(np.asarray(jitted(x)), want, rtol=1e-5, atol=1e-5)
    exe = jitted.lower(x).compile()._executable
    sizes[limit] = exe.compiled.llvm_ir.count("\n")
    noted = any("times per element" in n for n in exe.module.notes)
    assert noted == (limit != 10 ** 9)
  assert 2 * sizes[limits[0]] < sizes[10 ** 9], sizes


# ---------------------------------------------------------------------------------------------
# in-place dynamic-update-slice fusions
# ---------------------------------------------------------------------------------------------

def test_dynamic_update_slice_computes_its_window_in_place():
  """A scan's stacked output: ``dynamic_update_slice(stack, f(x), i)`` becomes one kLoop fusion
  rooted at the update, the window's values computed where they are stored; the array updated
  in place is never fused (its producer stays a kernel of its own), and results are those of
  the unfused module."""
  def build(b, stack, x, i):
    upd = b.tanh(b.add(b.multiply(x, x), x))
    base = b.exponential(stack)                # the updated array: computed, then updated
    zero = b.constant(np.int32(0))
    return b.dynamic_update_slice(base, b.reshape(upd, (1,) + x.dims), [i, zero])
  m0, m = optimized(module(build, S("f32", 5, 8), S("f32", 8), S("s32")))
  (dus,) = [f for f in fusions(m) if fusion.dus_root(f) is not None]
  fc = dus.attrs["calls"]
  assert {i.opcode for i in fc.instructions} >= {"tanh", "multiply", "add"}
  assert "exponential" not in {i.opcode for i in fc.instructions}
  assert fc.root.operands[0].opcode == "parameter"
  assert any("window of an in-place dynamic-update-slice" in n for n in notes(m, "fusion"))
  assert any("updates in place stays in memory" in n for n in notes(m, "fusion"))
  assert not fusion.is_loop_op(dus)                      # never fused into a consumer
  assert fusion.space_of(dus) is None               # (nor merged with other fusions)
