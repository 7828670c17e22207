// Kueue: the queues resolve (pool -> LocalQueue -> ClusterQueue -> ResourceFlavor -> Topology), each pool
// could be admitted (every resource it requests covered, its whole size within one flavor's quota, its
// topology request on a level of that flavor's Topology, as Kueue validates it), and the pool's size
// agrees with itself (completions, the TAS slice, the ComputeDomain's numNodes). A pool Kueue can never
// admit is a valid object that waits forever: only these checks see it.
import { LABEL_KEY } from './schemas.mjs';
import { QUEUE_LABEL, id, nsOf, quantity, requests, runsWorker } from './objects.mjs';
import { cdClaims } from './pods.mjs';

const TAS = {
  required: 'kueue.x-k8s.io/podset-required-topology',
  preferred: 'kueue.x-k8s.io/podset-preferred-topology',
  unconstrained: 'kueue.x-k8s.io/podset-unconstrained-topology',
  sliceRequired: 'kueue.x-k8s.io/podset-slice-required-topology',
  sliceSize: 'kueue.x-k8s.io/podset-slice-size',
};

// The worker pools: Jobs and JobSets whose pods run moe-worker.
export const pools = (r) => r.podTemplates().filter((pt) => pt.job && (pt.template.spec?.containers ?? []).some(runsWorker));

// The pod's effective requests: the containers' sum, or an init container's if larger (Kubernetes' rule).
function podRequests(pod) {
  const sum = {};
  for (const c of pod.containers ?? []) for (const [k, v] of Object.entries(requests(c))) sum[k] = (sum[k] ?? 0) + quantity(v);
  for (const c of pod.initContainers ?? []) for (const [k, v] of Object.entries(requests(c))) sum[k] = Math.max(sum[k] ?? 0, quantity(v));
  return sum;
}
const podCount = (pt) => (pt.jobReplicas ?? 1) * (pt.job.parallelism ?? 1);

function checkTopologies(r) {
  for (const t of r.byKind('Topology')) {
    const levels = (t.spec?.levels ?? []).map((l) => l.nodeLabel);
    if (new Set(levels).size !== levels.length) r.error(`${id(t)}: levels must be unique`);
    const host = levels.indexOf('kubernetes.io/hostname');
    if (host >= 0 && host !== levels.length - 1) r.error(`${id(t)}: kubernetes.io/hostname can only be the lowest level`);
  }
}

function checkFlavors(r) {
  for (const f of r.byKind('ResourceFlavor')) {
    const t = f.spec?.topologyName;
    if (t === undefined) continue;
    if (!Object.keys(f.spec?.nodeLabels ?? {}).length) r.error(`${id(f)}: a flavor with topologyName needs at least one nodeLabel`);
    if (!r.find('Topology', t)) r.error(`${id(f)}: Topology ${t} is not rendered`);
  }
}

// Kueue requires each flavor to list exactly the group's coveredResources, in that order.
function checkClusterQueues(r) {
  for (const cq of r.byKind('ClusterQueue')) {
    for (const [g, group] of (cq.spec?.resourceGroups ?? []).entries()) {
      const covered = group.coveredResources ?? [];
      for (const fq of group.flavors ?? []) {
        const names = (fq.resources ?? []).map((x) => x.name);
        if (names.join(',') !== covered.join(',')) r.error(`${id(cq)}: resourceGroups[${g}] flavor ${fq.name} lists ${names.join(', ')}, not the coveredResources ${covered.join(', ')} in order`);
        if (!r.find('ResourceFlavor', fq.name)) r.error(`${id(cq)}: ResourceFlavor ${fq.name} is not rendered`);
      }
    }
  }
  for (const lq of r.byKind('LocalQueue')) {
    if (!r.find('ClusterQueue', lq.spec?.clusterQueue)) r.error(`${id(lq)}: ClusterQueue ${lq.spec?.clusterQueue} is not rendered`);
  }
}

// The TAS annotations as Kueue's webhook validates them (jobframework/tas_validation.go).
function tasRequest(r, pt) {
  const a = pt.template.metadata?.annotations ?? {};
  const where = `${pt.where}: pod template annotation`;
  const present = ['required', 'preferred', 'unconstrained'].filter((k) => a[TAS[k]] !== undefined);
  if (present.length > 1) r.error(`${where}s: more than one of ${present.map((k) => TAS[k]).join(', ')}`);
  for (const k of ['required', 'preferred', 'sliceRequired']) {
    if (a[TAS[k]] !== undefined && !new RegExp(LABEL_KEY).test(a[TAS[k]])) r.error(`${where} ${TAS[k]}: ${a[TAS[k]]} is not a label key`);
  }
  if ((a[TAS.sliceRequired] === undefined) !== (a[TAS.sliceSize] === undefined)) r.error(`${where}s: ${TAS.sliceRequired} and ${TAS.sliceSize} go together`);
  const size = a[TAS.sliceSize];
  if (size !== undefined && !(/^[0-9]+$/.test(size) && Number(size) >= 1)) r.error(`${where} ${TAS.sliceSize}: ${JSON.stringify(size)} is not an integer >= 1`);
  else if (size !== undefined && Number(size) > podCount(pt)) r.error(`${where} ${TAS.sliceSize}: ${size} is more than the pod set's ${podCount(pt)} pods`);
  // This project's rule: a slice is one child Job (one rack), so the slices and the Jobs line up.
  if (size !== undefined && Number(size) !== pt.job.parallelism) r.error(`${where} ${TAS.sliceSize}: ${size}, not the Job's parallelism ${pt.job.parallelism} (each child Job, one rack, is one slice)`);
  return [a[TAS.required], a[TAS.preferred], a[TAS.sliceRequired]].filter((x) => x !== undefined);
}

