#!/usr/bin/python3
"""Load on the control plane (docs/benchmarks.md, "Control plane under load"), real processes on loopback.

Fake nodes: moe-worker --fake-workers N --slots D runs N node agents of D devices each in one process
(each agent registers once, heartbeats once a second, takes assignments for its devices and reports
their synthetic steps; no training); --devices-per-node D (8, an 8-GPU node) throughout, and the
counts below (--workers, --restart-workers) are devices. Up to 2,048 agents run in one process,
sharing TCP connections to the controller --agents-per-connection K apiece (64 by default; 1: each its
own, as real agents): fewer handshakes and keepalives on both sides, the same per-agent work
(registration, stream, lease, UDP heartbeats) for the controller.

Phase 1 (jobs): a controller, the fake nodes holding --workers devices, --clients concurrent gRPC
clients (threads of moe-bench-submit, in C++, on one channel; Python threads with --python-clients,
whose interpreter puts a floor of 12 to 25 ms under every call here) submitting --jobs jobs between them (each submit followed by a GetJob, every tenth by a
ListJobs page of 100 in its default view, JOB_VIEW_BASIC since 2026-12-07) while --watchers WatchJob streams stay open (each re-opens on another live job when
its job ends; threads of moe-bench-submit too, Python threads with --python-clients; they were Python threads until 2026-12-07,
whose interpreter shared the clients' core with the calls being timed). Reports p50/p99 latency of SubmitJob, GetJob and ListJobs, the controller's CPU
(cores) and peak memory, and checks that every job reached SUCCEEDED and that the controller's SQLite
file (read with Python's sqlite3, the real SQLite) agrees with the API, job by job.

Every phase's controller runs alone on core 0 (taskset -c 0); this script, the clients and the fake
nodes run on the other cores (the fake nodes on core 1).

Phase 2 (heartbeats): a fresh controller pinned to one core (taskset -c 0), the fake nodes on the
other; for each count of node agents in --ladder, that many agents (x D devices) heartbeat at 1 Hz
for --hold seconds. A count holds when no lease was missed (no device LOST, no "lost" line in the
controller's log). Reports the controller's CPU per count and the largest count that held (16,384
agents x 8 = 131,072 devices is the issue's). Each count's registration time (all of them connecting
at once) is the cold start.

Phase 3 (restart): --restart-workers fake devices (by default all the devices of the largest count
the ladder held, 131,072 when 16,384 agents held; 512 when the ladder was skipped or held none) and
--restart-jobs long jobs running; the controller is killed with SIGKILL and started again on the same
state: how long until every agent is back, how many jobs restarted (their attempt moved), and how many
acknowledged submits the SQLite file lost.

The run ends with one RESULT line per figure of the issue (submit_per_second, submit_p99_ms, get_p99_ms,
list_p99_ms, heartbeat_devices_held, heartbeat_core_fraction, cold_start_seconds,
restart_agents_back_seconds, restart_jobs_restarted, acked_changes_lost), each measured end to end from
the Python clients; the clients' own share of a call is printed beside it (the floor: an RPC the
controller answers from memory), and the controller's own time for the same calls (its
moe_rpc_duration_seconds histogram, scraped before and after the clients ran: entry to answer, queue
and store waits included) follows as submit_service_p99_ms, get_service_p99_ms and list_service_p99_ms.
Where this machine bounds a figure, the line before says by what.

  bench/load.py [--bin build/bin] [--jobs 1000] [--clients 20] [--watchers 100] [--workers 512]
                [--devices-per-node 8] [--ladder 1024,4096,8192,16384] [--hold 20] [--skip-heartbeats]
                [--agents-per-connection 64]
                [--restart-workers N] [--restart-jobs 100] [--skip-restart]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import moe_grpc as g  # noqa: E402

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ticks(pid):
    """utime + stime of a process, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def bucket_quantile(before, after, q):
    """The q-quantile in ms of the observations between two scrapes of one histogram's cumulative
    buckets, interpolated within its bucket as Prometheus's histogram_quantile does; (quantile, n)."""
    prev = dict(before)
    delta = [(le, c - prev.get(le, 0)) for le, c in after]
    n = delta[-1][1] if delta else 0
    if n <= 0:
        return float("nan"), 0
    rank, lo, below = q * n, 0.0, 0.0
    for le, c in delta:
        if c >= rank:
            if le == float("inf"):
                return lo * 1e3, int(n)  # above the last bound: its lower edge, as Prometheus does
            return (lo + (le - lo) * (rank - below) / max(c - below, 1e-9)) * 1e3, int(n)
        lo, below = le, c
    return lo * 1e3, int(n)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


