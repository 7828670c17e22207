#!/usr/bin/env bash
# The shipped Prometheus configuration and rules, checked by the real promtool: config syntax, rule
# syntax, and the rules' unit tests (every alert firing and not firing, its runbook_url rendered from
# the external label runbook_base_url). Then the runbook links' form: every alert's runbook_url is
# "{{ $externalLabels.runbook_base_url }}/docs/runbook.md#<its name in lower case>", that section of
# docs/runbook.md exists, prometheus.yml sets the label, and alerts_test.yml tests every alert.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v promtool >/dev/null || { echo "FAIL: promtool is missing (apt install prometheus)" >&2; exit 1; }
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/recording_rules.yml deploy/prometheus/alert_rules.yml
promtool test rules deploy/prometheus/*_test.yml
python3 - <<'PY'
import re, sys, yaml
bad = []
conf = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))
if not (conf.get("global", {}).get("external_labels", {}) or {}).get("runbook_base_url"):
    bad.append("prometheus.yml: global.external_labels.runbook_base_url is not set")
runbook = open("docs/runbook.md").read()
sections = {m.lower() for m in re.findall(r"^## (\S+)\s*$", runbook, re.M)}
tests = yaml.safe_load(open("deploy/prometheus/alerts_test.yml"))["tests"]
tested = {c["alertname"] for t in tests for c in t.get("alert_rule_test", [])}
for g in yaml.safe_load(open("deploy/prometheus/alert_rules.yml"))["groups"]:
    for r in g["rules"]:
        if "alert" not in r:
            continue
        name = r["alert"]
        want = "{{ $externalLabels.runbook_base_url }}/docs/runbook.md#" + name.lower()
        got = r.get("annotations", {}).get("runbook_url")
        if got != want:
            bad.append(f"{name}: runbook_url is {got!r}, want {want!r}")
        if name.lower() not in sections:
            bad.append(f"{name}: docs/runbook.md has no section '## {name}'")
        if name not in tested:
            bad.append(f"{name}: no test case in alerts_test.yml")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
for f in deploy/grafana/dashboards/*.json; do python3 -m json.tool "$f" >/dev/null || { echo "FAIL: $f is not JSON" >&2; exit 1; }; done
n=$(python3 deploy/grafana/extract_queries.py deploy/grafana/dashboards/*.json | wc -l)
[ "$n" -ge 20 ] || { echo "FAIL: only $n dashboard queries found" >&2; exit 1; }
echo "prometheus config, rules and rule tests pass; $n dashboard queries"
