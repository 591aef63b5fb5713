"""cleave.train: Model, callbacks, metrics and checkpoints (mindspore.train)."""
from .model import Model
from .callback import Callback, RunContext, LossMonitor, TimeMonitor, ModelCheckpoint, CheckpointConfig
from .._cleave import Metric, Accuracy, Loss, TopKCategoricalAccuracy
from .serialization import save_checkpoint, load_checkpoint, load_param_into_net
from . import serialization  # noqa: F401
