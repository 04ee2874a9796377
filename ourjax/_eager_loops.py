"""NumPy's own ufunc loops, run in pieces on the CPU backend's native thread pool (eager mode).

An eager elementwise operation on a large array runs NumPy's implementation (``_eager.py``).
NumPy runs a ufunc on one thread; JAX's executables split a large elementwise op across their
pool.  This module runs the very loop NumPy would call for the operands' dtypes (its SIMD
``exp``, ``tanh``, ``sqrt``...) on every thread of ``backends/cpu/threads.py``'s pool, so the
values are NumPy's bit for bit and the hand-off costs what a compiled kernel's does (a futex
wake of workers that spin a while after each job), not a Python thread's wake-up and the
interpreter lock twice per part (~40-60 us a call on a 2-core VM against ~5-10 us here).

* **The loop**: a ufunc object's C struct (``PyUFuncObject``, NumPy's public C API) lists, per
  type signature, the inner loop and its data pointer.  ``loop_of(ufunc, dtype)`` reads the
  entry whose types are all ``dtype`` (float and complex kinds only: their loops never call
  back into Python, as an integer loop may to raise), after checking the struct against what
  Python says of the ufunc (name, ``nin``, ``nout``, ``ntypes``); then runs it on probe values
  and keeps it only if it gives NumPy's result bit for bit (a ufunc whose call takes another
  path for these dtypes is left to NumPy).
* **The pieces**: the operands and the result, each seen as ``rows x cols`` (a contiguous
  array as one row; a broadcast row or a strided view by rows, when its layout allows), are cut
  into pieces of whole rows or of ``_ALIGN``-element multiples of one row, numbered; the
  threads claim pieces with an atomic counter (a thread the OS has not scheduled holds up only
  the piece it claimed: with the other cores busy, the caller's thread does nearly all the
  pieces itself) and call the loop on each.  The pieces do not depend on the thread count, and
  each starts on a multiple of ``_ALIGN`` elements of its row, so every element goes through
  the same code path (vector body or tail) as in one NumPy call.
* **The native part** ``ourjax_ufunc_parts(slots, tid, n)`` is the pool's entry type; it is a
  few LLVM instructions, compiled once per process (its object code kept in the disk cache, as
  the pool's runtime library is).

NumPy's floating-point warnings are not raised (JAX computes inf and NaN without warning, as do
the other eager paths).
"""
from __future__ import annotations

import ctypes
import logging
import sys
import sysconfig
import threading

import numpy as np

log = logging.getLogger("ourjax.eager")

_ALIGN = 64                 # elements: pieces of a row start on multiples of this
_PIECE_ELEMENTS = 1 << 15   # elements per piece (about 10-20 us of a transcendental loop)
_MAX_ARGS = 8               # operands and result of one loop at most

# slots (int64 words): loop, data, nargs, rows, cols, rows per piece, cols per piece,
# pieces per row, pieces, counter; then per argument: base address, row stride, col stride
_LOOP, _DATA, _NARGS, _ROWS, _COLS, _RPP, _CPP, _PPR, _PIECES, _COUNTER, _ARGS = range(11)

_LOOP_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)

# ------------------------------------------------------------------------------------------------
# the ufunc's loop


def _struct_ok() -> bool:
  """Whether ``PyUFuncObject``'s fields can be read at their offsets: a standard object header
  (16 bytes: no free-threaded or trace-refs build), 64-bit pointers."""
  return (ctypes.sizeof(ctypes.c_void_p) == 8 and not hasattr(sys, "getobjects") and
          not sysconfig.get_config_var("Py_GIL_DISABLED") and
          object.__basicsize__ == 16)


# PyUFuncObject: header (16), int nin, nout, nargs, identity, functions*, data*, int ntypes,
# int reserved1, const char* name, const char* types
_NIN, _NOUT, _FUNCTIONS, _FDATA, _NTYPES, _NAME, _TYPES = 16, 20, 32, 40, 48, 56, 64

