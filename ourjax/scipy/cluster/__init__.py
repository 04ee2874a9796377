"""``ourjax.scipy.cluster``: vector quantisation (``vq``)."""
from ourjax.scipy.cluster import vq  # noqa: F401
