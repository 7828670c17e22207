// Validates rendered Kubernetes manifests (multi-document YAML on stdin or in the files named) against
// the OpenAPI schemas bundled in the kubernetes-models packages (offline: the JSON schemas are compiled
// into the npm packages), against our own schemas for the custom resources those packages lack (the
// NVIDIA DRA driver's ComputeDomain, below), plus cross-object checks the schemas cannot express.
// Exit 1 on a problem.
//   kubectl kustomize deploy/k8s/overlays/cpu-demo | MOE_K8S_NODE_MODULES=DIR/node_modules node tests/deploy/validate_k8s.mjs
//   node tests/deploy/validate_k8s.mjs [--require WHAT]... [FILE...]
// MOE_K8S_NODE_MODULES: where kubernetes-models, @kubernetes-models/prometheus-operator and yaml are
// installed (tests/deploy/k8s_test.sh installs pinned versions into a cache directory).
// Kinds with neither a bundled nor an own schema are reported as SKIPPED (loudly) and fail the run when
// MOE_K8S_STRICT=1.
// --require WHAT: what the render must contain (k8s_test.sh passes these per overlay); a missing one fails:
//   compute-domain:KIND/NAME  a ComputeDomain whose channel template KIND/NAME's pods claim, in every container
//   rdma:KIND/NAME            every container of KIND/NAME's pods requests an RDMA resource and holds IPC_LOCK,
//                             and the pod template names its Multus networks
//   podmonitor-honor-labels   a PodMonitor, every endpoint of it with honorLabels: true
//
// What the schemas do NOT catch, and the checks below do: the bundled schemas accept unknown fields
// (a misspelt `resourceClaimTemplateNam` passes them; the API server would drop it), so the fields this
// project's GPU overlay depends on (pod resourceClaims, container resources and resources.claims,
// ComputeDomain) are checked strictly here, unknown keys included.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const nodeModules = process.env.MOE_K8S_NODE_MODULES;
if (!nodeModules || !existsSync(join(nodeModules, 'kubernetes-models'))) {
  console.error(`FAIL: MOE_K8S_NODE_MODULES (${nodeModules}) has no kubernetes-models: run tests/deploy/k8s_test.sh`);
  process.exit(2);
}
// Modules by file (the packages are outside this script's directory, where ESM resolution cannot look).
const load = (rel) => import(pathToFileURL(join(nodeModules, rel)).href);
const { parseAllDocuments } = await load('yaml/dist/index.js');

// ---- arguments
const inputs = [];
const requires = [];
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === '--require') requires.push(process.argv[++i] ?? '');
  else if (a.startsWith('--require=')) requires.push(a.slice('--require='.length));
  else if (a.startsWith('--')) { console.error(`FAIL: unknown option ${a}`); process.exit(2); }
  else inputs.push(a);
}

