"""Validates rendered Kubernetes manifests (multi-document YAML on stdin or in the files named): each built-in
object (Deployment, Service, Job, ConfigMap, PriorityClass, ResourceClaimTemplate, ...) against the JSON
schema of its kind for every Kubernetes version of K8S_VERSIONS (the oldest and newest supported), as the PyPI package kubernetes-validate ships it, in its
strict variant, which rejects unknown fields (offline: the schemas are files of the package); the custom
resources no package has a schema of (ComputeDomain, JobSet, Kueue's Topology, ResourceFlavor,
ClusterQueue, LocalQueue, the Prometheus Operator's ServiceMonitor, PodMonitor, PrometheusRule, cert-manager's
Issuer and Certificate) against our own (validate_k8s/schemas.py), a JobSet's child Jobs as batch/v1 Jobs;
then what no schema can say, in
validate_k8s/: pods.py (references, DRA claims, resources, capabilities, Multus, probes, Guaranteed QoS,
/dev/shm inside the memory limit), workers.py (moe-worker: one agent per node, --memory-gb, health
endpoints, grace periods, the pool entry), kueue.py (queues resolve, each pool admissible, its size
consistent), monitoring.py (monitors, release label, rules, dashboards), tls.py (cert-manager's chain, the
controller serving TLS only, every client trusting its CA), netpol.py (every listener on the pod's own IP,
never 0.0.0.0; the NetworkPolicies admitting what the controller's clients, the ranks and Prometheus need,
by the labels the pods carry), ha.py (the controller's store: one replica on SQLite, or a leader and
standbys on etcd with leader-only readiness; the etcd members' flags, names, quorum and reach),
requires.py (what a render must contain).
Exit 1 on a problem.
  kubectl kustomize deploy/k8s/overlays/cpu-demo | "$venv/bin/python" tests/deploy/validate_k8s.py
  "$venv/bin/python" tests/deploy/validate_k8s.py [--require WHAT]... [FILE...]
The venv: venv=$(scripts/pyvenv.sh tests/deploy/requirements-k8s.txt) (tests/deploy/k8s_test.sh makes it).
Kinds with no schema, neither Kubernetes' nor ours, are reported as SKIPPED (loudly) and fail the run when
MOE_K8S_STRICT=1.
"""
import os
import re
import sys
from collections import Counter
from types import SimpleNamespace

sys.dont_write_bytecode = True   # no __pycache__ beside the sources
try:
    import yaml
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from kubernetes_validate.utils import all_versions, schema_contents
except ImportError as missing:
    print(f'FAIL: the Python package {missing.name} is missing: run this with the venv of tests/deploy/requirements-k8s.txt '
          '(venv=$(scripts/pyvenv.sh tests/deploy/requirements-k8s.txt); "$venv/bin/python" ...), as tests/deploy/k8s_test.sh does',
          file=sys.stderr)
    sys.exit(2)

from validate_k8s.ha import check_ha
from validate_k8s.kueue import check_kueue
from validate_k8s.monitoring import check_monitoring
from validate_k8s.netpol import check_network
from validate_k8s.objects import Render, as_dict, as_list, dig, has_duplicates, id_of, is_cluster_scoped, is_obj, js_str, truthy
from validate_k8s.pods import check_domains_claimed, check_one_image, check_pod_template, claim_templates
from validate_k8s.requires import check_requires
from validate_k8s.schemas import OWN_SCHEMAS, check_schema, group_of, own_kind_elsewhere, type_error
from validate_k8s.tls import check_tls
from validate_k8s.workers import check_workers

# The Kubernetes versions whose schemas the built-in kinds must pass, every one of them: docs/deploy-kubernetes.md
# asks for 1.32 or newer, so the oldest supported (a field added after 1.32 fails there) and the newest that
# kubernetes-validate 1.37.0 ships (a field removed since fails there); KubeSchemas checks that the pinned
# package has each.
K8S_VERSIONS = ('1.32.0', '1.37.0')


def parse_args(argv):
    inputs, requires = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == '--require':
            i += 1
            requires.append(argv[i] if i < len(argv) else '')
        elif a.startswith('--require='):
            requires.append(a[len('--require='):])
        elif a.startswith('--'):
            print(f'FAIL: unknown option {a}', file=sys.stderr)
            sys.exit(2)
        else:
            inputs.append(a)
        i += 1
    return inputs, requires


