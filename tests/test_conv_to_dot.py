"""The conv_to_dot pass (convolutions as patch matrices times kernel matrices) against the direct
convolution of the reference backend, on hypothesis-drawn convolutions: 1 and 2 spatial
dimensions, any dimension numbers, strides, padding (negative included), lhs and rhs dilation,
both patch constructions (per kernel position, per output position); then end to end through
jit, with gradients, on the native CPU backend."""
import itertools
import math

import numpy as np
from hypothesis import assume, example, given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends import reference
from ourjax.lowering.hlo import Builder, Module, Shape, verify
from ourjax.lowering.passes import conv_to_dot


@st.composite
def convolutions(draw):
  nd = draw(st.integers(1, 2))
  n, c, o = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
  spatial = [draw(st.integers(1, 7)) for _ in range(nd)]
  kernel = [draw(st.integers(1, 4)) for _ in range(nd)]
  strides = [draw(st.integers(1, 3)) for _ in range(nd)]
  ld = [draw(st.integers(1, 2)) for _ in range(nd)]
  rd = [draw(st.integers(1, 2)) for _ in range(nd)]
  padding = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(nd)]
  # keep only convolutions with at least one output position
  for i in range(nd):
    size = (spatial[i] - 1) * ld[i] + 1 + padding[i][0] + padding[i][1]
    if size < (kernel[i] - 1) * rd[i] + 1:
      padding[i] = (padding[i][0] + (kernel[i] - 1) * rd[i] + 1 - size, padding[i][1])
  perms = list(itertools.permutations(range(nd + 2)))
  lspec, rspec, ospec = (draw(st.sampled_from(perms)) for _ in range(3))
  lhs_dims = [0] * (nd + 2)
  lhs_dims[lspec[0]], lhs_dims[lspec[1]] = n, c
  rhs_dims = [0] * (nd + 2)
  rhs_dims[rspec[0]], rhs_dims[rspec[1]] = o, c
  for i in range(nd):
    lhs_dims[lspec[2 + i]] = spatial[i]
    rhs_dims[rspec[2 + i]] = kernel[i]
  return (lhs_dims, rhs_dims, dict(window_strides=strides, padding=padding, lhs_dilation=ld,
                                   rhs_dilation=rd, dimension_numbers=(lspec, rspec, ospec)))


def _module(lhs_dims, rhs_dims, attrs):
  m = Module("conv")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", lhs_dims))
  w = b.parameter(Shape("f32", rhs_dims))
  m.entry = b.build(b.convolution(x, w, **attrs))
  verify(m)
  return m


def _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed):
  """The rewritten module ``m`` gives the direct convolution's result on the reference backend
  (random f32 operands from ``seed``): the same shape and dtype, the same products summed in
  another order."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(lhs_dims).astype(np.float32)
  w = rng.standard_normal(rhs_dims).astype(np.float32)
  direct = reference.compile(_module(lhs_dims, rhs_dims, attrs))(x, w)[0]
  got = reference.compile(m)(x, w)[0]
  assert got.shape == direct.shape and got.dtype == direct.dtype
  terms = math.prod(rhs_dims) // rhs_dims[attrs["dimension_numbers"][1][0]]
  np.testing.assert_allclose(got, direct, rtol=0, atol=4 * terms * 6e-8 * 16)


@settings(max_examples=40, deadline=None)
@given(conv=convolutions(), seed=st.integers(0, 2 ** 31))
def test_rewrite_matches_the_direct_convolution(conv, seed):
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  assert conv_to_dot.run(m)
  verify(m)
  assert not any(i.opcode == "convolution" for i in m.entry.instructions)
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)


def test_groups_too_small_for_a_kernel_each_stay_direct():
  """Groups wide enough for GEMMs but whose products are smaller than a kernel's fixed cost
  (``Module.kernel_fixed_flops``) stay one direct convolution."""
  m = Module("grouped")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (2, 32, 9, 9)))
  w = b.parameter(Shape("f32", (32, 8, 3, 3)))
  m.entry = b.build(b.convolution(x, w, (1, 1), ((1, 1), (1, 1)), feature_group_count=4))
  flops = 2 * 2 * 8 * 81 * 72          # per group: outputs x contraction x 2
  m.kernel_fixed_flops = flops + 1
  assert not conv_to_dot.run(m)
  assert any("less than a kernel's fixed cost" in n for n in m.notes), m.notes
  m.kernel_fixed_flops = flops
  assert conv_to_dot.run(m)


def test_narrow_groups_stay_direct():
  """A depthwise convolution (one input channel, two outputs per group) is narrower than a
  GEMM's tiles: it stays a direct convolution, the reason noted."""
  m = Module("grouped")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (1, 4, 5)))
  w = b.parameter(Shape("f32", (8, 1, 3)))
  m.entry = b.build(b.convolution(x, w, (1,), ((0, 0),), feature_group_count=4))
  assert not conv_to_dot.run(m)
  assert any(n.startswith("conv_to_dot:") and "feature groups (4)" in n for n in m.notes), m.notes


