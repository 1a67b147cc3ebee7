"""One open libtamebpf handle (tb_NAME_open ... tb_NAME_close).

AckTrain, SynRto and FlowReader each hold one. Opening, the error when the
library refuses, closing at most once and the context manager are written
here once; the subclasses add what they read.
"""

from __future__ import annotations

import ctypes
from typing import Any, Self

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel import native


class NativeHandle:
    """A handle of the C library, closed by `close()` or leaving a `with`.

    Subclasses name their tb_NAME_open and tb_NAME_close, say what using
    the handle after closing is (`_closed_text`), and call `_open` once."""

    _open_fn: str
    _close_fn: str
    _closed_text: str

    def __init__(self) -> None:
        self._lib = native.load()
        self._handle: ctypes.c_void_p | None = None

    def _open(self, *args: Any) -> None:
        """tb_NAME_open(&handle, *args); a refusal raises with the library's
        reason."""
        handle = ctypes.c_void_p()
        rc = getattr(self._lib, self._open_fn)(ctypes.byref(handle), *args)
        if rc:
            raise TamebpfError(native.last_error(self._lib), native.errno_hint(-rc))
        self._handle = handle

    def _live(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise TamebpfError(self._closed_text)
        return self._handle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            getattr(self._lib, self._close_fn)(self._handle)
            self._handle = None
