#!/usr/bin/env bash
# TLS and mutual TLS on the controller's gRPC port, with certificates made here by openssl: a client
# with the CA and its own certificate gets in (and a worker runs a job); one without a client
# certificate, or speaking plaintext, is refused.
source "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || fail "openssl is missing"
cd "$WORK"
ext() { printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=%s\n' "$1" >"$2"; }
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=moe-test-ca" 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj "/CN=moe-$who" 2>/dev/null
  ext "$([ $who = server ] && echo serverAuth || echo clientAuth)" $who.ext
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem -days 2 -extfile $who.ext 2>/dev/null
done
cd - >/dev/null
start_controller --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key" --tls-client-ca "$WORK/ca.pem"
TLS=(--tls-ca "$WORK/ca.pem" --tls-cert "$WORK/client.pem" --tls-key "$WORK/client.key")
start_worker w0 r0 n0 "${TLS[@]}"
for _ in $(seq 1 100); do "$BIN/moectl" "${TLS[@]}" get workers 2>/dev/null | grep -q IDLE && break; sleep 0.1; done
"$BIN/moectl" "${TLS[@]}" get workers | grep -q IDLE || fail "mTLS client cannot list workers"
set +e
"$BIN/moectl" --tls-ca "$WORK/ca.pem" --timeout 3 get workers >/dev/null 2>&1; rc1=$?
"$BIN/moectl" --timeout 3 get workers >/dev/null 2>&1; rc2=$?
set -e
[ $rc1 -eq 5 ] || fail "a client without a certificate got in (rc $rc1)"
[ $rc2 -eq 5 ] || fail "a plaintext client got in (rc $rc2)"
make_job "$WORK/job.yaml" tls 5 0 1 1
id=$("$BIN/moectl" "${TLS[@]}" submit -f "$WORK/job.yaml")
"$BIN/moectl" "${TLS[@]}" watch "$id" >/dev/null || fail "the job over mTLS did not succeed"
echo "tls: mTLS clients and workers in, others refused"
