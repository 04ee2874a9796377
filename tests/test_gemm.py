"""The generated GEMM kernel (ourjax.backends.llvm.gemm) against NumPy float64 matmul: sizes that
are and are not multiples of the register/cache blocks, transposed operands, padded leading
dimensions, batches, both dtypes, the fused epilogue (bias + tanh; row/column indices), and the
thread split (tid 0..n-1 called from n Python threads give the single-thread result bit for
bit)."""
from __future__ import annotations

import ctypes
import os
import re
import threading

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ourjax.backends.cpu import jit
from ourjax.backends.cpu.jit import compile_module, new_module
from ourjax.backends.llvm import gemm
from ourjax.backends.llvm.math import emit_unary

I64 = ir.IntType(64)
_P, _L, _I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
_ARGTYPES = [_P, _P, _P, _L, _L, _L, _L, _L, _L, _I, _I, _L, _L, _L, _L, _L, _L, _P, _L]
NP = {"f32": np.float32, "f64": np.float64}

# Small blocks so that sizes up to 300 cross many K slices, row blocks and column blocks.
TINY = {"f32": gemm.Blocking(mr=6, nv=1, kc=16, mc=12, nc=48, unroll=4, mr_small=2),
        "f64": gemm.Blocking(mr=5, nv=2, kc=24, mc=15, nc=32, unroll=3, mr_small=2)}

# Epilogue operands live at fixed addresses baked into the kernels.
_BIAS = {dt: np.zeros(512, NP[dt]) for dt in NP}


def _bias_tanh(dtype):
  bias = _BIAS[dtype]

  def epi(b, v, row, col):
    addr = b.add(ir.Constant(I64, bias.ctypes.data), b.mul(col, ir.Constant(I64, bias.itemsize)))
    bv = b.load(b.inttoptr(addr, v.type.as_pointer()), align=bias.itemsize)
    return emit_unary(b, "tanh", b.fadd(v, bv))
  return epi


def _add_index(dtype):
  """value + (row * 1024 + col): checks the row/column the hook is told, lane by lane."""
  def epi(b, v, row, col):
    t = ir.FloatType() if dtype == "f32" else ir.DoubleType()
    idx = b.add(b.mul(row, ir.Constant(I64, 1024)), col)
    if isinstance(v.type, ir.VectorType):
      n = v.type.count
      lanes = ir.Constant(ir.VectorType(I64, n), list(range(n)))
      sp = b.insert_element(ir.Constant(ir.VectorType(I64, n), None), idx, ir.Constant(I64, 0))
      sp = b.shuffle_vector(sp, sp, ir.Constant(ir.VectorType(ir.IntType(32), n), [0] * n))
      return b.fadd(v, b.sitofp(b.add(sp, lanes), v.type))
    return b.fadd(v, b.sitofp(idx, t))
  return epi


_EPILOGUES = {None: lambda dt: None, "bias_tanh": _bias_tanh, "index": _add_index}
_cache = {}


def kernel(dtype, epilogue=None, blocking="default", accumulate=False):
  key = (dtype, epilogue, blocking, accumulate)
  if key not in _cache:
    bl = TINY[dtype] if blocking == "tiny" else None
    mod = new_module("test_gemm")
    gemm.emit_gemm(mod, "gemm", dtype, epilogue=_EPILOGUES[epilogue](dtype), blocking=bl,
                   accumulate=accumulate)
    cm = compile_module(mod, ["gemm"])
    _cache[key] = (cm.ctypes_function("gemm", None, _ARGTYPES), bl)
  return _cache[key]


def _operand(rng, dtype, rows, cols, trans, pad):
  """A logical rows x cols matrix stored row-major (or as its transpose when ``trans``) with
  ``pad`` extra elements per stored row; returns (logical view, memory array, ld)."""
  shape = (cols, rows) if trans else (rows, cols)
  mem = np.full((shape[0], shape[1] + pad), np.nan, NP[dtype])
  mem[:, :shape[1]] = rng.standard_normal(shape)
  view = mem[:, :shape[1]]
  return (view.T if trans else view), mem, mem.shape[1]


