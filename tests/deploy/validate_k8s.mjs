// Validates rendered Kubernetes manifests (multi-document YAML on stdin or in the files named): each object
// against the OpenAPI schemas bundled in the kubernetes-models packages (offline: the JSON schemas are
// compiled into the npm packages) or, for the custom resources those lack (ComputeDomain, JobSet, Kueue's
// Topology, ResourceFlavor, ClusterQueue, LocalQueue), against our own (validate_k8s/schemas.mjs); then
// what no schema can say, in validate_k8s/: pods.mjs (references, DRA claims, resources, capabilities,
// Multus, probes, Guaranteed QoS, /dev/shm inside the memory limit), workers.mjs (moe-worker: one agent per
// node, --memory-gb, health endpoints, grace periods, the pool entry), kueue.mjs (queues resolve, each pool
// admissible, its size consistent), monitoring.mjs (monitors, release label, rules, dashboards),
// requires.mjs (what a render must contain). Exit 1 on a problem.
//   kubectl kustomize deploy/k8s/overlays/cpu-demo | MOE_K8S_NODE_MODULES=DIR/node_modules node tests/deploy/validate_k8s.mjs
//   node tests/deploy/validate_k8s.mjs [--require WHAT]... [FILE...]
// MOE_K8S_NODE_MODULES: where kubernetes-models, @kubernetes-models/prometheus-operator and yaml are
// installed (tests/deploy/k8s_test.sh installs pinned versions into a cache directory).
// Kinds with neither a bundled nor an own schema are reported as SKIPPED (loudly) and fail the run when
// MOE_K8S_STRICT=1.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkKueue } from './validate_k8s/kueue.mjs';
import { checkMonitoring } from './validate_k8s/monitoring.mjs';
import { Render, id, isClusterScoped } from './validate_k8s/objects.mjs';
import { checkDomainsClaimed, checkOneImage, checkPodTemplate, claimTemplates } from './validate_k8s/pods.mjs';
import { checkRequires } from './validate_k8s/requires.mjs';
import { checkSchema, ownGroups, ownSchemas } from './validate_k8s/schemas.mjs';
import { checkWorkers } from './validate_k8s/workers.mjs';

const nodeModules = process.env.MOE_K8S_NODE_MODULES;
if (!nodeModules || !existsSync(join(nodeModules, 'kubernetes-models'))) {
  console.error(`FAIL: MOE_K8S_NODE_MODULES (${nodeModules}) has no kubernetes-models: run tests/deploy/k8s_test.sh`);
  process.exit(2);
}
// Modules by file (the packages are outside this script's directory, where ESM resolution cannot look).
const load = (rel) => import(pathToFileURL(join(nodeModules, rel)).href);

function parseArgs(argv) {
  const inputs = [], requires = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--require') requires.push(argv[++i] ?? '');
    else if (a.startsWith('--require=')) requires.push(a.slice('--require='.length));
    else if (a.startsWith('--')) { console.error(`FAIL: unknown option ${a}`); process.exit(2); }
    else inputs.push(a);
  }
  return { inputs, requires };
}

// Kubernetes reads YAML 1.1 (sigs.k8s.io/yaml): 0440 is octal there.
async function readObjects(inputs, errors) {
  const { parseAllDocuments } = await load('yaml/dist/index.js');
  const text = inputs.length ? inputs.map((f) => readFileSync(f, 'utf8')).join('\n---\n') : readFileSync(0, 'utf8');
  const objects = [];
  for (const d of parseAllDocuments(text, { version: '1.1' })) {
    if (d.errors.length) { errors.push(`YAML: ${d.errors.map((e) => e.message).join('; ')}`); continue; }
    const o = d.toJS();
    if (o !== null && o !== undefined) objects.push(o);
  }
  return objects;
}

