"""Our own schemas, for the custom resources no PyPI package has a schema of: the NVIDIA DRA driver's
ComputeDomain, JobSet, Kueue's Topology, ResourceFlavor, ClusterQueue and LocalQueue, the Prometheus
Operator's ServiceMonitor, PodMonitor and PrometheusRule, and cert-manager's Issuer and Certificate (the
built-in kinds are checked against kubernetes-validate's schemas: validate_k8s.py). A JSON-Schema subset
(type, a name or a list of names, required, properties, additionalProperties, items, enum, minimum,
maximum, minLength, maxLength, minItems, maxItems, pattern) plus `quantity` (an int-or-string resource
quantity).

Unlike the API server, which prunes unknown fields of a custom resource (dropping them, a warning at
most), these reject them: a dropped `numNode` or `topologyNam` would silently mean something else.
"""
import re

from .objects import to_json

DNS_LABEL = r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'                                          # RFC 1123 label, <= 63
DNS_SUBDOMAIN = r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'    # <= 253
# A label key: [prefix/]name, the prefix a DNS subdomain, the name <= 63 alphanumerics, '-', '_', '.'.
LABEL_KEY = r'^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'
QUANTITY = r'^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)))?$'
# A Prometheus duration as the Operator's CRDs have it (monitoringv1.Duration): 30s, 1m30s, 0.
DURATION = r'^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'

dns_label = {'type': 'string', 'maxLength': 63, 'pattern': DNS_LABEL}
dns_subdomain = {'type': 'string', 'maxLength': 253, 'pattern': DNS_SUBDOMAIN}
label_key = {'type': 'string', 'maxLength': 316, 'pattern': LABEL_KEY}
string_map = {'type': 'object', 'additionalProperties': {'type': 'string'}}
quantity = {'quantity': True}
STR = {'type': 'string'}
BOOL = {'type': 'boolean'}
INT = {'type': 'integer'}
COUNT = {'type': 'integer', 'minimum': 0}
OBJECT = {'type': 'object'}
duration = {'type': 'string', 'pattern': DURATION}
int_or_string = {'type': ['integer', 'string']}
object_meta = {
    'type': 'object', 'required': ['name'],
    'properties': {'name': dns_subdomain, 'namespace': dns_label, 'labels': string_map, 'annotations': string_map},
}


def strict(required, properties):
    return {'type': 'object', 'required': required, 'additionalProperties': False, 'properties': properties}


def list_of(items, **extra):
    return {'type': 'array', 'items': items, **extra}


def one_of(*values):
    return {'type': 'string', 'enum': list(values)}


def resource(api_version, kind, spec, spec_required=True):
    """A top-level custom resource: apiVersion, kind, metadata, spec (status is the controller's to write)."""
    return strict(['apiVersion', 'kind', 'metadata'] + (['spec'] if spec_required else []), {
        'apiVersion': {'enum': [api_version]}, 'kind': {'enum': [kind]}, 'metadata': object_meta, 'spec': spec,
        'status': OBJECT,
    })


label_selector = strict([], {
    'matchLabels': string_map,
    'matchExpressions': list_of(strict(['key', 'operator'], {
        'key': STR, 'operator': one_of('In', 'NotIn', 'Exists', 'DoesNotExist'), 'values': list_of(STR)})),
})

# ComputeDomain, resource.nvidia.com/v1beta1 (NVIDIA/k8s-dra-driver-gpu, computedomains.resource.nvidia.com;
# api/nvidia.com/resource/v1beta1/computedomain.go): numNodes (integer >= 0; required in the driver's
# earlier CRDs, default 0 in later ones: we require it, the pool states the trays it expects), channel
# (required): resourceClaimTemplate.name (required), allocationMode All|Single. spec is immutable.
COMPUTE_DOMAIN = resource('resource.nvidia.com/v1beta1', 'ComputeDomain', strict(['numNodes', 'channel'], {
    'numNodes': COUNT,
    'channel': strict(['resourceClaimTemplate'], {
        'resourceClaimTemplate': strict(['name'], {'name': dns_subdomain}),
        'allocationMode': one_of('All', 'Single'),
    }),
}))

