"""Where the pods listen and who may reach them: every --listen, --metrics-listen and --health-listen binds
the pod's own IP (or loopback), never every interface; NetworkPolicies as Kubernetes evaluates them
(podSelector, namespaceSelector, ports by number, range or name), checked against the pods the render
really has: a NetworkPolicy selects the controller's pods and admits its gRPC port (TCP, and UDP for the
heartbeats) from every agent's and every moectl pod's labels; agent pods under a policy admit each
other's TCP on every port (the ranks' Gloo and NCCL connections use ephemeral ports); the ports the
ServiceMonitors and PodMonitors scrape admit another namespace (Prometheus'). A label renamed on one
side and not the other fails here. (The kinds' fields: Kubernetes' schemas.)
"""
import ipaddress
import re

from .objects import as_dict, as_list, containers_of, dicts, dig, env_value, id_of, js_str, ns_of, runs_worker
from .tls import moectl_calls, runs_controller

LISTEN_FLAGS = ('listen', 'metrics-listen', 'health-listen')
POD_IP_FIELD = 'status.podIP'
NAME_LABEL = 'kubernetes.io/metadata.name'
GRPC_PORT = 50051   # the controller's --listen default
PROBES = ('livenessProbe', 'readinessProbe', 'startupProbe')
_FLAG_RE = re.compile(r'--(listen|metrics-listen|health-listen)(?:=|\s+)(\S+)')


# --- the binds ---------------------------------------------------------------------------------------

def listen_flags(c):
    """(flag, value) of every --listen, --metrics-listen, --health-listen in a container's command and args:
    argv words (--flag=value, --flag value) and shell text (sh -c '... --flag value'); $(VAR) expanded
    from literal env values, as objects.flag does."""
    words = [js_str(w) for w in as_list(c.get('command')) + as_list(c.get('args'))]
    found = []
    for i, w in enumerate(words):
        if any(ch.isspace() for ch in w):
            found += [(m[1], m[2]) for m in _FLAG_RE.finditer(w)]
            continue
        for name in LISTEN_FLAGS:
            if w == f'--{name}':
                found.append((name, words[i + 1] if i + 1 < len(words) else ''))
            elif w.startswith(f'--{name}='):
                found.append((name, w[len(name) + 3:]))

    def expand(m):
        v = env_value(c, m[1])
        return m[0] if v is None else js_str(v)
    return [(name, re.sub(r'\$\(([A-Za-z_][A-Za-z0-9_]*)\)', expand, value)) for name, value in found]


def split_listen(value):
    """host:port, [host]:port, :port, port -> (host, port text); an unbracketed IPv6 address is its own host."""
    if value.startswith('['):
        close = value.find(']')
        return (value[1:close], value[close + 2:]) if close > 0 else (value, '')
    if value.count(':') == 1:
        return tuple(value.split(':'))
    return ('', value) if ':' not in value else (value, '')


def pod_ip_vars(c):
    """The container's env variables that the downward API fills with the pod's IP."""
    return {e.get('name') for e in dicts(c.get('env')) if dig(e, 'valueFrom', 'fieldRef', 'fieldPath') == POD_IP_FIELD}


def is_wildcard(host):
    if host in ('', '*'):
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def is_loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == 'localhost'


def check_bind(r, where, c, name, value):
    """One listening address: the pod's own IP through the downward API, or loopback."""
    if value.startswith('unix:'):
        return
    host, port = split_listen(value)
    own = f'--{name}=$(POD_IP):{port or "PORT"} with env POD_IP from the downward API (fieldRef {POD_IP_FIELD})'
    if is_wildcard(host):
        written = f'[{host}]' if value.startswith('[') else host or 'no host'
        r.error(f"{where}: --{name}={value} binds {written}, every interface of the pod (the node's with "
                f"hostNetwork, the Multus networks' too), not the pod's own IP behind the NetworkPolicy: {own}")
    elif is_loopback(host):
        return
    elif re.fullmatch(r'\$(\(\w+\)|\{\w+\}|\w+)', host):   # $(VAR) in args; $VAR, ${VAR} in shell text
        var = host.strip('$(){}')
        if var not in pod_ip_vars(c):
            source = dig(next((e for e in dicts(c.get('env')) if e.get('name') == var), None), 'valueFrom', 'fieldRef', 'fieldPath')
            got = 'is no fieldRef env variable' if source is None else f'comes from {js_str(source)}'
            r.error(f"{where}: --{name}={value}: {var} {got}, not {POD_IP_FIELD} (the pod's IP): {own}")
    else:
        r.error(f"{where}: --{name}={value}: {host} is not the pod's own address (known only when it starts): {own}")


