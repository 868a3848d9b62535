"""The exercises' checks: ``core`` is the engine; each ``nbNN_<notebook>`` module holds one notebook's checks."""

from .cells import install_short_errors as _install_short_errors
from .core import *  # noqa: F403
from .nb00_hardware import *  # noqa: F403
from .nb01_tensors import *  # noqa: F403
from .nb02_manual_backprop import *  # noqa: F403
from .nb03_autograd import *  # noqa: F403
from .nb04_custom_functions import *  # noqa: F403
from .nb05_nn_module import *  # noqa: F403
from .nb06_optim import *  # noqa: F403
from .nb07_data_loading import *  # noqa: F403
from .nb08_pretrained_models import *  # noqa: F403
from .nb09_static_and_dynamic_graphs import *  # noqa: F403
from .nb10_scaling_up import *  # noqa: F403

_install_short_errors()  # inside IPython: an exercise's stub and a check run too early get one line (cells.py)