# JobSet, jobset.x-k8s.io/v1alpha2 (kubernetes-sigs/jobset v0.12, config/components/crd/bases/
# jobset.x-k8s.io_jobsets.yaml). Each replicatedJobs[].template is a batch/v1 JobTemplateSpec: checked
# here for its shape only, then as a Job against Kubernetes' own schema (validate_k8s.py).
JOB_SET = resource('jobset.x-k8s.io/v1alpha2', 'JobSet', strict(['replicatedJobs'], {
    'replicatedJobs': list_of(strict(['name', 'template'], {
        'name': dns_label,
        'groupName': STR,
        'replicas': COUNT,
        'dependsOn': list_of(strict(['name', 'status'], {'name': STR, 'status': one_of('Ready', 'Complete')}), maxItems=5),
        'template': strict(['spec'], {'metadata': OBJECT, 'spec': OBJECT}),
    }), minItems=1),
    'network': strict([], {'enableDNSHostnames': BOOL, 'subdomain': STR, 'publishNotReadyAddresses': BOOL}),
    'successPolicy': strict(['operator'], {'operator': one_of('All', 'Any'), 'targetReplicatedJobs': list_of(STR)}),
    'failurePolicy': strict([], {
        'maxRestarts': COUNT,
        'restartStrategy': one_of('Recreate', 'BlockingRecreate', 'InPlaceRestart'),
        'rules': list_of(OBJECT),
    }),
    'startupPolicy': strict(['startupPolicyOrder'], {'startupPolicyOrder': one_of('AnyOrder', 'InOrder')}),
    'coordinator': strict(['replicatedJob'], {'replicatedJob': STR, 'jobIndex': INT, 'podIndex': INT}),
    'suspend': BOOL,
    'managedBy': STR,
    'ttlSecondsAfterFinished': COUNT,
    'volumeClaimPolicies': list_of(OBJECT, maxItems=50),
}))

# Kueue, kueue.x-k8s.io/v1beta2 (kubernetes-sigs/kueue v0.19, config/components/crd/bases): served from
# v0.15 on (v0.14 has v1beta1 only; Topology was v1alpha1 up to v0.13).
KUEUE = 'kueue.x-k8s.io/v1beta2'
taint_effect = one_of('NoSchedule', 'PreferNoSchedule', 'NoExecute')
TOPOLOGY = resource(KUEUE, 'Topology', strict(['levels'], {
    'levels': list_of(strict(['nodeLabel'], {'nodeLabel': label_key}), minItems=1, maxItems=16),
}))
RESOURCE_FLAVOR = resource(KUEUE, 'ResourceFlavor', strict([], {
    'nodeLabels': string_map,
    'nodeTaints': list_of(strict(['key', 'effect'], {'key': STR, 'value': STR, 'effect': taint_effect, 'timeAdded': STR}),
                          maxItems=8),
    'tolerations': list_of(strict([], {'key': STR, 'operator': one_of('Equal', 'Exists'), 'value': STR,
                                       'effect': taint_effect, 'tolerationSeconds': INT}), maxItems=8),
    'topologyName': dns_subdomain,
}), spec_required=False)
flavor_quotas = strict(['name', 'resources'], {
    'name': dns_subdomain,
    'resources': list_of(strict(['name', 'nominalQuota'], {
        'name': STR, 'nominalQuota': quantity, 'borrowingLimit': quantity, 'lendingLimit': quantity,
    }), minItems=1, maxItems=64),
})
CLUSTER_QUEUE = resource(KUEUE, 'ClusterQueue', strict([], {
    'cohortName': dns_subdomain,
    'namespaceSelector': label_selector,
    'resourceGroups': list_of(strict(['coveredResources', 'flavors'], {
        'coveredResources': list_of(STR, minItems=1, maxItems=64),
        'flavors': list_of(flavor_quotas, minItems=1, maxItems=64),
    }), maxItems=16),
    'queueingStrategy': one_of('StrictFIFO', 'BestEffortFIFO'),
    'preemption': strict([], {
        'reclaimWithinCohort': one_of('Never', 'LowerPriority', 'Any'),
        'borrowWithinCohort': strict([], {'policy': one_of('Never', 'LowerPriority'), 'maxPriorityThreshold': INT}),
        'withinClusterQueue': one_of('Never', 'LowerPriority', 'LowerOrNewerEqualPriority'),
    }),
    'flavorFungibility': strict([], {
        'whenCanBorrow': one_of('MayStopSearch', 'TryNextFlavor'),
        'whenCanPreempt': one_of('MayStopSearch', 'TryNextFlavor'),
        'preference': one_of('BorrowingOverPreemption', 'PreemptionOverBorrowing'),
    }),
    'stopPolicy': one_of('None', 'Hold', 'HoldAndDrain'),
    'fairSharing': strict([], {'weight': quantity}),
    'admissionChecksStrategy': OBJECT,
    'admissionScope': OBJECT,
    'concurrentAdmissionPolicy': OBJECT,
}), spec_required=False)
LOCAL_QUEUE = resource(KUEUE, 'LocalQueue', strict(['clusterQueue'], {
    'clusterQueue': dns_subdomain,
    'stopPolicy': one_of('None', 'Hold', 'HoldAndDrain'),
    'fairSharing': strict([], {'weight': quantity}),
}))

