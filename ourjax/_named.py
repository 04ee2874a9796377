"""``named_scope`` / ``named_call``: accepted for compatibility; names do not reach the jaxpr or
the compiled code (a no-op context manager and an identity wrapper)."""
import contextlib
import functools


@contextlib.contextmanager
def named_scope(name: str):
  if not isinstance(name, str):
    raise TypeError(f"named_scope name argument must be a string, got {type(name).__name__}")
  yield


def named_call(fun, *, name=None):
  @functools.wraps(fun)
  def wrapped(*args, **kwargs):
    return fun(*args, **kwargs)
  return wrapped
