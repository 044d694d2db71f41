"""Outgoing HTTP for plugins: :func:`send` (and :func:`get`, :func:`post`).

Inside a component a request goes through the host's ``wasi:http``, so the
node's ``allow_http`` grant decides what it may reach (scheme, host, port and
path prefix of every request; the host follows no redirect) and the call's
``call_timeout`` cuts a request that never answers. A refused request raises
:class:`HttpError` whose message names the refusal (``HTTP-request-denied``);
the host logs what it refused and the grant.

A component reaches ``wasi:http`` only when it is built for it:
``python -m fv_plugin build app.py --kind step --network`` (or
``capabilities = ["network"]`` in a project's ``plugin.toml``, which
``fvhost plugin build`` passes on), and ``fvhost plugin package
--capabilities network`` declares it so a topology may grant it.

Outside a component (the plugin's unit tests, run by CPython) a request is
sent with :mod:`urllib.request`, with no sandbox: the same code can be
tested against a local server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

__all__ = ["Answer", "HttpError", "send", "get", "post", "DEFAULT_MAX_ANSWER"]

#: The most of an answer's body read unless a request says otherwise.
DEFAULT_MAX_ANSWER = 8 << 20

# The size of each write of a request body and each read of an answer: the
# host takes at most what `check-write` allows, 64 KiB is well under it.
_CHUNK = 64 << 10

try:  # the bindings componentize-py generates for a `--network` build
    from wit_world.imports import outgoing_handler as _handler  # type: ignore[import-not-found]
    from wit_world.imports import streams as _streams  # type: ignore[import-not-found]
    from wit_world.imports import wasi_http_types as _types  # type: ignore[import-not-found]
except ImportError:  # plain CPython, or a component built without --network
    _handler = None
    _streams = None
    _types = None


class HttpError(Exception):
    """The request could not be made or its answer not read; the message
    says why (a refusal by the sandbox reads ``HTTP-request-denied``)."""


@dataclass
class Answer:
    """What the server answered."""

    #: The status code.
    status: int
    #: Header names (lower case) and values, in the order received.
    headers: List[Tuple[str, bytes]] = field(default_factory=list)
    #: The body, up to the request's ``max_answer`` bytes.
    body: bytes = b""
    #: Whether the body was longer than ``max_answer`` (the rest was dropped).
    truncated: bool = False

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (any case), as text."""
        name = name.lower()
        for n, v in self.headers:
            if n == name:
                return v.decode("utf-8", "replace")
        return None

    def text(self) -> str:
        """The body as UTF-8 text (bad bytes replaced)."""
        return self.body.decode("utf-8", "replace")


@dataclass
class _Target:
    https: bool
    authority: str
    path_with_query: str


