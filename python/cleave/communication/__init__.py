"""cleave.communication: joining the job and groups (mindspore.communication)."""
from .management import (init, release, get_rank, get_group_size, get_local_rank,
                         get_local_rank_size, create_group, destroy_group,
                         get_world_rank_from_group_rank, get_group_rank_from_world_rank, GlobalComm)

__all__ = ["init", "release", "get_rank", "get_group_size", "get_local_rank",
           "get_local_rank_size", "create_group", "destroy_group",
           "get_world_rank_from_group_rank", "get_group_rank_from_world_rank", "GlobalComm"]
