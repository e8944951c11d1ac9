"""dsx.hostfile: hostfile parsing, --include/--exclude/--num_nodes/--num_gpus and rank layout, checked against
DeepSpeed 0.19.8's own runner functions where DeepSpeed accepts the input, and refused with dsx's messages where it
does not (or silently accepts something it should not)."""

from __future__ import annotations

import random
import shlex
import subprocess
import sys
from collections import OrderedDict
from types import SimpleNamespace

import pytest

from conftest import ROOT
from dsx.hostfile import (HostfileError, Layout, RankPlacement, deepspeed_env_text, encode_world_info,
                          parse_hostfile, read_hostfile, select)

HOSTFILES = ROOT / "hostfiles"
HOSTS = {"node1": 4, "node2": 2, "node3": 2}


def raised(error_type: type[Exception], function, *args, **kwargs) -> str:
    with pytest.raises(error_type) as caught:
        function(*args, **kwargs)
    return str(caught.value)


@pytest.fixture(scope="module")
def deepspeed_runner():
    from deepspeed.launcher import runner

    return runner


def deepspeed_select(runner, hosts: dict[str, int], include: str = "", exclude: str = "", num_nodes: int = -1,
                     num_gpus: int = -1) -> dict[str, list[int]]:
    """runner.main()'s resource steps, in its order, without the ssh and accelerator ones."""
    if num_nodes >= 0 or num_gpus >= 0:  # copied from runner.main()
        if include != "" or exclude != "":
            raise ValueError("Cannot specify num_nodes/gpus with include/exclude")
    active = runner.parse_inclusion_exclusion(OrderedDict(hosts), include, exclude)
    return dict(runner.apply_num_nodes_and_gpus(active, num_nodes, num_gpus))


def dsx_select(include: str = "", exclude: str = "", num_nodes: int = -1, num_gpus: int = -1) -> dict[str, list[int]]:
    """select() called with DeepSpeed's "not given" defaults mapped to None."""
    return select(HOSTS, include, exclude, None if num_nodes == -1 else num_nodes, None if num_gpus == -1 else num_gpus)


# --- parse_hostfile -------------------------------------------------------------------------------------------------


def test_parse_keeps_hosts_in_file_order():
    assert list(parse_hostfile("b slots=1\na slots=2\nc slots=3\n")) == ["b", "a", "c"]


def test_parse_reads_slot_counts():
    assert parse_hostfile("node1 slots=8\nnode2 slots=4\n") == {"node1": 8, "node2": 4}


def test_parse_skips_comments_and_blank_lines():
    assert parse_hostfile("# header\n\n   \n  # indented comment\nnode1 slots=2\n\n") == {"node1": 2}


def test_parse_drops_trailing_comments():
    assert parse_hostfile("node1 slots=2 # the master\nnode2 slots=2#no space\n") == {"node1": 2, "node2": 2}


def test_parse_accepts_tabs_and_crlf_line_ends():
    assert parse_hostfile("node1\tslots=2\r\nnode2  slots=1\r\n") == {"node1": 2, "node2": 1}


@pytest.mark.parametrize("host", ["localhost", "node-1", "node_01", "gpu01.cluster.example.com", "NODE1", "10.0.0.1",
                                  "127.0.0.2", "::1", "fe80::1", "2001:db8::ff00:42:8329"])
def test_parse_accepts_dns_names_and_ip_addresses(host):
    assert parse_hostfile(f"{host} slots=1") == {host: 1}


@pytest.mark.parametrize("host", ["$(reboot)", "`id`", "a;b", "a&&b", "a|b", "a>b", "'node1'", '"node1"', "$HOST",
                                  "-oProxyCommand=id", "-node1", "node1-", "a..b", ".node1", "node[1-3]", "node*",
                                  "a,b", "user@node1", "node1:22", "[::1]", "fe80::1%eth0", "10.0.0.300", "1.2.3",
                                  "_node", "nöde", "a\\b", "a" * 64 + ".example"])
def test_parse_refuses_host_names_that_are_not_plain_names_or_addresses(host):
    assert raised(HostfileError, parse_hostfile, f"ok slots=1\n{host} slots=1\n", "hosts") == (
        f"hosts:2: invalid host name {host!r}: expected a DNS name (letters, digits, '-', '_' and '.'), "
        f"an IPv4 or an IPv6 address")


