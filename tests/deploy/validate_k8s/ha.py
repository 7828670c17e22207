"""The controller's store and its standbys: what makes `moe-controller --store etcd://...` with several
replicas work, and what breaks it, in every render.

  - A controller on the embedded SQLite store (no --store, or --store sqlite) is one replica: a second
    would be a second writer of one database (the base's Recreate, its PVC).
  - A controller on etcd: its readinessProbe is GET /readyz, the leader's alone (the Service then sends
    the clients to the leader), and no startupProbe is /readyz (a standby never passes it, and would be
    killed at the end of the startup window); --leader-lease-seconds within 2..60; --advertise-address
    no wildcard. Its --store endpoints that name a rendered Service name members of the StatefulSet
    behind it (a headless Service that publishes not-ready addresses), every member of it, on its client
    port, and a NetworkPolicy admits the controller's pods there. An endpoint that names nothing rendered
    is an etcd outside the render (a NOTE), unless the render has an etcd of its own (an error: a typo).
  - An etcd member (a container running etcd): --max-txn-ops >= 10000 and --max-request-bytes >= 32 MiB
    (a scheduling pass is one transaction), auto-compaction on (the controller never compacts), its
    listeners on the pod's own IP or loopback; in a StatefulSet, an odd number of replicas, started in
    Parallel, --name from the pod's name, --initial-cluster naming exactly its pods with the peer URL each
    advertises, a NetworkPolicy admitting the members to each other's peer port (when one governs them),
    and a PodDisruptionBudget that keeps a quorum.
"""
import math
import re

from .netpol import admitted, check_bind, peer_admits, split_listen, is_wildcard
from .objects import as_dict, as_list, containers_of, dicts, dig, flag, id_of, js_number, js_str, ns_of
from .tls import runs_controller

MIN_TXN_OPS = 10000
MIN_REQUEST_BYTES = 33554432
ETCD_LISTEN_FLAGS = ('listen-client-urls', 'listen-peer-urls', 'listen-metrics-urls')


def runs_etcd(c):
    command = [js_str(w) for w in as_list(c.get('command'))]
    return bool(command) and (command[0] == 'etcd' or command[0].endswith('/etcd'))


def store_of(c):
    """The controller's --store: 'sqlite' (the default) or the etcd:// text."""
    return flag(c, 'store') or 'sqlite'


def etcd_endpoints(store):
    """etcd://h:p,h:p/prefix -> [(host, port)] (port None where absent or not a number)."""
    rest = store[len('etcd://'):]
    hosts = rest.split('/', 1)[0]
    out = []
    for e in filter(None, hosts.split(',')):
        host, _, port = e.rpartition(':')
        out.append((host or e, int(port) if port.isdigit() else None))
    return out


def urls(text):
    """'http://a:1,http://b:2' -> [(host, port)]."""
    out = []
    for u in filter(None, js_str(text).split(',')):
        m = re.fullmatch(r'[a-z]+://(\[[^\]]*\]|[^:/]*)(?::([0-9]+))?/?', u.strip())
        out.append((m[1].strip('[]'), int(m[2]) if m[2] else None) if m else (u, None))
    return out


def fieldref_var(c, text, field):
    """Whether text is $(VAR) for an env variable of the container that the downward API fills from field."""
    m = re.fullmatch(r'\$\((\w+)\)', text or '')
    return bool(m) and any(e.get('name') == m[1] and dig(e, 'valueFrom', 'fieldRef', 'fieldPath') == field
                           for e in dicts(c.get('env')))


def replicas_of(o):
    return dig(o, 'spec', 'replicas', default=1)


def probe_path(c, probe):
    return dig(c, probe, 'httpGet', 'path')


# --- the controller ------------------------------------------------------------------------------------

def check_controller(r, pt, c, etcd_sets):
    where = f"{pt.where} container {js_str(c.get('name'))}"
    store = store_of(c)
    replicas = replicas_of(pt.owner)
    if not store.startswith('etcd://'):
        if store != 'sqlite':
            r.error(f'{where}: --store={store}: expected sqlite or etcd://HOST:PORT[,HOST:PORT...][/PREFIX]')
        elif isinstance(replicas, int) and replicas > 1:
            r.error(f'{pt.where}: {replicas} replicas of a controller on the embedded SQLite store (no --store etcd://...): a second '
                    'writer of one state; several controllers need --store etcd:// (deploy/k8s/overlays/ha)')
        return
    if probe_path(c, 'readinessProbe') != '/readyz':
        r.error(f'{where}: --store etcd:// with a readinessProbe that is not GET /readyz: /readyz is the leader\'s alone, which is '
                'what keeps the Service from sending clients to a standby')
    if probe_path(c, 'startupProbe') == '/readyz':
        r.error(f'{where}: --store etcd:// with startupProbe GET /readyz: a standby is never ready, so the kubelet would kill it at '
                'the end of the startup window, again and again (probe /healthz)')
    lease = flag(c, 'leader-lease-seconds')
    if lease is not None and not 2 <= js_number(lease) <= 60:
        r.error(f'{where}: --leader-lease-seconds={lease}: expected 2 to 60')
    advertise = flag(c, 'advertise-address')
    if advertise is not None and is_wildcard(split_listen(advertise)[0]):
        r.error(f"{where}: --advertise-address={advertise}: a wildcard is no address a client can dial (the pod's own: $(POD_IP):PORT)")
    check_store_endpoints(r, pt, where, store, etcd_sets)


