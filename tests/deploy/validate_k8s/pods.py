"""Pod templates, checked where the schemas cannot: references that must resolve, DRA claims, container
resources, capabilities, Multus, probes, QoS. Each function takes the Render and one pod template
(objects.PodTemplate) and adds errors to the Render.
"""
import json
import math
import re

from .objects import (MULTUS, QUEUE_LABEL, as_dict, as_list, containers_of, dicts, dig, env_value, id_of, is_obj,
                      is_sidecar, js_join, js_str, limits, ns_of, quantity, requests, runs_worker, to_json, truthy)
from .schemas import check_schema, dns_label, dns_subdomain

# Created by the user, not rendered: documented in deploy/k8s/base/kustomization.yaml and the docs.
EXTERNAL = {'Secret': ('moe-tokens',)}
PROBES = ('livenessProbe', 'readinessProbe', 'startupProbe')


def is_rdma(resource):
    """RDMA devices come as extended resources named for them (the Network Operator's RDMA shared device
    plugin: rdma/<name>; add other naming schemes here)."""
    return re.search('rdma', resource, re.IGNORECASE) is not None


def is_extended(resource):
    """Extended resources (a domain-prefixed name) and hugepages cannot be overcommitted: limit = request."""
    return resource.startswith('hugepages-') or ('/' in resource and not resource.startswith('kubernetes.io/'))


def has_cap(c, cap):
    return any(x in (cap, f'CAP_{cap}') for x in as_list(dig(c, 'securityContext', 'capabilities', 'add')))


def claim_templates(r):
    """The claim templates a pod may name: a ComputeDomain's channel template (made by the DRA driver in the
    ComputeDomain's namespace) or a rendered ResourceClaimTemplate. Returns "<ns>/<template>" -> ComputeDomain."""
    by_template = {}
    for cd in r.by_kind('ComputeDomain'):
        t = dig(cd, 'spec', 'channel', 'resourceClaimTemplate', 'name')
        if not isinstance(t, str):
            continue
        key = f'{ns_of(cd)}/{t}'
        if key in by_template:
            r.error(f"{id_of(cd)}: channel template {t} is also {id_of(by_template[key])}'s: one template per ComputeDomain")
        else:
            by_template[key] = cd
    return by_template


def cd_claims(pt, cd_by_template):
    """The pod template's ComputeDomain claims: claim name -> ComputeDomain."""
    out = {}
    for rc in dicts(pt.pod.get('resourceClaims')):
        cd = cd_by_template.get(f"{ns_of(pt.owner)}/{js_str(rc.get('resourceClaimTemplateName'))}")
        if cd is not None:
            out[rc.get('name')] = cd
    return out


def has(r, kind, name):
    """KIND/NAME is rendered, documented (EXTERNAL), or, for a Secret, made by cert-manager from a rendered
    Certificate (its spec.secretName)."""
    return (any(dig(o, 'metadata', 'name') == name for o in r.by_kind(kind)) or name in EXTERNAL.get(kind, ())
            or (kind == 'Secret' and any(dig(c, 'spec', 'secretName') == name for c in r.by_kind('Certificate'))))


def check_selector(r, pt):
    for k, v in as_dict(dig(pt.owner, 'spec', 'selector', 'matchLabels')).items():
        if pt.labels.get(k) != v:
            r.error(f"{pt.where}: selector {k}={js_str(v)} does not match the pod template's labels")


def check_references(r, pt):
    pod = pt.pod
    sa = pod.get('serviceAccountName')
    if truthy(sa) and sa != 'default' and not has(r, 'ServiceAccount', sa):
        r.error(f'{pt.where}: ServiceAccount {sa} is not rendered')
    for v in dicts(pod.get('volumes')):
        name = js_str(v.get('name'))
        cm, secret, pvc = (dig(v, k) for k in ('configMap', 'secret', 'persistentVolumeClaim'))
        if is_obj(cm) and not has(r, 'ConfigMap', cm.get('name')):
            r.error(f"{pt.where}: volume {name}: ConfigMap {js_str(cm.get('name'))} is not rendered")
        if is_obj(secret) and not has(r, 'Secret', secret.get('secretName')):
            r.error(f"{pt.where}: volume {name}: Secret {js_str(secret.get('secretName'))} is neither rendered nor documented")
        if is_obj(pvc) and not has(r, 'PersistentVolumeClaim', pvc.get('claimName')):
            r.error(f"{pt.where}: volume {name}: PVC {js_str(pvc.get('claimName'))} is not rendered")
    pc = pod.get('priorityClassName')
    if not truthy(pc):
        r.error(f'{pt.where}: no priorityClassName (a pod without one has priority 0: the first a node under pressure gives up)')
    elif not js_str(pc).startswith('system-') and not has(r, 'PriorityClass', pc):
        r.error(f'{pt.where}: PriorityClass {js_str(pc)} is not rendered')


