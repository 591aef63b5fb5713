"""cleave.context: the execution mode and the parallel settings (mindspore.context)."""
from ._cleave import (GRAPH_MODE, PYNATIVE_MODE, set_context as _set_context, get_context,
                      set_auto_parallel_context as _set_auto_parallel_context,
                      get_auto_parallel_context, reset_auto_parallel_context)


class ParallelMode:
    """The parallel modes by MindSpore's names (strings, as MindSpore's are)."""
    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"


def set_context(**kwargs):
    """mode (GRAPH_MODE or PYNATIVE_MODE), device_target ('CPU', or 'GPU' where there is one),
    save_graphs, save_graphs_path; device_id is accepted and cleave picks the device itself.
    split_batch_over_threads (cleave's, default True): a GRAPH_MODE training step on several
    threads cuts its batch into one block per thread when that gives the same step."""
    _set_context(**kwargs)


def set_auto_parallel_context(**kwargs):
    """parallel_mode, device_num, global_rank, gradients_mean, full_batch, dataset_strategy,
    search_mode, strategy_ckpt_config / strategy_ckpt_save_file / strategy_ckpt_load_file,
    enable_parallel_optimizer, parallel_optimizer_config, enable_alltoall, ..."""
    _set_auto_parallel_context(**kwargs)
