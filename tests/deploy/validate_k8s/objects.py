"""The rendered objects and what the checks ask of them: kinds, pod templates wherever they sit (a
Deployment's spec.template, a JobSet's replicatedJobs[].template.spec.template), containers, resource
quantities, moe-worker's flags. Holds the errors and notes the checks add.

The objects are YAML read as JSON would be (dicts, lists, str, int, float, bool, None). A missing key and
an explicit null are the same to these checks (Kubernetes drops null fields too). Malformed objects (a
list where a dict belongs) are the schemas' to report: the helpers here read them as empty, so that the
other checks go on. Messages print values as the original JavaScript validator did (js_str: 2.0 as 2,
true as true), so that they read the same.
"""
import json
import math
import re
from dataclasses import dataclass

MULTUS = 'k8s.v1.cni.cncf.io/networks'
QUEUE_LABEL = 'kueue.x-k8s.io/queue-name'
STEP_ANNOTATION = 'moe-orchestrator/longest-step-seconds'

# Kinds without a namespace (kustomize takes kinds it has no schema for as namespaced, and writes its
# namespace into them: the API server would refuse the Kueue ones so written).
CLUSTER_SCOPED = frozenset([
    'Namespace', 'PriorityClass', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'StorageClass',
    'PersistentVolume', 'IngressClass', 'RuntimeClass', 'DeviceClass', 'ValidatingWebhookConfiguration',
    'MutatingWebhookConfiguration', 'ResourceFlavor', 'ClusterQueue', 'Topology', 'Cohort', 'WorkloadPriorityClass',
])


def is_cluster_scoped(kind):
    return kind in CLUSTER_SCOPED


# --- reading JSON-like values -------------------------------------------------------------------------

def is_obj(v):
    return isinstance(v, dict)


def as_dict(v):
    return v if isinstance(v, dict) else {}


def as_list(v):
    return v if isinstance(v, list) else []


def dicts(v):
    """The dict items of a list (a list of containers, volumes, ...); anything else is the schemas' to report."""
    return [x for x in as_list(v) if isinstance(x, dict)]


def dig(v, *keys, default=None):
    """v[k1][k2]..., or default where a key is missing, null, or its holder is no dict (JS's v?.k1?.k2 ?? default)."""
    for k in keys:
        if not isinstance(v, dict) or v.get(k) is None:
            return default
        v = v[k]
    return v


def truthy(v):
    """JavaScript's truthiness: an empty dict or list is true, 0, '' and NaN are false."""
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)):
        return v != 0 and not math.isnan(v)
    if isinstance(v, str):
        return v != ''
    return True


def js_str(v):
    """A value as JavaScript's String(v) writes it (2.0 as 2, True as true, None as undefined)."""
    if v is None:
        return 'undefined'
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, float):
        if math.isnan(v):
            return 'NaN'
        if math.isinf(v):
            return 'Infinity' if v > 0 else '-Infinity'
        if v.is_integer() and abs(v) < 1e21:
            return str(int(v))
        return repr(v)
    if isinstance(v, list):
        return ','.join('' if x is None else js_str(x) for x in v)
    if isinstance(v, dict):
        return '[object Object]'
    return str(v)


def js_join(values, sep):
    """Array.prototype.join: null items as ''."""
    return sep.join('' if x is None else js_str(x) for x in values)


def to_json(v):
    """JSON.stringify: compact."""
    return json.dumps(v, separators=(',', ':'), ensure_ascii=False, default=str)


_JS_DECIMAL = re.compile(r'[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?')


