"""``ourjax.scipy.spatial`` (as ``jax.scipy.spatial``): ``transform`` (Rotation, Slerp)."""
from ourjax.scipy.spatial import transform  # noqa: F401