def member_host(host):
    """pod.svc[.ns[.svc...]] -> (pod, svc, ns or None); svc alone -> (None, svc, None); an IP -> None."""
    if re.fullmatch(r'[0-9.]+|[0-9a-fA-F:]+', host):
        return None
    parts = host.split('.')
    if len(parts) == 1:
        return None, parts[0], None
    if len(parts) >= 4 and parts[3] != 'svc':
        return None
    return parts[0], parts[1], parts[2] if len(parts) > 2 else None


def check_store_endpoints(r, pt, where, store, etcd_sets):
    ns = ns_of(pt.owner)
    named = {}   # StatefulSet id -> (StatefulSet, the ordinals of its pods that --store names)
    for host, port in etcd_endpoints(store):
        parsed = member_host(host)
        svc = r.find('Service', parsed[1], parsed[2] or ns) if parsed else None
        if svc is not None and (dig(svc, 'spec', 'type') == 'ExternalName' or not dig(svc, 'spec', 'selector')):
            svc = None   # a Service for an etcd elsewhere (ExternalName, or endpoints of your own)
        if svc is None:
            if etcd_sets:
                r.error(f"{where}: --store endpoint {host}:{js_str(port)} is none of the rendered etcd's members "
                        f"({', '.join(pt2.where for _, pt2 in etcd_sets)}): misspelt?")
            else:
                r.note(f'{where}: --store endpoint {host}:{js_str(port)} is not rendered here: an etcd outside this render')
            continue
        pod, svc_name = parsed[0], js_str(dig(svc, 'metadata', 'name'))
        match = [(s, spt) for s, spt in etcd_sets if dig(s, 'spec', 'serviceName') == svc_name and ns_of(s) == ns_of(svc)]
        if pod is None or not match:
            r.error(f'{where}: --store endpoint {host}: Service {svc_name} is no etcd StatefulSet\'s headless Service '
                    '(spec.serviceName): name each member, <pod>.<service>:<client port>')
            continue
        s, spt = match[0]
        if dig(svc, 'spec', 'clusterIP') != 'None':
            r.error(f'{id_of(svc)}: the etcd members\' Service is not headless (clusterIP: None): no per-member names')
        if dig(svc, 'spec', 'publishNotReadyAddresses') is not True:
            r.error(f"{id_of(svc)}: publishNotReadyAddresses is not true: a member's name would not resolve before it is ready, "
                    'and it is ready only once a quorum formed through those names')
        sts, n = js_str(dig(s, 'metadata', 'name')), replicas_of(s)
        m = re.fullmatch(re.escape(sts) + r'-([0-9]+)', pod)
        if not m or not isinstance(n, int) or int(m[1]) >= n:
            last = js_str(n - 1 if isinstance(n, int) else '?')
            r.error(f'{where}: --store endpoint {host}: {pod} is no pod of {id_of(s)} ({sts}-0 .. {sts}-{last})')
            continue
        client_ports = [p for cc in containers_of(spt.pod) if runs_etcd(cc)
                        for _, p in urls(flag(cc, 'listen-client-urls') or '')]
        if port not in client_ports:
            r.error(f"{where}: --store endpoint {host}:{js_str(port)}: {id_of(s)}'s members serve clients on "
                    f"{', '.join(map(js_str, sorted(set(p for p in client_ports if p is not None)))) or 'no port'}")
        if not admitted(r, spt, port, 'TCP', lambda peer, pns: peer_admits(r, peer, pns, pt)):
            r.error(f"{id_of(s)}: no NetworkPolicy admits TCP {js_str(port)} (etcd's client port) from {pt.where}'s pods: "
                    'the controllers could not reach their store')
        named.setdefault(id_of(s), (s, set()))[1].add(int(m[1]))
    for sid, (s, members) in named.items():
        n = replicas_of(s)
        if isinstance(n, int) and len(members) < n:
            r.error(f'{where}: --store names {len(members)} of the {n} members of {sid}: losing those would cut the controller off '
                    'from a store that still has its quorum')


# --- etcd ------------------------------------------------------------------------------------------------

