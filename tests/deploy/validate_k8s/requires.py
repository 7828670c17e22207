"""What a render must CONTAIN (validate_k8s.py --require WHAT; k8s_test.sh passes them per overlay). A missing
one fails; each checks presence, the other checks check correctness.
  pool:KIND/NAME[:LEVEL]   a worker pool KIND/NAME with the kueue.x-k8s.io/queue-name label and, given
                           LEVEL, a Kueue topology request (required, preferred or slice) on that node label
  compute-domain:KIND/NAME a ComputeDomain whose channel template KIND/NAME's pods claim, in every container
  rdma:KIND/NAME           every container of KIND/NAME's pods requests an RDMA resource and holds IPC_LOCK,
                           and the pod template names its Multus networks
  monitoring               a ServiceMonitor or PodMonitor of moe-controller, and a PrometheusRule
  dashboards               a ConfigMap for Grafana's dashboard sidecar (label grafana_dashboard)
  ha                       the controller as a leader and standbys: 2 replicas or more on --store etcd://,
                           readiness GET /readyz (the leader's alone), one per node (required pod
                           anti-affinity on kubernetes.io/hostname)
  etcd:KIND/NAME           KIND/NAME runs etcd, 3 members or more, one per node, with --max-txn-ops and
                           --max-request-bytes, and the controllers' --store names its members (ha.py checks
                           the values, the quorum, the names and who may reach it)
"""
from .ha import etcd_endpoints, runs_etcd, store_of
from .kueue import TAS
from .objects import MULTUS, QUEUE_LABEL, dicts, dig, flag, js_str, limits, requests, truthy
from .pods import cd_claims, has_cap, is_rdma
from .tls import runs_controller
from .workers import host_anti_affinity

KINDS = 'pool:KIND/NAME[:LEVEL], compute-domain:KIND/NAME, rdma:KIND/NAME, monitoring, dashboards, ha, etcd:KIND/NAME'


def templates_of(r, what, ref):
    kind, _, name = ref.partition('/')
    name = name.split('/')[0] if name else None
    pts = [pt for pt in r.pod_templates() if pt.owner.get('kind') == kind and dig(pt.owner, 'metadata', 'name') == name]
    if not pts:
        r.error(f'--require {what}:{ref}: no {ref} is rendered')
    return pts


def require_pool(r, req, ref, level):
    for pt in templates_of(r, 'pool', ref):
        if not truthy(dig(pt.owner, 'metadata', 'labels', QUEUE_LABEL)):
            r.error(f'--require {req}: {ref} has no {QUEUE_LABEL} label')
        if not level:
            continue
        if not any(pt.annotations.get(k) == level for k in (TAS.required, TAS.preferred, TAS.slice_required)):
            r.error(f'--require {req}: {pt.where} has no Kueue topology request on {level} '
                    f'({TAS.required}, {TAS.preferred} or {TAS.slice_required})')


def require_compute_domain(r, req, ref, cd_by_template):
    if not r.by_kind('ComputeDomain'):
        r.error(f'--require {req}: the render has no ComputeDomain (multi-node NVLink needs one: '
                'deploy/k8s/overlays/gb300-nvl72/pool/computedomain.yaml)')
        return
    for pt in templates_of(r, 'compute-domain', ref):
        domains = cd_claims(pt, cd_by_template)
        if not domains:
            r.error(f"--require {req}: {pt.where}'s pod template claims no ComputeDomain's channel template "
                    '(spec.resourceClaims[].resourceClaimTemplateName)')
            continue
        for c in pt.containers:
            if not any(cl.get('name') in domains for cl in dicts(dig(c, 'resources', 'claims'))):
                r.error(f"--require {req}: container {js_str(c.get('name'))} does not list the ComputeDomain claim "
                        f"({', '.join(map(js_str, domains))}) in resources.claims")


def require_rdma(r, req, ref):
    for pt in templates_of(r, 'rdma', ref):
        if not truthy(pt.annotations.get(MULTUS)):
            r.error(f"--require {req}: {pt.where}'s pod template has no {MULTUS} annotation (the RDMA networks)")
        for c in pt.containers:
            if not any(is_rdma(str(k)) for k in {**requests(c), **limits(c)}):
                r.error(f"--require {req}: container {js_str(c.get('name'))} requests no RDMA resource")
            if not has_cap(c, 'IPC_LOCK'):
                r.error(f"--require {req}: container {js_str(c.get('name'))} lacks capability IPC_LOCK")


