#!/bin/bash
# The driver's resident set and threads while many concurrent jobs of one-record tasks
# run, and after they have all ended (issue 32: memory given back once the work is gone).
#
# usage: bench/driver_rss.sh DRIVER_BIN CLIENTS TASKS RUNS
#   CLIENTS concurrent `manytasks` clients (one session each), each running RUNS jobs of
#   TASKS one-record tasks, on one executor of 2 cores. Needs the debug builds of
#   ember-executor and the manytasks example (cargo build -p ember-executor --example
#   manytasks). Prints the driver's RSS and thread count idle, at peak, and 2, 10 and
#   30 s after the last client ended.
set -u
BIN=$1; CLIENTS=$2; TASKS=$3; RUNS=$4
T=$(cd "$(dirname "$0")/.." && pwd)/target/debug
D=$(mktemp -d "${TMPDIR:-/tmp}/ember-driver-rss.XXXXXX")
PIDS=(); DPID=; EPID=
cleanup() {
  for p in "${PIDS[@]}" $EPID $DPID; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
EMBER_LOG=warn "$BIN" --port 0 --binary-dir "$D/bin" > "$D/driver.out" 2> "$D/driver.err" &
DPID=$!
for _ in $(seq 50); do grep -q listening "$D/driver.out" 2>/dev/null && break; sleep 0.1; done
PORT=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$D/driver.out" | head -1)
EMBER_LOG=warn "$T/ember-executor" --driver "http://127.0.0.1:$PORT" --cores 2 \
  --work-dir "$D/exec" > "$D/exec.out" 2> "$D/exec.err" &
EPID=$!
sleep 1
rss() { awk '/VmRSS/{print $2}' "/proc/$DPID/status"; }
thr() { awk '/Threads/{print $2}' "/proc/$DPID/status"; }
echo "idle before: rss=$(rss) kB threads=$(thr)"
START=$(date +%s.%N)
for c in $(seq "$CLIENTS"); do
  "$T/examples/manytasks" --master "http://127.0.0.1:$PORT" --tasks "$TASKS" --runs "$RUNS" \
    > "$D/client$c.out" 2>&1 &
  PIDS+=($!)
done
PEAK=0; PEAKT=0
while :; do
  alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  r=$(rss); t=$(thr)
  [ "$r" -gt "$PEAK" ] && PEAK=$r
  [ "$t" -gt "$PEAKT" ] && PEAKT=$t
  [ $alive = 0 ] && break
  sleep 0.5
done
END=$(date +%s.%N)
echo "during: peak rss=$PEAK kB peak threads=$PEAKT; clients took $(echo "$END - $START" | bc) s"
failed=$(grep -L "finished in" "$D"/client*.out | wc -l)
echo "clients without a finished job: $failed"
prev=0
for s in 2 10 30; do
  sleep $((s - prev)); prev=$s
  echo "after +${s}s: rss=$(rss) kB threads=$(thr)"
done
