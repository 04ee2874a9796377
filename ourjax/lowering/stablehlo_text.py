"""The HLO module as StableHLO-style MLIR text: ``Lowered.as_text(dialect="stablehlo")``.

JAX's default text of a lowered function is StableHLO; this prints ourjax's module in that
shape, so that programs (and people) reading it find what they expect::

    module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
      func.func public @main(%arg0: tensor<f32>) -> (tensor<f32>) {
        %0 = stablehlo.constant dense<4.000000e+00> : tensor<f32>
        %1 = stablehlo.add %arg0, %0 : tensor<f32>
        return %1 : tensor<f32>
      }
    }

Elementwise operations, ``compare``, ``convert``, ``constant``, ``broadcast_in_dim``,
``optimization_barrier`` and ``get_tuple_element`` print in StableHLO's own syntax; the others in MLIR's generic form
(``"stablehlo.broadcast_in_dim"(%0) {dimensions = array<i64: 1>} : (...) -> ...``) with
ourjax's attribute names, and called computations as regions.  Tuples stay tuples (``tuple<>``
types), except the entry's result, which is returned as several values, and an
optimization barrier's results (``%3#1``).  It is text to read, not input for MLIR tools.
"""
from __future__ import annotations

import re

import numpy as np

from ourjax.lowering import hlo

_ELEMENT = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "complex<f32>", "complex128": "complex<f64>",
    "float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2", "int4": "i4", "uint4": "ui4",
}
_RENAME = {"broadcast": "broadcast_in_dim", "opt-barrier": "optimization_barrier"}
_MAX_CONSTANT = 32          # elements printed in a dense<> constant; larger ones are elided


def _element(dtype) -> str:
  name = np.dtype(dtype).name
  return _ELEMENT.get(name, name)


def type_text(shape: hlo.Shape) -> str:
  if shape.is_tuple:
    return "tuple<" + ", ".join(type_text(s) for s in shape.tuple_shapes) + ">"
  return "tensor<" + "".join(f"{d}x" for d in shape.dims) + _element(shape.dtype) + ">"


def _op_name(opcode: str) -> str:
  return "stablehlo." + _RENAME.get(opcode, opcode.replace("-", "_"))


def _scalar_text(v, dtype) -> str:
  dt = np.dtype(dtype)
  if dt == np.bool_:
    return "true" if v else "false"
  if dt.kind == "c":
    return f"({_scalar_text(v.real, np.float64)}, {_scalar_text(v.imag, np.float64)})"
  if dt.kind == "f" or dt.name == "bfloat16":
    f = float(v)
    if np.isnan(f):
      return "0x7FC00000"
    if np.isinf(f):
      return "0x7F800000" if f > 0 else "0xFF800000"
    return f"{f:.6e}"
  return str(int(v))


def _dense(value: np.ndarray) -> str:
  value = np.asarray(value)
  if value.size and np.array_equal(value, np.full_like(value, value.flat[0]),
                                   equal_nan=value.dtype.kind in "fc"):
    return f"dense<{_scalar_text(value.flat[0], value.dtype)}>"       # a splat
  if value.size > _MAX_CONSTANT:
    return "dense_resource<__elided__>"

  def nested(a):
    if a.ndim == 0:
      return _scalar_text(a[()], a.dtype)
    return "[" + ", ".join(nested(x) for x in a) + "]"
  return f"dense<{nested(value)}>"


def _attr_text(v) -> str | None:
  if isinstance(v, (bool, np.bool_)):
    return "true" if v else "false"
  if isinstance(v, (int, np.integer)):
    return f"{int(v)} : i64"
  if isinstance(v, (float, np.floating)):
    return f"{float(v):.6e} : f64"
  if isinstance(v, str):
    return f'"{v}"'
  if isinstance(v, (tuple, list)):
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
      return "array<i64" + (": " + ", ".join(str(int(x)) for x in v) if v else "") + ">"
    parts = [_attr_text(x) for x in v]
    if all(p is not None for p in parts):
      return "[" + ", ".join(parts) + "]"
    return None
  if isinstance(v, np.dtype):
    return _element(v)
  return None


def attribute_text(v) -> str:
  """A ``lax.composite`` attribute as StableHLO prints it: ``1 : i64``, ``"bar"``, ``f32``,
  ``dense<0.000000e+00> : tensor<1x2xf32>``."""
  if isinstance(v, type) and issubclass(v, np.generic) or isinstance(v, np.dtype):
    return _element(np.dtype(v))
  if isinstance(v, (bool, np.bool_)):
    return "true" if v else "false"
  if isinstance(v, (int, np.integer)) and not isinstance(v, np.generic):
    return f"{int(v)} : i64"
  if isinstance(v, float):
    return f"{v:.6e} : f32"
  if isinstance(v, str):
    return f'"{v}"'
  if isinstance(v, (np.ndarray, np.generic)) or hasattr(v, "__array__"):
    a = np.asarray(v)
    return f"{_dense(a)} : {type_text(hlo.Shape(a.dtype, a.shape))}"
  t = _attr_text(v)
  if t is None:
    raise TypeError(f"composite attribute of type {type(v).__name__} is not supported "
                    f"(numbers, strings, dtypes, NumPy arrays): {v!r}")
  return t