@pytest.mark.parametrize("text, message", [
    ("", "h.txt: no hosts (the file is empty or has only comments and blank lines); "
         "expected lines like 'worker-0 slots=8'"),
    ("# only a comment\n\n", "h.txt: no hosts (the file is empty or has only comments and blank lines); "
                             "expected lines like 'worker-0 slots=8'"),
    ("node1 slots=2\nnode2 slots=2\nnode1 slots=4\n", "h.txt:3: duplicate host 'node1' (first listed on line 1)"),
    ("node1 slots=2\nNODE1 slots=2\n", "h.txt:2: duplicate host 'NODE1' (same host as 'node1' on line 1)"),
    ("::1 slots=1\n0:0::1 slots=1\n", "h.txt:2: duplicate host '0:0::1' (same host as '::1' on line 1)"),
    ("node1\n", "h.txt:1: host 'node1' has no 'slots=N' (expected 'HOST slots=N')"),
    ("node1 # slots=2\n", "h.txt:1: host 'node1' has no 'slots=N' (expected 'HOST slots=N')"),
    ("node1 4\n", "h.txt:1: expected 'slots=N' after host 'node1', got '4'"),
    ("node1 slots = 4\n", "h.txt:1: expected 'slots=N' after host 'node1', got 'slots'"),
    ("node1 max_slots=4\n", "h.txt:1: expected 'slots=N' after host 'node1', got 'max_slots=4'"),
    ("slots=4\n", "h.txt:1: missing host name before 'slots=4' (expected 'HOST slots=N')"),
    ("node1 slots=0\n", "h.txt:1: slots must be a positive integer, got 'slots=0'"),
    ("node1 slots=-1\n", "h.txt:1: slots must be a positive integer, got 'slots=-1'"),
    ("node1 slots=\n", "h.txt:1: slots must be a positive integer, got 'slots='"),
    ("node1 slots=four\n", "h.txt:1: slots must be a positive integer, got 'slots=four'"),
    ("node1 slots=4abc\n", "h.txt:1: slots must be a positive integer, got 'slots=4abc'"),
    ("node1 slots=2.5\n", "h.txt:1: slots must be a positive integer, got 'slots=2.5'"),
    ("node1 slots=٣\n", "h.txt:1: slots must be a positive integer, got 'slots=٣'"),
    ("node1 slots=4 max_slots=8\n",
     "h.txt:1: unexpected text after 'slots=4': 'max_slots=8' (one 'HOST slots=N' per line)"),
    ("node1 slots=4 node2 slots=4\n",
     "h.txt:1: unexpected text after 'slots=4': 'node2 slots=4' (one 'HOST slots=N' per line)"),
])
def test_parse_errors_name_the_file_and_line(text, message):
    assert raised(HostfileError, parse_hostfile, text, "h.txt") == message


def test_parse_error_line_numbers_count_comment_and_blank_lines():
    assert raised(HostfileError, parse_hostfile, "# header\n\nnode1 slots=2\r\n\r\nnode2 slots=x\n", "h") == (
        "h:5: slots must be a positive integer, got 'slots=x'")


def test_hostfile_error_is_a_value_error():
    assert issubclass(HostfileError, ValueError)


# --- read_hostfile ---------------------------------------------------------------------------------------------------