// apiVersion -> the module prefix that holds its models.
function modulePath(apiVersion, kind) {
  if (apiVersion === 'monitoring.coreos.com/v1' || apiVersion === 'monitoring.coreos.com/v1alpha1')
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}.js`;
  if (!/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  return `kubernetes-models/${apiVersion}/${kind}.js`;   // core: kubernetes-models/v1/Service.js
}

// ---- our own schemas: a JSON-Schema subset (type, required, properties, additionalProperties, items,
// enum, minimum, maxLength, pattern), for custom resources that kubernetes-models has no model of.
const DNS_LABEL = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';                       // RFC 1123 label, <= 63
const DNS_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';  // <= 253
const dnsLabel = { type: 'string', maxLength: 63, pattern: DNS_LABEL };
const dnsSubdomain = { type: 'string', maxLength: 253, pattern: DNS_SUBDOMAIN };
const stringMap = { type: 'object', additionalProperties: { type: 'string' } };
const objectMeta = {
  type: 'object', required: ['name'],
  properties: { name: dnsSubdomain, namespace: dnsLabel, labels: stringMap, annotations: stringMap },
};
// ComputeDomain, resource.nvidia.com/v1beta1: the CRD of the NVIDIA DRA Driver for GPUs
// (NVIDIA/k8s-dra-driver-gpu, computedomains.resource.nvidia.com; api/nvidia.com/resource/v1beta1/
// computedomain.go). spec: numNodes (integer >= 0; required in the driver's earlier CRDs, default 0 in
// later ones: we require it, the overlay states the trays it expects), channel (required):
// resourceClaimTemplate.name (required), allocationMode All|Single (default Single). spec is immutable
// once created. The CRD's structural schema prunes unknown fields (the API server drops them, with a
// warning at most): we reject them instead, since a dropped `numNode` would silently mean numNodes 0.
const computeDomainV1beta1 = {
  type: 'object', required: ['apiVersion', 'kind', 'metadata', 'spec'], additionalProperties: false,
  properties: {
    apiVersion: { enum: ['resource.nvidia.com/v1beta1'] },
    kind: { enum: ['ComputeDomain'] },
    metadata: objectMeta,
    spec: {
      type: 'object', required: ['numNodes', 'channel'], additionalProperties: false,
      properties: {
        numNodes: { type: 'integer', minimum: 0 },
        channel: {
          type: 'object', required: ['resourceClaimTemplate'], additionalProperties: false,
          properties: {
            resourceClaimTemplate: {
              type: 'object', required: ['name'], additionalProperties: false, properties: { name: dnsSubdomain },
            },
            allocationMode: { type: 'string', enum: ['All', 'Single'] },
          },
        },
      },
    },
    status: { type: 'object' },   // written by the driver; not ours to render
  },
};
const ownSchemas = { 'resource.nvidia.com/v1beta1 ComputeDomain': computeDomainV1beta1 };

function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}
function checkSchema(schema, v, path, out) {
  const at = path || '(root)';
  if (schema.type) {
    const t = typeOf(v);
    const ok = t === schema.type || (schema.type === 'number' && t === 'integer');
    if (!ok) { out.push(`${at} must be ${schema.type}, not ${t}${t === 'string' ? ` "${v}"` : ''}`); return; }
  }
  if (schema.enum && !schema.enum.includes(v)) out.push(`${at} must be one of ${schema.enum.join(', ')} (is ${JSON.stringify(v)})`);
  if (schema.minimum !== undefined && typeof v === 'number' && v < schema.minimum) out.push(`${at} must be >= ${schema.minimum}`);
  if (typeof v === 'string') {
    if (schema.maxLength !== undefined && v.length > schema.maxLength) out.push(`${at} is longer than ${schema.maxLength}`);
    if (schema.pattern && !new RegExp(schema.pattern).test(v)) out.push(`${at} "${v}" must match ${schema.pattern}`);
  }
  if (typeOf(v) === 'object') {
    for (const r of schema.required ?? []) if (v[r] === undefined) out.push(`${path ? path + '.' : ''}${r} is required`);
    for (const [k, val] of Object.entries(v)) {
      const sub = schema.properties?.[k];
      const p = path ? `${path}.${k}` : k;
      if (sub) checkSchema(sub, val, p, out);
      else if (schema.additionalProperties === false) out.push(`${p}: unknown field (allowed: ${Object.keys(schema.properties ?? {}).join(', ')})`);
      else if (typeof schema.additionalProperties === 'object') checkSchema(schema.additionalProperties, val, p, out);
    }
  }
  if (typeOf(v) === 'array' && schema.items) v.forEach((x, i) => checkSchema(schema.items, x, `${path}[${i}]`, out));
}

// ---- read
const text = inputs.length ? inputs.map((f) => readFileSync(f, 'utf8')).join('\n---\n') : readFileSync(0, 'utf8');
// Kubernetes reads YAML 1.1 (sigs.k8s.io/yaml): 0440 is octal there.
const docs = parseAllDocuments(text, { version: '1.1' });
const objects = [];
const errors = [];
const notes = [];
for (const d of docs) {
  if (d.errors.length) { errors.push(`YAML: ${d.errors.map((e) => e.message).join('; ')}`); continue; }
  const o = d.toJS();
  if (o !== null && o !== undefined) objects.push(o);
}

// ---- each object against its schema
const id = (o) => `${o?.kind ?? '?'}/${o?.metadata?.name ?? '?'}`;
let validated = 0;
let ownValidated = 0;
const skipped = [];
for (const o of objects) {
  if (typeof o !== 'object' || !o.apiVersion || !o.kind) { errors.push(`${id(o)}: apiVersion and kind are required`); continue; }
  if (!o.metadata?.name) errors.push(`${id(o)}: metadata.name is required`);
  const own = ownSchemas[`${o.apiVersion} ${o.kind}`];
  if (own) {
    const out = [];
    checkSchema(own, o, '', out);
    for (const e of out) errors.push(`${o.apiVersion} ${id(o)}: ${e}`);
    validated++;
    ownValidated++;
    continue;
  }
  const mod = modulePath(o.apiVersion, o.kind);
  let Model = null;
  if (mod) {
    if (existsSync(join(nodeModules, mod))) Model = (await load(mod))[o.kind];
  }
  // Built-in groups (v1, apps/v1, *.k8s.io/...) all have models: a miss there is a wrong apiVersion/kind.
  const builtin = !o.apiVersion.includes('/') || !o.apiVersion.split('/')[0].includes('.') || o.apiVersion.split('/')[0].endsWith('.k8s.io');
  if (!Model && builtin) { errors.push(`${o.apiVersion} ${id(o)}: no such built-in apiVersion/kind`); continue; }
  if (!Model) { skipped.push(`${o.apiVersion} ${id(o)}`); continue; }
  try {
    new Model(o).validate();
    validated++;
  } catch (e) {
    errors.push(`${o.apiVersion} ${id(o)}: ${e.message}`);
  }
}

// ---- cross-object checks: selectors select their own pods; references resolve; every container has resources.
const byKind = (k) => objects.filter((o) => o?.kind === k);
const names = (k) => new Set(byKind(k).map((o) => o.metadata?.name));
const nsOf = (o) => o?.metadata?.namespace ?? '';
// Created by the user, not rendered: documented in deploy/k8s/base/kustomization.yaml and the docs.
const external = { Secret: new Set(['moe-tokens']) };
const has = (k, n) => names(k).has(n) || (external[k]?.has(n) ?? false);
const podOwners = ['Deployment', 'DaemonSet', 'StatefulSet', 'Job', 'ReplicaSet'];
const workloads = objects.filter((x) => podOwners.includes(x?.kind));
const containersOf = (pod) => [...(pod.initContainers ?? []), ...(pod.containers ?? [])];
const isObj = (v) => typeOf(v) === 'object';

// DRA: the claim templates a pod may name. A ComputeDomain's channel template is created by the DRA
// driver in the ComputeDomain's namespace; a rendered ResourceClaimTemplate is one too.
const computeDomains = byKind('ComputeDomain');
const cdByTemplate = new Map();   // "<ns>/<template>" -> ComputeDomain
for (const cd of computeDomains) {
  const t = cd.spec?.channel?.resourceClaimTemplate?.name;
  if (typeof t !== 'string') continue;
  const key = `${nsOf(cd)}/${t}`;
  if (cdByTemplate.has(key)) errors.push(`${id(cd)}: channel template ${t} is also ${id(cdByTemplate.get(key))}'s: one template per ComputeDomain`);
  else cdByTemplate.set(key, cd);
}
const rctNames = new Set(byKind('ResourceClaimTemplate').map((o) => `${nsOf(o)}/${o.metadata?.name}`));
const rcNames = new Set(byKind('ResourceClaim').map((o) => `${nsOf(o)}/${o.metadata?.name}`));
const claimedTemplates = new Set();

