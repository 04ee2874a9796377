"""Memory planning of the native backends beyond buffer reuse (``test_cpu_buffer_reuse.py``):
the entry's schedule counts each element of a tuple-shaped result apart (``llvm/schedule.py``),
a dying temporary that starts several while-loop state elements becomes one of them
(``Planner._plan_while``), temporaries live in output buffers not yet written
(``arena._hosted``).  Each plan is compared with the plan the same program gets without the
mechanism, and the numbers with the reference backend."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from cpu_targets import cpu_default  # noqa: F401  (autouse: the CPU as the default backend)
from ourjax import lax


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
# temporaries inside outputs not yet written


def _two_layer_grad():
  def loss(w1, w2, x):
    h = ourjax.nn.relu(x @ w1 + 0.1)
    return jnp.sum((h @ w2) ** 2)
  rng = np.random.default_rng(2)
  args = (rng.standard_normal((256, 256)).astype(np.float32) * 0.1,
          # (128 outputs: the GEMM packs a narrow product's A, or one whose B it packs once,
          # a row panel at a time; with 32 or 64 outputs the GEMMs' scratch, that small,
          # left too little of the unhosted arena for hosting to save an activation)
          rng.standard_normal((256, 128)).astype(np.float32) * 0.1,
          rng.standard_normal((128, 256)).astype(np.float32))
  return ourjax.grad(loss, argnums=(0, 1)), args


def _hosting_off(monkeypatch):
  from ourjax.backends.llvm import arena
  monkeypatch.setattr(arena, "_hosted", lambda *a: {})


def test_temporaries_live_in_outputs_not_yet_written(no_disk_cache, monkeypatch):
  """The forward activations die before the first layer's weight gradient (an output) is
  written: they live in that output's buffer, and the arena shrinks by at least one of them
  against the plan that keeps every temporary in the arena; the gradients equal the
  reference's."""
  g, args = _two_layer_grad()
  hosted = _temp(g, *args)
  got = _compiled(g, *args)(*args)
  _hosting_off(monkeypatch)
  plain = _temp(g, *args)
  assert hosted <= plain - 128 * 256 * 4, (hosted, plain)
  _close(got, _reference(g, *args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("steps", [1, 7])
def test_temporaries_in_outputs_with_loops_and_donation(steps, no_disk_cache):
  """Outputs written inside a loop, outputs written into donated parameters and temporaries
  that may live in outputs, all in one program: every result equals the reference's over
  repeated calls (an output holding a temporary is written only after the temporary's last
  use; a loop's outputs hold nothing, being touched from the loop's start)."""
  def step(w, x):
    def body(c, xi):
      c = jnp.tanh(c @ w + xi)
      return c, c.sum()
    c, sums = lax.scan(body, x[0], x[1:steps + 1])
    h = jnp.sin(x @ w)          # (a temporary that dies before the update below)
    return w - 0.01 * (h.T @ h), c, sums
  rng = np.random.default_rng(5)
  w = rng.standard_normal((64, 64)).astype(np.float32) * 0.1
  x = rng.standard_normal((steps + 1, 64)).astype(np.float32)
  want = _reference(step, w, x)
  f = ourjax.jit(step, donate_argnums=0)
  for _ in range(3):
    got = f(ourjax.device_put(w), x)
    _close(got, want, rtol=1e-4, atol=1e-4)
