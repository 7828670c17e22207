// Pod templates, checked where the schemas cannot: references that must resolve, DRA claims, container
// resources, capabilities, Multus, probes, QoS. Each function takes the Render and one pod template
// ({owner, where, template, job}) and adds errors to the Render.
import { DNS_LABEL, checkSchema, dnsLabel, dnsSubdomain } from './schemas.mjs';
import { MULTUS, QUEUE_LABEL, containersOf, envValue, id, isObj, isSidecar, limits, nsOf, quantity, requests, runsWorker } from './objects.mjs';

// Created by the user, not rendered: documented in deploy/k8s/base/kustomization.yaml and the docs.
const EXTERNAL = { Secret: new Set(['moe-tokens']) };
// RDMA devices come as extended resources named for them (the Network Operator's RDMA shared device
// plugin: rdma/<name>; add other naming schemes here).
const isRdma = (r) => /rdma/i.test(r);
// Extended resources (a domain-prefixed name) and hugepages cannot be overcommitted: limit = request.
const isExtended = (r) => r.startsWith('hugepages-') || (r.includes('/') && !r.startsWith('kubernetes.io/'));
export const hasCap = (c, cap) => (c.securityContext?.capabilities?.add ?? []).some((x) => x === cap || x === `CAP_${cap}`);

// The claim templates a pod may name: a ComputeDomain's channel template (made by the DRA driver in the
// ComputeDomain's namespace) or a rendered ResourceClaimTemplate.
export function claimTemplates(r) {
  const byTemplate = new Map();   // "<ns>/<template>" -> ComputeDomain
  for (const cd of r.byKind('ComputeDomain')) {
    const t = cd.spec?.channel?.resourceClaimTemplate?.name;
    if (typeof t !== 'string') continue;
    const key = `${nsOf(cd)}/${t}`;
    if (byTemplate.has(key)) r.error(`${id(cd)}: channel template ${t} is also ${id(byTemplate.get(key))}'s: one template per ComputeDomain`);
    else byTemplate.set(key, cd);
  }
  return byTemplate;
}

// The pod template's ComputeDomain claims: claim name -> ComputeDomain.
export function cdClaims(pt, cdByTemplate) {
  const out = new Map();
  for (const rc of pt.template.spec?.resourceClaims ?? []) {
    const cd = cdByTemplate.get(`${nsOf(pt.owner)}/${rc?.resourceClaimTemplateName}`);
    if (cd) out.set(rc.name, cd);
  }
  return out;
}

const has = (r, kind, name) => r.byKind(kind).some((o) => o.metadata?.name === name) || (EXTERNAL[kind]?.has(name) ?? false);

function checkSelector(r, pt) {
  const labels = pt.template.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(pt.owner.spec?.selector?.matchLabels ?? {})) {
    if (labels[k] !== v) r.error(`${pt.where}: selector ${k}=${v} does not match the pod template's labels`);
  }
}

function checkReferences(r, pt) {
  const pod = pt.template.spec ?? {};
  const sa = pod.serviceAccountName;
  if (sa && sa !== 'default' && !has(r, 'ServiceAccount', sa)) r.error(`${pt.where}: ServiceAccount ${sa} is not rendered`);
  for (const v of pod.volumes ?? []) {
    if (v.configMap && !has(r, 'ConfigMap', v.configMap.name)) r.error(`${pt.where}: volume ${v.name}: ConfigMap ${v.configMap.name} is not rendered`);
    if (v.secret && !has(r, 'Secret', v.secret.secretName)) r.error(`${pt.where}: volume ${v.name}: Secret ${v.secret.secretName} is neither rendered nor documented`);
    if (v.persistentVolumeClaim && !has(r, 'PersistentVolumeClaim', v.persistentVolumeClaim.claimName))
      r.error(`${pt.where}: volume ${v.name}: PVC ${v.persistentVolumeClaim.claimName} is not rendered`);
  }
  const pc = pod.priorityClassName;
  if (!pc) r.error(`${pt.where}: no priorityClassName (a pod without one has priority 0: the first a node under pressure gives up)`);
  else if (!pc.startsWith('system-') && !has(r, 'PriorityClass', pc)) r.error(`${pt.where}: PriorityClass ${pc} is not rendered`);
}

