// Our own schemas, for the custom resources kubernetes-models has no model of: the NVIDIA DRA driver's
// ComputeDomain, JobSet, and Kueue's Topology, ResourceFlavor, ClusterQueue and LocalQueue. A JSON-Schema
// subset (type, required, properties, additionalProperties, items, enum, minimum, maximum, minLength,
// maxLength, minItems, maxItems, pattern) plus `quantity` (an int-or-string resource quantity).
// Unlike the API server, which prunes unknown fields of a custom resource (dropping them, a warning at
// most), these reject them: a dropped `numNode` or `topologyNam` would silently mean something else.

export const DNS_LABEL = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';                       // RFC 1123 label, <= 63
export const DNS_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';  // <= 253
// A label key: [prefix/]name, the prefix a DNS subdomain, the name <= 63 alphanumerics, '-', '_', '.'.
export const LABEL_KEY = '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$';
export const QUANTITY = /^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)))?$/;

export const dnsLabel = { type: 'string', maxLength: 63, pattern: DNS_LABEL };
export const dnsSubdomain = { type: 'string', maxLength: 253, pattern: DNS_SUBDOMAIN };
export const labelKey = { type: 'string', maxLength: 316, pattern: LABEL_KEY };
const stringMap = { type: 'object', additionalProperties: { type: 'string' } };
const quantity = { quantity: true };
const str = { type: 'string' };
const bool = { type: 'boolean' };
const objectMeta = {
  type: 'object', required: ['name'],
  properties: { name: dnsSubdomain, namespace: dnsLabel, labels: stringMap, annotations: stringMap },
};
const strict = (required, properties) => ({ type: 'object', required, additionalProperties: false, properties });
const list = (items, extra = {}) => ({ type: 'array', items, ...extra });
const oneOf = (...values) => ({ type: 'string', enum: values });
// A top-level custom resource: apiVersion, kind, metadata, spec (status is the controller's to write).
const resource = (apiVersion, kind, spec, specRequired = true) => strict(['apiVersion', 'kind', 'metadata', ...(specRequired ? ['spec'] : [])], {
  apiVersion: { enum: [apiVersion] }, kind: { enum: [kind] }, metadata: objectMeta, spec, status: { type: 'object' },
});

// ComputeDomain, resource.nvidia.com/v1beta1 (NVIDIA/k8s-dra-driver-gpu, computedomains.resource.nvidia.com;
// api/nvidia.com/resource/v1beta1/computedomain.go): numNodes (integer >= 0; required in the driver's
// earlier CRDs, default 0 in later ones: we require it, the pool states the trays it expects), channel
// (required): resourceClaimTemplate.name (required), allocationMode All|Single. spec is immutable.
const computeDomain = resource('resource.nvidia.com/v1beta1', 'ComputeDomain', strict(['numNodes', 'channel'], {
  numNodes: { type: 'integer', minimum: 0 },
  channel: strict(['resourceClaimTemplate'], {
    resourceClaimTemplate: strict(['name'], { name: dnsSubdomain }),
    allocationMode: oneOf('All', 'Single'),
  }),
}));

// JobSet, jobset.x-k8s.io/v1alpha2 (kubernetes-sigs/jobset v0.12, config/components/crd/bases/
// jobset.x-k8s.io_jobsets.yaml). Each replicatedJobs[].template is a batch/v1 JobTemplateSpec: checked
// here for its shape only, then as a Job against kubernetes-models' schema (validate_k8s.mjs).
const jobSet = resource('jobset.x-k8s.io/v1alpha2', 'JobSet', strict(['replicatedJobs'], {
  replicatedJobs: list(strict(['name', 'template'], {
    name: dnsLabel,
    groupName: str,
    replicas: { type: 'integer', minimum: 0 },
    dependsOn: list(strict(['name', 'status'], { name: str, status: oneOf('Ready', 'Complete') }), { maxItems: 5 }),
    template: strict(['spec'], { metadata: { type: 'object' }, spec: { type: 'object' } }),
  }), { minItems: 1 }),
  network: strict([], { enableDNSHostnames: bool, subdomain: str, publishNotReadyAddresses: bool }),
  successPolicy: strict(['operator'], { operator: oneOf('All', 'Any'), targetReplicatedJobs: list(str) }),
  failurePolicy: strict([], {
    maxRestarts: { type: 'integer', minimum: 0 },
    restartStrategy: oneOf('Recreate', 'BlockingRecreate', 'InPlaceRestart'),
    rules: list({ type: 'object' }),
  }),
  startupPolicy: strict(['startupPolicyOrder'], { startupPolicyOrder: oneOf('AnyOrder', 'InOrder') }),
  coordinator: strict(['replicatedJob'], { replicatedJob: str, jobIndex: { type: 'integer' }, podIndex: { type: 'integer' } }),
  suspend: bool,
  managedBy: str,
  ttlSecondsAfterFinished: { type: 'integer', minimum: 0 },
  volumeClaimPolicies: list({ type: 'object' }, { maxItems: 50 }),
}));