def js_number(v):
    """JavaScript's Number(v) for what the manifests hold: numbers, numeric strings ('' is 0), else NaN."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if v is None:
        return math.nan
    s = js_str(v).strip()
    if s == '':
        return 0.0
    if _JS_DECIMAL.fullmatch(s):
        return float(s)
    if re.fullmatch(r'0[xX][0-9a-fA-F]+', s):
        return float(int(s, 16))
    return math.nan


def has_duplicates(values):
    keys = [to_json(v) for v in values]
    return len(set(keys)) != len(keys)


# --- the render ---------------------------------------------------------------------------------------

def id_of(o):
    return f"{js_str(dig(o, 'kind', default='?'))}/{js_str(dig(o, 'metadata', 'name', default='?'))}"


def ns_of(o):
    return dig(o, 'metadata', 'namespace', default='')


@dataclass
class PodTemplate:
    """A pod template with the object that holds it; job is the Job spec around it (a Job, a CronJob's, a
    JobSet's replicated Job), None outside Jobs. where names the template for messages."""
    owner: dict
    where: str
    template: dict
    job: dict = None
    job_replicas: object = None

    @property
    def pod(self):
        return as_dict(self.template.get('spec'))

    @property
    def labels(self):
        return as_dict(dig(self.template, 'metadata', 'labels'))

    @property
    def annotations(self):
        return as_dict(dig(self.template, 'metadata', 'annotations'))

    @property
    def containers(self):
        return dicts(self.pod.get('containers'))


class Render:
    def __init__(self, objects):
        self.objects = objects
        self.errors = []
        self.notes = []

    def error(self, msg):
        self.errors.append(msg)

    def note(self, msg):
        self.notes.append(msg)

    def by_kind(self, kind):
        return [o for o in self.objects if is_obj(o) and o.get('kind') == kind]

    def find(self, kind, name, ns=None):
        """The first KIND named NAME (in namespace ns; any namespace where ns is None), or None."""
        for o in self.by_kind(kind):
            if dig(o, 'metadata', 'name') == name and (ns is None or ns_of(o) == ns):
                return o
        return None

    def pod_templates(self):
        """Every pod template of the render."""
        return [pt for o in self.objects for pt in pod_templates_of(o)]


def pod_templates_of(o):
    spec = dig(o, 'spec')
    if not is_obj(spec):
        return []
    kind = o.get('kind')
    if kind in ('Deployment', 'DaemonSet', 'StatefulSet', 'ReplicaSet'):
        return [PodTemplate(o, id_of(o), as_dict(spec.get('template')))]
    if kind == 'Job':
        return [PodTemplate(o, id_of(o), as_dict(spec.get('template')), job=spec, job_replicas=1)]
    if kind == 'CronJob':
        job = dig(spec, 'jobTemplate', 'spec')
        return [PodTemplate(o, id_of(o), as_dict(dig(job, 'template')), job=job if is_obj(job) else None)]
    if kind == 'JobSet':
        return [PodTemplate(o, f"{id_of(o)} replicatedJob {js_str(rj.get('name'))}",
                            as_dict(dig(rj, 'template', 'spec', 'template')),
                            job=as_dict(dig(rj, 'template', 'spec')), job_replicas=dig(rj, 'replicas', default=1))
                for rj in dicts(spec.get('replicatedJobs'))]
    return []


def containers_of(pod):
    """Init containers, then containers."""
    return dicts(pod.get('initContainers')) + dicts(pod.get('containers'))


def is_sidecar(c):
    """An init container that keeps running (restartPolicy Always); it may have probes."""
    return c.get('restartPolicy') == 'Always'


# --- resource quantities ------------------------------------------------------------------------------

# Resource quantities as numbers (cores, bytes): 500m = 0.5, 64Gi = 64 * 2^30, 1e3 = 1000.
SUFFIX = {'n': 1e-9, 'u': 1e-6, 'm': 1e-3, '': 1, 'k': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15, 'E': 1e18,
          'Ki': 2 ** 10, 'Mi': 2 ** 20, 'Gi': 2 ** 30, 'Ti': 2 ** 40, 'Pi': 2 ** 50, 'Ei': 2 ** 60}


def quantity(v):
    if isinstance(v, bool):
        return math.nan
    if isinstance(v, (int, float)):
        return v
    m = re.fullmatch(r'([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)', v.strip()) if isinstance(v, str) else None
    if not m or m[2] not in SUFFIX:
        return math.nan
    try:
        return float(m[1]) * SUFFIX[m[2]]
    except ValueError:   # 1.2.3
        return math.nan


def requests(c):
    return as_dict(dig(c, 'resources', 'requests'))


def limits(c):
    return as_dict(dig(c, 'resources', 'limits'))


# --- moe-worker's command line ------------------------------------------------------------------------

def runs_worker(c):
    """moe-worker, run directly or as the argument of moe-pool-member."""
    return any(isinstance(w, str) and w.endswith('/moe-worker') for w in as_list(c.get('command')))


def through_pool_member(c):
    command = as_list(c.get('command'))
    return js_str(command[0] if command and command[0] is not None else '').endswith('/moe-pool-member')


def env_value(c, name):
    for e in dicts(c.get('env')):
        if e.get('name') == name:
            return e.get('value')
    return None


def flag(c, name):
    """The value of --flag=value (or --flag value) in a container's args, $(VAR) expanded from literal env
    values; None when the flag is absent."""
    args = [js_str(a) for a in as_list(c.get('args'))]
    value = None
    for i, a in enumerate(args):
        if a == f'--{name}':
            value = args[i + 1] if i + 1 < len(args) else ''
        elif a.startswith(f'--{name}='):
            value = a[len(name) + 3:]
    if value is None:
        return None

    def expand(m):
        v = env_value(c, m[1])
        return m[0] if v is None else js_str(v)
    return re.sub(r'\$\(([A-Za-z_][A-Za-z0-9_]*)\)', expand, value)