// Pod resourceClaims (DRA), strictly: the bundled schema checks only that name is a string.
function checkPodClaims(r, pt, ctx) {
  const claims = pt.template.spec?.resourceClaims;
  const podClaims = new Map();
  if (claims !== undefined && !Array.isArray(claims)) r.error(`${pt.where}: spec.resourceClaims must be a list`);
  for (const [i, rc] of (Array.isArray(claims) ? claims : []).entries()) {
    const where = `${pt.where}: resourceClaims[${i}]`;
    if (!isObj(rc)) { r.error(`${where} must be an object`); continue; }
    for (const k of Object.keys(rc)) {
      if (!['name', 'resourceClaimName', 'resourceClaimTemplateName'].includes(k))
        r.error(`${where}: unknown field ${k} (allowed: name, resourceClaimName, resourceClaimTemplateName)`);
    }
    const out = [];
    checkSchema(dnsLabel, rc.name, `${where}.name`, out);
    out.forEach((e) => r.error(e));
    if (podClaims.has(rc.name)) r.error(`${where}: claim name ${rc.name} appears twice`);
    podClaims.set(rc.name, { used: false });
    checkClaimSource(r, pt, rc, where, ctx);
  }
  return podClaims;
}

function checkClaimSource(r, pt, rc, where, ctx) {
  const byName = rc.resourceClaimName !== undefined, byTemplate = rc.resourceClaimTemplateName !== undefined;
  if (byName === byTemplate) { r.error(`${where} (${rc.name}): exactly one of resourceClaimName and resourceClaimTemplateName must be set`); return; }
  const ns = nsOf(pt.owner);
  if (byName) {
    if (!r.find('ResourceClaim', rc.resourceClaimName, ns)) r.error(`${where} (${rc.name}): ResourceClaim ${rc.resourceClaimName} is not rendered`);
    return;
  }
  const tn = rc.resourceClaimTemplateName;
  if (typeof tn !== 'string') { r.error(`${where}.resourceClaimTemplateName must be a string`); return; }
  const key = `${ns}/${tn}`;
  if (ctx.cdByTemplate.has(key)) ctx.claimedTemplates.add(key);
  else if (!r.find('ResourceClaimTemplate', tn, ns)) {
    const known = [...ctx.cdByTemplate.keys()].map((k) => k.split('/')[1]);
    r.error(`${where} (${rc.name}): resourceClaimTemplateName ${tn} is neither the channel template of a rendered ComputeDomain` +
      ` in namespace ${ns || '(none)'} (${known.length ? known.join(', ') : 'none rendered'}) nor a rendered ResourceClaimTemplate`);
  }
}

function checkContainerBasics(r, pt, c, volumes) {
  const where = `${pt.where} container ${c.name}`;
  if (!c.resources?.requests || !c.resources?.limits) r.error(`${where}: resources.requests and .limits are required`);
  for (const m of c.volumeMounts ?? []) if (!volumes.has(m.name)) r.error(`${where}: volumeMount ${m.name} has no volume`);
  for (const e of c.env ?? []) {
    const s = e.valueFrom?.secretKeyRef, m = e.valueFrom?.configMapKeyRef;
    if (s && !has(r, 'Secret', s.name)) r.error(`${where}: env ${e.name}: Secret ${s.name} is neither rendered nor documented`);
    if (m && !has(r, 'ConfigMap', m.name)) r.error(`${where}: env ${e.name}: ConfigMap ${m.name} is not rendered`);
  }
  const ports = new Set((c.ports ?? []).flatMap((p) => [p.name, p.containerPort]));
  for (const probe of ['livenessProbe', 'readinessProbe', 'startupProbe']) {
    const p = c[probe];
    const port = p?.grpc?.port ?? p?.httpGet?.port ?? p?.tcpSocket?.port;
    if (p && port !== undefined && !ports.has(port)) r.error(`${where}: ${probe} port ${port} is not a container port`);
  }
}

