#!/usr/bin/env bash
# Runs the benchmarks and reports each as a ratio against the baseline
# measured in the same run (absolute figures on a shared machine are noise).
set -euo pipefail
cd "$(dirname "$0")/../services"
count=${COUNT:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test ./internal/surface/ -run '^$' -bench 'Fingerprint' -benchmem -count "$count" | tee "$out"
echo
echo "== ratios (median of $count runs; higher is better for us)"
awk '
/^Benchmark/ {
  name=$1; sub(/-[0-9]+$/, "", name)
  for (i=2; i<=NF; i++) {
    if ($(i+1)=="ns/op") v[name]=v[name] " " $i
    if ($(i+1)=="surface-ns/op") sv[name]=sv[name] " " $i
    if ($(i+1)=="x-jsontext") xt[name]=xt[name] " " $i
    if ($(i+1)=="x-jcs") xj[name]=xj[name] " " $i
  }
}
function lo(s,   a, n, i, m) { n=split(s, a, " "); m=a[1]; for (i=2;i<=n;i++) if (a[i]+0<m+0) m=a[i]; return m }
function hi(s,   a, n, i, m) { n=split(s, a, " "); m=a[1]; for (i=2;i<=n;i++) if (a[i]+0>m+0) m=a[i]; return m }
function median(s,   a, n, i, j, t) {
  n=split(s, a, " ")
  for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]+0<a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
  return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2
}
END {
  s=median(v["BenchmarkFingerprint/impl=surface"])
  t=median(v["BenchmarkFingerprint/impl=jsontext"])
  j=median(v["BenchmarkFingerprint/impl=jcs"])
  printf "fingerprint 66 KB manifest: %.0f ns/op = %.0f MiB/s\n", s, 66299/s*1e9/1048576
  printf "  speed-up vs jsontext Canonicalize+SHA-256: %.2fx (goal 3.5x)\n", t/s
  printf "  speed-up vs gowebpki/jcs+SHA-256:          %.2fx (goal 15x)\n", j/s
  d4=median(v["BenchmarkFingerprintDepth/depth=4"]); d60=median(v["BenchmarkFingerprintDepth/depth=60"])
  for (k=1; k<=2; k++) {
    size=(k==1) ? "66KB" : "7.6MiB"
    p="BenchmarkFingerprintReal/size=" size
    printf "fingerprint of real-world tools as servers send them, %s: %.0f ns/op\n", size, median(sv[p])
    printf "  speed-up vs jsontext Canonicalize+SHA-256: %.2fx (goal 3x; min %.2f, max %.2f)\n", median(xt[p]), lo(xt[p]), hi(xt[p])
    printf "  speed-up vs gowebpki/jcs+SHA-256:          %.2fx (goal 12x; min %.2f, max %.2f)\n", median(xj[p]), lo(xj[p]), hi(xj[p])
  }
}' "$out"
grep -E '^BenchmarkFingerprintDepth' "$out" | awk '{print "  allocs/op at", $1, $(NF-1)}' | sort -u

echo
echo "== driftctl fingerprint as a whole process vs jsontext and jcs processes, same files, same run (goals 3x, 12x)"
go test ./driftctl/ -run '^$' -bench BenchmarkFingerprintProcess -count "$count" | grep '^Benchmark' | awk '
{ name=$1; sub(/-[0-9]+$/, "", name)
  for (i=2; i<=NF; i++) { if ($(i+1)=="driftctl-ns/op") d[name]=d[name] " " $i; if ($(i+1)=="x-jsontext") xt[name]=xt[name] " " $i; if ($(i+1)=="x-jcs") xj[name]=xj[name] " " $i } }
function median(s,   a, n, i, j, t) {
  n=split(s, a, " ")
  for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]+0<a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
  return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2
}
function lo(s,   a, n, i, m) { n=split(s, a, " "); m=a[1]; for (i=2;i<=n;i++) if (a[i]+0<m+0) m=a[i]; return m }
function hi(s,   a, n, i, m) { n=split(s, a, " "); m=a[1]; for (i=2;i<=n;i++) if (a[i]+0>m+0) m=a[i]; return m }
END {
  for (k=1; k<=2; k++) {
    p="BenchmarkFingerprintProcess/size=" ((k==1) ? "66KB" : "7.6MiB")
    printf "  %s: driftctl %.1f ms; speed-up vs jsontext %.2fx (%.2f-%.2f), vs jcs %.2fx (%.2f-%.2f)\n", p, median(d[p])/1e6,
      median(xt[p]), lo(xt[p]), hi(xt[p]), median(xj[p]), lo(xj[p]), hi(xj[p])
  }
}'