// pool -> LocalQueue -> ClusterQueue, or an error naming the missing link.
function queueOf(r, pt) {
  const q = pt.owner.metadata?.labels?.[QUEUE_LABEL];
  if (!q) { r.error(`${pt.where}: no ${QUEUE_LABEL} label on ${id(pt.owner)}: Kueue does not admit it, nor account for its GPUs`); return null; }
  const lq = r.find('LocalQueue', q, nsOf(pt.owner));
  if (!lq) { r.error(`${id(pt.owner)}: ${QUEUE_LABEL} ${q}: no LocalQueue of that name in namespace ${nsOf(pt.owner)}`); return null; }
  return r.find('ClusterQueue', lq.spec?.clusterQueue) ?? null;
}

// Admission: every requested resource covered; in each group some flavor holds the whole pool (and has
// a Topology with the requested level).
function checkAdmissible(r, pt, cq, levels) {
  const demand = podRequests(pt.template.spec ?? {});
  const total = Object.fromEntries(Object.entries(demand).map(([k, v]) => [k, v * podCount(pt)]));
  const groups = cq.spec?.resourceGroups ?? [];
  for (const k of Object.keys(total)) {
    if (!groups.some((g) => (g.coveredResources ?? []).includes(k))) r.error(`${id(pt.owner)}: requests ${k}, which ClusterQueue ${cq.metadata.name} does not cover: Kueue never admits it`);
  }
  for (const g of groups) {
    const wanted = (g.coveredResources ?? []).filter((k) => total[k] > 0);
    if (!wanted.length) continue;
    const fits = (g.flavors ?? []).filter((fq) => wanted.every((k) => quantity(fq.resources?.find((x) => x.name === k)?.nominalQuota ?? 0) >= total[k]));
    if (!fits.length) { r.error(`${id(pt.owner)}: needs ${wanted.map((k) => `${k} ${+total[k].toFixed(3)}`).join(', ')} (${podCount(pt)} pods), more than any flavor's nominalQuota in ClusterQueue ${cq.metadata.name}`); continue; }
    if (levels.length && !fits.some((fq) => levels.every((l) => topologyLevels(r, fq.name).includes(l))))
      r.error(`${id(pt.owner)}: topology level ${levels.join(', ')} is not a level of the Topology of any flavor of ClusterQueue ${cq.metadata.name} that holds it`);
  }
}
const topologyLevels = (r, flavor) => (r.find('Topology', r.find('ResourceFlavor', flavor)?.spec?.topologyName)?.spec?.levels ?? []).map((l) => l.nodeLabel);

// The pool's own numbers: completions = parallelism (an Indexed Job of agents); numNodes of its
// ComputeDomain = its pods.
function checkSize(r, pt, cdByTemplate) {
  if (pt.job.completionMode !== 'Indexed') r.error(`${pt.where}: completionMode ${pt.job.completionMode ?? '(unset)'}: a pool is an Indexed Job (one index per node)`);
  if (pt.job.completions !== pt.job.parallelism) r.error(`${pt.where}: completions ${JSON.stringify(pt.job.completions)} != parallelism ${JSON.stringify(pt.job.parallelism)}`);
  for (const cd of new Set(cdClaims(pt, cdByTemplate).values())) {
    if (cd.spec?.numNodes !== podCount(pt)) r.error(`${id(cd)}: numNodes ${cd.spec?.numNodes}, but ${pt.where} runs ${podCount(pt)} agents (replicas ${pt.jobReplicas} x parallelism ${pt.job.parallelism}), one per node`);
  }
}

export function checkKueue(r, ctx) {
  checkTopologies(r);
  checkFlavors(r);
  checkClusterQueues(r);
  for (const pt of pools(r)) {
    checkSize(r, pt, ctx.cdByTemplate);
    const levels = tasRequest(r, pt);
    const cq = queueOf(r, pt);
    if (cq) checkAdmissible(r, pt, cq, levels);
  }
}

export { TAS };
