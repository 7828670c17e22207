"""The node agents (moe-worker) as the manifests start them: one agent per node owning the node's devices,
the memory it reports for the controller's fit check, its health endpoints behind the probes, its stop
grace inside the pod's, and, inside a Job, the entry that keeps Kueue's resume whole.
"""
import math
import re

from .objects import (STEP_ANNOTATION, as_dict, as_list, dicts, dig, flag, js_number, js_str, limits, quantity, requests,
                      runs_worker, through_pool_member)
from .pods import memory_volumes_bytes

GPU = 'nvidia.com/gpu'


def check_devices(r, pt, c, where):
    """--devices (GPU: every device the container sees) or --slots (CPU ranks), never the old per-device
    --device; a GPU agent requests GPUs, a CPU agent none and sits alone on its node (anti-affinity)."""
    devices, slots = flag(c, 'devices'), flag(c, 'slots')
    if flag(c, 'device') is not None:
        r.error(f'{where}: --device (one agent per device): one agent per node takes --devices all (GPU) or --slots N (CPU)')
    if (devices is None) == (slots is None):
        r.error(f'{where}: exactly one of --devices and --slots')
        return
    gpus = quantity(next((v for v in (requests(c).get(GPU), limits(c).get(GPU)) if v is not None), 0))
    if devices is not None and not gpus > 0:
        r.error(f'{where}: --devices={devices} but the container requests no {GPU}: it would see no GPU')
    if slots is not None:
        if not re.fullmatch('[1-9][0-9]*', slots):
            r.error(f'{where}: --slots={slots} is not a positive integer')
        if gpus > 0:
            r.error(f'{where}: --slots (CPU ranks) in a container that requests {GPU}: use --devices')
        if not host_anti_affinity(pt):
            r.error(f'{pt.where}: CPU agents (--slots) without a required pod anti-affinity on kubernetes.io/hostname: two could share a node\'s CPUs')


def host_anti_affinity(pt):
    terms = dicts(dig(pt.pod, 'affinity', 'podAntiAffinity', 'requiredDuringSchedulingIgnoredDuringExecution'))
    return any(t.get('topologyKey') == 'kubernetes.io/hostname' and
               all(pt.labels.get(k) == v for k, v in as_dict(dig(t, 'labelSelector', 'matchLabels')).items())
               for t in terms)


def check_memory(r, pt, c, where):
    """--memory-gb (per rank) so that the controller's fit check works; CPU ranks and /dev/shm inside the limit."""
    gb = js_number(flag(c, 'memory-gb'))
    if not gb > 0:
        r.error(f"{where}: no --memory-gb (the memory each rank may use): the controller's fit check is off")
        return
    slots = js_number(flag(c, 'slots'))
    if not slots > 0:
        return
    need = slots * gb * 1e9 + memory_volumes_bytes(pt.pod)
    limit = limits(c).get('memory')
    if need > quantity(0 if limit is None else limit):
        r.error(f'{where}: --slots {js_str(slots)} x --memory-gb {js_str(gb)} GB + memory-backed volumes = '
                f'{need / 2 ** 30:.1f} GiB > the memory limit {js_str(limit)}')


def check_health(r, c, where):
    """--health-listen serves /healthz (liveness) and /readyz (readiness) on a declared port."""
    listen = flag(c, 'health-listen')
    if not listen:
        r.error(f'{where}: no --health-listen (the agent\'s /healthz and /readyz for the probes)')
        return
    port = js_number(listen.split(':')[-1])
    named = next((p for p in dicts(c.get('ports')) if p.get('containerPort') == port), None)
    if named is None:
        r.error(f'{where}: --health-listen {listen}: port {js_str(port)} is not a container port')
        return

    def probe_ok(probe, path):
        get = as_dict(dig(c, probe, 'httpGet'))
        return get.get('path') == path and get.get('port') in (port, named.get('name'))
    if not probe_ok('livenessProbe', '/healthz'):
        r.error(f'{where}: livenessProbe is not GET /healthz on the --health-listen port {js_str(port)}')
    if not probe_ok('readinessProbe', '/readyz'):
        r.error(f'{where}: readinessProbe is not GET /readyz on the --health-listen port {js_str(port)} (ready = registered with the controller)')


def check_grace(r, pt, c, where):
    """The pod's grace covers the agent's stop grace plus the longest step (the pool's annotation)."""
    stop_flag = flag(c, 'stop-grace-seconds')
    stop = js_number(30 if stop_flag is None else stop_flag)
    if not math.isfinite(stop):
        r.error(f'{where}: --stop-grace-seconds {stop_flag} is not a number (an unset env variable?)')
        return
    grace = dig(pt.pod, 'terminationGracePeriodSeconds', default=30)
    step_text = pt.annotations.get(STEP_ANNOTATION)
    step = js_number(0 if step_text is None else step_text)
    if pt.job is not None and step_text is None:
        r.error(f'{pt.where}: no {STEP_ANNOTATION} annotation (the longest step its jobs take, which terminationGracePeriodSeconds must cover)')
    if not js_number(grace) > stop + step:
        r.error(f'{pt.where}: terminationGracePeriodSeconds {js_str(grace)} does not exceed --stop-grace-seconds {js_str(stop)} + '
                f'the longest step {js_str(step)} s: the kubelet would kill ranks before their stop checkpoint')


def ignores_143(job, container):
    """Whether the Job's podFailurePolicy Ignores exit code 143 of this container."""
    for rule in dicts(dig(job, 'podFailurePolicy', 'rules')):
        codes = as_dict(rule.get('onExitCodes'))
        if (rule.get('action') == 'Ignore' and codes.get('operator') == 'In' and 143 in as_list(codes.get('values'))
                and codes.get('containerName') in (None, container)):
            return True
    return False


def check_job_entry(r, pt, c, where):
    """Inside a Job (a pool), moe-worker's clean exit 0 would count its index done, and Kueue's resume would
    not start it again: moe-pool-member runs it and exits 143 instead, which the Job must ignore."""
    if pt.job is None:
        return
    if not through_pool_member(c):
        r.error(f"{where}: moe-worker in a Job without /usr/local/bin/moe-pool-member: its exit 0 after SIGTERM would mark the agent done, "
                "and Kueue's resume would not start it again")
        return
    restart = pt.pod.get('restartPolicy')
    if restart != 'Never':
        r.error(f"{pt.where}: restartPolicy {'(unset)' if restart is None else js_str(restart)}: a pool's podFailurePolicy needs Never")
    if not ignores_143(pt.job, c.get('name')):
        r.error(f"{pt.where}: podFailurePolicy does not Ignore exit code 143 of container {js_str(c.get('name'))}: every clean leave "
                "(Kueue suspending the pool) would count against the retries")


def check_workers(r, pt):
    for c in pt.containers:
        if not runs_worker(c):
            continue
        where = f"{pt.where} container {js_str(c.get('name'))}"
        if pt.job is None:
            r.error(f'{where}: node agents outside a Job: a pool is a JobSet admitted by Kueue (a {js_str(pt.owner.get("kind"))} '
                    'holds its nodes where Kueue cannot see or reclaim them)')
        check_devices(r, pt, c, where)
        check_memory(r, pt, c, where)
        check_health(r, c, where)
        check_grace(r, pt, c, where)
        check_job_entry(r, pt, c, where)
