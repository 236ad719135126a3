"""Local object stores for the remote-dataset tests: moto's S3 server and a
GCS emulator, real HTTP servers on 127.0.0.1 started (and killed) by the tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from pipeline_fixtures import free_port

SERVERS = {
  "s3": lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
  "gs": lambda port: [
    sys.executable,
    "-m",
    "gcp_storage_emulator",
    "start",
    "--host",
    "127.0.0.1",
    "--port",
    str(port),
    "--in-memory",
  ],
}


class ObjectStoreServer:
  """One emulator process; its endpoint is exported the way the clients read it."""

  def __init__(self, scheme: str) -> None:
    self.scheme = scheme
    self.port = free_port()
    self.process: subprocess.Popen | None = None
    self.start()

  @property
  def endpoint(self) -> str:
    return f"http://127.0.0.1:{self.port}"

  def environment(self) -> dict[str, str]:
    if self.scheme == "s3":
      return {
        "AWS_ENDPOINT_URL": self.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
      }
    return {"STORAGE_EMULATOR_HOST": self.endpoint}

  def start(self) -> None:
    self.process = subprocess.Popen(
      SERVERS[self.scheme](self.port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
      with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", self.port)) == 0:
          return
      time.sleep(0.05)
    raise RuntimeError(f"{self.scheme} emulator did not start on port {self.port}")

  def kill(self) -> None:
    if self.process is not None:
      self.process.kill()
      self.process.wait()
      self.process = None

  def client(self) -> Any:
    """The provider's client, pointed at this server (for setting up data, not the code under test)."""
    if self.scheme == "s3":
      return boto3.client(
        "s3",
        endpoint_url=self.endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
      )
    return storage.Client(
      project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint}
    )

  def upload(self, directory: str, bucket: str, prefix: str) -> str:
    """Copies a dataset directory to the bucket (created if need be); returns its URL."""
    files = sorted(os.listdir(directory))
    if self.scheme == "s3":
      client = self.client()
      if bucket not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=bucket)
      for name in files:
        client.upload_file(os.path.join(directory, name), bucket, f"{prefix}/{name}")
    else:
      client = self.client()
      target = client.lookup_bucket(bucket) or client.create_bucket(bucket)
      for name in files:
        target.blob(f"{prefix}/{name}").upload_from_filename(os.path.join(directory, name))
    return f"{self.scheme}://{bucket}/{prefix}"

  def put(self, url: str, data: bytes) -> None:
    """Replaces one object's bytes."""
    bucket, _, key = url.split("://", 1)[1].partition("/")
    if self.scheme == "s3":
      self.client().put_object(Bucket=bucket, Key=key, Body=data)
    else:
      self.client().bucket(bucket).blob(key).upload_from_string(data)


def servers() -> Iterator[dict[str, ObjectStoreServer]]:
  """Both emulators, their endpoints in os.environ while they run."""
  running = {scheme: ObjectStoreServer(scheme) for scheme in SERVERS}
  saved = dict(os.environ)
  for server in running.values():
    os.environ.update(server.environment())
  try:
    yield running
  finally:
    for server in running.values():
      server.kill()
    os.environ.clear()
    os.environ.update(saved)


class CorruptingProxy:
  """An HTTP proxy on 127.0.0.1 in front of a store that can damage the bodies of ranged GET responses
  (one byte flipped in the middle: `corrupt = True`), or cut every GET body short, closing the connection
  half way (`truncate = True`), as a faulty network path or store would."""

  def __init__(self, target: str) -> None:
    import http.client  # noqa: PLC0415 -- only the proxy needs them
    import http.server  # noqa: PLC0415
    import threading  # noqa: PLC0415
    import urllib.parse  # noqa: PLC0415

    self.corrupt = self.truncate = False
    self.damaged = 0  # responses damaged so far
    proxy = self
    host, port = urllib.parse.urlsplit(target).hostname, urllib.parse.urlsplit(target).port

    class Handler(http.server.BaseHTTPRequestHandler):
      protocol_version = "HTTP/1.1"

      def log_message(self, *args: Any) -> None:
        pass

      def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        connection = http.client.HTTPConnection(host, port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        connection.request(self.command, self.path, body=body or None, headers=headers)
        response = connection.getresponse()
        data = response.read()
        if proxy.corrupt and self.command == "GET" and "Range" in self.headers and len(data) > 16:
          data = bytearray(data)
          data[len(data) // 2] ^= 0x5A
          data = bytes(data)
          proxy.damaged += 1
        self.send_response(response.status)
        for key, value in response.getheaders():
          if key.lower() not in ("content-length", "transfer-encoding", "connection"):
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if proxy.truncate and self.command == "GET" and len(data) > 16:
          proxy.damaged += 1
          self.wfile.write(data[: len(data) // 2])  # then the connection ends: a body cut short
          self.wfile.flush()
          self.close_connection = True
        elif self.command != "HEAD":
          self.wfile.write(data)
        connection.close()

      do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
    self.thread.start()

  @property
  def endpoint(self) -> str:
    return f"http://127.0.0.1:{self.server.server_address[1]}"

  def close(self) -> None:
    self.server.shutdown()
    self.server.server_close()
