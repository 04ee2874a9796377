"""``ourjax.export`` (JAX's ``jax.export``): a jitted function, traced for given argument types,
as a self-contained ``Exported`` that can be called, serialized to bytes and loaded again.

    exp = export.export(jit(f))(ShapeDtypeStruct((3,), jnp.float32), y)   # types (or values)
    exp.call(x, y)                  # runs it (also under jit, grad, vmap)
    data = exp.serialize()          # bytes (vjp_order=n also stores n levels of VJPs)
    exp2 = export.deserialize(data) # an Exported again, in this or another process

JAX's ``Exported`` carries a StableHLO module; ourjax's carries the closed jaxpr, which its
``call`` binds as a jit call (so it compiles through the usual backends, and differentiates and
batches like any jitted function).  ``mlir_module()`` prints the module it lowers to in the
StableHLO-style text of ``Lowered.as_text()``.

What serializes: the jaxpr's equations, avals, literals and constants, and the parameters of
ourjax's primitives (numbers, tuples, dtypes, enums, named tuples and nested jaxprs).  Custom
derivative rules are dropped (as JAX's lowering drops them; ``vjp_order`` keeps the VJP);
primitives whose parameters hold Python functions (host callbacks, custom linear solves) cannot
be serialized and raise ``ValueError`` naming the primitive.  The argument and result structures
serialize when they are made of tuples, lists, dicts and None, or of types registered with
``register_namedtuple_serialization`` / ``register_pytree_node_serialization``.

``deserialize`` unpickles with an allowlist: only ourjax's jaxpr classes, its enums and named
tuples, NumPy arrays and dtypes, and a few built-in containers can be built from the bytes;
anything else is refused (``pickle.UnpicklingError``).  Shape polymorphism (symbolic dimensions)
and multi-device shardings are not supported.
"""
from __future__ import annotations

import builtins
import dataclasses
import enum
import functools
import importlib
import io
import json
import pickle
import sys
import types
from typing import Any, Callable, Sequence

import numpy as np

from ourjax import core
from ourjax.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Primitive, ShapedArray, Var

__all__ = ["Exported", "export", "deserialize", "DisabledSafetyCheck", "default_export_platform",
           "minimum_supported_calling_convention_version",
           "maximum_supported_calling_convention_version", "register_namedtuple_serialization",
           "register_pytree_node_serialization", "is_symbolic_dim"]

minimum_supported_calling_convention_version = 9
maximum_supported_calling_convention_version = 10
_CALLING_CONVENTION = 10
_MAGIC = b"OURJAX-EXPORT\x00v1\n"
_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def default_export_platform() -> str:
  """The platform a function is exported for when ``platforms`` is not given: this process's
  default backend ('cpu' or 'cuda')."""
  from ourjax.api import default_backend
  b = default_backend()
  return "cuda" if b == "gpu" else b


def is_symbolic_dim(p) -> bool:
  """False: ourjax exports fixed shapes only (no symbolic dimensions)."""
  return False


@dataclasses.dataclass(frozen=True)
class DisabledSafetyCheck:
  """A check that ``Exported.call`` may skip: ``DisabledSafetyCheck.platform()`` allows calling
  on a platform the function was not exported for."""
  _impl: str

  @classmethod
  def platform(cls) -> "DisabledSafetyCheck":
    return cls("platform")

  @classmethod
  def custom_call(cls, target_name: str) -> "DisabledSafetyCheck":
    return cls(f"custom_call:{target_name}")

  @classmethod
  def shape_assertions(cls) -> "DisabledSafetyCheck":
    return cls("shape_assertions")

  def is_custom_call(self) -> str | None:
    return self._impl[len("custom_call:"):] if self._impl.startswith("custom_call:") else None


# ------------------------------------------------------------------------------------------------
# Exported