_loops: dict = {}
_loops_lock = threading.Lock()


def loop_of(ufunc, dtype):
  """(loop address, data address) of ``ufunc``'s loop whose operands and results are all
  ``dtype``, checked against NumPy on probe values; None where there is none to use."""
  key = (ufunc, dtype)
  hit = _loops.get(key, False)
  if hit is not False:
    return hit
  with _loops_lock:
    try:
      found = _find_loop(ufunc, dtype)
      if found is not None and not _agrees(ufunc, dtype, found):
        log.debug("ourjax: %s's loop for %s is not what NumPy runs; not split", ufunc.__name__,
                  dtype)
        found = None
    except Exception as e:   # noqa: BLE001  (any surprise: NumPy runs it, on one thread)
      log.debug("ourjax: no native loop of %s for %s (%s)", ufunc.__name__, dtype, e)
      found = None
    _loops[key] = found
  return found


def _find_loop(ufunc, dtype):
  dtype = np.dtype(dtype)
  if (type(ufunc) is not np.ufunc or dtype.kind not in "fc" or not dtype.isnative or
      ufunc.nin + ufunc.nout > _MAX_ARGS or not _struct_ok()):
    return None
  base = id(ufunc)

  def c_int(off):
    return ctypes.c_int.from_address(base + off).value

  def ptr(addr):
    return ctypes.c_void_p.from_address(addr).value

  name = ctypes.c_char_p.from_address(base + _NAME).value
  ntypes = c_int(_NTYPES)
  if ((c_int(_NIN), c_int(_NOUT), ntypes) != (ufunc.nin, ufunc.nout, ufunc.ntypes) or
      name is None or name.decode() != ufunc.__name__):
    return None
  nargs = ufunc.nin + ufunc.nout
  functions, data, types = ptr(base + _FUNCTIONS), ptr(base + _FDATA), ptr(base + _TYPES)
  if not functions or not types:
    return None
  chars = ctypes.string_at(types, ntypes * nargs)
  want = bytes([dtype.num]) * nargs
  for i in range(ntypes):
    if chars[i * nargs:(i + 1) * nargs] == want:
      fn = ptr(functions + 8 * i)
      return (fn, (ptr(data + 8 * i) or 0) if data else 0) if fn else None
  return None


def _probe(dtype, nin):
  """Probe operands: ordinary and special values, signs, zeros, tiny and huge magnitudes, over
  a length that leaves a vector tail."""
  specials = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e30, 88.0,
              -88.0, 700.0, 20.0, -20.0, 3.14159, 1e-8]
  rng = np.random.default_rng(0)
  out = []
  for k in range(nin):
    v = np.concatenate([np.roll(specials, k), rng.standard_normal(300) * 10 ** (k + 1),
                        rng.uniform(-3, 3, 200)])
    w = np.empty(v.size, dtype)
    if dtype.kind == "c":
      w.real, w.imag = v, np.roll(v, 7)
    else:
      w[:] = v
    out.append(w)
  return out


def _agrees(ufunc, dtype, found) -> bool:
  from ourjax.backends.reference_ops import quietly
  dtype = np.dtype(dtype)
  ins = _probe(dtype, ufunc.nin)
  want = quietly(ufunc, *ins)
  got = np.empty_like(want)
  arrs = ins + [got]
  args = (ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs])
  dims = (ctypes.c_ssize_t * 1)(got.size)
  steps = (ctypes.c_ssize_t * len(arrs))(*[dtype.itemsize] * len(arrs))
  _LOOP_T(found[0])(args, dims, steps, found[1] or None)
  return want.dtype == dtype and want.tobytes() == got.tobytes()


# ------------------------------------------------------------------------------------------------
# the native part function

_part = None              # (the CompiledModule, ctypes function, address); False: not built
_part_lock = threading.Lock()


