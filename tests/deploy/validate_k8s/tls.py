"""TLS on the controller's gRPC port, as the base ships it: cert-manager's chain (each Certificate's issuer
rendered, each CA Issuer's Secret a rendered CA Certificate's), the controller serving TLS only (never
--allow-cleartext-tokens; --tls-cert and --tls-key from a rendered Certificate's Secret; no gRPC probe,
which the kubelet speaks in plaintext), its certificate naming the Service the clients dial, and every
client (moe-worker, moectl in a container) trusting the CA through --tls-ca: ca.crt of the controller's
Secret, mounted alone (the same Secret holds the controller's private key). (The kinds' fields: schemas.py.)
"""
import ipaddress
import re

from .objects import as_list, containers_of, dicts, dig, env_value, flag, id_of, is_obj, js_str, ns_of, runs_worker

CERT_GROUP = 'cert-manager.io'
ISSUER_TYPES = ('selfSigned', 'ca', 'acme', 'vault', 'venafi')
PROBES = ('livenessProbe', 'readinessProbe', 'startupProbe')
_GO_UNITS = {'h': 3600, 'm': 60, 's': 1, 'ms': 1e-3, 'us': 1e-6, 'µs': 1e-6, 'ns': 1e-9}


def go_seconds(text):
    """Go's time.ParseDuration for what cert-manager reads (720h, 1h30m): seconds, or None."""
    if not isinstance(text, str) or not re.fullmatch(r'([0-9]+(\.[0-9]+)?(h|ms|m|s|us|µs|ns))+', text):
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in re.findall(r'([0-9.]+)(h|ms|m|s|us|µs|ns)', text))


def runs_controller(c):
    return any(isinstance(w, str) and w.endswith('/moe-controller') for w in as_list(c.get('command')))


def secret_file(pt, c, path):
    """The Secret file a container sees at `path`: {'secret', 'key', 'volume', 'items'} (items: the keys the
    volume projects, None for all of them), or None when no Secret volume mounted there holds it."""
    volumes = {v.get('name'): v for v in dicts(pt.pod.get('volumes'))}
    best = None
    for m in dicts(c.get('volumeMounts')):
        mp = js_str(m.get('mountPath')).rstrip('/')
        if m.get('subPath') is not None:
            rel = js_str(m['subPath']) if path == mp else None
        else:
            rel = path[len(mp) + 1:] if path.startswith(mp + '/') else None
        if rel and (best is None or len(mp) > best[0]):
            best = (len(mp), m, rel)
    if best is None:
        return None
    _, m, rel = best
    secret = dig(volumes.get(m.get('name')), 'secret')
    if not is_obj(secret):
        return None
    items = secret.get('items')
    if items is None:
        key = rel if '/' not in rel else None
    else:
        key = next((i.get('key') for i in dicts(items) if i.get('path') == rel), None)
    if key is None:
        return None
    return {'secret': secret.get('secretName'), 'key': key, 'volume': m.get('name'),
            'items': None if items is None else [i.get('key') for i in dicts(items)]}


def certificate_of_secret(r, secret, ns):
    return next((c for c in r.by_kind('Certificate') if dig(c, 'spec', 'secretName') == secret and ns_of(c) == ns), None)


def check_issuers(r):
    """An Issuer is one kind of issuer (cert-manager's webhook refuses none or two); a CA Issuer signs with
    the Secret of a rendered CA Certificate of its namespace."""
    for i in r.by_kind('Issuer'):
        spec = dig(i, 'spec', default={})
        kinds = [k for k in ISSUER_TYPES if is_obj(spec) and k in spec]
        if len(kinds) != 1:
            r.error(f"{id_of(i)}: spec must set exactly one issuer type ({', '.join(ISSUER_TYPES)}), not {len(kinds)}")
        secret = dig(i, 'spec', 'ca', 'secretName')
        if secret is None:
            continue
        ca = certificate_of_secret(r, secret, ns_of(i))
        if ca is None or dig(ca, 'spec', 'isCA') is not True:
            r.error(f"{id_of(i)}: spec.ca.secretName {js_str(secret)} is no rendered CA Certificate's Secret (isCA: true, "
                    f"that secretName) in namespace {ns_of(i)}: the Issuer would never sign")


