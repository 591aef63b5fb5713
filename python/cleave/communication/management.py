"""cleave.communication.management (mindspore.communication.management)."""
from .. import _cleave
from .._cleave import (release, get_local_rank, get_local_rank_size, create_group, destroy_group,
                       get_world_rank_from_group_rank, get_group_rank_from_world_rank)


class GlobalComm:
    WORLD_COMM_GROUP = _cleave.WORLD_COMM_GROUP


def init(backend_name=None):
    """Joins the job the launcher started (cleave-run, mpirun, a rank table), or runs alone as
    rank 0 of 1. backend_name: None (the launcher's choice), "gloo", "mpi", "nccl"; MindSpore's
    "hccl" is refused."""
    _cleave.init(backend_name)


def get_rank(group=GlobalComm.WORLD_COMM_GROUP):
    return _cleave.get_rank(group)


def get_group_size(group=GlobalComm.WORLD_COMM_GROUP):
    return _cleave.get_group_size(group)