def _composite_regions(module) -> dict:
  """id(instruction) -> the ``lax.composite`` record whose call emitted it (see
  ``from_jaxpr._lower_composite``); a call whose inner values are read from outside it (nothing
  does that today) prints inline instead."""
  out = {}
  for rec in getattr(module, "composites", ()):
    inside = set(map(id, rec["region"]))
    results = set(map(id, rec["results"]))
    if any(id(u) not in inside for i in rec["region"] if id(i) not in results
           for u in i.users):
      continue
    for i in rec["region"]:
      out.setdefault(id(i), rec)
  return out


class _Printer:
  """Values are numbered across the whole function, regions included (MLIR names are unique
  within a function): ``%0, %1, ...`` for results, ``%argN`` for arguments."""

  def __init__(self, n_args: int, regions: dict | None = None, functions: list | None = None):
    self.lines: list[str] = []
    self.n_values = 0
    self.n_args = n_args
    self.regions = regions or {}
    self.printed: set = set()
    self.functions = functions if functions is not None else []   # (symbol, record)

  def composite(self, rec, names, indent, fresh) -> None:
    """``%n = stablehlo.composite "name" %a, %b {attributes} : (types) -> types``."""
    used = {s for s, _ in self.functions}
    symbol, k = rec["name"], 0
    while symbol in used:
      symbol, k = f"{rec['name']}_{k}", k + 1
    self.functions.append((symbol, rec))
    name = fresh()
    res = rec["results"]
    for i, r in enumerate(res):
      names[r] = name if len(res) == 1 else f"{name}#{i}"
    attrs = []
    if rec["attributes"]:
      attrs.append("composite_attributes = {" + ", ".join(f"{k} = {t}" for k, t in
                                                           rec["attributes"]) + "}")
    attrs.append(f"decomposition = @{symbol}")
    if rec["version"]:
      attrs.append(f"version = {rec['version']} : i32")
    ops = " " + ", ".join(names[o] for o in rec["operands"])    # (two spaces with none: JAX's)
    in_ts = ", ".join(type_text(o.shape) for o in rec["operands"])
    out_ts = [type_text(r.shape) for r in res]
    out_t = out_ts[0] if len(out_ts) == 1 else "(" + ", ".join(out_ts) + ")"
    lhs = name if len(res) == 1 else f"{name}:{len(res)}"
    self.lines.append(f'{indent}{lhs} = stablehlo.composite "{rec["name"]}"{ops} '
                      f'{{{", ".join(attrs)}}} : ({in_ts}) -> {out_t}')

  def computation(self, comp: hlo.Computation, indent: str, names: dict, entry: bool) -> None:
    def fresh() -> str:
      self.n_values += 1
      return f"%{self.n_values - 1}"
    for instr in comp.instructions:
      if instr.opcode == "parameter":
        continue
      rec = self.regions.get(id(instr))
      if rec is not None:                         # a lax.composite call: one op for all
        if id(rec) not in self.printed:
          self.printed.add(id(rec))
          self.composite(rec, names, indent, fresh)
        continue
      ops = [names[o] for o in instr.operands]
      op = instr.opcode
      if op == "get-tuple-element" and instr.operands[0].opcode == "opt-barrier":
        names[instr] = f"{names[instr.operands[0]]}#{instr.attrs['index']}"
        continue
      if entry and instr is comp.root and op == "tuple":
        continue                                  # returned as several values below
      name = fresh()
      names[instr] = name
      out_t = type_text(instr.shape)
      in_ts = [type_text(o.shape) for o in instr.operands]
      if op == "constant":
        text = f"stablehlo.constant {_dense(instr.value)} : {out_t}"
      elif op == "opt-barrier":                   # several results: %n#i
        self.lines.append(f"{indent}{name}:{len(ops)} = stablehlo.optimization_barrier "
                          f"{', '.join(ops)} : {', '.join(in_ts)}")
        continue
      elif op == "get-tuple-element":
        text = f"stablehlo.get_tuple_element {ops[0]}[{instr.attrs['index']}] : ({in_ts[0]}) -> {out_t}"
      elif op == "compare":
        kind = ("FLOAT" if hlo.is_inexact(instr.operands[0].dtype) else
                "UNSIGNED" if np.dtype(instr.operands[0].dtype).kind in "ub" else "SIGNED")
        text = (f"stablehlo.compare {instr.attrs['direction']}, {', '.join(ops)}, {kind} : "
                f"({', '.join(in_ts)}) -> {out_t}")
      elif op == "broadcast":
        dims = ", ".join(str(int(d)) for d in instr.attrs.get("dimensions", ()))
        text = f"stablehlo.broadcast_in_dim {ops[0]}, dims = [{dims}] : ({in_ts[0]}) -> {out_t}"
      elif op == "convert":
        text = f"stablehlo.convert {ops[0]} : ({in_ts[0]}) -> {out_t}"
      elif instr.is_elementwise() and not instr.called_computations and \
          all(t == out_t for t in in_ts):
        text = f"{_op_name(op)} {', '.join(ops)} : {out_t}"
      else:
        text = self._generic(instr, ops, in_ts, out_t, indent)
      self.lines.append(f"{indent}{name} = {text}")
    root = comp.root
    if entry and root.opcode == "tuple":
      vals, types = [names[o] for o in root.operands], [type_text(o.shape) for o in root.operands]
    else:
      vals, types = [names[root]], [type_text(root.shape)]
    ret = "return" if entry else "stablehlo.return"
    self.lines.append(f"{indent}{ret} {', '.join(vals)} : {', '.join(types)}")

  def _generic(self, instr, ops, in_ts, out_t, indent) -> str:
    attrs = []
    for k, v in sorted(instr.attrs.items()):
      if k in hlo.CALLED_COMPUTATION_KEYS or k == "value":
        continue
      t = _attr_text(v)
      if t is not None:
        attrs.append(f"{k} = {t}")
    regions = ""
    comps = instr.called_computations
    if comps:
      parts = []
      for sub in comps:
        self.lines_saved, self.lines = self.lines, []
        params = [p for p in sub.parameters if p is not None]
        names = {p: f"%arg{self.n_args + i}" for i, p in enumerate(params)}
        self.n_args += len(params)
        self.computation(sub, indent + "    ", names, entry=False)
        body, self.lines = self.lines, self.lines_saved
        head = (f"{indent}  ^bb0(" + ", ".join(f"{names[p]}: {type_text(p.shape)}"
                                               for p in params) + "):")
        parts.append("{\n" + head + "\n" + "\n".join(body) + f"\n{indent}}}")
      regions = " (" + ", ".join(parts) + ")"
    attr_text = " {" + ", ".join(attrs) + "}" if attrs else ""
    return (f'"{_op_name(instr.opcode)}"({", ".join(ops)}){regions}{attr_text} : '
            f"({', '.join(in_ts)}) -> {out_t}")


