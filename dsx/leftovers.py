"""What a killed or finished DeepSpeed job leaves behind that breaks the next one, found and removed.

Two leftovers, both measured here (DeepSpeed 0.19.8, torch 2.13, CPU ranks):

- **Shared-memory allreduce buffers.** On the CPU accelerator every rank creates
  /dev/shm/deepspeed_allreduce_buffer_<uid>_<master addr>_<master port>_<rank> (ops/csrc/cpu/comm/shm.cpp,
  `shm_initialize`) and never unlinks it, even on a clean exit. Each is 67 MB of RAM-backed tmpfs: a test suite or
  sweep of a few hundred CPU runs fills /dev/shm and starves the machine. A later run that reuses the port would
  also open the stale buffer of a rank that is not there yet (the open loop only waits for ENOENT).
- **JIT-build locks.** torch.utils.cpp_extension takes a `lock` file (FileBaton: O_CREAT|O_EXCL, the descriptor
  held open until it is released) in the op's build folder every time a process loads a JIT op, even when
  nothing needs building. A rank killed in that window (a trial timeout, Ctrl-C) leaves the file, and every later
  load of that op waits for it forever. A lock no live process holds open is stale.

Only files whose owners are gone are removed: a buffer of a finished run (its port is known), a buffer no live
process has mapped, a lock no live process has open. dsx's own ranks also unlink their buffer when they finish
(dsx.rank.loop), so a rank that outlives its dsx (kill -9 of a sweep) and finishes leaves none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from dsx.cache import user_cache

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer"


def shm_buffers(master_addr: str, master_port: int, shm_dir: Path = SHM_DIR) -> list[Path]:
    """The allreduce buffers of the ranks of one job (the current user's), as named by DeepSpeed's shm op."""
    return sorted(shm_dir.glob(f"{SHM_PREFIX}_{os.getuid()}_{master_addr}_{master_port}_*"))


def rank_shm_buffer(env: Mapping[str, str], shm_dir: Path = SHM_DIR) -> Path | None:
    """The buffer DeepSpeed's shm op creates for the rank with this environment (shm_interface.cpp names it from
    MASTER_ADDR, MASTER_PORT and the global rank); None without a RANK."""
    if env.get("RANK") is None:
        return None
    return shm_dir / f"{SHM_PREFIX}_{os.getuid()}_{env.get('MASTER_ADDR', '')}_{env.get('MASTER_PORT', '')}_{env['RANK']}"


def _live_paths(kind: str) -> set[str] | None:
    """Paths held by live processes: open descriptors (kind "fd") or memory mappings (kind "maps").
    None when /proc cannot be read (not Linux): then nothing counts as stale."""
    proc = Path("/proc")
    if not (proc / "self" / kind).exists():
        return None
    held: set[str] = set()
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            if kind == "fd":
                for fd in (pid_dir / "fd").iterdir():
                    try:
                        held.add(os.readlink(fd))
                    except OSError:
                        continue
            else:
                for line in (pid_dir / "maps").read_text().splitlines():
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6:
                        held.add(parts[5].removesuffix(" (deleted)"))
        except OSError:  # gone meanwhile, or another user's process
            continue
    return held


def stale_shm_buffers(shm_dir: Path = SHM_DIR) -> list[Path]:
    """The current user's DeepSpeed allreduce buffers that no live process has mapped."""
    mine = sorted(shm_dir.glob(f"{SHM_PREFIX}_{os.getuid()}_*"))
    if not mine:
        return []
    mapped = _live_paths("maps")
    if mapped is None:
        return []
    return [p for p in mine if str(p) not in mapped]


def extensions_dir(env: dict[str, str] | os._Environ) -> Path:
    """Where torch JIT-builds ops for a process with this environment (torch's own default otherwise)."""
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    return user_cache(env) / "torch_extensions"


def stale_jit_locks(ext_dir: Path) -> list[Path]:
    """Build locks under ext_dir (torch puts each op in <dir>[/<py-cu tag>]/<op>/lock) that no live process holds."""
    if not ext_dir.is_dir():
        return []
    locks = sorted(set(ext_dir.glob("*/lock")) | set(ext_dir.glob("*/*/lock")))
    if not locks:
        return []
    held = _live_paths("fd")
    if held is None:
        return []
    return [p for p in locks if str(p) not in held and str(p.resolve()) not in held]


def remove(paths: list[Path]) -> list[Path]:
    """Unlink each path; those actually removed (another cleaner may have been first)."""
    removed = []
    for path in paths:
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            continue
        except OSError:
            continue
    return removed


SHM_BUFFER_BYTES = 69_206_024
"""Size of one rank's allreduce buffer, sizeof(struct allreduce_workspace) in shm.cpp (DeepSpeed 0.19.8), measured
as the file's size in /dev/shm."""


def shm_shortfall(ranks: int, shm_dir: Path = SHM_DIR) -> str | None:
    """Why `ranks` CPU ranks on this machine cannot create their allreduce buffers, or None when they can.

    When /dev/shm is too small a rank dies of SIGBUS or the job hangs, so dsx refuses up front. Buffers that no
    live process maps (killed or finished jobs of this user) are removed first.
    """
    import shutil

    try:
        free = shutil.disk_usage(shm_dir).free
    except OSError:
        return None  # no /dev/shm: DeepSpeed's shm op cannot be used here anyway
    need = ranks * SHM_BUFFER_BYTES
    if free >= need:
        return None
    remove(stale_shm_buffers(shm_dir))
    free = shutil.disk_usage(shm_dir).free
    if free >= need:
        return None
    mib = 2**20
    return (f"{shm_dir} has {free / mib:.0f} MiB free; DeepSpeed's CPU ranks need {SHM_BUFFER_BYTES / mib:.0f} MiB "
            f"each there for their shared-memory allreduce buffers ({ranks} rank(s): {need / mib:.0f} MiB). Free "
            f"space in {shm_dir} or make it larger (docker: --shm-size=1g)")
