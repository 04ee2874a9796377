"""``ourjax.lax``: the primitives' wrappers, as ``jax.lax`` exposes them.  Each family module
declares its primitives with all their rules; this file only re-exports."""
from ourjax.lax._reexport import reexport as _reexport
from ourjax.lax import elementwise as _elementwise
from ourjax.lax import structural as _structural
from ourjax.lax import reductions as _reductions
from ourjax.lax import slicing as _slicing
from ourjax.lax import cumulative as _cumulative
from ourjax.lax import sorting as _sorting
from ourjax.lax import dot as _dot
from ourjax.lax import dot_algorithm as _dot_algorithm
from ourjax.lax import conv_patches as _conv_patches
from ourjax.lax import rng as _rng
from ourjax.lax import control_flow as _control_flow
from ourjax.lax import parallel as _parallel
from ourjax.lax import windowed as _windowed
from ourjax.lax import fft as _fft
from ourjax.lax import convenience as _convenience
from ourjax.lax import ragged as _ragged
from ourjax.lax import special as _special
from ourjax.lax import custom_solvers as _custom_solvers

for _m in (_elementwise, _structural, _reductions, _slicing, _cumulative, _sorting, _dot,
           _dot_algorithm, _conv_patches, _control_flow, _parallel, _windowed, _fft,
           _convenience, _ragged, _special, _rng, _custom_solvers):
  globals().update(_reexport(_m))
del _m

# private helpers that jnp (like JAX's) reaches for
from ourjax.lax.elementwise import _convert_element_type, _const  # noqa: E402,F401

# ``lax.linalg`` is a submodule (as ``jax.lax.linalg``), not re-exported into ``lax``
from ourjax.lax import linalg  # noqa: E402,F401
