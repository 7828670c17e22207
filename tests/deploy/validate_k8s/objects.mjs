// The rendered objects and what the checks ask of them: kinds, pod templates wherever they sit (a
// Deployment's spec.template, a JobSet's replicatedJobs[].template.spec.template), containers, resource
// quantities, moe-worker's flags. Holds the errors and notes the checks add.

export const MULTUS = 'k8s.v1.cni.cncf.io/networks';
export const QUEUE_LABEL = 'kueue.x-k8s.io/queue-name';
export const STEP_ANNOTATION = 'moe-orchestrator/longest-step-seconds';

// Kinds without a namespace (kustomize takes kinds it has no schema for as namespaced, and writes its
// namespace into them: the API server would refuse the Kueue ones so written).
const CLUSTER_SCOPED = new Set([
  'Namespace', 'PriorityClass', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'StorageClass',
  'PersistentVolume', 'IngressClass', 'RuntimeClass', 'DeviceClass', 'ValidatingWebhookConfiguration',
  'MutatingWebhookConfiguration', 'ResourceFlavor', 'ClusterQueue', 'Topology', 'Cohort', 'WorkloadPriorityClass',
]);
export const isClusterScoped = (kind) => CLUSTER_SCOPED.has(kind);

export class Render {
  constructor(objects) {
    this.objects = objects;
    this.errors = [];
    this.notes = [];
  }
  error(msg) { this.errors.push(msg); }
  note(msg) { this.notes.push(msg); }
  byKind(kind) { return this.objects.filter((o) => o?.kind === kind); }
  find(kind, name, ns) {
    return this.objects.find((o) => o?.kind === kind && o.metadata?.name === name && (ns === undefined || nsOf(o) === ns));
  }
  // Every pod template of the render, with the object and (for Jobs) the Job spec that holds it.
  podTemplates() {
    return this.objects.flatMap((o) => podTemplatesOf(o));
  }
}

export const id = (o) => `${o?.kind ?? '?'}/${o?.metadata?.name ?? '?'}`;
export const nsOf = (o) => o?.metadata?.namespace ?? '';
export const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// {owner, where, template, job?, jobReplicas?}: where names the template for messages.
function podTemplatesOf(o) {
  const spec = o?.spec;
  if (!isObj(spec)) return [];
  if (['Deployment', 'DaemonSet', 'StatefulSet', 'ReplicaSet'].includes(o.kind)) return [{ owner: o, where: id(o), template: spec.template ?? {} }];
  if (o.kind === 'Job') return [{ owner: o, where: id(o), template: spec.template ?? {}, job: spec, jobReplicas: 1 }];
  if (o.kind === 'CronJob') return [{ owner: o, where: id(o), template: spec.jobTemplate?.spec?.template ?? {}, job: spec.jobTemplate?.spec }];
  if (o.kind === 'JobSet') {
    return (spec.replicatedJobs ?? []).filter(isObj).map((rj) => ({
      owner: o, where: `${id(o)} replicatedJob ${rj.name}`, template: rj.template?.spec?.template ?? {},
      job: rj.template?.spec ?? {}, jobReplicas: rj.replicas ?? 1,
    }));
  }
  return [];
}

export const containersOf = (pod) => [...(pod.initContainers ?? []), ...(pod.containers ?? [])];
// A sidecar: an init container that keeps running (restartPolicy Always); it may have probes.
export const isSidecar = (c) => c.restartPolicy === 'Always';

// Resource quantities as numbers (cores, bytes): 500m = 0.5, 64Gi = 64 * 2^30, 1e3 = 1000.
const SUFFIX = { n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
export function quantity(v) {
  if (typeof v === 'number') return v;
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(v ?? '').trim());
  if (!m || !(m[2] in SUFFIX)) return NaN;
  return Number(m[1]) * SUFFIX[m[2]];
}

// moe-worker, run directly or as the argument of moe-pool-member.
export const runsWorker = (c) => (c.command ?? []).some((w) => typeof w === 'string' && w.endsWith('/moe-worker'));
export const throughPoolMember = (c) => String((c.command ?? [])[0] ?? '').endsWith('/moe-pool-member');
// The value of --flag=value (or --flag value) in a container's args, $(VAR) expanded from literal env values.
export function flag(c, name) {
  const args = (c.args ?? []).map(String);
  let v;
  args.forEach((a, i) => {
    if (a === `--${name}`) v = args[i + 1] ?? '';
    else if (a.startsWith(`--${name}=`)) v = a.slice(name.length + 3);
  });
  if (v === undefined) return undefined;
  return v.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n) => envValue(c, n) ?? m);
}
export const envValue = (c, n) => (c.env ?? []).find((e) => e.name === n)?.value;
export const requests = (c) => c.resources?.requests ?? {};
export const limits = (c) => c.resources?.limits ?? {};
