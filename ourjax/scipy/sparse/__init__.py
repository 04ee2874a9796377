"""``ourjax.scipy.sparse``: the iterative linear solvers of ``jax.scipy.sparse.linalg``."""
from ourjax.scipy.sparse import linalg  # noqa: F401
