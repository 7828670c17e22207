"""Kueue: the queues resolve (pool -> LocalQueue -> ClusterQueue -> ResourceFlavor -> Topology), each pool
could be admitted (every resource it requests covered, its whole size within one flavor's quota, its
topology request on a level of that flavor's Topology, as Kueue validates it), and the pool's size agrees
with itself (completions, the TAS slice, the ComputeDomain's numNodes). A pool Kueue can never admit is
a valid object that waits forever: only these checks see it.
"""
import math
import re

from .objects import (QUEUE_LABEL, as_dict, as_list, dicts, dig, has_duplicates, id_of, js_join, js_number, js_str, ns_of,
                      quantity, requests, runs_worker, to_json, truthy)
from .pods import cd_claims
from .schemas import LABEL_KEY, matches


class TAS:
    """The pod template annotations of Kueue's topology-aware scheduling."""
    required = 'kueue.x-k8s.io/podset-required-topology'
    preferred = 'kueue.x-k8s.io/podset-preferred-topology'
    unconstrained = 'kueue.x-k8s.io/podset-unconstrained-topology'
    slice_required = 'kueue.x-k8s.io/podset-slice-required-topology'
    slice_size = 'kueue.x-k8s.io/podset-slice-size'


def pools(r):
    """The worker pools: Jobs and JobSets whose pods run moe-worker."""
    return [pt for pt in r.pod_templates() if pt.job is not None and any(runs_worker(c) for c in pt.containers)]


def _max(a, b):
    """Math.max: NaN if either is."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def pod_requests(pod):
    """The pod's effective requests: the containers' sum, or an init container's if larger (Kubernetes' rule)."""
    total = {}
    for c in dicts(pod.get('containers')):
        for k, v in requests(c).items():
            total[k] = total.get(k, 0) + quantity(v)
    for c in dicts(pod.get('initContainers')):
        for k, v in requests(c).items():
            total[k] = _max(total.get(k, 0), quantity(v))
    return total


def pod_count(pt):
    return js_number(pt.job_replicas if pt.job_replicas is not None else 1) * js_number(dig(pt.job, 'parallelism', default=1))


def check_topologies(r):
    for t in r.by_kind('Topology'):
        levels = [dig(level, 'nodeLabel') for level in dicts(dig(t, 'spec', 'levels'))]
        if has_duplicates(levels):
            r.error(f'{id_of(t)}: levels must be unique')
        if 'kubernetes.io/hostname' in levels and levels.index('kubernetes.io/hostname') != len(levels) - 1:
            r.error(f'{id_of(t)}: kubernetes.io/hostname can only be the lowest level')


def check_flavors(r):
    for f in r.by_kind('ResourceFlavor'):
        t = dig(f, 'spec', 'topologyName')
        if t is None:
            continue
        if not as_dict(dig(f, 'spec', 'nodeLabels')):
            r.error(f'{id_of(f)}: a flavor with topologyName needs at least one nodeLabel')
        if r.find('Topology', t) is None:
            r.error(f'{id_of(f)}: Topology {js_str(t)} is not rendered')


def check_cluster_queues(r):
    """Kueue requires each flavor to list exactly the group's coveredResources, in that order."""
    for cq in r.by_kind('ClusterQueue'):
        for g, group in enumerate(dicts(dig(cq, 'spec', 'resourceGroups'))):
            covered = js_join(as_list(group.get('coveredResources')), ', ')
            for fq in dicts(group.get('flavors')):
                names = js_join([x.get('name') for x in dicts(fq.get('resources'))], ', ')
                if names != covered:
                    r.error(f"{id_of(cq)}: resourceGroups[{g}] flavor {js_str(fq.get('name'))} lists {names}, "
                            f'not the coveredResources {covered} in order')
                if r.find('ResourceFlavor', fq.get('name')) is None:
                    r.error(f"{id_of(cq)}: ResourceFlavor {js_str(fq.get('name'))} is not rendered")
    for lq in r.by_kind('LocalQueue'):
        if r.find('ClusterQueue', dig(lq, 'spec', 'clusterQueue')) is None:
            r.error(f"{id_of(lq)}: ClusterQueue {js_str(dig(lq, 'spec', 'clusterQueue'))} is not rendered")


def check_slice(r, pt, where, size):
    """The slice size: an integer >= 1, within the pod set, and (this project's rule) the Job's parallelism:
    a slice is one child Job (one rack), so the slices and the Jobs line up."""
    if not (re.fullmatch('[0-9]+', js_str(size)) and js_number(size) >= 1):
        r.error(f'{where} {TAS.slice_size}: {to_json(size)} is not an integer >= 1')
    elif js_number(size) > pod_count(pt):
        r.error(f"{where} {TAS.slice_size}: {js_str(size)} is more than the pod set's {js_str(pod_count(pt))} pods")
    parallelism = pt.job.get('parallelism')
    if js_number(size) != parallelism:
        r.error(f"{where} {TAS.slice_size}: {js_str(size)}, not the Job's parallelism {js_str(parallelism)} "
                '(each child Job, one rack, is one slice)')


