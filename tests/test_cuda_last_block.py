"""A split reduction of one output finished by the last block of the launch that computes its
partials (``backends/cuda/last_block.py``): one launch instead of two, in straight-line code and
in every iteration of a loop; the PTX is assembled here, the numbers checked on a GPU (repeated
calls and loop iterations: the block counter must come back to zero after every launch)."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

from test_ptx import PTXAS, _assemble


def _has_gpu():
  try:
    return bool(ourjax.devices("cuda"))
  except Exception:
    return False


def _mean_sq(x):
  return jnp.mean(x * x) + 1.0


def _scan(x):
  def body(s, _):
    s = s * 0.999 + 0.001 * jnp.roll(s, 1)
    return s, jnp.sum(s * s)
  return lax.scan(body, x, None, length=37)


CASES = [("mean", _mean_sq, lambda r: (r.standard_normal(300_001).astype(np.float32),)),
         ("scan", _scan, lambda r: (r.standard_normal(50_000).astype(np.float32),))]


@pytest.mark.parametrize("name,f,make", CASES)
def test_one_launch_and_the_numbers(name, f, make, monkeypatch):
  args = make(np.random.default_rng(0))
  c = ourjax.jit(f, backend="cuda").lower(*args).compile()
  kinds = [type(k).__name__ for k in c.runtime_executable().kernels]
  assert "FinishInLastBlock" in kinds and "SplitFinish" not in kinds, kinds
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))
  monkeypatch.setenv("OURJAX_CUDA_LAST_BLOCK", "0")
  apart = ourjax.jit(f, backend="cuda").lower(*args).compile()
  assert "SplitFinish" in [type(k).__name__ for k in apart.runtime_executable().kernels]
  if _has_gpu():
    want = ourjax.jit(f, backend="reference")(*args)
    for _ in range(4):        # plain launches, then graph replays: the counter wraps each time
      got, two = c(*args), apart(*args)
      for g, t, w in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(two),
                         ourjax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(t))   # same order of sums
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=1e-5)


