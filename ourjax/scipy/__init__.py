"""``ourjax.scipy``: the subset of ``jax.scipy`` built on lax/jnp ops (special functions,
distributions, linear algebra, signal processing, ndimage interpolation, BFGS minimisation,
3-D rotations)."""
from ourjax.scipy import special  # noqa: F401
from ourjax.scipy import stats  # noqa: F401
from ourjax.scipy import linalg  # noqa: F401
from ourjax.scipy import signal  # noqa: F401
from ourjax.scipy import ndimage  # noqa: F401
from ourjax.scipy import optimize  # noqa: F401
from ourjax.scipy import sparse  # noqa: F401
from ourjax.scipy import cluster  # noqa: F401
from ourjax.scipy import integrate  # noqa: F401
from ourjax.scipy import fft  # noqa: F401
from ourjax.scipy import interpolate  # noqa: F401
from ourjax.scipy import spatial  # noqa: F401