def run(fn, bl, dtype, A, B, M, N, K, lda, ldb, ta, tb, C=None, ldc=None, batch=1,
        strides=(0, 0, 0), nthreads=1, tids=None, tune=0):
  """Call the kernel once per tid (each on its own Python thread when there are several), each
  call with a scratch area of its own of exactly ``pack_buffer_elements`` elements, starting
  one element past a 64-byte boundary (the most alignment slack), followed by guard elements
  that must stay untouched."""
  if C is None:
    ldc = N if ldc is None else ldc
    C = np.full((batch, M, ldc), np.nan, NP[dtype])
    strides = strides[:2] + (M * ldc,)
  packed = tb == gemm.PACKED_B
  n = gemm.pack_buffer_elements(dtype, M, N, K, nthreads, bl, trans_b=None if packed else bool(tb),
                                batch=batch, b_packed=packed)
  guard = 64
  packs = {}

  def call(tid):
    mem = np.full(n + guard + 64, np.nan, NP[dtype])
    skip = (-(mem.ctypes.data // mem.itemsize)) % (64 // mem.itemsize) + 1
    mem[skip + n:] = 7.0
    packs[tid] = (mem, skip)
    fn(A.ctypes.data, B.ctypes.data, C.ctypes.data, M, N, K, lda, ldb, ldc, int(ta), int(tb),
       batch, *strides, tid, nthreads, mem[skip:].ctypes.data, tune)
  tids = range(nthreads) if tids is None else tids
  if nthreads == 1:
    call(0)
  else:
    ths = [threading.Thread(target=call, args=(t,)) for t in tids]
    for t in ths:
      t.start()
    for t in ths:
      t.join()
  for tid, (mem, skip) in packs.items():
    assert (mem[skip + n:] == 7.0).all(), f"tid {tid} wrote past its {n} scratch elements"
  return C


def check_close(got, a, b, dtype, extra=None):
  """|got - a@b| <= K * u * (|a| @ |b|) elementwise (u the unit roundoff, times 2 for the
  reference's own error in f64); ``extra`` maps the float64 product to the expected result."""
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  ref = a64 @ b64
  K = a.shape[-1]
  u = 2.0 ** -24 if dtype == "f32" else 2.0 ** -52
  bound = (K + 2) * u * (np.abs(a64) @ np.abs(b64)) * 2 + 1e-300
  if extra is not None:  # through a 1-Lipschitz function, plus its own rounding
    ref = extra(ref)
    bound = bound + 4 * u * np.abs(ref) + 4 * u
  np.testing.assert_array_less(np.abs(got.astype(np.float64) - ref), bound + 0 * ref)


dims = st.one_of(st.integers(1, 300), st.sampled_from([1, 2, 5, 6, 7, 13, 14, 15, 16, 17, 31, 32,
                                                       33, 47, 48, 49, 255, 256, 257]))


@settings(max_examples=40)
@given(M=dims, N=dims, K=dims, ta=st.booleans(), tb=st.booleans(),
       pads=st.tuples(st.sampled_from([0, 0, 1, 3, 16]), st.sampled_from([0, 0, 1, 3, 16])),
       dtype=st.sampled_from(["f32", "f64"]), blocking=st.sampled_from(["default", "tiny"]),
       seed=st.integers(0, 2 ** 31))
def test_matches_numpy(M, N, K, ta, tb, pads, dtype, blocking, seed):
  rng = np.random.default_rng(seed)
  a, am, lda = _operand(rng, dtype, M, K, ta, pads[0])
  b, bm, ldb = _operand(rng, dtype, K, N, tb, pads[1])
  fn, bl = kernel(dtype, blocking=blocking)
  C = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, tb)[0]
  check_close(C, a, b, dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
def test_edges_exact(dtype, blocking):
  """Small integers make every product and sum exact: any misplaced or missing element shows."""
  rng = np.random.default_rng(0)
  fn, bl = kernel(dtype, blocking=blocking)
  for (M, N, K) in [(1, 1, 1), (1, 300, 7), (300, 1, 9), (29, 37, 1), (14, 32, 256),
                    (15, 33, 257), (13, 31, 255), (100, 97, 300), (3, 5, 0)]:
    for ta in (0, 1):
      for tb in (0, 1):
        a = rng.integers(-4, 5, (M, K)).astype(NP[dtype])
        b = rng.integers(-4, 5, (K, N)).astype(NP[dtype])
        am = np.ascontiguousarray(a.T) if ta else a
        bm = np.ascontiguousarray(b.T) if tb else b
        C = run(fn, bl, dtype, am, bm, M, N, K, max(1, am.shape[1]), max(1, bm.shape[1]), ta,
                tb)[0]
        np.testing.assert_array_equal(C, a.astype(np.float64) @ b, err_msg=f"{M}x{N}x{K} "
                                      f"ta={ta} tb={tb}")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_zero_sizes(dtype):
  fn, bl = kernel(dtype)
  a = np.ones((4, 3), NP[dtype])
  b = np.ones((3, 5), NP[dtype])
  # K == 0: C is overwritten with zeros
  C = run(fn, bl, dtype, a, b, 4, 5, 0, 3, 5, 0, 0)[0]
  np.testing.assert_array_equal(C, np.zeros((4, 5)))
  # M == 0 or N == 0: nothing is written
  C = np.full((1, 4, 5), 7.0, NP[dtype])
  run(fn, bl, dtype, a, b, 0, 5, 3, 3, 5, 0, 0, C=C, ldc=5)
  run(fn, bl, dtype, a, b, 4, 0, 3, 3, 5, 0, 0, C=C, ldc=5)
  assert (C == 7).all()


@settings(max_examples=15)
@given(M=dims, N=dims, K=dims, dtype=st.sampled_from(["f32", "f64"]),
       blocking=st.sampled_from(["default", "tiny"]), seed=st.integers(0, 2 ** 31))
def test_epilogue_bias_tanh(M, N, K, dtype, blocking, seed):
  rng = np.random.default_rng(seed)
  a = (rng.standard_normal((M, K)) / np.sqrt(K)).astype(NP[dtype])
  b = rng.standard_normal((K, N)).astype(NP[dtype])
  bias = _BIAS[dtype]
  bias[:N] = rng.standard_normal(N)
  fn, bl = kernel(dtype, "bias_tanh", blocking)
  for nthreads in (1, 2):
    C = run(fn, bl, dtype, a, b, M, N, K, K, N, 0, 0, nthreads=nthreads)[0]
    check_close(C, a, b, dtype, extra=lambda r: np.tanh(r + bias[:N].astype(np.float64)))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
def test_epilogue_indices(dtype, blocking):
  """The hook is told row = b*M + i and the column of lane 0, once per element, after the whole
  sum (several K slices with the tiny blocking): integer data keeps everything exact."""
  rng = np.random.default_rng(1)
  fn, bl = kernel(dtype, "index", blocking)
  for (batch, M, N, K) in [(1, 1, 1, 1), (1, 37, 45, 70), (3, 20, 19, 33), (2, 5, 300, 3),
                           (1, 3, 4, 0)]:
    a = rng.integers(-3, 4, (batch, M, K)).astype(NP[dtype])
    b = rng.integers(-3, 4, (batch, K, N)).astype(NP[dtype])
    idx = (np.arange(batch * M)[:, None] * 1024 + np.arange(N)[None, :]).reshape(batch, M, N)
    want = np.matmul(a.astype(np.float64), b) + idx
    for nthreads in (1, 2):
      C = run(fn, bl, dtype, a, b, M, N, K, K, N, 0, 0, batch=batch,
              strides=(M * K, K * N, 0), nthreads=nthreads)
      np.testing.assert_array_equal(C, want, err_msg=f"{batch}x{M}x{N}x{K} threads={nthreads}")


@settings(max_examples=15)
@given(M=dims, N=dims, K=dims, ta=st.booleans(), tb=st.booleans(),
       dtype=st.sampled_from(["f32", "f64"]), blocking=st.sampled_from(["default", "tiny"]),
       nthreads=st.sampled_from([2, 2, 3, 4, 6]), seed=st.integers(0, 2 ** 31))
def test_threads_match_one_thread(M, N, K, ta, tb, dtype, blocking, nthreads, seed):
  """tid 0..n-1 from n Python threads write disjoint parts: the same bits as one thread."""
  rng = np.random.default_rng(seed)
  a, am, lda = _operand(rng, dtype, M, K, ta, 1)
  b, bm, ldb = _operand(rng, dtype, K, N, tb, 0)
  fn, bl = kernel(dtype, blocking=blocking)
  one = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, tb)
  many = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, tb, nthreads=nthreads)
  np.testing.assert_array_equal(many, one)
  # one missing thread leaves its part unwritten (NaN): the split really divides the work
  if nthreads == 2 and M * N >= 2 * 32 * 16:
    part = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, tb, nthreads=2, tids=[0])
    assert np.isnan(part).any() and not np.isnan(part).all()


@settings(max_examples=20)
@given(M=dims, N=dims, K=dims, tb=st.booleans(), dtype=st.sampled_from(["f32", "f64"]),
       blocking=st.sampled_from(["default", "tiny"]), nthreads=st.sampled_from([1, 2, 3, 5]),
       packers=st.sampled_from([1, 2, 7]), seed=st.integers(0, 2 ** 31))
