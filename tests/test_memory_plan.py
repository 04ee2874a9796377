"""Memory planning of the native backends beyond buffer reuse (``test_cpu_buffer_reuse.py``):
the entry's schedule counts each element of a tuple-shaped result apart (``llvm/schedule.py``),
a dying temporary that starts several while-loop state elements becomes one of them
(``Planner._plan_while``), a relu's gradient mask reads the relu's output (``simplify``'s
``compare_positive_of_relu`` and the fusion pass's stored-anyway rule).  Each plan is compared
with the plan the same program gets without the mechanism, and the numbers with the reference
backend."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)
from ourjax import lax
from ourjax.lowering.passes import simplify


def _compiled(f, *args):
  return ourjax.jit(f).lower(*args).compile()


def _temp(f, *args):
  """The arena of ``f`` compiled afresh (no cached executable from another plan)."""
  ourjax.clear_caches()
  return _compiled(f, *args).memory_analysis().temp_size_in_bytes


def _reference(f, *args):
  return ourjax.jit(f, backend="reference")(*args)


def _close(got, want, rtol=2e-5, atol=1e-5):
  for g, w in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


@pytest.fixture
def no_disk_cache(monkeypatch):
  monkeypatch.setenv("OURJAX_CACHE_DIR", "off")


# ---------------------------------------------------------------------------------------------
# the schedule: tuple elements die one by one


def _residuals_program(steps=24, n=2048):
  """A scan whose two stacked outputs die at different places: ``a`` is read by one reduction
  after a second loop that reads only ``b`` (and stacks outputs of its own)."""
  def f(x, w):
    def fwd(c, _):
      c = jnp.tanh(c * w + 0.5)
      return c, (c, c * c)
    _, (a, b) = lax.scan(fwd, x, None, length=steps)

    def bwd(c, y):
      return jnp.sin(c + y), (c * y, c - y)
    c, (d, e) = lax.scan(bwd, x, b)
    return c.sum() + (d * e).sum(), (a * a).sum()
  rng = np.random.default_rng(0)
  return f, (rng.standard_normal(n).astype(np.float32),
             rng.uniform(0.5, 1.0, n).astype(np.float32))


def test_scheduler_counts_tuple_elements_apart(no_disk_cache):
  """The list scheduler runs the reduction of ``a`` before the second loop (``a`` dies before
  it), which the model that counted the first loop's whole state as one array could not see;
  the arena shrinks by at least ``a``'s bytes against the unscheduled plan."""
  f, args = _residuals_program()
  comp = _compiled(f, *args)
  assert any(n.startswith("schedule:") for n in comp._executable.module.notes)
  scheduled = comp.memory_analysis().temp_size_in_bytes
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("OURJAX_SCHEDULE", "0")
    plain = _temp(f, *args)
  stack = 24 * 2048 * 4
  assert scheduled <= plain - stack, (scheduled, plain)
  _close(comp(*args), _reference(f, *args), rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# while loops: a dying initial value is one element's state


def test_loop_state_takes_a_dying_initial_value(no_disk_cache):
  """A scan with three stacked outputs starts them all from one array of zeros: that array,
  which dies at the loop, becomes the first output's state and the others copy it, so the
  arena holds three stacks (and the loop's small buffers), not four."""
  T, n = 16, 4096

  def f(x):
    def body(c, _):
      c = jnp.cos(c) * 0.9
      return c, (c, c + 1.0, c * 2.0)
    _, ys = lax.scan(body, x, None, length=T)
    return ys[0].sum() + ys[1].sum() + ys[2].sum()
  x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
  comp = _compiled(f, x)
  stack = T * n * 4
  temp = comp.memory_analysis().temp_size_in_bytes
  assert temp < 4 * stack, (temp, stack)
  _close(comp(x), _reference(f, x), rtol=1e-4, atol=1e-2)


# ---------------------------------------------------------------------------------------------
# relu: the mask from the relu's output


def _mlp_grad():
  def loss(w1, w2, x):
    h = ourjax.nn.relu(x @ w1 + 0.1)     # (its derivative: where(z > 0, g, 0))
    return jnp.sum((h @ w2) ** 2)
  rng = np.random.default_rng(2)
  args = (rng.standard_normal((256, 256)).astype(np.float32) * 0.1,
          rng.standard_normal((256, 32)).astype(np.float32) * 0.1,
          rng.standard_normal((128, 256)).astype(np.float32))
  return ourjax.grad(loss, argnums=(0, 1)), args


def test_relu_mask_reads_the_relu_output(no_disk_cache, monkeypatch):
  """The gradient of relu(x @ w1 + b) @ w2 keeps the relu's output for w2's gradient; its mask
  read from that output lets the pre-activation die in the forward pass (it is never stored:
  the relu is the product's epilogue), and the arena is smaller than without the rewrite."""
  g, args = _mlp_grad()
  with_rule = _temp(g, *args)
  comp = _compiled(g, *args)
  entry = comp._executable.module.entry
  # x @ w1 is computed once, in the kernel that stores relu(x @ w1 + b): nothing else reads
  # w1, so no pre-activation is kept for the backward pass
  (w1,) = [x for x in entry.parameters if x.attrs["parameter_number"] == 0]
  assert len(w1.users) == 1 and w1.users[0].opcode == "fusion", [u.name for u in w1.users]
  got = comp(*args)
  rules = dict(simplify.RULES)
  rules["compare"] = tuple(r for r in rules.get("compare", ())
                           if r is not simplify.compare_positive_of_relu)
  monkeypatch.setattr(simplify, "RULES", rules)
  without = _temp(g, *args)
  assert with_rule < without, (with_rule, without)
  _close(got, _reference(g, *args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("direction", ["gt", "lt"])
def test_relu_mask_rewrite_is_exact(direction, no_disk_cache):
  """x > 0 (and 0 < x) equals max(x, 0) > 0 for NaN, infinities, both zeros and the smallest
  subnormals: the compiled program that the rewrite changes gives the reference's bits."""
  specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.0, -2.0],
                      np.float32)
  x = np.resize(specials, (8, 40)).astype(np.float32)
  w = np.random.default_rng(3).standard_normal((40, 16)).astype(np.float32)
  g = np.random.default_rng(4).standard_normal((8, 40)).astype(np.float32)

  def f(x, w, g):
    h = jnp.maximum(x, 0.0)
    mask = (x > 0) if direction == "gt" else (0 < x)
    return h @ w, jnp.where(mask, g, 0.0)
  comp = _compiled(f, x, w, g)
  assert any("max(x, 0) > 0" in n for n in comp._executable.module.notes)
  got = comp(x, w, g)
  want = _reference(f, x, w, g)
  np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
  np.testing.assert_array_equal(np.asarray(got[1]), np.where(x > 0, g, 0.0))


def test_relu_mask_rewrite_fires_only_where_max_is_computed():
  """Without a max(x, 0) of the same x, a comparison stays as it is."""
  from ourjax.lowering import hlo
  b = hlo.Builder(hlo.Module("m"), "main")
  x = b.parameter(hlo.Shape(np.float32, (4,)), "x")
  zero = b.broadcast(b.constant(0.0, np.float32), (4,), ())
  c = b.gt(x, zero)
  comp = b.build(b.tuple([c]))
  ctx = simplify.Ctx(comp, False)
  assert simplify.compare_positive_of_relu(c, ctx) is None
