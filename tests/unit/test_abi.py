"""Every struct that crosses the boundary has one layout on all three sides:
the C compiler's (libtamebpf), the BPF object's BTF, and Python's ctypes."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tamebpf.kernel import native
from tamebpf.kernel.abi import STRUCTS

BUILD = Path(__file__).resolve().parents[2] / "build"
BPF_OBJ = BUILD / "flows.bpf.o"
# Each boundary struct is checked against the BTF of the object that uses it.
BPF_OBJS = (BPF_OBJ, BUILD / "cap.bpf.o", BUILD / "acktrain.bpf.o")


def btf_structs(obj: Path) -> dict[str, dict[str, int | dict[str, int]]]:
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(obj)],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    structs: dict[str, dict[str, int | dict[str, int]]] = {}
    for t in json.loads(out)["types"]:
        if t.get("kind") == "STRUCT" and t.get("name") in STRUCTS:
            structs[t["name"]] = {
                "size": t["size"],
                "offsets": {m["name"]: m["bits_offset"] // 8 for m in t["members"]},
            }
    return structs


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_ctypes_matches_c_compiler(name: str) -> None:
    lib = native.load()
    cls = STRUCTS[name]
    assert lib.tb_abi_sizeof(name.encode()) == ctypes.sizeof(cls), (
        f"sizeof(struct {name}): C {lib.tb_abi_sizeof(name.encode())}, "
        f"ctypes {ctypes.sizeof(cls)}")
    for field, *_ in cls._fields_:
        c_off = lib.tb_abi_offsetof(name.encode(), field.encode())
        py_off = getattr(cls, field).offset
        assert c_off == py_off, f"{name}.{field}: C offset {c_off}, ctypes {py_off}"


@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool not installed")
@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_ctypes_matches_bpf_btf(name: str) -> None:
    btf: dict[str, dict[str, int | dict[str, int]]] = {}
    for obj in BPF_OBJS:
        assert obj.exists(), f"{obj} missing: run 'make'"
        btf.update(btf_structs(obj))
    assert name in btf, f"struct {name} not in the BTF of {', '.join(o.name for o in BPF_OBJS)}"
    cls = STRUCTS[name]
    assert btf[name]["size"] == ctypes.sizeof(cls), (
        f"sizeof(struct {name}): BTF {btf[name]['size']}, ctypes {ctypes.sizeof(cls)}")
    offsets = btf[name]["offsets"]
    assert isinstance(offsets, dict)
    assert list(offsets) == [f for f, *_ in cls._fields_], f"{name}: field order differs"
    for field, *_ in cls._fields_:
        assert offsets[field] == getattr(cls, field).offset, (
            f"{name}.{field}: BTF offset {offsets[field]}, ctypes {getattr(cls, field).offset}")


def test_no_implicit_padding() -> None:
    for name, cls in STRUCTS.items():
        end = 0
        for field, ctype, *_ in cls._fields_:
            off = getattr(cls, field).offset
            assert off == end, f"{name}: hole of {off - end} bytes before {field}"
            end = off + ctypes.sizeof(ctype)
        tail = ctypes.sizeof(cls) - end
        assert tail == 0, f"{name}: {tail} bytes of tail padding"