def test_b_packed_once_for_all_pieces(M, N, K, tb, dtype, blocking, nthreads, packers, seed):
  """B packed once by ``PACK_B`` calls (``packers`` pieces, into exactly
  ``packed_b_elements``), then read by every piece of the product (``PACKED_B``, whose
  scratch holds A's panels only): the bits of the product that packs B in each piece (the
  few-rows kernels, which never pack, round their own way: against float64 there)."""
  rng = np.random.default_rng(seed)
  a, am, lda = _operand(rng, dtype, M, K, False, 1)
  b, bm, ldb = _operand(rng, dtype, K, N, tb, 0)
  fn, bl = kernel(dtype, blocking=blocking)
  want = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, tb, nthreads=nthreads)
  n = gemm.packed_b_elements(dtype, N, K, blocking=bl)
  mem = np.full(n + 128, 7.0, NP[dtype])          # (64-byte aligned, as the arena's buffers)
  skip = (-(mem.ctypes.data // mem.itemsize)) % (64 // mem.itemsize)
  packed = mem[skip:skip + n + 64]
  for tid in range(packers):
    fn(0, bm.ctypes.data, packed.ctypes.data, 1, N, K, 1, ldb, N, gemm.PACK_B, int(tb), 1, 0,
       0, 0, tid, packers, 0, 0)
  assert (packed[n:] == 7.0).all() and not np.isnan(packed[:n]).any()
  got = run(fn, bl, dtype, am, packed, M, N, K, lda, 0, 0, gemm.PACKED_B, nthreads=nthreads)
  bl_ = bl or gemm.default_blocking(dtype)
  if M <= bl_.stream_rows and not tb:
    check_close(got[0], a, b, dtype)
  else:
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("M,N,nthreads", [(512, 512, 16), (96, 700, 6), (300, 40, 4)])
def test_threads_split_into_a_grid_of_blocks(dtype, M, N, nthreads):
  """Each piece writes one block of C (its row tiles x its column panels), the blocks cover C
  once with the serial bits, and a large square product on many threads is cut both ways (a
  piece packs part of A's rows and part of B's columns, not all of one operand)."""
  rng = np.random.default_rng(3)
  K = 40
  a, am, lda = _operand(rng, dtype, M, K, False, 1)
  b, bm, ldb = _operand(rng, dtype, K, N, False, 0)
  fn, bl = kernel(dtype)
  one = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, 0)[0]
  seen = np.zeros((M, N), np.int32)
  shapes = []
  for tid in range(nthreads):
    part = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, 0, nthreads=nthreads, tids=[tid])[0]
    mine = ~np.isnan(part)
    rows, cols = np.flatnonzero(mine.any(axis=1)), np.flatnonzero(mine.any(axis=0))
    if len(rows):
      blk = np.ix_(rows, cols)
      assert mine[blk].all() and mine.sum() == len(rows) * len(cols)   # a whole block
      assert rows[-1] - rows[0] + 1 == len(rows) and cols[-1] - cols[0] + 1 == len(cols)
      np.testing.assert_array_equal(part[blk], one[blk])
      shapes.append((len(rows), len(cols)))
    seen += mine
  assert (seen == 1).all()
  if M == N:
    assert any(r < M and c < N for r, c in shapes), shapes


def _panel_sizes(dtype, blocking, extra_k):
  """(blocking, nr, K, kstep, align) of the scratch-bound tests: the blocking in force, the
  column panel's width, a K of two slices and ``extra_k`` more, the slice depth the product
  takes at that K, and the 64-byte alignment in elements."""
  bl_ = blocking or gemm.default_blocking(dtype)
  nr = bl_.nv * gemm.vector_target().lanes[dtype]
  K = 2 * bl_.kc + extra_k
  kstep = -(-K // -(-K // bl_.kc))
  return bl_, nr, K, kstep, 64 // np.dtype(NP[dtype]).itemsize


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
def test_one_column_panel_packs_a_row_panel_at_a_time(dtype, blocking):
  """A product one column panel wide (N <= nr: a 32-channel convolution, 10 logits) packs
  each mr-row panel of A just before its tile, so its scratch is one panel of A and one of B
  (K slice deep), not an mc-row block of A: the results are the serial bits on any split,
  within the rounding bound of float64's, and no call writes past that scratch (``run``'s
  guards).  Many row blocks, several K slices, edge tiles of fewer than mr rows."""
  rng = np.random.default_rng(11)
  fn, bl = kernel(dtype, blocking=blocking)
  bl_, nr, K, kstep, align = _panel_sizes(dtype, bl, 5)
  for N in sorted({1, max(1, nr - 3), nr}):
    for M in (bl_.mc * 3 + bl_.mr + 1, bl_.mr - 1 or 1):
      for ta, tb in ((False, False), (True, True)):
        a, am, lda = _operand(rng, dtype, M, K, ta, 1)
        b, bm, ldb = _operand(rng, dtype, K, N, tb, 0)
        if not tb and M <= bl_.stream_rows:
          continue     # (the few-rows kernels pack nothing)
        n = gemm.pack_buffer_elements(dtype, M, N, K, 1, bl, trans_b=tb)
        assert n <= (bl_.mr + nr) * kstep + 3 * align, (M, N, K, n)
        one = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, tb)
        check_close(one[0], a, b, dtype)
        for nthreads in (2, 3):
          np.testing.assert_array_equal(
              run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, tb, nthreads=nthreads), one,
              err_msg=f"{M}x{N}x{K} threads={nthreads}")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
