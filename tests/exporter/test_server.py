"""The /metrics server's chunked writes: bodies arrive whole over a real socket, and scrapes do not wait
on delayed ACKs."""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
import time
from typing import Any, cast

from volcano_monitor.exporter.app import Exporter
from volcano_monitor.exporter.server import IOV_MAX, make_server, send_chunk, serve_in_background


def test_a_chunk_of_many_pieces_arrives_whole_through_a_small_send_buffer() -> None:
    """More pieces than one sendmsg takes, through a send buffer that forces partial sends."""
    pieces = [(b"%06d" % i) * (1 + i % 50) for i in range(IOV_MAX * 3 + 7)]
    pieces[5] = b""  # an empty piece (a family with no rows) is allowed
    size = sum(map(len, pieces))
    sender, receiver = socket.socketpair()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    received = bytearray()

    def read() -> None:
        while data := receiver.recv(1024):
            received.extend(data)
            time.sleep(0.0001)  # a slow reader: the sender's buffer fills

    reader = threading.Thread(target=read)
    reader.start()
    send_chunk(sender, pieces, size)
    sender.close()
    reader.join(10)
    receiver.close()
    assert bytes(received) == b"%x\r\n" % size + b"".join(pieces) + b"\r\n"


def test_plain_and_gzip_bodies_over_http_equal_the_exposition_and_come_quickly() -> None:
    exporter = Exporter(cast(Any, None))  # informers never started: the store's own rows and self-metrics
    for i in range(50):  # a small body: a scrape's time is then its waits
        exporter.store.queues.put(f"q{i}", (f'volcano_queue_info{{queue="q{i}"}} 1\n',) +
                                  ("",) * (len(exporter.store.queues.families) - 1))
    server = make_server(exporter, "127.0.0.1", 0)
    serve_in_background(server)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        times = []
        for encoding in ("identity", "gzip") * 5:  # one connection: keep-alive, as Prometheus scrapes
            started = time.perf_counter()
            connection.request("GET", "/metrics", headers={"Accept-Encoding": encoding})
            response = connection.getresponse()
            body = response.read()
            times.append(time.perf_counter() - started)
            if encoding == "gzip":
                assert response.getheader("Content-Encoding") == "gzip"
                body = gzip.decompress(body)
            assert body.startswith(b"".join(exporter.store.chunks()))  # then the self-metrics
            assert body.count(b"volcano_queue_info{") == 50 and body.endswith(b"\n")
        connection.close()
    finally:
        server.shutdown()
    # With Nagle's algorithm the last small write of each response waited for a delayed ACK: 44 ms a
    # scrape here, 4 ms without.
    assert sorted(times)[len(times) // 2] < 0.035, times  # the delayed ACK is 40 ms at least
