#!/usr/bin/env bash
# TLS and mutual TLS on the controller's gRPC port, with certificates made here by openssl: a client
# with the CA and its own certificate gets in (and a worker runs a job); one without a client
# certificate, or speaking plaintext, is refused. A worker's certificate names its node: one for n0
# cannot register node n1.
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
openssl req -newkey rsa:2048 -nodes -keyout n0.key -out n0.csr -subj "/CN=n0" 2>/dev/null
printf 'subjectAltName=DNS:n0\nextendedKeyUsage=clientAuth\n' >n0.ext
openssl x509 -req -in n0.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out n0.pem -days 2 -extfile n0.ext 2>/dev/null
cd - >/dev/null
start_controller --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key" --tls-client-ca "$WORK/ca.pem"
TLS=(--tls-ca "$WORK/ca.pem" --tls-cert "$WORK/client.pem" --tls-key "$WORK/client.key")
start_worker w0 r0 n0 --tls-ca "$WORK/ca.pem" --tls-cert "$WORK/n0.pem" --tls-key "$WORK/n0.key"
start_worker w1 r0 n1 --tls-ca "$WORK/ca.pem" --tls-cert "$WORK/n0.pem" --tls-key "$WORK/n0.key"
for _ in $(seq 1 100); do grep -q "not among the client certificate's names" "$WORK/worker-w1.log" && break; sleep 0.1; done
grep -q "node n1 is not among the client certificate's names (n0" "$WORK/worker-w1.log" ||
  fail "n0's certificate registered node n1: $(tail -3 "$WORK/worker-w1.log")"
echo "a node certificate registers its own node only: $(grep -o "node n1 is not among.*" "$WORK/worker-w1.log" | head -1)"
kill "${WORKER_PID[w1]}"
for _ in $(seq 1 100); do "$BIN/moectl" "${TLS[@]}" get workers 2>/dev/null | grep -q IDLE && break; sleep 0.1; done
"$BIN/moectl" "${TLS[@]}" get workers | grep -q IDLE || fail "mTLS client cannot list workers"
set +e
err1=$("$BIN/moectl" --tls-ca "$WORK/ca.pem" --timeout 3 get workers 2>&1 >/dev/null); rc1=$?
err2=$("$BIN/moectl" --timeout 3 get workers 2>&1 >/dev/null); rc2=$?
set -e
[ $rc1 -eq 5 ] || fail "a client without a certificate got in (rc $rc1)"
[ $rc2 -eq 5 ] || fail "a plaintext client got in (rc $rc2)"
# The refusals say why, not "is the controller running?".
grep -q "client certificate" <<<"$err1" || fail "the mTLS refusal does not mention the client certificate: $err1"
grep -q "may require TLS" <<<"$err2" || fail "the plaintext refusal does not mention TLS: $err2"
echo "refusals explained: ${err1#moectl: }"
# A key that is not the certificate's is named as such, not as an address in use.
set +e
"$BIN/moe-controller" --listen 127.0.0.1:$(free_port) --metrics-listen 127.0.0.1:$(free_port) --state-dir "$WORK/s2" \
  --tls-cert "$WORK/server.pem" --tls-key "$WORK/client.key" >"$WORK/mismatch.out" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] && grep -q "certificate and key" "$WORK/mismatch.out" ||
  fail "a certificate/key mismatch: rc $rc, $(tail -1 "$WORK/mismatch.out")"
echo "mismatch explained: $(tail -1 "$WORK/mismatch.out")"
make_job "$WORK/job.yaml" tls 5 0 1 1
id=$("$BIN/moectl" "${TLS[@]}" submit -f "$WORK/job.yaml")
"$BIN/moectl" "${TLS[@]}" watch "$id" >/dev/null || fail "the job over mTLS did not succeed"
echo "tls: mTLS clients and workers in, others refused"
