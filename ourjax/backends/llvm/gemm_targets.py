"""The GEMM's vector targets (moved out of ``gemm.py``, which emits the kernels): the register
and cache blocking (:class:`Blocking`) of each vector instruction set (:data:`VECTOR_TARGETS`,
:func:`vector_target`, :func:`default_blocking`), and the ``tune`` word a call passes to run
with another cache blocking (:data:`TUNE_FIELDS`, :func:`tune_word`).  ``gemm.py`` exports all
of them as before."""
from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["Blocking", "VectorTarget", "VECTOR_TARGETS", "vector_target", "default_blocking",
           "tune_word", "TUNE_FIELDS"]


@dataclasses.dataclass(frozen=True)
class Blocking:
  """Register and cache blocking.  ``mr`` rows x ``nv`` vectors of W lanes per micro-tile; ``kc``
  the depth of a K slice; ``mc`` rows of A packed at once (a multiple of mr); ``nc`` columns of B
  packed at once (a multiple of nv*W); ``unroll`` k steps per iteration of the inner loop; the
  rest selects the edge kernels and the unpacked-B path (0/False: off)."""
  mr: int
  nv: int
  kc: int
  mc: int
  nc: int
  unroll: int = 4
  mr_small: int = 4          # edge tiles of at most 2*mr_small rows use an mr_small-row kernel
  narrow: bool = True        # edge panels of at most W columns use a one-vector-wide kernel
  direct_b_rows: int = 64    # a thread with at most this many rows reads a row-major B unpacked
  stream_rows: int = 8       # a product with M <= this streams B through 4/2/1-row axpys


@dataclasses.dataclass(frozen=True)
class VectorTarget:
  """What the GEMM generates for one vector instruction set (``jit.vector_isa()``): ``lanes[dtype]``
  (W) elements per vector, ``llvm.fma`` or (``fma=False``) fmul + fadd, and ``blocking[dtype]``."""
  isa: str
  lanes: dict
  fma: bool
  blocking: dict


# The one place that picks vector width and register blocking.  A micro-kernel step keeps
# mr*nv accumulators, nv vectors of the B panel and one broadcast A element in vector registers
# (without FMA also one product), so each blocking below is sized to its ISA's register file.
# Cache blocks: the kc x nv*W B panel stays in L1 (16 to 32 KiB), mc x kc of A in L2.
VECTOR_TARGETS = {
    # AVX-512, 32 zmm of 512 bits: 14 x 2 = 28 accumulators + 2 B + 1 broadcast = 31.
    # Measured on AMD znver5 (48 KiB L1d, 1 MiB L2 per core): see benchmarks/gemm.py.  A
    # row-major B is read in place by pieces of up to 256 rows (not 64): on AMD znver4, f32
    # and f64, 96 to 256 rows ran 2-16% faster so (one thread; 64 rows and fewer, 384 and
    # more the same), what gemm_tune.py kept picking; AVX2 code there was up to 6% slower so.
    "avx512": VectorTarget("avx512", {"f32": 16, "f64": 8}, True, {
        "f32": Blocking(mr=14, nv=2, kc=256, mc=168, nc=2048, unroll=4, direct_b_rows=256),
        "f64": Blocking(mr=14, nv=2, kc=256, mc=168, nc=1024, unroll=4, direct_b_rows=256)}),
    # AVX2, 16 ymm of 256 bits: 6 x 2 = 12 accumulators + 2 B + 1 broadcast = 15 (the classic
    # Haswell kernel; the AVX-512 tiles, 28 accumulators, spill hundreds of times here).  4 x 3
    # (12 + 3 + 1 = 16) ran as fast; mc = 72 beat 144 on 1024^3 f32 by ~5-10%, other mc and
    # kc 128..384 were within the noise.  Measured under OURJAX_CPU=haswell, i.e. AVX2 code on
    # an AVX-512 host (Intel Emerald Rapids), not on a native AVX2 machine.
    "avx2": VectorTarget("avx2", {"f32": 8, "f64": 4}, True, {
        "f32": Blocking(mr=6, nv=2, kc=256, mc=72, nc=2048, unroll=4, mr_small=2),
        "f64": Blocking(mr=6, nv=2, kc=256, mc=72, nc=1024, unroll=4, mr_small=2)}),
    # SSE2 (baseline x86-64; also AVX without FMA), 16 xmm of 128 bits, no FMA (llvm.fma would
    # become a libm call per lane, ~20x slower): fmul + fadd, 4 x 2 = 8 accumulators + 2 B
    # + 1 broadcast + 1 product = 12.  Correct first; its speed was not tuned.
    "sse": VectorTarget("sse", {"f32": 4, "f64": 2}, False, {
        "f32": Blocking(mr=4, nv=2, kc=256, mc=128, nc=1024, unroll=4, mr_small=1),
        "f64": Blocking(mr=4, nv=2, kc=256, mc=64, nc=512, unroll=4, mr_small=1)}),
}


