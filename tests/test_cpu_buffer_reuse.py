"""The CPU planner's buffer reuse (``llvm/reuse.py``, ``GroupPlanner._dot_home``) and arena
placement (``arena._assign``): a value is computed in the buffer of a value that dies where
it is read elementwise, a dot straight into its elementwise consumer's output, a donated
training step updates its parameters in place.  Each is checked on ``memory_analysis()``
against the bytes that must be live at the step's peak (the GEMM's packing scratch, the
control block), and on the numbers, against the reference backend."""
import numpy as np

import ourjax
import ourjax.numpy as jnp
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)
from ourjax import lax
from ourjax.backends.cpu import backend as cpu_backend
from ourjax.backends.llvm import arena as A
from ourjax.backends.llvm import planning as P
from ourjax.backends.llvm.dots import (DotKernel, Im2colDotKernel, dot_pieces,
                                       dot_scratch_bytes)


def _aligned(n):
  return (n + P.ALIGN - 1) // P.ALIGN * P.ALIGN


def _compiled(f, *args, **kw):
  return ourjax.jit(f, **kw).lower(*args).compile()


def _plan(compiled):
  """(planner, steps) of a compiled module, planned again as the CPU backend plans it."""
  module = compiled._executable.module
  planner, steps, _, _, _ = P.plan_entry(module, cpu_backend._Planner)
  return planner, steps


def _kernels(steps):
  return [s.kernel for s in steps if isinstance(s, P.KernelStep)]


def _dot_scratch(compiled):
  """Aligned bytes of the packing scratch of each dot of the compiled module as planned: one
  area per thread running its pieces (``dots.dot_scratch``), each checked against the GEMM's
  formula (``dot_scratch_bytes``)."""
  _, steps = _plan(compiled)
  out = []
  for k in _kernels(steps):
    if isinstance(k, DotKernel):
      (buf,) = k.scratch
      spec, pieces = k.spec, dot_pieces(k.spec, cpu_backend.num_threads())
      one = dot_scratch_bytes(spec, pieces, isinstance(k, Im2colDotKernel),
                              b_packed=k.packed_b is not None, blocking=k.blocking,
                              direct_a=getattr(k, "direct_a", False))
      slots = min(pieces, cpu_backend.num_threads())
      assert buf.slot_bytes >= one and \
          buf.nbytes == buf.first_slot_bytes + (slots - 1) * buf.slot_bytes
      out.append(_aligned(buf.nbytes))
  return out


def _reference(f, *args):
  return ourjax.jit(f, backend="reference")(*args)


def _close(got, want, rtol=2e-5):
  for g, w in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, np.abs(w).max()))


def test_a_dot_is_computed_in_the_output_its_consumer_updates_in_place():
  # w - lr * x^T g (a kOutput fusion: the dot, then an elementwise pass): the weight gradient
  # has no temporary; the arena holds the GEMM's packing only
  rng = np.random.default_rng(0)
  w = rng.standard_normal((256, 128), np.float32)
  x = rng.standard_normal((64, 256), np.float32)
  g = rng.standard_normal((64, 128), np.float32)

  def step(w, x, g):
    return w - 0.1 * (x.T @ g)
  c = _compiled(step, w, x, g)
  planner, steps = _plan(c)
  (scratch,) = _dot_scratch(c)
  stats = c.memory_analysis()
  assert stats.temp_size_in_bytes == scratch
  kinds = [type(k).__name__ for k in _kernels(steps)]
  assert kinds == ["DotKernel", "LoopKernel"]
  dot, upd = _kernels(steps)
  assert dot.out.kind == "output" and dot.out is upd.outputs[0][1]
  _close(c(w, x, g), _reference(step, w, x, g))


def test_a_convolutions_epilogue_runs_in_place_in_its_output():
  # conv + folded batchnorm + relu: the GEMM writes C into the output and the block epilogue
  # (scale, shift, relu) updates it there, as each block is finished
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 20, 20, 32), np.float32)
  k = rng.standard_normal((3, 3, 32, 32), np.float32) * 0.1
  scale = rng.uniform(0.5, 1.5, 32).astype(np.float32)
  shift = rng.standard_normal(32).astype(np.float32)

  def f(x, k, scale, shift):
    y = lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.maximum(y * scale + shift, 0.0)
  c = _compiled(f, x, k, scale, shift)
  planner, steps = _plan(c)
  (kern,) = _kernels(steps)
  assert type(kern).__name__ == "Im2colDotKernel" and kern.epilogue is not None
  assert kern.out.kind == "output"
  (scratch,) = _dot_scratch(c)
  stats = c.memory_analysis()
  assert stats.temp_size_in_bytes == scratch
  _close(c(x, k, scale, shift), _reference(f, x, k, scale, shift), rtol=1e-4)


