"""Everything that measures lirs: reference shuffle strategies, randomness metrics, peer loaders,
``lirs bench`` and its device envelopes, fio, training baselines and synthetic data.

The core (``lirs`` outside this package) never imports it; this package imports the core.
"""
