#!/usr/bin/python3
"""A controller that fails over (docs/benchmarks.md, "Controller failover"): real processes on loopback.

Starts a 3-member etcd (Debian's etcd-server; --max-txn-ops 10000 as docs/operations.md asks), two
moe-controllers on it (--store etcd://..., --leader-lease-seconds 3 by default), one leads and the
other stands by; two CPU workers and a real training job (examples/tiny.yaml, one rank, steps enough
to outlast the run); a client submitting jobs all along through moectl with both controllers'
addresses (each acknowledged id kept). Then, one after the other:

  1. kill -9 of the leader: the standby takes over. failover_seconds is the kill to the first
     SubmitJob the new leader acknowledged. The killed controller is started again (as a supervisor
     would), now a standby.
  2. SIGSTOP of the (new) leader for its lease plus 3 s: the standby takes over; then SIGCONT, and at
     once SubmitJob straight to the stalled ex-leader, several times: every one must be refused
     (stale_leader_writes_accepted counts those it acknowledged). The ex-leader finds its lease gone
     and stops; it is started again as a standby.
  3. kill -9 of etcd's raft leader (the member whose loss costs an election): submits go on
     (etcd_member_loss_seconds: the kill to the first submit acknowledged after it;
     etcd_member_loss_submit_errors counts failures after that first success).

At the end: acked_changes_lost (acknowledged submits the leader does not have), jobs_restarted (the
training job's attempt moved, or it left RUNNING) and whether its steps went on across every phase
(training_steps_before/after). Prints RESULT lines; exits non-zero when a count is not 0 (with
--check, also when failover_seconds is over 10).

  bench/failover.py [--bin build/bin] [--lease 3] [--keep]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import free_port  # noqa: E402  (bench/load.py: a port free on loopback)


def log(msg):
    print(f"[failover {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Cluster:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.procs = []
        self.etcd = []  # (name, client port, Popen)
        self.controllers = {}  # name -> dict(port, metrics, proc, starts)

    def spawn(self, cmd, logname):
        out = open(os.path.join(self.work, logname), "a")
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        self.procs.append(p)
        return p

    def start_etcd(self):
        names = ["m0", "m1", "m2"]
        ports = {n: (free_port(), free_port()) for n in names}
        initial = ",".join(f"{n}=http://127.0.0.1:{ports[n][1]}" for n in names)
        for n in names:
            c, p = ports[n]
            proc = self.spawn(["/usr/bin/etcd", "--name", n, "--data-dir", os.path.join(self.work, "etcd-" + n),
                               "--listen-client-urls", f"http://127.0.0.1:{c}",
                               "--advertise-client-urls", f"http://127.0.0.1:{c}",
                               "--listen-peer-urls", f"http://127.0.0.1:{p}",
                               "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                               "--initial-cluster", initial, "--initial-cluster-state", "new",
                               "--max-txn-ops", "10000", "--max-request-bytes", "33554432"], f"etcd-{n}.log")
            self.etcd.append((n, c, proc))
        deadline = time.time() + 60
        for n, c, _ in self.etcd:
            while True:
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{c}/health", timeout=2).read()
                    if b'"health":"true"' in body.replace(b" ", b""):
                        break
                except OSError:
                    pass
                if time.time() > deadline:
                    sys.exit(f"etcd member {n} did not become healthy (see {self.work}/etcd-{n}.log)")
                time.sleep(0.2)
        self.store = "etcd://" + ",".join(f"127.0.0.1:{c}" for _, c, _ in self.etcd) + "/moe"
        log(f"etcd: 3 members healthy ({self.store})")

    def start_controller(self, name):
        c = self.controllers.setdefault(name, {"port": free_port(), "metrics": free_port(), "starts": 0})
        c["starts"] += 1
        c["log"] = os.path.join(self.work, f"controller-{name}-{c['starts']}.log")
        c["proc"] = self.spawn([os.path.join(self.args.bin, "moe-controller"), "--store", self.store,
                                "--listen", f"127.0.0.1:{c['port']}", "--metrics-listen", f"127.0.0.1:{c['metrics']}",
                                "--leader-lease-seconds", str(self.args.lease),
                                "--checkpoint-root", os.path.join(self.work, "ckpt")],
                               os.path.basename(c["log"]))

    def addresses(self):
        return ",".join(f"127.0.0.1:{c['port']}" for c in self.controllers.values())

    def leader(self, timeout=60):
        """The controller whose current log says it serves."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, c in self.controllers.items():
                if c["proc"].poll() is None and os.path.exists(c["log"]) and "serving gRPC" in open(c["log"]).read():
                    return name
            time.sleep(0.05)
        sys.exit("no controller leads (see the controller logs in " + self.work + ")")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()