def test_packed_b_runs_a_row_panel_across_the_column_panels(dtype, blocking):
  """With B packed once for all pieces (``PACKED_B``), each mr-row panel of A is packed just
  before its tiles, which run across the piece's column panels: the scratch is one row panel
  of A (K slice deep), whatever M and N, and the results are the bits of the product that
  packs A by row blocks and B itself (several row blocks, column panels and K slices, edge
  tiles in both directions, 1 to 3 pieces)."""
  rng = np.random.default_rng(12)
  fn, bl = kernel(dtype, blocking=blocking)
  bl_, nr, K, kstep, align = _panel_sizes(dtype, bl, 3)
  M, N = 2 * bl_.mc + bl_.mr + 2, 4 * nr + 3
  for tb in (False, True):
    a, am, lda = _operand(rng, dtype, M, K, False, 1)
    b, bm, ldb = _operand(rng, dtype, K, N, tb, 0)
    n = gemm.packed_b_elements(dtype, N, K, blocking=bl)
    mem = np.full(n + 128, 7.0, NP[dtype])
    skip = (-(mem.ctypes.data // mem.itemsize)) % (64 // mem.itemsize)
    packed = mem[skip:skip + n + 64]
    fn(0, bm.ctypes.data, packed.ctypes.data, 1, N, K, 1, ldb, N, gemm.PACK_B, int(tb), 1, 0,
       0, 0, 0, 1, 0, 0)
    for nthreads in (1, 2, 3):
      s = gemm.pack_buffer_elements(dtype, M, N, K, nthreads, bl, b_packed=True)
      assert s <= bl_.mr * kstep + 2 * align, (nthreads, s)
      want = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, tb, nthreads=nthreads)
      got = run(fn, bl, dtype, am, packed, M, N, K, lda, 0, 0, gemm.PACKED_B,
                nthreads=nthreads)
      np.testing.assert_array_equal(got, want, err_msg=f"tb={tb} threads={nthreads}")
    check_close(got[0], a, b, dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
def test_column_block_packed_then_a_row_panel_at_a_time(dtype, blocking):
  """A piece of several row blocks packs its column block of B once per K slice, then each
  mr-row panel of A just before its tiles across that block: the scratch is B's block and one
  row panel of A (not an mc-row block), the products are within float64's rounding bound and
  the same bits on 1 to 3 threads, and no call writes past its scratch (``run``'s guards).
  B transposed (never read in place), edge tiles both ways, several K slices and column
  blocks."""
  rng = np.random.default_rng(13)
  fn, bl = kernel(dtype, blocking=blocking)
  bl_, nr, K, kstep, align = _panel_sizes(dtype, bl, 3)
  for M, N in ((3 * bl_.mc + 5, 3 * nr + 1), (2 * bl_.mc + 1, bl_.nc + nr + 2)):
    a, am, lda = _operand(rng, dtype, M, K, False, 1)
    b, bm, ldb = _operand(rng, dtype, K, N, True, 0)
    n = gemm.pack_buffer_elements(dtype, M, N, K, 1, bl, trans_b=True)
    b_block = min(bl_.nc, -(-N // nr) * nr) * kstep
    assert n <= b_block + bl_.mr * kstep + 3 * align, (M, N, n)
    one = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, 1)
    check_close(one[0], a, b, dtype)
    for nthreads in (2, 3):
      np.testing.assert_array_equal(run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, 1,
                                        nthreads=nthreads), one, err_msg=f"{M}x{N}x{K}")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
def test_scratch_for_either_layout_of_b_fits_both(dtype, blocking):
  """``pack_buffer_elements(trans_b=None)`` (B of either layout, as attention's calls size
  theirs) is at least what each layout needs: a row-major B read in place keeps A's row block
  packed whole, a transposed one packs B's column block and A a row panel at a time, so
  neither bounds the other (the guards of ``run`` check that each explicit size suffices)."""
  bl = TINY[dtype] if blocking == "tiny" else None
  bl_ = bl or gemm.default_blocking(dtype)
  sizes = (1, bl_.mr + 1, bl_.mc - 1, bl_.mc + 5, 2 * bl_.mc + 1, bl_.direct_b_rows + 3, 700)
  for M in sizes:
    for N in (5, 40, bl_.nc + 7, 600):
      for K in (3, bl_.kc + 1, 3 * bl_.kc):
        for nthreads in (1, 2, 5):
          either = gemm.pack_buffer_elements(dtype, M, N, K, nthreads, bl)
          for tb in (False, True):
            need = gemm.pack_buffer_elements(dtype, M, N, K, nthreads, bl, trans_b=tb)
            assert either >= need, (M, N, K, nthreads, tb, either, need)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["default", "tiny"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_threads_row_split_few_rows(dtype, blocking, accumulate):
  """A row split that leaves a thread few rows (narrow N, small M, K over one to three K
  slices) gives the serial bits.  It once did not (M=9, N=1, K=17, tiny f32, 2 threads): the
  axpy path for few rows was chosen per thread, and it sums all of K in one chain (from C when
  accumulating) where the tiles add per-slice partial sums to C.  Random (not integer) data, so
  that a different order shows."""
  rng = np.random.default_rng(5)
  fn, bl = kernel(dtype, blocking=blocking, accumulate=accumulate)
  kc = (bl or gemm.default_blocking(dtype)).kc
  for K in (kc, kc + 1, 2 * kc + 7):  # one, two and three K slices
    for N in (1, 2, 3):
      for M in range(1, 18):
        for ta in (False, True):
          a, am, lda = _operand(rng, dtype, M, K, ta, 1)
          b, bm, ldb = _operand(rng, dtype, K, N, False, 0)
          c0 = rng.standard_normal((1, M, N)).astype(NP[dtype]) if accumulate else None

          def call(nthreads):
            C = None if c0 is None else c0.copy()
            return run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, ta, False, C=C, ldc=N,
                       nthreads=nthreads)
          one = call(1)
          check_close(one[0], a, b, dtype,
                      extra=None if c0 is None else lambda r: r + c0[0].astype(np.float64))
          for nthreads in (2, 3):
            np.testing.assert_array_equal(call(nthreads), one, err_msg=f"{M}x{N}x{K} ta={ta} "
                                          f"threads={nthreads}")


@settings(max_examples=10)
@given(batch=st.integers(1, 5), M=st.integers(1, 70), N=st.integers(1, 70), K=st.integers(0, 70),
       ta=st.booleans(), tb=st.booleans(), bcast_b=st.booleans(),
       dtype=st.sampled_from(["f32", "f64"]), nthreads=st.sampled_from([1, 2, 3]),
       seed=st.integers(0, 2 ** 31))
def test_batched(batch, M, N, K, ta, tb, bcast_b, dtype, nthreads, seed):
  """Leading batch dimension through the batch strides (stride 0 broadcasts B)."""
  rng = np.random.default_rng(seed)
  a = rng.standard_normal((batch, M, K)).astype(NP[dtype])
  b = rng.standard_normal((1 if bcast_b else batch, K, N)).astype(NP[dtype])
  am = np.ascontiguousarray(a.transpose(0, 2, 1)) if ta else a
  bm = np.ascontiguousarray(b.transpose(0, 2, 1)) if tb else b
  fn, bl = kernel(dtype, blocking="tiny")
  C = run(fn, bl, dtype, am, bm, M, N, K, am.shape[2], bm.shape[2], ta, tb, batch=batch,
          strides=(M * K, 0 if bcast_b else K * N, 0), nthreads=nthreads)
  for i in range(batch):
    check_close(C[i], a[i], b[0 if bcast_b else i], dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_accumulate_and_ldc(dtype):
  """accumulate=True adds to C; a padded ldc leaves the padding alone."""
  rng = np.random.default_rng(2)
  fn, bl = kernel(dtype, blocking="tiny", accumulate=True)
  for M, N, K, ldc in [(41, 23, 50, 29), (7, 600, 9, 611), (3, 5, 1, 6)]:
    a = rng.integers(-3, 4, (M, K)).astype(NP[dtype])
    b = rng.integers(-3, 4, (K, N)).astype(NP[dtype])
    c0 = rng.integers(-9, 10, (1, M, ldc)).astype(NP[dtype])
    C = c0.copy()
    run(fn, bl, dtype, a, b, M, N, K, K, N, 0, 0, C=C, ldc=ldc, nthreads=2)
    want = c0.astype(np.float64)
    want[0, :, :N] += a.astype(np.float64) @ b
    np.testing.assert_array_equal(C, want)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("blocking", ["tiny", "default"])
def test_accumulate_bit_adds_to_c(dtype, blocking):
  """A call with gemm.ACCUMULATE in transA adds to C (what DotKernel(accumulate=True) calls
  the shared kernel with): the few-row axpy path, register tiles over several K slices, A
  stored transposed, two threads; the same kernel without the bit still overwrites.  Integer
  values, so the sums are exact."""
  rng = np.random.default_rng(5)
  fn, bl = kernel(dtype, blocking=blocking)
  for M, N, K, ta in [(3, 40, 70, 0), (41, 23, 300, 0), (29, 37, 45, 1), (1, 9, 600, 1)]:
    a = rng.integers(-3, 4, (M, K)).astype(NP[dtype])
    b = rng.integers(-3, 4, (K, N)).astype(NP[dtype])
    am = np.ascontiguousarray(a.T) if ta else a
    c0 = rng.integers(-9, 10, (1, M, N)).astype(NP[dtype])
    want = c0.astype(np.float64) + a.astype(np.float64) @ b
    C = c0.copy()
    run(fn, bl, dtype, am, b, M, N, K, M if ta else K, N, ta | gemm.ACCUMULATE, 0, C=C, ldc=N,
        nthreads=2)
    np.testing.assert_array_equal(C, want)
    C = c0.copy()
    run(fn, bl, dtype, am, b, M, N, K, M if ta else K, N, ta, 0, C=C, ldc=N, nthreads=2)
    np.testing.assert_array_equal(C[0], a.astype(np.float64) @ b)


def test_signature_and_errors():
  mod = new_module("sig")
  fn = gemm.emit_gemm(mod, "g", "f32")
  assert [a.name for a in fn.args] == list(gemm.ARG_NAMES)
  assert len(fn.args) == len(_ARGTYPES)
  with pytest.raises(ValueError, match="dtype"):
    gemm.emit_gemm(new_module("bad"), "g", "f16")
  with pytest.raises(ValueError, match="multiple"):
    gemm.emit_gemm(new_module("bad"), "g", "f32", blocking=gemm.Blocking(6, 2, 64, 10, 64))
  # a call's scratch covers tiny problems, and is its largest piece's: no more when the product
  # is cut into more pieces, and nothing for the few-rows kernels (B streamed, not packed)
  assert gemm.pack_buffer_elements("f32", 1, 1, 1, 2) == gemm.pack_buffer_elements(
      "f32", 1, 1, 1, 1) > 0
  assert gemm.pack_buffer_elements("f32", 512, 512, 512, 16) < gemm.pack_buffer_elements(
      "f32", 512, 512, 512, 2) <= gemm.pack_buffer_elements("f32", 512, 512, 512, 1)
  assert gemm.pack_buffer_elements("f32", 4, 512, 512, trans_b=False) == 0 < \
      gemm.pack_buffer_elements("f32", 4, 512, 512, trans_b=True)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("shared", [True, False])
def test_emit_gemm_call(dtype, shared):
  """The caller-side helper: static sizes and element strides (including size-1 dimensions
  with odd strides and a broadcast batch operand) become the right transposes and leading
  dimensions; the shared kernel is only declared in the caller's module."""
  rng = np.random.default_rng(3)
  t = ir.FloatType() if dtype == "f32" else ir.DoubleType()
  cases = [  # (batch, M, N, K, a layout, b layout, broadcast B)
      (1, 37, 21, 50, "mk", "kn", False), (2, 19, 40, 33, "km", "nk", False),
      (3, 1, 30, 17, "km", "kn", True), (1, 25, 1, 1, "mk", "nk", False),
      (2, 1, 1, 9, "km", "nk", False)]
  if not shared:  # each call compiles a whole kernel into the module: two cases suffice
    cases = cases[1:3]
  for (batch, M, N, K, al, bl_, bcast) in cases:
    a = rng.standard_normal((batch, M, K)).astype(NP[dtype])
    b = rng.standard_normal((1 if bcast else batch, K, N)).astype(NP[dtype])
    am = np.ascontiguousarray(a if al == "mk" else a.transpose(0, 2, 1))
    bm = np.ascontiguousarray(b if bl_ == "kn" else b.transpose(0, 2, 1))
    a_str = (K, 1) if al == "mk" else (1, M)
    b_str = (N, 1) if bl_ == "kn" else (1, K)
    mod = new_module("call")
    p = t.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [p, p, p, I64, I64,
                                                          ir.IntType(8).as_pointer()]), "k")
    bld = ir.IRBuilder(fn.append_basic_block())
    A, B, C, tid, nth, scratch = fn.args
    gemm.emit_gemm_call(bld, dtype, A, B, C, M=M, N=N, K=K, a_strides=a_str, b_strides=b_str,
                        batch=batch, batch_strides=(M * K, 0 if bcast else K * N, M * N),
                        tid=tid, nthreads=nth, scratch=scratch, shared=shared)
    bld.ret_void()
    sym = f"ourjax_gemm_{dtype}"
    assert (sym in mod.globals) == shared and (not shared or mod.globals[sym].is_declaration)
    cm = compile_module(mod, ["k"])
    f = cm.ctypes_function("k", None, [_P, _P, _P, _L, _L, _P])
    C = np.full((batch, M, N), np.nan, NP[dtype])
    packs = [np.empty(gemm.pack_buffer_elements(dtype, M, N, K, 2, trans_b=bl_ != "kn",
                                                batch=batch), NP[dtype]) for _ in range(2)]
    ths = [threading.Thread(target=f, args=(am.ctypes.data, bm.ctypes.data, C.ctypes.data, i, 2,
                                            packs[i].ctypes.data)) for i in range(2)]
    for th in ths:
      th.start()
    for th in ths:
      th.join()
    for i in range(batch):
      check_close(C[i], a[i], b[0 if bcast else i], dtype)
  with pytest.raises(ValueError, match="unit stride"):
    gemm.emit_gemm_call(ir.IRBuilder(ir.Function(new_module("x"), ir.FunctionType(
        ir.VoidType(), []), "f").append_basic_block()), dtype, None, None, None, M=4, N=4, K=4,
        a_strides=(8, 2), b_strides=(4, 1), tid=None, nthreads=None, scratch=None)


def test_operand_layout():
  assert gemm.operand_layout(5, 7, 7, 1) == (True, 7)      # row-major A
  assert gemm.operand_layout(5, 7, 1, 5) == (False, 5)     # A stored transposed
  assert gemm.operand_layout(1, 7, 0, 3) == (False, 3)     # one row, k strided
  assert gemm.operand_layout(5, 1, 4, 0) == (True, 4)      # one column
  assert gemm.operand_layout(1, 1, 0, 0) == (True, 1)
  assert gemm.operand_layout(5, 7, 14, 2) is None


_KEEP = []  # compiled shared kernels replaced during a test stay alive (code may link to them)


def test_shared_kernel_disk_cache(tmp_path, monkeypatch):
  """The process-wide kernel is stored in the cache directory, loaded from it next time, and
  recompiled (and the entry rewritten) when the entry is damaged."""
  import llvmlite.binding as llvm
  dtype, sym = "f64", "ourjax_gemm_f64"
  from ourjax.config import config
  from ourjax.backends.llvm import gemm_library
  original = gemm_library._shared.get(dtype)
  monkeypatch.setenv("OURJAX_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir=None))
  try:
    for damage in (False, False, True):
      monkeypatch.setattr(gemm_library, "_shared", {})
      path = gemm_library._cache_path(sym)
      assert path and path.startswith(str(tmp_path))
      if damage:
        with open(path, "r+b") as f:
          f.seek(100)
          f.write(b"\0garbage\0")
        assert gemm_library._cache_load(path) is None
      assert gemm.shared_gemm_symbol(dtype) == sym
      _KEEP.append(gemm_library._shared[dtype])
      assert gemm_library._cache_load(path) is not None
      # the registered symbol computes a product
      mod = new_module("use_shared")
      t = ir.DoubleType().as_pointer()
      fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [t, t, t, t]), "k")
      bld = ir.IRBuilder(fn.append_basic_block())
      gemm.emit_gemm_call(bld, dtype, *fn.args[:3], M=9, N=11, K=13, a_strides=(13, 1),
                          b_strides=(11, 1), tid=ir.Constant(I64, 0),
                          nthreads=ir.Constant(I64, 1), scratch=fn.args[3])
      bld.ret_void()
      cm = compile_module(mod, ["k"])
      f = cm.ctypes_function("k", None, [_P] * 4)
      rng = np.random.default_rng(4)
      a, b = rng.standard_normal((9, 13)), rng.standard_normal((13, 11))
      c = np.empty((9, 11))
      pack = np.empty(gemm.pack_buffer_elements(dtype, 9, 11, 13))
      f(a.ctypes.data, b.ctypes.data, c.ctypes.data, pack.ctypes.data)
      check_close(c, a, b, dtype)
      assert len(list((tmp_path / "gemm").iterdir())) == 1
  finally:
    if original is not None:  # later modules link to the kernel the process started with
      llvm.add_symbol(sym, original[1].address(sym))