class KubeLoader(yaml.SafeLoader):
    """YAML 1.1 as Kubernetes reads it (sigs.k8s.io/yaml): 0440 is octal, an unquoted yes is true. Timestamps
    stay strings (they are strings in the JSON the API server gets), and a key twice in one mapping is an
    error (kubectl's strict decoding refuses it; PyYAML would keep the last silently)."""

    def construct_mapping(self, node, deep=False):
        keys = Counter((k.tag, k.value) for k, _ in node.value
                       if isinstance(k, yaml.ScalarNode) and k.tag != 'tag:yaml.org,2002:merge')
        twice = [value for (_, value), n in keys.items() if n > 1]
        if twice:
            raise yaml.constructor.ConstructorError(None, None, f'key {twice[0]!r} appears twice in a mapping', node.start_mark)
        return super().construct_mapping(node, deep)


KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != 'tag:yaml.org,2002:timestamp']
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_objects(inputs, errors):
    """The documents of the files (or stdin), empty ones dropped. A YAML error ends the reading there."""
    if inputs:
        parts = []
        for f in inputs:
            with open(f, encoding='utf-8') as fh:
                parts.append(fh.read())
        text = '\n---\n'.join(parts)
    else:
        text = sys.stdin.read()
    objects = []
    try:
        for doc in yaml.load_all(text, Loader=KubeLoader):
            if doc is not None:
                objects.append(doc)
    except yaml.YAMLError as e:
        errors.append(f'YAML: {e}')
    return objects


def is_builtin_group(group):
    """The core group, apps, batch, ... and *.k8s.io: Kubernetes' own (jobset.x-k8s.io and kueue.x-k8s.io are not)."""
    return group == '' or '.' not in group or group.endswith('.k8s.io')


class KubeSchemas:
    """The built-in kinds' schemas of kubernetes-validate for one Kubernetes version, strict (every object
    with additionalProperties: false, so that a misspelt field is an error, as kubectl's server-side field
    validation makes it). What kubernetes_validate.validate(obj, version, strict=True) does, the same files
    and resolution, but with one validator per kind (the 1.8 MB of shared definitions read once, not per
    object) and every error of an object reported, not its first."""

    def __init__(self, version):
        shipped = list(dict.fromkeys(all_versions()))   # each twice: the plain and the strict schemas
        if version not in shipped:
            sys.exit(f'FAIL: kubernetes-validate has no schemas of Kubernetes {version} (it has {", ".join(shipped)}): '
                     'tests/deploy/requirements-k8s.txt and K8S_VERSIONS disagree')
        self.version = version
        self.dir = f'kubernetes-json-schema/v{version}-local-strict'
        self.registry = Resource.from_contents(schema_contents(f'{self.dir}/_definitions.json', version)) @ Registry()
        self.validators = {}

    def validator(self, api_version, kind):
        """The validator of this apiVersion and kind, or None where Kubernetes has no such kind."""
        if (api_version, kind) not in self.validators:
            self.validators[api_version, kind] = self._load(api_version, kind)
        return self.validators[api_version, kind]

    def _load(self, api_version, kind):
        if not re.fullmatch(r'([a-z0-9.-]+/)?v[0-9a-z]+', api_version) or not re.fullmatch(r'[A-Z][A-Za-z0-9]*', kind):
            return None
        # The package's file names: apps/v1 -> apps-v1, rbac.authorization.k8s.io/v1 -> rbac-v1, v1 -> v1.
        name = re.sub(r'^([^./]*)(?:\.[^/]*)?/', r'\1-', api_version)
        try:
            schema = schema_contents(f'{self.dir}/{kind.lower()}-{name}.json', self.version)
        except FileNotFoundError:
            return None
        # Files of the same name are also the schemas of parts (affinity-v1.json): only a top-level kind of
        # exactly this group and version counts.
        group, version = group_of(api_version), api_version.split('/')[-1]
        if {'group': group, 'version': version, 'kind': kind} not in schema.get('x-kubernetes-group-version-kind', []):
            return None
        return Draft202012Validator(schema, registry=Resource.from_contents(schema) @ self.registry)