class Stack:
    """A controller and a fake-worker process on loopback."""

    def __init__(self, args, work, pin=False):
        self.args, self.work, self.pin = args, work, pin
        self.addr = f"127.0.0.1:{free_port()}"
        self.procs = []

    def start_controller(self, lease=3):
        self.metrics = f"127.0.0.1:{free_port()}"
        cmd = [f"{self.args.bin}/moe-controller", "--listen", self.addr, "--metrics-listen", self.metrics,
               "--state-dir", os.path.join(self.work, "state"), "--lease-seconds", str(lease)]
        if self.pin:
            cmd = ["taskset", "-c", "0"] + cmd
        self.log = os.path.join(self.work, "controller.log")
        self.ctl = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(self.ctl)
        self.ch = g.channel(self.addr)
        self.p = g.pb()
        for _ in range(200):  # ready: it answers (ListQueues, from memory; not 131,072 workers listed)
            if g.code_of(lambda: g.unary(self.ch, "/moe.v1.JobService/ListQueues", self.p.js.ListQueuesRequest(),
                                         self.p.js.ListQueuesResponse)) == "OK":
                return
            time.sleep(0.1)
        raise SystemExit("load: the controller did not start")

    def start_fakes(self, devices, step_seconds, rack_size, name):
        """Fake nodes holding `devices` devices (--devices-per-node each), at most 2,048 agents a process;
        `rack_size` in nodes (0: one rack)."""
        per_node = self.args.devices_per_node
        nodes = max(1, devices // per_node)
        procs = []
        for k, first in enumerate(range(0, nodes, 2048)):
            n = min(2048, nodes - first)
            pname = name if nodes <= 2048 else f"{name}p{k}"
            cmd = [f"{self.args.bin}/moe-worker", "--controller", self.addr, "--name", pname, "--rack", f"r{k}",
                   "--fake-step-seconds", str(step_seconds), "--fake-workers", str(n), "--slots", str(per_node),
                   "--memory-gb", "100000", "--fake-rack-size", str(rack_size),
                   "--runtime-dir", os.path.join(self.work, "rt-" + pname), "--log-level", "warning",
                   "--data-root", os.getcwd(), "--checkpoint-root", self.work]
            if n > 1 and self.args.agents_per_connection > 1:
                cmd += ["--fake-agents-per-connection", str(self.args.agents_per_connection)]
            if self.pin:
                cmd = ["taskset", "-c", "1"] + cmd
            proc = subprocess.Popen(cmd, stdout=open(os.path.join(self.work, f"{pname}.log"), "w"), stderr=subprocess.STDOUT)
            self.procs.append(proc)
            procs.append(proc)
        return procs

    def scrape(self):
        """The controller's /metrics page, again after a transient failure (a reset connection)."""
        import urllib.request
        for k in range(5):
            try:
                return urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10).read().decode()
            except OSError as e:
                if k == 4:
                    raise SystemExit(f"load: /metrics at {self.metrics}: {e}")
                time.sleep(0.5)

    def rpc_buckets(self):
        """moe_rpc_duration_seconds's cumulative buckets by method: {method: [(le, count), ...]}."""
        out = {}
        for line in self.scrape().splitlines():
            if line.startswith("moe_rpc_duration_seconds_bucket{"):
                labels, value = line.rsplit(" ", 1)
                method = labels.split('method="')[1].split('"')[0]
                le = labels.split('le="')[1].split('"')[0]
                out.setdefault(method, []).append((float("inf") if le == "+Inf" else float(le), float(value)))
        return {m: sorted(b) for m, b in out.items()}

    def store_counts(self):
        """(writes, batches): moe_store_writes_total and moe_store_batches_total from /metrics."""
        got = {}
        for line in self.scrape().splitlines():
            for name in ("moe_store_writes_total", "moe_store_batches_total"):
                if line.startswith(name + " "):
                    got[name] = float(line.rsplit(" ", 1)[1])
        return got.get("moe_store_writes_total", 0.0), got.get("moe_store_batches_total", 0.0)

    def heartbeats(self):
        """moe_heartbeats_total by transport from /metrics: {"udp": n, "stream": n}."""
        text = self.scrape()
        out = {}
        for line in text.splitlines():
            if line.startswith("moe_heartbeats_total{"):
                out[line.split('transport="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
        return out

    def list_workers(self):
        """Every worker, page by page (a page holds at most 10,000)."""
        out, token = [], ""
        while True:
            req = self.p.js.ListWorkersRequest(page_size=10000, page_token=token)
            page = retried(lambda: g.unary(self.ch, "/moe.v1.JobService/ListWorkers", req, self.p.js.ListWorkersResponse,
                                           timeout=30))
            out.extend(page.workers)
            token = page.next_page_token
            if not token:
                return out

    def racks(self):
        """Workers (devices) by state over every rack, from ListRacks: {"idle": n, "busy": n, "lost": n}. One
        count under the controller's lock, not 131,072 workers described and sent twice a second."""
        resp = retried(lambda: g.unary(self.ch, "/moe.v1.JobService/ListRacks", self.p.js.ListRacksRequest(),
                                       self.p.js.ListRacksResponse, timeout=30))
        return {k: sum(getattr(r, k) for r in resp.racks) for k in ("idle", "busy", "lost")}

    def count(self, state_name):
        return self.racks()[state_name.lower()]

    def wait_alive(self, n, timeout):
        t0 = time.time()
        alive = 0
        while time.time() - t0 < timeout:
            try:
                racks = self.racks()
            except Exception as e:  # a busy controller: ask again (the timeout still holds)
                print(f"load: ListRacks failed while waiting ({type(e).__name__}); asking again")
                time.sleep(1)
                continue
            alive = racks["idle"] + racks["busy"]
            if alive >= n:
                return time.time() - t0
            time.sleep(0.5)
        raise SystemExit(f"load: only {alive} of {n} fake devices registered within {timeout} s")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def template_job(stack, args):
    """A job document as the controller expands it: submitted once through moectl, then read back."""
    doc = os.path.join(stack.work, "load.yaml")
    open(doc, "w").write(
        "apiVersion: moe/v1\nkind: TrainingJob\nmetadata: {name: load-seed}\n"
        "spec:\n  model: {preset: tiny}\n  parallelism: {world_size: 1}\n"
        "  data: {path: data/fortunes, seq_length: 64, micro_batch_size: 4, global_batch_size: 4}\n"
        f"  training: {{steps: {args.steps}}}\n  checkpoint: {{interval_steps: 0}}\n  resources: {{device: cpu}}\n")
    env = dict(os.environ, MOE_CONTROLLER=stack.addr)
    out = subprocess.run([f"{args.bin}/moectl", "submit", "-f", doc], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"load: moectl submit of the template: {out.stderr.strip()}")
    job = g.unary(stack.ch, "/moe.v1.JobService/GetJob", stack.p.js.GetJobRequest(id=out.stdout.strip()), stack.p.job.Job)
    return out.stdout.strip(), job.spec


class Load:
    def __init__(self, stack, args, template):
        self.s, self.args, self.template = stack, args, template
        self.lat = {"SubmitJob": [], "GetJob": [], "ListJobs": []}
        self.ids, self.errors = [], []
        self.mu = threading.Lock()
        self.done = threading.Event()
        self.watch_streams = 0
        self.max_watch_streams = 0
        self.watch_updates = 0
        self.ended = set()  # jobs a watcher saw end (not watched again)
        self.floor = []  # ListQueues: the clients' and gRPC's own time

    def call(self, method, req, resp):
        t0 = time.perf_counter()
        r = g.unary(self.s.ch, f"/moe.v1.JobService/{method}", req, resp, timeout=60)
        with self.mu:
            self.lat[method].append(time.perf_counter() - t0)
        return r

    def client(self, k, n):
        p, rng = self.s.p, random.Random(k)
        for i in range(n):
            job = p.job.TrainingJob()
            job.CopyFrom(self.template)
            job.metadata.name = f"load-{k}-{i}"
            job.spec.parallelism.world_size = rng.choice([1, 1, 2, 4, 8])
            job.spec.data.global_batch_size = job.spec.data.micro_batch_size * job.spec.parallelism.world_size
            job.spec.parallelism.expert_parallel = 1
            job.spec.checkpoint.dir = ""  # the controller gives each job its own under --checkpoint-root
            try:
                j = self.call("SubmitJob", p.js.SubmitJobRequest(job=job), p.job.Job)
                with self.mu:
                    self.ids.append(j.id)
                self.call("GetJob", p.js.GetJobRequest(id=j.id), p.job.Job)
                if (i + k) % 10 == 0:  # staggered, as moe-bench-submit
                    self.call("ListJobs", p.js.ListJobsRequest(page_size=100), p.js.ListJobsResponse)
                    t0 = time.perf_counter()
                    g.unary(self.s.ch, "/moe.v1.JobService/ListQueues", p.js.ListQueuesRequest(), p.js.ListQueuesResponse)
                    with self.mu:
                        self.floor.append(time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001: every failure is counted and reported
                with self.mu:
                    why = f"{e.code().name}: {e.details()}" if hasattr(e, "details") else str(e)
                    self.errors.append(f"client {k} job {i}: {why}")

    def watcher(self, k):
        p, rng = self.s.p, random.Random(1000 + k)
        while not self.done.is_set():
            with self.mu:
                live = [i for i in self.ids if i not in self.ended]
                target = rng.choice(live) if live else None
            if target is None:
                time.sleep(0.05)
                continue
            call = self.s.ch.unary_stream("/moe.v1.JobService/WatchJob", request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=p.js.WatchJobResponse.FromString)
            with self.mu:
                self.watch_streams += 1
                self.max_watch_streams = max(self.max_watch_streams, self.watch_streams)
            try:
                for _ in call(p.js.WatchJobRequest(id=target), timeout=600):
                    if self.done.is_set():
                        break
                else:  # the stream closed with the job's final snapshot: it ended
                    with self.mu:
                        self.ended.add(target)
            except Exception:  # noqa: BLE001: a watch of a job that ended is fine
                pass
            with self.mu:
                self.watch_streams -= 1


def retried(fn, tries=5):
    """fn(), again after a transient failure (UNAVAILABLE, DEADLINE_EXCEEDED): the polling must not
    end the run; the clients' own calls are counted, not retried."""
    for k in range(tries):
        try:
            return fn()
        except g.grpc.RpcError as e:
            if k == tries - 1 or e.code().name not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise
            time.sleep(0.5)


def final_states(stack, ids):
    out = {}
    for i in ids:
        j = retried(lambda: g.unary(stack.ch, "/moe.v1.JobService/GetJob", stack.p.js.GetJobRequest(id=i), stack.p.job.Job))
        out[i] = stack.p.job.JobState.Name(j.state)
    return out


def native_clients(st, args, work, template, load):
    """The submitting clients and the watchers as moe-bench-submit (C++ threads on one channel): the
    ids it prints as each submit is acknowledged go to load.ids; its latencies replace load.lat.
    Returns its wall time from its first call to its last, and the process, whose watchers stay open
    until its stdin is closed (end_native)."""
    tmpl, out = os.path.join(work, "template.bin"), os.path.join(work, "submit.json")
    open(tmpl, "wb").write(template.SerializeToString())
    cmd = [f"{args.bin}/moe-bench-submit", "--controller", st.addr, "--template", tmpl, "--out", out,
           "--clients", str(args.clients), "--jobs", str(args.jobs), "--watchers", str(args.watchers)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    st.procs.append(proc)  # stopped with the stack if this phase fails
    for line in proc.stdout:
        if line.startswith("id "):
            with load.mu:
                load.ids.append(line.split()[1])
        elif line.strip() == "done":
            break
    else:
        raise SystemExit(f"load: moe-bench-submit ended before its clients were done (exit {proc.wait()})")
    r = json.load(open(out))
    with load.mu:
        for m in ("SubmitJob", "GetJob", "ListJobs"):
            load.lat[m] = r["lat"].get(m, [])
        load.floor = r["lat"].get("ListQueues", [])
        load.errors.extend(r["errors"])
    return r["wall"], proc


def end_native(proc, load):
    """Closes moe-bench-submit's watchers (its stdin), waits for it and reads what they received."""
    if proc is None:
        return
    proc.stdin.close()
    for line in proc.stdout:
        m = re.match(r"watched (\d+) streams at most, (\d+) updates", line)
        if m:
            load.max_watch_streams, load.watch_updates = int(m.group(1)), int(m.group(2))
    if proc.wait(timeout=60) != 0:
        raise SystemExit(f"load: moe-bench-submit exited {proc.returncode}")


def stored_state(p, record):
    """A job record's state as the controller stored it: binary protobuf (a BLOB), or the JSON text of
    an older controller."""
    if isinstance(record, bytes):
        job = p.job.Job()
        job.ParseFromString(record)
        return p.job.JobState.Name(job.state)
    return json.loads(record).get("state")


def jobs_phase(args, work):
    st = Stack(args, work, pin=True)
    try:
        return run_jobs(st, args, work)
    finally:
        st.stop()


def run_jobs(st, args, work):
    st.start_controller()
    st.start_fakes(args.workers, args.fake_step, max(1, 64 // args.devices_per_node), "fake")
    reg = st.wait_alive(args.workers, 120)
    print(f"load: {args.workers} fake devices ({args.workers // args.devices_per_node} node agents of "
          f"{args.devices_per_node}) registered in {reg:.1f} s")
    seed_id, template = template_job(st, args)
    load = Load(st, args, template)
    native = None
    if args.python_clients:
        for k in range(args.watchers):
            threading.Thread(target=load.watcher, args=(k,), daemon=True).start()
    c0, t0, h0, s0 = ticks(st.ctl.pid), time.time(), st.rpc_buckets(), st.store_counts()
    if args.python_clients:
        per = args.jobs // args.clients
        clients = [threading.Thread(target=load.client, args=(k, per)) for k in range(args.clients)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        submit_wall = time.time() - t0
    else:
        submit_wall, native = native_clients(st, args, work, template, load)
    submit_cpu = ticks(st.ctl.pid) - c0  # the controller's, over the submits alone
    h1, s1 = st.rpc_buckets(), st.store_counts()
    ids = list(load.ids) + [seed_id]
    while True:
        states = final_states(st, ids)
        pending = [i for i, s in states.items() if s not in FINAL]
        if not pending or time.time() - t0 > args.timeout:
            break
        time.sleep(1)
    wall, cpu = time.time() - t0, ticks(st.ctl.pid) - c0
    load.done.set()
    end_native(native, load)
    rss = peak_rss_mb(st.ctl.pid)
    st.stop()
    RESULTS["submit_per_second"] = len(load.ids) / submit_wall
    RESULTS["submit_p99_ms"] = pct(load.lat["SubmitJob"], 0.99)
    RESULTS["get_p99_ms"] = pct(load.lat["GetJob"], 0.99)
    RESULTS["list_p99_ms"] = pct(load.lat["ListJobs"], 0.99)
    writes, batches = s1[0] - s0[0], s1[1] - s0[1]
    print(f"load: over the submits the store committed {writes:.0f} writes in {batches:.0f} batches "
          f"({writes / max(batches, 1):.1f} a batch, each one transaction and one fsync)")
    print(f"load: the clients' own floor (ListQueues, answered from memory) p50 {pct(load.floor, 0.5):.1f} ms, "
          f"p99 {pct(load.floor, 0.99):.1f} ms: the rest of each latency is the controller's")
    print(f"load: {len(load.ids)} jobs submitted by {args.clients} clients in {submit_wall:.1f} s; all final after {wall:.1f} s; "
          f"{load.max_watch_streams} watch streams open at most"
          + (f", {load.watch_updates} updates received" if not args.python_clients else ""))
    for m, xs in load.lat.items():
        print(f"load: {m:10s} n={len(xs):5d}  p50 {pct(xs, 0.5):7.1f} ms  p99 {pct(xs, 0.99):7.1f} ms  max {pct(xs, 1.0):7.1f} ms"
              " (end to end, from the clients)")
    for m, key in (("SubmitJob", "submit"), ("GetJob", "get"), ("ListJobs", "list")):
        p50, n = bucket_quantile(h0.get(m, []), h1.get(m, []), 0.5)
        p99, _ = bucket_quantile(h0.get(m, []), h1.get(m, []), 0.99)
        RESULTS[f"{key}_service_p99_ms"] = p99
        print(f"load: {m:10s} n={n:5d}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  (the controller's own time, entry to answer: "
              "moe_rpc_duration_seconds, interpolated in its buckets)")
    print(f"load: controller CPU {cpu:.1f} s over {wall:.1f} s ({cpu / wall:.2f} cores), peak memory {rss:.0f} MB; "
          f"over the submits alone {submit_cpu:.2f} s, {1000 * submit_cpu / max(1, len(load.ids)):.2f} ms a submit "
          "(its GetJob, a tenth of a ListJobs page, the steps reported meanwhile included)")
    problems = [f"{len(load.errors)} calls failed, e.g. {e}" for e in load.errors[:3]]
    not_ok = {i: s for i, s in states.items() if s != "SUCCEEDED"}
    if not_ok:
        problems.append(f"{len(not_ok)} jobs did not succeed, e.g. {list(not_ok.items())[:5]}")
    db = sqlite3.connect(os.path.join(work, "state", "controller.db"))
    stored = {r[0]: stored_state(st.p, r[1]) for r in db.execute("SELECT id, record FROM jobs")}
    disagree = [i for i in ids if stored.get(i) != states[i]]
    if disagree:
        problems.append(f"SQLite disagrees with the API on {len(disagree)} jobs, e.g. {disagree[:3]}")
    print(f"load: SQLite holds {len(stored)} jobs, {len(ids) - len(disagree)} of {len(ids)} as the API reports them")
    return problems


def heartbeat_phase(args, work):
    held, rows, per_node = 0, [], args.devices_per_node
    k = args.agents_per_connection
    print(f"load: heartbeats: the fake agents share each connection to the controller {k} apiece "
          f"({'each its own, as real agents' if k == 1 else 'a real cluster has one per agent: fewer handshakes and keepalives here, the same per-agent work'})")
    for n in [int(x) for x in args.ladder.split(",")]:
        d = os.path.join(work, f"hb-{n}")
        os.makedirs(d)
        st = Stack(args, d, pin=True)
        try:  # whatever happens, every process of this count is stopped before the next
            st.start_controller(lease=3)
            st.start_fakes(n * per_node, 3600, 0, f"hb{n}")
            try:
                reg = st.wait_alive(n * per_node, max(120, n / 50))
            except SystemExit as e:
                lost = sum(1 for line in open(st.log) if " lost" in line)
                print(f"load: heartbeats: {n} agents did not converge: {e} ({lost} lost lines in the controller's log)")
                break
            b0, c0, t0 = st.heartbeats(), ticks(st.ctl.pid), time.time()
            time.sleep(args.hold)
            cpu = (ticks(st.ctl.pid) - c0) / (time.time() - t0)
            b1, held_s = st.heartbeats(), time.time() - t0
            rates = {k: (b1.get(k, 0) - b0.get(k, 0)) / held_s for k in ("udp", "stream")}
            lost = st.count("LOST")
            lines = sum(1 for line in open(st.log) if " lost" in line)
            rss = peak_rss_mb(st.ctl.pid)
        finally:
            st.stop()
        ok = lost == 0 and lines == 0
        rows.append((n, reg, cpu, rss, lost, lines, ok))
        print(f"load: heartbeats: {n:6d} agents x {per_node} = {n * per_node:7d} devices at 1 Hz: registered in {reg:5.1f} s, "
              f"controller {cpu * 100:5.1f}% of one core, {rss:5.0f} MB, {lost} LOST, {lines} lost lines: "
              f"{'held' if ok else 'MISSED LEASES'}; heartbeats heard {rates['udp']:,.0f}/s by UDP, "
              f"{rates['stream']:,.0f}/s on streams")
        if not ok:
            break
        held = n
    if held:
        RESULTS["heartbeat_devices_held"] = held * per_node
        RESULTS["heartbeat_core_fraction"] = [r[2] for r in rows if r[0] == held][0]
        RESULTS["cold_start_seconds"] = [r[1] for r in rows if r[0] == held][0]
        cpu = [r[2] for r in rows if r[0] == held][0]
        per_core = held / max(cpu, 1e-3)
        print(f"load: heartbeats: {held} agents ({held * per_node} devices) held on one core at {cpu * 100:.0f}% of it: "
              f"about {per_core:,.0f} agents per core at 1 Hz; 16,384 agents of 8 (131,072 devices) need about "
              f"{16384 / per_core:.2f} cores of heartbeat handling")
    return []


RESULTS = {}


def restart_phase(args, work):
    if args.restart_workers <= 0:  # all of them: the largest count held
        args.restart_workers = int(RESULTS.get("heartbeat_devices_held", 0)) or 512
    d = os.path.join(work, "restart")
    os.makedirs(d)
    st = Stack(args, d, pin=True)  # as the heartbeat phase: the controller's core is not the fakes'
    try:
        return run_restart(st, args, d)
    finally:
        st.stop()


def submit_long_jobs(st, args, template):
    p, ids = st.p, []
    for i in range(args.restart_jobs):
        job = p.job.TrainingJob()
        job.CopyFrom(template)
        job.metadata.name = f"long-{i}"
        job.spec.training.steps = 1000000
        job.spec.checkpoint.dir = ""
        ids.append(g.unary(st.ch, "/moe.v1.JobService/SubmitJob", p.js.SubmitJobRequest(job=job), p.job.Job).id)
    return ids


def run_restart(st, args, d):
    st.start_controller(lease=5)
    st.start_fakes(args.restart_workers, 1.0, max(1, 64 // args.devices_per_node), "rs")
    st.wait_alive(args.restart_workers, 120)
    seed_id, template = template_job(st, args)
    ids = submit_long_jobs(st, args, template)
    t0 = time.time()
    while time.time() - t0 < 120 and sorted(set(final_states(st, ids).values())) != ["RUNNING"]:
        time.sleep(1)
    before = {i: g.unary(st.ch, "/moe.v1.JobService/GetJob", st.p.js.GetJobRequest(id=i), st.p.job.Job).attempt for i in ids}
    st.ctl.kill()  # SIGKILL: no clean stop
    st.ctl.wait()
    t0 = time.time()
    st.start_controller(lease=5)
    st.wait_alive(args.restart_workers, 120)
    back = time.time() - t0  # from the new controller's start (it was killed at t0)
    time.sleep(3)  # the reconnect grace: a job whose ranks did not come back would restart now
    after = {}
    for i in ids:
        j = retried(lambda: g.unary(st.ch, "/moe.v1.JobService/GetJob", st.p.js.GetJobRequest(id=i), st.p.job.Job))
        after[i] = (j.attempt, st.p.job.JobState.Name(j.state))
    restarted = sum(1 for i in ids if after[i][0] != before[i] or after[i][1] != "RUNNING")
    db = sqlite3.connect(os.path.join(d, "state", "controller.db"))
    stored = {r[0] for r in db.execute("SELECT id FROM jobs")}
    lost = sum(1 for i in ids + [seed_id] if i not in stored)
    RESULTS["restart_agents_back_seconds"] = back
    RESULTS["restart_jobs_restarted"] = restarted
    RESULTS["acked_changes_lost"] = lost
    print(f"load: restart: kill -9 with {args.restart_workers} devices ({args.restart_workers // args.devices_per_node} agents) and {len(ids)} jobs running: every agent back after "
          f"{back:.1f} s, {restarted} jobs restarted, {lost} acknowledged submits missing from SQLite")
    return []


FIGURES = ("submit_per_second", "submit_p99_ms", "get_p99_ms", "list_p99_ms", "heartbeat_devices_held",
           "heartbeat_core_fraction", "cold_start_seconds", "restart_agents_back_seconds", "restart_jobs_restarted",
           "acked_changes_lost", "submit_service_p99_ms", "get_service_p99_ms", "list_service_p99_ms")


def print_spread(runs):
    """--repeat: each figure's spread over the runs, `RESULT <name> min=<x> median=<y> max=<z>` (a figure a run
    did not measure is named with the runs that did)."""
    for k in FIGURES:
        vals = [r[k] for r in runs if k in r]
        if not vals:
            print(f"load: {k}: not measured in any of the {len(runs)} runs")
            continue
        vals.sort()
        n = len(vals)
        median = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
        note = "" if n == len(runs) else f"  (measured in {n} of {len(runs)} runs)"
        print(f"RESULT {k} min={vals[0]:.3f} median={median:.3f} max={vals[-1]:.3f}{note}")


def print_results():
    for k in FIGURES:
        if k in RESULTS:
            v = RESULTS[k]
            print(f"RESULT {k} {v:.3f}" if isinstance(v, float) else f"RESULT {k} {v}")
        else:
            print(f"load: {k}: not measured (its phase was skipped or did not converge)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("MOE_BIN", "build/bin"))
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--workers", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fake-step", type=float, default=0.1)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--devices-per-node", type=int, default=8)
    ap.add_argument("--ladder", default="1024,4096,8192,16384", help="node agents (x --devices-per-node devices)")
    ap.add_argument("--hold", type=float, default=20)
    ap.add_argument("--agents-per-connection", type=int, default=64,
                    help="fake node agents sharing each TCP connection to the controller (1: each its own, as real agents; "
                         "64 by default: 16,384 agents' own connections and threads do not get through a cold start on "
                         "the one core the fake side has here)")
    ap.add_argument("--skip-heartbeats", action="store_true")
    ap.add_argument("--restart-workers", type=int, default=0,
                    help="devices connected when the controller is killed (default: every device of the largest count the "
                         "ladder held, or 512)")
    ap.add_argument("--restart-jobs", type=int, default=100)
    ap.add_argument("--skip-restart", action="store_true")
    ap.add_argument("--keep-logs", action="store_true", help="keep the work directory (every process's log) after a run that passed")
    ap.add_argument("--python-clients", action="store_true",
                    help="the jobs phase's submitting clients and its watchers as Python threads, not moe-bench-submit's")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every phase this many times (each on a fresh controller and directory) and print each "
                         "figure's spread: RESULT <name> min=<x> median=<y> max=<z>")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat: at least 1, got {args.repeat}")
    off_controller_core()
    runs, failed = [], False
    for i in range(args.repeat):
        if args.repeat > 1:
            print(f"load: run {i + 1} of {args.repeat}")
        RESULTS.clear()
        failed |= not run_once(args)
        runs.append(dict(RESULTS))
    if args.repeat > 1:
        print(f"load: the spread over {args.repeat} runs (each run's own RESULT lines above)")
        print_spread(runs)
    sys.exit(1 if failed else 0)


def off_controller_core():
    """This script and what it starts unpinned (moe-bench-submit, the watchers' threads) leave core 0,
    the controller's (taskset -c 0), to it: a production controller's host is its own, and a load
    generator that shares its core measures the generator (the clients took up to half of it here,
    and an RPC answered from memory waited 40 ms behind them)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 1 and 0 in cores:
        os.sched_setaffinity(0, set(cores) - {0})
        print(f"load: the load generators on cores {sorted(set(cores) - {0})}, the controller alone on core 0")


def run_once(args):
    """Every phase once; its RESULT lines; True when no phase had a problem."""
    work = tempfile.mkdtemp(prefix="moe-load.")
    print(f"load: {os.cpu_count()} cores; work in {work}")
    problems = jobs_phase(args, work)
    if not args.skip_heartbeats:
        problems += heartbeat_phase(args, work)
    if not args.skip_restart:
        problems += restart_phase(args, work)
    print_results()
    if problems:
        for p in problems:
            print(f"load: PROBLEM: {p}")
        print(f"load: logs kept in {work}")
        return False
    if args.keep_logs:
        print(f"load: logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return True


if __name__ == "__main__":
    main()
