"""Where the ranks run: one machine, or the nodes of a DeepSpeed hostfile, checked before anything starts.

Shared by `dsx run` (and so `dsx sweep`) and `dsx launch`: the same flags mean the same thing in both.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dsx.host import probe_gpus
from dsx.launcher import Nodes
from dsx.processes import capture
from dsx.run.refused import RunRefused


@dataclass
class NodeRequest:
    """The multi-node flags as given (dsx.cli.options.node_options)."""

    hostfile: str | None = None
    """Run over the nodes of a DeepSpeed hostfile (then --gpus is the runner's --num_gpus: ranks per node)."""
    launcher: str = "pdsh"
    """DeepSpeed's multi-node launcher: pdsh | openmpi | slurm | no-ssh (one runner per node, all on this machine)."""
    include: str | None = None
    exclude: str | None = None
    num_nodes: int | None = None
    master_addr: str | None = None
    """Default: 127.0.0.1 on one node, else the first selected host."""
    master_port: int | None = None
    """Default: a port free on this machine."""
    ssh_port: int | None = None


NODE_KEYS = tuple(f.name for f in fields(NodeRequest))


@dataclass
class Placement:
    """The world size of a request and, for a hostfile, its rank layout (dsx.hostfile.Layout)."""

    world_size: int
    layout: Any = None
    notes: list[str] | None = None


def place(nodes: NodeRequest, gpus: int | None, device: str, visible: int) -> Placement:
    """How many ranks, and where: the hostfile's selection, else --gpus (default: every visible GPU, or one CPU
    rank). RunRefused for node flags without a hostfile, more GPUs than are visible, or a bad hostfile."""
    if not nodes.hostfile:
        given = [flag for flag, value in (("--include", nodes.include), ("--exclude", nodes.exclude),
                                          ("--num-nodes", nodes.num_nodes), ("--ssh-port", nodes.ssh_port),
                                          ("--launcher", nodes.launcher != "pdsh")) if value]
        if given:
            raise RunRefused(f"{', '.join(given)} need(s) --hostfile")
    notes: list[str] = []
    if nodes.hostfile:
        layout = resolve_nodes(nodes.hostfile, launcher=nodes.launcher, include=nodes.include,
                               exclude=nodes.exclude, num_nodes=nodes.num_nodes, gpus=gpus)
        if device == "cuda" and max(len(slots) for slots in layout.selection.values()) > visible:
            notes.append(f"this machine has {visible} GPU(s); the hostfile gives a node more slots than that")
        return Placement(world_size=layout.world_size, layout=layout, notes=notes)
    if device == "cuda":
        world = gpus if gpus is not None else visible
        if world > visible:
            raise RunRefused(f"--gpus {world} but only {visible} GPU(s) are visible")
    else:
        world = gpus if gpus is not None else 1
    if world < 1:
        raise RunRefused(f"--gpus must be at least 1, got {world}")
    return Placement(world_size=world, notes=notes)


def is_this_machine(host: str) -> bool:
    """Whether a hostfile name is this machine: a loopback address, one of its addresses, or its host name."""
    import ipaddress
    import socket

    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    import psutil

    return any(a.address.split("%")[0] == str(address) for addrs in psutil.net_if_addrs().values() for a in addrs)


def resolve_nodes(hostfile: str, *, launcher: str = "pdsh", include: str | None = None, exclude: str | None = None,
                  num_nodes: int | None = None, gpus: int | None = None):
    """The hostfile's rank layout after --include/--exclude/--num-nodes/--gpus, checked; RunRefused otherwise."""
    import shutil

    from dsx.hostfile import HostfileError, Layout, read_hostfile, select
    from dsx.launcher import LAUNCHERS

    if launcher not in LAUNCHERS:
        raise RunRefused(f"unknown --launcher {launcher!r} (known: {', '.join(LAUNCHERS)})")
    try:
        hosts = read_hostfile(hostfile)
        layout = Layout.from_selection(select(hosts, include, exclude, num_nodes, gpus))
    except HostfileError as exc:
        raise RunRefused(str(exc)) from None
    if launcher == "no-ssh":
        remote = [host for host in layout.selection if not is_this_machine(host)]
        if remote:
            raise RunRefused(f"--launcher no-ssh starts every node's launcher from this machine, but "
                             f"{', '.join(remote)} is not this machine: use --launcher pdsh (or openmpi/slurm), or "
                             "run DeepSpeed's runner with --no_ssh --node_rank N on each node yourself")
    else:
        tool = {"pdsh": "pdsh", "openmpi": "mpirun", "slurm": "srun"}[launcher]
        if not shutil.which(tool):
            raise RunRefused(f"--launcher {launcher} needs {tool} on PATH"
                             + (" (Debian/Ubuntu: apt-get install pdsh)" if tool == "pdsh" else ""))
    return layout


def check_ssh(layout: Any, env: dict[str, str], ssh_port: int | None) -> None:
    """Every node answers `ssh NODE true` with pdsh's options, or RunRefused naming the first that does not: fails
    in seconds where a launch would hang or die with a message about some other host."""
    from dsx.launcher import ssh_check_argv

    for host in layout.selection:
        code, output = capture(ssh_check_argv(host, env, ssh_port), timeout_s=20)
        if code != 0:
            detail = " ".join(output.split())[-300:] or "no answer within 20 s"
            raise RunRefused(f"host {host} is not reachable over ssh (ssh {host} true: {detail}); DeepSpeed's "
                             "runner needs passwordless ssh to every node (PDSH_SSH_ARGS_APPEND, --ssh-port)")


def launch_nodes(nodes: NodeRequest, placement: Placement, gpus: int | None, env: dict[str, str], env_file: str,
                 check: bool = True) -> Nodes | None:
    """dsx.launcher.Nodes for build_launch (None on one machine); checks every node over ssh first (pdsh,
    openmpi) unless check=False (--dry-run)."""
    if placement.layout is None:
        return None
    if nodes.launcher in ("pdsh", "openmpi") and check:
        check_ssh(placement.layout, env, nodes.ssh_port)
    return Nodes(hostfile=str(Path(nodes.hostfile).resolve()), layout=placement.layout, launcher=nodes.launcher,
                 include=nodes.include, exclude=nodes.exclude, num_nodes=nodes.num_nodes, num_gpus=gpus,
                 ssh_port=nodes.ssh_port, env_file=env_file)


def master_addr(nodes: NodeRequest, placement: Placement) -> str:
    return nodes.master_addr or (next(iter(placement.layout.selection)) if placement.layout else "127.0.0.1")


def gpu_capabilities(device: str, env: dict[str, str]) -> tuple[list[str], list[tuple[int, int]] | None]:
    """(GPU names, compute capabilities or None) of the visible GPUs, for the launch's TORCH_CUDA_ARCH_LIST."""
    gpus = probe_gpus(env) if device == "cuda" else []
    return [name for name, _ in gpus], [cc for _, cc in gpus if cc] or None
