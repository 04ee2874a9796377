"""The elemental emitter: LLVM IR for the value of an HLO instruction at a multi-index.

Target-independent (DESIGN rule 5): it knows nothing about threads, loops over outputs or how
buffers are passed; a kernel (``kernels.py``) builds the iteration, binds the leaves of the
computation it evaluates (parameters, materialised values) to pointers or scalar values, and asks
``Emitter.value(instr, index)`` for the element it stores.  The idea is XLA's
``elemental_ir_emitter``: every op is a function of its operands' elements at derived indices,
so a fused computation needs no intermediate arrays.

Values are carried in a *compute* type per element type:

  ========  =========  ============  ==================================================
  HLO type  storage    compute       note
  ========  =========  ============  ==================================================
  pred      i8         i1            stored 0/1 (NumPy bool)
  s8..u64   iN         iN            two's complement; signedness comes from the dtype
  f16 bf16  i16        float         every result is rounded to the narrow type and kept
                                     in float (exactly representable), as XLA and the
                                     reference compute narrow floats in f32
  f32 f64   float      float/double
  ========  =========  ============  ==================================================

Semantics follow the reference backend (``backends/reference.py`` + ``reference_ops.py``)
bit for bit for everything but the transcendental functions (inline polynomials of
``llvm/math.py``, within a few ulp; ``rsqrt`` is ``1/sqrt`` as in the reference) and float
reductions whose reducer is reassociated (see ``kernels.py``).  No fast-math flag is set on
elementwise arithmetic, so LLVM does not contract ``a*b+c`` into an FMA.

Indices are ``Index`` objects holding both the row-major linear position and the multi-index
(i64 values); an elementwise op hands its operands the very same ``Index``, so parameters of the
output's shape are loaded at the linear position and a loop over them vectorizes.  Values are
memoised per (instruction, index) inside lexical scopes (``push_scope``/``pop_scope`` around
nested loops), which keeps DAG-shaped computations linear in size and never reuses a value
outside the loop body that computed it.
"""
from __future__ import annotations

from typing import Sequence

import llvmlite.ir as ir
import ml_dtypes
import numpy as np

from ourjax.backends.llvm import fp8
from ourjax.lowering import hlo

__all__ = ["Emitter", "accumulation_dtype", "concat_parts", "Index", "Leaf", "EmitterError",
           "PrefetchMiss", "storage_type", "compute_type", "SUPPORTED_DTYPES", "GPU_DTYPES",
           "ELEMENTAL_OPS",
           "const", "load_element", "store_element", "convert_value", "ForLoop", "for_loop",
           "alloca_entry", "I1", "I8", "I32", "I64", "FLT", "DBL", "i64", "MathLib",
           "finalize_module_text", "use_outlined_math", "math_symbols"]


def use_outlined_math(module: ir.Module, on=True) -> None:
  """Emit transcendental functions of ``module`` as calls to out-of-line functions with vector
  variants (``MathLib``; the CPU backend) instead of inline at every use (the default).
  ``on="shared"``: only declare them (linked to a process-wide copy by the backend)."""
  module._ojx_outline_math = on

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
FLT, DBL, HALF = ir.FloatType(), ir.DoubleType(), ir.HalfType()

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)

SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
#: ... and the 8-bit floats (``fp8.py``), which the emitter handles but only the CUDA backend
#: compiles (the CPU backend runs modules with them on the reference backend)
GPU_DTYPES = SUPPORTED_DTYPES | fp8.FP8

# Instructions the emitter evaluates element by element (everything else is a kernel of its own).
ELEMENTAL_OPS = (set(hlo.UNARY_OPS) - {"real", "imag"}) | (set(hlo.BINARY_OPS) - {"complex"}) | {
    "compare", "select", "clamp", "convert", "bitcast-convert", "parameter", "constant", "iota",
    "broadcast", "reshape", "transpose", "slice", "dynamic-slice", "dynamic-update-slice",
    "concatenate", "pad", "reverse", "reduce", "reduce-window", "gather", "dot", "convolution",
    "tuple", "get-tuple-element"}

_MATH_UNARY = {
    "exponential": "exp", "exp2": "exp2", "exponential-minus-one": "expm1", "log": "log",
    "log-plus-one": "log1p", "tanh": "tanh", "logistic": "logistic", "sine": "sin",
    "cosine": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "cbrt": "cbrt", "erf": "erf", "erfc": "erfc", "erf-inv": "erf_inv", "lgamma": "lgamma",
    "digamma": "digamma"}


