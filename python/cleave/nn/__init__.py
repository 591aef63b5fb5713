"""cleave.nn: Cell, the layers, losses and optimizers (mindspore.nn)."""
from .cell import Cell, TrainOneStepCell
from .._cleave import (Dense, Conv2d, MaxPool2d, AvgPool2d, ReLU, GELU, Sigmoid, Tanh, Softmax,
                       Flatten, BatchNorm2d, LayerNorm, Dropout, Embedding, SequentialCell,
                       SoftmaxCrossEntropyWithLogits, CrossEntropyLoss, MSELoss, L1Loss,
                       WithLossCell, Optimizer, SGD, Adam)
from .._cleave import Momentum as _Momentum


def Momentum(params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0,
             use_nesterov=False):
    """SGD with momentum; `params` may be any iterable of parameters (a filter, a list)."""
    return _Momentum(list(params), learning_rate, momentum, weight_decay, loss_scale, use_nesterov)


__all__ = ["Cell", "TrainOneStepCell", "Dense", "Conv2d", "MaxPool2d", "AvgPool2d", "ReLU",
           "GELU", "Sigmoid", "Tanh", "Softmax", "Flatten", "BatchNorm2d", "LayerNorm", "Dropout",
           "Embedding", "SequentialCell", "SoftmaxCrossEntropyWithLogits", "CrossEntropyLoss",
           "MSELoss", "L1Loss", "WithLossCell", "Optimizer", "SGD", "Momentum", "Adam"]
