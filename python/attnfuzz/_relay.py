"""The worker attnfuzz starts for attnfuzz.inprocess: copies its stdin to the Unix socket
argv[1] and the socket to its stdout, until either side closes. Standard library only, run as
a script (python _relay.py SOCKET), so it needs no PYTHONPATH."""

import os
import socket
import sys
import threading


def _pump(read, write, done):
    try:
        while True:
            b = read(1 << 16)
            if not b:
                break
            write(b)
    except OSError:
        pass
    done.set()


def main():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    done = threading.Event()
    out = sys.stdout.buffer

    def to_stdout(b):
        out.write(b)
        out.flush()

    def from_stdin(n):
        return os.read(0, n)

    threading.Thread(target=_pump, args=(from_stdin, s.sendall, done), daemon=True).start()
    threading.Thread(target=_pump, args=(s.recv, to_stdout, done), daemon=True).start()
    done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