# The Prometheus Operator, monitoring.coreos.com/v1 (prometheus-operator v0.93, example/prometheus-
# operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml; the Go types in
# pkg/apis/monitoring/v1). Ours because no PyPI package ships these schemas: kubernetes-validate has the
# built-in kinds only, and cloudcoil-models-prometheus-operator has pydantic models (not schemas) that
# ignore unknown fields, coerce "yes" to true, and need Python >= 3.14 in their current releases. The
# JavaScript validator took them from the npm package @kubernetes-models/prometheus-operator, which these
# machines can no longer install. Modelled: every field our manifests use, with the CRD's types, and the
# scrape settings next to them; not the auth, TLS and proxy settings (authorization, basicAuth, oauth2,
# bearerTokenSecret, tlsConfig, proxyUrl, ...), which our manifests do not set: one of those is rejected
# as an unknown field until it is added here from the CRD.
MONITORING = 'monitoring.coreos.com/v1'
relabel_action = one_of(*[a for pair in (
    ('replace', 'Replace'), ('keep', 'Keep'), ('drop', 'Drop'), ('hashmod', 'HashMod'), ('labelmap', 'LabelMap'),
    ('labeldrop', 'LabelDrop'), ('labelkeep', 'LabelKeep'), ('lowercase', 'Lowercase'), ('uppercase', 'Uppercase'),
    ('keepequal', 'KeepEqual'), ('dropequal', 'DropEqual')) for a in pair])
