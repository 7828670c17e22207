// The node agents (moe-worker) as the manifests start them: one agent per node owning the node's
// devices, the memory it reports for the controller's fit check, its health endpoints behind the probes,
// its stop grace inside the pod's, and, inside a Job, the entry that keeps Kueue's resume whole.
import { STEP_ANNOTATION, flag, limits, quantity, requests, runsWorker, throughPoolMember } from './objects.mjs';
import { memoryVolumesBytes } from './pods.mjs';

const GPU = 'nvidia.com/gpu';

// --devices (GPU: every device the container sees) or --slots (CPU ranks), never the old per-device
// --device; a GPU agent requests GPUs, a CPU agent none and sits alone on its node (anti-affinity).
function checkDevices(r, pt, c, where) {
  const devices = flag(c, 'devices'), slots = flag(c, 'slots');
  if (flag(c, 'device') !== undefined) r.error(`${where}: --device (one agent per device): one agent per node takes --devices all (GPU) or --slots N (CPU)`);
  if ((devices === undefined) === (slots === undefined)) { r.error(`${where}: exactly one of --devices and --slots`); return; }
  const gpus = quantity(requests(c)[GPU] ?? limits(c)[GPU] ?? 0);
  if (devices !== undefined && !(gpus > 0)) r.error(`${where}: --devices=${devices} but the container requests no ${GPU}: it would see no GPU`);
  if (slots !== undefined) {
    if (!/^[1-9][0-9]*$/.test(slots)) r.error(`${where}: --slots=${slots} is not a positive integer`);
    if (gpus > 0) r.error(`${where}: --slots (CPU ranks) in a container that requests ${GPU}: use --devices`);
    if (!hostAntiAffinity(pt)) r.error(`${pt.where}: CPU agents (--slots) without a required pod anti-affinity on kubernetes.io/hostname: two could share a node's CPUs`);
  }
}
function hostAntiAffinity(pt) {
  const terms = pt.template.spec?.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
  const labels = pt.template.metadata?.labels ?? {};
  return terms.some((t) => t.topologyKey === 'kubernetes.io/hostname' &&
    Object.entries(t.labelSelector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v));
}

// --memory-gb (per rank) so that the controller's fit check works; CPU ranks and /dev/shm inside the limit.
function checkMemory(r, pt, c, where) {
  const gb = Number(flag(c, 'memory-gb'));
  if (!(gb > 0)) { r.error(`${where}: no --memory-gb (the memory each rank may use): the controller's fit check is off`); return; }
  const slots = Number(flag(c, 'slots'));
  if (!(slots > 0)) return;
  const need = slots * gb * 1e9 + memoryVolumesBytes(pt.template.spec ?? {});
  const lim = quantity(limits(c).memory ?? 0);
  if (need > lim) r.error(`${where}: --slots ${slots} x --memory-gb ${gb} GB + memory-backed volumes = ${(need / 2 ** 30).toFixed(1)} GiB > the memory limit ${limits(c).memory}`);
}

// --health-listen serves /healthz (liveness) and /readyz (readiness) on a declared port.
function checkHealth(r, c, where) {
  const listen = flag(c, 'health-listen');
  if (!listen) { r.error(`${where}: no --health-listen (the agent's /healthz and /readyz for the probes)`); return; }
  const port = Number(listen.split(':').pop());
  const named = (c.ports ?? []).find((p) => p.containerPort === port);
  if (!named) { r.error(`${where}: --health-listen ${listen}: port ${port} is not a container port`); return; }
  const probeOk = (probe, path) => c[probe]?.httpGet?.path === path && [port, named.name].includes(c[probe]?.httpGet?.port);
  if (!probeOk('livenessProbe', '/healthz')) r.error(`${where}: livenessProbe is not GET /healthz on the --health-listen port ${port}`);
  if (!probeOk('readinessProbe', '/readyz')) r.error(`${where}: readinessProbe is not GET /readyz on the --health-listen port ${port} (ready = registered with the controller)`);
}

// The pod's grace covers the agent's stop grace plus the longest step (the pool's annotation).
function checkGrace(r, pt, c, where) {
  const stop = Number(flag(c, 'stop-grace-seconds') ?? 30);
  if (!Number.isFinite(stop)) { r.error(`${where}: --stop-grace-seconds ${flag(c, 'stop-grace-seconds')} is not a number (an unset env variable?)`); return; }
  const grace = pt.template.spec?.terminationGracePeriodSeconds ?? 30;
  const stepText = pt.template.metadata?.annotations?.[STEP_ANNOTATION];
  const step = Number(stepText ?? 0);
  if (pt.job && stepText === undefined) r.error(`${pt.where}: no ${STEP_ANNOTATION} annotation (the longest step its jobs take, which terminationGracePeriodSeconds must cover)`);
  if (!(grace > stop + step)) r.error(`${pt.where}: terminationGracePeriodSeconds ${grace} does not exceed --stop-grace-seconds ${stop} + the longest step ${step} s: the kubelet would kill ranks before their stop checkpoint`);
}

// Inside a Job (a pool), moe-worker's clean exit 0 would count its index done, and Kueue's resume would
// not start it again: moe-pool-member runs it and exits 143 instead, which the Job must ignore.
function checkJobEntry(r, pt, c, where) {
  if (!pt.job) return;
  if (!throughPoolMember(c)) { r.error(`${where}: moe-worker in a Job without /usr/local/bin/moe-pool-member: its exit 0 after SIGTERM would mark the agent done, and Kueue's resume would not start it again`); return; }
  const pod = pt.template.spec ?? {};
  if (pod.restartPolicy !== 'Never') r.error(`${pt.where}: restartPolicy ${pod.restartPolicy ?? '(unset)'}: a pool's podFailurePolicy needs Never`);
  const ignores143 = (pt.job.podFailurePolicy?.rules ?? []).some((rule) => rule.action === 'Ignore' &&
    rule.onExitCodes?.operator === 'In' && (rule.onExitCodes.values ?? []).includes(143) &&
    [undefined, c.name].includes(rule.onExitCodes.containerName));
  if (!ignores143) r.error(`${pt.where}: podFailurePolicy does not Ignore exit code 143 of container ${c.name}: every clean leave (Kueue suspending the pool) would count against the retries`);
}

export function checkWorkers(r, pt) {
  for (const c of pt.template.spec?.containers ?? []) {
    if (!runsWorker(c)) continue;
    const where = `${pt.where} container ${c.name}`;
    if (!pt.job) r.error(`${where}: node agents outside a Job: a pool is a JobSet admitted by Kueue (a ${pt.owner.kind} holds its nodes where Kueue cannot see or reclaim them)`);
    checkDevices(r, pt, c, where);
    checkMemory(r, pt, c, where);
    checkHealth(r, c, where);
    checkGrace(r, pt, c, where);
    checkJobEntry(r, pt, c, where);
  }
}

