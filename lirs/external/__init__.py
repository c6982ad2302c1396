"""``lirs shuffle``: a one-off exact two-pass external shuffle of files larger than RAM."""
from .api import shuffle
from .memory import MemoryPlan, plan_memory

__all__ = ["MemoryPlan", "plan_memory", "shuffle"]