def check_etcd_flags(r, pt, c, where):
    for name, least in (('max-txn-ops', MIN_TXN_OPS), ('max-request-bytes', MIN_REQUEST_BYTES)):
        value = flag(c, name)
        if value is None or not js_number(value) >= least:
            r.error(f"{where}: --{name} {'unset' if value is None else value}, not {least} or more: one scheduling pass of the "
                    'controller is one transaction, which etcd would refuse')
    if flag(c, 'auto-compaction-retention') is None:
        r.error(f'{where}: no --auto-compaction-retention: the controller never compacts, so every revision would stay until the '
                'backend quota fills and etcd refuses writes (NOSPACE)')
    for name in ETCD_LISTEN_FLAGS:
        for host, port in urls(flag(c, name) or ''):
            check_bind(r, where, c, name, f'{host}:{js_str(port) if port is not None else ""}')


def quorum(n):
    return n // 2 + 1


def pdb_keeps(pdb, n):
    """The members a PodDisruptionBudget keeps available (a lower bound), or None when it says neither."""
    def count(v, up):
        if isinstance(v, str) and v.endswith('%'):
            x = n * js_number(v[:-1]) / 100
            return math.ceil(x) if up else math.floor(x)
        return js_number(v)
    spec = as_dict(pdb.get('spec'))
    if spec.get('minAvailable') is not None:
        return count(spec['minAvailable'], True)
    if spec.get('maxUnavailable') is not None:
        return n - count(spec['maxUnavailable'], True)
    return None


def check_etcd_set(r, s, pt, c, where):
    sts, n = js_str(dig(s, 'metadata', 'name')), replicas_of(s)
    if not isinstance(n, int) or n < 1:
        return
    if n % 2 == 0:
        r.error(f'{id_of(s)}: {n} etcd members: an even count tolerates no more failures than {n - 1} (a quorum is {quorum(n)})')
    if dig(s, 'spec', 'podManagementPolicy') != 'Parallel':
        r.error(f'{id_of(s)}: podManagementPolicy is not Parallel: OrderedReady starts {sts}-1 only once {sts}-0 is ready, which '
                'it never is without a quorum')
    if not fieldref_var(c, flag(c, 'name'), 'metadata.name'):
        r.error(f"{where}: --name={js_str(flag(c, 'name'))}: each member needs its own name, $(POD_NAME) from the downward API "
                '(fieldRef metadata.name)')
    initial = {}
    for entry in filter(None, js_str(flag(c, 'initial-cluster') or '').split(',')):
        name, _, url = entry.partition('=')
        initial[name] = url
    want = [f'{sts}-{i}' for i in range(n)]
    if sorted(initial) != sorted(want):
        r.error(f"{where}: --initial-cluster names {', '.join(initial) or 'no member'}, not the {n} pods {', '.join(want)}")
    else:
        adv = js_str(flag(c, 'initial-advertise-peer-urls') or '')
        var = re.search(r'\$\((\w+)\)', adv)
        for name in want:
            mine = adv.replace(var[0], name) if var else adv
            if initial[name] != mine:
                r.error(f'{where}: --initial-cluster has {name}={initial[name]}, but that pod advertises {mine} '
                        '(--initial-advertise-peer-urls): etcd refuses to start on the mismatch')
                break
    peer_ports = {p for _, p in urls(flag(c, 'listen-peer-urls') or '')}
    for port in sorted(p for p in peer_ports if p is not None):
        if not admitted(r, pt, port, 'TCP', lambda peer, pns: peer_admits(r, peer, pns, pt)):
            r.error(f'{id_of(s)}: no NetworkPolicy admits TCP {port} (the peer port) between its members: no quorum could form')
    pdbs = [p for p in r.by_kind('PodDisruptionBudget') if ns_of(p) == ns_of(s)
            and all(pt.labels.get(k) == v for k, v in as_dict(dig(p, 'spec', 'selector', 'matchLabels')).items())
            and dig(p, 'spec', 'selector', 'matchLabels')]
    if not pdbs:
        r.error(f'{id_of(s)}: no PodDisruptionBudget selects its pods: a drain could evict members below the quorum ({quorum(n)} of {n})')
    for p in pdbs:
        keeps = pdb_keeps(p, n)
        if keeps is not None and not keeps >= quorum(n):
            r.error(f'{id_of(p)}: keeps {js_str(keeps)} of {n} etcd members available, below the quorum of {quorum(n)}: '
                    'a drain could stop the store')


def check_ha(r):
    etcd_sets = []   # (StatefulSet, pod template) running etcd
    for pt in r.pod_templates():
        for c in pt.containers:
            if runs_etcd(c):
                where = f"{pt.where} container {js_str(c.get('name'))}"
                check_etcd_flags(r, pt, c, where)
                if pt.owner.get('kind') == 'StatefulSet':
                    etcd_sets.append((pt.owner, pt))
                    check_etcd_set(r, pt.owner, pt, c, where)
    for pt in r.pod_templates():
        for c in pt.containers:
            if runs_controller(c):
                check_controller(r, pt, c, etcd_sets)