ANY = object()


#: Concatenations of more parts than this evaluate only the part an element is in (branches);
#: fewer stay branch-free (every part evaluated, one selected) so that their loops vectorize.
BRANCHY_CONCAT_PARTS = 4


class EmitterError(NotImplementedError):
  """The emitter cannot produce code for an instruction (the backend falls back)."""


class PrefetchMiss(Exception):
  """A reduction was about to be re-evaluated inside an element loop (quadratic work); the kernel
  planner materialises ``instr`` and plans again."""

  def __init__(self, instr):
    super().__init__(f"reduction %{instr.name} would be recomputed per element")
    self.instr = instr


def _is_narrow(dt) -> bool:
  """float16, bfloat16 and the 8-bit floats: stored narrow, computed in float32."""
  return dt == F16 or dt == BF16 or dt in fp8.FP8


def _is_float(dt) -> bool:
  return dt in (F16, BF16, F32, F64) or dt in fp8.FP8


def _is_signed(dt) -> bool:
  return dt.kind == "i"


def _is_int(dt) -> bool:
  return dt.kind in "iu"


def storage_type(dt) -> ir.Type:
  dt = np.dtype(dt)
  if dt == BOOL:
    return I8
  if _is_int(dt):
    return ir.IntType(dt.itemsize * 8)
  if _is_narrow(dt):
    return I16 if dt.itemsize == 2 else I8
  if dt == F32:
    return FLT
  if dt == F64:
    return DBL
  raise EmitterError(f"no native element type for {dt}")


def compute_type(dt) -> ir.Type:
  dt = np.dtype(dt)
  if dt == BOOL:
    return I1
  if _is_int(dt):
    return ir.IntType(dt.itemsize * 8)
  if _is_narrow(dt) or dt == F32:
    return FLT
  if dt == F64:
    return DBL
  raise EmitterError(f"no native element type for {dt}")


def _int_constant(memo: dict, ty, v: int) -> ir.Constant:
  """The constant ``v`` of integer type ``ty``, one object per value (``memo``: an llvmlite
  constant is only read, and its text, printed once, is kept on it)."""
  v = int(v)
  c = memo.get(v)
  if c is None:
    if len(memo) >= 1 << 14:
      memo.clear()
    c = memo[v] = ir.Constant(ty, v)
  return c


def i64(v: int) -> ir.Constant:
  """The i64 constant ``v`` (one object per value)."""
  return _int_constant(_I64S, I64, v)


def i32(v: int) -> ir.Constant:
  """The i32 constant ``v`` (one object per value)."""
  return _int_constant(_I32S, I32, v)


_I64S: dict = {}
_I32S: dict = {}


def _int_const(ty: ir.IntType, v: int) -> ir.Constant:
  v = int(v) & ((1 << ty.width) - 1)
  if ty.width > 1 and v >= 1 << (ty.width - 1):
    v -= 1 << ty.width
  return ir.Constant(ty, v)


def const(dt, value) -> ir.Constant:
  """A compute-type constant of element type ``dt`` (narrow floats rounded to their type)."""
  dt = np.dtype(dt)
  ty = compute_type(dt)
  if dt == BOOL:
    return ir.Constant(I1, int(bool(value)))
  if _is_int(dt):
    return _int_const(ty, int(np.asarray(value).astype(dt)) if not isinstance(value, int)
                      else value)
  with np.errstate(all="ignore"):
    v = float(np.asarray(value).astype(dt))
  if _is_narrow(dt) or dt == F32:
    v = float(np.float32(v))
  return ir.Constant(ty, v)


# ---------------------------------------------------------------------------------------------
# intrinsics and small builders
# ---------------------------------------------------------------------------------------------

def _suffix(ty) -> str:
  if isinstance(ty, ir.VectorType):
    return f"v{ty.count}" + _suffix(ty.element)
  if isinstance(ty, ir.DoubleType):
    return "f64"
  if isinstance(ty, ir.FloatType):
    return "f32"
  if isinstance(ty, ir.HalfType):
    return "f16"
  return f"i{ty.width}"


def intrinsic(b: ir.IRBuilder, name: str, ret, args, overload=None, extra_args=()):
  """Call ``llvm.<name>.<suffix>``; the suffix is built from ``overload`` types (default: the
  first argument's type)."""
  tys = overload if overload is not None else [args[0].type]
  full = f"llvm.{name}." + ".".join(_suffix(t) for t in tys)
  mod = b.module
  fn = mod.globals.get(full)
  if fn is None:
    fn = ir.Function(mod, ir.FunctionType(ret, [a.type for a in list(args) + list(extra_args)]),
                     name=full)
  return b.call(fn, list(args) + list(extra_args))