relabel_config = strict([], {
    'sourceLabels': list_of(STR), 'separator': STR, 'targetLabel': STR, 'regex': STR, 'modulus': COUNT,
    'replacement': STR, 'action': relabel_action,
})
# What an endpoints[] (ServiceMonitor) and a podMetricsEndpoints[] (PodMonitor) item have alike: port is
# the port's NAME (a string; a PodMonitor's number is portNumber), honorLabels a boolean, the intervals
# Prometheus durations.
scrape_endpoint = {
    'port': STR,
    'targetPort': int_or_string,
    'path': STR,
    'scheme': one_of('http', 'https', 'HTTP', 'HTTPS'),
    'params': {'type': 'object', 'additionalProperties': list_of(STR)},
    'interval': duration,
    'scrapeTimeout': duration,
    'honorLabels': BOOL,
    'honorTimestamps': BOOL,
    'trackTimestampsStaleness': BOOL,
    'relabelings': list_of(relabel_config),
    'metricRelabelings': list_of(relabel_config),
    'followRedirects': BOOL,
    'enableHttp2': BOOL,
    'filterRunning': BOOL,
}
# The spec fields ServiceMonitor and PodMonitor share.
monitor_spec = {
    'selector': label_selector,
    'namespaceSelector': strict([], {'any': BOOL, 'matchNames': list_of(STR)}),
    'jobLabel': STR,
    'podTargetLabels': list_of(STR),
    'sampleLimit': COUNT,
    'targetLimit': COUNT,
    'labelLimit': COUNT,
    'labelNameLengthLimit': COUNT,
    'labelValueLengthLimit': COUNT,
    'keepDroppedTargets': COUNT,
    'attachMetadata': strict([], {'node': BOOL}),
    'scrapeClass': {'type': 'string', 'minLength': 1},
}
SERVICE_MONITOR = resource(MONITORING, 'ServiceMonitor', strict(['endpoints', 'selector'], {
    **monitor_spec,
    'endpoints': list_of(strict([], scrape_endpoint)),
    'targetLabels': list_of(STR),
}))
POD_MONITOR = resource(MONITORING, 'PodMonitor', strict(['selector'], {
    **monitor_spec,
    'podMetricsEndpoints': list_of(strict([], {**scrape_endpoint, 'portNumber': {'type': 'integer', 'minimum': 1, 'maximum': 65535}})),
}))
PROMETHEUS_RULE = resource(MONITORING, 'PrometheusRule', strict([], {
    'groups': list_of(strict(['name'], {
        'name': {'type': 'string', 'minLength': 1},
        'interval': duration,
        'query_offset': duration,
        'limit': INT,
        'labels': string_map,
        'partial_response_strategy': {'type': 'string', 'pattern': r'(?i)^(abort|warn)?$'},
        'rules': list_of(strict(['expr'], {
            'record': STR,
            'alert': STR,
            'expr': int_or_string,
            'for': duration,
            'keep_firing_for': {'type': 'string', 'minLength': 1, 'pattern': DURATION},
            'labels': string_map,
            'annotations': string_map,
        })),
    })),
}))

# cert-manager, cert-manager.io/v1 (cert-manager v1.19, deploy/crds/cert-manager.io_{certificates,issuers}.yaml;
# the Go types in pkg/apis/certmanager/v1). Ours for the same reason as the Operator's: no PyPI package
# ships them. Modelled: every field of a Certificate's spec but the keystores, and of an Issuer the two
# kinds of issuer the base uses, selfSigned and ca; an ACME, Vault or Venafi issuer (or a ClusterIssuer) is
# an unknown field or kind until it is added here from the CRD. Durations are Go's time.ParseDuration
# (cert-manager's own suffixes: h, m, s, ms, us, ns; no d); usages are cert-manager's KeyUsage names.
CERT_MANAGER = 'cert-manager.io/v1'
GO_DURATION = r'^([0-9]+(\.[0-9]+)?(h|m|s|ms|us|µs|ns))+$'
go_duration = {'type': 'string', 'pattern': GO_DURATION}
key_usage = one_of(
    'signing', 'digital signature', 'content commitment', 'key encipherment', 'key agreement', 'data encipherment',
    'cert sign', 'crl sign', 'encipher only', 'decipher only', 'any', 'server auth', 'client auth', 'code signing',
    'email protection', 's/mime', 'ipsec end system', 'ipsec tunnel', 'ipsec user', 'timestamping', 'ocsp signing',
    'microsoft sgc', 'netscape sgc')
issuer_ref = strict(['name'], {'name': dns_subdomain, 'kind': STR, 'group': STR})
name_list = {'type': 'object', 'additionalProperties': False, 'properties': {
    k: list_of(STR) for k in ('dnsDomains', 'ipRanges', 'emailAddresses', 'uriDomains')}}