// Kueue, kueue.x-k8s.io/v1beta2 (kubernetes-sigs/kueue v0.19, config/components/crd/bases): served from
// v0.15 on (v0.14 has v1beta1 only; Topology was v1alpha1 up to v0.13).
const KUEUE = 'kueue.x-k8s.io/v1beta2';
const taintEffect = oneOf('NoSchedule', 'PreferNoSchedule', 'NoExecute');
const topology = resource(KUEUE, 'Topology', strict(['levels'], {
  levels: list(strict(['nodeLabel'], { nodeLabel: labelKey }), { minItems: 1, maxItems: 16 }),
}));
const resourceFlavor = resource(KUEUE, 'ResourceFlavor', strict([], {
  nodeLabels: stringMap,
  nodeTaints: list(strict(['key', 'effect'], { key: str, value: str, effect: taintEffect, timeAdded: str }), { maxItems: 8 }),
  tolerations: list(strict([], { key: str, operator: oneOf('Equal', 'Exists'), value: str, effect: taintEffect, tolerationSeconds: { type: 'integer' } }), { maxItems: 8 }),
  topologyName: dnsSubdomain,
}), false);
const labelSelector = strict([], {
  matchLabels: stringMap,
  matchExpressions: list(strict(['key', 'operator'], { key: str, operator: oneOf('In', 'NotIn', 'Exists', 'DoesNotExist'), values: list(str) })),
});
const flavorQuotas = strict(['name', 'resources'], {
  name: dnsSubdomain,
  resources: list(strict(['name', 'nominalQuota'], { name: str, nominalQuota: quantity, borrowingLimit: quantity, lendingLimit: quantity }), { minItems: 1, maxItems: 64 }),
});
const clusterQueue = resource(KUEUE, 'ClusterQueue', strict([], {
  cohortName: dnsSubdomain,
  namespaceSelector: labelSelector,
  resourceGroups: list(strict(['coveredResources', 'flavors'], {
    coveredResources: list(str, { minItems: 1, maxItems: 64 }),
    flavors: list(flavorQuotas, { minItems: 1, maxItems: 64 }),
  }), { maxItems: 16 }),
  queueingStrategy: oneOf('StrictFIFO', 'BestEffortFIFO'),
  preemption: strict([], {
    reclaimWithinCohort: oneOf('Never', 'LowerPriority', 'Any'),
    borrowWithinCohort: strict([], { policy: oneOf('Never', 'LowerPriority'), maxPriorityThreshold: { type: 'integer' } }),
    withinClusterQueue: oneOf('Never', 'LowerPriority', 'LowerOrNewerEqualPriority'),
  }),
  flavorFungibility: strict([], {
    whenCanBorrow: oneOf('MayStopSearch', 'TryNextFlavor'),
    whenCanPreempt: oneOf('MayStopSearch', 'TryNextFlavor'),
    preference: oneOf('BorrowingOverPreemption', 'PreemptionOverBorrowing'),
  }),
  stopPolicy: oneOf('None', 'Hold', 'HoldAndDrain'),
  fairSharing: strict([], { weight: quantity }),
  admissionChecksStrategy: { type: 'object' },
  admissionScope: { type: 'object' },
  concurrentAdmissionPolicy: { type: 'object' },
}), false);
const localQueue = resource(KUEUE, 'LocalQueue', strict(['clusterQueue'], {
  clusterQueue: dnsSubdomain,
  stopPolicy: oneOf('None', 'Hold', 'HoldAndDrain'),
  fairSharing: strict([], { weight: quantity }),
}));

