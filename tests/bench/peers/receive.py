"""The peers of tests/bench/receive.sh.

serve PORT COUNT PATTERN: accepts connections one after another and sends
each COUNT items (lines of 30 bytes for "*l", else PATTERN bytes each),
then closes it.
read PORT COUNT PATTERN: Python's buffered reader on the same data
(readline, or read(n)), printing RECEIVE_NS like the host's side.
"""
import socket
import sys
import time


def payload(count, pattern):
    item = b"x" * 29 + b"\n" if pattern == "*l" else b"y" * int(pattern)
    return item * count


def serve(port, count, pattern):
    data = payload(count, pattern)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(8)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        try:
            conn.sendall(data)
        except OSError:
            pass
        conn.close()


def read(port, count, pattern):
    c = socket.create_connection(("127.0.0.1", port))
    f = c.makefile("rb")
    take = f.readline if pattern == "*l" else (lambda n=int(pattern): f.read(n))
    assert take()
    t0 = time.perf_counter()
    for _ in range(count - 1):
        if not take():
            raise SystemExit("read: closed early")
    ns = (time.perf_counter() - t0) * 1e9 / (count - 1)
    print("RECEIVE_NS %.1f" % ns)


if __name__ == "__main__":
    cmd, port, count, pattern = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    (serve if cmd == "serve" else read)(port, count, pattern)