def module_text(module: hlo.Module, name: str) -> str:
  """``module @jit_<name> attributes {...} { func.func public @main(...) {...} }``."""
  entry = module.entry
  params = [p for p in entry.parameters if p is not None]
  names = {p: f"%arg{i}" for i, p in enumerate(params)}
  root = entry.root
  outs = list(root.operands) if root.opcode == "tuple" else [root]
  functions: list = []
  p = _Printer(len(params), _composite_regions(module), functions)
  p.computation(entry, "    ", names, entry=True)
  args = ", ".join(f"%arg{i}: {type_text(q.shape)}" for i, q in enumerate(params))
  results = ", ".join(type_text(o.shape) for o in outs)
  symbol = re.sub(r"[^A-Za-z0-9_]", "_", name.replace(">", ""))     # <lambda> -> _lambda
  head = (f"module @jit_{symbol} attributes {{mhlo.num_partitions = 1 : i32, "
          f"mhlo.num_replicas = 1 : i32}} {{\n  func.func public @main({args}) -> ({results}) {{")
  text = head + "\n" + "\n".join(p.lines) + "\n  }\n"
  done = 0
  while done < len(functions):             # the composites' decompositions (and theirs)
    fsym, rec = functions[done]
    done += 1
    text += _private_function(fsym, rec, functions)
  return text + "}\n"


def _private_function(symbol: str, rec: dict, functions: list) -> str:
  """``func.func private @name(%arg0: ...) -> ... { ... return ... }``: a composite's
  decomposition."""
  fn = rec["function"]
  params = [q for q in fn.parameters if q is not None]
  names = {q: f"%arg{i}" for i, q in enumerate(params)}
  p = _Printer(len(params), _composite_regions(rec["function_module"]), functions)
  p.computation(fn, "    ", names, entry=True)
  root = fn.root
  outs = list(root.operands) if root.opcode == "tuple" else [root]
  out_ts = [type_text(o.shape) for o in outs]
  res = out_ts[0] if len(out_ts) == 1 else "(" + ", ".join(out_ts) + ")"
  args = ", ".join(f"%arg{i}: {type_text(q.shape)}" for i, q in enumerate(params))
  return (f"  func.func private @{symbol}({args}) -> {res} {{\n" + "\n".join(p.lines)
          + "\n  }\n")
