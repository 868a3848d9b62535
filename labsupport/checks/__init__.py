"""The exercises' checks: ``core`` is the engine; each other module holds one notebook's checks."""
from .core import *  # noqa: F401,F403
from .tensors import *  # noqa: F401,F403   01_tensors
from .backprop import *  # noqa: F401,F403  02_manual_backprop
from .autograd import *  # noqa: F401,F403  03_autograd
from .functions import *  # noqa: F401,F403  04_custom_functions
from .modules import *  # noqa: F401,F403  05_nn_module
from .optim import *  # noqa: F401,F403  06_optim
from .datasets import *  # noqa: F401,F403  07_data_loading
from .pretrained import *  # noqa: F401,F403  08_pretrained_models
from .graphs import *  # noqa: F401,F403  09_static_and_dynamic_graphs
from .scaling import *  # noqa: F401,F403  10_scaling_up
from .hardware import *  # noqa: F401,F403  00_hardware