def test_an_elementwise_result_takes_the_buffer_of_the_operand_that_dies_there():
  x = np.random.default_rng(2).standard_normal(4096).astype(np.float32)

  def f(x):
    s = jnp.sort(x)
    return jnp.sort(jnp.exp(-s) * 3.0 + s)      # s dies in the elementwise pass
  c = _compiled(f, x)
  planner, steps = _plan(c)
  sort1, ew, sort2 = _kernels(steps)
  assert type(ew).__name__ == "LoopKernel"
  assert ew.outputs[0][1] is sort1.outs[0]       # computed over s, in place
  assert sort2.outs[0].kind == "output"
  # live at the peak: one [4096] buffer and a sort's scratch
  scratch = max(_aligned(b.nbytes) for k in (sort1, sort2) for b in k.scratch)
  stats = c.memory_analysis()
  assert stats.temp_size_in_bytes == _aligned(x.nbytes) + scratch
  _close(c(x), _reference(f, x))


def test_an_operand_that_dies_in_an_outputs_elementwise_pass_is_computed_in_that_output():
  x = np.random.default_rng(3).standard_normal(4096).astype(np.float32)

  def f(x):
    return jnp.sort(x) * 2.0 + 1.0
  c = _compiled(f, x)
  planner, steps = _plan(c)
  sort, ew = _kernels(steps)
  assert sort.outs[0].kind == "output" and ew.outputs[0][1] is sort.outs[0]
  (scratch,) = [_aligned(b.nbytes) for b in sort.scratch]
  stats = c.memory_analysis()
  assert stats.temp_size_in_bytes == scratch
  _close(c(x), _reference(f, x))


def test_no_sharing_where_the_operand_is_read_at_other_indices():
  x = np.random.default_rng(4).standard_normal(4096).astype(np.float32)

  def f(x):
    s = jnp.sort(x)
    return jnp.sort(s[::-1] * 2.0 + s)           # reversed: not read where written
  c = _compiled(f, x)
  planner, steps = _plan(c)
  sort1, ew, sort2 = _kernels(steps)
  assert ew.outputs[0][1] is not sort1.outs[0]
  _close(c(x), _reference(f, x))


def _mlp(rng, sizes):
  return [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
           np.zeros(n, np.float32)) for m, n in zip(sizes[:-1], sizes[1:])]


def _sgd_step(params, x, y):
  def loss(params):
    h = x
    for i, (w, b) in enumerate(params):
      h = h @ w + b
      if i < len(params) - 1:
        h = jnp.maximum(h, 0.0)
    return jnp.mean((h - y) ** 2)
  value, grads = ourjax.value_and_grad(loss)(params)
  return ourjax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value


def test_a_donated_training_step_updates_its_parameters_in_place():
  rng = np.random.default_rng(5)
  params = _mlp(rng, (128, 256, 64))
  x = rng.standard_normal((32, 128), np.float32)
  y = rng.standard_normal((32, 64), np.float32)
  nbytes = sum(a.nbytes for p in params for a in p)
  plain = _compiled(_sgd_step, params, x, y)
  donated = _compiled(_sgd_step, params, x, y, donate_argnums=0)
  rt = donated.runtime_executable()
  assert rt.meta["alias_kinds"] == ["direct"] * 4    # no copy of any parameter
  s0, s1 = plain.memory_analysis(), donated.memory_analysis()
  assert s1.alias_size_in_bytes == nbytes
  # (a weight's update w - lr * x^T g reads w: the donated step computes the gradient in a
  # temporary, where the plain one computes it in its output and updates it there; the plain
  # step also keeps dots' packing scratch in outputs not yet written, which the donated one
  # cannot: its outputs are the parameters, read until they are updated)
  largest = max(a.nbytes for p in params for a in p) + max(_dot_scratch(plain))
  assert s1.temp_size_in_bytes <= s0.temp_size_in_bytes + largest
  peak = lambda s: (s.argument_size_in_bytes + s.output_size_in_bytes +  # noqa: E731
                    s.temp_size_in_bytes - s.alias_size_in_bytes)
  assert peak(s1) <= peak(s0) - nbytes + largest
  want = _reference(_sgd_step, params, x, y)
  _close(plain(params, x, y), want, rtol=1e-4)
  fresh = ourjax.tree_util.tree_map(lambda a: ourjax.jit(lambda v: v + 0)(a), params)
  _close(donated(fresh, x, y), want, rtol=1e-4)


def test_the_arena_is_no_larger_than_the_bytes_live_at_its_peak_in_either_order():
  # buffers of mixed sizes whose first-use order fragments the arena: the placement by size
  # fits them in the bytes live at the busiest step
  rng = np.random.default_rng(6)
  x = rng.standard_normal(1024).astype(np.float32)

  def f(x):
    a = jnp.sort(x)                     # 4 KiB, live to the end
    b = jnp.sort(jnp.tile(x, 4))        # 16 KiB, dies at c
    c = jnp.sort(b[::2]) + a[0]         # 8 KiB
    d = jnp.sort(jnp.tile(c, 3))        # 24 KiB
    return d[:1024] + a
  c = _compiled(f, x)
  planner, steps = _plan(c)
  arena = A._assign(planner, steps)
  live = {}
  for t, k in enumerate(_kernels(steps)):
    for b in k.buffers:
      if b.kind in ("temp", "scratch"):
        live.setdefault(id(b), [t, t, _aligned(max(b.nbytes, 1))])[1] = t
  peak = max(sum(n for f0, l0, n in live.values() if f0 <= t <= l0)
             for t in range(len(steps)))
  assert arena <= peak
  _close(c(x), _reference(f, x))