def check_pod_claims(r, pt, ctx):
    """Pod resourceClaims (DRA), strictly: Kubernetes' strict schema rejects an unknown field too, these say
    what a claim must be and check what it names. Returns claim name -> {'used': False} for
    check_container_resources to mark."""
    claims = pt.pod.get('resourceClaims')
    pod_claims = {}
    if claims is not None and not isinstance(claims, list):
        r.error(f'{pt.where}: spec.resourceClaims must be a list')
    for i, rc in enumerate(as_list(claims)):
        where = f'{pt.where}: resourceClaims[{i}]'
        if not is_obj(rc):
            r.error(f'{where} must be an object')
            continue
        for k in rc:
            if k not in ('name', 'resourceClaimName', 'resourceClaimTemplateName'):
                r.error(f'{where}: unknown field {k} (allowed: name, resourceClaimName, resourceClaimTemplateName)')
        out = []
        check_schema(dns_label, rc.get('name'), f'{where}.name', out)
        for e in out:
            r.error(e)
        if rc.get('name') in pod_claims:
            r.error(f"{where}: claim name {js_str(rc.get('name'))} appears twice")
        pod_claims[rc.get('name')] = {'used': False}
        check_claim_source(r, pt, rc, where, ctx)
    return pod_claims


def check_claim_source(r, pt, rc, where, ctx):
    by_name, by_template = rc.get('resourceClaimName') is not None, rc.get('resourceClaimTemplateName') is not None
    name = js_str(rc.get('name'))
    if by_name == by_template:
        r.error(f'{where} ({name}): exactly one of resourceClaimName and resourceClaimTemplateName must be set')
        return
    ns = ns_of(pt.owner)
    if by_name:
        if r.find('ResourceClaim', rc['resourceClaimName'], ns) is None:
            r.error(f"{where} ({name}): ResourceClaim {js_str(rc['resourceClaimName'])} is not rendered")
        return
    tn = rc['resourceClaimTemplateName']
    if not isinstance(tn, str):
        r.error(f'{where}.resourceClaimTemplateName must be a string')
        return
    key = f'{ns}/{tn}'
    if key in ctx.cd_by_template:
        ctx.claimed_templates.add(key)
    elif r.find('ResourceClaimTemplate', tn, ns) is None:
        known = [k.split('/')[1] for k in ctx.cd_by_template]
        r.error(f"{where} ({name}): resourceClaimTemplateName {tn} is neither the channel template of a rendered ComputeDomain"
                f" in namespace {ns or '(none)'} ({', '.join(known) if known else 'none rendered'}) nor a rendered ResourceClaimTemplate")


def check_container_basics(r, pt, c, volumes):
    where = f"{pt.where} container {js_str(c.get('name'))}"
    if dig(c, 'resources', 'requests') is None or dig(c, 'resources', 'limits') is None:
        r.error(f'{where}: resources.requests and .limits are required')
    for m in dicts(c.get('volumeMounts')):
        if m.get('name') not in volumes:
            r.error(f"{where}: volumeMount {js_str(m.get('name'))} has no volume")
    for e in dicts(c.get('env')):
        s, m = dig(e, 'valueFrom', 'secretKeyRef'), dig(e, 'valueFrom', 'configMapKeyRef')
        if is_obj(s) and not has(r, 'Secret', s.get('name')):
            r.error(f"{where}: env {js_str(e.get('name'))}: Secret {js_str(s.get('name'))} is neither rendered nor documented")
        if is_obj(m) and not has(r, 'ConfigMap', m.get('name')):
            r.error(f"{where}: env {js_str(e.get('name'))}: ConfigMap {js_str(m.get('name'))} is not rendered")
    ports = [x for p in dicts(c.get('ports')) for x in (p.get('name'), p.get('containerPort'))]
    for probe in PROBES:
        p = c.get(probe)
        port = dig(p, 'grpc', 'port', default=dig(p, 'httpGet', 'port', default=dig(p, 'tcpSocket', 'port')))
        if truthy(p) and port is not None and port not in ports:
            r.error(f'{where}: {probe} port {js_str(port)} is not a container port')


