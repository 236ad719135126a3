"""A TCP proxy that adds a network's latency and a per-connection bandwidth cap.

    python -m benchmarks.latency_proxy --target 127.0.0.1:9000 --port 9100 --latency-ms 50 --mb-per-s 100

Put in front of a local object store (moto's S3, the GCS emulator), it turns
answers that take microseconds into what a TPU host sees from a bucket:

    client --(held latency/2)--> proxy --> store
    client <--(held latency/2, paced at mb-per-s per connection)-- proxy <-- store

Bytes are held, not the connection: a chunk is forwarded `latency / 2` after
it arrived, each way, so every request-response exchange costs `latency`
more while many requests on many connections overlap, as on a real network
(kernel netem does the same; it is not available here). Answers are paced
per connection: a chunk leaves no earlier than the previous one plus its
size over the cap. Runs in a process of its own (`LatencyProxy`), so its
event loop never takes the measured process's GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from types import TracebackType

CHUNK = 64 << 10


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold_s: float, bytes_per_s: float) -> None:
  """Forwards reader -> writer, each chunk `hold_s` after it arrived, paced at bytes_per_s (0: no cap).
  Ends at the reader's end or when either side goes away."""
  queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
  loop = asyncio.get_running_loop()

  async def receive() -> None:
    leaves = 0.0
    data = b"-"
    while data:
      try:
        data = await reader.read(CHUNK)
      except (ConnectionError, OSError):  # the sender went away: forward what came, then end
        data = b""
      leaves = max(leaves, loop.time() + hold_s) + (len(data) / bytes_per_s if bytes_per_s else 0.0)
      await queue.put((leaves, data))

  receiving = asyncio.ensure_future(receive())
  try:
    while True:
      leaves, data = await queue.get()
      delay = leaves - loop.time()
      if delay > 0:
        await asyncio.sleep(delay)
      if not data:
        if writer.can_write_eof():
          writer.write_eof()
        break
      writer.write(data)
      await writer.drain()
  except (ConnectionError, OSError):  # the receiver went away
    pass
  finally:
    receiving.cancel()


async def _serve(port: int, target_host: str, target_port: int, latency_s: float, bytes_per_s: float) -> None:
  async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    try:
      server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
    except OSError:
      client_writer.close()
      return
    try:
      await asyncio.gather(
        _pump(client_reader, server_writer, latency_s / 2, 0.0),
        _pump(server_reader, client_writer, latency_s / 2, bytes_per_s),
      )
    finally:
      for writer in (client_writer, server_writer):
        writer.close()

  server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
  async with server:
    await server.serve_forever()


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class LatencyProxy:
  """The proxy in a subprocess, for `with`: `endpoint` replaces the store's.

  >>> with LatencyProxy("http://127.0.0.1:9000", latency_s=0.05) as proxy:  # doctest: +SKIP
  ...   os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
  """

  def __init__(self, target: str, latency_s: float, mb_per_s: float = 100.0) -> None:
    host_port = target.split("://", 1)[-1].rstrip("/")
    self.target_host, _, port = host_port.partition(":")
    self.target_port = int(port)
    self.latency_s, self.mb_per_s = latency_s, mb_per_s
    self.port = free_port()
    self.process: subprocess.Popen[bytes] | None = None

  @property
  def endpoint(self) -> str:
    return f"http://127.0.0.1:{self.port}"

  def __enter__(self) -> LatencyProxy:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    self.process = subprocess.Popen(
      cwd=root,
      args=[
        sys.executable,
        "-m",
        "benchmarks.latency_proxy",
        "--target",
        f"{self.target_host}:{self.target_port}",
        "--port",
        str(self.port),
        "--latency-ms",
        str(self.latency_s * 1e3),
        "--mb-per-s",
        str(self.mb_per_s),
      ],
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
      with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", self.port)) == 0:
          return self
      time.sleep(0.05)
    self.__exit__(None, None, None)
    raise RuntimeError(f"latency proxy did not start on port {self.port}")

  def __exit__(
    self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
  ) -> None:
    if self.process is not None:
      self.process.kill()
      self.process.wait()
      self.process = None


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--target", required=True, help="host:port of the store")
  parser.add_argument("--port", type=int, required=True)
  parser.add_argument("--latency-ms", type=float, default=50.0, help="added to every request-response exchange")
  parser.add_argument("--mb-per-s", type=float, default=100.0, help="bandwidth cap per connection (0: none)")
  args = parser.parse_args()
  host, _, port = args.target.partition(":")
  asyncio.run(_serve(args.port, host, int(port), args.latency_ms / 1e3, args.mb_per_s * 1e6))


if __name__ == "__main__":
  main()
