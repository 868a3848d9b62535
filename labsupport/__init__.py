"""labsupport: what the lab's notebooks share, re-exported so a notebook writes only
``import labsupport as lab``. One module per concern: seeding, device, data, models,
checks (one module per notebook, on one engine), training, tb, plotting, timing,
checkpoint, hardware (00), autograd_graph (03), slowdata (07), pretrained (08),
distributed (10). A name is public only if a notebook calls it.

Example:
    >>> import labsupport as lab
    >>> lab.seed_everything(0)
    0
"""

from .autograd_graph import *  # noqa: F401,F403
from .checkpoint import *  # noqa: F401,F403
from .checks import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from .device import *  # noqa: F401,F403
from .distributed import *  # noqa: F401,F403
from .hardware import *  # noqa: F401,F403
from .models import *  # noqa: F401,F403
from .plotting import *  # noqa: F401,F403
from .pretrained import *  # noqa: F401,F403
from .seeding import *  # noqa: F401,F403
from .slowdata import *  # noqa: F401,F403
from .tb import *  # noqa: F401,F403
from .timing import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403

__version__ = "0.2.0"
