"""Tool handlers used by the tests (found beside the test playbooks, not imported by name)."""

from __future__ import annotations

import asyncio
import threading


def add(a: int, b: int) -> dict:
    return {"sum": a + b, "thread": threading.current_thread() is not threading.main_thread()}


async def greet(name: str, *, ctx) -> str:
    return f"{ctx.options.get('greeting', 'hello')} {name} from {ctx.playbook_id}/{ctx.tool}"


async def slow() -> None:
    await asyncio.sleep(30)  # outlasts the handler timeout in the test


def broken() -> None:
    raise RuntimeError("database is down")


def odd_result() -> object:
    return {"when": object}  # not JSON: rendered with str()


def told(n: int) -> dict:
    """A result that carries its own spoken answer (``answer_from: say``), unless n is 0."""
    return {"n": n, "say": f"The number is {n}." if n else ""}