export const ownSchemas = {
  'resource.nvidia.com/v1beta1 ComputeDomain': computeDomain,
  'jobset.x-k8s.io/v1alpha2 JobSet': jobSet,
  [`${KUEUE} Topology`]: topology,
  [`${KUEUE} ResourceFlavor`]: resourceFlavor,
  [`${KUEUE} ClusterQueue`]: clusterQueue,
  [`${KUEUE} LocalQueue`]: localQueue,
};
// Groups whose kinds we model ourselves: another version or kind there is an error, not a skip (an
// old kueue.x-k8s.io/v1alpha1 Topology would otherwise pass unvalidated, and fail on a current Kueue).
export const ownGroups = new Set(Object.keys(ownSchemas).map((k) => k.split('/')[0]));

export function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function checkScalar(schema, v, at, out) {
  if (schema.enum && !schema.enum.includes(v)) out.push(`${at} must be one of ${schema.enum.join(', ')} (is ${JSON.stringify(v)})`);
  if (typeof v === 'number') {
    if (schema.minimum !== undefined && v < schema.minimum) out.push(`${at} must be >= ${schema.minimum}`);
    if (schema.maximum !== undefined && v > schema.maximum) out.push(`${at} must be <= ${schema.maximum}`);
  }
  if (typeof v === 'string') {
    if (schema.maxLength !== undefined && v.length > schema.maxLength) out.push(`${at} is longer than ${schema.maxLength}`);
    if (schema.minLength !== undefined && v.length < schema.minLength) out.push(`${at} is shorter than ${schema.minLength}`);
    if (schema.pattern && !new RegExp(schema.pattern).test(v)) out.push(`${at} "${v}" must match ${schema.pattern}`);
  }
  if (schema.quantity && !(typeOf(v) === 'integer' || (typeof v === 'string' && QUANTITY.test(v)))) out.push(`${at} must be a quantity (an integer or a string like 4, 500m, 64Gi), not ${JSON.stringify(v)}`);
}

function checkObject(schema, v, path, out) {
  for (const r of schema.required ?? []) if (v[r] === undefined) out.push(`${path ? path + '.' : ''}${r} is required`);
  for (const [k, val] of Object.entries(v)) {
    const sub = schema.properties?.[k];
    const p = path ? `${path}.${k}` : k;
    if (sub) checkSchema(sub, val, p, out);
    else if (schema.additionalProperties === false) out.push(`${p}: unknown field (allowed: ${Object.keys(schema.properties ?? {}).join(', ')})`);
    else if (typeof schema.additionalProperties === 'object') checkSchema(schema.additionalProperties, val, p, out);
  }
}

function checkArray(schema, v, path, out) {
  if (schema.minItems !== undefined && v.length < schema.minItems) out.push(`${path} needs at least ${schema.minItems} item(s)`);
  if (schema.maxItems !== undefined && v.length > schema.maxItems) out.push(`${path} has more than ${schema.maxItems} items`);
  if (schema.items) v.forEach((x, i) => checkSchema(schema.items, x, `${path}[${i}]`, out));
}

// Appends one message per violation to `out`; `path` is the dotted path of v.
export function checkSchema(schema, v, path, out) {
  const at = path || '(root)';
  if (schema.type) {
    const t = typeOf(v);
    const ok = t === schema.type || (schema.type === 'number' && t === 'integer');
    if (!ok) { out.push(`${at} must be ${schema.type}, not ${t}${t === 'string' ? ` "${v}"` : ''}`); return; }
  }
  checkScalar(schema, v, at, out);
  if (typeOf(v) === 'object') checkObject(schema, v, path, out);
  if (typeOf(v) === 'array') checkArray(schema, v, path, out);
}
