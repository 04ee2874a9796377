"""Loop kernels that read an input transposed (its rows along a dimension of the output other
than the last) write the output in tiles (``kernels.LoopKernel.tiled``): which kernels are
tiled, and their values against NumPy for transposes of two to four dimensions, edge tiles,
elementwise work around the transpose and several dtypes, on one thread and several."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.llvm import kernels as K


def _loop_kernels(fn, *args):
  """The LoopKernels ``fn`` compiles to on the CPU (planned afresh: no disk cache)."""
  made = []
  orig = K.LoopKernel.__init__

  def init(self, *a, **k):
    orig(self, *a, **k)
    made.append(self)
  K.LoopKernel.__init__ = init
  try:
    ourjax.jit(fn, backend="cpu").lower(*args).compile()
  finally:
    K.LoopKernel.__init__ = orig
  return made


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch, tmp_path):
  monkeypatch.setenv("OURJAX_CACHE_DIR", str(tmp_path))


def test_which_loop_kernels_are_tiled():
  big = np.ones((512, 384), np.float32)
  (k,) = _loop_kernels(lambda a: a.T, big)
  assert k.tiled == (0, 32, 32)                      # rows of `a` run along output dim 0
  assert k._vector_transpose() is not None           # a plain transpose: register blocks
  (k,) = _loop_kernels(lambda a: a.T, np.ones((528, 400), np.float32))
  assert k.tiled == (0, 8, 16) and k._vector_transpose() is not None   # (528 % 32 != 0)
  (k,) = _loop_kernels(lambda a: a.T, np.ones((512, 396), np.float32))
  assert k.tiled == (0, 8, 16) and k._vector_transpose() is None       # (396 % 8 != 0)
  (k,) = _loop_kernels(lambda a: a.T, big.astype(np.int16))
  assert k.tiled == (0, 8, 32) and k._vector_transpose() is None       # (16-bit elements)
  (k,) = _loop_kernels(lambda a: jnp.tanh(a.T) * 2 + 1, big)
  assert k.tiled == (0, 8, 16)                       # through elementwise work
  assert k._vector_transpose() is None
  (k,) = _loop_kernels(lambda a: a.T.astype(np.float16), big)
  assert k.tiled == (0, 8, 32)                       # a tile's row: a line of the output
  (k,) = _loop_kernels(lambda a: a.T, big.astype(np.int8))
  assert k.tiled == (0, 8, 64)
  (k,) = _loop_kernels(lambda a: jnp.transpose(a, (1, 0, 2)), np.ones((64, 48, 512),
                                                                       np.float32))
  assert k.tiled is None                             # the last dimension stays last
  (k,) = _loop_kernels(lambda a: a.T, np.ones((64, 512), np.float32))
  assert k.tiled is None                             # output rows of 64 lines stay in L1
  (k,) = _loop_kernels(lambda a: a * 2, big)
  assert k.tiled is None
  c = np.ones((8, 300, 700), np.float32)
  (k,) = _loop_kernels(lambda a: jnp.transpose(a, (2, 0, 1)), c)
  assert k.tiled == (0, 8, 16)
  (k,) = _loop_kernels(lambda a: jnp.transpose(a, (0, 2, 1)), c)
  assert k.tiled == (1, 8, 16)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_tiled_transposes_match_numpy(data):
  rank = data.draw(st.integers(2, 4))
  dims = [data.draw(st.integers(1, 5)) for _ in range(rank - 2)]
  dims += [data.draw(st.integers(33, 300)), data.draw(st.integers(200, 700))]
  perm = data.draw(st.permutations(range(rank)))
  dt = data.draw(st.sampled_from([np.float32, np.int8, np.int32, np.float16]))
  x = (np.random.default_rng(0).standard_normal(dims) * 8).astype(dt)
  two, one = np.array(2, dt), np.array(1, dt)
  got = ourjax.jit(lambda a: jnp.transpose(a, perm) * two + one, backend="cpu")(x)
  want = np.transpose(x, perm) * two + one
  np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("threads", ["1", "4"])
def test_tiled_transpose_edges_and_threads(monkeypatch, threads):
  monkeypatch.setenv("OURJAX_CPU_THREADS", threads)
  x = np.arange(1000 * 777, dtype=np.float32).reshape(1000, 777)
  y = np.arange(777, dtype=np.float32)
  f = ourjax.jit(lambda a, b: (a.T + b[:, None], jnp.exp(a.T * 1e-6)), backend="cpu")
  s, e = f(x, y)
  np.testing.assert_array_equal(np.asarray(s), x.T + y[:, None])
  np.testing.assert_allclose(np.asarray(e), np.exp(x.T * np.float32(1e-6)), rtol=2e-6)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_plain_transposes_in_register_blocks_match_numpy(data):
  """Plain transposes (``LoopKernel._vector_transpose_body`` where the element is 32 bits and
  the tile's dimensions are multiples of the block; element by element otherwise), of two to
  four dimensions, on one thread and several: NumPy's values bit for bit."""
  rank = data.draw(st.integers(2, 4))
  dims = [data.draw(st.integers(1, 4)) for _ in range(rank - 2)]
  dims += [data.draw(st.sampled_from([8, 16, 32, 40, 64, 96, 128, 200, 256])) for _ in range(2)]
  data.draw(st.randoms()).shuffle(dims)
  perm = data.draw(st.permutations(range(rank)))
  dt = data.draw(st.sampled_from([np.float32, np.int32, np.uint32, np.int16, np.int8]))
  threads = data.draw(st.sampled_from(["1", "3"]))
  raw = np.random.default_rng(1).integers(0, 256, size=int(np.prod(dims)) * np.dtype(dt).itemsize,
                                          dtype=np.uint8)
  x = raw.view(dt).reshape(dims)          # every bit pattern (NaNs of any payload)
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("OURJAX_CPU_THREADS", threads)
    got = ourjax.jit(lambda a: jnp.transpose(a, perm), backend="cpu")(x)
  want = np.transpose(x, perm)
  assert np.asarray(got).dtype == want.dtype
  assert np.array_equal(np.asarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@pytest.mark.parametrize("threads", ["1", "3"])
@pytest.mark.parametrize("shape,perm", [((512, 384), (1, 0)), ((528, 400), (1, 0)),
                                        ((3, 256, 320), (0, 2, 1)), ((256, 2, 160), (2, 1, 0)),
                                        ((2, 192, 3, 256), (0, 3, 2, 1))])
def test_register_block_transposes_match_numpy(monkeypatch, threads, shape, perm):
  monkeypatch.setenv("OURJAX_CPU_THREADS", threads)
  x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  f = lambda a: jnp.transpose(a, perm)      # noqa: E731
  (k,) = _loop_kernels(f, x)
  assert k._vector_transpose() is not None
  np.testing.assert_array_equal(np.asarray(ourjax.jit(f, backend="cpu")(x)), np.transpose(x, perm))