@st.composite
def grouped_convolutions(draw):
  """``convolutions()`` with feature or batch groups: the input's features (or batch) and the
  kernel's output features scaled by the group count."""
  lhs_dims, rhs_dims, attrs = draw(convolutions())
  groups = draw(st.integers(2, 3))
  lspec, rspec, _ = attrs["dimension_numbers"]
  lhs_dims, rhs_dims = list(lhs_dims), list(rhs_dims)
  if draw(st.booleans()):
    lhs_dims[lspec[1]] *= groups
    attrs["feature_group_count"] = groups
  else:
    lhs_dims[lspec[0]] *= groups
    attrs["batch_group_count"] = groups
  rhs_dims[rspec[0]] *= groups
  return lhs_dims, rhs_dims, attrs


@settings(max_examples=30, deadline=None)
@given(conv=grouped_convolutions(), seed=st.integers(0, 2 ** 31))
def test_grouped_convolutions_split_per_group(conv, seed):
  """With the GEMM-width limits at 1 and no kernel cost, every grouped convolution is split into
  one ungrouped convolution per group, each rewritten: equal to the direct grouped
  convolution."""
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  m.kernel_fixed_flops = 0
  saved = conv_to_dot.MIN_GROUP_CONTRACTION, conv_to_dot.MIN_GROUP_COLUMNS
  conv_to_dot.MIN_GROUP_CONTRACTION = conv_to_dot.MIN_GROUP_COLUMNS = 1
  try:
    assert conv_to_dot.run(m)
  finally:
    conv_to_dot.MIN_GROUP_CONTRACTION, conv_to_dot.MIN_GROUP_COLUMNS = saved
  verify(m)
  assert not any(i.opcode == "convolution" for i in m.entry.instructions)
  assert any("ungrouped convolutions, one per group" in n for n in m.notes), m.notes
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)


