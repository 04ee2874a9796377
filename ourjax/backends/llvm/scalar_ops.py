"""Scalar arithmetic on compute values, for the elemental emitter (``emitter.py``) and the
kernels: XLA's float and integer maximum/minimum, integer division, remainder, power and shifts
with XLA's results for every operand, the math functions (``MathLib``: inline polynomials of
``llvm/math`` or out-of-line calls, and the module's math symbols), and the HLO unary, binary and
comparison opcodes on one element (``unary_op``, ``binary_op``, ``compare_op``).  Values are in
the compute types of ``emitter.compute_type``; narrow floats are rounded by the callers' rules
(``emitter.round_narrow``).  Split out of ``emitter.py``, which re-exports every name and must be
imported first (as ``elemental``: both are built on its helpers; a warm start imports neither)."""
from __future__ import annotations

import math as _pymath

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.llvm import math as llmath
# (the helpers it is built on: ``emitter`` imports this module after defining them)
from ourjax.backends.llvm.emitter import (
    BOOL, DBL, F64, FLT, I1, I8, I64, EmitterError, ForLoop, _EXACT_UNARY, _MATH_UNARY,
    _SELECTING, _int_const, _is_float, _is_narrow, _is_signed, alloca_entry, i64, intrinsic,
    round_narrow)


def _fmax(b, x, y):
  """XLA's float maximum (IEEE 754-2019 ``maximum``, LLVM's ``llvm.maximum``): a NaN operand
  gives NaN, and +0 is above -0 in either operand order (x86: ``maxps`` with the operands
  ordered by sign and a NaN blend; PTX: ``max.NaN``)."""
  return intrinsic(b, "maximum", x.type, [x, y])


def _fmin(b, x, y):
  """XLA's float minimum: NaN propagates, -0 is below +0 (``llvm.minimum``)."""
  return intrinsic(b, "minimum", x.type, [x, y])


def _imax(b, x, y, signed):
  if _nvptx_int32(b, x):
    return _ptx_select_minmax(b, x, y, signed, "gt")
  c = b.icmp_signed(">", x, y) if signed else b.icmp_unsigned(">", x, y)
  return b.select(c, x, y)


def _imin(b, x, y, signed):
  if _nvptx_int32(b, x):
    return _ptx_select_minmax(b, x, y, signed, "lt")
  c = b.icmp_signed("<", x, y) if signed else b.icmp_unsigned("<", x, y)
  return b.select(c, x, y)


def _nvptx_int32(b, x) -> bool:
  """An integer of at most 32 bits in a GPU (NVPTX) module: see ``_ptx_select_minmax``."""
  return (isinstance(x.type, ir.IntType) and x.type.width <= 32
          and (b.module.triple or "").startswith("nvptx"))


def _ptx_select_minmax(b, x, y, signed, cmp):
  """Integer max/min for the GPU as inline PTX whose comparison ptxas cannot rewrite.
  LLVM would emit ``max.s32``/``min.s32`` (or setp + selp), and the CUDA 13.0 driver's ptxas
  (driver 580, its JIT and its linker alike) rewrites a max of negated values as the negated
  min, which is wrong where a value is INT_MIN: max(-|x|) over [21, 8, 0] from the reduction's
  initial INT_MIN gave INT_MIN, max(-a, -b, -c) of (-3, 4, 11) gave 4 (an H200).  Signed
  operands are compared as unsigned with the sign bit flipped, unsigned ones in 64 bits;
  narrower integers are widened to 32 bits and back."""
  ty = x.type
  i32 = ir.IntType(32)
  if ty.width < 32:
    ext = b.sext if signed else b.zext
    x, y = ext(x, i32), ext(y, i32)
  if signed:
    text = ("{ .reg .b32 %a, %b; .reg .pred %p; xor.b32 %a, $1, -2147483648; "
            "xor.b32 %b, $2, -2147483648; setp." + cmp + ".u32 %p, %a, %b; "
            "selp.b32 $0, $1, $2, %p; }")
  else:
    text = ("{ .reg .b64 %a, %b; .reg .pred %p; cvt.u64.u32 %a, $1; cvt.u64.u32 %b, $2; "
            "setp." + cmp + ".u64 %p, %a, %b; selp.b32 $0, $1, $2, %p; }")
  asm = ir.InlineAsm(ir.FunctionType(i32, [i32, i32]), text, "=r,r,r")
  r = b.call(asm, [x, y])
  return b.trunc(r, ty) if ty.width < 32 else r