def check_certificates(r):
    """Each Certificate's issuerRef names a rendered Issuer of its namespace; one Certificate per Secret;
    renewal before expiry."""
    seen = {}
    for c in r.by_kind('Certificate'):
        ref = dig(c, 'spec', 'issuerRef', default={})
        kind, group, name = (dig(ref, 'kind', default='Issuer'), dig(ref, 'group', default=CERT_GROUP), dig(ref, 'name'))
        if group != CERT_GROUP or kind != 'Issuer':
            r.error(f"{id_of(c)}: issuerRef {js_str(group)}/{js_str(kind)} {js_str(name)}: only cert-manager.io Issuers of the "
                    "render are modelled (add the kind to schemas.py and tls.py)")
        elif r.find('Issuer', name, ns_of(c)) is None:
            r.error(f"{id_of(c)}: issuerRef names Issuer {js_str(name)}, which is not rendered in namespace {ns_of(c)}: "
                    "cert-manager would never issue it")
        secret = (ns_of(c), dig(c, 'spec', 'secretName'))
        if secret in seen:
            r.error(f"{id_of(c)}: Secret {js_str(secret[1])} is also {id_of(seen[secret])}'s: each would overwrite the other's")
        seen[secret] = c
        duration = go_seconds(dig(c, 'spec', 'duration', default='2160h'))
        renew = go_seconds(dig(c, 'spec', 'renewBefore'))
        if duration is not None and renew is not None and renew >= duration:
            r.error(f"{id_of(c)}: renewBefore {dig(c, 'spec', 'renewBefore')} is not shorter than the duration: cert-manager refuses it")


def check_controller(r, pt, c, serving):
    """The controller serves TLS only, from a rendered Certificate's Secret; records that Certificate in
    `serving` by namespace."""
    where = f"{pt.where} container {js_str(c.get('name'))}"
    if flag(c, 'allow-cleartext-tokens') is not None:
        r.error(f'{where}: --allow-cleartext-tokens: the bearer tokens and the agents\' heartbeat keys would cross the '
                'network in clear; serve TLS (--tls-cert, --tls-key from the cert-manager Certificate\'s Secret)')
    for p in PROBES:
        if dig(c, p, 'grpc') is not None:
            r.error(f"{where}: {p} is a gRPC probe, but the gRPC port serves TLS and the kubelet's gRPC probes speak plaintext: "
                    'it would never pass (GET /readyz on the metrics port)')
    cert, key = flag(c, 'tls-cert'), flag(c, 'tls-key')
    if not cert or not key:
        r.error(f'{where}: no --tls-cert and --tls-key: the controller would not serve TLS')
        return
    files = {flag_name: (path, secret_file(pt, c, path)) for flag_name, path in (('tls-cert', cert), ('tls-key', key))}
    for flag_name, (path, f) in files.items():
        if f is None:
            r.error(f'{where}: --{flag_name} {path} is in no mounted Secret volume')
    if any(f is None for _, f in files.values()):
        return
    fc, fk = files['tls-cert'][1], files['tls-key'][1]
    if (fc['key'], fk['key'], fk['secret']) != ('tls.crt', 'tls.key', fc['secret']):
        r.error(f"{where}: --tls-cert and --tls-key must be tls.crt and tls.key of one Secret, not {fc['key']} of "
                f"{js_str(fc['secret'])} and {fk['key']} of {js_str(fk['secret'])}")
    certificate = certificate_of_secret(r, fc['secret'], ns_of(pt.owner))
    if certificate is None:
        r.error(f"{where}: --tls-cert comes from Secret {js_str(fc['secret'])}, which no rendered Certificate in namespace "
                f"{ns_of(pt.owner)} makes")
        return
    serving[ns_of(pt.owner)] = certificate
    names = [js_str(n) for n in as_list(dig(certificate, 'spec', 'dnsNames'))]
    for s in r.by_kind('Service'):
        selector = dig(s, 'spec', 'selector', default={})
        if ns_of(s) != ns_of(pt.owner) or not selector or any(pt.labels.get(k) != v for k, v in selector.items()):
            continue
        svc, ns = js_str(dig(s, 'metadata', 'name')), ns_of(s)
        missing = [n for n in (svc, f'{svc}.{ns}', f'{svc}.{ns}.svc', f'{svc}.{ns}.svc.cluster.local') if n not in names]
        if missing:
            r.error(f"{id_of(certificate)}: dnsNames lack {', '.join(missing)}: the names of Service {svc}, which clients dial")