def check_resource_claims(r, where, res, pod_claims):
    """A container's resources.claims, strictly: each names one of the pod's resourceClaims, once."""
    claim_names = []
    if res.get('claims') is not None and not isinstance(res.get('claims'), list):
        r.error(f'{where}: resources.claims must be a list')
    for i, cl in enumerate(as_list(res.get('claims'))):
        if not is_obj(cl):
            r.error(f'{where}: resources.claims[{i}] must be an object')
            continue
        for k in cl:
            if k not in ('name', 'request'):
                r.error(f'{where}: resources.claims[{i}].{k}: unknown field (allowed: name, request)')
        name = cl.get('name')
        if name in claim_names:
            r.error(f'{where}: resources.claims names {js_str(name)} twice')
        claim_names.append(name)
        if name not in pod_claims:
            r.error(f"{where}: resources.claims[{i}].name {js_str(name)} is not among the pod's resourceClaims "
                    f"({js_join(pod_claims, ', ') or 'none'})")
        else:
            pod_claims[name]['used'] = True
    return claim_names


def check_container_resources(r, pt, c, pod_claims):
    """resources, strictly: requests, limits, claims; extended resources and hugepages with limit = request
    (the API server refuses otherwise). Returns the names the container claims."""
    where = f"{pt.where} container {js_str(c.get('name'))}"
    res = as_dict(c.get('resources'))
    for k in res:
        if k not in ('requests', 'limits', 'claims'):
            r.error(f'{where}: resources.{k}: unknown field (allowed: requests, limits, claims)')
    claim_names = check_resource_claims(r, where, res, pod_claims)
    req, lim = requests(c), limits(c)
    for k in dict.fromkeys([*req, *lim]):
        if not is_extended(str(k)):
            continue
        if lim.get(k) is None:
            r.error(f'{where}: {k} is requested without a limit (extended resources need limit = request)')
        elif req.get(k) is not None and quantity(req[k]) != quantity(lim[k]):
            r.error(f'{where}: {k} request {js_str(req[k])} != limit {js_str(lim[k])} (extended resources cannot be overcommitted)')
    return claim_names


def check_container_privileges(r, pt, c, claim_names, domains):
    """Capabilities: every container drops ALL; RDMA needs IPC_LOCK; NCCL_MNNVL_ENABLE=1 needs an IMEX channel."""
    where = f"{pt.where} container {js_str(c.get('name'))}"
    rdma = [k for k in {**requests(c), **limits(c)} if is_rdma(str(k))]
    if rdma and not has_cap(c, 'IPC_LOCK') and dig(c, 'securityContext', 'privileged') is not True:
        r.error(f"{where}: requests {', '.join(rdma)} but securityContext.capabilities.add lacks IPC_LOCK (RDMA memory registration pins memory)")
    if 'ALL' not in as_list(dig(c, 'securityContext', 'capabilities', 'drop')):
        r.error(f'{where}: securityContext.capabilities.drop must include ALL')
    if js_str(env_value(c, 'NCCL_MNNVL_ENABLE')) == '1':
        if not any(n in domains for n in claim_names):
            r.error(f"{where}: NCCL_MNNVL_ENABLE=1 but the container claims no ComputeDomain channel (resources.claims naming a pod "
                    "resourceClaim whose template is a ComputeDomain's): NCCL would fail to initialise")
        if js_str(env_value(c, 'NCCL_CUMEM_ENABLE')) == '0':
            r.error(f'{where}: NCCL_MNNVL_ENABLE=1 needs NCCL_CUMEM_ENABLE (it is 0)')