echo
echo "== fingerprint service throughput, as a ratio of a raw JetStream consume of the same messages (goal >= 0.5)"
go test ./fingerprint/internal/fpsvc/ -run '^$' -bench BenchmarkThroughput -benchtime 5x -count 2 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) if ($(i+1)=="ratio") r=$i; print "  " $1 ": ratio " r }'

echo
echo "== hand-written protobuf framing of the fingerprint handler vs proto.Unmarshal/Marshal, same run (ADR 0008; above 1: the hand-written path is faster)"
go test ./fingerprint/internal/fpsvc/ -run '^$' -bench BenchmarkWire -count 3 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) if ($(i+1)=="std/hand") r=$i; print "  " $1 ": proto/hand " r }'
echo "== the publisher's call batches vs one proto.Marshal of the batch, same run (ADR 0008; below 1: one Marshal would be faster)"
go test ./proxy/internal/fleet/ -run '^$' -bench BenchmarkCallBatchEncode -count 3 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="whole/pub") r=$i; if ($(i+1)=="pub-ns/call") p=$i }; print "  " $1 ": " p " ns/call, whole/pub " r }'

echo
echo "== observation published to verdict received, through the real fingerprint and drift commands (goal p99 < 10 ms at 1000/s)"
go test ./e2e/ -run '^$' -bench BenchmarkPipelineLatency -benchtime 1x -count 3 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="p50-ms") p50=$i; if ($(i+1)=="p99-ms") p99=$i; if ($(i+1)=="raw-p99-ms") raw=$i }
         print "  p50 " p50 " ms, p99 " p99 " ms (raw JetStream publish to consume p99 " raw " ms, same run)" }'

echo
echo "== tools/call through the proxy vs direct, same run (goals: +50 us p50, +200 us p99, >= 0.7x throughput at concurrency 32)"
echo "   each line also gives a plain relay process in the same place (the least any process in the path adds)"
go test ./e2e/ -run '^$' -bench BenchmarkStdioProxyOverhead -benchtime 1x -count 3 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="added-p50-us") a50=$i; if ($(i+1)=="added-p99-us") a99=$i; if ($(i+1)=="throughput-ratio-c32") r=$i;
         if ($(i+1)=="relay-added-p50-us") ra50=$i; if ($(i+1)=="relay-throughput-ratio-c32") rr=$i;
         if ($(i+1)=="added-p50-x-relay") x50=$i; if ($(i+1)=="added-p99-x-relay") x99=$i; if ($(i+1)=="throughput-x-relay") xt=$i;
         if ($(i+1)=="proxy-cpu-us/call") pc=$i; if ($(i+1)=="relay-cpu-us/call") rc=$i }
         print "  " $1 " (stdio): added p50 " a50 " us, p99 " a99 " us, throughput ratio " r "; relay: added p50 " ra50 " us, ratio " rr
         print "    against the relay: added p50 " x50 "x, added p99 " x99 "x, throughput " xt "x; CPU per call " pc " us, relay " rc " us" }'
