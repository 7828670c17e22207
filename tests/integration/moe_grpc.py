"""A Python gRPC client of the controller for the tests that moectl cannot express (a worker that
lies, a takeover, foreign rendezvous keys). The message classes are generated from proto/ at test time
into a temporary directory (protoc --python_out); nothing generated is committed. The calls use
grpcio's generic API, so no grpc_tools plugin is needed. Runs under Debian's /usr/bin/python3 with
python3-grpcio and python3-protobuf."""
import atexit
import os
import shutil
import queue
import subprocess
import sys
import tempfile
import threading
import time

import grpc

_GEN = None


def _load():
    global _GEN
    if _GEN is not None:
        return _GEN
    src = os.environ.get("MOE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    out = tempfile.mkdtemp(prefix="moe-pb-")
    atexit.register(shutil.rmtree, out, True)
    protos = ["moe/v1/options.proto", "moe/v1/job_spec.proto", "moe/v1/job.proto", "moe/v1/worker_service.proto",
              "moe/v1/job_service.proto"]
    subprocess.run(["protoc", "-I", os.path.join(src, "proto"), "--python_out", out] + protos, check=True)
    sys.path.insert(0, out)
    from moe.v1 import job_pb2, job_service_pb2, worker_service_pb2  # noqa: E402
    _GEN = (job_pb2, worker_service_pb2, job_service_pb2)
    return _GEN


def pb():
    job, ws, js = _load()
    class P:  # noqa: D401
        pass
    p = P()
    p.job, p.ws, p.js = job, ws, js
    return p


def channel(addr):
    return grpc.insecure_channel(addr)


def unary(ch, method, req, resp_cls, token=None, session=None, timeout=10):
    md = []
    if token:
        md.append(("authorization", "Bearer " + token))
    if session is not None:
        md.append(("x-moe-session", session))
    call = ch.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=resp_cls.FromString)
    return call(req, metadata=md, timeout=timeout)


def code_of(fn):
    """Runs fn; returns the grpc status code name ('OK' when it returned)."""
    try:
        fn()
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def bootstrap(addr, token, node, rack="r0"):
    """A node credential for `node` (WorkerService.Bootstrap with the worker token)."""
    p = pb()
    return unary(channel(addr), "/moe.v1.WorkerService/Bootstrap", p.ws.BootstrapRequest(node=node, rack=rack),
                 p.ws.BootstrapResponse, token=token).credential


class FakeWorker:
    """A worker stream driven by hand: register, then send what the test wants, and read what comes."""

    def __init__(self, addr, token, name, rack="r0", node=None, device="cpu", session="", register=None):
        p = pb()
        self.p = p
        self.ch = channel(addr)
        self.out = queue.Queue()
        self.inbox = queue.Queue()
        self.held = []
        self.status = None
        self.done = threading.Event()
        md = [("authorization", "Bearer " + token)] if token else []
        call = self.ch.stream_stream("/moe.v1.WorkerService/Connect",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=p.ws.ControllerMessage.FromString)
        # A real CPU worker always reports its host's memory; without one a job with a memory estimate
        # is not placed on it (docs/operations.md).
        reg = register or p.ws.Register(name=name, rack=rack, node=node or name, device=device,
                                        address="127.0.0.1", session=session, memory_bytes=64 << 30)
        first = p.ws.WorkerMessage()
        first.register.CopyFrom(reg)
        self.out.put(first)
        self.stream = call(self._requests(), metadata=md)
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self):
        while True:
            m = self.out.get()
            if m is None:
                return
            yield m

    def _read(self):
        try:
            for m in self.stream:
                self.inbox.put(m)
            self.status = "OK"
        except grpc.RpcError as e:
            self.status = e.code().name
            self.details = e.details()
        self.done.set()

    def send(self, **kw):
        m = self.p.ws.WorkerMessage(**kw)
        self.out.put(m)

    def next(self, kind, timeout=10):
        """The next controller message of `kind` (registered, assign, cancel), or None. Messages of
        other kinds stay for later calls (an assignment may come before `registered`)."""
        for i, m in enumerate(self.held):
            if m.WhichOneof("msg") == kind:
                return getattr(self.held.pop(i), kind)
        end = time.time() + timeout
        while time.time() < end:
            try:
                m = self.inbox.get(timeout=0.1)
            except queue.Empty:
                if self.done.is_set():
                    return None
                continue
            if m.WhichOneof("msg") == kind:
                return getattr(m, kind)
            self.held.append(m)
        return None

    def wait_end(self, timeout=10):
        """The stream's final status code name, or None while it is still open."""
        self.done.wait(timeout)
        return self.status

    def heartbeat_forever(self):
        def beat():
            while not self.done.is_set():
                self.send(heartbeat=self.p.ws.Heartbeat(time=time.time()))
                time.sleep(0.5)
        threading.Thread(target=beat, daemon=True).start()

    def close(self):
        self.out.put(None)
        self.ch.close()