def tas_request(r, pt):
    """The TAS annotations as Kueue's webhook validates them (jobframework/tas_validation.go); returns the
    node labels they request."""
    a = pt.annotations
    where = f'{pt.where}: pod template annotation'
    present = [k for k in (TAS.required, TAS.preferred, TAS.unconstrained) if a.get(k) is not None]
    if len(present) > 1:
        r.error(f"{where}s: more than one of {', '.join(present)}")
    for k in (TAS.required, TAS.preferred, TAS.slice_required):
        if a.get(k) is not None and not matches(LABEL_KEY, js_str(a[k])):
            r.error(f'{where} {k}: {js_str(a[k])} is not a label key')
    if (a.get(TAS.slice_required) is None) != (a.get(TAS.slice_size) is None):
        r.error(f'{where}s: {TAS.slice_required} and {TAS.slice_size} go together')
    if a.get(TAS.slice_size) is not None:
        check_slice(r, pt, where, a[TAS.slice_size])
    return [a[k] for k in (TAS.required, TAS.preferred, TAS.slice_required) if a.get(k) is not None]


def queue_of(r, pt):
    """pool -> LocalQueue -> ClusterQueue, or None after an error naming the missing link."""
    q = dig(pt.owner, 'metadata', 'labels', QUEUE_LABEL)
    if not truthy(q):
        r.error(f'{pt.where}: no {QUEUE_LABEL} label on {id_of(pt.owner)}: Kueue does not admit it, nor account for its GPUs')
        return None
    lq = r.find('LocalQueue', q, ns_of(pt.owner))
    if lq is None:
        r.error(f'{id_of(pt.owner)}: {QUEUE_LABEL} {js_str(q)}: no LocalQueue of that name in namespace {ns_of(pt.owner)}')
        return None
    return r.find('ClusterQueue', dig(lq, 'spec', 'clusterQueue'))


def nominal_quota(flavor, resource):
    """A flavor's nominalQuota of a resource, as a number (0 where it lists none)."""
    entry = next((x for x in dicts(flavor.get('resources')) if x.get('name') == resource), {})
    return quantity(dig(entry, 'nominalQuota', default=0))


def topology_levels(r, flavor):
    topology = r.find('Topology', dig(r.find('ResourceFlavor', flavor), 'spec', 'topologyName'))
    return [dig(level, 'nodeLabel') for level in dicts(dig(topology, 'spec', 'levels'))]


def check_admissible(r, pt, cq, levels):
    """Admission: every requested resource covered; in each group some flavor holds the whole pool (and has a
    Topology with the requested level)."""
    count = pod_count(pt)
    total = {k: v * count for k, v in pod_requests(pt.pod).items()}
    groups = dicts(dig(cq, 'spec', 'resourceGroups'))
    cq_name = js_str(dig(cq, 'metadata', 'name'))
    for k in total:
        if not any(k in as_list(g.get('coveredResources')) for g in groups):
            r.error(f'{id_of(pt.owner)}: requests {k}, which ClusterQueue {cq_name} does not cover: Kueue never admits it')
    for g in groups:
        wanted = [k for k in as_list(g.get('coveredResources')) if total.get(k, 0) > 0]
        if not wanted:
            continue
        fits = [fq for fq in dicts(g.get('flavors')) if all(nominal_quota(fq, k) >= total[k] for k in wanted)]
        if not fits:
            needs = ', '.join(f'{k} {js_str(round(total[k], 3))}' for k in wanted)
            r.error(f"{id_of(pt.owner)}: needs {needs} ({js_str(count)} pods), more than any flavor's nominalQuota "
                    f'in ClusterQueue {cq_name}')
            continue
        if levels and not any(all(level in topology_levels(r, fq.get('name')) for level in levels) for fq in fits):
            r.error(f"{id_of(pt.owner)}: topology level {js_join(levels, ', ')} is not a level of the Topology of any flavor of "
                    f'ClusterQueue {cq_name} that holds it')


def check_size(r, pt, cd_by_template):
    """The pool's own numbers: completions = parallelism (an Indexed Job of agents); numNodes of its
    ComputeDomain = its pods."""
    job = pt.job
    if job.get('completionMode') != 'Indexed':
        mode = job.get('completionMode')
        r.error(f"{pt.where}: completionMode {'(unset)' if mode is None else js_str(mode)}: a pool is an Indexed Job (one index per node)")
    if job.get('completions') != job.get('parallelism'):
        r.error(f"{pt.where}: completions {to_json(job.get('completions'))} != parallelism {to_json(job.get('parallelism'))}")
    domains = {id(cd): cd for cd in cd_claims(pt, cd_by_template).values()}
    for cd in domains.values():
        num_nodes = dig(cd, 'spec', 'numNodes')
        if num_nodes != pod_count(pt) or isinstance(num_nodes, bool):
            r.error(f'{id_of(cd)}: numNodes {js_str(num_nodes)}, but {pt.where} runs {js_str(pod_count(pt))} agents '
                    f"(replicas {js_str(pt.job_replicas)} x parallelism {js_str(job.get('parallelism'))}), one per node")


def check_kueue(r, ctx):
    check_topologies(r)
    check_flavors(r)
    check_cluster_queues(r)
    for pt in pools(r):
        check_size(r, pt, ctx.cd_by_template)
        levels = tas_request(r, pt)
        cq = queue_of(r, pt)
        if cq is not None:
            check_admissible(r, pt, cq, levels)
