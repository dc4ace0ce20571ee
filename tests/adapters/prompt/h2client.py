"""A minimal raw HTTP/2 (h2c, prior knowledge) client to pin gRPC-JSON bytes, as the origin's
Node and Python clients send them."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events


@dataclass
class H2Response:
    headers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    trailers: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> dict[str, str]:
        """grpc-status/grpc-message from the trailers, or the headers if Trailers-Only."""
        source = self.trailers or self.headers
        return {k: v for k, v in source.items() if k.startswith("grpc-")}


async def h2_call(port: int, path: str, body: bytes, *,
                  content_type: str = "application/grpc+json",
                  extra_headers: list[tuple[str, str]] = (),
                  timeout_s: float = 10.0) -> H2Response:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding="utf-8"))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(stream_id, [(":method", "POST"), (":scheme", "http"),
                                  (":path", path), (":authority", f"127.0.0.1:{port}"),
                                  ("content-type", content_type), ("te", "trailers"),
                                  *extra_headers])
    conn.send_data(stream_id, body, end_stream=True)
    writer.write(conn.data_to_send())
    response = H2Response()
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    raise ConnectionError("server closed the connection")
                for event in conn.receive_data(chunk):
                    if isinstance(event, h2.events.ResponseReceived):
                        response.headers = dict(event.headers)
                    elif isinstance(event, h2.events.DataReceived):
                        response.data += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length,
                                                       event.stream_id)
                    elif isinstance(event, h2.events.TrailersReceived):
                        response.trailers = dict(event.headers)
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        return response
                writer.write(conn.data_to_send())
    finally:
        writer.close()
        await writer.wait_closed()


def encode_grpc_frame(message: bytes, *, compressed: bool = False) -> bytes:
    """One gRPC length-prefixed message (grpc doc/PROTOCOL-HTTP2.md)."""
    return struct.pack(">BI", 1 if compressed else 0, len(message)) + message


def decode_grpc_frame(data: bytes) -> tuple[bytes, bytes]:
    """One uncompressed message split off ``data``: (message, rest)."""
    flag, length = struct.unpack(">BI", data[:5])
    if flag != 0 or len(data) - 5 < length:
        raise ValueError(f"not one whole uncompressed message: {data[:16]!r}")
    return data[5:5 + length], data[5 + length:]
