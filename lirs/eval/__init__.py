"""Everything that measures lirs: reference shuffle strategies, randomness metrics, peer loaders,
``lirs bench`` and its device envelopes, fio, training baselines and synthetic data.

The core (``lirs`` outside this package) never imports it; this package imports the core.
"""

import importlib as _importlib


def __getattr__(name):
    # the strategy registry without importing every evaluation module at ``import lirs.eval``
    if name == "STRATEGIES":
        return _importlib.import_module("lirs.eval.strategies").STRATEGIES
    raise AttributeError(f"module 'lirs.eval' has no attribute {name!r}")
