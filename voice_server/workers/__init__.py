"""Native model code (llama.cpp, CTranslate2, onnxruntime) in supervised worker processes:
a crash costs the requests in flight, never the server (child.py: the worker; supervisor.py:
the server's side)."""

from .child import ServiceSpec
from .supervisor import (
    OFFLINE_ENVIRONMENT,
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
    "OFFLINE_ENVIRONMENT",
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