def _emit():
  import llvmlite.ir as ir

  from ourjax.backends.cpu import jit
  from ourjax.backends.llvm import emitter as E
  i8p, i32, i64 = E.I8.as_pointer(), E.I32, E.I64
  mod = jit.new_module("ourjax_ufunc_parts")
  loop_t = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), i64.as_pointer(),
                                           i64.as_pointer(), i8p])
  fn = ir.Function(mod, ir.FunctionType(i32, [i8p, i64, i64]), name="ourjax_ufunc_parts")
  blk = {k: fn.append_basic_block(k) for k in ("entry", "claim", "piece", "row", "arg",
                                                 "call", "next_row", "done")}
  b = ir.IRBuilder(blk["entry"])
  w = b.bitcast(fn.args[0], i64.as_pointer())

  def word(i):
    return b.load(b.gep(w, [i if isinstance(i, ir.Value) else E.i64(i)]))

  loop = b.inttoptr(word(_LOOP), loop_t.as_pointer())
  data = b.inttoptr(word(_DATA), i8p)
  nargs, rows, cols = word(_NARGS), word(_ROWS), word(_COLS)
  rpp, cpp, ppr, pieces = word(_RPP), word(_CPP), word(_PPR), word(_PIECES)
  counter = b.gep(w, [E.i64(_COUNTER)])
  bases = b.gep(w, [E.i64(_ARGS)])
  outer = b.gep(bases, [nargs])
  inner = b.gep(outer, [nargs])
  args = b.alloca(i8p, E.i64(_MAX_ARGS))
  dim = b.alloca(i64)
  r_var, c0_var, r1_var, k_var = (b.alloca(i64) for _ in range(4))
  b.branch(blk["claim"])

  b.position_at_end(blk["claim"])
  p = b.atomic_rmw("add", counter, E.i64(1), "monotonic")
  b.cbranch(b.icmp_signed(">=", p, pieces), blk["done"], blk["piece"])

  b.position_at_end(blk["piece"])
  rb, cb = b.sdiv(p, ppr), b.srem(p, ppr)
  r0 = b.mul(rb, rpp)
  r1 = b.add(r0, rpp)
  r1 = b.select(b.icmp_signed("<", r1, rows), r1, rows)
  c0 = b.mul(cb, cpp)
  c1 = b.add(c0, cpp)
  c1 = b.select(b.icmp_signed("<", c1, cols), c1, cols)
  b.store(b.sub(c1, c0), dim)
  b.store(r0, r_var)
  b.store(r1, r1_var)
  b.store(c0, c0_var)
  b.branch(blk["row"])

  b.position_at_end(blk["row"])
  r = b.load(r_var)
  b.store(E.i64(0), k_var)
  b.cbranch(b.icmp_signed("<", r, b.load(r1_var)), blk["arg"], blk["claim"])

  b.position_at_end(blk["arg"])       # args[k] = base[k] + r * outer[k] + c0 * inner[k]
  k = b.load(k_var)
  addr = b.add(b.load(b.gep(bases, [k])),
               b.add(b.mul(b.load(r_var), b.load(b.gep(outer, [k]))),
                     b.mul(b.load(c0_var), b.load(b.gep(inner, [k])))))
  b.store(b.inttoptr(addr, i8p), b.gep(args, [k]))
  k1 = b.add(k, E.i64(1))
  b.store(k1, k_var)
  b.cbranch(b.icmp_signed("<", k1, nargs), blk["arg"], blk["call"])

  b.position_at_end(blk["call"])
  b.call(loop, [args, dim, inner, data])
  b.branch(blk["next_row"])

  b.position_at_end(blk["next_row"])
  b.store(b.add(b.load(r_var), E.i64(1)), r_var)
  b.branch(blk["row"])

  b.position_at_end(blk["done"])
  b.ret(ir.Constant(i32, 0))
  return mod