@settings(max_examples=30, deadline=None)
@given(conv=grouped_convolutions(), seed=st.integers(0, 2 ** 31))
def test_feature_groups_become_one_batched_product_where_patches_are_read_in_place(conv, seed):
  """Where the backend reads patches in place (the GPU), a grouped convolution becomes one
  product batched over its groups (whatever their width): feature groups with a slice per
  kernel position, batch groups (a weight gradient) with either patch layout, unless each
  group's product is a matrix-vector one (then reductions, ``_rewrite_as_reductions``); equal
  to the direct grouped convolution.  (Feature groups with lhs dilation are first split by
  output phase: ``test_lhs_dilated_convolutions_split_by_output_phase``.)"""
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  m.patches_in_place, m.patch_channel_bytes = True, 4
  conv_instr = m.entry.root
  groups = max(attrs.get("feature_group_count", 1), attrs.get("batch_group_count", 1))
  if conv_to_dot._phase_refusal(conv_instr, m.patch_channel_bytes) is None:
    assert conv_to_dot.run(m)
    assert any("of its output phases" in n for n in m.notes), m.notes
    _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)
    return
  reductions = conv_to_dot._reduction_refusal(conv_instr) is None
  batched = not reductions and (attrs.get("batch_group_count", 1) > 1 or
                                conv_to_dot.patch_layout(conv_instr) == "F")
  conv_to_dot.run(m)
  verify(m)
  notes = [n for n in m.notes if "batched over its" in n]
  assert bool(notes) == batched, m.notes
  assert any("as reductions of products" in n for n in m.notes) == reductions, m.notes
  if batched:
    dots = [i for i in m.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 1 and dots[0].attrs["lhs_batch_dims"] == (0,)
    assert dots[0].dims[0] == groups
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)


@st.composite
def matrix_vector_batch_groups(draw):
  """``convolutions()`` with batch groups (a grouped convolution's weight gradient) whose
  products per group are matrix-vector ones: one batch element or one output feature a group
  (a depthwise convolution's weight gradient: both), the other fewer than a GEMM tile's
  columns."""
  lhs_dims, rhs_dims, attrs = draw(convolutions())
  groups = draw(st.integers(2, 5))
  lspec, rspec, _ = attrs["dimension_numbers"]
  lhs_dims, rhs_dims = list(lhs_dims), list(rhs_dims)
  if draw(st.booleans()):
    lhs_dims[lspec[0]] = 1
  else:
    rhs_dims[rspec[0]] = 1
  lhs_dims[lspec[0]] *= groups
  rhs_dims[rspec[0]] *= groups
  attrs["batch_group_count"] = groups
  return lhs_dims, rhs_dims, attrs


@settings(max_examples=50, deadline=None)
@given(conv=matrix_vector_batch_groups(), seed=st.integers(0, 2 ** 31),
       in_place=st.booleans())
def test_matrix_vector_batch_groups_become_reductions(conv, seed, in_place):
  """A batch-grouped convolution whose groups' products are matrix-vector ones (a depthwise
  weight gradient) becomes, on either backend, reductions of products of its input's windows
  and its kernel: no convolution, no dot, no written patch matrix (no concatenate of windows);
  equal to the direct convolution of the reference backend."""
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  m.patches_in_place, m.patch_channel_bytes = in_place, 4 if in_place else 1
  conv = m.entry.root
  positions = math.prod(conv.dims[d] for d in attrs["dimension_numbers"][2][2:])
  assume(positions <= conv_to_dot.MAX_SLICES)   # (more: refused, the test below)
  assert conv_to_dot.run(m)
  verify(m)
  assert any("as reductions of products" in n for n in m.notes), m.notes
  ops = [i.opcode for i in m.entry.instructions]
  assert "convolution" not in ops and "dot" not in ops
  assert ops.count("reduce") == positions             # one per output position
  assert not any(i.opcode == "concatenate" and i.operands[0].opcode != "reshape"
                 for i in m.entry.instructions)      # (only the results are stacked)
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)


def test_matrix_vector_batch_groups_with_many_output_positions_are_not_reductions():
  """More output positions than ``MAX_SLICES`` (a reduction each) keep the other forms, and
  the result stays the direct convolution's (the example hypothesis found: lhs dilation 2
  makes 5 x 13 positions of a 1x1 kernel)."""
  attrs = {"window_strides": [1, 1], "padding": [(0, 0), (0, 0)], "lhs_dilation": [2, 2],
           "rhs_dilation": [1, 1], "dimension_numbers": ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3)),
           "batch_group_count": 2}
  lhs_dims, rhs_dims = [2, 1, 3, 7], [2, 1, 1, 1]
  m = _module(lhs_dims, rhs_dims, attrs)
  conv_to_dot.run(m)
  verify(m)
  assert not any("as reductions" in n for n in m.notes), m.notes
  rng = np.random.default_rng(0)
  x = rng.standard_normal(lhs_dims).astype(np.float32)
  w = rng.standard_normal(rhs_dims).astype(np.float32)
  direct = reference.compile(_module(lhs_dims, rhs_dims, attrs))(x, w)[0]
  np.testing.assert_allclose(reference.compile(m)(x, w)[0], direct, rtol=1e-6, atol=1e-6)


