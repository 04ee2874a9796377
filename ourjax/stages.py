"""The stages of a jitted function, as JAX names them:

    traced = jit(f).trace(x, y)        # Traced: the closed jaxpr and the argument structure
    lowered = jit(f).lower(x, y)       # Lowered: the HLO module, before optimization
    compiled = lowered.compile()       # Compiled: optimized module + backend executable
    compiled(x, y)                     # runs it (static arguments are left out of the call)

``Lowered.as_text()`` prints the module the jaxpr lowered to; ``Compiled.as_text()`` prints it
after the pass pipeline (fusions included once the fusion pass runs), and
``Compiled.as_text(dialect="llvm"|"ptx")`` the backend's code when its executable has it.
``cost_analysis()`` counts flops, transcendentals and bytes from the module, and
``Compiled.profile(*args)`` measures where a call's time goes, kernel by kernel
(``ourjax.profiler``).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ourjax import core
from ourjax import _pytree as tree_util
from ourjax.core import ClosedJaxpr, ShapedArray
from ourjax.lowering import hlo

__all__ = ["ArgInfo", "Traced", "Lowered", "Compiled", "cost_analysis"]


class ArgInfo(NamedTuple):
  """What a stage knows about one argument leaf: its abstract value and whether it is
  donated."""
  aval: ShapedArray
  donated: bool

  @property
  def shape(self):
    return self.aval.shape

  @property
  def dtype(self):
    return self.aval.dtype


class _Signature(NamedTuple):
  """The dynamic arguments a stage was made for (static ones already bound)."""
  fun_name: str
  in_tree: Any                  # PyTreeDef of (args, kwargs)
  in_avals: tuple               # flat ShapedArrays
  arg_names: tuple              # one readable name per leaf ("x", "params['w']")
  donated: tuple                # one bool per leaf
  out_tree: Any


def _shape_dtype_structs(avals, tree):
  from ourjax.api import ShapeDtypeStruct
  return tree_util.tree_unflatten(tree, [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type)
                                         for a in avals])


class _Stage:
  _sig: _Signature

  @property
  def in_tree(self):
    return self._sig.in_tree

  @property
  def out_tree(self):
    return self._sig.out_tree

  @property
  def in_avals(self):
    return tree_util.tree_unflatten(self._sig.in_tree, list(self._sig.in_avals))

  @property
  def args_info(self):
    return tree_util.tree_unflatten(
        self._sig.in_tree, [ArgInfo(a, d) for a, d in zip(self._sig.in_avals, self._sig.donated)])

  @property
  def donate_argnums(self):
    return getattr(self, "_donate_argnums", ())

  @property
  def fun_name(self) -> str:
    return self._sig.fun_name


class Traced(_Stage):
  """``jit(f).trace(*args)``: the traced function at one signature."""

  def __init__(self, jit_wrapped, entry, sig: _Signature):
    self._jit, self._entry, self._sig = jit_wrapped, entry, sig
    self._donate_argnums = jit_wrapped.donate_argnums

  @property
  def jaxpr(self) -> ClosedJaxpr:
    return self._entry.closed

  @property
  def out_avals(self):
    return tree_util.tree_unflatten(self._sig.out_tree, list(self._entry.closed.out_avals))

  @property
  def out_info(self):
    return _shape_dtype_structs(self._entry.closed.out_avals, self._sig.out_tree)

  def lower(self, *, lowering_platforms: tuple | None = None,
            _private_parameters=None) -> "Lowered":
    """The ``Lowered`` stage.  ``lowering_platforms`` (JAX's cross-platform lowering, e.g.
    ``('tpu',)``) is accepted: ourjax's HLO module is the same for every backend until it is
    compiled, so it changes nothing."""
    if lowering_platforms is not None and (
        isinstance(lowering_platforms, str) or
        not all(isinstance(p, str) for p in lowering_platforms)):
      raise TypeError("lowering_platforms must be a tuple of platform names, got "
                      f"{lowering_platforms!r}")
    return self._jit._lower_entry(self._entry, self._sig)

  def __repr__(self):
    return f"Traced({self._sig.fun_name})"


class Lowered(_Stage):
  """The HLO module a traced function lowered to, before the pass pipeline."""

  def __init__(self, lowering, closed: ClosedJaxpr, sig: _Signature, backend, donate_argnums,
               name: str, log_reason: str | None = None, donation=None):
    self._lowering, self._closed, self._sig = lowering, closed, sig
    self._backend, self._donate_argnums, self._name = backend, donate_argnums, name
    self._log_reason = log_reason
    self._donation = donation     # (``_donation.Donation``: set up, and warned about, here)

  @property
  def out_info(self):
    return _shape_dtype_structs(self._closed.out_avals, self._sig.out_tree)

  def compiler_ir(self, dialect: str | None = None):
    """A copy of the (unoptimized) HLO module, or with ``dialect="stablehlo"`` its
    StableHLO-style text (``lowering/stablehlo_text.py``)."""
    _check_dialect(dialect, ("hlo", "stablehlo"), "Lowered")
    if dialect == "stablehlo":
      return self.as_text(dialect="stablehlo")
    return self._lowering.module.clone()

  def as_text(self, dialect: str | None = None, *, debug_info: bool = False) -> str:
    """The module as StableHLO-style MLIR text, JAX's default form (``dialect=None`` or
    ``"stablehlo"``: ``module @jit_f attributes {mhlo.num_partitions = 1 : i32, ...}
    { func.func public @main(...) }``; see ``lowering/stablehlo_text.py``), or with
    ``dialect="hlo"`` the HLO module (``%add.1 = f32[3] add(%p0, %p1)``; ``debug_info=True``
    also prints the operands' shapes)."""
    _check_dialect(dialect, ("hlo", "stablehlo"), "Lowered")
    if dialect in (None, "stablehlo"):
      from ourjax.lowering import stablehlo_text
      return stablehlo_text.module_text(self._lowering.module, self._name)
    return self._lowering.module.to_string(operand_shapes=debug_info)

  def cost_analysis(self) -> dict:
    return cost_analysis(self._lowering.module)

  def compile(self, compiler_options: dict | None = None) -> "Compiled":
    """A new ``Compiled`` (each call compiles again).  ``compiler_options`` (with the
    ``jit``'s own) are checked as XLA checks them (``ourjax/_compiler_options.py``) and change
    nothing else."""
    from ourjax import _compiler_options, backends
    _compiler_options.check({**getattr(self, "_compiler_options", {}),
                             **(compiler_options or {})})
    exe = backends.compile_lowering(self._lowering, self._closed, backend=self._backend,
                                    name=self._name, log_reason=self._log_reason,
                                    donation=self._donation)
    return Compiled(exe, self._closed, self._sig, self._donate_argnums)

  def __repr__(self):
    return f"Lowered({self._sig.fun_name})"


class Compiled(_Stage):
  """A compiled executable for one signature.  Call it with the dynamic arguments (static
  arguments were fixed when lowering): their structure, shapes and dtypes must be the ones it
  was compiled for."""

  def __init__(self, executable, closed: ClosedJaxpr, sig: _Signature, donate_argnums):
    self._executable, self._closed, self._sig = executable, closed, sig
    self._donate_argnums = donate_argnums

  @property
  def out_info(self):
    return _shape_dtype_structs(self._closed.out_avals, self._sig.out_tree)

  def runtime_executable(self):
    """The backend's executable (what ``as_text(dialect=...)`` asks for its code)."""
    return getattr(self._executable, "compiled", self._executable)

  def as_text(self, dialect: str | None = None, *, debug_info: bool = False) -> str:
    """The optimized HLO module (``dialect=None`` or ``"hlo"``; fusions print as
    ``%fusion.3 = f32[256,512] fusion(%p0, %p1), kind=kLoop, calls=%fused_computation.3``,
    ``debug_info=True`` adds the operands' shapes), or the backend's LLVM IR (``"llvm"``) or PTX
    (``"ptx"``) when its executable provides them."""
    _check_dialect(dialect, ("hlo", "llvm", "ptx"), "Compiled")
    if dialect in (None, "hlo"):
      module = getattr(self._executable, "module", None)
      if module is None:
        raise ValueError(f"jit({self._sig.fun_name}) is not compiled to an HLO module (a "
                         "primitive without a lowering rule made it run op by op)")
      return module.to_string(operand_shapes=debug_info)
    attr = "llvm_ir" if dialect == "llvm" else "ptx"
    rt = self.runtime_executable()
    text = getattr(rt, attr, None)
    if callable(text):
      text = text()
    if text is None:
      backend = getattr(self._executable, "backend", "reference")
      raise ValueError(f"Compiled.as_text(dialect={dialect!r}): the {backend!r} backend's "
                       f"executable has no {'LLVM IR' if dialect == 'llvm' else 'PTX'}; only "
                       f"the native backends ('cpu' gives LLVM IR, 'cuda' PTX) produce it")
    return text

  def cost_analysis(self) -> dict:
    module = getattr(self._executable, "module", None)
    if module is None:
      return {}
    return cost_analysis(module)

  def memory_analysis(self):
    """JAX's ``CompiledMemoryStats`` (``_donation.MemoryStats``) from the backend's plan: bytes
    of the arguments, the outputs, the outputs written into donated arguments
    (``alias_size_in_bytes``), the temporaries' arena (``temp_size_in_bytes``), the generated
    code (machine code on the CPU, PTX on the GPU) and ``peak_memory_in_bytes``; None for a
    function that runs op by op."""
    return memory_stats(self._executable)

  def __call__(self, *args, **kwargs):
    outs = self._executable(*self._leaves(args, kwargs, "call"))
    return tree_util.tree_unflatten(self._sig.out_tree, outs)

  def profile(self, *args, reps: int = 10, **kwargs):
    """Where a call's time goes: an ``ourjax.profiler.Profile`` whose ``str()`` is a table
    with a row per kernel (its kind, median time over ``reps`` calls after one to warm up,
    share, launches, bytes, GB/s, GFLOP/s, the HLO instructions it computes) and rows for host
    overheads (copies, host round trips, Python dispatch); ``.rows`` has the numbers and
    ``.to_chrome_trace(path)`` writes the timeline.  On the CPU the module is compiled once
    more with cycle counters around its kernels (cached apart from the plain code)."""
    from ourjax import profiler
    leaves = self._leaves(args, kwargs, "profile")
    return profiler._profile_executable(self._executable, leaves, self._sig.in_avals, reps,
                                        f"jit({self._sig.fun_name})")

  def _leaves(self, args, kwargs, what):
    """The argument leaves of a call, checked against the compiled signature."""
    from ourjax.api import _abstractify, _check_arg
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    sig = self._sig
    if in_tree != sig.in_tree:
      raise TypeError(
          f"Function compiled with input pytree does not match the input pytree it was called "
          f"with: compiled for {sig.in_tree}, called with {in_tree}. (Static arguments are "
          "fixed at lowering and left out of the call.)")
    for x in leaves:
      _check_arg(x, f"jit({sig.fun_name}) compiled" + (".profile" if what == "profile" else ""))
      if isinstance(x, core.Tracer):
        raise TypeError(
            "Cannot apply JAX transformations to a function lowered and compiled for a "
            f"particular signature. Detected argument of Tracer type {type(x)} (in "
            f"jit({sig.fun_name}) compiled); transform the jitted function before lowering it.")
    avals = [_abstractify(x) for x in leaves]
    bad = [f"Argument '{n}' compiled with {a.str_short(short_dtypes=False)} and called with "
           f"{b.str_short(short_dtypes=False)}"
           for n, a, b in zip(sig.arg_names, sig.in_avals, avals) if not core.typematch(a, b)]
    if bad:
      raise TypeError("Argument types differ from the types for which this computation was "
                      "compiled. Perhaps you are calling the compiled executable with a "
                      "different enable_x64 mode than when it was compiled? The mismatches "
                      "are:\n" + "\n".join(bad))
    return leaves

  def __repr__(self):
    return f"Compiled({self._sig.fun_name})"


def memory_stats(executable):
  """``Compiled.memory_analysis()`` of a ``backends.ModuleExecutable`` (None without a
  module)."""
  from ourjax._donation import MemoryStats
  module = getattr(executable, "module", None)
  if module is None:
    return None
  entry = module.entry
  rt = getattr(executable, "compiled", executable)
  root = entry.root.shape
  outs = list(root.tuple_shapes) if root.is_tuple else [root]
  aliases = getattr(rt, "aliases", ())
  inner = getattr(rt, "inner", None)          # (the GPU backend's host fallback)
  planned = rt if hasattr(rt, "arena_bytes") else inner
  if planned is not None and hasattr(planned, "arena_bytes"):
    temp = int(planned.arena_bytes)
  else:
    ba = getattr(module, "buffer_assignment", None)
    temp = int(ba.temp_bytes) if ba is not None else 0
  code = getattr(rt, "code_bytes", None)
  return MemoryStats(
      generated_code_size_in_bytes=int(code() if callable(code) else code or 0),
      argument_size_in_bytes=sum(_bytes(p.shape) for p in entry.parameters),
      output_size_in_bytes=sum(_bytes(s) for s in outs),
      alias_size_in_bytes=sum(_bytes(outs[j]) for j, _ in aliases),
      temp_size_in_bytes=temp)


def _check_dialect(dialect, allowed, stage):
  if dialect is not None and dialect not in allowed:
    raise ValueError(f"{stage}.as_text: unknown dialect {dialect!r}; expected one of "
                     f"{', '.join(repr(d) for d in allowed)}")


# ------------------------------------------------------------------------------------------------
# Cost analysis


#: Elementwise opcodes XLA's cost analysis counts as transcendentals rather than flops.
TRANSCENDENTAL_OPS = {
    "exponential", "exp2", "exponential-minus-one", "log", "log-plus-one", "power", "sqrt",
    "rsqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "asinh", "acosh", "atanh", "atan2", "erf", "erfc", "erf-inv", "lgamma", "digamma"}

#: Elementwise opcodes that do no arithmetic (data movement and reinterpretation).
_FREE_OPS = {"copy", "convert", "bitcast-convert", "real", "imag"}


def _bytes(shape: hlo.Shape) -> int:
  if shape.is_tuple:
    return sum(_bytes(s) for s in shape.tuple_shapes)
  return shape.size * (1 if shape.dtype == np.bool_ else shape.dtype.itemsize)


def _computation_cost(comp: hlo.Computation, totals: dict) -> None:
  for instr in comp.instructions:
    _instruction_cost(instr, totals)


def _per_application(comp: hlo.Computation) -> tuple[int, int]:
  """(flops, transcendentals) of one application of a scalar computation (a reducer)."""
  t = {"flops": 0, "transcendentals": 0}
  _computation_cost(comp, t)
  return t["flops"], t["transcendentals"]


def _instruction_cost(instr: hlo.Instruction, t: dict) -> None:
  op, shape = instr.opcode, instr.shape
  if op in hlo.ELEMENTWISE_OPS and op not in _FREE_OPS:
    n = shape.size
    t["transcendentals" if op in TRANSCENDENTAL_OPS else "flops"] += n
  elif op == "dot":
    a = instr.attrs
    lhs = instr.operands[0].dims
    k = math.prod(lhs[d] for d in a.get("lhs_contracting_dims", ()))
    t["flops"] += 2 * shape.size * k
  elif op == "convolution":
    a = instr.attrs
    _, rspec, _ = a["dimension_numbers"]
    rhs = instr.operands[1].dims
    window = math.prod(rhs[d] for d in rspec[2:])
    t["flops"] += 2 * shape.size * window * rhs[rspec[1]]
  elif op in ("reduce", "reduce-window"):
    f, tr = _per_application(instr.attrs["to_apply"])
    if op == "reduce":
      apps = instr.operands[0].shape.size
    else:
      out0 = shape.tuple_shapes[0] if shape.is_tuple else shape
      apps = out0.size * math.prod(instr.attrs["window_dimensions"])
    t["flops"] += apps * f
    t["transcendentals"] += apps * tr
  elif op == "scatter":
    f, tr = _per_application(instr.attrs["to_apply"])
    apps = instr.operands[2].shape.size
    t["flops"] += apps * f
    t["transcendentals"] += apps * tr
  elif op == "sort":
    f, tr = _per_application(instr.attrs["to_apply"])
    s = instr.operands[0].shape
    n = s.dims[instr.attrs.get("dimension", 0)] if s.dims else 1
    apps = int(s.size * max(math.log2(n), 1)) if n > 1 else 0
    t["flops"] += apps * f
    t["transcendentals"] += apps * tr
  elif op == "fusion":
    _computation_cost(instr.attrs["calls"], t)
  elif op in ("while", "conditional"):
    # (the trip count is unknown: the body is counted once, as XLA does)
    for sub in instr.called_computations:
      _computation_cost(sub, t)


def cost_analysis(module: hlo.Module) -> dict:
  """``{'flops', 'transcendentals', 'bytes accessed'}`` of ``module``: elementwise arithmetic
  counts one flop per element (transcendental functions count as transcendentals instead), a
  dot ``2*M*N*K``, a convolution ``2 * outputs * window * input features``, a reduction one
  application of its reducer per input element; ``bytes accessed`` is the size of the entry's
  parameters plus its result."""
  t = {"flops": 0, "transcendentals": 0}
  _computation_cost(module.entry, t)
  entry = module.entry
  nbytes = sum(_bytes(p.shape) for p in entry.parameters) + _bytes(entry.root.shape)
  return {"flops": float(t["flops"]), "transcendentals": float(t["transcendentals"]),
          "bytes accessed": float(nbytes)}
