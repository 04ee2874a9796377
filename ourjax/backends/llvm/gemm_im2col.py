"""Convolutions on the CPU's packed GEMM without a patch matrix in memory (implicit im2col).

``lowering/passes/conv_to_dot`` rewrites a convolution to ``patches @ kernel``; the CPU planner
(``cpu/backend._Planner._plan_group`` -> :func:`plan_patches`) recognises the patch matrix's
fusion (``llvm/im2col.match_root``) when its only reader is a dot this module ``accepts`` (alone
or in a fusion with its consumers), and plans only the (unpadded) input; the dot becomes an
``Im2colDotKernel`` (``llvm/dots.py``).  The dot then calls the shared GEMM,
``ourjax_gemm_<dtype>``, with ``transA == gemm.IM2COL`` and ``A`` the address of a descriptor
(the same blocking, threads and micro-kernels as a matrix's), whose A panels are packed by the
descriptor's packer, or (a descriptor naming none, :func:`direct_a`) read in place by the
direct micro-kernel the descriptor names instead (:func:`emit_direct_ukernel`: a pointer per
row into the input for each run of one tap's channels, no packing and no scratch for A;
process-wide, ``ourjax_gemm_<dtype>_im2col_D``, :func:`direct_symbol`, a library of its own
built only for programs that read patches in place, so that the GEMM every program with a dot
builds does not carry it) (:func:`emit_pack`; one process-wide function per layout,
``ourjax_gemm_<dtype>_im2col_<layout>``, :func:`pack_symbol`, built only when a program calls
it) straight from the input: for the patch row ``m`` (output position ``(n, o_1, o_2, o_3)``) and
column ``k`` (kernel position ``t = k // C``, channel ``c = k % C``) it reads
``input[n, o_1*s_1 + d_1(t), o_2*s_2 + d_2(t), o_3*s_3 + d_3(t), c]``, or a zero where that
position is in the padding; ``d(t)`` (the tap's start in the padded input minus the low
padding, i.e. ``k_i * dilation_i - low_i``) comes from a table per convolution.  Since A is
packed in the same order and blocks as from a written matrix, the products and sums are the
same and the results are bit-identical to the explicit patch matrix's.

Packing: per panel of ``mr`` rows and per run of at most W contiguous input elements (channels
of one kernel position, or on into the next positions' along the last spatial dimension when C
is small), each row loads its run with one vector load (a whole run of one tap: a plain load
from the input, or from a vector of zeros where the row's position is in the padding; other
runs: a masked load of the lanes whose positions lie inside the input), a W x W transpose in
registers turns rows into k, and each k stores ``mr`` lanes, as the plain packing of a
row-major A does.  Convolutions with at most 3 spatial dimensions (fewer are padded with unit
ones).

The kernel's ``A`` argument points to the descriptor, ``DESC_WORDS`` i64 words::

    0 input (the address of input[batch0, 0.., 0])   1 C
    2..4 out spatial dims O_1..O_3    5..7 input spatial dims I_1..I_3    8..10 strides s_1..s_3
    11 the address of the table: per tap, d_1, d_2, d_3 and span (i64): the elements from the
       tap's first channel on that lie contiguous in the input (C, or more where the next
       taps are the next positions along the last spatial dimension)
    12 a block epilogue (``EPILOGUE_TYPE``) or 0     13 its context
    14 taps     15 the address of the packer of its layout (``PACK_TYPE``): a
       convolution's patches ("F") or a weight gradient's ("W": rows (n, tap), columns (o_1,
       o_2, o_3, c); the offsets come from the row's tap, the stride's multiples from the
       column's position; runs of one position's channels), or 0: the patch rows read in place
    16 the address of the direct micro-kernel (``DIRECT_UKERNEL_TYPE``, :func:`direct_symbol`)
       where word 15 is 0, else 0

Block epilogue: the dot's elementwise consumer (``Im2colDotKernel.epilogue``: a loop kernel
over the dot's result, per-channel scale and shift, a residual, relu...), run by the GEMM on
each block of C as soon as its sums are final (the last K slice of a row block and column
block), while the block is in cache, instead of as a pass of its own over memory.
"""
from __future__ import annotations

import math
import os

import llvmlite.ir as ir

from ourjax.backends.llvm import emitter as E

__all__ = ["DESC_WORDS", "DESC_EPILOGUE", "DESC_PACK", "DESC_DIRECT", "EPILOGUE_TYPE",
           "PACK_TYPE", "LAYOUTS", "emit_pack", "emit_packer_library", "emit_direct_library",
           "accepts", "emit_call", "pack_symbol", "direct_symbol", "likely_direct",
           "plan_patches", "fusable_epilogue"]

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
DESC_WORDS = 17
DESC_EPILOGUE = 12
DESC_TAPS = 14      # the number of taps
DESC_PACK = 15      # the address of the packer of the patch matrix's layout (pack_symbol)
DESC_DIRECT = 16    # the address of the direct micro-kernel (direct_symbol), where no packer
#: ``void epilogue(i8* ctx, i64 row0, i64 rows, i64 col0, i64 cols)``
EPILOGUE_TYPE = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), ir.IntType(64),
                                                ir.IntType(64), ir.IntType(64), ir.IntType(64)])
_DIMS = 3    # spatial dimensions of the descriptor
_TAB = _DIMS + 1   # words per tap in the table: d_1..d_3, span
#: A weight gradient's patches are packed in runs of one output position's batch elements:
#: with fewer than this many the written matrix (ConcatKernel) is kept.
_MIN_W_RUN = 4


LAYOUTS = ("F", "W")


def PACK_TYPE(p: ir.Type) -> ir.FunctionType:
  """The type of a packer (:func:`emit_pack`), ``p`` the element pointer type."""
  return ir.FunctionType(ir.VoidType(), [I64.as_pointer(), I64, I64, I64, I64, p])


def pack_symbol(dtype: str, layout: str) -> str:
  """The name of the process-wide packer of patch matrices of ``layout`` (``"F"``, ``"W"``) for
  the shared GEMM of ``dtype`` (``gemm_library.py``: its library ``"<dtype>_im2col_<layout>"``,
  built on first use)."""
  if layout not in LAYOUTS:
    raise ValueError(f"gemm_im2col: layout must be one of {LAYOUTS}, not {layout!r}")
  return f"ourjax_gemm_{dtype}_im2col_{layout}"


