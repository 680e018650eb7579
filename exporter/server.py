"""HTTP endpoints: /metrics (gzip when asked), /healthz, /readyz."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from volcano_monitor.exporter.app import Exporter

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def make_server(exporter: Exporter, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
                pending.append(data)  # members are small: send them in ~64 KB HTTP chunks
                size += len(data)
                if size >= 65536:
                    self.wfile.write(b"%x\r\n%s\r\n" % (size, b"".join(pending)))
                    pending, size = [], 0
            if size:
                self.wfile.write(b"%x\r\n%s\r\n" % (size, b"".join(pending)))
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
