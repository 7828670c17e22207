#!/usr/bin/env python3
"""Chaos run of the control plane (docs/operations.md, "Chaos"): real processes on loopback, failures
strung together, and nothing may be lost.

A controller, five CPU workers in one rack and a 4-rank job (EP 4, checkpoints every few steps). A
seeded driver then, one event at a time with a random pause between them:
  - kill-worker      kill -9 a worker that runs a rank (it comes back a few seconds later);
  - kill-controller  kill -9 the controller and start it again on the same state;
  - stop-worker      SIGSTOP a worker that runs a rank for 10 s (a hang, not a death), then SIGCONT;
  - storage          the checkpoint directory replaced by a file for 10 s (unwritable even for root).
The job must succeed; its loss at every step (the loss history <checkpoint dir>/metrics.jsonl, which
survives restarts and controller outages) must equal an uninterrupted run's bitwise; and the driver
prints each event's detection time (failure -> the control plane noticed: the job restarted, or the
controller serves again) and recovery time (failure -> the first step trained after it).

  tests/chaos/chaos.py [--profile short|full] [--seed N] [--bin build/bin] [--keep]
The short profile (make test) strings 6 events (3 kills, a hang, a storage outage, a clean SIGTERM) through a job of
at least 160 steps, each at a seeded step between 5% and 55% of it (an outage trains on: the last 45% must outlast
it and the pauses, at the step time of a 20-step calibration run); the full one
(make chaos) 8 kills 15-40 s apart plus the hang, the storage outage and a clean SIGTERM through a job of >= 300 steps
that lasts as long as they need (its length from a 20-step calibration run of this machine).
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PROFILES = {
    # kills: kill-worker / kill-controller events; gap: seconds between events; steps: the job's length
    # short: each event at a seeded step between 5% and 55% of the job (and 1-3 s after the last one
    # recovered), so that the job's speed on the machine at hand cannot make it end before the events.
    "short": {"kills": 3, "gap": (1.0, 3.0), "steps": 160, "interval": 5, "hang": 10.0, "outage": 8.0, "by_step": True},
    "full": {"kills": 8, "gap": (15.0, 40.0), "steps": 300, "interval": 10, "hang": 10.0, "outage": 10.0},
}
LEASE = 3


def log(msg):
    print(f"chaos: {msg}", flush=True)


def fail(msg):
    print(f"chaos: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Cluster:
    """The controller and the workers, as processes this driver owns."""

    def __init__(self, bindir, work):
        self.bin, self.work = bindir, work
        self.grpc, self.metrics = free_port(), free_port()
        self.addr = f"127.0.0.1:{self.grpc}"
        self.env = dict(os.environ, MOE_CONTROLLER=self.addr)
        self.controller = None
        self.workers = {}
        self.starts = 0

    def start_controller(self):
        self.starts += 1
        out = open(os.path.join(self.work, f"controller-{self.starts}.log"), "w")
        self.controller = subprocess.Popen(
            [f"{self.bin}/moe-controller", "--listen", self.addr, "--metrics-listen", f"127.0.0.1:{self.metrics}",
             "--state-dir", os.path.join(self.work, "state"), "--lease-seconds", str(LEASE),
             # Up to 40 restarts: the default backoff (10 s doubling to 300 s) would be most of the run.
             # This test times detection and recovery; controller_test covers the backoff itself.
             "--restart-backoff-seconds", "1", "--restart-backoff-max-seconds", "2"],
            stdout=out, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.moectl("get", "jobs", check=False) is not None:
                return
            time.sleep(0.1)
        fail("the controller did not start")

    def start_worker(self, name):
        out = open(os.path.join(self.work, f"worker-{name}.log"), "a")
        self.workers[name] = subprocess.Popen(
            [f"{self.bin}/moe-worker", "--controller", self.addr, "--name", name, "--rack", "r0", "--node", name,
             "--threads", "1", "--slots", "1", "--runtime-dir", os.path.join(self.work, f"rt-{name}"),
             "--data-root", os.getcwd(), "--checkpoint-root", self.work],
            stdout=out, stderr=subprocess.STDOUT)

    def moectl(self, *args, check=True):
        r = subprocess.run([f"{self.bin}/moectl", *args], env=self.env, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            if check:
                fail(f"moectl {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
            return None
        return r.stdout

    def job(self, job_id):
        out = self.moectl("get", "job", job_id, "-o", "json", check=False)
        return json.loads(out) if out else None

    def alive_workers(self):
        out = self.moectl("get", "workers", "-o", "json", check=False)
        if not out:
            return 0
        return sum(1 for w in json.loads(out).get("workers", []) if w.get("state") in ("IDLE", "BUSY"))

    def stop_all(self):
        procs = [p for p in [self.controller, *self.workers.values()] if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        deadline = time.time() + 10
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()


class History:
    """<checkpoint dir>/metrics.jsonl as it grows: each new line with the time it was first seen."""

    def __init__(self, path):
        self.path, self.offset, self.lines, self.max_step = path, 0, [], 0

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return  # not there yet, or the storage outage
        end = data.rfind(b"\n")
        if end < 0:
            return
        now = time.time()
        for line in data[:end].split(b"\n"):
            rec = json.loads(line)
            self.lines.append((now, int(rec["step"]), rec["loss"]))
            self.max_step = max(self.max_step, int(rec["step"]))
        self.offset += end + 1

    def last_step(self):
        return self.lines[-1][1] if self.lines else 0

    def first_after(self, t):
        """The time of the first line seen after t, or None."""
        for seen, _, _ in self.lines:
            if seen > t:
                return seen
        return None


def write_job(path, name, steps, interval, ckpt, world):
    text = open("examples/tiny.yaml").read()
    text = (text.replace("name: tiny-dsv3", f"name: {name}")
                .replace("seq_length: 256, micro_batch_size: 8", "seq_length: 64, micro_batch_size: 4")
                .replace("steps: 400, seed", f"steps: {steps}, seed")
                .replace("world_size: 2, expert_parallel: 2", f"world_size: {world}, expert_parallel: {world}, timeout_seconds: 20")
                .replace("max_restarts: 3", "max_restarts: 40"))
    lines = [f"  checkpoint: {{dir: {ckpt}, interval_steps: {interval}}}" if l.startswith("  checkpoint:") else l
             for l in text.splitlines()]
    open(path, "w").write("\n".join(lines) + "\n")


def start_reference(args, work, steps, interval):
    """The same job uninterrupted, outside the control plane (same layout and threads). Bitwise the
    same whatever else runs beside it: the full profile runs it beside the chaos job."""
    cfg = os.path.join(work, f"ref-{steps}.yaml")
    write_job(cfg, "ref", steps, interval, os.path.join(work, f"ckpt-ref-{steps}"), 4)
    out = os.path.join(work, f"ref-{steps}.jsonl")
    err = open(os.path.join(work, f"ref-{steps}.log"), "w")
    proc = subprocess.Popen([f"{args.bin}/moe-train", "--config", cfg, "--nproc", "4", "--threads", "1",
                             "--metrics-out", out], stderr=err, stdout=subprocess.DEVNULL)
    return proc, out, time.time(), steps


def finish_reference(started, work):
    proc, out, t0, steps = started
    if proc.wait() != 0:
        fail(f"the reference run exited {proc.returncode} (see {work}/ref-{steps}.log)")
    ref = {}
    for line in open(out):
        rec = json.loads(line)
        ref[int(rec["step"])] = rec["loss"]
    ref["seconds"] = time.time() - t0
    log(f"reference: {steps} steps uninterrupted in {ref['seconds']:.1f} s")
    return ref


def reference_run(args, work, steps, interval):
    return finish_reference(start_reference(args, work, steps, interval), work)


def plan_events(rng, prof):
    """(kind, seconds after the previous event's recovery, the step the job must have reached first)."""
    kills = ["kill-controller" if i % 3 == 1 else "kill-worker" for i in range(prof["kills"])]
    events = kills + ["stop-worker", "storage", "term-worker"]
    rng.shuffle(events)
    at = sorted(rng.uniform(0.05, 0.55) for _ in events) if prof.get("by_step") else [0.0] * len(events)
    return [(kind, rng.uniform(*prof["gap"]), frac) for kind, frac in zip(events, at)]


class Driver:
    def __init__(self, cluster, job_id, history, ckpt, rng, prof):
        self.c, self.job_id, self.h, self.ckpt, self.rng, self.prof = cluster, job_id, history, ckpt, rng, prof
        self.report = []

    def wait(self, seconds, until=None):
        """Polls the history (and `until`) for `seconds`; returns the time `until` first held, or None."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.h.poll()
            if until is not None and until():
                return time.time()
            time.sleep(0.1)
        self.h.poll()
        return None

    def state(self):
        j = self.c.job(self.job_id)
        return j if j else {}

    def victim(self):
        placement = self.state().get("placement", [])
        names = [p["worker"] for p in placement if p.get("worker") in self.c.workers]
        return self.rng.choice(names) if names else self.rng.choice(sorted(self.c.workers))

    def wait_running(self, t0, timeout=120):
        """Until the job runs and a step newer than t0 is in the history; returns that step's time."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.h.poll()
            seen = self.h.first_after(t0)
            if seen is not None:
                return seen
            st = self.state().get("state")
            if st in ("FAILED", "CANCELLED"):
                fail(f"the job ended {st}: {self.state().get('message', '')}")
            if st == "SUCCEEDED":
                return time.time()
            time.sleep(0.1)
        fail(f"no step within {timeout} s of the event at {t0:.1f}")

    def wait_attempt_running(self, since, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.h.poll()
            st = self.state().get("state")
            if st in ("RUNNING", "SUCCEEDED"):
                return time.time()
            if st in ("FAILED", "CANCELLED"):
                fail(f"the job ended {st}: {self.state().get('message', '')}")
            time.sleep(0.1)
        fail(f"the job did not run again within {timeout} s of the restart at {since:.1f}")

    def restarted_since(self, before):
        return lambda: int(self.state().get("restarts", 0)) > before

    def kill_worker(self):
        name, before = self.victim(), int(self.state().get("restarts", 0))
        t0 = time.time()
        self.c.workers[name].kill()
        self.c.workers[name].wait()
        detected = self.wait(LEASE * 5 + 10, self.restarted_since(before))
        self.c.start_worker(name)  # the machine comes back
        return f"kill -9 worker {name}", t0, detected, None

    def kill_controller(self):
        t0 = time.time()
        self.c.controller.kill()
        self.c.controller.wait()
        self.wait(self.rng.uniform(1.0, 3.0))
        self.c.start_controller()
        back = time.time()
        return "kill -9 controller", t0, back, back

    def stop_worker(self):
        name, before = self.victim(), int(self.state().get("restarts", 0))
        t0 = time.time()
        self.c.workers[name].send_signal(signal.SIGSTOP)
        detected = self.wait(self.prof["hang"], self.restarted_since(before))
        running = None
        if detected is not None:  # the job may run again elsewhere while this worker still hangs
            running = self.wait(max(0.0, t0 + self.prof["hang"] - time.time()),
                                lambda: self.state().get("state") in ("RUNNING", "SUCCEEDED"))
        self.wait(max(0.0, t0 + self.prof["hang"] - time.time()))
        self.c.workers[name].send_signal(signal.SIGCONT)
        return f"SIGSTOP worker {name} for {self.prof['hang']:.0f} s", t0, detected, ("recovered", running) if running else None

    def term_worker(self):
        """A clean stop (a rolling update, a Slurm time limit): SIGTERM. Every rank checkpoints at the
        next step boundary and stops; the job resumes from there on the spare without using a restart;
        the worker exits 0 and is removed, not lost."""
        name, before = self.victim(), int(self.state().get("restarts", 0))
        t0 = time.time()
        self.c.workers[name].send_signal(signal.SIGTERM)
        try:
            code = self.c.workers[name].wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"worker {name} did not exit within 60 s of SIGTERM")
        if code != 0:
            fail(f"worker {name} exited {code} after SIGTERM (expected 0: a clean leave)")
        detected = time.time()
        self.h.poll()
        self.term_check = (before, self.h.max_step, len(self.h.lines))
        self.c.start_worker(name)  # the updated worker comes back
        return f"SIGTERM worker {name}", t0, detected, None

    def check_term(self):
        """After a clean stop: no restart used, and no step trained twice (the ranks checkpointed at the
        step they stopped at)."""
        before, stop_step, seen = self.term_check
        restarts = int(self.state().get("restarts", 0))
        if restarts != before:
            fail(f"a clean worker stop used a restart ({before} -> {restarts})")
        self.wait_running(time.time())
        redone = [step for _, step, _ in self.h.lines[seen:] if step <= stop_step]
        if redone:
            fail(f"after the clean stop at step {stop_step} the job trained steps {redone[0]}..{redone[-1]} again: "
                 "the stop did not checkpoint where it stopped")
        log(f"clean stop: the job resumed at step {stop_step + 1}, restarts still {restarts}")

    def storage(self):
        # The directory itself goes (its contents kept aside) and a file takes its place: the ranks
        # hold the directory open (they write through it, not through the path), so only a directory
        # that no longer exists fails their saves. Then it comes back, and they open it again.
        away = self.ckpt + ".away"
        t0 = time.time()
        os.mkdir(away)
        while True:  # a rank may create an entry between the moves and the rmdir: move it too
            for n in os.listdir(self.ckpt):
                os.rename(os.path.join(self.ckpt, n), os.path.join(away, n))
            try:
                os.rmdir(self.ckpt)
                break
            except OSError:
                continue
        with open(self.ckpt, "w") as f:
            f.write("the storage is gone for a while\n")
        self.wait(self.prof["outage"])
        os.remove(self.ckpt)
        os.mkdir(self.ckpt)
        for n in os.listdir(away):
            os.rename(os.path.join(away, n), os.path.join(self.ckpt, n))
        os.rmdir(away)
        return f"checkpoint directory unwritable for {self.prof['outage']:.0f} s", t0, None, time.time()

    def run(self, events, steps):
        for i, (kind, gap, frac) in enumerate(events, 1):
            self.wait(gap)
            at = int(frac * steps)
            if self.wait(300, lambda: self.h.max_step >= at) is None and self.h.max_step < at:
                fail(f"the job did not reach step {at} for event {i} within 300 s")
            st = self.state().get("state")
            if st == "SUCCEEDED":
                fail(f"the job finished before event {i} of {len(events)}: make it longer")
            what, t0, detected, after = getattr(self, kind.replace("-", "_"))()
            # After a restart: the new attempt's first step (the job turns RUNNING again at its first
            # step report); otherwise the first step recorded after the event.
            if isinstance(after, tuple):
                recovered = after[1]
            elif after is not None:
                recovered = self.wait_running(after)
            else:
                recovered = self.wait_attempt_running(detected or t0)
            if kind == "term-worker":
                self.check_term()
            step = self.h.last_step()
            self.report.append((what, t0, detected, recovered, step))
            det = f"{detected - t0:5.1f} s" if detected else "    - "
            log(f"event {i}/{len(events)}: {what}: detected {det}, first step after it {recovered - t0:5.1f} s "
                f"(history at step {step})")


def check_losses(history, ref, steps):
    seen = {}
    bad = []
    for _, step, loss in history.lines:
        if step not in ref:
            bad.append((step, loss, None))
        elif loss != ref[step]:
            bad.append((step, loss, ref[step]))
        seen[step] = loss
    if bad:
        fail(f"{len(bad)} recorded losses differ from the uninterrupted run, first (step, got, want): {bad[:3]}")
    missing = [s for s in range(1, steps + 1) if s not in seen]
    if missing:
        fail(f"{len(missing)} steps were never recorded, first {missing[:5]}")
    redone = len(history.lines) - steps
    log(f"losses: all {steps} steps equal the uninterrupted run bitwise ({redone} steps redone after resumes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="short")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "20261201")))
    ap.add_argument("--bin", default=os.environ.get("MOE_BIN", "build/bin"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if not os.path.exists("data/fortunes.idx"):
        fail("data/fortunes is not prepared: run make data (or make chaos) from the repository root")
    prof = PROFILES[args.profile]
    rng = random.Random(args.seed)
    events = plan_events(rng, prof)
    log(f"profile {args.profile}, seed {args.seed}: " + ", ".join(
        f"{k} after {g:.0f} s" + (f" past {f:.0%} of the job" if f else "") for k, g, f in events))
    work = tempfile.mkdtemp(prefix="moe-chaos.")
    cluster = Cluster(args.bin, work)
    ok = False
    try:
        ok = run(args, prof, events, rng, cluster, work)
    finally:
        cluster.stop_all()
        subprocess.run(["pkill", "-9", "-f", "--", f"--config {work}/"], check=False, stderr=subprocess.DEVNULL)
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"logs kept in {work}")


def run(args, prof, events, rng, cluster, work):
    steps, interval = prof["steps"], prof["interval"]
    if args.profile == "full":
        # Long enough for every event: a short calibration run gives this machine's step time; the job
        # must outlast the pauses plus about 20 s per event of detection, restart and redone steps (with
        # a fifth to spare; the reference run beside it slows it further).
        calib = reference_run(args, work, 20, interval)
        step_s = max(0.01, calib["seconds"] / 20)
        budget = sum(g for _, g, _ in events) + 20 * len(events)
        steps = max(300, int(1.2 * budget / step_s))
        log(f"the job: {steps} steps at about {step_s:.2f} s each (the events need about {budget:.0f} s)")
        ref_run = start_reference(args, work, steps, interval)  # beside the chaos job: it takes as long
    else:
        # The events come between 5 % and 55 % of the job, and the job trains on through the storage
        # outage and the pauses between events: on a fast machine 160 steps ended before the last
        # events (an 8 s outage at 50 % ran 70 steps). So the last 45 % must outlast the outage, every
        # pause and 8 s to spare, at this machine's step time (a 20-step calibration run).
        calib = reference_run(args, work, 20, interval)
        step_s = max(0.01, calib["seconds"] / 20)
        needed = prof["outage"] + sum(g for _, g, _ in events) + 8
        steps = max(steps, int(needed / step_s / 0.45))
        log(f"the job: {steps} steps at about {step_s:.2f} s each (after 55 % it must run {needed:.0f} s)")
        ref_run = None
        ref = reference_run(args, work, steps, interval)
    cluster.start_controller()
    for n in range(5):
        cluster.start_worker(f"w{n}")
    deadline = time.time() + 30
    while cluster.alive_workers() < 5:
        if time.time() > deadline:
            fail("5 workers did not register")
        time.sleep(0.2)
    ckpt = os.path.join(work, "ckpt")
    cfg = os.path.join(work, "chaos.yaml")
    write_job(cfg, "chaos", steps, interval, ckpt, 4)
    job_id = cluster.moectl("submit", "-f", cfg).strip()
    history = History(os.path.join(ckpt, "metrics.jsonl"))
    driver = Driver(cluster, job_id, history, ckpt, rng, prof)
    driver.wait_running(0)
    log(f"{job_id} runs; {len(events)} events follow")
    t_start = time.time()
    driver.run(events, steps)
    deadline = time.time() + 900
    while driver.state().get("state") != "SUCCEEDED":
        st = driver.state().get("state")
        if st in ("FAILED", "CANCELLED"):
            fail(f"the job ended {st}: {driver.state().get('message', '')}")
        if time.time() > deadline:
            fail(f"the job is {st} 900 s after the last event")
        driver.wait(0.5)
    history.poll()
    job = driver.state()
    log(f"{job_id} SUCCEEDED {time.time() - t_start:.0f} s after the first event, {job.get('restarts', 0)} restarts")
    if ref_run is not None:
        ref = finish_reference(ref_run, work)
    check_losses(history, ref, steps)
    skipped = sum(open(os.path.join(work, f)).read().count("not written (")
                  for f in os.listdir(work) if f.startswith("worker-"))
    if any(e[0] == "storage" for e in events):
        if skipped == 0:
            fail("the storage outage skipped no checkpoint: it did not exercise the skip path (longer outage?)")
        log(f"storage outage: {skipped} checkpoint(s) skipped with a warning, training went on")
    dets = [d - t for _, t, d, _, _ in driver.report if d is not None and d > t]
    recs = [r - t for _, t, _, r, _ in driver.report]
    log(f"detection: max {max(dets) if dets else 0:.1f} s; recovery (failure -> first step after it): "
        f"mean {sum(recs) / len(recs):.1f} s, max {max(recs):.1f} s")
    return True


if __name__ == "__main__":
    main()