def moectl(args, controller, *argv, timeout=30):
    env = dict(os.environ, MOE_CONTROLLER=controller)
    env.pop("MOE_CONFIG", None)
    return subprocess.run([os.path.join(args.bin, "moectl"), *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


def job_file(work, name, steps, world):
    text = open(os.path.join(ROOT, "examples/tiny.yaml")).read()
    text = text.replace("name: tiny-dsv3", f"name: {name}")
    text = text.replace("seq_length: 256, micro_batch_size: 8, global_batch_size: 16",
                        f"seq_length: 64, micro_batch_size: 4, global_batch_size: {4 * world}")
    text = text.replace("world_size: 2, expert_parallel: 2", f"world_size: {world}, expert_parallel: {world}")
    text = re.sub(r"steps: \d+, seed", f"steps: {steps}, seed", text)
    path = os.path.join(work, name + ".yaml")
    open(path, "w").write(text)
    return path


class Submitter(threading.Thread):
    """Submits a job that waits in the queue (it asks for more workers than are free), again and again,
    through every controller's address; keeps each acknowledged id with its time."""

    def __init__(self, args, cluster, spec):
        super().__init__(daemon=True)
        self.args, self.cluster, self.spec = args, cluster, spec
        self.acked = []  # (time answered, id, time sent)
        self.errors = []  # (time, message)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            sent = time.time()
            r = moectl(self.args, self.cluster.addresses(), "submit", "-f", self.spec)
            now = time.time()
            if r.returncode == 0 and r.stdout.strip():
                self.acked.append((now, r.stdout.strip().split()[-1], sent))
            else:
                self.errors.append((now, (r.stderr or r.stdout).strip()[:200]))
            time.sleep(self.args.submit_interval)

    def first_ack_after(self, t, timeout=60):
        """When the first submit sent after `t` was acknowledged."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            later = [a for a, _, sent in self.acked if sent > t]
            if later:
                return later[0]
            time.sleep(0.02)
        log(f"no submit acknowledged within {timeout} s; the last errors: {self.errors[-3:]}")
        return None


def training(args, cluster, job_id):
    r = moectl(args, cluster.addresses(), "get", "job", job_id, "-o", "json")
    if r.returncode != 0:
        return None
    j = json.loads(r.stdout)
    return {"state": j.get("state"), "attempt": int(j.get("attempt", 0)),
            "step": int(j.get("last_metrics", {}).get("step", 0))}


def wait_steps(args, cluster, job_id, more_than, timeout=120):
    deadline = time.time() + timeout
    t = None
    while time.time() < deadline:
        t = training(args, cluster, job_id)
        if t and t["state"] == "RUNNING" and t["step"] > more_than:
            return t
        time.sleep(0.5)
    sys.exit(f"the training job did not step past {more_than} (last seen: {t})")


def wait_exit(proc, timeout):
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def phase_kill(args, cluster, sub, results):
    victim = cluster.leader()
    log(f"phase 1: kill -9 of the leader ({victim})")
    t0 = time.time()
    cluster.controllers[victim]["proc"].send_signal(signal.SIGKILL)
    cluster.controllers[victim]["proc"].wait()
    first = sub.first_ack_after(time.time())  # sent once the leader is gone: the new one answered
    results["failover_seconds"] = (first - t0) if first else 999.0
    log(f"phase 1: the new leader ({cluster.leader()}) acknowledged a submit {results['failover_seconds']:.2f} s after the kill")
    cluster.start_controller(victim)  # back, as a standby


def phase_stall(args, cluster, results):
    stalled = cluster.leader()
    c = cluster.controllers[stalled]
    pause = args.lease + 3
    log(f"phase 2: SIGSTOP of the leader ({stalled}) for {pause} s")
    c["proc"].send_signal(signal.SIGSTOP)
    time.sleep(pause)
    others = [n for n in cluster.controllers if n != stalled]
    cluster.controllers[stalled]["log_stalled"] = c["log"]
    c["proc"].send_signal(signal.SIGCONT)
    accepted, ids, refusals = 0, [], []
    for _ in range(args.stale_tries):
        r = moectl(args, f"127.0.0.1:{c['port']}", "submit", "-f", cluster.queued_spec, timeout=15)
        if r.returncode == 0:
            accepted += 1
            ids.append(r.stdout.strip().split()[-1])
        else:
            refusals.append(r.stderr.strip()[:160])
    for why in sorted(set(refusals)):
        log(f"phase 2: the ex-leader refused: {why}")
    results["stale_leader_writes_accepted"] = accepted
    results["stale_ids"] = ids
    stopped = wait_exit(c["proc"], 30)
    log(f"phase 2: the stalled ex-leader had {accepted} of {args.stale_tries} submits accepted; "
        f"it {'stopped by itself' if stopped else 'did NOT stop'}; the leader is now {others}")
    results["stale_leader_kept_running"] = 0 if stopped else 1
    if not stopped:
        c["proc"].kill()
        c["proc"].wait()
    cluster.start_controller(stalled)


def etcd_raft_leader(cluster):
    """The etcd member that leads the raft group (its loss is the harder case: an election)."""
    for i, (_, c, proc) in enumerate(cluster.etcd):
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{c}/v3/maintenance/status", data=b"{}", method="POST")
            st = json.loads(urllib.request.urlopen(req, timeout=2).read())
            if st.get("leader") == st.get("header", {}).get("member_id"):
                return i
        except (OSError, ValueError):
            continue
    return 0


def phase_etcd_member(args, cluster, sub, results):
    name, _, proc = cluster.etcd[etcd_raft_leader(cluster)]
    log(f"phase 3: kill -9 of etcd member {name} (the raft leader)")
    t0 = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = sub.first_ack_after(time.time())
    time.sleep(args.after_member_seconds)
    during = [e for t, e in sub.errors if t > t0 and (first is None or t <= first)]
    if during:
        log(f"phase 3: before submits went on: {len(during)} failed, e.g. {during[0]}")
    errors = [e for t, e in sub.errors if first is not None and t > first]
    results["etcd_member_loss_submit_errors"] = len(errors) if first else 999
    if errors:
        log(f"phase 3: submits failed after the first success: {errors[:3]}")
    results["etcd_member_loss_seconds"] = ((first or t0 + 999) - t0)
    log(f"phase 3: submits went on {results['etcd_member_loss_seconds']:.2f} s after the member's loss")


def check_end(args, cluster, sub, job_id, before, results):
    leader_addr = cluster.addresses()
    r = moectl(args, leader_addr, "get", "jobs", "-o", "json", timeout=60)
    if r.returncode != 0:
        sys.exit("listing the jobs failed: " + r.stderr)
    have = {j["id"] for j in json.loads(r.stdout).get("jobs", [])}
    acked = {i for _, i, _ in sub.acked}
    lost = sorted(acked - have)
    results["acked_changes_lost"] = len(lost)
    stale_stored = [i for i in results.pop("stale_ids") if i in have]
    results["stale_leader_writes_accepted"] += len(stale_stored)
    after = training(args, cluster, job_id)
    moved = after is None or after["attempt"] != before["attempt"] or after["state"] != "RUNNING"
    results["jobs_restarted"] = 1 if moved else 0
    results["training_steps_before"] = before["step"]
    results["training_steps_after"] = after["step"] if after else 0
    results["acked_submits"] = len(acked)
    if lost:
        log(f"acknowledged but missing: {lost[:5]}")


def run(args):
    work = tempfile.mkdtemp(prefix="moe-failover-")
    cluster = Cluster(args, work)
    results = {}
    try:
        cluster.start_etcd()
        cluster.start_controller("a")
        time.sleep(1)
        cluster.start_controller("b")
        first = cluster.leader()
        log(f"controllers: {first} leads, the other stands by ({cluster.addresses()})")
        for w in range(2):
            cluster.spawn([os.path.join(args.bin, "moe-worker"), "--controller", cluster.addresses(),
                           "--name", f"w{w}", "--rack", "r0", "--node", f"n{w}", "--threads", "1", "--slots", "1",
                           "--runtime-dir", os.path.join(work, f"rt-w{w}"), "--data-root", ROOT,
                           "--checkpoint-root", os.path.join(work, "ckpt")], f"worker-w{w}.log")
        train = job_file(work, "trained", 1000000, 1)
        cluster.queued_spec = job_file(work, "queued", 10, 4)  # 4 ranks, 2 workers: it waits
        r = moectl(args, cluster.addresses(), "submit", "-f", train)
        if r.returncode != 0:
            sys.exit("submitting the training job failed: " + r.stderr)
        job_id = r.stdout.strip().split()[-1]
        before = wait_steps(args, cluster, job_id, 5)
        log(f"training job {job_id} at step {before['step']} (attempt {before['attempt']})")
        sub = Submitter(args, cluster, cluster.queued_spec)
        sub.start()
        time.sleep(2)
        phase_kill(args, cluster, sub, results)
        mid = wait_steps(args, cluster, job_id, before["step"])
        log(f"training job at step {mid['step']} after the takeover (attempt {mid['attempt']})")
        phase_stall(args, cluster, results)
        mid = wait_steps(args, cluster, job_id, mid["step"])
        phase_etcd_member(args, cluster, sub, results)
        wait_steps(args, cluster, job_id, mid["step"])
        sub.stop.set()
        sub.join()
        check_end(args, cluster, sub, job_id, before, results)
    finally:
        cluster.stop()
        if args.keep:
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    p.add_argument("--lease", type=int, default=3, help="--leader-lease-seconds of both controllers")
    p.add_argument("--submit-interval", type=float, default=0.02)
    p.add_argument("--stale-tries", type=int, default=5, help="submits sent to the resumed ex-leader")
    p.add_argument("--after-member-seconds", type=float, default=5)
    p.add_argument("--check", action="store_true", help="also fail when failover_seconds > 10")
    p.add_argument("--keep", action="store_true", help="keep the logs")
    args = p.parse_args()
    args.bin = os.path.abspath(args.bin)
    for tool in ("moe-controller", "moe-worker", "moectl"):
        if not os.access(os.path.join(args.bin, tool), os.X_OK):
            sys.exit(f"--bin {args.bin}: no {tool} (make build)")
    if not os.access("/usr/bin/etcd", os.X_OK):
        sys.exit("/usr/bin/etcd is missing: install Debian's etcd-server (scripts/install-deps.sh bench)")
    if not os.path.exists(os.path.join(ROOT, "data/fortunes.idx")):
        sys.exit("data/fortunes is missing: make data")
    results = run(args)
    for k in ("failover_seconds", "acked_changes_lost", "jobs_restarted", "stale_leader_writes_accepted",
              "stale_leader_kept_running", "etcd_member_loss_seconds", "etcd_member_loss_submit_errors",
              "acked_submits",
              "training_steps_before", "training_steps_after"):
        v = results.get(k)
        print(f"RESULT {k} {v:.2f}" if isinstance(v, float) else f"RESULT {k} {v}")
    bad = [k for k in ("acked_changes_lost", "jobs_restarted", "stale_leader_writes_accepted",
                       "stale_leader_kept_running", "etcd_member_loss_submit_errors") if results.get(k) != 0]
    if args.check and results.get("failover_seconds", 999) > 10:
        bad.append("failover_seconds")
    if bad:
        print("FAILED: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