def emit_packer_library(module: ir.Module, dtype: str, layout: str,
                        isa=None) -> ir.Function:
  """The process-wide packer :func:`pack_symbol` ``(dtype, layout)`` (:func:`emit_pack` for the
  shared GEMM's ``mr``, on the vector target ``isa``, default the code target's), exported."""
  from ourjax.backends.llvm import gemm
  vt = gemm.vector_target(isa)
  cx = gemm._Ctx(module, dtype, vt)
  fn = emit_pack(cx, pack_symbol(dtype, layout), vt.blocking[dtype].mr, layout)
  fn.linkage = ""        # (external: other modules call it through the descriptor)
  return fn


def direct_symbol(dtype: str) -> str:
  """The name of the process-wide direct micro-kernel of the shared GEMM of ``dtype``
  (:func:`emit_direct_library`; ``gemm_library.py``: its library ``"<dtype>_im2col_D"``, built
  on first use)."""
  return f"ourjax_gemm_{dtype}_im2col_D"


def emit_direct_library(module: ir.Module, dtype: str, isa=None) -> ir.Function:
  """The process-wide direct micro-kernel :func:`direct_symbol` ``(dtype)``, exported, of
  ``DIRECT_UKERNEL_TYPE``: the shared GEMM's tile (its blocking on the vector target ``isa``,
  default the code target's) over patch rows read in place (:func:`emit_direct_ukernel`; no
  epilogue, the sums stored or added as ``first`` says), a one-vector-wide one for a column
  panel of at most W valid columns where the GEMM has such narrow kernels.  The GEMM calls it
  through the descriptor (``DESC_DIRECT``) for each tile of such a convolution."""
  from ourjax.backends.llvm import gemm
  vt = gemm.vector_target(isa)
  cx = gemm._Ctx(module, dtype, vt)
  bl = vt.blocking[dtype]
  name = direct_symbol(dtype)
  wide = emit_direct_ukernel(cx, name + ".wide", bl, bl.mr, bl.nv, None, False)
  narrow = emit_direct_ukernel(cx, name + ".narrow", bl, bl.mr, 1, None, False) \
      if bl.narrow and bl.nv > 1 else None
  fn = ir.Function(module, DIRECT_UKERNEL_TYPE(cx), name)
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  args = list(fn.args)
  if narrow is None:
    b.call(wide, args)
  else:
    with b.if_else(b.icmp_signed("<=", args[9], _c64(cx.w))) as (n_, w_):
      with n_:
        b.call(narrow, args)
      with w_:
        b.call(wide, args)
  b.ret_void()
  return fn


def likely_direct(conv) -> bool:
  """Whether the convolution ``conv`` (an HLO instruction as lowered, before
  ``conv_to_dot``) will likely read its patch rows in place (:func:`direct_a`), from its
  operands' shapes: what ``libraries.prefetch_for`` starts building for it (a wrong guess
  costs a library built later, waited for, or never used)."""
  if os.environ.get("OURJAX_CPU_CONV_DIRECT_A", "1") == "0":
    return False
  from ourjax.lowering.passes.conv_to_dot import patch_layout
  lspec, _, ospec = conv.attrs["dimension_numbers"]
  if patch_layout(conv) != "F" or conv.operands[0].dims[lspec[1]] < DIRECT_MIN_CHANNELS:
    return False
  from ourjax.backends.llvm import gemm
  vt = gemm.vector_target()
  dtype = "f64" if conv.dtype == E.F64 else "f32"
  return not (vt.isa == "avx512" and -(-conv.dims[ospec[1]] // (
      vt.blocking[dtype].nv * vt.lanes[dtype])) > DIRECT_MAX_PANELS)


def _c64(v):
  return ir.Constant(I64, v)


def _desc_word(b, desc, i: int):
  """Word ``i`` of the convolution descriptor at ``desc``, loaded by ``b``."""
  return b.load(b.gep(desc, [_c64(i)]), align=8)


def _zero_row(b, cx, name: str, n: int):
  """A pointer to ``n`` zeros of ``cx``'s type: the module's internal constant ``name`` (made
  once, 64-byte aligned), what a padding position's patch row reads."""
  zg = cx.module.globals.get(name)
  if zg is None:
    zt = ir.ArrayType(cx.t, n)
    zg = ir.GlobalVariable(cx.module, zt, name)
    zg.global_constant = True
    zg.linkage = "internal"
    zg.initializer = ir.Constant(zt, None)
    zg.align = 64
  return b.bitcast(zg, cx.p)


def _descriptor(b, desc, cx):
  """The convolution descriptor's words as ``b`` loads them from ``desc``: (the input's
  address, its features, the output's, the input's and the strides' ``_DIMS`` spatial
  extents, the tap table's address)."""
  def word(i):
    return _desc_word(b, desc, i)
  return (b.inttoptr(word(0), cx.p), word(1), [word(2 + d) for d in range(_DIMS)],
          [word(5 + d) for d in range(_DIMS)], [word(8 + d) for d in range(_DIMS)],
          b.inttoptr(word(11), I64.as_pointer()))


def _joined(b, cx, xs, x_end, ys, y_end) -> list:
  """Where two branches join (``b`` at the join): a vector phi of each ``xs[i]`` coming from
  block ``x_end`` and ``ys[i]`` from ``y_end``."""
  out = []
  for x, y in zip(xs, ys):
    ph = b.phi(cx.vt)
    ph.add_incoming(x, x_end)
    ph.add_incoming(y, y_end)
    out.append(ph)
  return out