// resources, strictly: requests, limits, claims; each claim names one of the pod's resourceClaims;
// extended resources and hugepages with limit = request (the API server refuses otherwise).
function checkContainerResources(r, pt, c, podClaims) {
  const where = `${pt.where} container ${c.name}`;
  const res = c.resources ?? {};
  for (const k of Object.keys(res)) if (!['requests', 'limits', 'claims'].includes(k)) r.error(`${where}: resources.${k}: unknown field (allowed: requests, limits, claims)`);
  const claimNames = new Set();
  if (res.claims !== undefined && !Array.isArray(res.claims)) r.error(`${where}: resources.claims must be a list`);
  for (const [i, cl] of (Array.isArray(res.claims) ? res.claims : []).entries()) {
    if (!isObj(cl)) { r.error(`${where}: resources.claims[${i}] must be an object`); continue; }
    for (const k of Object.keys(cl)) if (!['name', 'request'].includes(k)) r.error(`${where}: resources.claims[${i}].${k}: unknown field (allowed: name, request)`);
    if (claimNames.has(cl.name)) r.error(`${where}: resources.claims names ${cl.name} twice`);
    claimNames.add(cl.name);
    if (!podClaims.has(cl.name)) r.error(`${where}: resources.claims[${i}].name ${cl.name} is not among the pod's resourceClaims (${[...podClaims.keys()].join(', ') || 'none'})`);
    else podClaims.get(cl.name).used = true;
  }
  const req = requests(c), lim = limits(c);
  for (const k of new Set([...Object.keys(req), ...Object.keys(lim)])) {
    if (!isExtended(k)) continue;
    if (lim[k] === undefined) r.error(`${where}: ${k} is requested without a limit (extended resources need limit = request)`);
    else if (req[k] !== undefined && quantity(req[k]) !== quantity(lim[k])) r.error(`${where}: ${k} request ${req[k]} != limit ${lim[k]} (extended resources cannot be overcommitted)`);
  }
  return claimNames;
}

// Capabilities: every container drops ALL; RDMA needs IPC_LOCK; NCCL_MNNVL_ENABLE=1 needs an IMEX channel.
function checkContainerPrivileges(r, pt, c, claimNames, domains) {
  const where = `${pt.where} container ${c.name}`;
  const rdma = Object.keys({ ...requests(c), ...limits(c) }).filter(isRdma);
  if (rdma.length && !hasCap(c, 'IPC_LOCK') && c.securityContext?.privileged !== true)
    r.error(`${where}: requests ${rdma.join(', ')} but securityContext.capabilities.add lacks IPC_LOCK (RDMA memory registration pins memory)`);
  if (!(c.securityContext?.capabilities?.drop ?? []).includes('ALL')) r.error(`${where}: securityContext.capabilities.drop must include ALL`);
  if (String(envValue(c, 'NCCL_MNNVL_ENABLE')) === '1') {
    if (![...claimNames].some((n) => domains.has(n)))
      r.error(`${where}: NCCL_MNNVL_ENABLE=1 but the container claims no ComputeDomain channel (resources.claims naming a pod resourceClaim whose template is a ComputeDomain's): NCCL would fail to initialise`);
    if (String(envValue(c, 'NCCL_CUMEM_ENABLE')) === '0') r.error(`${where}: NCCL_MNNVL_ENABLE=1 needs NCCL_CUMEM_ENABLE (it is 0)`);
  }
}