def test_wide_batch_groups_are_not_reductions():
  """Groups whose products have several rows and several columns (2 batch elements, 2 output
  features a group: operands reused both ways, a GEMM's work) keep the GEMM forms."""
  m = Module("grouped")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (8, 9, 9, 3)))     # 4 groups of 2 batch elements
  w = b.parameter(Shape("f32", (3, 7, 7, 8)))     # (in features, 7x7, 4 groups of 2 out)
  m.entry = b.build(b.convolution(x, w, (1, 1), ((1, 1), (1, 1)), batch_group_count=4,
                                  dimension_numbers=((0, 3, 1, 2), (3, 0, 1, 2), (0, 3, 1, 2))))
  conv_to_dot.run(m)
  assert not any("as reductions" in n for n in m.notes), m.notes


def test_depthwise_gradients_through_jit_match_finite_differences():
  """A depthwise convolution (8 groups of one channel, a channel multiplier of 1 and of 2;
  strides, rhs dilation, padding) through jit on the CPU: its weight gradient (reductions)
  and input gradient against central finite differences of the float64 loss, and against
  eager (the direct convolution)."""
  rng = np.random.default_rng(3)
  with ourjax.experimental.enable_x64():
    for mult, strides, dil, pad in ((1, (1, 1), (1, 1), "SAME"), (2, (2, 1), (1, 2), "VALID"),
                                    (1, (2, 2), (2, 1), ((2, 0), (1, 1)))):
      x = rng.standard_normal((3, 9, 8, 8))
      w = rng.standard_normal((3, 3, 1, 8 * mult)) * 0.3
      s = rng.standard_normal(8 * mult)

      def loss(w, x):
        y = lax.conv_general_dilated(x, w, strides, pad, rhs_dilation=dil,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=8)
        return jnp.sum(jnp.tanh(y) * s)

      gw, gx = ourjax.jit(ourjax.grad(loss, argnums=(0, 1)), backend="cpu")(w, x)
      gw, gx = np.asarray(gw), np.asarray(gx)
      assert gw.dtype == np.float64
      text = ourjax.jit(ourjax.grad(loss), backend="cpu").lower(w, x).compile().as_text()
      assert "batch_group_count" not in text           # the weight gradient: reductions
      for g, arg in ((gw, 0), (gx, 1)):
        for _ in range(3):
          v = rng.standard_normal(g.shape)
          eps = 1e-5
          args = [w, x]
          args[arg] = args[arg] + eps * v
          up = float(loss(*args))
          args[arg] = args[arg] - 2 * eps * v
          down = float(loss(*args))
          np.testing.assert_allclose(np.sum(g * v), (up - down) / (2 * eps), rtol=1e-6,
                                     atol=1e-8)
      ew, ex = ourjax.grad(loss, argnums=(0, 1))(w, x)     # eager: direct convolutions
      np.testing.assert_allclose(gw, np.asarray(ew), rtol=1e-10, atol=1e-12)
      np.testing.assert_allclose(gx, np.asarray(ex), rtol=1e-10, atol=1e-12)


