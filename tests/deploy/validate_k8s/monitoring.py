"""The Prometheus Operator's objects and the Grafana dashboards: monitors that select something real and
leave the Operator's target labels alone (the job id is the controller's `job_id`), one release label on
all of them (the one kube-prometheus-stack selects by), rules that read as rules, dashboards the sidecar
finds and kubectl can apply. (Their fields' types: schemas.py.)
"""
import json

from .objects import as_dict, as_list, containers_of, dicts, dig, id_of, is_obj, js_str, ns_of, to_json, truthy

RELEASE = 'release'
HONOR_LABELS_WHY = '(not needed: the job id is the job_id label, which no target label overwrites)'


def selects(selector, labels):
    labels = as_dict(labels)
    return all(k in labels and labels[k] == v for k, v in as_dict(selector).items())


def scrapes_controller(labels):
    return as_dict(labels).get('app.kubernetes.io/name') == 'moe-controller'


def check_services(r):
    """Services select a rendered pod template."""
    templates = r.pod_templates()
    for s in r.by_kind('Service'):
        sel = as_dict(dig(s, 'spec', 'selector'))
        if sel and not any(selects(sel, pt.labels) for pt in templates):
            r.error(f'{id_of(s)}: selector matches no rendered pod template')


def check_pod_monitors(r):
    """PodMonitors: select a rendered pod and a named port of it; no honorLabels when they scrape the
    controller: its series carry the training job's id in `job_id`, which clashes with no target label, so
    honorLabels is not needed and would only let exposed labels override the Operator's `job`/`instance`."""
    for pm in r.by_kind('PodMonitor'):
        targets = [pt for pt in r.pod_templates() if selects(dig(pm, 'spec', 'selector', 'matchLabels'), pt.labels)]
        if not targets:
            r.error(f'{id_of(pm)}: selector matches no rendered pod template')
            continue
        ports = [p.get('name') for pt in targets for c in containers_of(pt.pod) for p in dicts(c.get('ports'))]
        for i, ep in enumerate(dicts(dig(pm, 'spec', 'podMetricsEndpoints'))):
            if ep.get('port') is not None and ep['port'] not in ports:
                r.error(f"{id_of(pm)}: podMetricsEndpoints[{i}].port {js_str(ep['port'])} is no named container port of "
                        f"{', '.join(pt.where for pt in targets)}")
            if any(scrapes_controller(pt.labels) for pt in targets) and ep.get('honorLabels') is True:
                r.error(f'{id_of(pm)}: podMetricsEndpoints[{i}] scrapes moe-controller with honorLabels: true {HONOR_LABELS_WHY}')


def check_service_monitors(r):
    """ServiceMonitors: select a rendered Service in their namespace and a named port of it; no honorLabels
    when that Service fronts the controller (as for PodMonitors)."""
    for sm in r.by_kind('ServiceMonitor'):
        services = [s for s in r.by_kind('Service')
                    if ns_of(s) == ns_of(sm) and selects(dig(sm, 'spec', 'selector', 'matchLabels'), dig(s, 'metadata', 'labels'))]
        if not services:
            r.error(f'{id_of(sm)}: selector matches no rendered Service in namespace {ns_of(sm)}')
            continue
        ports = [p.get('name') for s in services for p in dicts(dig(s, 'spec', 'ports'))]
        for i, ep in enumerate(dicts(dig(sm, 'spec', 'endpoints'))):
            if ep.get('port') not in ports:
                r.error(f"{id_of(sm)}: endpoints[{i}].port {js_str(ep.get('port'))} is no named port of {', '.join(map(id_of, services))}")
            if any(scrapes_controller(dig(s, 'spec', 'selector')) for s in services) and ep.get('honorLabels') is True:
                r.error(f'{id_of(sm)}: endpoints[{i}] scrapes moe-controller with honorLabels: true {HONOR_LABELS_WHY}')


def check_release_label(r):
    """One release label, present on every monitor and rule object (kube-prometheus-stack's selectors)."""
    values = []
    for o in [o for kind in ('ServiceMonitor', 'PodMonitor', 'PrometheusRule') for o in r.by_kind(kind)]:
        v = dig(o, 'metadata', 'labels', RELEASE)
        if not truthy(v):
            r.error(f"{id_of(o)}: no {RELEASE} label (kube-prometheus-stack's Prometheus selects by it: "
                    'base/monitoring/kustomization.yaml)')
        elif v not in values:
            values.append(v)
    if len(values) > 1:
        r.error(f"the monitoring objects carry different {RELEASE} labels ({', '.join(map(js_str, values))}): set it in one place")


def check_rules(r):
    """Rules: unique group names, each rule an alert or a record (not both) with an expression."""
    for pr in r.by_kind('PrometheusRule'):
        names = []
        for g in dicts(dig(pr, 'spec', 'groups')):
            name = js_str(g.get('name'))
            if g.get('name') in names:
                r.error(f'{id_of(pr)}: group {name} appears twice')
            names.append(g.get('name'))
            for i, rule in enumerate(as_list(g.get('rules'))):
                rule = as_dict(rule)
                if (rule.get('alert') is None) == (rule.get('record') is None):
                    r.error(f'{id_of(pr)}: group {name} rules[{i}]: exactly one of alert and record')
                if not isinstance(rule.get('expr'), str) or not rule['expr'].strip():
                    r.error(f'{id_of(pr)}: group {name} rules[{i}]: no expr')


def _no_constant(name):
    raise ValueError(f'{name} is not JSON')


def check_dashboards(r):
    """Dashboards for Grafana's sidecar: grafana_dashboard "1", JSON that parses."""
    for cm in r.by_kind('ConfigMap'):
        label = dig(cm, 'metadata', 'labels', 'grafana_dashboard')
        if label is None:
            continue
        if label != '1':
            r.error(f'{id_of(cm)}: grafana_dashboard label {js_str(label)}, the sidecar looks for "1"')
        for k, v in as_dict(cm.get('data')).items():
            try:
                if not is_obj(json.loads(v, parse_constant=_no_constant)):
                    raise ValueError('not an object')
            except (ValueError, TypeError) as e:
                r.error(f'{id_of(cm)}: {k} is not a JSON dashboard ({e})')


def check_apply_size(r):
    """kubectl apply (client-side) keeps the whole object in an annotation, at most 256 KiB: a ConfigMap past
    it fails to apply (growing dashboards do this)."""
    for o in r.by_kind('ConfigMap'):
        n = len(to_json(o).encode())
        if n > 262144:
            r.error(f"{id_of(o)}: {n} bytes, over kubectl apply's 256 KiB last-applied annotation: split it")


def check_monitoring(r):
    check_services(r)
    check_pod_monitors(r)
    check_service_monitors(r)
    check_release_label(r)
    check_rules(r)
    check_dashboards(r)
    check_apply_size(r)
