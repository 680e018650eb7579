"""HTTP endpoints: /metrics (gzip when asked), /healthz, /readyz."""

from __future__ import annotations

import logging
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from volcano_monitor.exporter.app import Exporter

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers per sendmsg


def send_chunk(sock: socket.socket, pieces: list[bytes], size: int) -> None:
    """One HTTP chunk made of `pieces` (`size` bytes in all), handed to the kernel as they are.

    Why: joining them into one chunk with its framing (`b"%x\\r\\n%s\\r\\n" % (size, b"".join(pieces))`)
    copied the ~115 MB body of 100k pods twice more in Python; `sendmsg` gathers the pieces in the
    kernel's one copy. (Pieces of a few hundred bytes each are slower this way than joined: the body's
    pieces are joined ~230 KB batches, see `ExporterStore.chunks`.)"""
    buffers: list[bytes | memoryview] = [b"%x\r\n" % size, *pieces, b"\r\n"]
    total = size + len(buffers[0]) + 2
    sent = sock.sendmsg(buffers[:IOV_MAX])
    while sent != total:  # more pieces than one call takes, or a partial send: go on from where it stopped
        total -= sent
        done = 0
        while done < len(buffers) and sent >= len(buffers[done]):
            sent -= len(buffers[done])
            done += 1
        del buffers[:done]
        if sent:
            buffers[0] = memoryview(buffers[0])[sent:]
        sent = sock.sendmsg(buffers[:IOV_MAX])


def make_server(exporter: Exporter, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # A response ends in small writes (the last chunk, the terminator): with Nagle's algorithm they
        # wait for the client's delayed ACK, ~40 ms on Linux, which was most of a small scrape's time.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._stream_metrics("gzip" in self.headers.get("Accept-Encoding", ""))
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                waiting = exporter.not_synced()
                if waiting:
                    self._send(503, ("not synced: " + ", ".join(waiting) + "\n").encode())
                else:
                    self._send(200, b"ok\n")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _stream_metrics(self, compress: bool) -> None:
            """Chunked transfer: the body (~100 MB at 100k pods) is never assembled in memory. Gzip comes
            as a sequence of members, most of them cached since the last scrape (exporter/rows.py)."""
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Transfer-Encoding", "chunked")
            if compress:
                self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            pending: list[bytes] = []
            size = 0
            for data in exporter.scrape_gzip_chunks() if compress else exporter.scrape_chunks():
                pending.append(data)  # gzip members are small: send them in ~64 KB HTTP chunks
                size += len(data)
                if size >= 65536:
                    send_chunk(self.connection, pending, size)
                    pending, size = [], 0
            if size:
                send_chunk(self.connection, pending, size)
            self.wfile.write(b"0\r\n\r\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                  encoding: str | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return thread