def test_grouped_cnn_forward_and_gradients_through_jit():
  """A grouped 3x3 convolution wide enough for GEMMs (2 groups of 16 channels in, 16 out): jit
  (split per group, each a GEMM) against eager (the direct convolution), with the gradients
  (the weight gradient is a batch-grouped convolution, the input gradient a feature-grouped
  one)."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((4, 16, 16, 32)).astype(np.float32)
  w = (rng.standard_normal((3, 3, 16, 32)) * 0.2).astype(np.float32)

  def f(x, w):
    return lax.conv_general_dilated(x, w, (1, 2), "SAME", feature_group_count=2,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))

  def loss(w, x):
    return jnp.sum(jnp.tanh(f(x, w)) ** 2)

  # (the CPU's GEMMs: on a GPU host jit would run on the GPU, tested by cuda_cases at tf32)
  assert "convolution" not in ourjax.jit(f, backend="cpu").lower(x, w).compile().as_text()
  for fn, args in ((f, (x, w)), (ourjax.grad(loss), (w, x)),
                   (ourjax.grad(loss, argnums=1), (w, x))):
    got = np.asarray(ourjax.jit(fn, backend="cpu")(*args))
    want = np.asarray(fn(*args))                 # eager: the direct convolution
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def test_cnn_forward_and_gradients_through_jit():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((4, 12, 11, 3)).astype(np.float32)
  w = (rng.standard_normal((3, 3, 3, 8)) * 0.3).astype(np.float32)

  def f(x, w):
    return lax.conv_general_dilated(x, w, (2, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))

  def loss(w, x):
    return jnp.sum(jnp.tanh(f(x, w)) ** 2)

  for fn, args in ((f, (x, w)), (ourjax.grad(loss), (w, x)),
                   (ourjax.grad(loss, argnums=1), (w, x))):
    got = np.asarray(ourjax.jit(fn)(*args))
    want = np.asarray(fn(*args))                 # eager: the direct convolution
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@settings(max_examples=25, deadline=None)
@given(conv=convolutions(), per_chunk=st.integers(1, 3), seed=st.integers(0, 2 ** 31))
def test_large_patch_matrices_are_built_in_batch_chunks(conv, per_chunk, seed):
  """A patch matrix over MAX_PATCH_BYTES is built and multiplied per batch chunk (results
  concatenated along the output's batch dimension), equal to the direct convolution."""
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  (c,) = [i for i in m.entry.instructions if i.opcode == "convolution"]
  n = lhs_dims[attrs["dimension_numbers"][0][0]]
  saved = conv_to_dot.MAX_PATCH_BYTES
  conv_to_dot.MAX_PATCH_BYTES = max(1, conv_to_dot._patch_bytes(c) // n) * per_chunk
  try:
    changed = conv_to_dot.run(m)
  finally:
    conv_to_dot.MAX_PATCH_BYTES = saved
  assert changed
  verify(m)
  assert not any(i.opcode == "convolution" for i in m.entry.instructions)
  chunks = -(-n // per_chunk)
  if chunks > 1:
    assert any(f"in {chunks} batch chunks" in note for note in m.notes), m.notes
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)


@st.composite
def dilated_convolutions(draw):
  """``convolutions()`` with lhs dilation (1 to 3) on some dimension and window strides 1 on
  the dilated ones (an input gradient of a strided convolution, a transposed convolution),
  sometimes with feature groups."""
  lhs_dims, rhs_dims, attrs = draw(convolutions())
  nd = len(attrs["lhs_dilation"])
  ld = [draw(st.integers(1, 3)) for _ in range(nd)]
  if all(d == 1 for d in ld):
    ld[draw(st.integers(0, nd - 1))] = draw(st.integers(2, 3))
  attrs["lhs_dilation"] = ld
  attrs["window_strides"] = [1 if d > 1 else s for d, s in zip(ld, attrs["window_strides"])]
  lspec, rspec, _ = attrs["dimension_numbers"]
  for i in range(nd):    # at least one output position
    size = (lhs_dims[lspec[2 + i]] - 1) * ld[i] + 1 + sum(attrs["padding"][i])
    need = (rhs_dims[rspec[2 + i]] - 1) * attrs["rhs_dilation"][i] + 1
    if size < need:
      lo, hi = attrs["padding"][i]
      attrs["padding"][i] = (lo + need - size, hi)
  groups = draw(st.sampled_from([1, 1, 2]))
  if groups > 1:
    lhs_dims, rhs_dims = list(lhs_dims), list(rhs_dims)
    lhs_dims[lspec[1]] *= groups
    rhs_dims[rspec[0]] *= groups
    attrs["feature_group_count"] = groups
  return lhs_dims, rhs_dims, attrs


@settings(max_examples=60, deadline=None)
@given(conv=dilated_convolutions(), seed=st.integers(0, 2 ** 31))
def test_lhs_dilated_convolutions_split_by_output_phase(conv, seed):
  """Where patches are read in place (the GPU), an lhs-dilated convolution with unit window
  strides on its dilated dimensions becomes one undilated convolution per output phase (a
  phase no kernel position meets: zeros), interleaved: no convolution, pad or patch matrix
  reads a dilated input (no interior padding left), each phase's kernel only the positions
  that meet input elements (the phases' kernel positions add up to the kernel's); equal to the
  direct convolution."""
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  m.patches_in_place, m.patch_channel_bytes = True, 4
  conv_instr = m.entry.root
  phased = []
  orig = conv_to_dot._split_phases

  def spy(b, c):
    y, convs = orig(b, c)
    phased.extend(convs)
    return y, convs
  conv_to_dot._split_phases = spy
  try:
    assert conv_to_dot.run(m)
  finally:
    conv_to_dot._split_phases = orig
  verify(m)
  assert any("convolutions of its output phases" in n for n in m.notes), m.notes
  assert all(all(d == 1 for d in c.attrs["lhs_dilation"]) for c in phased)
  rspec = attrs["dimension_numbers"][1]
  taps = [math.prod(c.operands[1].dims[d] for d in rspec[2:]) for c in phased]
  # (along each dimension a kernel position meets input elements in one phase only: the
  # phases' kernels are a partition of the kernel, less the phases without outputs)
  assert sum(taps) <= math.prod(rhs_dims[d] for d in rspec[2:])
  for i in m.entry.instructions:
    assert not (i.opcode == "pad" and any(c[2] for c in i.attrs["padding_config"])), i
    assert not (i.opcode == "convolution" and any(d > 1 for d in i.attrs["lhs_dilation"])), i
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)


@st.composite
def feature_grouped_convolutions(draw):
  """``convolutions()`` with feature groups (2 or 3), more often than not a channels-last
  output (whose swap of the groups is the only transpose after the product)."""
  lhs_dims, rhs_dims, attrs = draw(convolutions())
  groups = draw(st.integers(2, 3))
  lspec, rspec, ospec = attrs["dimension_numbers"]
  lhs_dims, rhs_dims = list(lhs_dims), list(rhs_dims)
  lhs_dims[lspec[1]] *= groups
  rhs_dims[rspec[0]] *= groups
  attrs["feature_group_count"] = groups
  if draw(st.integers(0, 2)):
    rank = len(ospec)
    attrs["dimension_numbers"] = (lspec, rspec, (0, rank - 1) + tuple(range(1, rank - 1)))
  return lhs_dims, rhs_dims, attrs


@settings(max_examples=30, deadline=None)
@given(conv=feature_grouped_convolutions(), seed=st.integers(0, 2 ** 31))
def test_grouped_convolution_epilogues_come_before_the_group_swap(conv, seed):
  """Where dots run their elementwise consumers as epilogues and patches are read in place
  (the GPU), a per-output-feature scale, shift and relu after a feature-grouped convolution
  (one product [G, rows, Og] swapped into the output's feature order) are moved before the
  swap (``simplify_sinks.sink_group_transpose``, ``sink_reshape``'s whole-group broadcasts): no
  elementwise op reads a transpose, the dot's result feeds them directly; equal to the
  direct convolution's on the reference backend."""
  from ourjax.lowering.passes import simplify
  lhs_dims, rhs_dims, attrs = conv
  lspec, rspec, ospec = attrs["dimension_numbers"]
  o = rhs_dims[rspec[0]]
  m = Module("conv")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", lhs_dims))
  w = b.parameter(Shape("f32", rhs_dims))
  s = b.parameter(Shape("f32", (o,)))
  y = b.convolution(x, w, **attrs)
  f = ospec[1]
  t = b.add(b.multiply(y, b.broadcast(s, y.dims, (f,))), b.broadcast(s, y.dims, (f,)))
  m.entry = b.build(b.maximum(t, b.full(0.0, t.shape)))
  verify(m)
  m.patches_in_place, m.patch_channel_bytes, m.dot_epilogues = True, 4, True
  conv_instr = y
  if conv_to_dot._phase_refusal(conv_instr, 4) is None or \
     not conv_to_dot._grouped_in_place(conv_instr, 4):
    assume(False)
  conv_to_dot.run(m)
  while simplify.run(m):
    pass
  verify(m)
  dots = [i for i in m.entry.instructions if i.opcode == "dot"]
  assert len(dots) <= 1      # (none: a contraction of one term, a product)
  rank = len(ospec)
  if dots and tuple(ospec) == (0, rank - 1) + tuple(range(1, rank - 1)):   # (channels-last)
    for i in m.entry.instructions:
      if i.opcode in ("multiply", "add", "maximum"):
        assert all(op.opcode != "transpose" for op in i.operands), i
    assert any(dots[0] in i.operands and i.opcode == "multiply" for i in m.entry.instructions)
  rng = np.random.default_rng(seed)
  args = [rng.standard_normal(d).astype(np.float32) for d in (lhs_dims, rhs_dims, (o,))]
  direct = Module("direct")
  b = Builder(direct, "main")
  xs = [b.parameter(Shape("f32", d)) for d in (lhs_dims, rhs_dims, (o,))]
  y = b.convolution(xs[0], xs[1], **attrs)
  t = b.add(b.multiply(y, b.broadcast(xs[2], y.dims, (f,))), b.broadcast(xs[2], y.dims, (f,)))
  direct.entry = b.build(b.maximum(t, b.full(0.0, t.shape)))
  want = reference.compile(direct)(*args)[0]
  got = reference.compile(m)(*args)[0]
  terms = math.prod(rhs_dims) // o
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=4 * terms * 6e-8 * 16 * 4)