def alloca_entry(b: ir.IRBuilder, ty, name: str = "") -> ir.Value:
  """An alloca in the function's entry block (so mem2reg promotes it to registers)."""
  fn = b.function
  entry = fn.entry_basic_block
  saved = b.block
  if entry.instructions:
    b.position_before(entry.instructions[0])
  else:
    b.position_at_end(entry)
  slot = b.alloca(ty, name=name)
  b.position_at_end(saved)
  return slot


class ForLoop:
  """``for i in [start, stop)`` by ``step`` (i64; ``step`` an int or an IR value, e.g. a GPU
  grid stride).  Use::

      loop = ForLoop(b, start, stop, "i")
      with loop:            # positions the builder in the body; ``loop.index`` is i
        ...
      # builder continues after the loop

  ``unroll=False`` marks the loop ``llvm.loop.unroll.disable``: neither LLVM nor, on the GPU,
  ``ptxas`` (the NVPTX backend writes ``.pragma "nounroll"`` in its header) unrolls it.  For
  loops whose body is large and whose unrolled copies gain nothing: ptxas unrolls a tensor-core
  k loop of a few trips whole, which multiplied its compile time by 2.5 for a 1x1 convolution.
  """

  def __init__(self, b: ir.IRBuilder, start, stop, name: str = "i", step: int = 1,
               unroll: bool = True, vectorize: bool = True):
    self.b, self.name, self.unroll, self.vectorize = b, name, unroll, vectorize
    self.start = start if isinstance(start, ir.Value) else i64(start)
    self.stop = stop if isinstance(stop, ir.Value) else i64(stop)
    self.step = step if isinstance(step, ir.Value) else i64(step)

  def __enter__(self):
    b = self.b
    fn = b.function
    self.pre = b.block
    self.header = fn.append_basic_block(f"{self.name}.head")
    self.body = fn.append_basic_block(f"{self.name}.body")
    self.exit = fn.append_basic_block(f"{self.name}.exit")
    b.branch(self.header)
    b.position_at_end(self.header)
    self.index = b.phi(I64, name=self.name)
    self.index.add_incoming(self.start, self.pre)
    b.cbranch(b.icmp_signed("<", self.index, self.stop), self.body, self.exit)
    b.position_at_end(self.body)
    return self

  def __exit__(self, et, ev, tb):
    if et is not None:
      return False
    b = self.b
    nxt = b.add(self.index, self.step, name=f"{self.name}.next", flags=["nsw"])
    self.index.add_incoming(nxt, b.block)
    br = b.branch(self.header)
    if not self.unroll or not self.vectorize:
      br.set_metadata("llvm.loop", _no_unroll(b.module, self.vectorize))
    b.position_at_end(self.exit)
    return False


def _no_unroll(module: ir.Module, vectorize: bool = True):
  """A fresh loop ID (``!N = !{!N, !"llvm.loop.unroll.disable"}``: self-referential, so that it
  is distinct) for the latch branch of a loop that must not be unrolled (nor, ``vectorize``
  False, vectorized: ``!{!"llvm.loop.vectorize.enable", i1 false}`` too)."""
  props = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])]
  if not vectorize:
    props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                      ir.Constant(ir.IntType(1), 0)]))
  # (made directly, not by ``add_metadata``, which would hand back an equal earlier node: each
  # loop needs an ID of its own)
  node = ir.values.MDValue(module, props, name=str(len(module.metadata)))
  node.operands = (node, *props)
  return node


def for_loop(b, start, stop, name="i"):
  return ForLoop(b, start, stop, name)


# ---------------------------------------------------------------------------------------------
# indices
# ---------------------------------------------------------------------------------------------

def delinearize(b: ir.IRBuilder, lin: ir.Value, dims: Sequence[int]) -> list:
  dims = tuple(dims)
  if not dims:
    return []
  if len(dims) == 1:
    return [lin]
  out = [None] * len(dims)
  rest = lin
  for d in range(len(dims) - 1, 0, -1):
    n = dims[d]
    if n == 1:
      out[d] = i64(0)
      continue
    out[d] = b.urem(rest, i64(max(n, 1)))
    rest = b.udiv(rest, i64(max(n, 1)))
  out[0] = rest if dims[0] != 1 else i64(0)
  return out