// apiVersion -> the module that holds its model, or null.
function modulePath(apiVersion, kind) {
  if (apiVersion === 'monitoring.coreos.com/v1' || apiVersion === 'monitoring.coreos.com/v1alpha1')
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}.js`;
  if (!/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  return `kubernetes-models/${apiVersion}/${kind}.js`;   // core: kubernetes-models/v1/Service.js
}
async function modelOf(apiVersion, kind) {
  const mod = modulePath(apiVersion, kind);
  return mod && existsSync(join(nodeModules, mod)) ? (await load(mod))[kind] : null;
}
async function validateModel(r, Model, o, label = `${o.apiVersion} ${id(o)}`) {
  try { new Model(o).validate(); return true; } catch (e) { r.error(`${label}: ${e.message}`); return false; }
}

// A JobSet's child Jobs, each as a batch/v1 Job against kubernetes-models' schema (pod spec included).
// That schema accepts unknown fields, so the Job spec's keys are checked here (Kubernetes 1.33's JobSpec):
// a misspelt backoffLimitPerIndex would leave the pool with backoffLimit 6 for all its nodes together.
const JOB_SPEC_KEYS = new Set(['activeDeadlineSeconds', 'backoffLimit', 'backoffLimitPerIndex', 'completionMode', 'completions',
  'managedBy', 'manualSelector', 'maxFailedIndexes', 'parallelism', 'podFailurePolicy', 'podReplacementPolicy', 'selector',
  'successPolicy', 'suspend', 'template', 'ttlSecondsAfterFinished']);
async function validateJobSetJobs(r, o) {
  const Job = await modelOf('batch/v1', 'Job');
  for (const rj of o.spec?.replicatedJobs ?? []) {
    for (const k of Object.keys(rj?.template?.spec ?? {})) {
      if (!JOB_SPEC_KEYS.has(k)) r.error(`${o.apiVersion} ${id(o)} replicatedJob ${rj?.name}: template.spec.${k}: unknown field of a Job spec`);
    }
    const job = { apiVersion: 'batch/v1', kind: 'Job', metadata: { name: `${o.metadata?.name}-${rj?.name}`, ...(rj?.template?.metadata ?? {}) }, spec: rj?.template?.spec };
    await validateModel(r, Job, job, `${o.apiVersion} ${id(o)} replicatedJob ${rj?.name} (as a batch/v1 Job)`);
  }
  const names = (o.spec?.replicatedJobs ?? []).map((rj) => rj?.name);
  if (new Set(names).size !== names.length) r.error(`${id(o)}: replicatedJobs names repeat (${names.join(', ')})`);
}

// Cluster-scoped kinds carry no namespace, namespaced ones one (the overlays set no global namespace).
function checkScope(r, o) {
  const ns = o.metadata?.namespace;
  if (isClusterScoped(o.kind) && ns !== undefined) r.error(`${o.apiVersion} ${id(o)}: cluster-scoped, but has namespace ${ns} (a kustomization's namespace: applied to a kind kustomize does not know)`);
  if (!isClusterScoped(o.kind) && !ns) r.error(`${o.apiVersion} ${id(o)}: namespaced, but has no namespace (kubectl would put it in the current context's)`);
}

// Each object against its schema; returns {validated, own, skipped}. Two objects of one name (two pools
// named alike) would be one in the cluster: the second apply overwrites the first.
async function validateSchemas(r) {
  const counts = { validated: 0, own: 0, skipped: [] };
  const seen = new Set();
  for (const o of r.objects) {
    if (typeof o !== 'object' || !o.apiVersion || !o.kind) { r.error(`${id(o)}: apiVersion and kind are required`); continue; }
    if (!o.metadata?.name) r.error(`${id(o)}: metadata.name is required`);
    const key = `${o.apiVersion.split('/')[0]} ${o.kind} ${o.metadata?.namespace ?? ''}/${o.metadata?.name}`;
    if (seen.has(key)) r.error(`${o.apiVersion} ${id(o)}: rendered twice in namespace ${o.metadata?.namespace ?? '(none)'}: one would overwrite the other`);
    seen.add(key);
    checkScope(r, o);
    const own = ownSchemas[`${o.apiVersion} ${o.kind}`];
    if (own) {
      const out = [];
      checkSchema(own, o, '', out);
      out.forEach((e) => r.error(`${o.apiVersion} ${id(o)}: ${e}`));
      if (o.kind === 'JobSet') await validateJobSetJobs(r, o);
      counts.validated++; counts.own++;
      continue;
    }
    const group = o.apiVersion.includes('/') ? o.apiVersion.split('/')[0] : '';
    const Model = await modelOf(o.apiVersion, o.kind);
    // Built-in groups (v1, apps/v1, *.k8s.io/...) all have models, and our own groups our schemas: a
    // miss there is a wrong apiVersion/kind (an old kueue.x-k8s.io/v1alpha1 Topology, say).
    const known = !group || !group.includes('.') || group.endsWith('.k8s.io') || ownGroups.has(group);
    if (!Model && known) { r.error(`${o.apiVersion} ${id(o)}: no such apiVersion/kind (we know ${[...Object.keys(ownSchemas)].filter((k) => k.startsWith(group)).join(', ') || 'the built-in ones'})`); continue; }
    if (!Model) { counts.skipped.push(`${o.apiVersion} ${id(o)}`); continue; }
    if (await validateModel(r, Model, o)) counts.validated++;
  }
  return counts;
}

function checkCrossObject(r, requires) {
  const ctx = { cdByTemplate: claimTemplates(r), claimedTemplates: new Set() };
  for (const pt of r.podTemplates()) {
    checkPodTemplate(r, pt, ctx);
    checkWorkers(r, pt);
  }
  checkDomainsClaimed(r, ctx);
  checkOneImage(r);
  checkKueue(r, ctx);
  checkMonitoring(r);
  checkRequires(r, requires, ctx);
}

async function main() {
  const { inputs, requires } = parseArgs(process.argv.slice(2));
  const yamlErrors = [];
  const r = new Render(await readObjects(inputs, yamlErrors));
  yamlErrors.forEach((e) => r.error(e));
  const counts = await validateSchemas(r);
  checkCrossObject(r, requires);
  for (const s of counts.skipped) console.error(`!!! SKIPPED (no bundled schema for this kind; NOT validated): ${s}`);
  for (const n of r.notes) console.log(`NOTE: ${n}`);
  for (const e of r.errors) console.error(`FAIL: ${e}`);
  console.log(`${r.objects.length} objects: ${counts.validated} validated against their schemas (${counts.own} against our own), ${counts.skipped.length} skipped, ` +
    `${requires.length} requirements, ${r.errors.length} errors`);
  if (r.errors.length || (counts.skipped.length && process.env.MOE_K8S_STRICT === '1')) process.exit(1);
}

await main();
