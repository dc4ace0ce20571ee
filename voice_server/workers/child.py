"""The worker process: one model (a *service*) served to the server over a pipe.

Native model code (llama.cpp, CTranslate2, onnxruntime) runs here, never in the server
process, so a crash in it (a segfault, an illegal instruction, an abort) ends this process only;
the server's supervisor (supervisor.py) fails the requests in flight and starts a new one.

The server starts ``python -m voice_server.workers STAGE FD``: ``FD`` is its end of a
socket pair, and the first message on it is ``(spec, threads, log_level)``. Then messages (pickled
by ``multiprocessing.connection``), server -> worker:

- ``("call", rid, method, args)``: run ``service.method(*args)`` on one of ``threads`` threads;
  answered by ``("result", rid, value)`` or ``("error", rid, kind, message)``;
- ``("stream", rid, method, args)``: ``service.method(emit, *args)`` starts a stream and returns
  at once; each ``emit(item)`` sends ``("item", rid, item)``, an exception item is sent as
  ``("error", rid, kind, message)``;
- ``("tell", method, args)``: ``service.method(*args)``, at once on the reading thread, no answer
  (cheap, thread-safe notes such as "the reader took a token" or "cancel that stream");
- ``("exit",)``: close the service and end.

The worker ignores SIGINT and SIGTERM: it ends when told, when the pipe ends, or with the
server (a parent-death signal on Linux); the supervisor kills one that does not go.

Worker -> server, first: ``("ready", info)`` once the service has loaded its model and passed
its self-test (one tiny pass), or ``("failed", message)``. A service is built from a
``ServiceSpec`` (an importable class and its keyword arguments); it has ``info() -> dict`` and
``close()``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import importlib
import logging
import os
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["ServiceSpec", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceSpec:
    """``factory``: ``"package.module:Class"``; built in the worker as ``Class(**kwargs)``.
    ``env``: variables added to the worker's environment (native libraries read some when
    loaded); ``label``: what this spec runs, for logs and health."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""

    def build(self) -> Any:
        module, _, name = self.factory.partition(":")
        return getattr(importlib.import_module(module), name)(**self.kwargs)


def _error(rid: int, exc: BaseException) -> tuple[str, int, str, str]:
    return ("error", rid, type(exc).__name__, str(exc) or type(exc).__name__)


def main(argv: list[str]) -> None:
    stage, fd = argv
    conn = Connection(int(fd))
    try:
        spec, threads, log_level = conn.recv()
    except (EOFError, OSError):
        return
    serve(conn, spec, threads, log_level, stage)


def serve(conn: Connection, spec: ServiceSpec, threads: int, log_level: int,
          stage: str = "worker") -> None:
    """Build the service, say it is ready, and answer requests until the server goes."""
    # Ctrl-C and a stop sent to the whole process group (systemd's default KillMode, `timeout`)
    # are the server's to handle: it drains its sessions on these workers, then ends them
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # Linux: die with the server, even by -9
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    logging.basicConfig(level=log_level,
                        format=f"%(asctime)s %(levelname)s {stage}-worker[{os.getpid()}] %(name)s: "
                               "%(message)s")
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            conn.send(message)

    try:
        service = spec.build()
        send(("ready", service.info()))
    except Exception as exc:  # the server reports it; the traceback is for debugging
        log.debug("the service failed to start", exc_info=True)
        send(("failed", f"{type(exc).__name__}: {exc}"))
        return

    def call(rid: int, method: Any, args: tuple[Any, ...]) -> None:
        try:
            send(("result", rid, method(*args)))
        except Exception as exc:
            send(_error(rid, exc))

    def emitter(rid: int) -> Any:
        def emit(item: Any) -> None:
            send(_error(rid, item) if isinstance(item, BaseException) else ("item", rid, item))
        return emit

    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="worker") as pool:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the server is gone
                break
            kind = message[0]
            if kind == "exit":
                break
            if kind == "tell":
                _, name, args = message
                try:
                    _method(service, name)(*args)
                except Exception:
                    log.exception("tell %s failed", name)
            elif kind == "call":
                _, rid, name, args = message
                pool.submit(call, rid, _method(service, name), args)
            elif kind == "stream":
                _, rid, name, args = message
                try:
                    _method(service, name)(emitter(rid), rid, *args)
                except Exception as exc:
                    send(_error(rid, exc))
    service.close()


def _method(service: Any, name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"{name} is not a service method")
    return getattr(service, name)
