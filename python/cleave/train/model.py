"""Model (mindspore.train.Model)."""
from .. import _cleave


class Model:
    """Trains and evaluates a network: Model(network, loss_fn, optimizer, metrics). train and
    eval run cleave's C++ loop; Python callbacks are called from it."""

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, eval_network=None,
                 amp_level="O0", **kwargs):
        if eval_network is not None:
            raise ValueError("Model: eval_network is not supported; the network is evaluated")
        if amp_level not in ("O0", None):
            raise ValueError(f"Model: amp_level '{amp_level}' is not supported; expected 'O0'")
        if kwargs:
            raise TypeError(f"Model: unexpected arguments {sorted(kwargs)}")
        # Python holds the cells: a Cell written in Python lives while its Python object does.
        self._network, self._loss_fn, self._optimizer = network, loss_fn, optimizer
        self._model = _cleave.Model(network, loss_fn, optimizer, metrics)

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False,
              sink_size=-1, initial_epoch=0):
        if initial_epoch != 0:
            raise ValueError("Model.train: initial_epoch is not supported; resume from a "
                             "checkpoint with load_train_state")
        self._callbacks = callbacks  # alive while training
        self._model.train(epoch, train_dataset, callbacks, dataset_sink_mode)

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False):
        return self._model.eval(valid_dataset, dataset_sink_mode)

    def predict(self, data):
        return self._model.predict(data)

    def save_train_state(self, path):
        self._model.save_train_state(path)

    def load_train_state(self, path):
        self._model.load_train_state(path)

    def build(self, train_dataset=None, valid_dataset=None, sink_size=-1, epoch=1):
        """Compiles the training step for train_dataset's batches without running it, so that
        load_distributed_checkpoint then reads only this rank's slices."""
        if valid_dataset is not None:
            raise ValueError("Model.build: valid_dataset is not supported; eval compiles its "
                             "graph at its first batch")
        if train_dataset is None:
            raise ValueError("Model.build: give train_dataset; cleave compiles the training step "
                             "for its batches")
        self._model.build(train_dataset)

    def load_distributed_checkpoint(self, directory, strategy_file, prefix=""):
        self._model.load_distributed_checkpoint(directory, strategy_file, prefix)

    @property
    def loaded_files(self):
        """The checkpoint files the last load_distributed_checkpoint read on this rank."""
        return list(self._model.loaded_files)

    @property
    def train_network(self):
        return self._network