# --------------------------------------------------------------------------------------------
# vector targets: width and blocking per ISA

_REGS = {"avx512": (32, 512), "avx2": (16, 256), "sse": (16, 128)}  # registers, bits each


@pytest.mark.parametrize("isa", sorted(gemm.VECTOR_TARGETS))
def test_vector_target_table(isa):
  """Each ISA's W fills its vector registers, and its blockings keep the micro-kernel's
  accumulators, B vectors, the broadcast (and without FMA the product) within the register
  file."""
  vt = gemm.vector_target(isa)
  regs, bits = _REGS[isa]
  assert vt.isa == isa
  for dtype, size in (("f32", 4), ("f64", 8)):
    w, bl = vt.lanes[dtype], vt.blocking[dtype]
    assert w * size * 8 == bits
    extra = 0 if vt.fma else 1
    assert bl.mr * bl.nv + bl.nv + 1 + extra <= regs
    assert bl.mc % bl.mr == 0 and bl.nc % (bl.nv * w) == 0
  assert gemm.vector_target().isa == jit.vector_isa()
  assert gemm.default_blocking("f32") == gemm.vector_target().blocking["f32"]
  with pytest.raises(ValueError, match="no vector target"):
    gemm.vector_target("neon")


_MADD = re.compile(r"^\s+(vfmadd\w+|v?mulp[sd])\s")


