"""Callbacks (mindspore.train.Callback and the built-in ones)."""
from .._cleave import Callback as _Callback
from .._cleave import RunContext, LossMonitor, TimeMonitor, ModelCheckpoint, CheckpointConfig


class Callback(_Callback):
    """Subclass and define any of on_train_begin, on_train_epoch_begin, on_train_step_begin,
    on_train_step_end, on_train_epoch_end, on_train_end (or MindSpore's older begin,
    epoch_begin, step_begin, step_end, epoch_end, end); each gets the RunContext, whose
    original_args() has cur_epoch_num, cur_step_num, batch_num, net_outputs (the loss), and
    which request_stop() ends training. An exception raised here stops training with it."""

    def __init__(self):
        _Callback.__init__(self)

    def on_train_begin(self, run_context):
        self.begin(run_context)

    def on_train_epoch_begin(self, run_context):
        self.epoch_begin(run_context)

    def on_train_step_begin(self, run_context):
        self.step_begin(run_context)

    def on_train_step_end(self, run_context):
        self.step_end(run_context)

    def on_train_epoch_end(self, run_context):
        self.epoch_end(run_context)

    def on_train_end(self, run_context):
        self.end(run_context)

    def begin(self, run_context):
        pass

    def epoch_begin(self, run_context):
        pass

    def step_begin(self, run_context):
        pass

    def step_end(self, run_context):
        pass

    def epoch_end(self, run_context):
        pass

    def end(self, run_context):
        pass