def linearize(b: ir.IRBuilder, multi: Sequence[ir.Value], dims: Sequence[int]) -> ir.Value:
  dims = tuple(dims)
  if not dims:
    return i64(0)
  if len(dims) == 1:
    return multi[0]
  acc = None
  for m, n in zip(multi, dims):
    if acc is None:
      acc = m if n != 1 else i64(0)
      continue
    if n != 1:
      acc = b.add(b.mul(acc, i64(n), flags=["nuw", "nsw"]), m, flags=["nuw", "nsw"])
  return acc


def _value_key(v):
  """What identifies an index value in the emitter's memo: a constant by its value (constants
  are made afresh where they are used, and a freed one's ``id`` is reused by the next: keyed by
  ``id``, an index of other constants could hit another index's memo entry, and equal constant
  indices missed each other's, nondeterministically); an instruction by its identity (it lives
  in the function being emitted)."""
  if isinstance(v, ir.Constant):
    return (str(v.type), v.constant)
  return id(v)


class Index:
  """A position in an array of ``dims``: ``multi`` (one i64 per dimension, computed where the
  index is made) and ``linear`` (row-major), computed when first asked for: most indices
  only pass their ``multi`` on (through slices, broadcasts, transposes), and an unused linear
  index was IR that LLVM had to delete.  It is computed where it is asked for; it is kept
  for later requests when that is the block the index was made in (a value made inside a
  loop or a branch would not dominate a later use elsewhere)."""
  __slots__ = ("dims", "_linear", "multi", "key", "_b", "_block", "_elsewhere")

  def __init__(self, b: ir.IRBuilder, dims, linear=None, multi=None):
    self.dims = tuple(dims)
    if multi is None:
      multi = delinearize(b, linear, self.dims)
    self._linear, self.multi = linear, list(multi)
    self._b, self._block, self._elsewhere = b, b.block, None
    self.key = tuple([_value_key(v) for v in self.multi]) if self.multi else ()

  @property
  def linear(self):
    v = self._linear
    if v is not None:
      return v
    block = self._b.block
    if self._elsewhere is not None and self._elsewhere[0] is block:
      return self._elsewhere[1]
    v = linearize(self._b, self.multi, self.dims)
    if block is self._block:
      self._linear = v
    else:
      self._elsewhere = (block, v)     # (again in this block: the same value)
    return v

  @classmethod
  def scalar(cls, b):
    return cls(b, (), linear=i64(0), multi=[])


class Leaf:
  """A value the emitter does not compute: an array in memory (``ptr`` to the storage type,
  row-major ``dims``) or a scalar ``value`` (compute type)."""
  __slots__ = ("ptr", "dtype", "dims", "value")

  def __init__(self, dtype, dims=(), ptr=None, value=None):
    self.dtype, self.dims, self.ptr, self.value = np.dtype(dtype), tuple(dims), ptr, value


# ---------------------------------------------------------------------------------------------
# element loads/stores and conversions
# ---------------------------------------------------------------------------------------------

def from_storage(b, v, dt):
  if dt == BOOL:
    return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
  if dt == F16:
    return b.fpext(b.bitcast(v, HALF), FLT)
  if dt == BF16:
    return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), FLT)
  if dt in fp8.FP8:
    return fp8.decode(b, v, dt)
  return v


def to_storage(b, v, dt):
  if dt == BOOL:
    return b.zext(v, I8)
  if dt == F16:
    return b.bitcast(b.fptrunc(v, HALF), I16)
  if dt == BF16:
    return b.trunc(b.lshr(b.bitcast(v, I32), ir.Constant(I32, 16)), I16)
  if dt in fp8.FP8:
    return fp8.encode(b, v, dt)
  return v


def load_element(b, ptr, linear, dt):
  return from_storage(b, b.load(b.gep(ptr, [linear], inbounds=True)), dt)


def store_element(b, value, ptr, linear, dt):
  b.store(to_storage(b, value, dt), b.gep(ptr, [linear], inbounds=True))


def _bf16_bits_rne(b, x):
  """float -> bfloat16 bits (i32, in the low half) with round-to-nearest-even; NaN stays NaN."""
  bits = b.bitcast(x, I32)
  lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
  rounded = b.lshr(b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb), ir.Constant(I32, 16))
  quiet = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
  isnan = b.fcmp_unordered("uno", x, x)
  return b.select(isnan, quiet, rounded)