def check_binds(r):
    """Every listening flag of every container, and no probe aimed at another host than the pod's IP."""
    for pt in r.pod_templates():
        for c in containers_of(pt.pod):
            where = f"{pt.where} container {js_str(c.get('name'))}"
            for name, value in listen_flags(c):
                check_bind(r, where, c, name, value)
            for p in PROBES:
                for handler in ('httpGet', 'tcpSocket'):
                    host = dig(c, p, handler, 'host')
                    if host is not None:
                        r.error(f'{where}: {p}.{handler}.host {js_str(host)}: the kubelet would probe that address, not the '
                                "pod's IP that the container listens on (leave host unset)")


# --- NetworkPolicy as Kubernetes evaluates it --------------------------------------------------------

def selects(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions) against labels; {} selects everything."""
    labels = as_dict(labels)
    if any(labels.get(k) != v for k, v in as_dict(as_dict(selector).get('matchLabels')).items()):
        return False
    for e in dicts(as_dict(selector).get('matchExpressions')):
        key, op, values = e.get('key'), e.get('operator'), as_list(e.get('values'))
        ok = {'In': key in labels and labels[key] in values, 'NotIn': key not in labels or labels[key] not in values,
              'Exists': key in labels, 'DoesNotExist': key not in labels}.get(op, False)
        if not ok:
            return False
    return True


def namespace_labels(r, ns):
    obj = r.find('Namespace', ns)
    return {**as_dict(dig(obj, 'metadata', 'labels')), NAME_LABEL: ns}


def ingress_policies(r, pt):
    """The NetworkPolicies that govern ingress to the template's pods (same namespace, podSelector, Ingress
    among the policyTypes, which it always is when policyTypes is unset)."""
    return [p for p in r.by_kind('NetworkPolicy')
            if ns_of(p) == ns_of(pt.owner) and selects(dig(p, 'spec', 'podSelector'), pt.labels)
            and 'Ingress' in as_list(dig(p, 'spec', 'policyTypes', default=['Ingress']))]


def peer_admits(r, peer, policy_ns, src):
    """Whether a `from` peer admits the pods of template `src` (an ipBlock admits no pod here: pod IPs change)."""
    if 'ipBlock' in peer or ('podSelector' not in peer and 'namespaceSelector' not in peer):
        return False
    src_ns = ns_of(src.owner)
    ns_ok = (src_ns == policy_ns if 'namespaceSelector' not in peer
             else selects(peer['namespaceSelector'], namespace_labels(r, src_ns)))
    return ns_ok and ('podSelector' not in peer or selects(peer['podSelector'], src.labels))


def peer_from_elsewhere(r, peer, policy_ns):
    """Whether a `from` peer admits pods of some other namespace than the policy's (Prometheus')."""
    if 'namespaceSelector' not in peer or 'ipBlock' in peer:
        return False
    sel = peer['namespaceSelector']
    return not as_dict(sel) or not selects(sel, namespace_labels(r, policy_ns))


def port_admits(rule, target, port, protocol):
    """Whether a rule's ports admit `port` (None: every port) of `protocol` on the target's pods. No ports:
    all of them; an entry without port: every port of its protocol; a name: the container port so named."""
    ports = dicts(rule.get('ports'))
    if not ports:
        return True
    for p in ports:
        if p.get('protocol', 'TCP') != protocol:
            continue
        value = p.get('port')
        if value is None:
            return True
        if port is None:
            continue
        if isinstance(value, str) and not value.isdigit():
            named = [cp for c in containers_of(target.pod) for cp in dicts(c.get('ports'))
                     if cp.get('name') == value and cp.get('protocol', 'TCP') == protocol]
            if any(cp.get('containerPort') == port for cp in named):
                return True
        elif int(value) <= port <= int(p.get('endPort', value)):
            return True
    return False


def admitted(r, target, port, protocol, peer_ok):
    """Whether ingress to the target's pods on port/protocol passes: no policy governs them, or a rule of one
    admits a peer for which peer_ok(peer, policy namespace) holds (no `from`: every source)."""
    policies = ingress_policies(r, target)
    if not policies:
        return True
    for p in policies:
        for rule in dicts(dig(p, 'spec', 'ingress')):
            peers = dicts(rule.get('from'))
            if port_admits(rule, target, port, protocol) and (not peers or any(peer_ok(x, ns_of(p)) for x in peers)):
                return True
    return False


# --- what the render's pods need ---------------------------------------------------------------------

def listen_port(c, name, default):
    value = next((v for n, v in listen_flags(c) if n == name), None)
    port = split_listen(value)[1] if value else ''
    return int(port) if port.isdigit() else default


def labels_text(pt):
    return ', '.join(f'{k}={js_str(v)}' for k, v in sorted(pt.labels.items())) or 'none'


def check_controller_reach(r, controller, port, clients):
    """The controller's pods are governed by a policy, and it admits gRPC (TCP; UDP for the agents'
    heartbeats) from every client template."""
    if not ingress_policies(r, controller):
        r.error(f'{controller.where}: no NetworkPolicy in namespace {ns_of(controller.owner)} selects its pods '
                f'({labels_text(controller)}): its gRPC and metrics ports are open to every pod of the cluster')
        return
    for src, protocols in clients:
        for protocol in protocols:
            if not admitted(r, controller, port, protocol, lambda peer, ns, s=src: peer_admits(r, peer, ns, s)):
                why = ('the heartbeats by UDP datagram would go unanswered' if protocol == 'UDP'
                       else 'it could not reach the controller')
                r.error(f"{controller.where}: no NetworkPolicy admits {protocol} {port} (the gRPC port) from {src.where}'s pods "
                        f'({labels_text(src)}): {why}')


def check_agents_reach_each_other(r, agents):
    """Agent pods under a policy admit TCP on every port from every agent template (a job's ranks may span
    pools): Gloo's pairs and NCCL's bootstrap listen on ports the kernel picks."""
    for target in agents:
        if not ingress_policies(r, target):
            continue
        for src in agents:
            if not admitted(r, target, None, 'TCP', lambda peer, ns, s=src: peer_admits(r, peer, ns, s)):
                r.error(f"{target.where}: no NetworkPolicy admits TCP on every port from {src.where}'s pods ({labels_text(src)}): "
                        "the ranks' Gloo and NCCL connections (ephemeral ports) between agents would be dropped")


def target_port(pt, service_port):
    """The container port number a Service port reaches on the template's pods."""
    tp = service_port.get('targetPort', service_port.get('port'))
    if isinstance(tp, int):
        return tp
    return next((cp.get('containerPort') for c in containers_of(pt.pod) for cp in dicts(c.get('ports'))
                 if cp.get('name') == tp), None)


