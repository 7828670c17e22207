// What a render must CONTAIN (validate_k8s.mjs --require WHAT; k8s_test.sh passes them per overlay). A
// missing one fails; each checks presence, the other checks check correctness.
//   pool:KIND/NAME[:LEVEL]   a worker pool KIND/NAME with the kueue.x-k8s.io/queue-name label and, given
//                            LEVEL, a Kueue topology request (required, preferred or slice) on that node label
//   compute-domain:KIND/NAME a ComputeDomain whose channel template KIND/NAME's pods claim, in every container
//   rdma:KIND/NAME           every container of KIND/NAME's pods requests an RDMA resource and holds IPC_LOCK,
//                            and the pod template names its Multus networks
//   monitoring               a ServiceMonitor or PodMonitor of moe-controller, and a PrometheusRule
//   dashboards               a ConfigMap for Grafana's dashboard sidecar (label grafana_dashboard)
import { MULTUS, QUEUE_LABEL } from './objects.mjs';
import { TAS } from './kueue.mjs';
import { cdClaims, hasCap, isRdma } from './pods.mjs';

function templatesOf(r, what, ref) {
  const [kind, name] = ref.split('/');
  const pts = r.podTemplates().filter((pt) => pt.owner.kind === kind && pt.owner.metadata?.name === name);
  if (!pts.length) r.error(`--require ${what}:${ref}: no ${ref} is rendered`);
  return pts;
}

function requirePool(r, req, ref, level) {
  for (const pt of templatesOf(r, 'pool', ref)) {
    if (!pt.owner.metadata?.labels?.[QUEUE_LABEL]) r.error(`--require ${req}: ${ref} has no ${QUEUE_LABEL} label`);
    if (!level) continue;
    const a = pt.template.metadata?.annotations ?? {};
    if (![TAS.required, TAS.preferred, TAS.sliceRequired].some((k) => a[k] === level))
      r.error(`--require ${req}: ${pt.where} has no Kueue topology request on ${level} (${TAS.required}, ${TAS.preferred} or ${TAS.sliceRequired})`);
  }
}

function requireComputeDomain(r, req, ref, cdByTemplate) {
  if (!r.byKind('ComputeDomain').length) { r.error(`--require ${req}: the render has no ComputeDomain (multi-node NVLink needs one: deploy/k8s/overlays/gb300-nvl72/pool/computedomain.yaml)`); return; }
  for (const pt of templatesOf(r, 'compute-domain', ref)) {
    const domains = cdClaims(pt, cdByTemplate);
    if (!domains.size) { r.error(`--require ${req}: ${pt.where}'s pod template claims no ComputeDomain's channel template (spec.resourceClaims[].resourceClaimTemplateName)`); continue; }
    for (const c of pt.template.spec?.containers ?? []) {
      if (!(c.resources?.claims ?? []).some((cl) => domains.has(cl.name)))
        r.error(`--require ${req}: container ${c.name} does not list the ComputeDomain claim (${[...domains.keys()].join(', ')}) in resources.claims`);
    }
  }
}

function requireRdma(r, req, ref) {
  for (const pt of templatesOf(r, 'rdma', ref)) {
    if (!pt.template.metadata?.annotations?.[MULTUS]) r.error(`--require ${req}: ${pt.where}'s pod template has no ${MULTUS} annotation (the RDMA networks)`);
    for (const c of pt.template.spec?.containers ?? []) {
      const rs = Object.keys({ ...(c.resources?.requests ?? {}), ...(c.resources?.limits ?? {}) });
      if (!rs.some(isRdma)) r.error(`--require ${req}: container ${c.name} requests no RDMA resource`);
      if (!hasCap(c, 'IPC_LOCK')) r.error(`--require ${req}: container ${c.name} lacks capability IPC_LOCK`);
    }
  }
}

function requireMonitoring(r, req) {
  const monitors = [...r.byKind('ServiceMonitor'), ...r.byKind('PodMonitor')]
    .filter((m) => m.spec?.selector?.matchLabels?.['app.kubernetes.io/name'] === 'moe-controller');
  if (!monitors.length) r.error(`--require ${req}: no ServiceMonitor or PodMonitor of moe-controller`);
  if (!r.byKind('PrometheusRule').length) r.error(`--require ${req}: the render has no PrometheusRule`);
}

function requireDashboards(r, req) {
  if (!r.byKind('ConfigMap').some((c) => c.metadata?.labels?.grafana_dashboard !== undefined)) r.error(`--require ${req}: no ConfigMap labelled grafana_dashboard`);
}

export function checkRequires(r, requires, ctx) {
  for (const req of requires) {
    const [what, ...rest] = req.split(':');
    const [ref, level] = rest;
    if (what === 'pool' && ref) requirePool(r, req, ref, level);
    else if (what === 'compute-domain' && ref) requireComputeDomain(r, req, ref, ctx.cdByTemplate);
    else if (what === 'rdma' && ref) requireRdma(r, req, ref);
    else if (what === 'monitoring' && !ref) requireMonitoring(r, req);
    else if (what === 'dashboards' && !ref) requireDashboards(r, req);
    else r.error(`--require ${req}: unknown requirement (pool:KIND/NAME[:LEVEL], compute-domain:KIND/NAME, rdma:KIND/NAME, monitoring, dashboards)`);
  }
}