CERTIFICATE = resource(CERT_MANAGER, 'Certificate', strict(['secretName', 'issuerRef'], {
    'secretName': dns_subdomain,
    'issuerRef': issuer_ref,
    'commonName': {'type': 'string', 'maxLength': 64},
    'literalSubject': STR,
    'subject': strict([], {
        **{k: list_of(STR) for k in ('countries', 'localities', 'organizationalUnits', 'organizations', 'postalCodes',
                                     'provinces', 'streetAddresses')},
        'serialNumber': STR,
    }),
    'dnsNames': list_of(STR),
    'ipAddresses': list_of(STR),
    'uris': list_of(STR),
    'emailAddresses': list_of(STR),
    'otherNames': list_of(strict([], {'oid': STR, 'utf8Value': STR})),
    'duration': go_duration,
    'renewBefore': go_duration,
    'renewBeforePercentage': {'type': 'integer', 'minimum': 1, 'maximum': 99},
    'isCA': BOOL,
    'usages': list_of(key_usage),
    'privateKey': strict([], {
        'algorithm': one_of('RSA', 'ECDSA', 'Ed25519'),
        'size': INT,
        'encoding': one_of('PKCS1', 'PKCS8'),
        'rotationPolicy': one_of('Never', 'Always'),
    }),
    'signatureAlgorithm': one_of('SHA256WithRSA', 'SHA384WithRSA', 'SHA512WithRSA', 'ECDSAWithSHA256', 'ECDSAWithSHA384',
                                 'ECDSAWithSHA512', 'PureEd25519'),
    'encodeUsagesInRequest': BOOL,
    'secretTemplate': strict([], {'annotations': string_map, 'labels': string_map}),
    'revisionHistoryLimit': {'type': 'integer', 'minimum': 1},
    'additionalOutputFormats': list_of(strict(['type'], {'type': one_of('DER', 'CombinedPEM')})),
    'nameConstraints': strict([], {'critical': BOOL, 'permitted': name_list, 'excluded': name_list}),
}))
ISSUER = resource(CERT_MANAGER, 'Issuer', strict([], {
    'selfSigned': strict([], {'crlDistributionPoints': list_of(STR)}),
    'ca': strict(['secretName'], {
        'secretName': dns_subdomain,
        'crlDistributionPoints': list_of(STR),
        'ocspServers': list_of(STR),
        'issuingCertificateURLs': list_of(STR),
    }),
}))

OWN_SCHEMAS = {
    'resource.nvidia.com/v1beta1 ComputeDomain': COMPUTE_DOMAIN,
    'jobset.x-k8s.io/v1alpha2 JobSet': JOB_SET,
    f'{KUEUE} Topology': TOPOLOGY,
    f'{KUEUE} ResourceFlavor': RESOURCE_FLAVOR,
    f'{KUEUE} ClusterQueue': CLUSTER_QUEUE,
    f'{KUEUE} LocalQueue': LOCAL_QUEUE,
    f'{MONITORING} ServiceMonitor': SERVICE_MONITOR,
    f'{MONITORING} PodMonitor': POD_MONITOR,
    f'{MONITORING} PrometheusRule': PROMETHEUS_RULE,
    f'{CERT_MANAGER} Certificate': CERTIFICATE,
    f'{CERT_MANAGER} Issuer': ISSUER,
}
# Groups whose kinds we model ourselves, all of them that a manifest would name: another version or kind
# there is an error, not a skip (an old kueue.x-k8s.io/v1alpha1 Topology would otherwise pass unvalidated,
# and fail on a current Kueue). Not monitoring.coreos.com: it has kinds we do not model (Probe,
# ScrapeConfig, ...); there only another version of a kind we model is an error (own_kind_elsewhere).
OWN_GROUPS = frozenset(['resource.nvidia.com', 'jobset.x-k8s.io', 'kueue.x-k8s.io', 'cert-manager.io'])
OWN_KINDS = frozenset((key.split('/')[0], key.split(' ')[1]) for key in OWN_SCHEMAS)


def group_of(api_version):
    return api_version.split('/')[0] if '/' in api_version else ''