def _int_div(b, x, y, dt):
  ty = x.type
  zero = b.icmp_unsigned("==", y, ir.Constant(ty, 0))
  one = ir.Constant(ty, 1)
  if not _is_signed(dt):
    q = b.udiv(x, b.select(zero, one, y))
    return b.select(zero, _int_const(ty, -1), q)
  ovf = b.and_(b.icmp_signed("==", x, _int_const(ty, -(1 << (ty.width - 1)))),
               b.icmp_signed("==", y, _int_const(ty, -1)))
  q = b.sdiv(x, b.select(b.or_(zero, ovf), one, y))
  return b.select(zero, _int_const(ty, -1), q)


def _int_rem(b, x, y, dt):
  ty = x.type
  zero = b.icmp_unsigned("==", y, ir.Constant(ty, 0))
  one = ir.Constant(ty, 1)
  if not _is_signed(dt):
    return b.select(zero, x, b.urem(x, b.select(zero, one, y)))
  ovf = b.and_(b.icmp_signed("==", x, _int_const(ty, -(1 << (ty.width - 1)))),
               b.icmp_signed("==", y, _int_const(ty, -1)))
  r = b.srem(x, b.select(b.or_(zero, ovf), one, y))
  return b.select(zero, x, r)


def _int_pow(b, x, y, dt):
  ty = x.type
  if dt == BOOL:
    return b.or_(x, b.xor(y, ir.Constant(I1, 1)))
  w = ty.width
  acc = ir.Constant(ty, 1)
  base = x
  e = y
  if _is_signed(dt):
    e = b.select(b.icmp_signed("<", y, ir.Constant(ty, 0)), ir.Constant(ty, 0), y)
  for k in range(w):
    bit = b.icmp_unsigned("!=", b.and_(e, ir.Constant(ty, 1)), ir.Constant(ty, 0))
    acc = b.select(bit, b.mul(acc, base), acc)
    if k != w - 1:
      base = b.mul(base, base)
      e = b.lshr(e, ir.Constant(ty, 1))
  if _is_signed(dt):
    one, m1, zero = ir.Constant(ty, 1), _int_const(ty, -1), ir.Constant(ty, 0)
    odd = b.icmp_unsigned("!=", b.and_(y, one), zero)
    neg = b.select(b.icmp_signed("==", x, one), one,
                   b.select(b.icmp_signed("==", x, m1), b.select(odd, m1, one), zero))
    acc = b.select(b.icmp_signed("<", y, zero), neg, acc)
  return acc


def _shift(b, op, x, y, dt):
  ty = x.type
  w = ty.width
  too_big = b.icmp_unsigned(">=", y, ir.Constant(ty, w))
  amount = b.and_(y, ir.Constant(ty, w - 1))
  zero = ir.Constant(ty, 0)
  if op == "shift-left":
    return b.select(too_big, zero, b.shl(x, amount))
  if op == "shift-right-logical":
    return b.select(too_big, zero, b.lshr(x, amount))
  return b.ashr(x, b.select(too_big, ir.Constant(ty, w - 1), amount))