echo "   the HTTP lines also give the floor: a minimal net/http proxy process (Transport.RoundTrip, the answer copied through a pooled"
echo "   32 KiB buffer, event streams flushed) in the same place; goal: the proxy's added p50 and CPU per call at most 1.1x the floor's"
go test ./e2e/ -run '^$' -bench BenchmarkHTTPProxyCommandOverhead -benchtime 1x -count 3 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="added-p50-us") a50=$i; if ($(i+1)=="added-p99-us") a99=$i; if ($(i+1)=="throughput-ratio-c32") r=$i;
         if ($(i+1)=="relay-added-p50-us") ra50=$i; if ($(i+1)=="relay-throughput-ratio-c32") rr=$i;
         if ($(i+1)=="added-p50-x-relay") x50=$i; if ($(i+1)=="added-p99-x-relay") x99=$i; if ($(i+1)=="throughput-x-relay") xt=$i;
         if ($(i+1)=="proxy-cpu-us/call") pc=$i; if ($(i+1)=="relay-cpu-us/call") rc=$i;
         if ($(i+1)=="floor-added-p50-us") fa50=$i; if ($(i+1)=="floor-cpu-us/call") fc=$i; if ($(i+1)=="floor-throughput-ratio-c32") fr=$i;
         if ($(i+1)=="proxy/floor-p50-x") f50=$i; if ($(i+1)=="proxy/floor-p99-x") f99=$i; if ($(i+1)=="proxy/floor-cpu-x") fcx=$i; if ($(i+1)=="proxy/floor-throughput-x") ft=$i }
         print "  " $1 " (Streamable HTTP, proxy command): added p50 " a50 " us, p99 " a99 " us, throughput ratio " r "; relay: added p50 " ra50 " us, ratio " rr
         print "    against the relay (goals 1.5x, 2x, 0.9x): added p50 " x50 "x, added p99 " x99 "x, throughput " xt "x; CPU per call " pc " us, relay " rc " us"
         print "    floor: added p50 " fa50 " us, CPU per call " fc " us, throughput ratio " fr
         print "    against the floor (goals 1.1x, 1.1x): added p50 " f50 "x, CPU per call " fcx "x; added p99 " f99 "x, throughput " ft "x" }'
go test ./proxy/internal/streamhttp/ -run '^$' -bench BenchmarkHTTPProxyOverhead -benchtime 1x -count 3 | grep '^Benchmark' | awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="added-p50-us") a50=$i; if ($(i+1)=="added-p99-us") a99=$i; if ($(i+1)=="throughput-ratio") r=$i }; print "  " $1 " (Streamable HTTP, in one process with client and server): added p50 " a50 " us, added p99 " a99 " us, throughput ratio at c32 " r }'

echo
echo "== audit sink: events/s from JetStream into ClickHouse, as a ratio of a raw clickhouse-go batch insert of the same rows (goals >= 0.6, >= 100000/s)"
echo "   consume-ratio: an ack-only consumer of the same messages, as a ratio of the same raw insert (what the bus alone allows)"
go test ./audit/internal/sink/ -run '^$' -bench 'BenchmarkSink|BenchmarkCallBatchSink' -benchtime 1x -count 3 | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="events/s") e=$i; if ($(i+1)=="raw-events/s") r=$i; if ($(i+1)=="ratio") q=$i; if ($(i+1)=="consume-ratio") c=$i }
         printf "  %s: %.0f events/s, raw %.0f events/s, ratio %s, consume-ratio %s\n", $1, e, r, q, c }'

echo
echo "== drift service throughput, as a ratio of a raw JetStream consume of the same messages (goal >= 0.5)"
go test ./drift/internal/driftsvc/ -run '^$' -bench BenchmarkThroughput -benchtime 1x -count "$count" | grep '^Benchmark' |
  awk '{ for (i=3;i<=NF;i++) { if ($(i+1)=="ratio") r=$i; if ($(i+1)=="svc-msgs/s") m=$i }; printf "  %s: %.0f msgs/s, ratio %s\n", $1, m, r }'

echo
echo "== the review console's fleet page at 10,000 servers vs 100, same run (goal < 1 s a page; the page draws 200 servers)"
go test ./drift/internal/console/ -run '^$' -bench BenchmarkFleetPage -count 3 | grep '^Benchmark' |
  awk '{ name=$1; sub(/-[0-9]+$/, "", name); v[name]=v[name] " " $3 }
  function median(s,   a, n, i, j, t) {
    n=split(s, a, " ")
    for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]+0<a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
    return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2
  }
  END { s=median(v["BenchmarkFleetPage/servers=100"]); l=median(v["BenchmarkFleetPage/servers=10000"])
        printf "  10,000 servers: %.1f ms a page; %.1fx the page at 100 servers\n", l/1e6, l/s }'