def _madd_block_stack_traffic(asm: str) -> tuple:
  """(multiply-adds, stack accesses with a vector register among them) over the basic blocks
  of the micro-kernels (functions ``*.ukernel*``) in ``asm`` that contain a multiply-add
  (``vfmadd*``, or ``mulps``/``mulpd`` without FMA)."""
  blocks, cur, fn = [], None, ""
  for line in asm.splitlines():
    label = re.match(r"^([\w.$\"]+|# %bb\.\d+):", line)
    if label:                                  # a function or basic-block label
      if not label.group(1).startswith((".L", "#")):
        fn = label.group(1)
      cur = []
      if ".ukernel" in fn:
        blocks.append(cur)
    elif cur is not None and line.startswith("\t") and not line.startswith("\t."):
      cur.append(line)
  madds = stack = 0
  for blk in blocks:
    m = sum(1 for ins in blk if _MADD.match(ins))
    if m:
      madds += m
      stack += sum(1 for ins in blk if "(%rsp)" in ins and "mm" in ins)
  return madds, stack


def _gemm_asm(cpu, dtype, isa=None):
  import llvmlite.binding as llvm
  tm = jit.target_machine_for(cpu)
  mod = new_module("spills")
  gemm.emit_gemm(mod, "gemm", dtype, isa=isa or jit.vector_isa(tm))
  return tm.emit_assembly(llvm.parse_assembly(jit.optimize_for(mod, tm)))


@pytest.mark.parametrize("cpu,isa", [("haswell", "avx2"), ("skylake-avx512", "avx512"),
                                     ("x86-64", "sse")])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_no_spills_in_micro_kernels(cpu, isa, dtype):
  """The GEMM generated for each vector ISA, optimised and assembled for a CPU of that ISA (any
  host: nothing runs), keeps its micro-kernels' k loops in registers.  Measure: in the
  micro-kernel functions (full, narrow and short-edge tiles), every basic block with a
  multiply-add (the k loops; their stores have none) has no stack access through a vector
  register (``vmovups %ymm3, 64(%rsp)``, ``vbroadcastss 8(%rsp), ...``, a folded
  ``vfmadd231ps 96(%rsp), ...``): a spilled accumulator, B vector or broadcast shows up there.
  Whole blocks are counted, so it does not depend on how LLVM schedules or lays out the loop
  (rsp only: rbp may be a general register).  The control: the AVX-512 blocking (14 x 2 tiles
  of 16 f32 lanes, what every host got before) compiled for haswell spills hundreds of times
  in those blocks.  (The few-rows axpy kernels are left out on purpose: on 16-register ISAs
  they keep a few of their 16 broadcasts on the stack, which measured faster than fitting.)"""
  assert jit.vector_isa(jit.target_machine_for(cpu)) == isa
  madds, stack = _madd_block_stack_traffic(_gemm_asm(cpu, dtype))
  assert madds > 0
  assert stack == 0, f"{stack} vector stack accesses among {madds} multiply-adds"
  if isa == "avx2" and dtype == "f32":
    madds, stack = _madd_block_stack_traffic(_gemm_asm(cpu, dtype, isa="avx512"))
    assert stack > 100, (madds, stack)


_JIT_MATMULS = r"""
import os, sys, numpy as np, ourjax, ourjax.numpy as jnp
from ourjax.backends.cpu import jit
from ourjax.backends.llvm import gemm
print(jit.cpu_name(), jit.vector_isa(), gemm.vector_target().lanes["f32"], flush=True)
ourjax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)
# (batch, M, N, K): edges of every blocking (W = 4, 8, 16; mr = 4, 6, 14), few-rows kernels,
# K over one vector, and a few dots too small for the GEMM (loop kernels)
shapes = [(1, 1, 70, 70), (1, 70, 9, 70), (1, 7, 70, 13), (1, 13, 17, 33), (1, 15, 31, 29),
          (1, 29, 33, 7), (1, 45, 70, 1), (1, 64, 24, 23), (1, 5, 47, 61), (1, 70, 70, 70),
          (2, 6, 65, 19), (3, 14, 33, 12), (4, 1, 40, 31), (2, 3, 3, 5)]
def check(got, want, tol, what):
  err = np.max(np.abs(np.asarray(got, np.float64) - want) / (1 + np.abs(want)))
  assert err < tol, f"{what}: relative error {err:.2e}"
n = 0
for dt, tol in ((np.float32, 1e-4), (np.float64, 1e-12)):
  for (B, M, N, K) in shapes:
    a = rng.standard_normal((B, M, K)).astype(dt)
    b = rng.standard_normal((B, K, N)).astype(dt)
    c = rng.standard_normal((N,)).astype(dt)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    what = f"{np.dtype(dt).name} {B}x{M}x{N}x{K}"
    if B == 1:
      at, bt = np.ascontiguousarray(a[0].T), np.ascontiguousarray(b[0].T)   # [K, M], [N, K]
      f = ourjax.jit(lambda x, y, z: jnp.tanh(x @ y + z))
      check(f(a[0], b[0], c), np.tanh(ref[0] + c), tol, what + " tanh(a@b + c)")
      g = ourjax.jit(lambda xt, yt: xt.T @ yt.T)
      check(g(at, bt), ref[0], tol * np.sqrt(K), what + " a.T.T @ b.T.T")
      n += 2
    else:
      f = ourjax.jit(lambda x, y, z: jnp.tanh(jnp.einsum("bmk,bkn->bmn", x, y) + z))
      check(f(a, b, c), np.tanh(ref + c), tol, what + " batched tanh")
      g = ourjax.jit(lambda x, y: jnp.einsum("bkm,bnk->bmn", x, y))
      check(g(np.ascontiguousarray(a.transpose(0, 2, 1)), np.ascontiguousarray(b.transpose(0, 2, 1))),
            ref, tol * np.sqrt(K), what + " batched transposed")
      n += 2
# the simpler register-blocked dot (kernels._emit_dot_blocked; W from the same vector target)
os.environ["OURJAX_CPU_SIMPLE_DOT"] = "1"
for dt, tol in ((np.float32, 1e-4), (np.float64, 1e-12)):
  for (M, N, K) in [(13, 37, 29), (70, 9, 70), (6, 70, 1)]:
    a = rng.standard_normal((M, K)).astype(dt)
    b = rng.standard_normal((K, N)).astype(dt)
    f = ourjax.jit(lambda x, y: x @ y * 1.0)
    check(f(a, b), a.astype(np.float64) @ b, tol * np.sqrt(K), f"simple dot {M}x{N}x{K}")
    n += 1
print("ok", n)
"""


