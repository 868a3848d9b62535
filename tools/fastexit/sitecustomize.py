"""Imported at start-up by every Python of a test run (conftest.py puts this folder first on
$PYTHONPATH): the notebooks' torchrun and spawned workers, DataLoader workers, servers.

At exit, Python's last garbage collections walk every object still alive: after
``import torch`` that is about 1.2 s of CPU, 2-2.5 s once dynamo is loaded (any
optimizer loads it), per process. Frozen objects are skipped; the operating system frees
the memory anyway. Registered first, this runs after every other exit handler, so
nothing that flushes or joins at exit is cut short.
"""
import atexit
import gc

atexit.register(gc.freeze)