// Several moe-workers in one pod need distinct --name (the default <node>-<device> repeats).
function checkWorkerNames(r, pt) {
  const workers = (pt.template.spec?.containers ?? []).filter(runsWorker);
  if (workers.length < 2) return;
  const seen = new Map();
  for (const c of workers) {
    const n = (c.args ?? []).find((a) => typeof a === 'string' && a.startsWith('--name='))?.slice('--name='.length);
    if (n === undefined) r.error(`${pt.where} container ${c.name}: one of ${workers.length} moe-worker containers without --name (the default <node>-<device> would repeat)`);
    else if (seen.has(n)) r.error(`${pt.where} containers ${seen.get(n)} and ${c.name}: the same --name=${n}`);
    else seen.set(n, c.name);
  }
}

// Multus: k8s.v1.cni.cncf.io/networks is "[ns/]name[@if], ..." or a JSON list of {name, namespace?, interface?}.
function multusEntries(r, where, nets) {
  if (typeof nets !== 'string') { r.error(`${where} must be a string`); return []; }
  if (!nets.trim().startsWith('[')) {
    return nets.split(',').map((s) => s.trim()).map((s) => {
      const m = /^(?:([^/@]+)\/)?([^/@]+)(?:@([^/@]+))?$/.exec(s);
      return m ? { ns: m[1], name: m[2] } : { bad: s };
    });
  }
  try {
    const list = JSON.parse(nets);
    if (!Array.isArray(list)) throw new Error('not a list');
    return list.map((e) => (isObj(e) ? { ns: e.namespace, name: e.name } : { bad: JSON.stringify(e) }));
  } catch (e) { r.error(`${where}: not a JSON list of networks (${e.message})`); return []; }
}
function checkMultus(r, pt) {
  const nets = pt.template.metadata?.annotations?.[MULTUS];
  if (nets === undefined) return;
  const where = `${pt.where}: annotation ${MULTUS}`;
  const entries = multusEntries(r, where, nets);
  const placeholders = [];
  for (const e of entries) {
    if (e.bad !== undefined) { r.error(`${where}: entry ${e.bad} is not [namespace/]name[@interface]`); continue; }
    const out = [];
    checkSchema(dnsSubdomain, e.name, `${where}: network name`, out);
    if (e.ns !== undefined) checkSchema(dnsLabel, e.ns, `${where}: network namespace`, out);
    out.forEach((x) => r.error(x));
    if (typeof e.name === 'string' && e.name.startsWith('edit-me')) placeholders.push(e.name);
  }
  if (placeholders.length) r.note(`${pt.where}: Multus networks ${placeholders.join(', ')} are placeholders: name your NetworkAttachmentDefinitions before applying`);
  if (!entries.length && typeof nets === 'string') r.error(`${where} names no network`);
}

// Long-running pods have liveness and readiness probes on every container. Exempt: Jobs outside Kueue
// (one-shot: a liveness restart of the demo's submit Job would submit twice). Init containers take no
// probes at all (the API server refuses them), sidecars (restartPolicy Always) do.
export const isLongRunning = (pt) => !pt.job || pt.owner.metadata?.labels?.[QUEUE_LABEL] !== undefined || (pt.template.spec?.containers ?? []).some(runsWorker);
function checkProbes(r, pt) {
  const pod = pt.template.spec ?? {};
  for (const c of pod.initContainers ?? []) {
    if (isSidecar(c)) continue;
    for (const p of ['livenessProbe', 'readinessProbe', 'startupProbe']) if (c[p]) r.error(`${pt.where} init container ${c.name}: ${p} (init containers take none; the API server refuses it)`);
  }
  if (!isLongRunning(pt)) return;
  const probed = [...(pod.initContainers ?? []).filter(isSidecar), ...(pod.containers ?? [])];
  for (const c of probed) {
    for (const p of ['livenessProbe', 'readinessProbe']) if (!c[p]) r.error(`${pt.where} container ${c.name}: no ${p}`);
  }
}