def round_narrow(b, x, dt):
  """Round a float value to ``dt`` (f16/bf16/fp8) and return it as float again."""
  if dt == F16:
    return b.fpext(b.fptrunc(x, HALF), FLT)
  if dt == BF16:
    return b.bitcast(b.shl(_bf16_bits_rne(b, x), ir.Constant(I32, 16)), FLT)
  if dt in fp8.FP8:
    return fp8.round_to(b, x, dt)
  return x


def _f64_to_f32_round_to_odd(b, d):
  """double -> float with round-to-odd: the float nearest d toward zero, with its last bit set
  when inexact.  Rounding that to a type with at most 22 fraction bits (f16, bf16) afterwards is
  a correctly rounded conversion from double."""
  t = b.fptrunc(d, FLT)
  back = b.fpext(t, DBL)
  tb = b.bitcast(t, I32)
  fabs_back = intrinsic(b, "fabs", DBL, [back])
  fabs_d = intrinsic(b, "fabs", DBL, [d])
  away = b.fcmp_ordered(">", fabs_back, fabs_d)
  tb = b.select(away, b.sub(tb, ir.Constant(I32, 1)), tb)
  inexact = b.fcmp_ordered("!=", back, d)
  tb = b.select(inexact, b.or_(tb, ir.Constant(I32, 1)), tb)
  isnan = b.fcmp_unordered("uno", d, d)
  return b.select(isnan, t, b.bitcast(tb, FLT))


def _float_to_float(b, v, src, dst):
  if src == dst:
    return v
  if dst == F64:
    return b.fpext(v, DBL) if src != F64 else v
  if dst == F32:
    return b.fptrunc(v, FLT) if src == F64 else v
  # narrow destinations
  if src == F64:
    if dst == F16 or dst in fp8.FP8:   # (one correct rounding, as ml_dtypes' casts)
      return round_narrow(b, _f64_to_f32_round_to_odd(b, v), dst)
    return round_narrow(b, b.fptrunc(v, FLT), BF16)   # ml_dtypes goes through float32
  return round_narrow(b, v, dst)                       # f32 / f16 / bf16 (exact in float)


def _int_to_int(b, v, src, dst):
  sw, dw = v.type.width, compute_type(dst).width
  if sw == dw:
    return v
  if sw > dw:
    return b.trunc(v, compute_type(dst))
  return b.sext(v, compute_type(dst)) if _is_signed(src) else b.zext(v, compute_type(dst))


def convert_value(b, v, src, dst):
  """XLA convert between compute values (see ``reference_ops.convert_element_type``)."""
  src, dst = np.dtype(src), np.dtype(dst)
  if src == dst:
    return v
  if dst == BOOL:
    if src == BOOL:
      return v
    if _is_float(src):
      return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
    return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
  if src == BOOL:
    if _is_float(dst):
      return b.uitofp(v, compute_type(dst))
    return b.zext(v, compute_type(dst))
  if _is_float(src) and _is_float(dst):
    return _float_to_float(b, v, src, dst)
  if _is_float(src):   # -> int: truncate, saturate, NaN -> 0 (as the .sat intrinsics)
    ty = compute_type(dst)
    if (b.module.triple or "").startswith("nvptx"):     # (one cvt.rzi.sat instruction)
      name = "fptosi.sat" if _is_signed(dst) else "fptoui.sat"
      return intrinsic(b, name, ty, [v], overload=[ty, v.type])
    return _float_to_int_saturating(b, v, dst)
  if _is_float(dst):   # int -> float
    conv = b.sitofp if _is_signed(src) else b.uitofp
    if dst in (F32, F64):
      return conv(v, compute_type(dst))
    if src.itemsize <= 2 or dst == BF16:
      return round_narrow(b, conv(v, FLT), dst)
    return _float_to_float(b, conv(v, DBL), F64, dst)
  return _int_to_int(b, v, src, dst)