@pytest.mark.parametrize("cpu,isa,flag", [("haswell", "avx2", "avx2"), ("x86-64", "sse", None)])
def test_jitted_matmuls_on_narrower_targets(cpu, isa, flag):
  """Jitted matmuls (odd sizes 1..70, transposed operands, batches, f32 and f64, a fused
  ``tanh(a@b + c)``; a few through the simpler fallback dot) against float64 NumPy in a child
  process whose code is generated for
  ``cpu`` (``OURJAX_CPU``; no disk cache), i.e. the GEMM with that ISA's width and blocking.
  x86-64 (SSE2) code runs on any x86-64 host; haswell code needs AVX2 and FMA."""
  import os, subprocess, sys
  from cpu_targets import skip_unless_host_runs
  skip_unless_host_runs(flag)
  env = dict(os.environ, OURJAX_CPU=cpu, OURJAX_CACHE_DIR="off", OURJAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _JIT_MATMULS], env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  lanes = {"avx2": "8", "sse": "4"}[isa]
  assert out.stdout.split()[:3] == [cpu, isa, lanes]
  assert out.stdout.split()[3:] == ["ok", "62"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_while_the_shared_kernel_builds(tmp_path, monkeypatch):
  """A fork while the shared kernel is being built on its thread waits for it, so the child
  links it (instead of waiting for a thread it does not have)."""
  import signal
  import time
  from ourjax.backends.llvm import gemm_library
  from ourjax.config import config
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  monkeypatch.setattr(gemm_library, "_shared", {})
  monkeypatch.setattr(gemm_library, "_pending", {})
  gemm.prefetch_shared_gemm("f64")
  pid = os.fork()
  if pid == 0:                                          # the child
    try:
      ok = gemm.shared_gemm_symbol("f64") == "ourjax_gemm_f64"
    except BaseException:                               # noqa: BLE001
      ok = False
    os._exit(0 if ok else 1)
  try:
    _KEEP.append(gemm_library._pending["f64"].result())
    assert gemm.shared_gemm_symbol("f64") == "ourjax_gemm_f64"
  finally:
    for _ in range(600):                                # (a hung child fails, not hangs, the test)
      done, status = os.waitpid(pid, os.WNOHANG)
      if done:
        break
      time.sleep(0.1)
    else:
      os.kill(pid, signal.SIGKILL)
      os.waitpid(pid, 0)
      status = -1
  assert status == 0


@pytest.mark.parametrize("wait_first", [False, True])
def test_prefetch_emits_on_the_caller_and_compiles_on_the_builder(wait_first, tmp_path,
                                                                  monkeypatch):
  """``prefetch_shared_gemm`` makes the library's IR on the calling thread and hands only its
  LLVM work to the builder thread (Python there would take turns with the caller's passes for
  the interpreter lock); a caller that then waits for the library (``shared_gemm_symbol``)
  compiles the modules the builder has not started (``_Build``): each module is compiled
  once, on one of the two threads (``wait_first``: the caller asks at once, else once the
  builder is done); the library it builds multiplies as NumPy does."""
  from ourjax.backends.cpu import jit as cpu_jit
  from ourjax.backends.llvm import gemm_library
  from ourjax.config import config
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  monkeypatch.setattr(gemm_library, "_shared", {})
  monkeypatch.setattr(gemm_library, "_pending", {})
  monkeypatch.setattr(gemm_library, "library_parts", lambda: 2)
  where = {}

  def record(name, real):
    def recorded(*a, **k):
      where.setdefault(name, []).append(threading.current_thread().name)
      return real(*a, **k)
    return recorded
  monkeypatch.setattr(gemm_library, "_emit_shared",
                      record("_emit_shared", gemm_library._emit_shared))
  monkeypatch.setattr(cpu_jit, "object_apart", record("object_apart", cpu_jit.object_apart))
  gemm.prefetch_shared_gemm("f64")
  build = gemm_library._pending["f64"]
  if not wait_first:
    build.result()
  sym = gemm.shared_gemm_symbol("f64")
  me = threading.current_thread().name
  assert where["_emit_shared"] == [me]
  assert len(where["object_apart"]) == len(build.jobs) == 3
  assert all(t == me or t.startswith("ourjax-gemm") for t in where["object_apart"])
  if not wait_first:
    assert me not in where["object_apart"]
  _KEEP.append(gemm_library._shared["f64"])
  P, I, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
  fn = ctypes.CFUNCTYPE(None, P, P, P, I, I, I, I, I, I, I32, I32, I, I, I, I, I, I, P, I)(
      gemm_library._shared["f64"][1].address(sym))
  rng = np.random.default_rng(1)
  m, k, n = 13, 40, 9
  a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
  pack = np.zeros(gemm.pack_buffer_elements("f64", m, n, k, 1) + 64, np.float64)
  c = np.zeros((m, n))
  fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, m, n, k, k, n, n, 0, 0, 1, 0, 0, 0, 0, 1,
     pack.ctypes.data, 0)
  np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_shared_gemm_built_in_parts_gives_the_same_bits():
  """The shared GEMM cut into modules compiled at once (``gemm_library.split_module``, the
  default on hosts of 4 or more cores) computes the same bits as the one-module build, on
  tiles, edge tiles and the few-rows kernels, and matches NumPy float64."""
  import subprocess
  import sys
  from ourjax.backends.llvm import gemm_library
  mod = new_module("split")
  gemm.emit_gemm(mod, "ourjax_gemm_f32", "f32", im2col=True)
  texts, names = gemm_library.split_module(mod, "ourjax_gemm_f32", 3)
  # each function defined once, in one part; the driver's part declares the helpers
  defines = [re.findall(r'^define [^@]*@"([^"]+)"', t, re.M) for t in texts]
  flat = [n for d in defines for n in d]
  assert len(flat) == len(set(flat)) == len(names) + 1 and "ourjax_gemm_f32" in defines[0]
  assert all(f'declare void @"{n}"(' in texts[0] for n in names if n not in defines[0])
  code = r"""
import ctypes, os, numpy as np
from ourjax.backends.llvm import gemm_library as L, gemm as G
P, I, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
rng = np.random.default_rng(0)
cases = [(16, 64, 10), (5, 33, 70), (3, 40, 9), (45, 300, 37)]
mats = [(rng.standard_normal((m, k)).astype(np.float32),
         rng.standard_normal((k, n)).astype(np.float32)) for m, k, n in cases]
outs = {}
for parts in ("1", "3"):
  os.environ["OURJAX_GEMM_LIBRARY_PARTS"] = parts
  sym, cm = L._build_shared("f32")
  fn = ctypes.CFUNCTYPE(None, P, P, P, I, I, I, I, I, I, I32, I32, I, I, I, I, I, I, P, I)(
      cm.address(sym))
  outs[parts] = []
  for (m, k, n), (a, b) in zip(cases, mats):
    pack = np.zeros(G.pack_buffer_elements("f32", m, n, k, 1) + 64, np.float32)
    c = np.zeros((m, n), np.float32)
    fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, m, n, k, k, n, n, 0, 0, 1, 0, 0, 0, 0, 1,
       pack.ctypes.data, 0)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    outs[parts].append(c)
  globals()["keep_" + parts] = cm
assert all(np.array_equal(x, y) for x, y in zip(outs["1"], outs["3"]))
print("ok")
"""
  env = dict(os.environ, OURJAX_CACHE_DIR="off")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(
                           __file__))))
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert out.stdout.split() == ["ok"]