def emit_pack(cx, name: str, w: int, layout: str = "F") -> ir.Function:
  """``void pack(i64* desc, i64 m0, i64 k0, i64 rows, i64 kb, T* out)``:
  ``out[p][k][r] = patches[m0 + p*w + r, k0 + k]`` for ``p < ceil(rows/w)``, ``k < kb``,
  ``r < w``, zero where ``p*w + r >= rows`` (panels ``kb*w`` elements long, as
  ``gemm._emit_pack``'s), the patch matrix described by ``desc`` (see the module docstring)
  of ``layout`` ``"F"`` or ``"W"`` (``im2col.Geometry``)."""
  from ourjax.backends.llvm.gemm import _for, _sdiv_up, _smax, _smin, _transpose
  W = cx.w
  fn = ir.Function(cx.module, ir.FunctionType(ir.VoidType(), [I64.as_pointer(), I64, I64, I64,
                                                              I64, cx.p]), name)
  fn.linkage = "internal"
  fn.attributes.add("noinline")
  desc, m0, k0, rows, kb, out = fn.args
  desc.add_attribute("noalias")
  out.add_attribute("noalias")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  src, C, O, I_, S, table = _descriptor(b, desc, cx)
  wc = _c64(w)
  npanels = _sdiv_up(b, rows, wc)
  groups = [(g, min(W, w - g)) for g in range(0, w, W)]  # (first row, rows) of W-row groups
  lanes_ = {n: ir.Constant(cx.mt, [1] * n + [0] * (W - n)) for _, n in groups}
  align_out = min(64, W * cx.size) if w % W == 0 else cx.size
  zero = _c64(0)
  one = _c64(1)

  def store_lanes(val, ptr, n):
    if n == W:
      cx.vstore(b, val, ptr, align_out)
    else:
      b.call(cx.mstore, [val, ptr, ir.Constant(I32, cx.size), lanes_[n]])

  iota32 = ir.Constant(ir.VectorType(I32, W), list(range(W)))

  def _splat32(x):
    v = b.insert_element(ir.Constant(ir.VectorType(I32, W), None), x, ir.Constant(I32, 0))
    return b.shuffle_vector(v, ir.Constant(ir.VectorType(I32, W), None),
                            ir.Constant(ir.VectorType(I32, W), [0] * W))
  zeros = _zero_row(b, cx, name + ".zeros", W)
  taps = _desc_word(b, desc, DESC_TAPS)
  if layout == "F":
    t0 = b.udiv(k0, C)      # the tap and channel of column k0
    c0 = b.urem(k0, C)
  else:                     # the output position and channel of column k0
    q = b.udiv(k0, C)
    c0 = b.urem(k0, C)
    o0 = []
    for d in reversed(range(_DIMS)):
      o0.append(b.urem(q, O[d]))
      q = b.udiv(q, O[d])
    o0 = o0[::-1]

  with _for(b, 0, npanels, name="p") as p:
    r0 = b.mul(p, wc)
    dst0 = b.gep(out, [b.mul(r0, kb)])
    rowinfo = []    # per row of the panel (all groups): (valid, base_1..3, linear offset)
    if layout == "F":
      # the panel's first row m0 + r0 as (n, o_1, o_2, o_3): one division chain per panel,
      # the following rows step from it with carries
      pos = []
      q = b.add(m0, r0)
      for d in reversed(range(_DIMS)):
        pos.append(b.urem(q, O[d]))
        q = b.udiv(q, O[d])
      pos = [q] + pos[::-1]
      for g, n in groups:
        for i in range(W):
          valid = b.and_(b.icmp_signed("<", b.add(r0, _c64(g + i)), rows),
                         ir.Constant(I1, i < n))
          base = [b.mul(pos[1 + d], S[d]) for d in range(_DIMS)]
          lin = pos[0]
          for d in range(_DIMS):
            lin = b.add(b.mul(lin, I_[d]), base[d])
          rowinfo.append((valid, base, b.mul(lin, C)))
          # the next row's position: o_3 + 1, carrying into o_2, o_1, n
          nxt = list(pos)
          carry = ir.Constant(I1, 1)
          for d in reversed(range(_DIMS)):
            inc = b.add(nxt[1 + d], one)
            wrap = b.icmp_unsigned(">=", inc, O[d])
            nxt[1 + d] = b.select(carry, b.select(wrap, zero, inc), nxt[1 + d])
            carry = b.and_(carry, wrap)
          nxt[0] = b.select(carry, b.add(nxt[0], one), nxt[0])
          pos = nxt
    else:
      # row m = (n, tap): the tap's offsets from the table; the next row steps the tap
      q = b.add(m0, r0)
      rn, rt = b.udiv(q, taps), b.urem(q, taps)
      for g, n in groups:
        for i in range(W):
          valid = b.and_(b.icmp_signed("<", b.add(r0, _c64(g + i)), rows),
                         ir.Constant(I1, i < n))
          trow = b.gep(table, [b.mul(_smin(b, rt, b.sub(taps, one)), _c64(_TAB))])
          base = [b.load(b.gep(trow, [_c64(d)]), align=8) for d in range(_DIMS)]
          lin = rn
          for d in range(_DIMS):
            lin = b.add(b.mul(lin, I_[d]), base[d])
          rowinfo.append((valid, base, b.mul(lin, C)))
          inc = b.add(rt, one)
          wrap = b.icmp_unsigned(">=", inc, taps)
          rt = b.select(wrap, zero, inc)
          rn = b.select(wrap, b.add(rn, one), rn)

    # runs of contiguous input: at most W elements of one tap's channels, or, where the next
    # taps are the next positions along the last spatial dimension (rhs dilation 1 there),
    # on into their channels (``span``: a 3x3 kernel of 3 channels gives runs of 9); a run
    # ends at kb.  A row loads the lanes whose last-dimension position is inside the input:
    # one range of lanes, as the run's taps are consecutive positions.
    pre = b.block
    hdr = b.append_basic_block("run.hdr")
    body = b.append_basic_block("run.body")
    done = b.append_basic_block("run.done")
    b.branch(hdr)
    b.position_at_end(hdr)
    kk = b.phi(I64, name="kk")
    c = b.phi(I64, name="ch")
    kk.add_incoming(zero, pre)
    c.add_incoming(c0, pre)
    if layout == "F":     # the run's tap
      t = b.phi(I64, name="tap")
      t.add_incoming(t0, pre)
    else:                 # the run's output position
      o = [b.phi(I64, name=f"o{d}") for d in range(_DIMS)]
      for ph, v in zip(o, o0):
        ph.add_incoming(v, pre)
    b.cbranch(b.icmp_signed("<", kk, kb), body, done)
    b.position_at_end(body)
    if layout == "F":
      trow = b.gep(table, [b.mul(t, _c64(_TAB))])
      dd = [b.load(b.gep(trow, [_c64(d)]), align=8) for d in range(_DIMS)]
      span = b.load(b.gep(trow, [_c64(_DIMS)]), align=8)
    else:
      dd = [b.mul(o[d], S[d]) for d in range(_DIMS)]
      span = C
    n_run = _smin(b, _smin(b, _c64(W), b.sub(span, c)), b.sub(kb, kk))
    toff = zero
    for d in range(_DIMS):
      toff = b.add(b.mul(toff, I_[d]), dd[d])
    toff = b.add(b.mul(toff, C), c)
    last = _DIMS - 1
    # the common run, W channels of one tap: each row all inside the input or all in the
    # padding, a plain vector load from the input or from a vector of zeros
    simple = b.and_(b.icmp_signed("==", n_run, _c64(W)), b.icmp_signed("<=", b.add(c, _c64(W)), C))
    fn_ = b.function
    blk_s, blk_m, join = (fn_.append_basic_block(x) for x in ("run.plain", "run.masked",
                                                              "run.loaded"))
    b.cbranch(simple, blk_s, blk_m)
    b.position_at_end(blk_s)
    plain = []
    for valid, base, lin in rowinfo:
      ok = valid
      for d in range(_DIMS):
        ok = b.and_(ok, b.icmp_unsigned("<", b.add(base[d], dd[d]), I_[d]))
      ptr = b.select(ok, b.gep(src, [b.add(lin, toff)]), zeros)
      plain.append(cx.vload(b, ptr, cx.size))
    end_s = b.block
    b.branch(join)
    b.position_at_end(blk_m)
    masked = []
    for valid, base, lin in rowinfo:
      ok = valid
      for d in range(last):
        ok = b.and_(ok, b.icmp_unsigned("<", b.add(base[d], dd[d]), I_[d]))
      # lanes [lo, hi): the taps at last-dimension positions a + j, 0 <= a + j < I_last
      a = b.add(base[last], dd[last])
      lo = _smin(b, n_run, _smax(b, zero, b.sub(b.mul(b.sub(zero, a), C), c)))
      hi = _smin(b, n_run, b.sub(b.mul(b.sub(I_[last], a), C), c))
      hi = b.select(ok, _smax(b, hi, lo), lo)
      mask = b.and_(b.icmp_signed(">=", iota32, _splat32(b.trunc(lo, I32))),
                    b.icmp_signed("<", iota32, _splat32(b.trunc(hi, I32))))
      ptr = b.gep(src, [b.select(ok, b.add(lin, toff), zero)])
      masked.append(b.call(cx.mload, [ptr, ir.Constant(I32, cx.size), mask, cx.vzero]))
    end_m = b.block
    b.branch(join)
    b.position_at_end(join)
    vals = _joined(b, cx, plain, end_s, masked, end_m)
    full = b.icmp_signed("==", n_run, _c64(W))
    for gi, (g, n) in enumerate(groups):
      ts = _transpose(b, vals[gi * W:(gi + 1) * W])
      with b.if_else(full) as (all_, part):
        with all_:
          for k in range(W):
            store_lanes(ts[k], b.gep(dst0, [b.add(b.mul(b.add(kk, _c64(k)), wc), _c64(g))]), n)
        with part:
          for k in range(W):
            d = b.gep(dst0, [b.add(b.mul(b.add(kk, _c64(k)), wc), _c64(g))])
            if k == 0:
              store_lanes(ts[k], d, n)
            else:
              then = b.append_basic_block(f"kt{k}.then")
              nxt_b = b.append_basic_block(f"kt{k}.end")
              b.cbranch(b.icmp_signed("<", _c64(k), n_run), then, nxt_b)
              b.position_at_end(then)
              store_lanes(ts[k], d, n)
              b.branch(nxt_b)
              b.position_at_end(nxt_b)
    c2 = b.add(c, n_run)
    wrap = b.icmp_signed(">=", c2, C)
    kk.add_incoming(b.add(kk, n_run), b.block)
    if layout == "F":
      step = b.select(wrap, b.udiv(c2, C), zero)    # (taps the run ended past)
      t.add_incoming(b.add(t, step), b.block)
      c.add_incoming(b.sub(c2, b.mul(step, C)), b.block)
    else:                 # (a run ends at the position's last channel at the latest)
      c.add_incoming(b.select(wrap, zero, c2), b.block)
      carry = wrap
      for d in reversed(range(_DIMS)):
        inc = b.add(o[d], one)
        w_ = b.icmp_unsigned(">=", inc, O[d])
        o[d].add_incoming(b.select(carry, b.select(w_, zero, inc), o[d]), b.block)
        carry = b.and_(carry, w_)
    b.branch(hdr)
    b.position_at_end(done)
  b.ret_void()
  return fn


