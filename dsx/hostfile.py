"""DeepSpeed hostfiles: parse, validate, and resolve the rank layout the way DeepSpeed 0.19.8's runner does.

Re-implements (does not import: CLI code must start without torch) deepspeed/launcher/runner.py `_parse_hostfile`,
`parse_inclusion_exclusion` / `parse_resource_filter`, `apply_num_nodes_and_gpus` and `encode_world_info`, and the
rank numbering of deepspeed/launcher/launch.py. tests/test_hostfile.py checks the results against those functions.

Where DeepSpeed silently accepts something that cannot be what the user meant, dsx refuses it with a HostfileError:
- a hostfile line with text after `slots=N` ("node1 slots=4abc" is 4 slots to DeepSpeed), `slots=0`, or a host
  name that is not a plain DNS name / IP address (DeepSpeed takes any non-blank token, "$(reboot)" included, and
  passes it to ssh and pdsh);
- `--num_nodes` above the number of hosts (DeepSpeed uses them all), `--num_gpus` above a host's slots (DeepSpeed
  starts ranks on GPU ids the host does not have), either one below 1 (DeepSpeed treats it as "not given");
- an `--exclude` that removes every slot (DeepSpeed fails later with an IndexError).
A missing hostfile is an error too: DeepSpeed warns and silently runs on the local GPUs only.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dsx.safe_io import UnreadableFile, check_regular, read_bounded
from dsx.units import MIB

_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"  # "_": ssh and cluster names allow it
_DNS_NAME = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: DeepSpeed's int() would also take "+1", " 1", "1_0" and "٣"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHELL_SPECIAL_IN_DOUBLE_QUOTES = set('$`"\\')
_EXPECTED_LINE = "'HOST slots=N'"
MAX_SLOTS = 1024
"""No node has more accelerators than this; a bigger number is a typo (and DeepSpeed's range() of it overflows)."""
MAX_LINE = 1024
"""Characters before a comment: a 253-character host name and its slots fit many times over."""
MAX_HOSTFILE_BYTES = 1 * MIB
"""Tens of thousands of 'HOST slots=N' lines: more is not a hostfile (and /dev/zero would never end)."""


class HostfileError(ValueError):
    """A hostfile, or an --include/--exclude/--num_nodes/--num_gpus request, DeepSpeed must not be given."""


def _host_key(host: str) -> str | None:
    """The canonical spelling of a valid host name (so 'Node1' and 'node1' are one host), None if not valid."""
    if ":" in host:
        if "%" in host:  # a scope id ("fe80::1%eth0"): not a plain address
            return None
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    if re.fullmatch(r"[0-9.]+", host):  # all-numeric labels must be an IPv4 address, not a "DNS name" like 10.0.0.300
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            return None
    if len(host) <= 253 and _DNS_NAME.fullmatch(host):
        return host.lower()
    return None


def _lines(text: str) -> list[str]:
    """Split as Python's text-mode readlines() does (\\n, \\r\\n, \\r), which is how DeepSpeed reads the file."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def parse_hostfile(text: str, source: str = "<hostfile>") -> dict[str, int]:
    """Hosts and their slot counts, in file order (which is DeepSpeed's rank order).

    One `HOST slots=N` per line; `#` starts a comment; blank lines are skipped. Every error names `source` and the
    line number, which DeepSpeed's own errors do not.
    """
    hosts: dict[str, int] = {}
    first_seen: dict[str, tuple[str, int]] = {}  # canonical key -> (spelling, line number)
    for line_number, raw_line in enumerate(_lines(text), start=1):
        where = f"{source}:{line_number}"
        content = raw_line.partition("#")[0]
        if len(content) > MAX_LINE:  # a host name is at most 253 characters: the error must not quote the rest
            raise HostfileError(f"{where}: a line of {len(content):,} characters is not {_EXPECTED_LINE}")
        tokens = content.split()
        if not tokens:
            continue
        host = tokens[0]
        if host.startswith("slots="):
            raise HostfileError(f"{where}: missing host name before {host!r} (expected {_EXPECTED_LINE})")
        key = _host_key(host)
        if key is None:
            raise HostfileError(f"{where}: invalid host name {host!r}: expected a DNS name (letters, digits, '-', "
                                f"'_' and '.'), an IPv4 or an IPv6 address")
        if len(tokens) == 1:
            raise HostfileError(f"{where}: host {host!r} has no 'slots=N' (expected {_EXPECTED_LINE})")
        slots_token = tokens[1]
        if not slots_token.startswith("slots="):
            raise HostfileError(f"{where}: expected 'slots=N' after host {host!r}, got {slots_token!r}")
        slots_value = slots_token[len("slots="):]
        if not _DIGITS.fullmatch(slots_value) or int(slots_value[:12]) == 0:
            raise HostfileError(f"{where}: slots must be a positive integer, got {slots_token!r}")
        if len(slots_value) > 6 or int(slots_value) > MAX_SLOTS:
            raise HostfileError(f"{where}: slots={slots_value[:24]}{'...' * (len(slots_value) > 24)} is more than "
                                f"{MAX_SLOTS:,}, the most one node runs (slots are the node's GPUs)")
        if len(tokens) > 2:
            extra = " ".join(tokens[2:])
            raise HostfileError(f"{where}: unexpected text after {slots_token!r}: {extra!r} "
                                f"(one {_EXPECTED_LINE} per line)")
        if key in first_seen:
            spelling, line_seen = first_seen[key]
            same = f"first listed on line {line_seen}" if spelling == host else \
                f"same host as {spelling!r} on line {line_seen}"
            raise HostfileError(f"{where}: duplicate host {host!r} ({same})")
        first_seen[key] = (host, line_number)
        hosts[host] = int(slots_value)
    if not hosts:
        raise HostfileError(f"{source}: no hosts (the file is empty or has only comments and blank lines); "
                            f"expected lines like 'worker-0 slots=8'")
    return hosts


def read_hostfile(path: str | Path) -> dict[str, int]:
    """parse_hostfile() of a file; a missing file is an error (DeepSpeed would silently run on local GPUs only)."""
    try:
        check_regular(path, "a hostfile")
    except UnreadableFile as error:
        if error.reason == "missing":
            raise HostfileError(f"hostfile not found: {path}") from None
        if Path(path).is_dir():
            raise HostfileError(f"hostfile is a directory, not a file: {path}") from None
        raise HostfileError(f"hostfile {error}") from None
    try:
        text = read_bounded(path, limit=MAX_HOSTFILE_BYTES, what="a hostfile",
                            why="a hostfile is one 'HOST slots=N' line per node").decode("utf-8")
    except UnreadableFile as error:
        raise HostfileError(f"hostfile {error}") from None
    except UnicodeDecodeError:
        raise HostfileError(f"hostfile {path} is not UTF-8 text") from None
    return parse_hostfile(text, source=str(path))


def _slot_range(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def _compact(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5": runs of consecutive numbers as ranges."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _names(hosts: Iterable[str], shown: int = 8) -> str:
    """At most `shown` host names, for error messages about hostfiles of any size."""
    names = list(hosts)
    more = f", ... ({len(names)} hosts)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _parse_filter(flag: str, spec: str, hosts: dict[str, int]) -> dict[str, list[int]]:
    """`HOST[:SLOT[,SLOT...]][@...]` -> host -> sorted unique slots ([] = whole host), as parse_node_config_list.

    Like DeepSpeed, entries for one host are merged, so "node1@node1:0" means slot 0 only, not the whole host.
    """
    requested: dict[str, list[int]] = {}
    for entry in spec.split("@"):
        if entry == "":
            raise HostfileError(f"{flag} {spec!r}: empty host entry (entries are separated by a single '@')")
        if entry.count(":") > 1:
            raise HostfileError(f"{flag} {spec!r}: {entry!r} has more than one ':' (the syntax is "
                                f"HOST[:SLOT[,SLOT...]], so IPv6 hosts cannot be named)")
        host, has_slots, slots_text = entry.partition(":")
        slots: list[int] = []
        if has_slots:
            for slot_text in slots_text.split(","):
                if not _DIGITS.fullmatch(slot_text):
                    raise HostfileError(f"{flag} {spec!r}: slot {slot_text!r} of host {host!r} is not a "
                                        f"non-negative integer")
                slots.append(int(slot_text))
        requested[host] = requested.get(host, []) + slots
    for host, slots in requested.items():
        if host not in hosts:
            raise HostfileError(f"{flag} {spec!r}: host {host!r} is not in the hostfile (hosts: {_names(hosts)})")
        for slot in slots:
            if slot >= hosts[host]:
                raise HostfileError(f"{flag} {spec!r}: host {host!r} has slots {_slot_range(hosts[host])} "
                                    f"(slots={hosts[host]}), not slot {slot}")
    return {host: sorted(set(slots)) for host, slots in requested.items()}


def select(hosts: dict[str, int], include: str | None = None, exclude: str | None = None,
           num_nodes: int | None = None, num_gpus: int | None = None) -> dict[str, list[int]]:
    """The slots DeepSpeed's runner would use: host -> slot indices, hosts in hostfile order, slots ascending.

    Same rules and order as runner.main(): --include/--exclude filter first (mutually exclusive, and neither may be
    combined with --num_nodes/--num_gpus), then --num_nodes keeps the first N hosts, then --num_gpus the first N
    slots of each. Empty strings mean "not given", as DeepSpeed's "" defaults do.
    """
    include = include or None
    exclude = exclude or None
    if include and exclude:
        raise HostfileError("--include and --exclude cannot be used together")
    if (include or exclude) and (num_nodes is not None or num_gpus is not None):
        raise HostfileError("--num_nodes/--num_gpus cannot be combined with --include/--exclude "
                            "(DeepSpeed refuses the combination)")
    selection = {host: list(range(slots)) for host, slots in hosts.items()}

    if include:
        requested = _parse_filter("--include", include, hosts)
        selection = {host: requested[host] or selection[host] for host in hosts if host in requested}
    elif exclude:
        requested = _parse_filter("--exclude", exclude, hosts)
        for host, slots in requested.items():
            selection[host] = [slot for slot in selection[host] if slots and slot not in slots]
        selection = {host: slots for host, slots in selection.items() if slots}
        if not selection:
            raise HostfileError(f"--exclude {exclude!r} leaves no slots to run on")

    if num_nodes is not None:
        if num_nodes < 1:
            raise HostfileError(f"--num_nodes must be a positive integer, got {num_nodes}")
        if num_nodes > len(selection):
            raise HostfileError(f"--num_nodes {num_nodes} asks for more nodes than the hostfile has "
                                f"({len(selection)}: {_names(selection)})")
        selection = dict(list(selection.items())[:num_nodes])
    if num_gpus is not None:
        if num_gpus < 1:
            raise HostfileError(f"--num_gpus must be a positive integer, got {num_gpus}")
        for host in selection:
            if num_gpus > hosts[host]:
                raise HostfileError(f"--num_gpus {num_gpus} asks for more slots than host {host!r} has "
                                    f"(slots={hosts[host]})")
        selection = {host: list(range(num_gpus)) for host in selection}
    return selection


def encode_world_info(selection: dict[str, list[int]]) -> str:
    """The --world_info argument DeepSpeed's runner hands launch.py (urlsafe base64 of the JSON dict)."""
    return base64.urlsafe_b64encode(json.dumps(selection).encode("utf-8")).decode("utf-8")


@dataclass(frozen=True)
class RankPlacement:
    global_rank: int
    """RANK: numbered host by host, in hostfile order."""
    host: str
    local_rank: int
    """LOCAL_RANK: launch.py sets it to RANK % (ranks on this host), not the rank's position on the host."""
    slot: int
    """The hostfile slot (GPU id) the rank runs on: CUDA_VISIBLE_DEVICES lists the host's slots, and the rank
    takes device LOCAL_RANK among them."""


@dataclass(frozen=True)
class Layout:
    selection: dict[str, list[int]]
    """host -> slots, as select() returns it."""
    ranks: tuple[RankPlacement, ...]
    """One entry per rank, by global rank."""

    @classmethod
    def from_selection(cls, selection: dict[str, list[int]]) -> Layout:
        """The ranks launch.py starts for this selection (its global_rank_mapping and LOCAL_RANK arithmetic)."""
        ranks: list[RankPlacement] = []
        for host, slots in selection.items():
            for _ in slots:
                global_rank = len(ranks)
                local_rank = global_rank % len(slots)
                ranks.append(RankPlacement(global_rank, host, local_rank, slots[local_rank]))
        return cls(dict(selection), tuple(ranks))

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def num_nodes(self) -> int:
        return len(self.selection)

    def describe(self) -> str:
        """Multi-line text for --dry-run: the nodes, then one line per rank."""
        host_width = max(len("host"), *(len(host) for host in self.selection))
        slots_width = max(len("slots"), *(len(_compact(slots)) for slots in self.selection.values()))
        lines = [f"{self.num_nodes} node{'s' * (self.num_nodes != 1)}, world size {self.world_size} "
                 f"(ranks numbered host by host, in hostfile order)",
                 f"{'node':>4}  {'host':<{host_width}}  {'slots':<{slots_width}}  ranks"]
        for node_rank, (host, slots) in enumerate(self.selection.items()):
            host_ranks = [placement.global_rank for placement in self.ranks if placement.host == host]
            lines.append(f"{node_rank:>4}  {host:<{host_width}}  {_compact(slots):<{slots_width}}  "
                         f"{_compact(host_ranks)}")
        lines.append("")
        lines.append(f"{'rank':>4}  {'host':<{host_width}}  local_rank  slot")
        for placement in self.ranks:
            lines.append(f"{placement.global_rank:>4}  {placement.host:<{host_width}}  {placement.local_rank:>10}  "
                         f"{placement.slot:>4}")
        out_of_order = [host for host, slots in self.selection.items()
                        if [p.local_rank for p in self.ranks if p.host == host] != list(range(len(slots)))]
        if out_of_order:
            lines.append(f"note: LOCAL_RANK is not in slot order on {', '.join(out_of_order)}: DeepSpeed sets "
                         f"LOCAL_RANK = RANK % (ranks on the host), and the hosts have different slot counts")
        return "\n".join(lines)


def deepspeed_env_text(env: dict[str, str]) -> str:
    """Content for a `.deepspeed_env` file: one KEY=VALUE per line, in dict order.

    What DeepSpeed 0.19.8's runner does with the file (runner.main, MultiNodeRunner.add_export): it reads
    `.deepspeed_env` (or $DS_ENV_FILE) from ~ and then from the current directory, both if both exist, and only on
    the multi-node path (more than one host, or --force_multi); a single-node launch ignores it. Each line is split
    on its first '=' (a line without one, a blank line included, crashes the runner), key and value are stripped,
    and a value with any character outside [A-Za-z0-9_@%+=:,./-] is wrapped in double quotes, unescaped. pdsh then
    runs `export KEY=VALUE;` in each host's shell; mpirun/srun get KEY=VALUE as an argument, quotes included.

    So refused (ValueError): keys that are not environment variable names, values with a newline or carriage return
    (a second line), with $ ` " or \\ (the remote shell would expand or break on them inside the quotes), or with
    leading/trailing whitespace (stripped by the runner).
    """
    lines = []
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise ValueError(f".deepspeed_env: {key!r} is not an environment variable name "
                             f"(letters, digits and '_', not starting with a digit)")
        if "\n" in value or "\r" in value:
            raise ValueError(f".deepspeed_env: the value of {key} contains a line break; DeepSpeed reads the file "
                             f"line by line")
        special = sorted(_SHELL_SPECIAL_IN_DOUBLE_QUOTES & set(value))
        if special:
            raise ValueError(f".deepspeed_env: the value of {key} contains {' '.join(special)}, which the remote "
                             f"shell would interpret (DeepSpeed puts the value in double quotes, unescaped)")
        if value != value.strip():
            raise ValueError(f".deepspeed_env: the value of {key} has leading or trailing whitespace, which "
                             f"DeepSpeed strips")
        lines.append(f"{key}={value}\n")
    return "".join(lines)