@dataclasses.dataclass(frozen=True)
class Exported:
  """A function exported for fixed argument types (see the module docstring).

  ``in_tree``/``out_tree`` are the structures of ``(args, kwargs)`` and of the result,
  ``in_avals``/``out_avals`` the flat abstract values."""
  fun_name: str
  in_tree: Any
  in_avals: tuple
  out_tree: Any
  out_avals: tuple
  platforms: tuple
  disabled_safety_checks: tuple = ()
  nr_devices: int = 1
  ordered_effects: tuple = ()
  unordered_effects: tuple = ()
  calling_convention_version: int = _CALLING_CONVENTION
  uses_global_constants: bool = False
  _closed: Any = dataclasses.field(default=None, repr=False, compare=False)
  _get_vjp: Callable | None = dataclasses.field(default=None, repr=False, compare=False)
  _deserialized: bool = dataclasses.field(default=False, repr=False, compare=False)

  @property
  def in_shardings_hlo(self) -> tuple:
    return (None,) * len(self.in_avals)

  @property
  def out_shardings_hlo(self) -> tuple:
    return (None,) * len(self.out_avals)

  @property
  def module_kept_var_idx(self) -> tuple:
    return tuple(range(len(self.in_avals)))

  def __str__(self):
    return f"Exported(fun_name={self.fun_name}, ...)"     # (JAX's short form)

  def jaxpr(self) -> ClosedJaxpr:
    """The closed jaxpr that ``call`` runs."""
    return self._closed

  def mlir_module(self) -> str:
    """The module the function lowers to, as StableHLO-style text."""
    from ourjax.lowering import from_jaxpr, stablehlo_text
    lowering = from_jaxpr.lower(self._closed, self.fun_name, keep_unused=True)
    return stablehlo_text.module_text(lowering.module, self.fun_name)

  @property
  def mlir_module_serialized(self) -> bytes:
    return self.mlir_module().encode()

  def has_vjp(self) -> bool:
    return self._get_vjp is not None

  def vjp(self) -> "Exported | None":
    """The exported VJP: called with the primal arguments then one cotangent per result
    (flat), it returns one cotangent per argument (flat).  None when the Exported was
    deserialized without one (``serialize(vjp_order=0)``)."""
    return self._get_vjp(self) if self._get_vjp is not None else None

  # -- calling ---------------------------------------------------------------------------------

  def call(self, *args, **kwargs):
    """Runs the exported function on arguments of the exported structure, shapes and dtypes
    (as a jit call: it may be used under jit, grad and vmap)."""
    from ourjax._pytree import tree_flatten, tree_unflatten
    from ourjax.interpreters.pjit import pjit_p
    leaves, in_tree = tree_flatten((args, kwargs))
    if in_tree != self.in_tree:
      raise ValueError(
          "The invocation args and kwargs must have the same pytree structure as when the "
          f"function '{self.fun_name}' was exported, but they differ: exported with "
          f"{self.in_tree}, called with {in_tree}.")
    for i, (x, a) in enumerate(zip(leaves, self.in_avals)):
      xa = core.get_aval(x)
      if xa.dtype != a.dtype:
        raise ValueError(f"Dtype mismatch for args[{i}]: expected {a.dtype} and called with "
                         f"{xa.dtype}")
      if len(xa.shape) != len(a.shape):
        raise ValueError(f"Rank mismatch for args[{i}]: expected {len(a.shape)} and called "
                         f"with {len(xa.shape)} (expected shape {a.shape}, called with "
                         f"{xa.shape})")
      for d, (n, m) in enumerate(zip(a.shape, xa.shape)):
        if n != m:
          raise ValueError(f"Shape mismatch for args[{i}].shape[{d}] (expected same "
                           f"constant): expected {a.shape} and called with {xa.shape}")
    if not any(c._impl == "platform" for c in self.disabled_safety_checks):
      here = default_export_platform()
      if here not in self.platforms:
        raise ValueError(f"Function '{self.fun_name}' was exported for platforms "
                         f"'{self.platforms}' but it is used on '{here}'.")
    if self._deserialized:
      outs = _call_with_stored_vjp(self, leaves)
    else:
      outs = pjit_p.bind(*leaves, jaxpr=self._closed, name=self.fun_name, backend=None)
    return tree_unflatten(self.out_tree, outs)

  # -- serialization ---------------------------------------------------------------------------

  def serialize(self, vjp_order: int = 0) -> bytearray:
    """Bytes that ``deserialize`` turns back into an equivalent Exported; ``vjp_order=n``
    stores n levels of VJPs too (``exp.vjp()``, ``exp.vjp().vjp()``, ...)."""
    if vjp_order > 0 and not self.has_vjp():
      raise ValueError(f"serialize(vjp_order={vjp_order}): this Exported of "
                       f"'{self.fun_name}' has no VJP (it was deserialized without one)")
    payload = dict(
        fun_name=self.fun_name,
        in_tree=_encode_tree(self.in_tree), out_tree=_encode_tree(self.out_tree),
        in_avals=tuple(self.in_avals), out_avals=tuple(self.out_avals),
        platforms=tuple(self.platforms),
        disabled_safety_checks=tuple(c._impl for c in self.disabled_safety_checks),
        nr_devices=self.nr_devices, calling_convention_version=self.calling_convention_version,
        jaxpr=_portable_closed(self._closed),
        vjp=(bytes(self.vjp().serialize(vjp_order - 1)) if vjp_order > 0 else None))
    buf = io.BytesIO()
    _Pickler(buf).dump(payload)
    data = buf.getvalue()
    _Unpickler(io.BytesIO(data)).load()    # (what cannot be loaded back is refused here)
    return bytearray(_MAGIC + data)