class MathLib:
  """Out-of-line inline-math functions for one ``ir.Module`` (the CPU backend's mode).

  Each function and type is ``ojx_m_<fn>_<f32|f64>`` (noinline, no memory effects) plus vector
  variants (``..._v16`` ...) announced to LLVM's loop vectorizer with the
  ``vector-function-abi-variant`` attribute, so a loop calling it still vectorizes (one call per
  vector), while the polynomial is compiled once instead of once per call site and again in the
  vectorizer's scalar remainder.  With ``shared`` the module only *declares* them: the backend
  links them to a process-wide compiled copy (``define_all`` builds that copy); otherwise they
  are defined in the module.  ``finalize(text)`` adds the attributes llvmlite cannot spell."""

  WIDTHS = {"f32": (16, 8), "f64": (8, 4)}

  def __init__(self, module: ir.Module, shared: bool = False):
    self.module = module
    self.shared = shared
    self.fns = {}          # (fn, tag) -> scalar ir.Function
    self.variants = {}     # scalar name -> mangled variant list
    self.used = []         # (fn, tag, nargs) in first-use order

  @classmethod
  def of(cls, module):
    lib = getattr(module, "_ojx_mathlib", None)
    if lib is None:
      lib = cls(module, shared=getattr(module, "_ojx_outline_math", False) == "shared")
      module._ojx_mathlib = lib
    return lib

  @staticmethod
  def symbol(fn, tag):
    return f"ojx_m_{fn}_{tag}"

  @classmethod
  def symbols(cls, fn, tag):
    """The scalar and vector symbol names of one function (the one name of a row function,
    ``row_math.ROW_FUNCTIONS``)."""
    name = cls.symbol(fn, tag)
    if fn in _row_functions():
      return [name]
    return [name] + [f"{name}_v{w}" for w in cls.WIDTHS[tag]]

  def declare_row(self, module, fn: str, tag: str, fnty) -> ir.Function:
    """The declaration of the process-wide row function ``fn`` (``row_math``; a shared
    library only), recorded among the functions the module uses."""
    f = self.fns.get((fn, tag))
    if f is None:
      f = ir.Function(module, fnty, name=self.symbol(fn, tag))
      f.attributes.add("nounwind")
      self.fns[(fn, tag)] = f
      self.used.append((fn, tag, len(fnty.args)))
    return f

  def call(self, b, fn: str, args):
    ty = args[0].type
    tag = "f64" if isinstance(ty, ir.DoubleType) else "f32"
    f = self.fns.get((fn, tag))
    if f is None:
      f = self._declare_or_define(fn, tag, ty, len(args))
    return b.call(f, list(args))

  def _declare_or_define(self, fn, tag, ty, nargs):
    name = self.symbol(fn, tag)
    variants = []
    for w in self.WIDTHS[tag]:
      vty = ir.VectorType(ty, w)
      vname = f"{name}_v{w}"
      self._function(vname, vty, fn, nargs, define=not self.shared)
      variants.append(f"_ZGV_LLVM_N{w}{'v' * nargs}_{name}({vname})")
    f = self._function(name, ty, fn, nargs, define=not self.shared)
    self.fns[(fn, tag)] = f
    self.variants[name] = variants
    self.used.append((fn, tag, nargs))
    return f

  def _function(self, name, ty, fn, nargs, define=True, internal=True):
    f = ir.Function(self.module, ir.FunctionType(ty, [ty] * nargs), name=name)
    for a in ("noinline", "nounwind", "readnone"):
      f.attributes.add(a)
    if not define:
      return f
    if internal:
      f.linkage = "internal"
    f.ojx_outlined_math = True      # (math.py may branch where inline code would select)
    b = ir.IRBuilder(f.append_basic_block("entry"))
    if nargs == 1:
      b.ret(llmath.emit_unary(b, fn, f.args[0]))
    else:
      b.ret(llmath.emit_binary(b, fn, f.args[0], f.args[1]))
    return f

  def define_all(self, fn: str, tag: str, nargs: int) -> list:
    """Define (with external linkage) the scalar and vector versions of one function in this
    module: the process-wide copy shared modules link to.  Returns the symbol names."""
    ty = DBL if tag == "f64" else FLT
    name = self.symbol(fn, tag)
    if fn in _row_functions():
      from ourjax.backends.llvm import row_math
      row_math.define_row_function(self.module, fn, tag, name)
      return self.symbols(fn, tag)
    self._function(name, ty, fn, nargs, internal=False)
    for w in self.WIDTHS[tag]:
      self._function(f"{name}_v{w}", ir.VectorType(ty, w), fn, nargs, internal=False)
    return self.symbols(fn, tag)

  def finalize(self, text: str) -> str:
    if not self.variants:
      return text
    lines = text.split("\n")
    for k, line in enumerate(lines):
      if line.startswith("define internal") or line.startswith("declare"):
        for name, vs in self.variants.items():
          if f'@"{name}"(' in line:
            lines[k] = line + f' "vector-function-abi-variant"="{",".join(vs)}"'
            break
    used = [f'ptr @"{v[v.index("(") + 1:-1]}"' for vs in self.variants.values() for v in vs]
    lines.append(f"@llvm.compiler.used = appending global [{len(used)} x ptr] "
                 f"[{', '.join(used)}], section \"llvm.metadata\"")
    return "\n".join(lines) + "\n"


