#!/usr/bin/env bash
# The shipped Prometheus configuration and rules, checked by the real promtool: config syntax, rule
# syntax, and the rules' unit tests (every alert firing and not firing).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v promtool >/dev/null || { echo "FAIL: promtool is missing (apt install prometheus)" >&2; exit 1; }
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/recording_rules.yml deploy/prometheus/alert_rules.yml
promtool test rules deploy/prometheus/*_test.yml
for f in deploy/grafana/dashboards/*.json; do python3 -m json.tool "$f" >/dev/null || { echo "FAIL: $f is not JSON" >&2; exit 1; }; done
n=$(python3 deploy/grafana/extract_queries.py deploy/grafana/dashboards/*.json | wc -l)
[ "$n" -ge 20 ] || { echo "FAIL: only $n dashboard queries found" >&2; exit 1; }
echo "prometheus config, rules and rule tests pass; $n dashboard queries"