def _call_with_stored_vjp(exp: Exported, leaves):
  """A deserialized function differentiates through the VJP stored with it (custom derivative
  rules were dropped from its jaxpr), or refuses to, as JAX's."""
  from ourjax.custom_derivatives import custom_vjp
  from ourjax.interpreters.pjit import pjit_p

  def primal(*xs):
    return tuple(pjit_p.bind(*xs, jaxpr=exp._closed, name=exp.fun_name, backend=None))

  def fwd(*xs):
    return primal(*xs), xs

  def bwd(xs, cts):
    v = exp.vjp()
    if v is None:
      raise ValueError(f"The exported function '{exp.fun_name}' was serialized without its "
                       "VJP, so it cannot be differentiated after deserialization; serialize "
                       "it with vjp_order >= 1")
    return tuple(v.call(*xs, *cts))

  f = custom_vjp(primal)
  f.defvjp(fwd, bwd)
  return list(f(*leaves))


def export(fun_jit, *, platforms: Sequence[str] | None = None,
           disabled_checks: Sequence[DisabledSafetyCheck] = ()) -> Callable[..., Exported]:
  """``export(jit(f))(*args, **kwargs)`` -> ``Exported`` for the types of the arguments
  (arrays, or ``ShapeDtypeStruct``s; static arguments as the jit takes them)."""
  from ourjax._jit import JitWrapped
  if not isinstance(fun_jit, JitWrapped):
    raise ValueError(f"Function to be exported must be the result of `jit` but is: {fun_jit}")
  if platforms is None:
    platforms = (default_export_platform(),)
  else:
    if isinstance(platforms, str):
      raise TypeError(f"export: platforms must be a sequence of platform names, got "
                      f"{platforms!r}")
    platforms = tuple(p.lower() for p in platforms)
    bad = [p for p in platforms if p not in _PLATFORMS]
    if bad:
      raise ValueError(f"export: unknown platform(s) {bad}; expected some of {_PLATFORMS}")
  checks = tuple(disabled_checks)
  for c in checks:
    if not isinstance(c, DisabledSafetyCheck):
      raise TypeError(f"export: disabled_checks must be DisabledSafetyCheck values, got {c!r}")

  def do_export(*args, **kwargs) -> Exported:
    traced = fun_jit.trace(*args, **kwargs)
    sig = traced._sig
    closed = traced.jaxpr
    return Exported(fun_name=sig.fun_name, in_tree=sig.in_tree, in_avals=tuple(sig.in_avals),
                    out_tree=sig.out_tree, out_avals=tuple(closed.out_avals),
                    platforms=platforms, disabled_safety_checks=checks, _closed=closed,
                    _get_vjp=_make_vjp)
  return do_export


def _make_vjp(exp: Exported) -> Exported:
  """The VJP of ``exp`` exported for its primal argument types and the results' cotangent
  types."""
  from ourjax.api import ShapeDtypeStruct, jit, vjp
  from ourjax.interpreters import ad
  closed = exp._closed
  n_in = len(exp.in_avals)

  def fun_vjp_jax(*args):
    primals, cts = args[:n_in], args[n_in:]
    _, f_vjp = vjp(lambda *xs: core.eval_jaxpr(closed.jaxpr, closed.consts, *xs), *primals)
    return tuple(f_vjp(list(cts)))

  ct_avals = [ad.tangent_aval(a) for a in exp.out_avals]
  specs = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type)
           for a in list(exp.in_avals) + ct_avals]
  return export(jit(fun_vjp_jax), platforms=exp.platforms,
                disabled_checks=exp.disabled_safety_checks)(*specs)