def test_read_hostfile_names_the_path_in_line_errors(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node1 slots=2\nnode2 slots=two\n")
    assert raised(HostfileError, read_hostfile, path) == f"{path}:2: slots must be a positive integer, got 'slots=two'"


def test_read_hostfile_refuses_a_missing_file(tmp_path):
    assert raised(HostfileError, read_hostfile, tmp_path / "nope") == f"hostfile not found: {tmp_path / 'nope'}"


def test_read_hostfile_refuses_a_directory(tmp_path):
    assert raised(HostfileError, read_hostfile, tmp_path) == f"hostfile is a directory, not a file: {tmp_path}"


def test_read_hostfile_refuses_non_utf8_text(tmp_path):
    path = tmp_path / "hosts"
    path.write_bytes(b"n\xf6de slots=1\n")
    assert raised(HostfileError, read_hostfile, path) == f"hostfile {path} is not UTF-8 text"


@pytest.mark.parametrize("name, hosts", [
    ("two-nodes-8gpu", {"node1": 8, "node2": 8}),
    ("loopback-2x1", {"127.0.0.1": 1, "127.0.0.2": 1}),
    ("loopback-2x2", {"127.0.0.1": 2, "127.0.0.2": 2}),
])
def test_example_hostfiles_read_as_documented(name, hosts):
    assert read_hostfile(HOSTFILES / name) == hosts


def test_example_hostfiles_start_with_a_comment_header():
    assert all((HOSTFILES / name).read_text().startswith("# DeepSpeed hostfile: ")
               for name in ("two-nodes-8gpu", "loopback-2x1", "loopback-2x2"))


@pytest.mark.deepspeed
@pytest.mark.parametrize("path", sorted(p for p in HOSTFILES.iterdir() if p.name != "README.md"), ids=lambda p: p.name)
def test_example_hostfiles_read_the_same_in_deepspeed(deepspeed_runner, path):
    assert read_hostfile(path) == deepspeed_runner.fetch_hostfile(str(path))


@pytest.mark.deepspeed
@pytest.mark.parametrize("text", [
    "node1 slots=8\nnode2 slots=8\n",
    "# header\n\n  node1\tslots=2   # trailing\r\n10.0.0.2 slots=04\n::1 slots=1\n",
    "b slots=1\na slots=16#x\n",
])
def test_parse_hostfile_equals_deepspeed_on_what_both_accept(deepspeed_runner, text):
    assert parse_hostfile(text) == dict(deepspeed_runner._parse_hostfile(text.splitlines(keepends=True)))


@pytest.mark.deepspeed
@pytest.mark.parametrize("text, deepspeed_reads", [
    ("node1 slots=4abc\n", {"node1": 4}),
    ("node1 slots=4 max_slots=8\n", {"node1": 4}),
    ("node1 slots=0\n", {"node1": 0}),
    ("node1 slots=٣\n", {"node1": 3}),
    ("$(reboot) slots=1\n", {"$(reboot)": 1}),
    ("-oProxyCommand=id slots=1\n", {"-oProxyCommand=id": 1}),
])
def test_parse_hostfile_refuses_what_deepspeed_silently_accepts(deepspeed_runner, text, deepspeed_reads):
    assert dict(deepspeed_runner._parse_hostfile(text.splitlines(keepends=True))) == deepspeed_reads
    with pytest.raises(HostfileError):
        parse_hostfile(text)


# --- select ----------------------------------------------------------------------------------------------------------


def test_select_without_filters_takes_every_slot():
    assert select(HOSTS) == {"node1": [0, 1, 2, 3], "node2": [0, 1], "node3": [0, 1]}


def test_select_treats_empty_strings_as_not_given():
    assert select(HOSTS, "", "") == select(HOSTS)


def test_select_include_keeps_hostfile_order_and_sorts_slots():
    assert select(HOSTS, include="node3:1,0@node1:2") == {"node1": [2], "node3": [0, 1]}


def test_select_include_bare_host_takes_all_its_slots():
    assert select(HOSTS, include="node2") == {"node2": [0, 1]}


def test_select_include_of_a_host_with_and_without_slots_takes_only_the_slots():
    assert select(HOSTS, include="node1@node1:1") == {"node1": [1]}  # DeepSpeed merges the two entries


def test_select_exclude_removes_slots_and_emptied_hosts():
    assert select(HOSTS, exclude="node1:0,3@node2:0,1") == {"node1": [1, 2], "node3": [0, 1]}


def test_select_exclude_bare_host_removes_it():
    assert select(HOSTS, exclude="node2") == {"node1": [0, 1, 2, 3], "node3": [0, 1]}


def test_select_num_nodes_keeps_the_first_hosts():
    assert select(HOSTS, num_nodes=2) == {"node1": [0, 1, 2, 3], "node2": [0, 1]}


def test_select_num_gpus_keeps_the_first_slots_of_each_host():
    assert select(HOSTS, num_gpus=1) == {"node1": [0], "node2": [0], "node3": [0]}


def test_select_num_gpus_is_checked_only_against_the_hosts_num_nodes_kept():
    assert select(HOSTS, num_nodes=1, num_gpus=3) == {"node1": [0, 1, 2]}


@pytest.mark.parametrize("kwargs, message", [
    (dict(include="node1", exclude="node2"), "--include and --exclude cannot be used together"),
    (dict(include="node1", num_nodes=1),
     "--num_nodes/--num_gpus cannot be combined with --include/--exclude (DeepSpeed refuses the combination)"),
    (dict(exclude="node1", num_gpus=1),
     "--num_nodes/--num_gpus cannot be combined with --include/--exclude (DeepSpeed refuses the combination)"),
    (dict(include="node9"), "--include 'node9': host 'node9' is not in the hostfile (hosts: node1, node2, node3)"),
    (dict(exclude="node1@Node2:0"),
     "--exclude 'node1@Node2:0': host 'Node2' is not in the hostfile (hosts: node1, node2, node3)"),
    (dict(include="node1:4"), "--include 'node1:4': host 'node1' has slots 0-3 (slots=4), not slot 4"),
    (dict(exclude="node2:0,2"), "--exclude 'node2:0,2': host 'node2' has slots 0-1 (slots=2), not slot 2"),
    (dict(include="node1:x"), "--include 'node1:x': slot 'x' of host 'node1' is not a non-negative integer"),
    (dict(include="node1:"), "--include 'node1:': slot '' of host 'node1' is not a non-negative integer"),
    (dict(include="node1:0,"), "--include 'node1:0,': slot '' of host 'node1' is not a non-negative integer"),
    (dict(include="node1:-1"), "--include 'node1:-1': slot '-1' of host 'node1' is not a non-negative integer"),
    (dict(include="node1: 1"), "--include 'node1: 1': slot ' 1' of host 'node1' is not a non-negative integer"),
    (dict(include="node1@@node2"),
     "--include 'node1@@node2': empty host entry (entries are separated by a single '@')"),
    (dict(exclude="node1@"), "--exclude 'node1@': empty host entry (entries are separated by a single '@')"),
    (dict(include="fe80::1"), "--include 'fe80::1': 'fe80::1' has more than one ':' "
                              "(the syntax is HOST[:SLOT[,SLOT...]], so IPv6 hosts cannot be named)"),
    (dict(exclude="node1@node2@node3"), "--exclude 'node1@node2@node3' leaves no slots to run on"),
    (dict(num_nodes=4), "--num_nodes 4 asks for more nodes than the hostfile has (3: node1, node2, node3)"),
    (dict(num_nodes=0), "--num_nodes must be a positive integer, got 0"),
    (dict(num_gpus=3), "--num_gpus 3 asks for more slots than host 'node2' has (slots=2)"),
    (dict(num_gpus=-1), "--num_gpus must be a positive integer, got -1"),
])
def test_select_errors(kwargs, message):
    assert raised(HostfileError, select, HOSTS, **kwargs) == message


def test_select_error_lists_at_most_eight_hosts():
    many = {f"node{i}": 1 for i in range(20)}
    assert raised(HostfileError, select, many, include="gpu0") == (
        "--include 'gpu0': host 'gpu0' is not in the hostfile "
        "(hosts: node0, node1, node2, node3, node4, node5, node6, node7, ... (20 hosts))")


CASES_BOTH_ACCEPT = [
    dict(),
    dict(include="node1"),
    dict(include="node2:1,0"),
    dict(include="node3@node1:3"),
    dict(include="node1@node1:1"),
    dict(include="node3:0@node1:2,2@node1:0"),
    dict(exclude="node2"),
    dict(exclude="node1:0,3@node3:1"),
    dict(exclude="node2@node2:0"),
    dict(num_nodes=2),
    dict(num_nodes=3),
    dict(num_gpus=1),
    dict(num_gpus=2),
    dict(num_nodes=1, num_gpus=4),
]


@pytest.mark.deepspeed
@pytest.mark.parametrize("kwargs", CASES_BOTH_ACCEPT, ids=str)
def test_select_equals_deepspeed(deepspeed_runner, kwargs):
    assert dsx_select(**kwargs) == deepspeed_select(deepspeed_runner, HOSTS, **kwargs)


@pytest.mark.deepspeed
def test_select_equals_deepspeed_on_random_filters(deepspeed_runner):
    rng = random.Random(0)

    def random_filter() -> str:
        entries = []
        for _ in range(rng.randint(1, 4)):
            entry = rng.choice(["node1", "node2", "node3", "node9"])
            if rng.random() < 0.6:
                entry += ":" + ",".join(str(rng.randint(0, 4)) for _ in range(rng.randint(1, 3)))
            entries.append(entry)
        return "@".join(entries)

    disagreements = []
    for _ in range(2000):
        flag = rng.choice(["include", "exclude"])
        kwargs = {flag: random_filter()}
        try:
            expected: object = deepspeed_select(deepspeed_runner, HOSTS, **kwargs)
        except ValueError:
            expected = ValueError
        try:
            got: object = dsx_select(**kwargs)
        except HostfileError:
            got = ValueError
        if got != expected and not (expected == {} and got is ValueError):  # dsx refuses an empty selection
            disagreements.append((kwargs, expected, got))
    assert disagreements == []


@pytest.mark.deepspeed
@pytest.mark.parametrize("kwargs", CASES_BOTH_ACCEPT, ids=str)
def test_encode_world_info_equals_deepspeed(deepspeed_runner, kwargs):
    selection = dsx_select(**kwargs)
    assert encode_world_info(selection) == deepspeed_runner.encode_world_info(OrderedDict(selection))


@pytest.mark.deepspeed
@pytest.mark.parametrize("kwargs", [
    dict(include="node1", exclude="node2"),
    dict(include="node1", num_nodes=1),
    dict(exclude="node1", num_gpus=2),
    dict(include="node9"),
    dict(exclude="node2:1@node9"),
    dict(include="node1:4"),
    dict(exclude="node3:2"),
    dict(include="node1:x"),
    dict(include="node1:"),
    dict(include="node1:-1"),
    dict(include="node1@@node2"),
    dict(include="fe80::1"),
], ids=str)
def test_select_refuses_what_deepspeed_refuses(deepspeed_runner, kwargs):
    with pytest.raises(ValueError):
        deepspeed_select(deepspeed_runner, HOSTS, **kwargs)
    with pytest.raises(HostfileError):
        dsx_select(**kwargs)


@pytest.mark.deepspeed
@pytest.mark.parametrize("kwargs, deepspeed_uses", [
    (dict(num_nodes=4), {"node1": [0, 1, 2, 3], "node2": [0, 1], "node3": [0, 1]}),
    (dict(num_nodes=0), {"node1": [0, 1, 2, 3], "node2": [0, 1], "node3": [0, 1]}),
    (dict(num_gpus=3), {"node1": [0, 1, 2], "node2": [0, 1, 2], "node3": [0, 1, 2]}),
    (dict(exclude="node1@node2@node3"), {}),
    (dict(include="node1: 1"), {"node1": [1]}),
    (dict(include="node1:+1"), {"node1": [1]}),
], ids=str)
def test_select_refuses_what_deepspeed_silently_accepts(deepspeed_runner, kwargs, deepspeed_uses):
    assert deepspeed_select(deepspeed_runner, HOSTS, **kwargs) == deepspeed_uses
    with pytest.raises(HostfileError):
        dsx_select(**kwargs)


# --- Layout ----------------------------------------------------------------------------------------------------------


def test_layout_counts_nodes_and_ranks():
    layout = Layout.from_selection({"node1": [0, 1, 2, 3], "node2": [0, 1]})
    assert (layout.num_nodes, layout.world_size) == (2, 6)


def test_layout_numbers_ranks_host_by_host():
    assert Layout.from_selection({"a": [0, 1], "b": [0, 1]}).ranks == (
        RankPlacement(0, "a", 0, 0), RankPlacement(1, "a", 1, 1), RankPlacement(2, "b", 0, 0),
        RankPlacement(3, "b", 1, 1))


def test_layout_puts_ranks_on_the_selected_slots():
    assert [p.slot for p in Layout.from_selection({"a": [1, 3]}).ranks] == [1, 3]


def test_layout_local_rank_is_rank_modulo_host_size_as_in_launch_py():
    # launch.py: local_rank = dist_rank % num_local_procs, so after a 3-slot host the 2-slot host's ranks 3 and 4
    # get LOCAL_RANK 1 and 0, and rank 3 runs on the host's second selected slot.
    assert Layout.from_selection({"a": [0, 1, 2], "b": [4, 6]}).ranks[3:] == (
        RankPlacement(3, "b", 1, 6), RankPlacement(4, "b", 0, 4))


def test_describe_shows_nodes_and_ranks():
    assert Layout.from_selection(select(read_hostfile(HOSTFILES / "loopback-2x2"))).describe() == (
        "2 nodes, world size 4 (ranks numbered host by host, in hostfile order)\n"
        "node  host       slots  ranks\n"
        "   0  127.0.0.1  0-1    0-1\n"
        "   1  127.0.0.2  0-1    2-3\n"
        "\n"
        "rank  host       local_rank  slot\n"
        "   0  127.0.0.1           0     0\n"
        "   1  127.0.0.1           1     1\n"
        "   2  127.0.0.2           0     0\n"
        "   3  127.0.0.2           1     1")


def test_describe_compacts_slot_lists():
    assert "   0  a     0,2,4-6  0-4" in Layout.from_selection({"a": [0, 2, 4, 5, 6]}).describe()


def test_describe_warns_when_local_ranks_are_out_of_slot_order():
    assert Layout.from_selection({"a": [0, 1, 2], "b": [0, 1]}).describe().splitlines()[-1] == (
        "note: LOCAL_RANK is not in slot order on b: DeepSpeed sets LOCAL_RANK = RANK % (ranks on the host), "
        "and the hosts have different slot counts")


# --- deepspeed_env_text ----------------------------------------------------------------------------------------------


def test_deepspeed_env_text_writes_key_value_lines_in_order():
    assert deepspeed_env_text({"NCCL_DEBUG": "INFO", "PYTHONPATH": "/a:/b", "EMPTY": ""}) == (
        "NCCL_DEBUG=INFO\nPYTHONPATH=/a:/b\nEMPTY=\n")


def test_deepspeed_env_text_of_no_variables_is_empty():
    assert deepspeed_env_text({}) == ""


@pytest.mark.parametrize("key", ["", "1ABC", "A-B", "A B", "A=B", " A", "NÖ"])
def test_deepspeed_env_text_refuses_keys_that_are_not_variable_names(key):
    assert raised(ValueError, deepspeed_env_text, {key: "1"}) == (
        f".deepspeed_env: {key!r} is not an environment variable name "
        f"(letters, digits and '_', not starting with a digit)")


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\n"])
def test_deepspeed_env_text_refuses_line_breaks_in_values(value):
    assert raised(ValueError, deepspeed_env_text, {"X": value}) == (
        ".deepspeed_env: the value of X contains a line break; DeepSpeed reads the file line by line")


@pytest.mark.parametrize("value, shown", [("$HOME/x", "$"), ("`id`", "`"), ('say "hi"', '"'), ("a\\b", "\\"),
                                          ("$(id)", "$")])
def test_deepspeed_env_text_refuses_what_the_remote_shell_would_interpret(value, shown):
    assert raised(ValueError, deepspeed_env_text, {"X": value}) == (
        f".deepspeed_env: the value of X contains {shown}, which the remote shell would interpret "
        f"(DeepSpeed puts the value in double quotes, unescaped)")


@pytest.mark.parametrize("value", [" a", "a ", "\ta"])
def test_deepspeed_env_text_refuses_values_deepspeed_would_strip(value):
    assert raised(ValueError, deepspeed_env_text, {"X": value}) == (
        ".deepspeed_env: the value of X has leading or trailing whitespace, which DeepSpeed strips")


@pytest.mark.deepspeed
def test_deepspeed_env_text_reaches_the_remote_shell_unchanged(deepspeed_runner):
    from deepspeed.launcher.multinode_runner import MultiNodeRunner

    env = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^docker0,lo", "MSG": "a b = c; d", "PATHS": "/a:/b",
           "EMPTY": "", "QUOTE": "it's"}
    runner = SimpleNamespace(exports={})
    for line in deepspeed_env_text(env).splitlines(keepends=True):  # runner.main()'s loop over the file
        key, val = line.split('=', maxsplit=1)
        MultiNodeRunner.add_export(runner, key, val)
    # pdsh runs "export KEY=VALUE;" in the remote shell, which assigns the one word shlex reads from VALUE
    assert {key: shlex.split(value) for key, value in runner.exports.items()} == {
        key: [value] if value else [] for key, value in env.items()}


# --- import cost -----------------------------------------------------------------------------------------------------


def test_module_imports_neither_torch_nor_deepspeed():
    probe = "import sys, dsx.hostfile; print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