def require_monitoring(r, req):
    monitors = [m for m in r.by_kind('ServiceMonitor') + r.by_kind('PodMonitor')
                if dig(m, 'spec', 'selector', 'matchLabels', 'app.kubernetes.io/name') == 'moe-controller']
    if not monitors:
        r.error(f'--require {req}: no ServiceMonitor or PodMonitor of moe-controller')
    if not r.by_kind('PrometheusRule'):
        r.error(f'--require {req}: the render has no PrometheusRule')


def require_dashboards(r, req):
    if not any(dig(c, 'metadata', 'labels', 'grafana_dashboard') is not None for c in r.by_kind('ConfigMap')):
        r.error(f'--require {req}: no ConfigMap labelled grafana_dashboard')


def controllers(r):
    """(pod template, container) of every moe-controller of the render."""
    return [(pt, c) for pt in r.pod_templates() for c in pt.containers if runs_controller(c)]


def require_ha(r, req):
    found = controllers(r)
    if not found:
        r.error(f'--require {req}: no moe-controller is rendered')
    for pt, c in found:
        replicas = dig(pt.owner, 'spec', 'replicas', default=1)
        if not (isinstance(replicas, int) and replicas >= 2):
            r.error(f'--require {req}: {pt.where} has {js_str(replicas)} replica(s), not 2 or more (a leader and a standby)')
        if not store_of(c).startswith('etcd://'):
            r.error(f'--require {req}: {pt.where} runs without --store etcd://... (the embedded SQLite store has no standby)')
        if dig(c, 'readinessProbe', 'httpGet', 'path') != '/readyz':
            r.error(f"--require {req}: {pt.where}'s readinessProbe is not GET /readyz (ready = leading)")
        if not host_anti_affinity(pt):
            r.error(f'--require {req}: {pt.where} without a required pod anti-affinity on kubernetes.io/hostname: the leader and '
                    'its standby could share a node, and fail with it')


def require_etcd(r, req, ref):
    for pt in templates_of(r, 'etcd', ref):
        members = [c for c in pt.containers if runs_etcd(c)]
        if not members:
            r.error(f'--require {req}: {pt.where} runs no etcd (a container whose command is etcd)')
            continue
        replicas = dig(pt.owner, 'spec', 'replicas', default=1)
        if not (isinstance(replicas, int) and replicas >= 3):
            r.error(f'--require {req}: {pt.where} has {js_str(replicas)} member(s), not 3 or more (a quorum that outlives a member)')
        for c in members:
            for name in ('max-txn-ops', 'max-request-bytes'):
                if flag(c, name) is None:
                    r.error(f'--require {req}: container {js_str(c.get("name"))} runs etcd without --{name}')
        if not host_anti_affinity(pt):
            r.error(f'--require {req}: {pt.where} without a required pod anti-affinity on kubernetes.io/hostname: two members could '
                    "share a node, and a node's loss take the quorum")
        name = js_str(dig(pt.owner, 'metadata', 'name'))
        if not any(host.startswith(f'{name}-') for _, c in controllers(r) if store_of(c).startswith('etcd://')
                   for host, _ in etcd_endpoints(store_of(c))):
            r.error(f"--require {req}: no controller's --store names the members of {pt.where}")


def check_requires(r, reqs, ctx):
    for req in reqs:
        what, *rest = req.split(':')
        ref = rest[0] if rest else None
        level = rest[1] if len(rest) > 1 else None
        if what == 'pool' and ref:
            require_pool(r, req, ref, level)
        elif what == 'compute-domain' and ref:
            require_compute_domain(r, req, ref, ctx.cd_by_template)
        elif what == 'rdma' and ref:
            require_rdma(r, req, ref)
        elif what == 'monitoring' and not ref:
            require_monitoring(r, req)
        elif what == 'dashboards' and not ref:
            require_dashboards(r, req)
        elif what == 'ha' and not ref:
            require_ha(r, req)
        elif what == 'etcd' and ref:
            require_etcd(r, req, ref)
        else:
            r.error(f'--require {req}: unknown requirement ({KINDS})')