@settings(max_examples=40, deadline=None)
@given(conv=convolutions(), seed=st.integers(0, 2 ** 31))
@example(conv=([3, 4, 6, 2], [4, 4, 2, 5], dict(   # (layout "W": 16 kernel positions, 3 outputs)
    window_strides=[1, 1], padding=[(0, 0), (0, 0)], lhs_dilation=[1, 1], rhs_dilation=[1, 1],
    dimension_numbers=((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)))), seed=0)
def test_patches_read_in_place_fill_whole_copies_in_either_layout(conv, seed):
  """Where patches are read in place in copies of ``patch_channel_bytes`` (here 8: two f32),
  every product's contraction is whole copies -- a kernel position's channels, or a weight
  gradient's (layout "W") batch elements, zero-padded in both operands -- and the result is
  the direct convolution's."""
  lhs_dims, rhs_dims, attrs = conv
  m = _module(lhs_dims, rhs_dims, attrs)
  m.patches_in_place, m.patch_channel_bytes = True, 8
  conv_to_dot.run(m)
  verify(m)
  for d in (i for i in m.entry.instructions if i.opcode == "dot"):
    lhs = d.operands[0]
    k = math.prod(lhs.dims[j] for j in d.attrs["lhs_contracting_dims"])
    assert k % 2 == 0, (d, m.notes)
  _assert_equals_direct(m, lhs_dims, rhs_dims, attrs, seed)
