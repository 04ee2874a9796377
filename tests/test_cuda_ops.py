"""Every HLO op on the GPU against the reference backend (skipped without a GPU).

The op-by-op tests of ``test_cpu_ops.py`` (elementwise ops and comparisons of every element
type, conversions and bitcasts, structural ops, gather, reductions, reduce-window, dot,
convolution, sort, scatter, while/conditional, every fusion kind, random programs) run again
with their modules compiled by the CUDA backend: the same hypothesis-drawn values (NaN,
infinities, signed zeros, extremes), the same comparisons and tolerances.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ourjax.backends.cuda import driver

if not driver.available():
  pytest.skip(f"no CUDA GPU ({driver.unavailable_reason()})", allow_module_level=True)

import test_cpu_ops as T  # noqa: E402
from ourjax.backends.cuda import backend as cuda_backend  # noqa: E402

REUSED = ["test_elementwise_ops_match_reference", "test_convert_and_bitcast_match_reference",
          "test_bitcast_to_wider_type", "test_structural_ops_match_reference",
          "test_gather_matches_reference", "test_reductions_match_reference",
          "test_reduction_strategies_large", "test_reduce_window_matches_reference",
          "test_dot_general_matches_reference", "test_convolution_matches_reference",
          "test_sort_matches_reference",
          "test_while_loop_and_conditional", "test_every_fusion_kind",
          "test_random_programs_match_reference"]

for _name in REUSED:
  globals()[_name] = getattr(T, _name)


class _OnGpu:
  """A CUDA executable called like the CPU one: NumPy arguments, NumPy results."""

  def __init__(self, m):
    self.exe = cuda_backend.compile(m)

  def __call__(self, *args):
    # DeviceBuffers as they are: host arrays would be canonicalised (float64 -> float32 with
    # x64 off), while these modules take the types they declare
    bufs = [cuda_backend.DeviceBuffer.from_host(np.ascontiguousarray(a)) for a in args]
    return tuple(np.asarray(o.to_host()) for o in self.exe(*bufs))


@pytest.fixture(autouse=True)
def _compile_for_the_gpu(monkeypatch):
  import ourjax
  monkeypatch.setattr(T, "native", _OnGpu)
  monkeypatch.setattr(T, "_ELEMENTWISE_CACHE", {})      # not the CPU executables
  # f32 dots and convolutions at the highest precision, as the CPU tests' tolerances assume
  # (by default the tensor cores round their operands to tf32, as JAX's do)
  before = ourjax.config.jax_default_matmul_precision
  ourjax.config.update("jax_default_matmul_precision", "highest")
  yield
  ourjax.config.update("jax_default_matmul_precision", before)


def _hitters(x, idx, upd, **dims):
  """Per element of ``x``: the set of flat positions of ``upd`` that a scatter writes there
  (the reference scatter over sets, combining by union)."""
  from ourjax.backends import reference_ops as rops
  empty = np.empty(x.shape, object)
  for i in np.ndindex(x.shape):
    empty[i] = frozenset()
  marks = np.empty(upd.shape, object)
  for n, i in enumerate(np.ndindex(upd.shape)):
    marks[i] = frozenset([n])
  return rops.scatter(empty, idx, marks, combine=lambda a, b: a | b, **dims)


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_scatter_matches_reference(data):
  """As test_cpu_ops' scatter test, except that an overwrite whose updates collide may leave
  any one of them (JAX on a GPU leaves the winner unspecified too)."""
  from ourjax.lowering import hlo
  m, args, dt, point, row = T.scatter_program(data)
  mode, ddt = point["mode"], hlo.to_dtype(dt)
  got, want = T.run_both(m, args)
  for k, (g, w) in enumerate(zip(got, want)):
    combiner = T.SCATTER_COMBINERS[k // 2]
    idx, u, dims = (args[1], args[2], point) if k % 2 == 0 else (args[3], args[4], row)
    dims = {key: v for key, v in dims.items() if key != "mode"}
    hit = _hitters(args[0], idx, u, mode=mode, **dims)
    flat = u.reshape(-1)
    if combiner == "overwrite":    # any colliding update may win
      for e in np.ndindex(g.shape):
        allowed = [args[0][e]] if not hit[e] else [flat[n] for n in hit[e]]
        assert any(np.asarray(g[e]).tobytes() == np.asarray(a).tobytes() for a in allowed), \
            (k, mode, e, g[e], allowed)
    elif combiner == "maximum" or dt == "s32":     # order does not matter
      T.check(g, w, f"scatter {k} ({mode})")
    else:                          # float add / multiply of duplicates in another order
      eps = T._eps(ddt)
      count = np.vectorize(len, otypes=[np.int64])(hit)
      if combiner == "add":
        mags = np.abs(args[0].astype(np.float64)) + np.vectorize(
            lambda h: sum(abs(float(flat[n])) for n in h), otypes=[np.float64])(hit)
      else:
        mags = np.abs(w.astype(np.float64)) + float(np.finfo(ddt).tiny)
      T.check(g, w, f"scatter {k} ({mode})", sum_bound=(count + 1) * eps * mags)
