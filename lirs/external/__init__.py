"""``lirs shuffle``: a one-off exact two-pass external shuffle of files larger than RAM."""
from .api import *  # noqa: F401,F403
from .api import shuffle  # noqa: F401