def check_worker_names(r, pt):
    """Several moe-workers in one pod need distinct --name (the default <node>-<device> repeats)."""
    workers = [c for c in pt.containers if runs_worker(c)]
    if len(workers) < 2:
        return
    seen = {}
    for c in workers:
        n = next((a[len('--name='):] for a in as_list(c.get('args')) if isinstance(a, str) and a.startswith('--name=')), None)
        if n is None:
            r.error(f"{pt.where} container {js_str(c.get('name'))}: one of {len(workers)} moe-worker containers without --name "
                    "(the default <node>-<device> would repeat)")
        elif n in seen:
            r.error(f"{pt.where} containers {js_str(seen[n])} and {js_str(c.get('name'))}: the same --name={n}")
        else:
            seen[n] = c.get('name')


def multus_entries(r, where, nets):
    """k8s.v1.cni.cncf.io/networks is "[ns/]name[@if], ..." or a JSON list of {name, namespace?, interface?}:
    its entries as {'ns', 'name'}, or {'bad': text}."""
    if not isinstance(nets, str):
        r.error(f'{where} must be a string')
        return []
    if not nets.strip().startswith('['):
        out = []
        for s in (s.strip() for s in nets.split(',')):
            m = re.fullmatch(r'(?:([^/@]+)/)?([^/@]+)(?:@([^/@]+))?', s)
            out.append({'ns': m[1], 'name': m[2]} if m else {'bad': s})
        return out
    try:
        networks = json.loads(nets, parse_constant=_no_constant)
        if not isinstance(networks, list):
            raise ValueError('not a list')
        return [{'ns': e.get('namespace'), 'name': e.get('name')} if is_obj(e) else {'bad': to_json(e)} for e in networks]
    except ValueError as e:
        r.error(f'{where}: not a JSON list of networks ({e})')
        return []


def _no_constant(name):
    raise ValueError(f'{name} is not JSON')


def check_multus(r, pt):
    nets = pt.annotations.get(MULTUS)
    if nets is None:
        return
    where = f'{pt.where}: annotation {MULTUS}'
    entries = multus_entries(r, where, nets)
    placeholders = []
    for e in entries:
        if 'bad' in e:
            r.error(f"{where}: entry {e['bad']} is not [namespace/]name[@interface]")
            continue
        out = []
        check_schema(dns_subdomain, e['name'], f'{where}: network name', out)
        if e['ns'] is not None:
            check_schema(dns_label, e['ns'], f'{where}: network namespace', out)
        for x in out:
            r.error(x)
        if isinstance(e['name'], str) and e['name'].startswith('edit-me'):
            placeholders.append(e['name'])
    if placeholders:
        r.note(f"{pt.where}: Multus networks {', '.join(placeholders)} are placeholders: name your NetworkAttachmentDefinitions before applying")
    if not entries and isinstance(nets, str):
        r.error(f'{where} names no network')


def is_long_running(pt):
    """Long-running pods have liveness and readiness probes on every container. Exempt: Jobs outside Kueue
    (one-shot: a liveness restart of the demo's submit Job would submit twice)."""
    return (pt.job is None or dig(pt.owner, 'metadata', 'labels', QUEUE_LABEL) is not None
            or any(runs_worker(c) for c in pt.containers))


def check_probes(r, pt):
    """Init containers take no probes at all (the API server refuses them), sidecars (restartPolicy Always) do."""
    pod = pt.pod
    for c in dicts(pod.get('initContainers')):
        if is_sidecar(c):
            continue
        for p in PROBES:
            if truthy(c.get(p)):
                r.error(f"{pt.where} init container {js_str(c.get('name'))}: {p} (init containers take none; the API server refuses it)")
    if not is_long_running(pt):
        return
    probed = [c for c in dicts(pod.get('initContainers')) if is_sidecar(c)] + pt.containers
    for c in probed:
        for p in ('livenessProbe', 'readinessProbe'):
            if not truthy(c.get(p)):
                r.error(f"{pt.where} container {js_str(c.get('name'))}: no {p}")


def check_qos(r, pt):
    """Guaranteed QoS: every container, init containers too, with cpu and memory limits equal to requests."""
    for c in containers_of(pt.pod):
        for k in ('cpu', 'memory'):
            req, lim = requests(c).get(k), limits(c).get(k)
            if lim is None:
                r.error(f"{pt.where} container {js_str(c.get('name'))}: no {k} limit: not Guaranteed QoS")
            elif req is not None and quantity(req) != quantity(lim):
                r.error(f"{pt.where} container {js_str(c.get('name'))}: {k} request {js_str(req)} != limit {js_str(lim)}: not Guaranteed QoS")


