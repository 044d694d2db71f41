"""TCP for plugins: Python's own :mod:`socket`, under the node's
``allow_connect`` grant.

A component's Python runs on ``wasi:sockets``, so ``socket.create_connection(
("db.internal", 5432))`` — and a pure-Python client library built on
:mod:`socket` — connects through the host, which opens exactly the
host:port pairs the node grants and resolves only the names they list (a
refused connect raises ``PermissionError``; the host logs what it refused
and the grant). Every component can do this; no build flag is needed. There
is no listening and no UDP.

The one gap this module fills: CPython encodes a host name with the
``idna`` codec, which needs ``unicodedata``, absent from componentize-py's
Python, so a name given as ``str`` fails with ``LookupError: unknown
encoding: idna``. Importing ``fv_plugin`` installs :func:`install_ascii_idna`
when that codec is missing: ASCII names (every name a grant can list, and
``xn--`` punycode) work as they do natively; any other raises
``UnicodeError`` naming the host.
"""

from __future__ import annotations

import codecs
from typing import Optional, Tuple

__all__ = ["install_ascii_idna"]


def _encode(text: str, errors: str = "strict") -> Tuple[bytes, int]:
    try:
        return text.encode("ascii"), len(text)
    except UnicodeEncodeError:
        raise UnicodeError(
            f"host name {text!r} is not ASCII, and this Python has no IDNA codec: give its punycode (xn--…) form"
        ) from None


def _decode(data: bytes, errors: str = "strict") -> Tuple[str, int]:
    return bytes(data).decode("ascii", errors), len(data)


def _search(name: str) -> Optional[codecs.CodecInfo]:
    if name != "idna":
        return None
    return codecs.CodecInfo(_encode, _decode, name="idna")


def install_ascii_idna() -> bool:
    """Register an ASCII-only ``idna`` codec if this Python has none (a
    component's); return whether it did. A no-op under CPython."""
    try:
        codecs.lookup("idna")
        return False
    except LookupError:
        codecs.register(_search)
        return True
