"""Every struct that crosses the boundary has one layout on all three sides:
the C compiler's (libtamebpf), the BPF object's BTF, and Python's ctypes."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tamebpf.kernel import native
from tamebpf.kernel.abi import LIB_STRUCTS, STRUCTS

BUILD = Path(__file__).resolve().parents[3] / "build"
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


@pytest.mark.parametrize("name", sorted({**STRUCTS, **LIB_STRUCTS}))
def test_ctypes_matches_c_compiler(name: str) -> None:
    lib = native.load()
    cls = {**STRUCTS, **LIB_STRUCTS}[name]
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
    for name, cls in {**STRUCTS, **LIB_STRUCTS}.items():
        end = 0
        for field, ctype, *_ in cls._fields_:
            off = getattr(cls, field).offset
            assert off == end, f"{name}: hole of {off - end} bytes before {field}"
            end = off + ctypes.sizeof(ctype)
        tail = ctypes.sizeof(cls) - end
        assert tail == 0, f"{name}: {tail} bytes of tail padding"


def test_struct_format_decodes_a_record_as_ctypes_reads_it() -> None:
    """The one-call decoder of tb_flow (kernel/flows.py) sees every field
    where ctypes does: a record of distinct bytes, read both ways."""
    import struct

    from tamebpf.kernel.abi import TB_FLOW_FIELDS, TB_FLOW_FORMAT, TbFlow
    assert struct.calcsize(TB_FLOW_FORMAT) == ctypes.sizeof(TbFlow)
    raw = bytes((7 * k + 1) % 251 for k in range(ctypes.sizeof(TbFlow)))
    r = TbFlow.from_buffer_copy(raw)
    got = dict(zip(TB_FLOW_FIELDS, struct.unpack(TB_FLOW_FORMAT, raw), strict=True))
    for name, typ in TbFlow._fields_:
        off = getattr(TbFlow, name).offset
        want = raw[off:off + ctypes.sizeof(typ)] if hasattr(typ, "_length_") \
            else getattr(r, name)
        assert got[name] == want, name


def test_flow_rows_are_in_the_json_order_and_make_a_flow() -> None:
    """flows --json writes flow_row's tuples under FLOW_JSON_ORDER: the
    promised keys first, and the same values a Flow holds."""
    from tamebpf.common.records import FLOW_JSON_KEYS, FLOW_JSON_ORDER, Flow
    from tamebpf.kernel.abi import TbFlow
    from tamebpf.kernel.flows import flow_from_record, flow_row
    r = TbFlow()
    r.cookie, r.family, r.state, r.srtt_us, r.data_segs_out, r.total_retrans = 9, 2, 1, 50, 10, 1
    r.saddr[:4], r.daddr[:4] = [10, 0, 0, 1], [10, 0, 0, 2]
    values = dict(zip(FLOW_JSON_ORDER, flow_row(bytes(r), 0, None, 0), strict=True))
    assert FLOW_JSON_ORDER[:len(FLOW_JSON_KEYS)] == FLOW_JSON_KEYS
    assert tuple(f.name for f in dataclasses.fields(Flow)) == FLOW_JSON_ORDER
    assert values == vars(flow_from_record(r, None, 0))
    assert values["remote_addr"] == "10.0.0.2" and values["loss_rate"] == 0.1


@pytest.mark.parametrize("text", ["::1", "::102:304", "fd00::1", "2001:db8::ff00:42:8329",
                                  "1::", "fe80::1:2:3:4"])
def test_ipv6_addresses_read_as_ipaddress_writes_them(text: str) -> None:
    import ipaddress

    from tamebpf.kernel.flows import _addr
    assert _addr(10, ipaddress.IPv6Address(text).packed) == ("ipv6", text)
    assert _addr(10, ipaddress.IPv6Address("::ffff:10.1.2.3").packed) == ("ipv4", "10.1.2.3")
