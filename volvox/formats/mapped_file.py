"""Read-only memory maps of weight files, shared by the GGUF and safetensors readers."""

from __future__ import annotations

import mmap
import os

from volvox.errors import ModelNotFoundError, VolvoxError


def map_file(path: str, error: type[VolvoxError], kind: str) -> mmap.mmap | bytes:
    """Map ``path`` read-only; an empty file comes back as b"" (mmap cannot map it).

    A missing path raises ModelNotFoundError; a directory or unreadable file raises ``error``
    saying it is not a ``kind`` file.
    """
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise ModelNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {kind} file") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None


def release(buf: mmap.mmap | bytes | None) -> None:
    """Close a mapping from map_file; arrays still viewing it keep it alive until they are freed."""
    if isinstance(buf, mmap.mmap):
        try:
            buf.close()
        except BufferError:
            pass  # views still export the buffer; the mmap unmaps when the last one dies