def _key() -> str:
  import hashlib

  import llvmlite
  import llvmlite.binding as llvm

  from ourjax.backends import disk_cache
  from ourjax.backends.cpu import jit
  h = hashlib.sha256(disk_cache.source_digest(__file__, jit.__file__).encode())
  h.update(f"{llvmlite.__version__}/{llvm.llvm_version_info}/{jit.cpu_name()}/"
           f"{jit.cpu_features()}/{jit.triple()}".encode())
  return "ufunc-parts-" + h.hexdigest()


def _build():
  from ourjax.backends import disk_cache
  from ourjax.backends.cpu import jit
  name = "ourjax_ufunc_parts"
  key = _key() if disk_cache.cache_dir() else None
  hit = disk_cache.read(key) if key else None
  cm = None
  if hit is not None:
    try:
      cm = jit.load_object(hit[1], [name])
    except jit.CompileError:
      cm = None
  if cm is None:
    obj, _ = jit.compile_to_object(_emit(), keep_ir=False)
    cm = jit.load_object(obj, [name])
    if key:
      disk_cache.write(key, {"ufunc_parts": name}, obj, "")
  fn = cm.ctypes_function(name, ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int64,
                                                  ctypes.c_int64])
  return cm, fn, cm.address(name)


def part_function():
  """(ctypes function, address) of ``ourjax_ufunc_parts``, built on first use; None if it
  cannot be."""
  global _part
  if _part is None:
    with _part_lock:
      if _part is None:
        try:
          _part = _build()
        except Exception as e:   # noqa: BLE001  (then NumPy runs on one thread)
          log.warning("ourjax: eager ufunc loops cannot run on the thread pool (%s)", e)
          _part = False
  return _part[1:] if _part else None


# ------------------------------------------------------------------------------------------------
# a call


def _as_rows(v: np.ndarray, rows: int, cols: int):
  """(address, row stride, col stride) of ``v`` seen as ``rows x cols``, or None where its
  layout does not allow it without a copy."""
  if v.flags.c_contiguous:
    return v.ctypes.data, cols * v.itemsize, v.itemsize
  if v.ndim == 1:
    return v.ctypes.data, 0, v.strides[0]
  try:
    v2 = np.reshape(v, (rows, cols), copy=False)
  except ValueError:
    return None
  return v2.ctypes.data, v2.strides[0], v2.strides[1]


def run(loop, vals, shape, dtype, pool):
  """The loop ``loop`` (``loop_of``'s answer) on the operands ``vals`` (NumPy arrays of
  ``shape`` and ``dtype``) into a new array, its pieces on ``pool``'s threads; None where an
  operand's layout cannot be cut so (then NumPy runs it)."""
  part = part_function()
  if part is None:
    return None
  size = 1
  for d in shape:
    size *= d
  if all(v.flags.c_contiguous for v in vals):
    rows, cols = 1, size
  elif len(shape) <= 1:
    rows, cols = 1, size
  else:
    cols = shape[-1]
    rows = size // cols if cols else 0
  res = np.empty(shape, dtype)
  if size == 0:
    return res
  nargs = len(vals) + 1
  slots = np.zeros(_ARGS + 3 * nargs, np.int64)
  for k, v in enumerate(list(vals) + [res]):
    layout = _as_rows(v, rows, cols)
    if layout is None:
      return None
    slots[_ARGS + k], slots[_ARGS + nargs + k], slots[_ARGS + 2 * nargs + k] = layout
  cpp = min(cols, _PIECE_ELEMENTS)          # (a multiple of _ALIGN, or the whole row)
  rpp = max(1, _PIECE_ELEMENTS // cols) if cpp == cols else 1
  ppr = -(-cols // cpp)
  slots[:_COUNTER] = (loop[0], loop[1], nargs, rows, cols, rpp, cpp, ppr,
                      ppr * -(-rows // rpp))
  fn, addr = part
  pool.run(fn, slots.ctypes.data, addr)
  return res