def vector_target(isa: Optional[str] = None) -> VectorTarget:
  """The table entry for ``isa`` (``"avx512"``, ``"avx2"``, ``"sse"``); by default the one of
  the CPU that code is generated for (``ourjax.backends.cpu.jit.vector_isa()``: the host, or
  what ``OURJAX_CPU`` names)."""
  if isa is None:
    from ourjax.backends.cpu import host
    isa = host.target()["isa"]     # (jit.vector_isa(), known without starting LLVM)
  try:
    return VECTOR_TARGETS[isa]
  except KeyError:
    raise ValueError(f"gemm: no vector target {isa!r} (have {sorted(VECTOR_TARGETS)})") from None


#: The fields of a call's ``tune`` word: (name, bit offset, bits, scale); a field holds
#: ``value // scale + 1`` (0: the generated kernel's own value).
TUNE_FIELDS = (("kc", 0, 14, 1), ("mc", 14, 14, 1), ("nc", 28, 16, 1),
               ("direct_b_rows", 44, 9, 4), ("stream_rows", 53, 8, 1))


def tune_word(blocking: Blocking, dtype: str, isa: Optional[str] = None) -> int:
  """The ``tune`` argument that makes the kernel of ``dtype`` generated for ``isa`` (with its
  default blocking) run with ``blocking``'s cache blocking: 0 when they agree.  Raises
  ValueError when ``blocking``'s micro-tile differs from the generated one (fixed in the code),
  its ``mc`` or ``nc`` is not a multiple of the tile, or a value does not fit its field."""
  vt = vector_target(isa)
  base = vt.blocking[dtype]
  if (blocking.mr, blocking.nv, blocking.unroll, blocking.mr_small, blocking.narrow) != \
     (base.mr, base.nv, base.unroll, base.mr_small, base.narrow):
    raise ValueError(f"gemm tune_word: {blocking} has another register blocking than the "
                     f"kernel's {base} (only cache blocking is chosen at run time)")
  if blocking.mc % base.mr or blocking.nc % (base.nv * vt.lanes[dtype]) or \
     min(blocking.kc, blocking.mc, blocking.nc) <= 0:
    raise ValueError(f"gemm tune_word: mc must be a positive multiple of mr and nc of nr "
                     f"({blocking})")
  if blocking.stream_rows > 0 and base.stream_rows <= 0:
    raise ValueError("gemm tune_word: the kernel was generated without the few-rows kernels")
  word = 0
  for name, off, bits, scale in TUNE_FIELDS:
    v = getattr(blocking, name)
    if v == getattr(base, name):
      continue
    if v % scale or v < 0 or v // scale + 1 >= 1 << bits:
      raise ValueError(f"gemm tune_word: {name}={v} does not fit the tune word")
    word |= (v // scale + 1) << off
  return word


def default_blocking(dtype: str, isa: Optional[str] = None) -> Blocking:
  """The blocking :func:`emit_gemm` uses for ``dtype`` on ``isa`` (default: the code target)."""
  return vector_target(isa).blocking[dtype]