def moectl_calls(c):
    """The moectl command lines of a container's command and args (shell text): each call's words."""
    text = '\n'.join(js_str(w) for w in as_list(c.get('command')) + as_list(c.get('args')))
    return [m[0] for m in re.finditer(r'\bmoectl\b[^\n;&|)]*', text)]


def host_of(address):
    """host:port, [v6]:port or a bare host -> the host a client checks the certificate against."""
    if address.startswith('['):
        return address[1:address.find(']')] if ']' in address else address
    return address.rsplit(':', 1)[0] if address.count(':') == 1 else address


def names_host(certificate, host):
    """Whether a certificate names the host a client dials (a DNS name or an IP address)."""
    try:
        ip = ipaddress.ip_address(host)
        return any(_same_ip(ip, a) for a in as_list(dig(certificate, 'spec', 'ipAddresses')))
    except ValueError:
        return host in [js_str(n) for n in as_list(dig(certificate, 'spec', 'dnsNames'))]


def _same_ip(ip, text):
    try:
        return ipaddress.ip_address(js_str(text)) == ip
    except ValueError:
        return False


def check_client(r, pt, c, serving):
    """A client of the controller (an agent, moectl): every connection with --tls-ca, ca.crt of the
    controller's Secret, mounted alone; the address it dials named by the controller's certificate."""
    where = f"{pt.where} container {js_str(c.get('name'))}"
    if runs_worker(c):
        ca = flag(c, 'tls-ca')
        paths = [ca] if ca else []
        if not ca:
            r.error(f"{where}: no --tls-ca: the agent would speak plaintext to the controller, which serves TLS only")
    else:
        paths = []
        for call in moectl_calls(c):
            m = re.search(r'--tls-ca[= ]+(\S+)', call)
            if m:
                paths.append(m[1])
            else:
                r.error(f"{where}: `{call.strip()}` without --tls-ca: moectl would speak plaintext to the controller, which "
                        'serves TLS only')
    certificate = serving.get(ns_of(pt.owner))
    secret = dig(certificate, 'spec', 'secretName')
    for path in dict.fromkeys(paths):
        f = secret_file(pt, c, path)
        if f is None:
            r.error(f'{where}: --tls-ca {path} is in no mounted Secret volume')
            continue
        if certificate is None:
            r.error(f"{where}: --tls-ca {path}: no controller in namespace {ns_of(pt.owner)} serves TLS from a rendered Certificate")
        elif f['secret'] != secret or f['key'] != 'ca.crt':
            r.error(f"{where}: --tls-ca {path} is {f['key']} of Secret {js_str(f['secret'])}, not ca.crt of {js_str(secret)} "
                    "(the controller's serving Secret: ca.crt is the CA that signed it)")
        if f['items'] is None or any(k != 'ca.crt' for k in f['items']):
            r.error(f"{where}: volume {js_str(f['volume'])} mounts Secret {js_str(f['secret'])} beyond ca.crt: the container "
                    "would see the controller's private key (items: ca.crt alone)")
    address = flag(c, 'controller') or env_value(c, 'MOE_CONTROLLER')
    if certificate is not None and isinstance(address, str) and address:
        host = host_of(address)
        if not names_host(certificate, host):
            r.error(f"{where}: the controller address {address}: {host} is not named by {id_of(certificate)} (dnsNames, "
                    'ipAddresses): the TLS handshake would fail')


def check_tls(r):
    check_issuers(r)
    check_certificates(r)
    serving = {}
    for pt in r.pod_templates():
        for c in containers_of(pt.pod):
            if runs_controller(c):
                check_controller(r, pt, c, serving)
    for pt in r.pod_templates():
        for c in containers_of(pt.pod):
            if not runs_controller(c) and (runs_worker(c) or moectl_calls(c)):
                check_client(r, pt, c, serving)