// Guaranteed QoS: every container, init containers too, with cpu and memory limits equal to requests.
function checkQos(r, pt) {
  for (const c of containersOf(pt.template.spec ?? {})) {
    for (const k of ['cpu', 'memory']) {
      const req = requests(c)[k], lim = limits(c)[k];
      if (lim === undefined) r.error(`${pt.where} container ${c.name}: no ${k} limit: not Guaranteed QoS`);
      else if (req !== undefined && quantity(req) !== quantity(lim)) r.error(`${pt.where} container ${c.name}: ${k} request ${req} != limit ${lim}: not Guaranteed QoS`);
    }
  }
}

// Memory-backed emptyDirs (/dev/shm) are tmpfs charged to the pod's memory cgroup: each needs a
// sizeLimit, and together they must fit inside the containers' memory limits with room to spare.
export const memoryVolumesBytes = (pod) => (pod.volumes ?? []).filter((v) => v.emptyDir?.medium === 'Memory').reduce((s, v) => s + quantity(v.emptyDir.sizeLimit ?? NaN), 0);
function checkMemoryVolumes(r, pt) {
  const pod = pt.template.spec ?? {};
  for (const v of pod.volumes ?? []) {
    if (v.emptyDir?.medium === 'Memory' && v.emptyDir.sizeLimit === undefined)
      r.error(`${pt.where}: memory-backed volume ${v.name} has no sizeLimit (tmpfs may take the whole memory limit)`);
  }
  const shm = memoryVolumesBytes(pod);
  const mem = (pod.containers ?? []).reduce((s, c) => s + quantity(limits(c).memory ?? 0), 0);
  if (shm > 0 && !(shm < mem)) r.error(`${pt.where}: memory-backed volumes (${shm / 2 ** 30} GiB) do not fit inside the containers' memory limits (${mem / 2 ** 30} GiB): tmpfs pages count against the limit`);
}

// All pod-template checks; ctx carries what spans templates (claim templates, which were claimed).
export function checkPodTemplate(r, pt, ctx) {
  const pod = pt.template.spec ?? {};
  checkSelector(r, pt);
  checkReferences(r, pt);
  const podClaims = checkPodClaims(r, pt, ctx);
  const domains = cdClaims(pt, ctx.cdByTemplate);
  const volumes = new Set((pod.volumes ?? []).map((v) => v.name));
  const names = new Set();
  for (const c of containersOf(pod)) {
    if (names.has(c.name)) r.error(`${pt.where}: container name ${c.name} appears twice`);
    names.add(c.name);
    checkContainerBasics(r, pt, c, volumes);
    const claimNames = checkContainerResources(r, pt, c, podClaims);
    checkContainerPrivileges(r, pt, c, claimNames, domains);
  }
  for (const [name, { used }] of podClaims) if (!used) r.error(`${pt.where}: resourceClaims ${name} is claimed by no container (resources.claims)`);
  checkWorkerNames(r, pt);
  checkMultus(r, pt);
  checkProbes(r, pt);
  checkQos(r, pt);
  checkMemoryVolumes(r, pt);
}

// Every ComputeDomain is claimed by some rendered pod template.
export function checkDomainsClaimed(r, ctx) {
  for (const cd of r.byKind('ComputeDomain')) {
    const key = `${nsOf(cd)}/${cd.spec?.channel?.resourceClaimTemplate?.name}`;
    if (!ctx.claimedTemplates.has(key)) r.error(`${id(cd)}: no rendered pod template claims its channel template ${key.split('/')[1]} in namespace ${nsOf(cd) || '(none)'}`);
  }
}

// One image for the controller, the pools and the tools: a pool applied on its own (an extra pool) must
// name the same registry and tag as the overlay it joins.
export function checkOneImage(r) {
  const images = new Map();
  for (const pt of r.podTemplates()) {
    for (const c of containersOf(pt.template.spec ?? {})) {
      if (typeof c.image === 'string' && c.image.includes('moe-orchestrator')) images.set(c.image, `${pt.where} container ${c.name}`);
    }
  }
  if (images.size > 1) r.error(`more than one moe-orchestrator image: ${[...images].map(([i, w]) => `${i} (${w})`).join(', ')}`);
}

export { DNS_LABEL, isRdma };