def test_a_softmax_over_the_last_dimension_runs_in_place_over_its_scores(monkeypatch):
  # the softmax reads its row of the scores (max, sum, then each element) before writing it:
  # computed over the scores, which die there; live at the peak: the scores and the second
  # dot's packing scratch (the first dot's lives in the output, which only the second dot
  # writes; the CPU's fused attention off: it would never write the scores)
  monkeypatch.setenv("OURJAX_CPU_ATTENTION", "0")
  rng = np.random.default_rng(9)
  q, k, v = (rng.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(3))

  def attend(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", ourjax.nn.softmax(s, axis=-1), v)
  c = _compiled(attend, q, k, v)
  planner, steps = _plan(c)
  kernels = _kernels(steps)
  scores = kernels[0].out
  assert any(type(kk).__name__ == "LoopKernel" and kk.outputs[0][1] is scores
             for kk in kernels[1:])
  assert [type(kk).__name__ for kk in kernels] == ["DotKernel", "LoopKernel", "DotKernel"]
  expect = _aligned(scores.nbytes) + _dot_scratch(c)[-1]
  assert c.memory_analysis().temp_size_in_bytes == expect
  _close(c(q, k, v), _reference(attend, q, k, v))


def test_a_sorts_scratch_is_sized_for_the_pieces_it_runs_as():
  x = np.random.default_rng(7).standard_normal((4, 4096)).astype(np.float32)
  c = _compiled(lambda x: jnp.sort(x, axis=1), x)
  planner, steps = _plan(c)
  (sort,) = _kernels(steps)
  assert sort.chunks < P.MAX_THREADS
  (scratch,) = sort.scratch
  assert scratch.nbytes == 2 * 4096 * 8 * sort.chunks + 64     # two i64 arrays a piece
  stats = c.memory_analysis()
  assert stats.temp_size_in_bytes == _aligned(scratch.nbytes)
  _close(c(x), _reference(lambda x: jnp.sort(x, axis=1), x))


def test_the_entry_runs_in_an_order_that_frees_values_before_making_others():
  # three independent chains (a sort of a growing array, then a small sample of it) traced
  # one stage after another: run chain by chain, each large sort is dead before the next
  x = np.random.default_rng(8).standard_normal(4096).astype(np.float32)

  def f(x):
    a = jnp.sort(x)
    b = jnp.sort(jnp.tile(x, 2))
    c = jnp.sort(jnp.tile(x, 3))
    return jnp.sort(a[::64]) + jnp.sort(b[::128]) + jnp.sort(c[::192])
  c = _compiled(f, x)
  planner, steps = _plan(c)
  sorts = [k for k in _kernels(steps) if type(k).__name__ == "SortKernel"]
  big = max(sorts, key=lambda k: k.n)
  # live while the largest sort runs: its input and output, its scratch, and the two sorted
  # samples of the chains before it (a and b and their tiles are dead)
  expect = (2 * _aligned(3 * x.nbytes) +
            _aligned(big.scratch[0].nbytes) + 2 * _aligned(64 * 4))
  assert c.memory_analysis().temp_size_in_bytes == expect
  _close(c(x), _reference(f, x))


def test_residual_blocks_are_computed_over_their_convolutions_outputs():
  # each block's output relu(conv(h) * s + x), which the fusion pass duplicates into the next
  # block's convolution and its residual add, is written once, over the convolution's output
  # (which dies there), and read by the next block's add: live at the peak are the block input,
  # h and the convolution output (3 activations; 6 when each block recomputed its output from
  # every earlier convolution output, all kept alive), besides one dot's packing scratch
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 32, 32, 16), np.float32)
  ws = [rng.standard_normal((3, 3, 16, 16), np.float32) * 0.1 for _ in range(7)]

  def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))

  def f(x, ws):
    x = jnp.maximum(conv(x, ws[0]) * 0.9 + 0.1, 0.0)
    for b in range(3):
      h = jnp.maximum(conv(x, ws[1 + 2 * b]) * 1.1 - 0.1, 0.0)
      x = jnp.maximum(conv(h, ws[2 + 2 * b]) * 0.8 + x, 0.0)
    return jnp.mean(x, axis=(1, 2))
  c = _compiled(f, x, ws)
  _, steps = _plan(c)
  acts = c.memory_analysis().temp_size_in_bytes - \
      max(_dot_scratch(c))
  assert acts <= 3 * x.nbytes
  _close(c(x, ws), _reference(f, x, ws), rtol=1e-4)