def memory_volumes_bytes(pod):
    """Memory-backed emptyDirs (/dev/shm) are tmpfs charged to the pod's memory cgroup."""
    return sum(quantity(dig(v, 'emptyDir', 'sizeLimit', default=math.nan))
               for v in dicts(pod.get('volumes')) if dig(v, 'emptyDir', 'medium') == 'Memory')


def check_memory_volumes(r, pt):
    """Each memory-backed volume needs a sizeLimit, and together they must fit inside the containers' memory
    limits with room to spare."""
    pod = pt.pod
    for v in dicts(pod.get('volumes')):
        if dig(v, 'emptyDir', 'medium') == 'Memory' and dig(v, 'emptyDir', 'sizeLimit') is None:
            r.error(f"{pt.where}: memory-backed volume {js_str(v.get('name'))} has no sizeLimit (tmpfs may take the whole memory limit)")
    shm = memory_volumes_bytes(pod)
    mem = sum(quantity(dig(c, 'resources', 'limits', 'memory', default=0)) for c in pt.containers)
    if shm > 0 and not shm < mem:
        r.error(f"{pt.where}: memory-backed volumes ({js_str(shm / 2 ** 30)} GiB) do not fit inside the containers' memory limits "
                f"({js_str(mem / 2 ** 30)} GiB): tmpfs pages count against the limit")


def check_containers(r, pt, ctx):
    pod_claims = check_pod_claims(r, pt, ctx)
    domains = cd_claims(pt, ctx.cd_by_template)
    # A StatefulSet's volumeClaimTemplates are volumes of its pods too (one claim per pod, by that name).
    claims = dicts(dig(pt.owner, 'spec', 'volumeClaimTemplates')) if pt.owner.get('kind') == 'StatefulSet' else []
    volumes = [v.get('name') for v in dicts(pt.pod.get('volumes'))] + [dig(t, 'metadata', 'name') for t in claims]
    names = []
    for c in containers_of(pt.pod):
        if c.get('name') in names:
            r.error(f"{pt.where}: container name {js_str(c.get('name'))} appears twice")
        names.append(c.get('name'))
        check_container_basics(r, pt, c, volumes)
        claim_names = check_container_resources(r, pt, c, pod_claims)
        check_container_privileges(r, pt, c, claim_names, domains)
    for name, claim in pod_claims.items():
        if not claim['used']:
            r.error(f'{pt.where}: resourceClaims {js_str(name)} is claimed by no container (resources.claims)')


def check_pod_template(r, pt, ctx):
    """All pod-template checks; ctx carries what spans templates (claim templates, which were claimed)."""
    check_selector(r, pt)
    check_references(r, pt)
    check_containers(r, pt, ctx)
    check_worker_names(r, pt)
    check_multus(r, pt)
    check_probes(r, pt)
    check_qos(r, pt)
    check_memory_volumes(r, pt)


def check_domains_claimed(r, ctx):
    """Every ComputeDomain is claimed by some rendered pod template."""
    for cd in r.by_kind('ComputeDomain'):
        template = js_str(dig(cd, 'spec', 'channel', 'resourceClaimTemplate', 'name'))
        if f'{ns_of(cd)}/{template}' not in ctx.claimed_templates:
            r.error(f"{id_of(cd)}: no rendered pod template claims its channel template {template} in namespace {ns_of(cd) or '(none)'}")


def check_one_image(r):
    """One image for the controller, the pools and the tools: a pool applied on its own (an extra pool) must
    name the same registry and tag as the overlay it joins."""
    images = {}
    for pt in r.pod_templates():
        for c in containers_of(pt.pod):
            if isinstance(c.get('image'), str) and 'moe-orchestrator' in c['image']:
                images[c['image']] = f"{pt.where} container {js_str(c.get('name'))}"
    if len(images) > 1:
        r.error(f"more than one moe-orchestrator image: {', '.join(f'{i} ({w})' for i, w in images.items())}")