class KubeSchemasEvery:
    """KubeSchemas of several versions as one: a kind any of them lacks is no kind (not portable across the
    supported range), and an object's errors are those of every version, each once."""

    def __init__(self, versions):
        self.each = [KubeSchemas(v) for v in versions]
        self.version = ' and '.join(versions)

    def validator(self, api_version, kind):
        validators = [k.validator(api_version, kind) for k in self.each]
        return None if any(v is None for v in validators) else _EveryValidator(validators)


class _EveryValidator:
    def __init__(self, validators):
        self.validators = validators

    def iter_errors(self, o):
        seen = set()
        for v in self.validators:
            for e in v.iter_errors(o):
                key = (tuple(e.absolute_path), e.message)
                if key not in seen:
                    seen.add(key)
                    yield e


def dotted(path):
    """['spec', 'ports', 0, 'port'] -> spec.ports[0].port"""
    out = ''
    for p in path:
        out += f'[{p}]' if isinstance(p, int) else (f'.{p}' if out else str(p))
    return out


def describe(error, prefix=()):
    """A jsonschema error in our own schemas' words: 'PATH: unknown field', 'PATH must be integer, not ...'."""
    path = [*prefix, *error.absolute_path]
    at = dotted(path) or '(root)'
    if error.validator == 'additionalProperties' and isinstance(error.instance, dict):
        allowed = list(error.schema.get('properties', {}))
        patterns = list(error.schema.get('patternProperties', {}))
        return [f"{dotted([*path, k])}: unknown field (allowed: {', '.join(allowed)})" for k in error.instance
                if k not in allowed and not any(re.search(p, str(k)) for p in patterns)]
    if error.validator == 'type':
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return [type_error([t for t in types if t != 'null'], error.instance, at)]
    message = error.message if len(error.message) <= 300 else error.message[:300] + '...'
    return [f'{at}: {message}']


def validate_jobset_jobs(r, kube, o):
    """A JobSet's child Jobs, each as a batch/v1 Job against Kubernetes' schema (pod spec included; strict, so
    a misspelt backoffLimitPerIndex, which would leave the pool with backoffLimit 6 for all its nodes
    together, is an unknown field). Paths are the JobSet's: spec.replicatedJobs[i].template.spec...."""
    job_schema = kube.validator('batch/v1', 'Job')
    for i, rj in enumerate(as_list(dig(o, 'spec', 'replicatedJobs'))):
        if not is_obj(rj):
            continue
        template = rj.get('template') if is_obj(rj.get('template')) else {}
        metadata = {'name': f"{js_str(dig(o, 'metadata', 'name'))}-{js_str(rj.get('name'))}", **as_dict(template.get('metadata'))}
        job = {'apiVersion': 'batch/v1', 'kind': 'Job', 'metadata': metadata, 'spec': template.get('spec')}
        label = f"{o['apiVersion']} {id_of(o)} replicatedJob {js_str(rj.get('name'))} (as a batch/v1 Job)"
        for e in job_schema.iter_errors(job):
            for m in describe(e, prefix=('spec', 'replicatedJobs', i, 'template')):
                r.error(f'{label}: {m}')
    names = [dig(rj, 'name') for rj in as_list(dig(o, 'spec', 'replicatedJobs'))]
    if has_duplicates(names):
        r.error(f"{id_of(o)}: replicatedJobs names repeat ({', '.join(map(js_str, names))})")


def check_scope(r, o):
    """Cluster-scoped kinds carry no namespace, namespaced ones one (the overlays set no global namespace)."""
    ns = dig(o, 'metadata', 'namespace')
    if is_cluster_scoped(o['kind']) and ns is not None:
        r.error(f"{o['apiVersion']} {id_of(o)}: cluster-scoped, but has namespace {js_str(ns)} "
                "(a kustomization's namespace: applied to a kind kustomize does not know)")
    if not is_cluster_scoped(o['kind']) and not truthy(ns):
        r.error(f"{o['apiVersion']} {id_of(o)}: namespaced, but has no namespace (kubectl would put it in the current context's)")


def no_such_kind(r, kube, o):
    group = group_of(o['apiVersion'])
    ours = [k for k in OWN_SCHEMAS if group_of(k.split(' ')[0]) == group]
    known = f"we know {', '.join(ours)}" if ours else f"not a kind of Kubernetes {kube.version}"
    r.error(f"{o['apiVersion']} {id_of(o)}: no such apiVersion/kind ({known})")