def finalize_module_text(module: ir.Module) -> str:
  """The IR text of ``module`` with what ``MathLib`` needs added."""
  text = str(module)
  lib = getattr(module, "_ojx_mathlib", None)
  return lib.finalize(text) if lib is not None else text


def _row_functions():
  from ourjax.backends.llvm import row_math
  return row_math.ROW_FUNCTIONS


def math_symbols(module: ir.Module) -> list:
  """(fn, tag, nargs) of the shared math functions ``module`` declares."""
  lib = getattr(module, "_ojx_mathlib", None)
  return list(lib.used) if lib is not None and lib.shared else []


def _math(b, name, *args):
  if getattr(b.module, "_ojx_outline_math", False):
    return MathLib.of(b.module).call(b, name, args)
  if len(args) == 1:
    return llmath.emit_unary(b, name, args[0])
  return llmath.emit_binary(b, name, args[0], args[1])


def unary_op(b, opcode: str, x, dt):
  """``opcode`` on a compute value of element type ``dt`` (result rounded for narrow types);
  the result type follows the shape rule (is-finite gives pred)."""
  dt = np.dtype(dt)
  if _is_float(dt):
    if opcode == "abs":
      r = intrinsic(b, "fabs", x.type, [x])
    elif opcode == "negate":
      r = b.fneg(x)
    elif opcode == "sign":
      special = b.or_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("==", x, ir.Constant(x.type, 0)))
      r = b.select(special, x, intrinsic(b, "copysign", x.type, [ir.Constant(x.type, 1.0), x]))
    elif opcode == "floor":
      r = intrinsic(b, "floor", x.type, [x])
    elif opcode == "ceil":
      r = intrinsic(b, "ceil", x.type, [x])
    elif opcode == "round-nearest-even":
      r = intrinsic(b, "roundeven", x.type, [x])
    elif opcode == "round-nearest-afz":
      r = intrinsic(b, "round", x.type, [x])
    elif opcode == "is-finite":
      return b.fcmp_ordered("<", intrinsic(b, "fabs", x.type, [x]),
                            ir.Constant(x.type, _pymath.inf))
    elif opcode == "sqrt":
      r = intrinsic(b, "sqrt", x.type, [x])
    elif opcode == "rsqrt":
      r = b.fdiv(ir.Constant(x.type, 1.0), intrinsic(b, "sqrt", x.type, [x]))
    elif opcode == "copy":
      return x
    elif opcode in _MATH_UNARY:
      r = _math(b, _MATH_UNARY[opcode], x)
    else:
      raise EmitterError(f"unary {opcode} on {dt}")
    return round_narrow(b, r, dt) if _is_narrow(dt) and opcode not in _EXACT_UNARY else r
  # integers and pred
  ty = x.type
  if opcode == "copy":
    return x
  if opcode == "not":
    return b.xor(x, _int_const(ty, -1))
  if dt == BOOL:
    raise EmitterError(f"unary {opcode} on pred")
  zero = ir.Constant(ty, 0)
  if opcode == "abs":
    if not _is_signed(dt):
      return x
    return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
  if opcode == "negate":
    return b.sub(zero, x)
  if opcode == "sign":
    if not _is_signed(dt):
      return b.zext(b.icmp_unsigned("!=", x, zero), ty)
    return b.sub(b.zext(b.icmp_signed(">", x, zero), ty), b.zext(b.icmp_signed("<", x, zero), ty))
  if opcode == "popcnt":
    return intrinsic(b, "ctpop", ty, [x])
  if opcode == "count-leading-zeros":
    return intrinsic(b, "ctlz", ty, [x], extra_args=[ir.Constant(I1, 0)])
  raise EmitterError(f"unary {opcode} on {dt}")


