"""Checkpoints (mindspore.train.serialization)."""
from .. import _cleave


def save_checkpoint(save_obj, ckpt_file_name):
    """Saves a Cell's parameters, a dict name -> tensor, or a list of {"name", "data"} dicts."""
    _cleave.save_checkpoint(save_obj, ckpt_file_name)


def load_checkpoint(ckpt_file_name, net=None):
    """The tensors of a checkpoint by name; with `net`, also loads them into it."""
    params = _cleave.load_checkpoint(ckpt_file_name)
    if net is not None:
        load_param_into_net(net, params)
    return params


def load_param_into_net(net, parameter_dict, strict_load=False):
    """Copies the tensors of parameter_dict into net's parameters of the same names; returns the
    names of net's parameters that were not loaded."""
    return _cleave.load_param_into_net(net, parameter_dict)