def test_dot_scratch_is_one_area_per_thread():
  """A dot's packing scratch is one area per thread that runs its pieces (``dots.dot_scratch``),
  which the thread reuses for every piece it claims, not one per piece: 32 batch entries cut into
  16 pieces hold 2 areas when planned for 2 threads and 16 for 16 (they held 16 either way); a
  dot too small to split holds one, and a few-rows product on the streaming kernels none.  An
  executable planned for fewer threads than the pool runs leaves the extra threads out of its
  dot (its results match).  (B transposed: packed in the area; A alone, packed a row panel at a
  time, would live on the calls' stacks, ``gemm.A_PANEL_STACK_BYTES``.)"""
  import ourjax
  import ourjax.numpy as jnp
  from ourjax.backends.cpu import backend as cpu
  from ourjax.backends.llvm import gemm
  rng = np.random.default_rng(0)
  a = rng.standard_normal((32, 128, 128)).astype(np.float32)
  b = rng.standard_normal((32, 128, 128)).astype(np.float32)
  want = np.einsum("bij,bkj->bik", a.astype(np.float64), b)
  area = gemm.pack_buffer_bytes("f32", 128, 128, 128, 16, trans_b=True, batch=32) + 64
  assert area > 64
  old = cpu.num_threads()
  try:
    temps, compiled = {}, {}
    for n in (2, 16):
      cpu.set_num_threads(n)
      c = ourjax.jit(lambda x, y: jnp.einsum("bij,bkj->bik", x, y),
                     backend="cpu").lower(a, b).compile()
      temps[n], compiled[n] = c.memory_analysis().temp_size_in_bytes, c
    assert 2 * area <= temps[2] < 3 * area
    assert 16 * area <= temps[16] < 17 * area
    for run_with in (6, 2, 16):      # (planned for 2 threads: the pool's others stay out)
      cpu.set_num_threads(run_with)
      for n, c in compiled.items():
        np.testing.assert_allclose(c(a, b), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"planned for {n}, run on {run_with} threads")
  finally:
    cpu.set_num_threads(old)
  x = rng.standard_normal((40, 64)).astype(np.float32)
  w = rng.standard_normal((32, 64)).astype(np.float32)
  c = ourjax.jit(lambda x, w: x @ w.T, backend="cpu").lower(x, w).compile()
  one = gemm.pack_buffer_bytes("f32", 40, 32, 64, 1, trans_b=True)
  assert 0 < one <= c.memory_analysis().temp_size_in_bytes < 2 * one
  np.testing.assert_allclose(c(x, w), x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)
  w = np.ascontiguousarray(w.T)
  c = ourjax.jit(lambda x, w: x @ w, backend="cpu").lower(x[:4], w).compile()
  assert c.memory_analysis().temp_size_in_bytes < 1024
  np.testing.assert_allclose(c(x[:4], w), x[:4].astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


def test_a_dot_on_many_threads_packs_b_once(monkeypatch):
  """A product whose pieces would each pack the same columns of B (a tall one: a grid of row
  groups) packs B once, in a kernel of its own, for all its pieces to read (``dots.share_b``,
  ``PackBKernel``): planned for 16 threads, its temporaries are smaller than with a copy of B's
  panels in each thread's area, and its bits are the same (run on 2 and 16 threads)."""
  import ourjax
  from ourjax.backends.cpu import backend as cpu
  from ourjax.backends.llvm import planning as P
  from ourjax.config import config
  # (no disk cache: its key does not hold the planner's switch)
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir="off"))
  rng = np.random.default_rng(2)
  x = rng.standard_normal((2048, 576)).astype(np.float32)
  # (B transposed: always packed; a row-major B is read in place by pieces of few rows, which
  # then pack nothing of it)
  w = rng.standard_normal((64, 576)).astype(np.float32)
  old = cpu.num_threads()
  try:
    cpu.set_num_threads(16)
    out, temps = {}, {}
    for share in (True, False):
      monkeypatch.setattr(cpu._Planner, "share_packed_b", share)
      c = ourjax.jit(lambda x, w: x @ w.T, backend="cpu").lower(x, w).compile()
      _, steps, *_ = P.plan_entry(c._executable.module, cpu._Planner)
      kinds = [type(s.kernel).__name__ for s in steps]
      assert kinds == (["PackBKernel", "DotKernel"] if share else ["DotKernel"])
      temps[share] = c.memory_analysis().temp_size_in_bytes
      for n in (2, 16):
        cpu.set_num_threads(n)
        out[share, n] = np.asarray(c(x, w))
      cpu.set_num_threads(16)
  finally:
    cpu.set_num_threads(old)
  assert temps[True] < temps[False]
  np.testing.assert_allclose(out[True, 16], x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)
  for k, v in out.items():
    np.testing.assert_array_equal(v, out[True, 16], err_msg=str(k))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("nthreads", [1, 3])
@pytest.mark.parametrize("blocking", ["tiny", "default"])
def test_one_row_block_packs_b_panel_by_panel(dtype, tb, nthreads, blocking):
  """A piece of at most ``mc`` rows packs each panel of B as its row tiles need it, into one
  panel of scratch (``run`` checks that nothing is written past ``pack_buffer_elements``):
  sums over several K slices and column blocks (with an edge panel) match float64, and the
  scratch is a row block's A panels and one B panel, less than a taller product's (which
  packs a column block of B for its several row blocks)."""
  fn, bl = kernel(dtype, blocking=blocking)
  bl = bl or gemm.default_blocking(dtype)
  w = gemm.vector_target().lanes[dtype]
  if blocking == "tiny":
    M, N, K = bl.mc, 3 * bl.nc + 7, 5 * bl.kc + 3
  else:     # (more rows than B is read in place for, one row block)
    M, N, K = min(bl.mc, bl.direct_b_rows + 6), bl.nc + 40, 2 * bl.kc + 3
  rng = np.random.default_rng(11)
  a, am, lda = _operand(rng, dtype, M, K, False, 1)
  b, bm, ldb = _operand(rng, dtype, K, N, bool(tb), 2)
  C = run(fn, bl, dtype, am, bm, M, N, K, lda, ldb, 0, tb, nthreads=nthreads)[0]
  check_close(C, a, b, dtype)
  nr, align = bl.nv * w, 64 // np.dtype(NP[dtype]).itemsize
  one = gemm.pack_buffer_elements(dtype, M, N, K, 1, bl, trans_b=bool(tb))
  kstep = -(-K // -(-K // bl.kc))
  assert one <= -(-nr * kstep // align) * align + bl.mc * kstep + align
  tall = max(2 * bl.mc, bl.direct_b_rows) + 1       # (B packed, not read in place)
  assert one < gemm.pack_buffer_elements(dtype, tall, N, K, 1, bl, trans_b=bool(tb))