// RDMA devices come as extended resources named for them (the Network Operator's RDMA shared device
// plugin: rdma/<name>; add other naming schemes here).
const RDMA_RESOURCE = [/rdma/i];
const isRdma = (r) => RDMA_RESOURCE.some((re) => re.test(r));
const hasCap = (c, cap) => (c.securityContext?.capabilities?.add ?? []).some((x) => x === cap || x === `CAP_${cap}`);
// Extended resources (a domain-prefixed name) and hugepages cannot be overcommitted: limit = request.
const isExtended = (r) => r.startsWith('hugepages-') || (r.includes('/') && !r.startsWith('kubernetes.io/'));
const envValue = (c, n) => (c.env ?? []).find((e) => e.name === n)?.value;
const MULTUS = 'k8s.v1.cni.cncf.io/networks';

// The pod template's ComputeDomain claims, for the checks below and --require: name -> ComputeDomain.
function cdClaims(o) {
  const out = new Map();
  for (const rc of o.spec?.template?.spec?.resourceClaims ?? []) {
    const cd = cdByTemplate.get(`${nsOf(o)}/${rc?.resourceClaimTemplateName}`);
    if (cd) out.set(rc.name, cd);
  }
  return out;
}

for (const o of workloads) {
  const t = o.spec?.template;
  const sel = o.spec?.selector?.matchLabels ?? {};
  const labels = t?.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(sel)) {
    if (labels[k] !== v) errors.push(`${id(o)}: selector ${k}=${v} does not match the pod template's labels`);
  }
  const pod = t?.spec ?? {};
  const sa = pod.serviceAccountName;
  if (sa && sa !== 'default' && !has('ServiceAccount', sa)) errors.push(`${id(o)}: ServiceAccount ${sa} is not rendered`);
  const volumes = new Set((pod.volumes ?? []).map((v) => v.name));
  for (const v of pod.volumes ?? []) {
    if (v.configMap && !has('ConfigMap', v.configMap.name)) errors.push(`${id(o)}: volume ${v.name}: ConfigMap ${v.configMap.name} is not rendered`);
    if (v.secret && !has('Secret', v.secret.secretName)) errors.push(`${id(o)}: volume ${v.name}: Secret ${v.secret.secretName} is neither rendered nor documented`);
    if (v.persistentVolumeClaim && !has('PersistentVolumeClaim', v.persistentVolumeClaim.claimName))
      errors.push(`${id(o)}: volume ${v.name}: PVC ${v.persistentVolumeClaim.claimName} is not rendered`);
  }

  // Pod resourceClaims (DRA), strictly: the bundled schema checks only that name is a string.
  const podClaims = new Map();
  if (pod.resourceClaims !== undefined && !Array.isArray(pod.resourceClaims)) errors.push(`${id(o)}: spec.resourceClaims must be a list`);
  for (const [i, rc] of (Array.isArray(pod.resourceClaims) ? pod.resourceClaims : []).entries()) {
    const where = `${id(o)}: resourceClaims[${i}]`;
    if (!isObj(rc)) { errors.push(`${where} must be an object`); continue; }
    for (const k of Object.keys(rc)) {
      if (!['name', 'resourceClaimName', 'resourceClaimTemplateName'].includes(k))
        errors.push(`${where}: unknown field ${k} (allowed: name, resourceClaimName, resourceClaimTemplateName)`);
    }
    const out = [];
    checkSchema(dnsLabel, rc.name, `${where}.name`, out);
    errors.push(...out);
    if (podClaims.has(rc.name)) errors.push(`${where}: claim name ${rc.name} appears twice`);
    podClaims.set(rc.name, { used: false });
    const byName = rc.resourceClaimName !== undefined, byTemplate = rc.resourceClaimTemplateName !== undefined;
    if (byName === byTemplate) { errors.push(`${where} (${rc.name}): exactly one of resourceClaimName and resourceClaimTemplateName must be set`); continue; }
    if (byTemplate) {
      const tn = rc.resourceClaimTemplateName;
      if (typeof tn !== 'string') { errors.push(`${where}.resourceClaimTemplateName must be a string`); continue; }
      const key = `${nsOf(o)}/${tn}`;
      if (cdByTemplate.has(key)) claimedTemplates.add(key);
      else if (!rctNames.has(key)) {
        const known = [...cdByTemplate.keys()].map((k) => k.split('/')[1]);
        errors.push(`${where} (${rc.name}): resourceClaimTemplateName ${tn} is neither the channel template of a rendered ComputeDomain` +
          ` in namespace ${nsOf(o) || '(none)'} (${known.length ? known.join(', ') : 'none rendered'}) nor a rendered ResourceClaimTemplate`);
      }
    } else if (!rcNames.has(`${nsOf(o)}/${rc.resourceClaimName}`)) {
      errors.push(`${where} (${rc.name}): ResourceClaim ${rc.resourceClaimName} is not rendered`);
    }
  }
  const domains = cdClaims(o);

  const containerNames = new Set();
  const workerNames = new Map();
  for (const c of containersOf(pod)) {
    const where = `${id(o)} container ${c.name}`;
    if (containerNames.has(c.name)) errors.push(`${id(o)}: container name ${c.name} appears twice`);
    containerNames.add(c.name);
    if (!c.resources?.requests || !c.resources?.limits) errors.push(`${where}: resources.requests and .limits are required`);
    for (const m of c.volumeMounts ?? []) if (!volumes.has(m.name)) errors.push(`${where}: volumeMount ${m.name} has no volume`);
    for (const e of c.env ?? []) {
      const s = e.valueFrom?.secretKeyRef, m = e.valueFrom?.configMapKeyRef;
      if (s && !has('Secret', s.name)) errors.push(`${where}: env ${e.name}: Secret ${s.name} is neither rendered nor documented`);
      if (m && !has('ConfigMap', m.name)) errors.push(`${where}: env ${e.name}: ConfigMap ${m.name} is not rendered`);
    }
    const ports = new Set((c.ports ?? []).flatMap((p) => [p.name, p.containerPort]));
    for (const probe of ['livenessProbe', 'readinessProbe', 'startupProbe']) {
      const p = c[probe];
      const port = p?.grpc?.port ?? p?.httpGet?.port ?? p?.tcpSocket?.port;
      if (p && port !== undefined && !ports.has(port)) errors.push(`${where}: ${probe} port ${port} is not a container port`);
    }

    // resources, strictly: requests, limits, claims; each claim names one of the pod's resourceClaims.
    const res = c.resources ?? {};
    for (const k of Object.keys(res)) if (!['requests', 'limits', 'claims'].includes(k)) errors.push(`${where}: resources.${k}: unknown field (allowed: requests, limits, claims)`);
    const claimNames = new Set();
    if (res.claims !== undefined && !Array.isArray(res.claims)) errors.push(`${where}: resources.claims must be a list`);
    for (const [i, cl] of (Array.isArray(res.claims) ? res.claims : []).entries()) {
      if (!isObj(cl)) { errors.push(`${where}: resources.claims[${i}] must be an object`); continue; }
      for (const k of Object.keys(cl)) if (!['name', 'request'].includes(k)) errors.push(`${where}: resources.claims[${i}].${k}: unknown field (allowed: name, request)`);
      if (claimNames.has(cl.name)) errors.push(`${where}: resources.claims names ${cl.name} twice`);
      claimNames.add(cl.name);
      if (!podClaims.has(cl.name)) errors.push(`${where}: resources.claims[${i}].name ${cl.name} is not among the pod's resourceClaims (${[...podClaims.keys()].join(', ') || 'none'})`);
      else podClaims.get(cl.name).used = true;
    }
    // Extended resources and hugepages: a limit, equal to the request (the API server refuses otherwise).
    const req = res.requests ?? {}, lim = res.limits ?? {};
    for (const r of new Set([...Object.keys(req), ...Object.keys(lim)])) {
      if (!isExtended(r)) continue;
      if (lim[r] === undefined) errors.push(`${where}: ${r} is requested without a limit (extended resources need limit = request)`);
      else if (req[r] !== undefined && String(req[r]) !== String(lim[r])) errors.push(`${where}: ${r} request ${req[r]} != limit ${lim[r]} (extended resources cannot be overcommitted)`);
    }
    // RDMA memory registration pins memory: IPC_LOCK (or a privileged container).
    const rdma = Object.keys({ ...req, ...lim }).filter(isRdma);
    if (rdma.length && !hasCap(c, 'IPC_LOCK') && c.securityContext?.privileged !== true)
      errors.push(`${where}: requests ${rdma.join(', ')} but securityContext.capabilities.add lacks IPC_LOCK (RDMA memory registration pins memory)`);
    // This project's policy: every container drops ALL capabilities and adds back only what it needs.
    if (!(c.securityContext?.capabilities?.drop ?? []).includes('ALL')) errors.push(`${where}: securityContext.capabilities.drop must include ALL`);
    // NCCL_MNNVL_ENABLE=1 makes NCCL fail without an IMEX channel: the container must hold a ComputeDomain claim.
    if (String(envValue(c, 'NCCL_MNNVL_ENABLE')) === '1') {
      if (![...claimNames].some((n) => domains.has(n)))
        errors.push(`${where}: NCCL_MNNVL_ENABLE=1 but the container claims no ComputeDomain channel (resources.claims naming a pod resourceClaim whose template is a ComputeDomain's): NCCL would fail to initialise`);
      if (String(envValue(c, 'NCCL_CUMEM_ENABLE')) === '0') errors.push(`${where}: NCCL_MNNVL_ENABLE=1 needs NCCL_CUMEM_ENABLE (it is 0)`);
    }
    // moe-worker: several workers in one pod need distinct --name (the default <node>-<device> repeats).
    if ((c.command ?? [])[0]?.endsWith('moe-worker')) {
      const n = (c.args ?? []).find((a) => typeof a === 'string' && a.startsWith('--name='));
      workerNames.set(c.name, n?.slice('--name='.length));
    }
  }
  for (const [name, { used }] of podClaims) if (!used) errors.push(`${id(o)}: resourceClaims ${name} is claimed by no container (resources.claims)`);
  if (workerNames.size > 1) {
    const seen = new Map();
    for (const [cn, wn] of workerNames) {
      if (wn === undefined) errors.push(`${id(o)} container ${cn}: one of ${workerNames.size} moe-worker containers without --name (the default <node>-<device> would repeat)`);
      else if (seen.has(wn)) errors.push(`${id(o)} containers ${seen.get(wn)} and ${cn}: the same --name=${wn}`);
      else seen.set(wn, cn);
    }
  }

  // Multus: k8s.v1.cni.cncf.io/networks is "[ns/]name[@if], ..." or a JSON list of {name, namespace?, interface?}.
  const nets = t?.metadata?.annotations?.[MULTUS];
  if (nets !== undefined) {
    const where = `${id(o)}: annotation ${MULTUS}`;
    let entries = [];
    if (typeof nets !== 'string') errors.push(`${where} must be a string`);
    else if (nets.trim().startsWith('[')) {
      try {
        const list = JSON.parse(nets);
        if (!Array.isArray(list)) throw new Error('not a list');
        entries = list.map((e) => (isObj(e) ? { ns: e.namespace, name: e.name } : { bad: JSON.stringify(e) }));
      } catch (e) { errors.push(`${where}: not a JSON list of networks (${e.message})`); }
    } else {
      entries = nets.split(',').map((s) => s.trim()).map((s) => {
        const m = /^(?:([^/@]+)\/)?([^/@]+)(?:@([^/@]+))?$/.exec(s);
        return m ? { ns: m[1], name: m[2] } : { bad: s };
      });
    }
    const placeholders = [];
    for (const e of entries) {
      if (e.bad !== undefined) { errors.push(`${where}: entry ${e.bad} is not [namespace/]name[@interface]`); continue; }
      const out = [];
      checkSchema(dnsSubdomain, e.name, `${where}: network name`, out);
      if (e.ns !== undefined) checkSchema(dnsLabel, e.ns, `${where}: network namespace`, out);
      errors.push(...out);
      if (typeof e.name === 'string' && e.name.startsWith('edit-me')) placeholders.push(e.name);
    }
    if (placeholders.length) notes.push(`${id(o)}: Multus networks ${placeholders.join(', ')} are placeholders: name your NetworkAttachmentDefinitions before applying`);
    if (!entries.length && typeof nets === 'string') errors.push(`${where} names no network`);
  }
}
for (const cd of computeDomains) {
  const key = `${nsOf(cd)}/${cd.spec?.channel?.resourceClaimTemplate?.name}`;
  if (!claimedTemplates.has(key)) errors.push(`${id(cd)}: no rendered pod template claims its channel template ${key.split('/')[1]} in namespace ${nsOf(cd) || '(none)'}`);
}
const podTemplates = workloads.map((o) => ({ o, labels: o.spec?.template?.metadata?.labels ?? {} }));
const selects = (sel, l) => Object.entries(sel).every(([k, v]) => l[k] === v);
for (const s of byKind('Service')) {
  const sel = s.spec?.selector ?? {};
  if (Object.keys(sel).length && !podTemplates.some(({ labels }) => selects(sel, labels)))
    errors.push(`${id(s)}: selector matches no rendered pod template`);
}
// PodMonitors: select a rendered pod, scrape a named port of it; moe-controller's series carry the
// training job's own `job` label, which the Operator's target label overwrites unless honorLabels.
for (const pm of byKind('PodMonitor')) {
  const sel = pm.spec?.selector?.matchLabels ?? {};
  const targets = podTemplates.filter(({ labels }) => selects(sel, labels)).map(({ o }) => o);
  if (!targets.length) { errors.push(`${id(pm)}: selector matches no rendered pod template`); continue; }
  const ports = new Set(targets.flatMap((o) => containersOf(o.spec?.template?.spec ?? {}).flatMap((c) => (c.ports ?? []).map((p) => p.name))));
  for (const [i, ep] of (pm.spec?.podMetricsEndpoints ?? []).entries()) {
    if (ep.port !== undefined && !ports.has(ep.port)) errors.push(`${id(pm)}: podMetricsEndpoints[${i}].port ${ep.port} is no named container port of ${targets.map(id).join(', ')}`);
    if (targets.some((o) => o.metadata?.name === 'moe-controller') && ep.honorLabels !== true)
      errors.push(`${id(pm)}: podMetricsEndpoints[${i}] scrapes moe-controller without honorLabels: true (its moe_job_* series' job label would be overwritten)`);
  }
}