def scraped_ports(r):
    """(monitor id, pod template, container port) of every endpoint the ServiceMonitors and PodMonitors scrape."""
    out = []
    templates = r.pod_templates()
    for sm in r.by_kind('ServiceMonitor'):
        sel = dig(sm, 'spec', 'selector', 'matchLabels')
        for s in [s for s in r.by_kind('Service') if ns_of(s) == ns_of(sm) and selects({'matchLabels': sel}, dig(s, 'metadata', 'labels'))]:
            pts = [pt for pt in templates if ns_of(pt.owner) == ns_of(s) and dig(s, 'spec', 'selector')
                   and selects({'matchLabels': dig(s, 'spec', 'selector')}, pt.labels)]
            for ep in dicts(dig(sm, 'spec', 'endpoints')):
                for sp in [p for p in dicts(dig(s, 'spec', 'ports')) if p.get('name') == ep.get('port')]:
                    out += [(id_of(sm), pt, target_port(pt, sp)) for pt in pts]
    for pm in r.by_kind('PodMonitor'):
        pts = [pt for pt in templates if ns_of(pt.owner) == ns_of(pm) and selects(dig(pm, 'spec', 'selector'), pt.labels)]
        for ep in dicts(dig(pm, 'spec', 'podMetricsEndpoints')):
            out += [(id_of(pm), pt, target_port(pt, {'targetPort': ep.get('port')})) for pt in pts]
    return [(m, pt, port) for m, pt, port in out if isinstance(port, int)]


def check_scrapes(r):
    """Prometheus runs in another namespace: what a monitor scrapes must admit one."""
    for monitor, pt, port in scraped_ports(r):
        if not admitted(r, pt, port, 'TCP', lambda peer, ns: peer_from_elsewhere(r, peer, ns)):
            r.error(f"{monitor} scrapes port {port} of {pt.where}'s pods, but no NetworkPolicy admits TCP {port} from another "
                    "namespace (Prometheus'): the scrapes would time out")


def check_policies_select(r):
    templates = r.pod_templates()
    for p in r.by_kind('NetworkPolicy'):
        if not any(ns_of(pt.owner) == ns_of(p) and selects(dig(p, 'spec', 'podSelector'), pt.labels) for pt in templates):
            r.error(f"{id_of(p)}: podSelector matches no rendered pod template in namespace {ns_of(p)}")


def check_network(r):
    check_binds(r)
    check_policies_select(r)
    templates = r.pod_templates()
    agents = [pt for pt in templates if any(runs_worker(c) for c in pt.containers)]
    moectl = [pt for pt in templates if any(moectl_calls(c) for c in containers_of(pt.pod))
              and not any(runs_controller(c) for c in pt.containers)]
    clients = [(pt, ('TCP', 'UDP')) for pt in agents] + [(pt, ('TCP',)) for pt in moectl]
    for pt in templates:
        for c in pt.containers:
            if runs_controller(c):
                check_controller_reach(r, pt, listen_port(c, 'listen', GRPC_PORT), clients)
    check_agents_reach_each_other(r, agents)
    check_scrapes(r)