def deserialize(blob: bytes | bytearray) -> Exported:
  """The Exported that ``Exported.serialize`` wrote into ``blob``."""
  blob = bytes(blob)
  if not blob.startswith(_MAGIC):
    raise ValueError("export.deserialize: these bytes are not an ourjax Exported (wrong header; "
                     "JAX's flatbuffer format is not read)")
    # (a different ourjax serialization version would have a different header)
  payload = _Unpickler(io.BytesIO(blob[len(_MAGIC):])).load()
  vjp_blob = payload["vjp"]
  get_vjp = None
  if vjp_blob is not None:
    loaded = deserialize(vjp_blob)
    get_vjp = lambda _exp: loaded      # noqa: E731
  return Exported(
      fun_name=payload["fun_name"], in_tree=_decode_tree(payload["in_tree"]),
      in_avals=tuple(payload["in_avals"]), out_tree=_decode_tree(payload["out_tree"]),
      out_avals=tuple(payload["out_avals"]), platforms=tuple(payload["platforms"]),
      disabled_safety_checks=tuple(DisabledSafetyCheck(c)
                                   for c in payload["disabled_safety_checks"]),
      nr_devices=payload["nr_devices"],
      calling_convention_version=payload["calling_convention_version"],
      _closed=payload["jaxpr"], _get_vjp=get_vjp, _deserialized=True)


# ------------------------------------------------------------------------------------------------
# The jaxpr in a serializable form: custom-derivative calls become plain jit calls of their
# primal jaxprs, and parameters that are Python functions are refused.

_CUSTOM_CALLS = ("custom_jvp_call", "custom_vjp_call", "custom_vmap_call")


def _portable_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
  return ClosedJaxpr(_portable(closed.jaxpr), list(closed.consts))


def _portable(jaxpr: Jaxpr) -> Jaxpr:
  from ourjax.interpreters.pjit import pjit_p
  eqns = []
  for eqn in jaxpr.eqns:
    if eqn.primitive in core.host_callback_primitives:
      raise ValueError(f"export: cannot serialize a function that calls back into Python "
                       f"(primitive '{eqn.primitive.name}'): host callbacks are not "
                       "serializable")
    if eqn.primitive.name in _CUSTOM_CALLS and "call_jaxpr" in eqn.params:
      call = eqn.params["call_jaxpr"]
      call = call if isinstance(call, ClosedJaxpr) else ClosedJaxpr(call, [])
      eqns.append(eqn._replace(primitive=pjit_p, params=dict(
          jaxpr=_portable_closed(call), name=eqn.primitive.name, backend=None)))
      continue
    params = {k: _portable_param(eqn.primitive, k, v) for k, v in eqn.params.items()}
    eqns.append(eqn._replace(params=params))
  return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, jaxpr.debug_name)


def _portable_param(prim, name, v):
  if isinstance(v, ClosedJaxpr):
    return _portable_closed(v)
  if isinstance(v, Jaxpr):
    return _portable(v)
  if type(v) in (tuple, list):
    return type(v)(_portable_param(prim, name, x) for x in v)
  if isinstance(v, (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                    functools.partial)) or (callable(v) and not isinstance(v, type)
                                            and not isinstance(v, (np.generic, np.ndarray))):
    raise ValueError(
        f"export: cannot serialize the primitive '{prim.name}': its parameter {name!r} is the "
        f"Python function {v!r} (host callbacks and other Python-level rules are not "
        "serializable)")
  return v


# ------------------------------------------------------------------------------------------------
# Pickling with primitives and arrays by reference, and an allowlist when loading

def _primitive_table() -> dict:
  """name -> (primitive, module) over ourjax's loaded modules."""
  table: dict = {}
  for modname, mod in list(sys.modules.items()):
    if mod is None or not (modname == "ourjax" or modname.startswith("ourjax.")):
      continue
    for v in list(vars(mod).values()):
      if isinstance(v, Primitive):
        table.setdefault(v.name, (v, modname))
  return table


class _Pickler(pickle.Pickler):
  def __init__(self, f):
    super().__init__(f, protocol=5)
    self._table = _primitive_table()

  def persistent_id(self, obj):
    if isinstance(obj, Primitive):
      hit = self._table.get(obj.name)
      if hit is None or hit[0] is not obj:
        raise ValueError(f"export: cannot serialize the primitive '{obj.name}': it is not one "
                         "of ourjax's own primitives (a primitive defined outside ourjax has "
                         "no rules in another process)")
      return ("primitive", obj.name, hit[1])
    if isinstance(obj, core.Tracer):
      raise ValueError(f"export: cannot serialize a traced value ({obj})")
    from ourjax.array import Array
    from ourjax._keys import KeyDType, PRNGImpl
    if isinstance(obj, Array):
      return ("array", np.asarray(obj), core.get_aval(obj))
    if isinstance(obj, PRNGImpl):
      return ("prng_impl", obj.name)
    if isinstance(obj, KeyDType):
      return ("key_dtype", obj._impl.name)
    return None