def _window_source(b, out, k, stride: int, window_dilation: int, pad_lo: int, n: int,
                   base_dilation: int):
  """(valid i1, operand index) of window element ``k`` of output position ``out`` along one
  dimension of a reduce-window or convolution: position out*stride + k*window_dilation - pad_lo
  of the padded, base-dilated operand of ``n`` elements; invalid (index 0) on padding and on
  the holes of the base dilation."""
  t = b.add(b.mul(out, i64(stride)), b.mul(k, i64(window_dilation)))
  if pad_lo:
    t = b.sub(t, i64(pad_lo))
  ok = b.and_(b.icmp_signed(">=", t, i64(0)),
              b.icmp_signed("<", t, i64(max((n - 1) * base_dilation + 1, 0))))
  tc = b.select(ok, t, i64(0))
  if base_dilation != 1:
    ok = b.and_(ok, b.icmp_unsigned("==", b.urem(tc, i64(base_dilation)), i64(0)))
    tc = b.select(ok, b.udiv(tc, i64(base_dilation)), i64(0))
  return ok, tc


def exact_fmod(b, x, y):
  """C's fmod(x, y) for a float or double, exactly, in integer arithmetic: the CPU's ``frem``
  becomes a libm call, but NVPTX expands ``frem`` as x - trunc(x/y)*y, which is wrong once
  x/y is not exact (large quotients).  With x = mx 2^ex and y = my 2^ey (integer
  significands), the result is (mx 2^(ex-ey) mod my) 2^ey; the power of two is folded in a few
  bits at a time so that every step is one 64-bit remainder (float: <= 9 steps, double: <=
  186)."""
  t = x.type
  bits, mant = (32, 23) if t == FLT else (64, 52)
  it = ir.IntType(bits)
  step = 63 - (mant + 1)                 # shift that keeps (r << step) below 2^64
  sign_mask = ir.Constant(it, 1 << (bits - 1))
  inf_bits = ir.Constant(it, ((1 << (bits - 1 - mant)) - 1) << mant)
  ax = b.and_(b.bitcast(x, it), b.not_(sign_mask))
  ay = b.and_(b.bitcast(y, it), b.not_(sign_mask))
  nan = b.or_(b.or_(b.icmp_unsigned("==", ay, ir.Constant(it, 0)),
                    b.icmp_unsigned(">=", ax, inf_bits)),
              b.icmp_unsigned(">", ay, inf_bits))
  small = b.icmp_unsigned("<", ax, ay)           # |x| < |y| (y = inf included): x itself

  def split(a):                                  # (significand as i64, biased exponent >= 1)
    e = b.lshr(a, ir.Constant(it, mant))
    frac = b.and_(a, ir.Constant(it, (1 << mant) - 1))
    normal = b.icmp_unsigned("!=", e, ir.Constant(it, 0))
    m = b.select(normal, b.or_(frac, ir.Constant(it, 1 << mant)), frac)
    m64 = b.zext(m, I64) if bits == 32 else m
    e64 = b.zext(e, I64) if bits == 32 else e
    return m64, b.select(normal, e64, i64(1))
  mx, ex = split(ax)
  my, ey = split(ay)
  work = b.icmp_unsigned("==", b.or_(b.zext(nan, I8), b.zext(small, I8)), ir.Constant(I8, 0))
  my_safe = b.select(work, my, i64(1))           # no division by zero on the skipped lanes
  d0 = b.select(work, b.sub(ex, ey), i64(0))
  r = alloca_entry(b, I64, "fmod.r")
  b.store(b.urem(mx, my_safe), r)
  with ForLoop(b, 0, d0, "fmod", step=step) as lp:     # 2^d0 folded in, `step` bits at a time
    left = b.sub(d0, lp.index)
    s = b.select(b.icmp_unsigned("<", left, i64(step)), left, i64(step))
    b.store(b.urem(b.shl(b.load(r), s), my_safe), r)
  # r 2^(ey - bias - mant): (r 2^-mant) 2^(ey - bias), each product exact
  rf = b.uitofp(b.load(r), t)
  rf = b.fmul(rf, ir.Constant(t, 2.0 ** -mant))
  ey_i = b.trunc(ey, it) if bits == 32 else ey
  scale = b.bitcast(b.shl(ey_i, ir.Constant(it, mant)), t)
  res = b.fmul(rf, scale)
  res = b.bitcast(b.or_(b.bitcast(res, it), b.and_(b.bitcast(x, it), sign_mask)), t)
  res = b.select(small, x, res)
  return b.select(nan, ir.Constant(t, float("nan")), res)


