"""The machine checks name what is missing and how to fix it."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path

import pytest

from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.kernel import features, preflight
from tamebpf.kernel.cgroups import CgroupNames, cgroup2_mount, resolve

MOUNTS_V2 = "cgroup2 {root} cgroup2 rw,relatime 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
MOUNTS_V1_ONLY = "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\nproc /proc proc rw 0 0\n"


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_not_root_says_sudo(tmp_path: Path) -> None:
    with pytest.raises(TamebpfError) as err:
        preflight.check("flows", euid=1000, caps=0)
    assert "needs root" in str(err.value) and "sudo tamebpf flows" in str(err.value)


def test_missing_btf_names_the_config(tmp_path: Path) -> None:
    with pytest.raises(TamebpfError) as err:
        preflight.check("flows", euid=0, btf_path=str(tmp_path / "nope"))
    assert "CONFIG_DEBUG_INFO_BTF" in str(err.value)


def fake_btf(tmp_path: Path, names: Iterable[str], name: str = "btf") -> str:
    """A raw BTF file with no types and these names in its string section."""
    strings = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 0, 0, len(strings))
    p = tmp_path / name
    p.write_bytes(header + strings)
    return str(p)


ALL_NAMES = [n for f in features.FEATURES for n in f.btf_names]


def has_atomics() -> bool:
    return True


def test_features_are_probed_not_the_version(tmp_path: Path) -> None:
    """A kernel that has every feature passes whatever its version says; one
    without iter/tcp is refused, naming iter/tcp (not a version)."""
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root="/x/unified"))
    btf = fake_btf(tmp_path, ALL_NAMES)
    assert preflight.check("flows", euid=0, btf_path=btf, mounts_path=mounts,
                           atomic_probe=has_atomics) == "/x/unified"
    btf = fake_btf(tmp_path, [n for n in ALL_NAMES if n != "bpf_iter__tcp"], "no-iter")
    with pytest.raises(TamebpfError) as err:
        preflight.check("flows", euid=0, btf_path=btf, mounts_path=mounts,
                        atomic_probe=has_atomics)
    text = str(err.value)
    assert "iter/tcp" in text and "5.9" in text and "too old" not in text, text
    assert "sk_storage" not in text, f"only the missing feature should be named: {text}"


def test_each_command_needs_its_own_features(tmp_path: Path) -> None:
    no_cgroup_hooks = fake_btf(tmp_path, [n for n in ALL_NAMES if "CONNECT" not in n])
    assert features.missing("flows", no_cgroup_hooks, has_atomics) == []
    lacking = features.missing("cap", no_cgroup_hooks, has_atomics)
    assert [f.name for f in lacking] == ["cgroup socket hooks (connect4/6, sock_release)"]
    full = fake_btf(tmp_path, ALL_NAMES, "full")
    assert features.missing("advise", full, lambda: False) == [features.ATOMIC_FETCH]
    assert features.missing("advise", full, lambda: None) == [], "unknown is not missing"
    assert features.missing("flows", full, lambda: False) == [], "flows loads no atomic fetch"


def test_this_kernel_has_every_feature() -> None:
    """The probes find what the tests on this machine use (6.18): a probe
    that never finds its feature would refuse every kernel."""
    for command in ("flows", "watch", "export", "advise", "cap"):
        assert features.missing(command, preflight.BTF_PATH) == [], command
    if os.geteuid() == 0:
        assert features.atomic_fetch_loads() is True


def test_btf_strings_of_a_non_btf_file_are_empty(tmp_path: Path) -> None:
    assert features.btf_strings(write(tmp_path, "x", "not btf at all, but long enough")) == b""


def test_no_cgroup2_says_how_to_mount(tmp_path: Path) -> None:
    btf = fake_btf(tmp_path, ALL_NAMES)
    mounts = write(tmp_path, "mounts", MOUNTS_V1_ONLY)
    with pytest.raises(TamebpfError) as err:
        preflight.check("flows", euid=0, btf_path=btf, mounts_path=mounts,
                        atomic_probe=has_atomics)
    assert "cgroup v2 is not mounted" in str(err.value) and "mount -t cgroup2" in str(err.value)


def test_cgroup2_found_from_mounts(tmp_path: Path) -> None:
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root="/x/unified"))
    assert cgroup2_mount(mounts) == "/x/unified"


def test_resolve_relative_and_absolute(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root=tmp_path))
    cg = resolve("a/b", mounts_path=mounts)
    assert (cg.rel, cg.level) == ("/a/b", 2)
    assert cg.id == os.stat(tmp_path / "a" / "b").st_ino
    assert resolve(str(tmp_path), mounts_path=mounts).level == 0


def test_resolve_rejects_missing_and_v1(tmp_path: Path) -> None:
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root=tmp_path))
    with pytest.raises(UsageError, match="no such cgroup"):
        resolve("missing", mounts_path=mounts)
    with pytest.raises(UsageError, match="cgroup v1"):
        resolve("/sys/fs/cgroup/cpu", mounts_path=mounts)


def test_cgroup_names_walks_again_for_new_ids(tmp_path: Path) -> None:
    names = CgroupNames(str(tmp_path))
    assert names.name(os.stat(tmp_path).st_ino) == "/"
    (tmp_path / "late").mkdir()
    assert names.name(os.stat(tmp_path / "late").st_ino) == "/late"
    assert names.name(0) is None


def caps_mask(*bits: int) -> int:
    return sum(1 << b for b in bits)


def test_capabilities_stand_in_for_root(tmp_path: Path) -> None:
    btf = fake_btf(tmp_path, ALL_NAMES)
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root=str(tmp_path)))
    base = caps_mask(preflight.CAP_BPF, preflight.CAP_PERFMON, preflight.CAP_NET_ADMIN)
    assert preflight.check("flows", euid=1000, btf_path=btf, mounts_path=mounts,
                           caps=base, atomic_probe=has_atomics) == str(tmp_path)
    with pytest.raises(TamebpfError, match="missing CAP_SYS_ADMIN"):
        preflight.check("cap", euid=1000, btf_path=btf, mounts_path=mounts, caps=base,
                        needs_netns=True)


def test_missing_capabilities_are_named() -> None:
    only_bpf = caps_mask(preflight.CAP_BPF)
    with pytest.raises(TamebpfError) as err:
        preflight.check("export", euid=1000, caps=only_bpf)
    text = str(err.value)
    assert "missing CAP_PERFMON, CAP_NET_ADMIN" in text and "sudo tamebpf export" in text, text


def test_effective_caps_read_from_status(tmp_path: Path) -> None:
    status = write(tmp_path, "status", "Name:\tx\nCapInh:\t0\nCapEff:\t000000c000001000\n")
    assert preflight.effective_caps(status) == caps_mask(12, 38, 39)
