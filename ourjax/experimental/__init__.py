"""``ourjax.experimental``: the names JAX keeps there that ourjax has (``io_callback``, ``shard_map``,
``enable_x64``, ``multihost_utils``)."""
from ourjax._callback import io_callback  # noqa: F401
from ourjax.config import enable_x64  # noqa: F401
from ourjax.experimental import multihost_utils  # noqa: F401,E402
