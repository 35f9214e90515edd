"""The "tandem" backend of torch.distributed (docs/pytorch-backend.md).

    import torch.distributed as dist
    import tandem.torch                      # registers the backend
    dist.init_process_group("tandem")        # env://, tcp://, file:// as with gloo

The process groups are C++ (python/c10d/, the extension tandem._c10d, built
against LibTorch); this module registers their creator with
torch.distributed.Backend.register_backend (extended_api=True, so that a
sub-group learns its members' global ranks) and leaves every tandem group
in order at interpreter exit (the final barrier of each tandem job, through
tandem._exit.leave_at_exit, so that a failure there ends the process with
tandem's exit code).

Which groups share connections: a group made by dist.new_group while the
default group is tandem's is a communicator over the default group's
connections; any other tandem group (the default one, or a tandem group
beside a gloo default group) forms a tandem job of its own through the
store torch hands over.
"""

from __future__ import annotations

import torch.distributed as dist

from tandem import _exit

NAME = "tandem"

# Every tandem group of this process, in creation order. Held until exit:
# DDP's reducer keeps its group in C++ after dist.destroy_process_group()
# dropped torch's reference, and every rank must still run its job's final
# barrier; _leave shuts each down in order.
_groups: list = []


def _c10d():
    try:
        from tandem import _c10d
    except ImportError as e:
        raise ImportError(
            "the tandem backend of torch.distributed is not in this build of tandem: it needs "
            "LibTorch (Debian's libtorch-dev) when tandem is built (scripts/install-deps.sh "
            f"installs it): {e}") from e
    return _c10d


def _default_tandem_group():
    """The default group when it is tandem's, else None."""
    if not dist.is_initialized():
        return None
    group = dist.distributed_c10d._get_default_group()
    return group if isinstance(group, _c10d().ProcessGroupTandem) else None


def _create(options, pg_options):
    """torch.distributed's creator (extended API): a sub-group of the tandem
    default group, or a new tandem job formed through options.store."""
    if pg_options is not None:
        raise ValueError(
            f"the tandem backend takes no pg_options (got {type(pg_options).__name__}); its "
            "settings are tandem's environment variables (docs/collectives.md)")
    module = _c10d()
    ranks = list(options.global_ranks_in_group)
    parent = _default_tandem_group() if ranks else None
    if parent is not None:
        group = module.create_subgroup(parent, ranks, options.timeout)
    else:
        group = module.create_world(options.store, options.group_rank, options.group_size,
                                    options.timeout, default_group=not ranks)
    _groups.append(group)
    return group


def _leave() -> None:
    """Shuts down every live tandem group, newest first (sub-groups before
    the default group, whose job's final barrier runs last)."""
    while _groups:
        _groups.pop()._shutdown()


def register() -> None:
    """Registers the backend with torch.distributed once per process."""
    if NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True)
    _exit.leave_at_exit(_leave)
    # tandem._exit's own handler must stay the first to run at exit.
    _exit.install()
