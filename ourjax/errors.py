"""The exceptions ourjax raises for user mistakes.  Names and base classes follow JAX's, so
``except jax.errors.X`` code keeps working after an import change."""
from __future__ import annotations


class OurJaxError(Exception):
  """Base of ourjax's own error types (not of the TypeError/ValueError it raises for bad input)."""


class JAXTypeError(TypeError):
  """Base of the TypeErrors about traced values (JAX's ``jax.errors.JAXTypeError``)."""


class JAXIndexError(IndexError):
  """Base of the IndexErrors about traced values (JAX's ``jax.errors.JAXIndexError``)."""


class ConcretizationTypeError(JAXTypeError):
  """A traced (abstract) value was used where a concrete Python value is needed."""

  def __init__(self, tracer, context: str = ""):
    self.tracer = tracer
    aval = getattr(tracer, "aval", None)
    what = aval.str_short() if aval is not None and hasattr(aval, "str_short") else str(aval)
    msg = (f"Abstract tracer value encountered where concrete value is expected: "
           f"traced array with shape {what}.\n{context}\n"
           "The value was computed inside a transformed function (jit, grad, vmap, ...), so "
           "only its shape and dtype are known while tracing. Use static_argnums/"
           "static_argnames for arguments that control Python logic, or structured control "
           "flow (lax.cond, lax.while_loop, jnp.where).")
    super().__init__(msg)


class TracerBoolConversionError(ConcretizationTypeError):
  """``bool(x)``/``if x:`` on a traced value."""

  def __init__(self, tracer, where: str = ""):
    aval = getattr(tracer, "aval", None)
    what = aval.str_short(short_dtypes=False) if aval is not None else "?"
    where = f"The error occurred{where}.\n" if where else ""
    ctx = (f"Attempted boolean conversion of traced array with shape {what}.\n{where}"
           "Python control flow (if/while/and/or/not) needs a concrete bool; on a traced value "
           "use lax.cond or jnp.where instead.")
    TypeError.__init__(self, ctx)
    self.tracer = tracer


class TracerIntegerConversionError(ConcretizationTypeError):
  """``int(x)``/``x.__index__()`` on a traced value."""

  def __init__(self, tracer, where: str = ""):
    aval = getattr(tracer, "aval", None)
    what = aval.str_short() if aval is not None else "?"
    if aval is not None and hasattr(aval, "str_short"):
      what = aval.str_short(short_dtypes=False)
    TypeError.__init__(self, f"The __index__() method was called on traced array with shape "
                             f"{what}{where}. Use static arguments for values that must be "
                             "Python integers.")
    self.tracer = tracer


class TracerArrayConversionError(JAXTypeError):
  """``np.asarray(x)`` on a traced value."""

  def __init__(self, tracer):
    aval = getattr(tracer, "aval", None)
    what = aval.str_short() if aval is not None else "?"
    super().__init__(f"The numpy.ndarray conversion method __array__() was called on traced "
                     f"array with shape {what}. A traced value has no data yet; use ourjax.numpy "
                     "functions instead of NumPy ones inside transformed functions.")
    self.tracer = tracer


class NonConcreteBooleanIndexError(JAXIndexError):
  """A boolean mask whose values are not known while tracing was used as an index (or in
  another operation whose result shape depends on how many of its values are true)."""

  def __init__(self, tracer):
    aval = getattr(tracer, "aval", None)
    what = aval.str_short() if aval is not None else "?"
    super().__init__(
        f"Array boolean indices must be concrete; got {what}. The number of elements a traced "
        "mask selects is not known while tracing, so neither is the shape of x[mask]. Keep the "
        "shape with jnp.where(mask, x, fill), or pass a static size: "
        "jnp.nonzero(mask, size=n), jnp.where(mask, size=n), jnp.compress(mask, x, size=n).")
    self.tracer = tracer


class JaxprTypeError(TypeError):
  """A jaxpr fails its type check (``core.check_jaxpr``): a variable bound twice or used before
  it is bound, an equation's result types not its primitive's."""


class UnexpectedTracerError(JAXTypeError, OurJaxError):
  """A tracer escaped the transformation that created it and was used later."""


class KeyReuseError(JAXTypeError, OurJaxError):
  pass


class JaxRuntimeError(OurJaxError, RuntimeError):
  """An error of the runtime rather than of the program's types: compiling, running, memory,
  a call the runtime refuses (e.g. a donated buffer that the same call also reads) (JAX's
  ``jax.errors.JaxRuntimeError``, XLA's runtime errors)."""


class CompileError(JaxRuntimeError):
  """The backend failed to compile a module (the message carries the backend's log)."""


class DeviceError(JaxRuntimeError):
  """A device (driver) call failed."""


def format_bytes(n: int) -> str:
  """``n`` bytes for people: ``512 B``, ``1.5 MiB``, ..., up to ``PiB``."""
  units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
  x = float(n)
  for unit in units:
    if abs(x) < 1024 or unit == units[-1]:
      return f"{int(x)} B" if unit == "B" else f"{x:.1f} {unit}"
    x /= 1024
  raise AssertionError(n)   # pragma: no cover


class ResourceExhaustedError(JaxRuntimeError, MemoryError):
  """Memory for a computation could not be allocated (JAX's RESOURCE_EXHAUSTED).  ``nbytes``:
  the size asked for; ``output``: the index of the result being allocated, or None (the
  program's temporaries).  ``jit`` adds the function and, for a result, the operation that
  computes it and its line."""

  def __init__(self, message: str, nbytes: int = 0, output: int | None = None):
    super().__init__(message)
    self.nbytes, self.output = nbytes, output


class DeviceOutOfMemoryError(DeviceError, ResourceExhaustedError):
  """The device allocator could not satisfy a request."""


class CollectiveTimeoutError(OurJaxError, TimeoutError):
  """A collective (``psum`` & co.) or a coordination step that did not complete within
  ``OURJAX_COLLECTIVE_TIMEOUT`` seconds (a device or process that never arrived)."""