def _target(url: str) -> _Target:
    """Split ``url`` as ``wasi:http`` takes it; refuse what it cannot carry."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise HttpError(f"{url!r}: only http:// and https:// URLs can be requested")
    if not parts.netloc or parts.hostname is None:
        raise HttpError(f"{url!r}: the URL names no host")
    if "@" in parts.netloc:
        raise HttpError(f"{url!r}: user information in a URL is not sent; use a header")
    if parts.fragment or url.endswith("#"):
        raise HttpError(f"{url!r}: a fragment is not part of a request")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return _Target(parts.scheme == "https", parts.netloc, path)


def send(
    method: str,
    url: str,
    headers: Optional[Mapping[str, str]] = None,
    body: Optional[bytes] = None,
    max_answer: int = DEFAULT_MAX_ANSWER,
) -> Answer:
    """Send one request and read its answer (at most ``max_answer`` bytes of
    body: a longer one is cut and marked :attr:`Answer.truncated`). Any
    status is an answer; only a request that could not be made, or an
    answer that could not be read, raises :class:`HttpError`."""
    target = _target(url)
    fields: Dict[str, str] = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    if body is not None:
        body = bytes(body)
        fields["content-length"] = str(len(body))
    if max_answer < 0:
        raise HttpError(f"max_answer must be 0 or more, not {max_answer}")
    if _types is None:
        return _send_natively(method, url, fields, body, max_answer)
    return _send_through_wasi(method.upper(), target, fields, body, max_answer)


def get(url: str, headers: Optional[Mapping[str, str]] = None, max_answer: int = DEFAULT_MAX_ANSWER) -> Answer:
    """``send("GET", url, …)``."""
    return send("GET", url, headers, None, max_answer)


def post(url: str, body: bytes, headers: Optional[Mapping[str, str]] = None, max_answer: int = DEFAULT_MAX_ANSWER) -> Answer:
    """``send("POST", url, …, body)``."""
    return send("POST", url, headers, body, max_answer)


def _describe(err: object) -> str:
    """A wasi:http error code as its WIT name (``HTTP-request-denied``…)."""
    value = getattr(err, "value", err)
    name = type(value).__name__
    if name.startswith("ErrorCode_"):
        words = name[len("ErrorCode_") :]
        # ErrorCode_HttpRequestDenied -> HTTP-request-denied, as the WIT spells it.
        out = []
        for i, ch in enumerate(words):
            if ch.isupper() and i:
                out.append("-")
            out.append(ch.lower())
        text = "".join(out)
        text = text.replace("http-", "HTTP-", 1) if text.startswith("http-") else text
        text = text.replace("dns-", "DNS-", 1) if text.startswith("dns-") else text
        text = text.replace("tls-", "TLS-", 1) if text.startswith("tls-") else text
        payload = getattr(value, "value", None)
        return f"{text} ({payload})" if payload not in (None, "") else text
    return repr(value)


def _method(name: str):
    known = {
        "GET": _types.Method_Get,
        "HEAD": _types.Method_Head,
        "POST": _types.Method_Post,
        "PUT": _types.Method_Put,
        "DELETE": _types.Method_Delete,
        "CONNECT": _types.Method_Connect,
        "OPTIONS": _types.Method_Options,
        "TRACE": _types.Method_Trace,
        "PATCH": _types.Method_Patch,
    }
    return known[name]() if name in known else _types.Method_Other(name)


def _send_through_wasi(method: str, target: _Target, fields: Dict[str, str], body: Optional[bytes], max_answer: int) -> Answer:
    from componentize_py_types import Err  # type: ignore[import-not-found]

    try:
        headers = _types.Fields.from_list([(k, v.encode()) for k, v in fields.items()])
    except Err as e:
        raise HttpError(f"headers: {type(e.value).__name__}") from None
    request = _types.OutgoingRequest(headers)
    try:
        request.set_method(_method(method))
        request.set_scheme(_types.Scheme_Https() if target.https else _types.Scheme_Http())
        request.set_authority(target.authority)
        request.set_path_with_query(target.path_with_query)
    except Err:
        raise HttpError(f"the request {method} {target.authority}{target.path_with_query} is not valid") from None
    outgoing = request.body()
    try:
        pending = _handler.handle(request, None)
    except Err as e:
        raise HttpError(_describe(e.value)) from None
    if body:
        # The stream is a child of the body: it must be gone before `finish`.
        with outgoing.write() as stream:
            try:
                for start in range(0, len(body), _CHUNK):
                    stream.blocking_write_and_flush(body[start : start + _CHUNK])
            except Err as e:
                raise HttpError(f"sending the body: {type(e.value).__name__}") from None
    try:
        _types.OutgoingBody.finish(outgoing, None)
    except Err as e:
        raise HttpError(f"finishing the body: {_describe(e.value)}") from None
    with pending:
        with pending.subscribe() as ready:
            ready.block()
        outcome = pending.get()
    if outcome is None:
        raise HttpError("the host gave no response")
    # Ok(Ok(response)) or Ok(Err(code)); the outer Err only when read twice.
    if isinstance(outcome, Err):
        raise HttpError("the response was taken twice")
    inner = outcome.value
    if isinstance(inner, Err):
        raise HttpError(_describe(inner.value))
    response = inner.value
    with response:
        status = response.status()
        with response.headers() as h:
            answer_headers = list(h.entries())
        received, truncated = _read_body(response, max_answer)
    return Answer(status, answer_headers, received, truncated)


def _read_body(response, max_answer: int) -> Tuple[bytes, bool]:
    from componentize_py_types import Err  # type: ignore[import-not-found]

    incoming = response.consume()
    chunks: List[bytes] = []
    size = 0
    truncated = False
    with incoming:
        with incoming.stream() as stream:
            while True:
                try:
                    chunk = stream.blocking_read(_CHUNK)
                except Err as e:
                    if isinstance(e.value, _streams.StreamError_Closed):
                        break
                    raise HttpError("reading the answer failed") from None
                if size + len(chunk) > max_answer:
                    chunks.append(chunk[: max_answer - size])
                    truncated = True
                    break
                chunks.append(chunk)
                size += len(chunk)
    return b"".join(chunks), truncated


def _send_natively(method: str, url: str, fields: Dict[str, str], body: Optional[bytes], max_answer: int) -> Answer:
    import urllib.error
    import urllib.request

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        # The host follows no redirect; neither does the native stand-in.
        def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401
            return None

    opener = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=body, method=method.upper())
    for name, value in fields.items():
        if name != "content-length":
            request.add_header(name, value)
    try:
        response = opener.open(request)
    except urllib.error.HTTPError as e:  # a status is an answer, not an error
        response = e
    except (urllib.error.URLError, OSError) as e:
        raise HttpError(f"{method} {url}: {getattr(e, 'reason', e)}") from None
    with response:
        data = response.read(max_answer + 1)
        headers = [(k.lower(), v.encode("latin-1")) for k, v in response.headers.items()]
        return Answer(response.status, headers, data[:max_answer], len(data) > max_answer)