def binary_op(b, opcode: str, x, y, dt):
  dt = np.dtype(dt)
  if _is_float(dt):
    if opcode == "add":
      r = b.fadd(x, y)
    elif opcode == "subtract":
      r = b.fsub(x, y)
    elif opcode == "multiply":
      r = b.fmul(x, y)
    elif opcode == "divide":
      r = b.fdiv(x, y)
    elif opcode == "remainder":
      gpu = llmath.targets_gpu(b) and not isinstance(x.type, ir.VectorType)
      r = exact_fmod(b, x, y) if gpu else b.frem(x, y)
    elif opcode == "maximum":
      r = _fmax(b, x, y)
    elif opcode == "minimum":
      r = _fmin(b, x, y)
    elif opcode == "power":
      r = _math(b, "pow", x, y)
    elif opcode == "atan2":
      r = _math(b, "atan2", x, y)
    else:
      raise EmitterError(f"binary {opcode} on {dt}")
    # (maximum/minimum return an operand: already a value of the narrow type)
    return round_narrow(b, r, dt) if _is_narrow(dt) and opcode not in _SELECTING else r
  if dt == BOOL:
    if opcode in ("add", "or", "maximum"):
      return b.or_(x, y)
    if opcode in ("multiply", "and", "minimum"):
      return b.and_(x, y)
    if opcode == "xor":
      return b.xor(x, y)
    if opcode == "power":
      return _int_pow(b, x, y, dt)
    raise EmitterError(f"binary {opcode} on pred")
  signed = _is_signed(dt)
  if opcode == "add":
    return b.add(x, y)
  if opcode == "subtract":
    return b.sub(x, y)
  if opcode == "multiply":
    return b.mul(x, y)
  if opcode == "divide":
    return _int_div(b, x, y, dt)
  if opcode == "remainder":
    return _int_rem(b, x, y, dt)
  if opcode == "maximum":
    return _imax(b, x, y, signed)
  if opcode == "minimum":
    return _imin(b, x, y, signed)
  if opcode == "and":
    return b.and_(x, y)
  if opcode == "or":
    return b.or_(x, y)
  if opcode == "xor":
    return b.xor(x, y)
  if opcode == "power":
    return _int_pow(b, x, y, dt)
  if opcode in ("shift-left", "shift-right-logical", "shift-right-arithmetic"):
    return _shift(b, opcode, x, y, dt)
  raise EmitterError(f"binary {opcode} on {dt}")


_FCMP = {"EQ": ("==", True), "NE": ("!=", False), "LT": ("<", True), "LE": ("<=", True),
         "GT": (">", True), "GE": (">=", True)}
_ICMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def compare_op(b, direction, x, y, dt, total_order=False):
  dt = np.dtype(dt)
  if _is_float(dt):
    if total_order:
      ity = ir.IntType(64 if dt == F64 else 32)
      keys = []
      for v in (x, y):
        bits = b.bitcast(v, ity)
        flip = _int_const(ity, (1 << (ity.width - 1)) - 1)
        keys.append(b.select(b.icmp_signed("<", bits, ir.Constant(ity, 0)),
                             b.xor(bits, flip), bits))
      return b.icmp_signed(_ICMP[direction], keys[0], keys[1])
    op, ordered = _FCMP[direction]
    return b.fcmp_ordered(op, x, y) if ordered else b.fcmp_unordered(op, x, y)
  if _is_signed(dt):
    return b.icmp_signed(_ICMP[direction], x, y)
  return b.icmp_unsigned(_ICMP[direction], x, y)


def _index_value(b, v, dt):
  """An integer scalar (compute value) as i64 (sign- or zero-extended)."""
  dt = np.dtype(dt)
  if v.type.width == 64:
    return v
  return b.sext(v, I64) if _is_signed(dt) else b.zext(v, I64)


def _clamp_i64(b, v, lo: int, hi: int):
  v = b.select(b.icmp_signed("<", v, i64(lo)), i64(lo), v)
  return b.select(b.icmp_signed(">", v, i64(hi)), i64(hi), v)
