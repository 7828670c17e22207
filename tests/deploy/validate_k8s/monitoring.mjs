// The Prometheus Operator's objects and the Grafana dashboards: monitors that select something real and
// leave the Operator's target labels alone (the job id is the controller's `job_id`), one release label on all of them (the one kube-prometheus-stack
// selects by), rules that read as rules, dashboards the sidecar finds and kubectl can apply.
import { containersOf, id, isObj, nsOf } from './objects.mjs';

const RELEASE = 'release';
const selects = (sel, labels) => Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);
const scrapesController = (labels) => labels?.['app.kubernetes.io/name'] === 'moe-controller';

// Services select a rendered pod template.
function checkServices(r) {
  const templates = r.podTemplates();
  for (const s of r.byKind('Service')) {
    const sel = s.spec?.selector ?? {};
    if (Object.keys(sel).length && !templates.some((pt) => selects(sel, pt.template.metadata?.labels)))
      r.error(`${id(s)}: selector matches no rendered pod template`);
  }
}

// PodMonitors: select a rendered pod and a named port of it; no honorLabels when they scrape the
// controller: its series carry the training job's id in `job_id`, which clashes with no target label, so
// honorLabels is not needed and would only let exposed labels override the Operator's `job`/`instance`.
function checkPodMonitors(r) {
  for (const pm of r.byKind('PodMonitor')) {
    const targets = r.podTemplates().filter((pt) => selects(pm.spec?.selector?.matchLabels, pt.template.metadata?.labels));
    if (!targets.length) { r.error(`${id(pm)}: selector matches no rendered pod template`); continue; }
    const ports = new Set(targets.flatMap((pt) => containersOf(pt.template.spec ?? {}).flatMap((c) => (c.ports ?? []).map((p) => p.name))));
    for (const [i, ep] of (pm.spec?.podMetricsEndpoints ?? []).entries()) {
      if (ep.port !== undefined && !ports.has(ep.port)) r.error(`${id(pm)}: podMetricsEndpoints[${i}].port ${ep.port} is no named container port of ${targets.map((pt) => pt.where).join(', ')}`);
      if (targets.some((pt) => scrapesController(pt.template.metadata?.labels)) && ep.honorLabels === true)
        r.error(`${id(pm)}: podMetricsEndpoints[${i}] scrapes moe-controller with honorLabels: true (not needed: the job id is the job_id label, which no target label overwrites)`);
    }
  }
}

// ServiceMonitors: select a rendered Service in their namespace and a named port of it; no honorLabels
// when that Service fronts the controller (as for PodMonitors).
function checkServiceMonitors(r) {
  for (const sm of r.byKind('ServiceMonitor')) {
    const svcs = r.byKind('Service').filter((s) => nsOf(s) === nsOf(sm) && selects(sm.spec?.selector?.matchLabels, s.metadata?.labels));
    if (!svcs.length) { r.error(`${id(sm)}: selector matches no rendered Service in namespace ${nsOf(sm)}`); continue; }
    const ports = new Set(svcs.flatMap((s) => (s.spec?.ports ?? []).map((p) => p.name)));
    for (const [i, ep] of (sm.spec?.endpoints ?? []).entries()) {
      if (!ports.has(ep.port)) r.error(`${id(sm)}: endpoints[${i}].port ${ep.port} is no named port of ${svcs.map(id).join(', ')}`);
      if (svcs.some((s) => scrapesController(s.spec?.selector)) && ep.honorLabels === true)
        r.error(`${id(sm)}: endpoints[${i}] scrapes moe-controller with honorLabels: true (not needed: the job id is the job_id label, which no target label overwrites)`);
    }
  }
}

// One release label, present on every monitor and rule object (kube-prometheus-stack's selectors).
function checkReleaseLabel(r) {
  const objs = ['ServiceMonitor', 'PodMonitor', 'PrometheusRule'].flatMap((k) => r.byKind(k));
  const values = new Set();
  for (const o of objs) {
    const v = o.metadata?.labels?.[RELEASE];
    if (!v) r.error(`${id(o)}: no ${RELEASE} label (kube-prometheus-stack's Prometheus selects by it: base/monitoring/kustomization.yaml)`);
    else values.add(v);
  }
  if (values.size > 1) r.error(`the monitoring objects carry different ${RELEASE} labels (${[...values].join(', ')}): set it in one place`);
}

// Rules: unique group names, each rule an alert or a record (not both) with an expression.
function checkRules(r) {
  for (const pr of r.byKind('PrometheusRule')) {
    const names = new Set();
    for (const g of pr.spec?.groups ?? []) {
      if (names.has(g.name)) r.error(`${id(pr)}: group ${g.name} appears twice`);
      names.add(g.name);
      for (const [i, rule] of (g.rules ?? []).entries()) {
        if ((rule.alert === undefined) === (rule.record === undefined)) r.error(`${id(pr)}: group ${g.name} rules[${i}]: exactly one of alert and record`);
        if (typeof rule.expr !== 'string' || !rule.expr.trim()) r.error(`${id(pr)}: group ${g.name} rules[${i}]: no expr`);
      }
    }
  }
}

// Dashboards for Grafana's sidecar: grafana_dashboard "1", JSON that parses.
function checkDashboards(r) {
  for (const cm of r.byKind('ConfigMap').filter((c) => c.metadata?.labels?.grafana_dashboard !== undefined)) {
    if (cm.metadata.labels.grafana_dashboard !== '1') r.error(`${id(cm)}: grafana_dashboard label ${cm.metadata.labels.grafana_dashboard}, the sidecar looks for "1"`);
    for (const [k, v] of Object.entries(cm.data ?? {})) {
      try { if (!isObj(JSON.parse(v))) throw new Error('not an object'); } catch (e) { r.error(`${id(cm)}: ${k} is not a JSON dashboard (${e.message})`); }
    }
  }
}

// kubectl apply (client-side) keeps the whole object in an annotation, at most 256 KiB: a ConfigMap
// past it fails to apply (growing dashboards do this).
function checkApplySize(r) {
  for (const o of r.byKind('ConfigMap')) {
    const n = Buffer.byteLength(JSON.stringify(o));
    if (n > 262144) r.error(`${id(o)}: ${n} bytes, over kubectl apply's 256 KiB last-applied annotation: split it`);
  }
}

export function checkMonitoring(r) {
  checkServices(r);
  checkPodMonitors(r);
  checkServiceMonitors(r);
  checkReleaseLabel(r);
  checkRules(r);
  checkDashboards(r);
  checkApplySize(r);
}
