"""Native model code (llama.cpp, CTranslate2, onnxruntime) in supervised worker processes:
a crash costs the requests in flight, never the server (child.py: the worker; supervisor.py:
the server's side)."""

from .child import ServiceSpec
from .supervisor import (
    RestartPolicy,
    SupervisedWorker,
    WorkerCallFailed,
    WorkerCrashed,
    WorkerError,
    WorkerStartFailed,
    WorkerState,
    WorkerStream,
    WorkerUnavailable,
)

__all__ = [
    "RestartPolicy",
    "ServiceSpec",
    "SupervisedWorker",
    "WorkerCallFailed",
    "WorkerCrashed",
    "WorkerError",
    "WorkerStartFailed",
    "WorkerState",
    "WorkerStream",
    "WorkerUnavailable",
]