// ---- what this render must contain (--require, per overlay from k8s_test.sh)
const findWorkload = (ref, what) => {
  const [kind, name] = ref.split('/');
  const o = workloads.find((x) => x.kind === kind && x.metadata?.name === name);
  if (!o) errors.push(`--require ${what}:${ref}: no ${ref} is rendered`);
  return o;
};
for (const r of requires) {
  const [what, ref] = r.split(/:(.*)/s);
  if (what === 'compute-domain' && ref) {
    const o = findWorkload(ref, what);
    if (!o) continue;
    if (!computeDomains.length) { errors.push(`--require ${r}: the render has no ComputeDomain (multi-node NVLink needs one: deploy/k8s/overlays/gb300-nvl72/computedomain.yaml)`); continue; }
    const domains = cdClaims(o);
    if (!domains.size) { errors.push(`--require ${r}: ${ref}'s pod template claims no ComputeDomain's channel template (spec.resourceClaims[].resourceClaimTemplateName)`); continue; }
    for (const c of o.spec?.template?.spec?.containers ?? []) {
      if (!(c.resources?.claims ?? []).some((cl) => domains.has(cl.name)))
        errors.push(`--require ${r}: container ${c.name} does not list the ComputeDomain claim (${[...domains.keys()].join(', ')}) in resources.claims`);
    }
  } else if (what === 'rdma' && ref) {
    const o = findWorkload(ref, what);
    if (!o) continue;
    if (!o.spec?.template?.metadata?.annotations?.[MULTUS]) errors.push(`--require ${r}: ${ref}'s pod template has no ${MULTUS} annotation (the RDMA networks)`);
    for (const c of o.spec?.template?.spec?.containers ?? []) {
      const rs = Object.keys({ ...(c.resources?.requests ?? {}), ...(c.resources?.limits ?? {}) });
      if (!rs.some(isRdma)) errors.push(`--require ${r}: container ${c.name} requests no RDMA resource`);
      if (!hasCap(c, 'IPC_LOCK')) errors.push(`--require ${r}: container ${c.name} lacks capability IPC_LOCK`);
    }
  } else if (what === 'podmonitor-honor-labels' && !ref) {
    const pms = byKind('PodMonitor');
    if (!pms.length) errors.push(`--require ${r}: the render has no PodMonitor`);
    for (const pm of pms) {
      const eps = pm.spec?.podMetricsEndpoints ?? [];
      if (!eps.length) errors.push(`--require ${r}: ${id(pm)} has no podMetricsEndpoints`);
      eps.forEach((ep, i) => { if (ep.honorLabels !== true) errors.push(`--require ${r}: ${id(pm)} podMetricsEndpoints[${i}] lacks honorLabels: true`); });
    }
  } else {
    errors.push(`--require ${r}: unknown requirement (compute-domain:KIND/NAME, rdma:KIND/NAME, podmonitor-honor-labels)`);
  }
}

for (const s of skipped) console.error(`!!! SKIPPED (no bundled schema for this kind; NOT validated): ${s}`);
for (const n of notes) console.log(`NOTE: ${n}`);
for (const e of errors) console.error(`FAIL: ${e}`);
console.log(`${objects.length} objects: ${validated} validated against their schemas (${ownValidated} against our own), ${skipped.length} skipped, ` +
  `${requires.length} requirements, ${errors.length} errors`);
if (errors.length || (skipped.length && process.env.MOE_K8S_STRICT === '1')) process.exit(1);