def _float_to_int_saturating(b, v, dst):
  """``fptosi.sat``/``fptoui.sat`` from operations that x86 vectorizes (LLVM scalarizes the
  intrinsics on vectors there: a 1024x1024 f32 -> int32 convert took 860 us on one core, 7x
  XLA's): the value clamped to the largest and smallest values of the float type in range (so
  the plain conversion is defined), then values at or past the integer type's top (which
  the float type may not hold) set to its maximum and NaN to 0."""
  dst = np.dtype(dst)
  ty = compute_type(dst)
  info = np.iinfo(dst)
  fdt = np.float64 if isinstance(v.type, ir.DoubleType) else np.float32
  top = float(info.max) + 1.0                           # 2^(bits - signed): out of range
  hi = np.nextafter(fdt(top), fdt(0))                   # the largest float below it
  lo = float(info.min)                                  # 0 or -2^(bits-1): exact
  c = lambda x: ir.Constant(v.type, float(x))           # noqa: E731
  x = intrinsic(b, "minnum", v.type, [intrinsic(b, "maxnum", v.type, [v, c(lo)]), c(hi)])
  r = b.fptosi(x, ty) if _is_signed(dst) else b.fptoui(x, ty)
  if float(hi) < info.max:
    r = b.select(b.fcmp_ordered(">=", v, c(top)), ir.Constant(ty, int(info.max)), r)
  return b.select(b.fcmp_unordered("uno", v, v), ir.Constant(ty, 0), r)


# ---------------------------------------------------------------------------------------------
# reducers
# ---------------------------------------------------------------------------------------------

_ASSOCIATIVE = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")


def simple_reducer(comp: hlo.Computation):
  """The opcode of a reducer ``op(p0, p1)`` of one associative, commutative binary op (add,
  multiply, maximum, minimum, and, or, xor), else None."""
  root = comp.root
  if (len(comp.parameters) == 2 and root.opcode in _ASSOCIATIVE and len(root.operands) == 2
      and set(root.operands) == set(comp.parameters)
      and root.operands[0] is not root.operands[1] and not root.shape.is_tuple):
    return root.opcode
  return None


def reassociating_combine(b, opcode, acc, x, dt):
  """``opcode(acc, x)`` for a reduction that may be reordered: float add carries the
  ``reassoc`` flag (so LLVM vectorizes with partial accumulators; the result differs from
  the sequential sum by rounding, and where partial sums overflow it may be another infinity or
  NaN), float max/min use ``llvm.maximum``/``llvm.minimum`` (NaN-propagating, exact); products
  stay in order; narrow floats round every step of a sum (max/min return one of their
  operands, a value of the narrow type already: no rounding, which would make the loop-carried
  chain opaque to the vectorizer).  Not ``nsz``: with it LLVM also factors the
  summed elements (``a/z + b/z`` into ``(a + b)/z``), which turns the NaN of ``0/0`` terms
  into an infinity (``sum(x / 0)``), and the vectorized sums need only ``reassoc``."""
  dt = np.dtype(dt)
  if _is_float(dt):
    flags = ["reassoc"]
    if opcode == "add":
      r = b.fadd(acc, x, flags=flags)
    elif opcode == "multiply":    # kept in order: reordered products overflow differently
      r = b.fmul(acc, x)
    elif opcode == "maximum":
      r = intrinsic(b, "maximum", acc.type, [acc, x])
    elif opcode == "minimum":
      r = intrinsic(b, "minimum", acc.type, [acc, x])
    else:
      raise EmitterError(f"reducer {opcode} on {dt}")
    return round_narrow(b, r, dt) if _is_narrow(dt) and opcode not in _SELECTING else r
  return binary_op(b, opcode, acc, x, dt)


# float ops whose result is one of their operands (or a quiet NaN of one)
_SELECTING = frozenset({"maximum", "minimum"})
# float unary ops whose result is a value of the operand's (narrow) type: no rounding after
_EXACT_UNARY = frozenset({"abs", "negate", "sign", "floor", "ceil", "round-nearest-even",
                          "round-nearest-afz"})


# ---------------------------------------------------------------------------------------------
# scalar arithmetic on compute values (``scalar_ops.py``)
# ---------------------------------------------------------------------------------------------

from ourjax.backends.llvm.scalar_ops import (  # noqa: E402,F401
    _fmax, _fmin, _imax, _imin, _nvptx_int32, _ptx_select_minmax,
    _int_div, _int_rem, _int_pow, _shift, MathLib, finalize_module_text,
    _row_functions, math_symbols, _math, unary_op, _window_source, exact_fmod,
    binary_op, _FCMP, _ICMP, compare_op, _index_value, _clamp_i64)


# ---------------------------------------------------------------------------------------------
# the emitter (``elemental.py``)
# ---------------------------------------------------------------------------------------------

from ourjax.backends.llvm.elemental import (  # noqa: E402
    Emitter, accumulation_dtype, concat_parts)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