_BUILTINS = frozenset({"complex", "slice", "set", "frozenset", "range", "bytearray", "tuple",
                       "list", "dict", "int", "float", "bool", "str", "bytes"})
_JAXPR_CLASSES = frozenset({"ShapedArray", "Var", "Literal", "Jaxpr", "JaxprEqn", "ClosedJaxpr"})


class _Unpickler(pickle.Unpickler):
  def find_class(self, module, name):
    if "." not in name:
      if module == "builtins" and name in _BUILTINS:
        return getattr(builtins, name)
      if module in ("numpy.core.multiarray", "numpy._core.multiarray") and \
          name in ("_reconstruct", "scalar"):
        return getattr(importlib.import_module(module), name)
      if module in ("numpy.core.numeric", "numpy._core.numeric") and name == "_frombuffer":
        return getattr(importlib.import_module(module), name)
      if module == "copyreg" and name == "_reconstructor":
        import copyreg
        return copyreg._reconstructor
      if module == "ourjax.core" and name in _JAXPR_CLASSES:
        return getattr(core, name)
      if module in ("numpy", "numpy.dtypes") or module.split(".")[0] == "ml_dtypes":
        obj = getattr(importlib.import_module(module), name, None)
        if isinstance(obj, type):
          return obj
      if module == "ourjax" or module.startswith("ourjax."):
        obj = getattr(importlib.import_module(module), name, None)
        # enums and named tuples (the parameters of primitives), ourjax's dtypes
        if isinstance(obj, type) and (issubclass(obj, enum.Enum) or
                                      (issubclass(obj, tuple) and hasattr(obj, "_fields")) or
                                      (module == "ourjax.dtypes" and issubclass(obj, np.generic))):
          return obj
    raise pickle.UnpicklingError(f"export.deserialize: refusing to load {module}.{name} (not "
                                 "a part of a serialized jaxpr)")

  def persistent_load(self, pid):
    kind = pid[0]
    if kind == "primitive":
      _, name, modname = pid
      if not (modname == "ourjax" or modname.startswith("ourjax.")):
        raise pickle.UnpicklingError(f"export.deserialize: bad primitive module {modname!r}")
      importlib.import_module(modname)
      hit = _primitive_table().get(name)
      if hit is None:
        raise ValueError(f"export.deserialize: this ourjax has no primitive '{name}'")
      return hit[0]
    if kind == "array":
      from ourjax.array import Array
      _, value, aval = pid
      return Array._from_result(np.asarray(value), aval)
    if kind in ("prng_impl", "key_dtype"):
      impl = _prng_impl(pid[1])
      if kind == "prng_impl":
        return impl
      from ourjax._keys import KeyDType
      return KeyDType(impl)
    raise pickle.UnpicklingError(f"export.deserialize: unknown reference {kind!r}")


def _prng_impl(name: str):
  import ourjax.random  # noqa: F401  (fills the table)
  from ourjax._keys import PRNG_IMPLS
  impl = PRNG_IMPLS.get(name)
  if impl is None:
    raise ValueError(f"export.deserialize: this ourjax has no PRNG implementation '{name}'")
  return impl


# ------------------------------------------------------------------------------------------------
# Pytree structures as JSON

_NT_BY_TYPE: dict = {}       # namedtuple type -> serialized name
_NT_BY_NAME: dict = {}
_NODE_BY_TYPE: dict = {}     # type -> (serialized name, serialize_auxdata, deserialize_auxdata)
_NODE_BY_NAME: dict = {}


def register_namedtuple_serialization(nodetype, *, serialized_name: str):
  """Lets structures holding the namedtuple class ``nodetype`` be serialized, under
  ``serialized_name`` (which must be registered again in the process that deserializes)."""
  if not (isinstance(nodetype, type) and issubclass(nodetype, tuple)
          and hasattr(nodetype, "_fields")):
    raise ValueError(f"Cannot register_namedtuple_serialization for {nodetype}: it is not a "
                     "namedtuple class")
  if serialized_name in _NT_BY_NAME or serialized_name in _NODE_BY_NAME:
    raise ValueError(f"Duplicate serialization registration for serialized_name "
                     f"'{serialized_name}'")
  _NT_BY_TYPE[nodetype] = serialized_name
  _NT_BY_NAME[serialized_name] = nodetype
  return nodetype


