"""The machine checks name what is missing and how to fix it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tamebpf.cgroups import CgroupNames, cgroup2_mount, resolve
from tamebpf.errors import TamebpfError, UsageError
from tamebpf.kernel import preflight

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


def test_too_old_a_kernel_is_named(tmp_path: Path) -> None:
    btf = write(tmp_path, "btf", "")
    with pytest.raises(TamebpfError) as err:
        preflight.check("flows", euid=0, btf_path=btf, release="5.10.0-28-amd64")
    assert "Linux 5.10 is too old" in str(err.value) and "5.12" in str(err.value)
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root="/x/unified"))
    assert preflight.check("flows", euid=0, btf_path=btf, mounts_path=mounts,
                           release="5.12.1") == "/x/unified"


@pytest.mark.parametrize(("release", "want"), [
    ("6.18.0-1-amd64", (6, 18)), ("5.12", (5, 12)), ("6.1rc3", (6, 1)), ("junk", (0, 0))])
def test_kernel_version_reads_major_and_minor(release: str, want: tuple[int, int]) -> None:
    assert preflight.kernel_version(release) == want


def test_no_cgroup2_says_how_to_mount(tmp_path: Path) -> None:
    btf = write(tmp_path, "btf", "")
    mounts = write(tmp_path, "mounts", MOUNTS_V1_ONLY)
    with pytest.raises(TamebpfError) as err:
        preflight.check("flows", euid=0, btf_path=btf, mounts_path=mounts)
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
    btf = write(tmp_path, "btf", "")
    mounts = write(tmp_path, "mounts", MOUNTS_V2.format(root=str(tmp_path)))
    base = caps_mask(preflight.CAP_BPF, preflight.CAP_PERFMON, preflight.CAP_NET_ADMIN)
    assert preflight.check("flows", euid=1000, btf_path=btf, mounts_path=mounts,
                           caps=base) == str(tmp_path)
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
