#!/usr/bin/env bash
# Starts or stops a local ClickHouse server for the audit sink, on loopback,
# with its config, data and logs under .data/clickhouse.
#
#   scripts/clickhouse.sh start    # native protocol on 127.0.0.1:${CLICKHOUSE_PORT:-9000}
#   scripts/clickhouse.sh stop
#   scripts/clickhouse.sh status
#
# Installs the server first when missing (scripts/deps.d/clickhouse.sh).
# Then: MCPDRIFT_CLICKHOUSE_ADDR=127.0.0.1:9000 go run ./services/audit
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$PWD/.data/clickhouse"
port=${CLICKHOUSE_PORT:-9000}
http=${CLICKHOUSE_HTTP_PORT:-8123}
inter=${CLICKHOUSE_INTERSERVER_PORT:-9009}
pidfile="$dir/clickhouse.pid"

# The server runs in a process group of its own, whose id is in the pid file;
# Debian's clickhouse-server may hand over to a child, so the group is what is
# checked and stopped.
running() { [ -f "$pidfile" ] && kill -0 -- "-$(cat "$pidfile")" 2>/dev/null; }

server_bin() {
  for b in clickhouse-server /usr/sbin/clickhouse-server /usr/bin/clickhouse-server; do
    command -v "$b" >/dev/null 2>&1 && { echo "$b"; return; }
  done
  command -v clickhouse >/dev/null 2>&1 && { echo "clickhouse server"; return; }
  return 1
}

case "${1:-}" in
start)
  if running; then echo "clickhouse: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; exit 0; fi
  bash scripts/deps.d/clickhouse.sh
  mkdir -p "$dir/data" "$dir/tmp" "$dir/user_files" "$dir/format_schemas"
  cat > "$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$dir/server.log</log><errorlog>$dir/server.err.log</errorlog></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>$port</tcp_port>
  <http_port>$http</http_port>
  <interserver_http_port>$inter</interserver_http_port>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <user_files_path>$dir/user_files/</user_files_path>
  <format_schema_path>$dir/format_schemas/</format_schema_path>
  <mark_cache_size>536870912</mark_cache_size>
  <uncompressed_cache_size>536870912</uncompressed_cache_size>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
</yandex>
XML
  cat > "$dir/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
XML
  bin=$(server_bin) || { echo "clickhouse: no server binary; run scripts/deps.d/clickhouse.sh" >&2; exit 1; }
  # In a process group of its own (set -m): a Ctrl-C in the terminal that started it (make run)
  # must not stop it before the services that write to it have finished.
  # shellcheck disable=SC2086
  (set -m; cd "$dir" && nohup $bin --config-file="$dir/config.xml" >"$dir/stdout.log" 2>&1 & echo $! >"$pidfile")
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "clickhouse: running (pid $(cat "$pidfile")) on 127.0.0.1:$port, data in $dir"
      exit 0
    fi
    running || { echo "clickhouse: the server exited; see $dir/server.err.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "clickhouse: not listening on 127.0.0.1:$port after 30s; see $dir/server.err.log" >&2
  exit 1
  ;;
stop)
  if running; then
    pid=$(cat "$pidfile")
    kill -- "-$pid"
    for _ in $(seq 1 100); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 -- "-$pid" 2>/dev/null; then kill -9 -- "-$pid"; fi
    echo "clickhouse: stopped"
  else
    echo "clickhouse: not running"
  fi
  rm -f "$pidfile"
  ;;
status)
  if running; then echo "clickhouse: running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; else echo "clickhouse: not running"; exit 1; fi
  ;;
*)
  echo "usage: scripts/clickhouse.sh start|stop|status" >&2
  exit 2
  ;;
esac