def validate_object(r, kube, o):
    """One object against its schema: 'own', 'kube' (valid), 'skipped' (no schema), or None (errors)."""
    label = f"{o['apiVersion']} {id_of(o)}"
    own = OWN_SCHEMAS.get(f"{o['apiVersion']} {o['kind']}")
    if own is not None:
        out = []
        check_schema(own, o, '', out)
        for e in out:
            r.error(f'{label}: {e}')
        if o['kind'] == 'JobSet':
            validate_jobset_jobs(r, kube, o)
        return 'own'
    builtin = is_builtin_group(group_of(o['apiVersion']))
    validator = kube.validator(o['apiVersion'], o['kind']) if builtin else None
    # Built-in groups all have schemas, and our own groups our schemas: a miss there is a wrong
    # apiVersion/kind (an old kueue.x-k8s.io/v1alpha1 Topology, say).
    if validator is None and (builtin or own_kind_elsewhere(o['apiVersion'], o['kind'])):
        no_such_kind(r, kube, o)
        return None
    if validator is None:
        return 'skipped'
    messages = [m for e in validator.iter_errors(o) for m in describe(e)]
    for m in messages:
        r.error(f'{label}: {m}')
    return None if messages else 'kube'


def validate_schemas(r, kube):
    """Each object against its schema; returns the counts. Two objects of one name (two pools named alike)
    would be one in the cluster: the second apply overwrites the first."""
    counts = SimpleNamespace(validated=0, own=0, skipped=[])
    seen = set()
    for o in r.objects:
        if not is_obj(o) or not isinstance(o.get('apiVersion'), str) or not isinstance(o.get('kind'), str) \
                or not o['apiVersion'] or not o['kind']:
            r.error(f'{id_of(o)}: apiVersion and kind are required')
            continue
        if not truthy(dig(o, 'metadata', 'name')):
            r.error(f'{id_of(o)}: metadata.name is required')
        ns = dig(o, 'metadata', 'namespace')
        key = f"{o['apiVersion'].split('/')[0]} {o['kind']} {js_str(ns or '')}/{js_str(dig(o, 'metadata', 'name'))}"
        if key in seen:
            r.error(f"{o['apiVersion']} {id_of(o)}: rendered twice in namespace {js_str(ns or '(none)')}: one would overwrite the other")
        seen.add(key)
        check_scope(r, o)
        verdict = validate_object(r, kube, o)
        counts.validated += verdict in ('own', 'kube')
        counts.own += verdict == 'own'
        if verdict == 'skipped':
            counts.skipped.append(f"{o['apiVersion']} {id_of(o)}")
    return counts


def check_cross_object(r, requires):
    """What no schema says. A malformed object that the schemas reported may stop these checks: the run
    fails all the same, with the schema errors to fix first."""
    ctx = SimpleNamespace(cd_by_template=claim_templates(r), claimed_templates=set())
    try:
        for pt in r.pod_templates():
            check_pod_template(r, pt, ctx)
            check_workers(r, pt)
        check_domains_claimed(r, ctx)
        check_one_image(r)
        check_kueue(r, ctx)
        check_monitoring(r)
        check_tls(r)
        check_network(r)
        check_ha(r)
        check_requires(r, requires, ctx)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        r.error(f'the checks beyond the schemas stopped at a malformed object ({type(e).__name__}: {e}): fix the errors above first')


def main(argv):
    inputs, requires = parse_args(argv)
    yaml_errors = []
    r = Render(read_objects(inputs, yaml_errors))
    for e in yaml_errors:
        r.error(e)
    kube = KubeSchemasEvery(K8S_VERSIONS)
    counts = validate_schemas(r, kube)
    check_cross_object(r, requires)
    for s in counts.skipped:
        print(f'!!! SKIPPED (no schema for this kind; NOT validated): {s}', file=sys.stderr)
    for n in r.notes:
        print(f'NOTE: {n}')
    for e in r.errors:
        print(f'FAIL: {e}', file=sys.stderr)
    print(f'{len(r.objects)} objects: {counts.validated} validated against their schemas ({counts.own} against our own, '
          f'{counts.validated - counts.own} against Kubernetes {kube.version}\'s), {len(counts.skipped)} skipped, '
          f'{len(requires)} requirements, {len(r.errors)} errors')
    strict = os.environ.get('MOE_K8S_STRICT') == '1'
    return 1 if r.errors or (counts.skipped and strict) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
