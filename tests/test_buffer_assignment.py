"""Buffer assignment: no two values live at once share memory (live ranges checked pairwise, and
the plan executed on real bytes: every value is stored in its slot of one arena or of the
caller's buffers and read back from there, which must reproduce the reference results), slots
are reused where ranges allow, donated parameters take results in place, and the plan reads
well."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_programs import assert_bitwise_equal, programs, random_array
from ourjax.backends import reference
from ourjax.lowering import pipeline
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation, verify
from ourjax.lowering.passes import buffer_assignment as bam
from ourjax.lowering.passes.buffer_assignment import ALIGNMENT


def S(dtype, *dims):
  return Shape(dtype, dims)


def module(build, *shapes, donated=()):
  m = Module("t")
  b = Builder(m, "main")
  ps = [b.parameter(s) for s in shapes]
  m.entry = b.build(build(b, *ps))
  verify(m)
  m.donated = set(donated)
  return m


def planned(build, *shapes, donated=()):
  """(original, optimized module with its plan); checks the plan on real bytes."""
  m = module(build, *shapes, donated=donated)
  m0 = m.clone()
  pipeline.optimize(m)
  ba = m.buffer_assignment
  check_no_overlap(ba)
  rng = np.random.default_rng(0)
  args = [random_array(rng, p.dtype, p.dims) for p in m0.entry.parameters]
  for a, b in zip(reference.compile(m0)(*args), simulate(m, ba, args)):
    assert_bitwise_equal(a, b)
  return m, ba


# ---------------------------------------------------------------------------------------------
# checkers
# ---------------------------------------------------------------------------------------------

def check_no_overlap(ba):
  """Values whose bytes overlap are never live at the same time, except a result written over
  an operand it reads elementwise that dies right there (``ba.in_place``)."""
  in_place = {(a, b) for a, b in ba.in_place}
  placed = []
  for v in ba.values:
    si, off = ba.value_slot[v]
    s = ba.slots[si]
    if s.kind == "temp":
      assert off == s.offset and off % ALIGNMENT == 0 and s.size % ALIGNMENT == 0
      assert off + v.bytes <= s.offset + s.size <= ba.temp_bytes
      placed.append((v, ("arena", off)))
    else:
      assert off == 0 and v.bytes <= s.size
      placed.append((v, (si, 0)))
  for i, (v, (mv, ov)) in enumerate(placed):
    for w, (mw, ow) in placed[i + 1:]:
      if mv != mw or not (ov < ow + w.bytes and ow < ov + v.bytes) or not v.bytes or \
          not w.bytes:
        continue
      if v.start <= w.end and w.start <= v.end:
        first, second = sorted((v, w), key=lambda x: x.start)
        assert (second.instr, first.instr) in in_place and first.end == second.start, \
            f"{v} and {w} share memory while both live\n{ba}"
  temps = [s for s in ba.slots if s.kind == "temp"]
  assert ba.temp_bytes == sum(s.size for s in temps)
  outs = [s for s in ba.slots if s.kind == "output"]
  assert all(len(s.values) == 1 for s in outs)
  for j, k in ba.output_aliases.items():
    p = ba.module.entry.parameters[k]
    assert k in ba.module.donated and p.shape == ba.outputs[j].shape


def simulate(m, ba, args):
  """Run the entry computation with every value stored in (and read back from) its planned
  bytes; returns the results the caller would see."""
  entry = m.entry
  arena = np.zeros(ba.temp_bytes, np.uint8)
  mem = {s.index: np.zeros(s.size, np.uint8) for s in ba.slots if s.kind != "temp"}

  def view(place, shape):
    si, off = place
    buf = arena if ba.slots[si].kind == "temp" else mem[si]
    return buf[off:off + bam.nbytes(shape)]

  def read(place, shape):
    if shape.is_tuple:
      return tuple(read(p, s) for p, s in zip(place, shape.tuple_shapes))
    return view(place, shape).copy().view(shape.dtype).reshape(shape.dims)

  def write(place, shape, value):
    if shape.is_tuple:
      for p, s, x in zip(place, shape.tuple_shapes, value):
        write(p, s, x)
      return
    view(place, shape)[:] = np.ascontiguousarray(value, shape.dtype).reshape(-1).view(np.uint8)

  for p, a in zip(entry.parameters, args):
    write(ba.assignment[p], p.shape, a)
  for instr in ba.schedule:
    if instr.opcode == "constant":
      write(ba.assignment[instr], instr.shape, instr.value)
  for instr in ba.schedule:
    if instr.opcode in ("parameter", "constant", "tuple", "get-tuple-element"):
      continue
    vals = [read(ba.assignment[o], o.shape) for o in instr.operands]
    write(ba.assignment[instr], instr.shape,
          reference.evaluate_instruction(instr, vals))
  results = []
  copies = dict(ba.output_copies)
  for j, v in enumerate(ba.outputs):
    if j in copies:
      results.append(read(copies[j], v.shape))
    elif j in ba.output_aliases:
      p = entry.parameters[ba.output_aliases[j]]
      results.append(read(ba.assignment[p], v.shape))
    else:
      slot = next(s for s in ba.slots if s.kind == "output" and s.number == j)
      results.append(read((slot.index, 0), v.shape))
  return results


# ---------------------------------------------------------------------------------------------
# reuse
# ---------------------------------------------------------------------------------------------

def dot_chain(b, x, *ws):
  v = x
  for w in ws:
    v = b.dot(v, w, (1,), (0,))
  return v


def test_dead_intermediates_are_reused():
  sq = S("f32", 8, 8)   # 256 bytes
  m, ba = planned(dot_chain, sq, sq, sq, sq, sq)
  d1, d2, d3, d4 = [i for i in m.entry.instructions if i.opcode == "dot"]
  assert ba.slot_of(d1).kind == ba.slot_of(d2).kind == ba.slot_of(d3).kind == "temp"
  assert ba.slot_of(d3) is ba.slot_of(d1)         # d1 is dead once d2 has run
  assert ba.slot_of(d2) is not ba.slot_of(d1)     # both live while d2 runs
  assert ba.slot_of(d4).kind == "output"
  assert ba.temp_bytes == 512 < ba.temp_values_bytes == 768


def test_a_smaller_value_takes_a_larger_free_slot_and_a_larger_one_grows_it():
  def f(b, x, w1, w2, w3):
    d1 = b.dot(x, w1, (1,), (0,))     # f32[8,8]
    d2 = b.dot(d1, w2, (1,), (0,))    # f32[8,2]: d1 dies here
    d3 = b.dot(d2, w3, (1,), (0,))    # f32[8,2] fits in d1's slot
    return b.dot(d3, b.transpose(w3, (1, 0)), (1,), (0,))
  m, ba = planned(f, S("f32", 8, 8), S("f32", 8, 8), S("f32", 8, 2), S("f32", 2, 2))
  d1, d2, d3, _ = [i for i in m.entry.instructions if i.opcode == "dot"]
  assert ba.slot_of(d3) is ba.slot_of(d1)
  assert ba.slot_of(d1).size == 256


def test_in_place_elementwise_over_a_dying_operand():
  def f(b, x):
    cmp = scalar_computation(b.module, "LT", "f32")
    s1 = b.sort([x], 0, cmp)
    n = b.exp(b.negate(s1))            # one loop fusion, reading s1 elementwise, last use
    return b.sort([n], 0, cmp)
  m, ba = planned(f, S("f32", 64))
  s1 = next(i for i in m.entry.instructions if i.opcode == "sort")
  fz = next(i for i in m.entry.instructions if i.opcode == "fusion")
  assert (fz, s1) in ba.in_place
  assert ba.slot_of(fz) is ba.slot_of(s1)
  assert "in place" in ba.to_string()


def test_no_in_place_over_an_operand_read_at_other_indices():
  def f(b, x):
    cmp = scalar_computation(b.module, "LT", "f32")
    s1 = b.sort([x], 0, cmp)
    return b.sort([b.reverse(s1, (0,))], 0, cmp)
  m, ba = planned(f, S("f32", 64))
  assert not ba.in_place


# ---------------------------------------------------------------------------------------------
# parameters, outputs, donation
# ---------------------------------------------------------------------------------------------

def test_donated_parameter_takes_the_result_in_place():
  def f(b, x, g):
    return b.subtract(x, b.multiply(b.full(0.1, x.shape), g))
  m, ba = planned(f, S("f32", 16), S("f32", 16), donated={0})
  assert ba.output_aliases == {0: 0}
  (fz,) = [i for i in m.entry.instructions if i.opcode == "fusion"]
  assert ba.slot_of(fz) is ba.slot_of(m.entry.parameters[0])
  assert ba.temp_bytes == 0 and not [s for s in ba.slots if s.kind == "output"]
  assert "output 0 is written into donated parameter 0" in ba.to_string()


def test_donation_needs_matching_shape_and_a_dead_parameter():
  def f(b, x, g):
    return b.add(x, g)
  _, ba = planned(f, S("f32", 16), S("f32", 16), donated={1})
  assert ba.output_aliases == {0: 1}
  _, ba = planned(f, S("f32", 16), S("f32", 16), donated=())
  assert ba.output_aliases == {}

  def g(b, x, y):
    return b.reshape(b.add(x, y), (4, 4))   # another shape than the parameters
  _, ba = planned(g, S("f32", 16), S("f32", 16), donated={0, 1})
  assert ba.output_aliases == {}

  def h(b, x):
    cmp = scalar_computation(b.module, "LT", "f32")
    a = b.negate(x)
    return b.tuple([a, b.sort([x], 0, cmp)])   # x is still read after %a is written
  m, ba = planned(h, S("f32", 16), donated={0})
  assert ba.output_aliases == {}


def test_outputs_that_no_kernel_writes_are_copied():
  def f(b, x):
    n = b.negate(x)
    return b.tuple([x, n, n])
  m, ba = planned(f, S("f32", 16))
  copies = dict(ba.output_copies)
  assert set(copies) == {0, 2}
  assert ba.slots[copies[0][0]].kind == "parameter"
  assert ba.slots[copies[2][0]].kind == "output" and ba.slots[copies[2][0]].number == 1


def test_tuple_values_and_get_tuple_element_places():
  def f(b, x):
    cmp = scalar_computation(b.module, "LT", "f32")
    e, l = b.exp(x), b.log(x)            # sibling loop fusions: one two-output fusion
    return b.add(b.sort([e], 0, cmp), b.sort([l], 0, cmp))
  m, ba = planned(f, S("f32", 32))
  (multi,) = [i for i in m.entry.instructions if i.shape.is_tuple]
  place = ba.assignment[multi]
  assert len(place) == 2 and place[0] != place[1]
  for g in multi.users:
    assert ba.assignment[g] == place[g.attrs["index"]]


def test_while_results():
  m = Module("w")
  st_ = S("f32", 16)
  ts = Shape.tuple([S("s32"), st_])
  cb = Builder(m, "cond")
  p = cb.parameter(ts)
  cond = cb.build(cb.lt(cb.get_tuple_element(p, 0), cb.constant(3, "s32")))
  bb = Builder(m, "body")
  p = bb.parameter(ts)
  body = bb.build(bb.tuple([bb.add(bb.get_tuple_element(p, 0), bb.constant(1, "s32")),
                            bb.tanh(bb.get_tuple_element(p, 1))]))
  b = Builder(m, "main")
  x = b.parameter(st_)
  w = b.while_loop(b.tuple([b.constant(0, "s32"), b.exp(x)]), cond, body)
  m.entry = b.build(b.negate(b.get_tuple_element(w, 1)))
  m0 = m.clone()
  pipeline.optimize(m)
  ba = m.buffer_assignment
  check_no_overlap(ba)
  args = [np.linspace(-1, 1, 16, dtype=np.float32)]
  assert_bitwise_equal(reference.compile(m0)(*args)[0], simulate(m, ba, args)[0])
  wi = next(i for i in m.entry.instructions if i.opcode == "while")
  assert len(ba.assignment[wi]) == 2


def test_plan_text_and_note():
  sq = S("f32", 8, 8)
  m, ba = planned(dot_chain, sq, sq, sq, sq)
  text = ba.to_string()
  assert text.startswith("BufferAssignment %main: arena 512 bytes in 2 slot(s)")
  assert "parameter 0" in text and "output 0" in text
  assert any(n.startswith("buffer_assignment: arena of 512 bytes") for n in m.notes)


# ---------------------------------------------------------------------------------------------
# random programs
# ---------------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(programs(max_ops=40), st.data())
def test_plans_of_random_programs_run_correctly(prog, data):
  m, args = prog
  want = reference.compile(m)(*args)
  opt = m.clone()
  n = len(m.entry.parameters)
  opt.donated = data.draw(st.sets(st.integers(0, n - 1)), label="donated")
  pipeline.optimize(opt)
  ba = opt.buffer_assignment
  check_no_overlap(ba)
  got = simulate(opt, ba, [np.array(a, copy=True) for a in args])
  assert len(got) == len(want)
  for i, (a, b) in enumerate(zip(want, got)):
    assert_bitwise_equal(a, b, f"output {i} of\n{opt}\n{ba}\n")
