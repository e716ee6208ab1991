"""The training engine's former home: everything now lives in :mod:`medseg.model.training`.

Kept so that ``from medseg.model.train import train, TrainConfig, ...`` keeps working.
"""

from medseg.model.training import *  # noqa: F403
from medseg.model.training import __all__  # noqa: F401