def register_pytree_node_serialization(nodetype, *, serialized_name: str,
                                       serialize_auxdata: Callable[[Any], bytes],
                                       deserialize_auxdata: Callable[[bytes], Any]):
  """Lets structures holding the registered pytree node ``nodetype`` be serialized: its aux
  data through ``serialize_auxdata`` (-> bytes) and ``deserialize_auxdata``."""
  if serialized_name in _NT_BY_NAME or serialized_name in _NODE_BY_NAME:
    raise ValueError(f"Duplicate serialization registration for serialized_name "
                     f"'{serialized_name}'")
  _NODE_BY_TYPE[nodetype] = (serialized_name, serialize_auxdata, deserialize_auxdata)
  _NODE_BY_NAME[serialized_name] = (nodetype, deserialize_auxdata)
  return nodetype


def _encode_tree(treedef) -> str:
  def enc(t):
    nd = t.node_data()
    if nd is None:
      return "*"
    typ, aux = nd
    kids = [enc(c) for c in t.children()]
    if typ is type(None):
      return ["None"]
    if typ is tuple:
      return ["tuple", kids]
    if typ is list:
      return ["list", kids]
    if typ is dict:
      keys = []
      for k in aux:
        if type(k) not in (str, int):
          raise ValueError(f"export: a dict key of type {type(k).__name__} in the arguments or "
                           "results cannot be serialized (str and int keys can)")
        keys.append([type(k).__name__, k])
      return ["dict", keys, kids]
    from ourjax._keys import PRNGKeyArray
    if typ is PRNGKeyArray:           # (a key array argument: its impl by name, its data)
      return ["key", aux.name, kids]
    if typ in _NT_BY_TYPE:
      return ["namedtuple", _NT_BY_TYPE[typ], kids]
    if typ in _NODE_BY_TYPE:
      name, ser, _ = _NODE_BY_TYPE[typ]
      return ["custom", name, bytes(ser(aux)).hex(), kids]
    raise ValueError(f"Cannot serialize PyTreeDef containing an unregistered type "
                     f"{typ.__module__}.{typ.__qualname__}. Use "
                     "`export.register_pytree_node_serialization` or "
                     "`export.register_namedtuple_serialization`.")
  return json.dumps(enc(treedef))


class _Hole:
  """A leaf placeholder while a structure is rebuilt."""


def _decode_tree(text: str):
  def dec(x):
    if x == "*":
      return _Hole()
    kind = x[0]
    if kind == "None":
      return None
    if kind == "tuple":
      return tuple(dec(c) for c in x[1])
    if kind == "list":
      return [dec(c) for c in x[1]]
    if kind == "dict":
      return {(int(v) if t == "int" else v): dec(c) for (t, v), c in zip(x[1], x[2])}
    if kind == "namedtuple":
      typ = _NT_BY_NAME.get(x[1])
      if typ is None:
        raise ValueError(f"export.deserialize: the namedtuple '{x[1]}' is not registered "
                         "(register_namedtuple_serialization) in this process")
      return typ(*[dec(c) for c in x[2]])
    if kind == "key":
      from ourjax import _keys
      return _keys._unflatten(_prng_impl(x[1]), [dec(c) for c in x[2]])
    if kind == "custom":
      hit = _NODE_BY_NAME.get(x[1])
      if hit is None:
        raise ValueError(f"export.deserialize: the pytree node '{x[1]}' is not registered "
                         "(register_pytree_node_serialization) in this process")
      typ, deser = hit
      aux = deser(bytes.fromhex(x[2]))
      kids = [dec(c) for c in x[3]]
      from ourjax import _pytree
      node_kind = _pytree._registry.get(typ)
      if node_kind is None:
        raise ValueError(f"export.deserialize: {typ} is not a registered pytree node")
      return node_kind.unflatten(aux, tuple(kids))
    raise ValueError(f"export.deserialize: bad tree node {kind!r}")
  skeleton = dec(json.loads(text))
  from ourjax import _pytree     # (the structure jit sees: key arrays are nodes over their data)
  return _pytree.tree_structure(skeleton, is_leaf=lambda v: isinstance(v, _Hole))

