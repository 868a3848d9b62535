"""labsupport: the small helper package behind the PyTorch teaching lab.

One module per concern; everything a notebook needs is re-exported here, so a
notebook only writes ``import labsupport as lab``.

* ``seeding``    seed_everything, make_generator, seed_worker
* ``device``     pick_device, print_environment, check_versions
* ``data``       lecture_data, lecture_weights, DigitsDataset
* ``models``     DigitsCNN, count_parameters
* ``checks``     the exercises' checks (CheckError, check_close, ...)
* ``training``   digits_loaders, fit, evaluate (after notebook 07 has taught the loop)
* ``tb``         tb_writer (runs/<notebook>/<run>, replaced on rerun; tags under the notebook), tb_hint
* ``plotting``   plot_losses
* ``timing``     Timer, time_fn
* ``checkpoint`` save_checkpoint (atomic), load_checkpoint (weights_only)
* ``paths``      (internal) runs/ beside notebooks/ and student/, or $LAB_RUNS_DIR
* ``hardware``   cpu_info, gpu_info, time_per_call, matmul_sweep (notebook 00)
* ``distributed`` run_data_parallel: DDP workers as real processes, gloo or NCCL (notebook 10)
* ``autograd_graph`` print_graph, graph_nodes (walk grad_fn to the leaves)
* ``pretrained`` load_pretrained (offline-first), imagenet_topk, pretrain_digits_cnn (notebook 08)
* ``slowdata``   SlowDataset, SyntheticImages, time_loader, worker_speedup: DataLoader workers (notebook 07)

Example:
    >>> import labsupport as lab
    >>> lab.seed_everything(0)
    0
"""
from .seeding import *  # noqa: F401,F403
from .device import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from .models import *  # noqa: F401,F403
from .checks import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
from .tb import *  # noqa: F401,F403
from .plotting import *  # noqa: F401,F403
from .timing import *  # noqa: F401,F403
from .checkpoint import *  # noqa: F401,F403
from .paths import *  # noqa: F401,F403
from .hardware import *  # noqa: F401,F403
from .distributed import *  # noqa: F401,F403
from .autograd_graph import *  # noqa: F401,F403
from .pretrained import *  # noqa: F401,F403
from .slowdata import *  # noqa: F401,F403

__version__ = "0.2.0"