#: The longest run of one tap's channels a direct micro-kernel reads at once
#: (:func:`emit_direct_ukernel`): a row whose tap lies in the padding reads that many zeros.
DIRECT_RUN = 512
#: k steps per iteration of a direct micro-kernel's inner loop (4, the packed kernel's, kept
#: B's next rows in registers and spilled accumulators: 50% slower on AVX-512, 14 rows).
DIRECT_UNROLL = 1
#: Most column panels of a convolution's GEMM whose patch rows are read in place on AVX-512
#: (:func:`direct_a`): each tile reads its 14 rows' windows again for every column panel, and
#: with many panels that cost more than packing the rows once (single thread, thread CPU time,
#: 2-core EPYC: 128 output channels, 4 panels, 5-7% faster than packed; 256, 8 panels, 0-7%
#: slower; 512, 16 panels, 5% slower).  AVX2's 6-row tiles were faster at 256 too (11%).
DIRECT_MAX_PANELS = 4
#: Least channels of a convolution whose patch rows the GEMM reads in place
#: (:func:`direct_a`): each run of a tap's channels costs the micro-kernel its rows' pointers.
DIRECT_MIN_CHANNELS = 32


def direct_a(geo, n: int, dtype: str) -> bool:
  """Whether the GEMM reads the patch matrix of geometry ``geo`` in place, through a pointer
  per row into the input for each run of a tap's channels (:func:`emit_direct_ukernel`),
  instead of packing its row panels into the call's scratch: a convolution's patches (layout
  "F") of at least ``DIRECT_MIN_CHANNELS`` channels, whose ``n`` output channels (the GEMM's
  columns) make at most ``DIRECT_MAX_PANELS`` column panels on AVX-512 (any on AVX2 and
  SSE).  ``OURJAX_CPU_CONV_DIRECT_A=0`` turns it off (packed panels, as before)."""
  if os.environ.get("OURJAX_CPU_CONV_DIRECT_A", "1") == "0":
    return False
  if geo.layout != "F" or geo.channels < DIRECT_MIN_CHANNELS:
    return False
  from ourjax.backends.llvm import gemm
  vt = gemm.vector_target()
  if vt.isa == "avx512" and \
     -(-n // (vt.blocking[dtype].nv * vt.lanes[dtype])) > DIRECT_MAX_PANELS:
    return False
  return True


#: ``void uk(i64 kb, i64* desc, i64 m0, i64 k0, T* Bp, i64 bstride, T* C, i64 ldc, i64 mv,
#: i64 nvalid, i1 first, i1 last, i64 row0, i64 col0)``
def DIRECT_UKERNEL_TYPE(cx) -> ir.FunctionType:
  return _direct_type(cx.p)


def _direct_type(p: ir.Type) -> ir.FunctionType:
  return ir.FunctionType(ir.VoidType(), [I64, I64.as_pointer(), I64, I64, p, I64, p, I64,
                                         I64, I64, I1, I1, I64, I64])


def emit_direct_ukernel(cx, name: str, bl, mr: int, nv: int, epilogue,
                        accumulate: bool) -> ir.Function:
  """The GEMM's micro-kernel (``gemm._emit_ukernel``'s tile, stored the same way) whose A is a
  convolution's patch matrix (layout "F", the descriptor ``desc``) read in place: rows
  ``m0 .. m0+mr`` and columns ``k0 .. k0+kb`` of the patches, ``DIRECT_UKERNEL_TYPE``.  The
  K slice runs as runs of one tap's channels (at most ``DIRECT_RUN``), contiguous in the input
  (NHWC): per run each row's pointer is its output position's window at that tap, or a row of
  zeros where the tap lies in the padding (or the row is past ``mv``), and each k step
  broadcasts one element per row as from a packed panel, in the same order, so the sums are
  the packed GEMM's, bit for bit.  No panel of A is packed: the call needs no scratch for A."""
  from ourjax.backends.llvm.gemm import _emit_tile_store, _k_loop, _smin, _splat
  w = cx.w
  fn = ir.Function(cx.module, DIRECT_UKERNEL_TYPE(cx), name)
  fn.linkage = "internal"
  fn.attributes.add("noinline")
  kb, desc, m0, k0, bp, bstride, c, ldc, mv, nvalid, first, last, row0, col0 = fn.args
  for a in (bp, c):
    a.add_attribute("noalias")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  src, C, O, I_, S, table = _descriptor(b, desc, cx)
  zero, one = _c64(0), _c64(1)
  zeros = _zero_row(b, cx, f"im2col.direct.zeros.{cx.dtype}", DIRECT_RUN)
  # the first row's output position (n, o_1, o_2, o_3): one division chain
  pos = []
  q = m0
  for d in reversed(range(_DIMS)):
    pos.append(b.urem(q, O[d]))
    q = b.udiv(q, O[d])
  pos = [q] + pos[::-1]
  last_d = _DIMS - 1

  def window(p):
    """(base_1..3, linear offset of the window's origin) of the output position ``p``."""
    base = [b.mul(p[1 + d], S[d]) for d in range(_DIMS)]
    lin = p[0]
    for d in range(_DIMS):
      lin = b.add(b.mul(lin, I_[d]), base[d])
    return base, b.mul(lin, C)

  def step(ptrs, bseg, accs, k):
    brow = b.gep(bseg, [b.mul(k, bstride)])
    bv = [cx.vload(b, b.gep(brow, [_c64(v * w)]), cx.size) for v in range(nv)]
    out = list(accs)
    for r in range(mr):
      a = _splat(b, b.load(b.gep(ptrs[r], [k]), align=cx.size), w)
      for v in range(nv):
        out[r * nv + v] = cx.madd(b, a, bv[v], out[r * nv + v])
    return out

  def loop(ptrs, bseg, accs0, start, stop, unroll, tag):
    return _k_loop(b, cx, lambda accs, k: step(ptrs, bseg, accs, k), accs0, start, stop,
                   unroll, tag)

  def runs(tag, row_ptrs):
    """The K slice as runs of one tap's channels (accumulators from zero), each row read
    through ``row_ptrs(dd, toff)``; returns the accumulators and the block they end in."""
    pre = b.block
    hdr, body, done = (fn.append_basic_block(f"{tag}.{x}") for x in ("hdr", "body", "done"))
    t0, c0 = b.udiv(k0, C), b.urem(k0, C)
    b.branch(hdr)
    b.position_at_end(hdr)
    kk = b.phi(I64, name=tag + ".kk")
    t = b.phi(I64, name=tag + ".tap")
    ch = b.phi(I64, name=tag + ".ch")
    kk.add_incoming(zero, pre)
    t.add_incoming(t0, pre)
    ch.add_incoming(c0, pre)
    accs_in = []
    for i in range(mr * nv):
      ph = b.phi(cx.vt, name=f"{tag}.acc{i}")
      ph.add_incoming(cx.vzero, pre)
      accs_in.append(ph)
    b.cbranch(b.icmp_signed("<", kk, kb), body, done)
    b.position_at_end(body)
    trow = b.gep(table, [b.mul(t, _c64(_TAB))])
    dd = [b.load(b.gep(trow, [_c64(d)]), align=8) for d in range(_DIMS)]
    n_run = _smin(b, _smin(b, b.sub(C, ch), b.sub(kb, kk)), _c64(DIRECT_RUN))
    toff = zero
    for d in range(_DIMS):
      toff = b.add(b.mul(toff, I_[d]), dd[d])
    toff = b.add(b.mul(toff, C), ch)
    ptrs = row_ptrs(dd, toff)
    bseg = b.gep(bp, [b.mul(kk, bstride)])
    u = DIRECT_UNROLL
    kmain = b.sub(n_run, b.srem(n_run, _c64(u)))
    accs = loop(ptrs, bseg, accs_in, zero, kmain, u, tag + ".kmain")
    accs = loop(ptrs, bseg, accs, kmain, n_run, 1, tag + ".krem")
    # the next run: on in this tap's channels (the slice ended) or the next tap's first
    c2 = b.add(ch, n_run)
    wrap = b.icmp_signed(">=", c2, C)
    latch = b.block
    kk.add_incoming(b.add(kk, n_run), latch)
    t.add_incoming(b.select(wrap, b.add(t, one), t), latch)
    ch.add_incoming(b.select(wrap, zero, c2), latch)
    for ph, a in zip(accs_in, accs):
      ph.add_incoming(a, latch)
    b.branch(hdr)
    b.position_at_end(done)
    return accs_in, done

  # a tile whose rows lie in one output row (consecutive positions along the last spatial
  # dimension: the common case): row r's window is row 0's moved r strides, and at each tap
  # the rows inside the input are one range [r_lo, r_hi); else each row on its own
  one_row = b.icmp_unsigned("<", b.add(pos[1 + last_d], _c64(mr - 1)), O[last_d])
  blk_f, blk_g, join = (fn.append_basic_block(x) for x in ("tile.row", "tile.rows", "tile.end"))
  b.cbranch(one_row, blk_f, blk_g)

  b.position_at_end(blk_f)
  base0, lin0 = window(pos)
  rstep = b.mul(S[last_d], C)       # (elements between consecutive rows' windows)
  rows_ = [_c64(r) for r in range(mr)]

  def fast_ptrs(dd, toff):
    ok = ir.Constant(I1, 1)
    for d in range(last_d):
      ok = b.and_(ok, b.icmp_unsigned("<", b.add(base0[d], dd[d]), I_[d]))
    a = b.add(base0[last_d], dd[last_d])       # row r at a + r*s, inside when in [0, I)
    s_ = S[last_d]
    lo = b.select(b.icmp_signed(">=", a, zero), zero,
                  b.sdiv(b.add(b.sub(zero, a), b.sub(s_, one)), s_))
    room = b.sub(b.sub(I_[last_d], one), a)    # (I - 1 - a: the last row inside)
    hi = b.select(b.icmp_signed("<", room, zero), zero, b.add(b.sdiv(room, s_), one))
    hi = b.select(ok, _smin(b, hi, mv), zero)
    p0 = b.gep(src, [b.add(lin0, toff)])
    out = []
    for r in range(mr):
      inside = b.and_(b.icmp_signed(">=", rows_[r], lo), b.icmp_signed("<", rows_[r], hi))
      out.append(b.select(inside, b.gep(p0, [b.mul(rows_[r], rstep)]), zeros))
    return out
  accs_f, end_f = runs("row", fast_ptrs)
  b.branch(join)

  b.position_at_end(blk_g)
  rowinfo = []      # per row: (valid, base_1..3, linear offset of its window's origin)
  p = pos
  for r in range(mr):
    base, lin = window(p)
    rowinfo.append((b.icmp_signed("<", _c64(r), mv), base, lin))
    nxt = list(p)      # the next row's position: o_3 + 1, carrying into o_2, o_1, n
    carry = ir.Constant(I1, 1)
    for d in reversed(range(_DIMS)):
      inc = b.add(nxt[1 + d], one)
      wrap_ = b.icmp_unsigned(">=", inc, O[d])
      nxt[1 + d] = b.select(carry, b.select(wrap_, zero, inc), nxt[1 + d])
      carry = b.and_(carry, wrap_)
    nxt[0] = b.select(carry, b.add(nxt[0], one), nxt[0])
    p = nxt

  def general_ptrs(dd, toff):
    out = []
    for valid, base, lin in rowinfo:
      ok = valid
      for d in range(_DIMS):
        ok = b.and_(ok, b.icmp_unsigned("<", b.add(base[d], dd[d]), I_[d]))
      out.append(b.select(ok, b.gep(src, [b.add(lin, toff)]), zeros))
    return out
  accs_g, end_g = runs("rows", general_ptrs)
  b.branch(join)

  b.position_at_end(join)
  accs = _joined(b, cx, accs_f, end_f, accs_g, end_g)
  _emit_tile_store(b, cx, accs, mr, nv, c, ldc, mv, nvalid, first, last, row0, col0,
                   epilogue, accumulate)
  b.ret_void()
  return fn


def accepts(dot, patches, geo) -> bool:
  """Whether ``dot`` (an HLO dot reading the patch matrix ``patches`` of geometry ``geo``) can
  run on the implicit-im2col GEMM: ``patches`` is its A operand as it is ([M, K], k
  contiguous), f32 or f64 throughout, B readable by the packed GEMM, a convolution's patches
  (layout "F") or a weight gradient's (layout "W", not a batch chunk, of at least
  ``_MIN_W_RUN`` batch elements) of at most 3 spatial dimensions.  ``OURJAX_CPU_IMPLICIT_GEMM=0``
  turns it off (the patch matrix is written, as before)."""
  from ourjax.backends.llvm.dots import DotSpec, _gemm_layout_ok, fast_dot_ok
  if os.environ.get("OURJAX_CPU_IMPLICIT_GEMM", "1") == "0":
    return False
  if dot.opcode != "dot" or dot.operands[0] is not patches or dot.operands[1] is patches:
    return False
  if dot.shape.is_tuple or not fast_dot_ok(dot) or geo.layout not in ("F", "W"):
    return False
  if not 1 <= len(geo.strides) <= _DIMS or (geo.layout == "W" and geo.batch0):
    return False
  if geo.layout == "W" and geo.channels < _MIN_W_RUN:
    return False    # (runs of a position's channels, i.e. batch elements: too short to pay)
  s = DotSpec(dot)
  if geo.layout == "F":
    shape = (math.prod(geo.out_dims), geo.taps * geo.channels)
  else:
    shape = (geo.out_dims[0] * geo.taps, math.prod(geo.out_dims[1:]) * geo.channels)
  return s.ok and s.B == 1 and s.a_sk == 1 and (s.M, s.K) == shape and _gemm_layout_ok(s)


def emit_call(b, spec, geo, src, Bm, C, scratch, tid, nthreads, epilogue=None, ptr=None,
              b_packed=False, blocking=None):
  """Emit the call of the implicit-im2col GEMM: ``C = patches @ Bm`` for the dot ``spec``
  (``DotSpec``), the patches of geometry ``geo`` over the input buffer at ``src`` (a typed
  pointer to its first element); ``epilogue``: a loop kernel run on each finished block
  (``fusable_epilogue``), its buffers' pointers from ``ptr``; ``b_packed``: ``Bm`` holds B
  packed (``gemm.emit_pack_b_call``); ``blocking``: the call's (``dots.gemm_blocking``, what
  ``scratch`` was sized for), None: the kernel's own."""
  from ourjax.backends.llvm import gemm
  dtype = "f32" if spec.dtype == E.F32 else "f64"
  r = len(geo.strides)
  pad = _DIMS - r
  out = (1,) * pad + tuple(geo.out_dims[1:])
  ins = (1,) * pad + tuple(geo.in_dims[1:-1])
  strides = (1,) * pad + tuple(geo.strides)
  C_ = geo.channels
  mod = b.module
  offs = [(0,) * pad + tuple(s[d] - geo.low[d] for d in range(r)) for s in geo.starts]
  table = []
  for t, d in enumerate(offs):
    run = 1          # taps t, t+1, ... at consecutive positions of the last dimension
    while t + run < len(offs) and offs[t + run][:-1] == d[:-1] and \
        offs[t + run][-1] == d[-1] + run:
      run += 1
    table += [*d, run * C_]
  ty = ir.ArrayType(I64, len(table))
  # (named by its contents, as the block epilogue: kernels alike name the same helpers, so
  # that the backend finds them alike, dedupe.function_key, and one table serves them all)
  tname = "im2col.taps." + _digest(repr(table))
  tab = mod.globals.get(tname)
  if tab is None:
    tab = ir.GlobalVariable(mod, ty, tname)
    tab.global_constant = True
    tab.linkage = "internal"
    tab.initializer = ir.Constant(ty, [_c64(x) for x in table])
  # the descriptor, on the stack of the calling function
  dsc = E.alloca_entry(b, ir.ArrayType(I64, DESC_WORDS), name="im2col.desc")
  words = b.bitcast(dsc, I64.as_pointer())
  first = b.gep(src, [_c64(geo.batch0 * math.prod(geo.in_dims[1:]))])
  vals = [b.ptrtoint(first, I64), _c64(C_), *map(_c64, out), *map(_c64, ins),
          *map(_c64, strides), b.ptrtoint(b.bitcast(tab, I64.as_pointer()), I64)]
  p = ir.FloatType().as_pointer() if dtype == "f32" else ir.DoubleType().as_pointer()
  direct = direct_a(geo, spec.N, dtype)
  # (no packer: the direct micro-kernel reads the rows in place)
  sym = direct_symbol(dtype) if direct else pack_symbol(dtype, geo.layout)
  callee = mod.globals.get(sym)
  if callee is None:    # (declared: the process-wide function, gemm_library.py)
    callee = ir.Function(mod, _direct_type(p) if direct else PACK_TYPE(p), sym)
  addr = b.ptrtoint(callee, I64)
  tail = [_c64(geo.taps)] + ([_c64(0), addr] if direct else [addr, _c64(0)])
  if epilogue is None:
    vals += [_c64(0), _c64(0)]
  else:
    bufs = list(epilogue.buffers)
    i8p = ir.IntType(8).as_pointer()
    # (the context: the buffers' pointers, then the row length N, so that the epilogue's code
    # does not depend on it: convolutions of one consumer share it, whatever their shapes)
    ctx = E.alloca_entry(b, ir.ArrayType(i8p, len(bufs) + 1), name="im2col.epilogue")
    slots = b.bitcast(ctx, i8p.as_pointer())
    for k, buf in enumerate(bufs):
      b.store(b.bitcast(ptr(buf), i8p), b.gep(slots, [_c64(k)]))
    b.store(b.inttoptr(_c64(spec.N), i8p), b.gep(slots, [_c64(len(bufs))]))
    fn = _emit_block_epilogue(mod, epilogue, bufs)
    vals += [b.ptrtoint(fn, I64), b.ptrtoint(ctx, I64)]
  vals += tail
  assert len(vals) == DESC_WORDS
  for k, v in enumerate(vals):
    b.store(v, b.gep(words, [_c64(k)]), align=8)
  gemm.emit_gemm_call(b, dtype, words, Bm, C, M=spec.M, N=spec.N, K=spec.K,
                      a_strides=(spec.K, 1), b_strides=(spec.b_sk, spec.b_sn), tid=tid,
                      nthreads=nthreads, scratch=scratch, im2col=True, b_packed=b_packed,
                      blocking=blocking)


def _reader_dot(x, comp):
  """The dot that alone reads ``x`` (an instruction of ``comp``) as its A operand, and the
  value it reads it as (``x``, or the parameter of the fusion the dot is in: a dot with its
  elementwise consumers), or None."""
  users = [u for u in comp.instructions if any(o is x for o in u.operands)]
  if len(users) != 1 or sum(o is x for o in users[0].operands) != 1:
    return None
  u = users[0]
  if u.opcode == "dot":
    return u, x
  if u.opcode != "fusion":
    return None
  fc = u.attrs["calls"]
  p = fc.parameters[[k for k, o in enumerate(u.operands) if o is x][0]]
  inner = [i for i in fc.instructions if any(o is p for o in i.operands)]
  if len(inner) != 1 or inner[0].opcode != "dot":
    return None
  return inner[0], p


def plan_patches(planner, instr, vals, steps, want, comp, dying=None):
  """For ``Planner._plan_group``: when ``instr`` is a fusion computing convolution patch
  matrices (``im2col.match_root``; a tuple-rooted fusion computes several: batch chunks, or a
  forward convolution's and a weight gradient's patches of one input) of which some are read
  by one dot each that ``accepts`` them (that dot alone, or inside a fusion with its
  elementwise consumers), plan only the inputs of those (a kernel writes an input unless it is
  a buffer already: the previous layer's activation, say) and the other elements as before,
  and return the value: an ``Im2colBuf`` standing for each such matrix (a tuple for a tuple);
  else None.  ``dying``: see ``im2col.plan_sources``."""
  from ourjax.backends.llvm import im2col as IM
  if instr.opcode != "fusion" or comp.root is instr or instr in want or \
     any(isinstance(k, tuple) and k[1] is instr for k in want):
    return None
  fc = instr.attrs["calls"]
  tup = instr.shape.is_tuple
  roots = fc.root.operands if tup else [fc.root]
  if tup and fc.root.opcode != "tuple":
    return None
  if tup:   # element k read through one get-tuple-element
    users = [u for u in comp.instructions if any(o is instr for o in u.operands)]
    if any(u.opcode != "get-tuple-element" for u in users):
      return None
    readers = {}
    for u in users:
      readers.setdefault(u.attrs["index"], []).append(u)
    readers = {k: v[0] for k, v in readers.items() if len(v) == 1}
  else:
    readers = {0: instr}
  geos = {}
  for k, r in enumerate(roots):
    geo = IM.match_root(r, one_tap=True) if k in readers else None
    found = _reader_dot(readers[k], comp) if geo is not None else None
    if found is not None and accepts(found[0], found[1], geo):
      geos[k] = geo
  if not geos:
    return None
  # the other elements of a tuple, written as before
  written = {k: planner.temp(r.dtype, r.dims, f"{instr.name}.{k}")
             for k, r in enumerate(roots) if k not in geos}
  srcs = IM.plan_sources(planner, instr, list(geos.values()), vals, steps,
                         [(roots[k], buf) for k, buf in written.items()], dying)
  first = next(iter(geos.values()))
  planner.module.note("implicit_im2col", f"%{instr.name}: {len(geos)} patch matri"
                      f"{'ces' if len(geos) > 1 else 'x'} packed by the GEMM straight from "
                      f"{list(first.in_dims)} ({first.taps} kernel positions)")
  out = [IM.Im2colBuf(srcs[id(geos[k].v)], geos[k], r.dims, f"{instr.name}.{k}")
         if k in geos else written[k] for k, r in enumerate(roots)]
  return tuple(out) if tup else out[0]


#: The attribute of an ``ir.Module`` holding the registry of helper functions that the modules
#: of one program share (``_emit_block_epilogue``): a dict, name -> the defining module.
HELPERS_ATTR = "_ojx_shared_helpers"


def _digest(text: str) -> str:
  import hashlib
  return hashlib.sha256(text.encode()).hexdigest()[:20]


def _emit_block_epilogue(module, kern, bufs):
  """The ``EPILOGUE_TYPE`` function of the loop kernel ``kern`` (rows mode, its last dimension
  the dot's N columns: see ``fusable_epilogue``) on rows ``[row0, row0+rows)`` and columns
  ``[col0, col0+cols)`` of its index space, the pointers of ``bufs`` (its buffers) and then N
  read from the context.  The loops are a function of their own, ``<name>.body``, that takes
  those pointers as ``noalias`` arguments (distinct buffers, as the kernel's own arguments are)
  and is inlined: read from memory, they were pointers that might overlap, and LLVM vectorised
  each loop with run-time overlap checks between every pair and a scalar copy.  The function
  is named by the body's IR (``im2col.epilogue.<digest>``): convolutions of one consumer
  (a ResNet's blocks: scale, shift, relu, perhaps a residual) share one in a module whatever
  their shapes, as N comes from the context and the row's position in the other dimensions is
  not computed unless used, and their kernels, alike, are emitted once
  (``dedupe.function_key``).  Where the program's kernel modules share a registry
  (``HELPERS_ATTR``, set by the CPU backend: name -> the module that defines it), one module
  defines it (external) and the others only declare it."""
  from ourjax.backends.llvm import kernels as K
  fty = ir.FunctionType(ir.VoidType(), [K._ptr_type(x) for x in bufs] + [I64] * 5)
  body = ir.Function(module, fty, module.get_unique_name("im2col.epilogue.new"))
  body.linkage = "internal"
  body.attributes.add("alwaysinline")
  for a in body.args[:len(bufs)]:
    a.add_attribute("noalias")
  _emit_epilogue_loops(body, kern, bufs)
  # (the key from the blocks' text: the function's own text, which names it, is not printed
  # before it has its final name)
  name = "im2col.epilogue." + _digest(str(fty) + "\n".join(str(blk) for blk in body.blocks))
  del module.globals[body.name]
  fn = module.globals.get(name)
  if fn is not None:          # (one alike: this body is dropped)
    return fn
  shared = getattr(module, HELPERS_ATTR, None)
  if shared is not None and shared.get(name, module) is not module:
    return ir.Function(module, EPILOGUE_TYPE, name)   # (another module of the program's)
  body.name = name + ".body"
  module.globals[body.name] = body
  fn = ir.Function(module, EPILOGUE_TYPE, name)
  fn.linkage = "internal"
  if shared is not None:
    fn.linkage = ""           # (external: the program's other modules call it)
    shared[name] = module
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  slots = b.bitcast(fn.args[0], ir.IntType(8).as_pointer().as_pointer())
  n = b.ptrtoint(b.load(b.gep(slots, [_c64(len(bufs))])), I64)
  b.call(body, [b.bitcast(b.load(b.gep(slots, [_c64(k)])), K._ptr_type(buf))
                for k, buf in enumerate(bufs)] + [n] + list(fn.args[1:]))
  b.ret_void()
  return fn


def _emit_epilogue_loops(body, kern, bufs):
  """The loops of a block epilogue (``_emit_block_epilogue``) in ``body``."""
  from ourjax.backends.llvm import kernels as K
  from ourjax.backends.llvm.emitter import Emitter, ForLoop, Index
  n, row0, rows, col0, cols = body.args[len(bufs):]
  b = ir.IRBuilder(body.append_basic_block("entry"))
  ptrs = {id(buf): a for buf, a in zip(bufs, body.args)}

  def ptr(buf):
    return ptrs[id(buf)]
  em = Emitter(b, K._make_leaves(b, kern.leafmap, ptr), kern.fast_reductions)
  em.reduce_ok = None
  outer = kern.dims[:-1]
  with ForLoop(b, row0, b.add(row0, rows), "row") as row:
    omulti = E.delinearize(b, row.index, outer)
    em.push_scope()
    base = b.mul(row.index, n, flags=["nuw", "nsw"])
    with ForLoop(b, col0, b.add(col0, cols), "col") as col:
      em.push_scope()
      idx = Index(b, kern.dims, linear=b.add(base, col.index, flags=["nuw", "nsw"]),
                  multi=omulti + [col.index])
      K.store_outputs(b, em, kern.outputs, idx, ptr, evaluate_first=True)
      em.pop_scope()
    em.pop_scope()
  b.ret_void()
  # (the row's position in the outer dimensions, which names their sizes, is dropped where
  # nothing uses it: the usual epilogue reads C at its linear index and per-channel vectors
  # at the column)
  from ourjax.backends.llvm import irtools
  irtools.drop_unused(body)


def fusable_epilogue(dot_kernel, kern) -> bool:
  """Whether the loop kernel ``kern`` may run as the block epilogue of ``dot_kernel`` (an
  ``Im2colDotKernel`` without one, its result C = [M, N]): rows mode over dims whose last is
  N and whose size is M * N, every output over all of them, no reductions, and every value
  that depends on C elementwise (or a reshape: the same linear index), so each element reads
  C only at its own position, which is final once its block is; nothing it writes is read or
  written by the dot, except C itself (an output computed over C in place)."""
  from ourjax.backends.llvm import kernels as K
  s = dot_kernel.spec
  if type(kern) is not K.LoopKernel or not kern.rows or kern.prefetch_outer or \
     kern.prefetch_elem or not kern.dims or kern.dims[-1] != s.N or \
     math.prod(kern.dims) != s.M * s.N:
    return False
  if any(tuple(K._dims(i)) != kern.dims or getattr(i.shape, "is_tuple", False)
         for i, _ in kern.outputs):
    return False
  C = dot_kernel.out
  mine = {id(x) for x in dot_kernel.buffers}
  # (an output written over C itself, as the planner shares the buffers of a dot and its
  # consumer: each element is read before it is stored, in the block the GEMM has finished)
  if any(id(w) in mine and w is not C for w in kern.writes) or \
     not any(v is C for v in kern.leafmap.values()):
    return False
  tainted = {id(i) for i, v in kern.leafmap.items() if v is C}
  if any(isinstance(v, tuple) and any(x is C for x in v) for v in kern.leafmap.values()):
    return False
  memo = {}

  def reads_c(x):
    k = id(x)
    if k in memo:
      return memo[k]
    memo[k] = False
    if x in kern.leafmap:
      v = k in tainted
    else:
      v = any([reads_c(o) for o in x.operands])
      if v and (x.shape.is_tuple or x.shape.size != s.M * s.N or
                not (x.is_elementwise() or x.opcode == "reshape")):
        bad.append(x)
    memo[k] = v
    return v
  bad = []
  for i, _ in kern.outputs:
    reads_c(i)
  return not bad


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
