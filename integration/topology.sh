#!/usr/bin/env bash
# Starts the docker-compose topology from local processes, without Docker: a 3-master Redis Cluster
# (plus one replica each with --replicas) from redis-server on 127.0.0.1, and three kgate gateways.
#
#   integration/topology.sh up [--replicas]   # prints the bootstrap and admin addresses
#   integration/topology.sh down
#
# State lives in ${KGATE_TOPOLOGY_DIR:-/tmp/kgate-topology}. Ports: Redis 7101-7106, Kafka 19092-19094,
# admin 18080-18082.
set -euo pipefail
DIR=${KGATE_TOPOLOGY_DIR:-/tmp/kgate-topology}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

down() {
  if [[ -d $DIR ]]; then
    for pid in "$DIR"/*.pid; do [[ -e $pid ]] && kill -9 "$(cat "$pid")" 2>/dev/null || true; done
    rm -rf "$DIR"
  fi
}

up() {
  local replicas=0
  [[ ${1:-} == --replicas ]] && replicas=1
  down
  mkdir -p "$DIR"
  local n=$((3 + 3 * replicas)) addrs=()
  for i in $(seq 1 $n); do
    local port=$((7100 + i))
    mkdir -p "$DIR/redis-$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 --save "" --appendonly no --dir "$DIR/redis-$port" \
      --daemonize yes --pidfile "$DIR/redis-$port.pid" --logfile "$DIR/redis-$port.log"
    addrs+=("127.0.0.1:$port")
  done
  for a in "${addrs[@]}"; do
    until redis-cli -p "${a##*:}" ping >/dev/null 2>&1; do sleep 0.1; done
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$DIR/cluster-create.log"
  until redis-cli -p 7101 cluster info | grep -q cluster_state:ok; do sleep 0.2; done

  (cd "$ROOT" && go build -o "$DIR/kgate" ./cmd/kgate)
  local seeds="127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
  for id in 0 1 2; do
    KGATE_NODE_ID=$id KGATE_KAFKA_LISTEN=127.0.0.1:$((19092 + id)) KGATE_ADMIN_LISTEN=127.0.0.1:$((18080 + id)) \
      KGATE_REDIS_ADDRS=$seeds KGATE_REDIS_CLUSTER=true \
      nohup "$DIR/kgate" >"$DIR/kgate-$id.log" 2>&1 &
    echo $! >"$DIR/kgate-$id.pid"
  done
  for id in 0 1 2; do
    until curl -fs "http://127.0.0.1:$((18080 + id))/readyz" >/dev/null 2>&1; do sleep 0.2; done
  done
  echo "bootstrap: 127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
  echo "admin:     http://127.0.0.1:18080 http://127.0.0.1:18081 http://127.0.0.1:18082"
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  *) echo "usage: $0 up [--replicas] | down" >&2; exit 2 ;;
esac
