#!/bin/bash
# Per-batch latency while Redis is frozen (SIGSTOP), measured from outside:
# grpcurl against two real `toolwire serve`s sharing a real redis-server,
# one with --rate-per-caller. Compares two binaries:
#   go build -o /tmp/tw29-before ./cmd/toolwire   (at the commit to compare)
#   go build -o /tmp/tw29-after ./cmd/toolwire
#   bench/frozenstore/run.sh
# Each line: the batch kind, its wall time (grpcurl's start included, about
# 0.08 s), and its outcome.
set -u
RP=6399
redis-server --port $RP --save "" --appendonly no > /tmp/frozen-redis.log 2>&1 &
RPID=$!
sleep 0.5
t() { # label, port, json
  local s=$(date +%s.%N)
  out=$(grpcurl -plaintext -max-time 30 -d "$3" 127.0.0.1:$2 toolwire.v1.ToolService/ExecuteBatch 2>&1)
  local e=$(date +%s.%N)
  code=$(echo "$out" | grep -o "\"errorKind\": \"[A-Z_]*\"\|Code: [A-Za-z]*\|Error invoking\|batchFinished" | head -1)
  printf "%-14s %6.2f s  %s\n" "$1" "$(echo "$e - $s" | bc)" "${code:-ok}"
}
for b in before after; do
  echo "== $b"
  /tmp/tw29-$b serve --diag --listen 127.0.0.1:7101 --store redis://127.0.0.1:$RP/0 > /tmp/frozen-$b-a.log 2>&1 & A=$!
  /tmp/tw29-$b serve --diag --listen 127.0.0.1:7102 --store redis://127.0.0.1:$RP/0 --rate-per-caller 1000 > /tmp/frozen-$b-b.log 2>&1 & B=$!
  sleep 2
  P='{"calls":[{"call_id":"1","name":"echo","arguments":"{\"text\":\"hi\"}"}]}'
  R=$P
  for i in 1 2; do t warm 7101 "$P" >/dev/null; t warm 7102 "$P" > /dev/null; done
  kill -STOP $RPID
  for i in 1 2 3; do
    t plain 7101 "$P"
    t rate-limited 7102 "$R"
    t keyed 7101 '{"calls":[{"call_id":"1","name":"sleep","arguments":"{\"ms\":1}","idempotency_key":"k'$b$i'"}]}'
    t detached 7101 '{"calls":[{"call_id":"1","name":"echo","arguments":"{\"text\":\"hi\"}"}],"options":{"detach":true}}'
  done
  kill -CONT $RPID
  kill $A $B; wait $A $B 2>/dev/null
done
kill $RPID