def own_kind_elsewhere(api_version, kind):
    """Whether we model this kind of this group, in another version or kind, or the whole group."""
    group = group_of(api_version)
    return group in OWN_GROUPS or (group, kind) in OWN_KINDS


# --- the checker --------------------------------------------------------------------------------------

def type_of(v):
    if v is None:
        return 'null'
    if isinstance(v, bool):
        return 'boolean'
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return 'integer'
    if isinstance(v, float):
        return 'number'
    if isinstance(v, str):
        return 'string'
    if isinstance(v, list):
        return 'array'
    if isinstance(v, dict):
        return 'object'
    return type(v).__name__


def matches(pattern, s):
    """RegExp.test: a search; a final $ is the end of the string (not before a final newline, as in re)."""
    m = re.search(pattern, s)
    return bool(m) and (not pattern.endswith('$') or m.end() == len(s))


def _is_quantity(v):
    return type_of(v) == 'integer' or (isinstance(v, str) and matches(QUANTITY, v))


def _check_scalar(schema, v, at, out):
    if 'enum' in schema and v not in schema['enum']:
        out.append(f"{at} must be one of {', '.join(schema['enum'])} (is {to_json(v)})")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if 'minimum' in schema and v < schema['minimum']:
            out.append(f"{at} must be >= {schema['minimum']}")
        if 'maximum' in schema and v > schema['maximum']:
            out.append(f"{at} must be <= {schema['maximum']}")
    if isinstance(v, str):
        if 'maxLength' in schema and len(v) > schema['maxLength']:
            out.append(f"{at} is longer than {schema['maxLength']}")
        if 'minLength' in schema and len(v) < schema['minLength']:
            out.append(f"{at} is shorter than {schema['minLength']}")
        if 'pattern' in schema and not matches(schema['pattern'], v):
            out.append(f'{at} "{v}" must match {schema["pattern"]}')
    if schema.get('quantity') and not _is_quantity(v):
        out.append(f"{at} must be a quantity (an integer or a string like 4, 500m, 64Gi), not {to_json(v)}")


def _check_object(schema, v, path, out):
    for name in schema.get('required', []):
        if name not in v:
            out.append(f"{path + '.' if path else ''}{name} is required")
    properties = schema.get('properties', {})
    additional = schema.get('additionalProperties')
    for k, val in v.items():
        p = f'{path}.{k}' if path else str(k)
        if k in properties:
            check_schema(properties[k], val, p, out)
        elif additional is False:
            out.append(f"{p}: unknown field (allowed: {', '.join(properties)})")
        elif isinstance(additional, dict):
            check_schema(additional, val, p, out)


def _check_array(schema, v, path, out):
    if 'minItems' in schema and len(v) < schema['minItems']:
        out.append(f"{path} needs at least {schema['minItems']} item(s)")
    if 'maxItems' in schema and len(v) > schema['maxItems']:
        out.append(f"{path} has more than {schema['maxItems']} items")
    if 'items' in schema:
        for i, x in enumerate(v):
            check_schema(schema['items'], x, f'{path}[{i}]', out)


def type_error(types, v, at):
    """'AT must be integer, not string "two"': one message for our schemas and Kubernetes'."""
    t = type_of(v)
    shown = f' "{v}"' if t == 'string' else ''
    return f"{at} must be {' or '.join(types)}, not {t}{shown}"


def check_schema(schema, v, path, out):
    """Appends one message per violation to `out`; `path` is the dotted path of v."""
    at = path or '(root)'
    if 'type' in schema:
        types = schema['type'] if isinstance(schema['type'], list) else [schema['type']]
        t = type_of(v)
        if t not in types and not (t == 'integer' and 'number' in types):
            out.append(type_error(types, v, at))
            return
    _check_scalar(schema, v, at, out)
    if isinstance(v, dict):
        _check_object(schema, v, path, out)
    if isinstance(v, list):
        _check_array(schema, v, path, out)
