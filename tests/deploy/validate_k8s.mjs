// Validates rendered Kubernetes manifests (multi-document YAML on stdin or in the files named) against
// the OpenAPI schemas bundled in the kubernetes-models packages (offline: the JSON schemas are compiled
// into the npm packages), plus a few cross-object checks the schemas cannot express. Exit 1 on a problem.
//   kubectl kustomize deploy/k8s/overlays/cpu-demo | MOE_K8S_NODE_MODULES=DIR/node_modules node tests/deploy/validate_k8s.mjs
// MOE_K8S_NODE_MODULES: where kubernetes-models, @kubernetes-models/prometheus-operator and yaml are
// installed (tests/deploy/k8s_test.sh installs pinned versions into a cache directory).
// Kinds without a bundled schema are reported as SKIPPED (loudly) and fail the run when MOE_K8S_STRICT=1.
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

// apiVersion -> the module prefix that holds its models.
function modulePath(apiVersion, kind) {
  if (apiVersion === 'monitoring.coreos.com/v1' || apiVersion === 'monitoring.coreos.com/v1alpha1')
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}.js`;
  if (!/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  return `kubernetes-models/${apiVersion}/${kind}.js`;   // core: kubernetes-models/v1/Service.js
}

const inputs = process.argv.slice(2);
const text = inputs.length ? inputs.map((f) => readFileSync(f, 'utf8')).join('\n---\n') : readFileSync(0, 'utf8');
// Kubernetes reads YAML 1.1 (sigs.k8s.io/yaml): 0440 is octal there.
const docs = parseAllDocuments(text, { version: '1.1' });
const objects = [];
const errors = [];
for (const d of docs) {
  if (d.errors.length) { errors.push(`YAML: ${d.errors.map((e) => e.message).join('; ')}`); continue; }
  const o = d.toJS();
  if (o !== null && o !== undefined) objects.push(o);
}

const id = (o) => `${o?.kind ?? '?'}/${o?.metadata?.name ?? '?'}`;
let validated = 0;
const skipped = [];
for (const o of objects) {
  if (typeof o !== 'object' || !o.apiVersion || !o.kind) { errors.push(`${id(o)}: apiVersion and kind are required`); continue; }
  if (!o.metadata?.name) errors.push(`${id(o)}: metadata.name is required`);
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

// Cross-object checks: selectors select their own pods; references resolve; every container has resources.
const byKind = (k) => objects.filter((o) => o?.kind === k);
const names = (k) => new Set(byKind(k).map((o) => o.metadata?.name));
// Created by the user, not rendered: documented in deploy/k8s/base/kustomization.yaml and the docs.
const external = { Secret: new Set(['moe-tokens']) };
const has = (k, n) => names(k).has(n) || (external[k]?.has(n) ?? false);
const podOwners = ['Deployment', 'DaemonSet', 'StatefulSet', 'Job', 'ReplicaSet'];
for (const o of objects.filter((x) => podOwners.includes(x?.kind))) {
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
  for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
    const where = `${id(o)} container ${c.name}`;
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
  }
}
for (const s of byKind('Service')) {
  const sel = s.spec?.selector ?? {};
  const pods = objects.filter((o) => podOwners.includes(o?.kind)).map((o) => o.spec?.template?.metadata?.labels ?? {});
  if (Object.keys(sel).length && !pods.some((l) => Object.entries(sel).every(([k, v]) => l[k] === v)))
    errors.push(`${id(s)}: selector matches no rendered pod template`);
}

for (const s of skipped) console.error(`!!! SKIPPED (no bundled schema for this kind; NOT validated): ${s}`);
for (const e of errors) console.error(`FAIL: ${e}`);
console.log(`${objects.length} objects: ${validated} validated against their schemas, ${skipped.length} skipped, ${errors.length} errors`);
if (errors.length || (skipped.length && process.env.MOE_K8S_STRICT === '1')) process.exit(1);
