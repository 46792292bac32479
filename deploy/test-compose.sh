#!/usr/bin/env bash
# End-to-end test of the compose cluster (deploy/docker-compose.yml) on this machine's
# Docker engine:
#   1. builds the images (deploy/build-images.sh) and brings up a driver and 3 executors,
#      waiting until all are healthy;
#   2. runs wordcount and sort on generated data through the cluster (from a container
#      and from the host) and checks the output against local mode; a job reading the
#      executor secret through the cluster fails with a permission error (the executors
#      run job code as worker uids);
#   3. runs a gated faultjob and `docker kill`s an executor while its reducers wait: the
#      job finishes with local mode's exact output;
#   4. the same with `EMBER_SHUFFLE_DURABILITY=replicated:1`: no map task runs again (the
#      dead executor's outputs are read from their replicas); then `docker stop`s an
#      executor (SIGTERM) while its reducers wait: it decommissions (its running tasks
#      end once the gate opens, its outputs move to the others), exits 0, and no map task
#      runs again;
#   5. `docker network disconnect`s an executor during a gated job: the job finishes
#      right, and the executor rejoins once reconnected;
#   6. `docker kill`s the driver while a gated job's reducers wait and `docker start`s
#      it: the client reopens its session, the executors report the map outputs they
#      kept, the job finishes with local mode's exact output and the finished map stage
#      is not run again; then restarts the driver container between two jobs: executors
#      re-register, the next job runs right.
# Always tears everything down (containers, networks, volumes, the images it built, its
# scratch dir under cargo's target directory), even on failure or Ctrl-C. Each step is bounded and timed;
# the whole run prints its duration. When no Docker engine answers it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
t_all=$(date +%s%N)

if ! docker info >/dev/null 2>&1; then
  echo "test-compose: no Docker engine answers here; the compose test did not run"
  exit 0
fi
if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose_cmd=(docker-compose)
else
  echo "test-compose: neither 'docker compose' nor 'docker-compose' is installed; the compose test did not run"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "test-compose: needs root (to give the secret files and the data dir to uid 10001, as the"
  echo "  executors, which run job code as other uids, require); the compose test did not run"
  exit 0
fi

project="embere2e$$"
# Where cargo puts its output: CARGO_TARGET_DIR, a config's build.target-dir, else target/
# (build-images.sh asks cargo the same way).
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
[ -n "$target_dir" ] || { echo "test-compose: cargo metadata named no target directory" >&2; exit 2; }
export EMBER_IMAGE_TAG="e2e-$$"
scratch="$target_dir/compose-e2e-$$"
export EMBER_DATA_DIR="$scratch/data"
export EMBER_SECRET_FILE="$scratch/secret"
export EMBER_EXECUTOR_SECRET_FILE="$scratch/executor-secret"
# EMBER_BUILD_PROFILE=dev (as CI sets it) tests images of the debug binaries, and runs
# stripped copies of the debug job binaries (made after the build step, in $scratch/jobs):
# with their debug info they are ~340 MB each, which the driver and every executor would
# store once per job binary.
case "${EMBER_BUILD_PROFILE:-release}" in
  dev) export EMBER_JOBS_DIR="$scratch/jobs" ;;
  *) export EMBER_JOBS_DIR="$target_dir/release/examples" ;;
esac
export EMBER_HEARTBEAT_TIMEOUT_MS=4000
export EMBER_DRIVER_PORT=0 EMBER_UI_PORT=0   # ephemeral host ports, read back below
# The operator secret: the web UI's credential (the driver's only; clients never hold it).
export EMBER_OPERATOR_SECRET_FILE="$scratch/operator-secret"
compose() { "${compose_cmd[@]}" -p "$project" -f deploy/docker-compose.yml "$@"; }

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ]; then
    echo "test-compose: FAILED (exit $rc); last driver and executor logs:"
    compose logs --no-color --tail 30 2>/dev/null | tail -60
  fi
  compose --profile job down -v --remove-orphans --timeout 5 >/dev/null 2>&1
  docker rmi -f "ember-driver:$EMBER_IMAGE_TAG" "ember-executor:$EMBER_IMAGE_TAG" >/dev/null 2>&1
  rm -rf "$scratch"
  echo "test-compose: torn down; whole run $(elapsed "$t_all")"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Seconds since a `date +%s%N` stamp, with one decimal.
elapsed() { local ms=$((($(date +%s%N) - $1) / 1000000)); printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)); }
step_start=0
step() { step_start=$(date +%s%N); echo "== $*"; }
done_step() { echo "   ok ($(elapsed "$step_start"))"; }
fail() { echo "test-compose: $*" >&2; exit 1; }

# Waits (at most $2 seconds) until "$1" succeeds.
wait_for() {
  local what=$1 limit=$2 cmd=$3 t0=$SECONDS
  until eval "$cmd" >/dev/null 2>&1; do
    [ $((SECONDS - t0)) -ge "$limit" ] && fail "timed out after ${limit}s waiting for $what"
    sleep 0.5
  done
}
healthy_count() {
  local n=0 id
  for id in $(compose ps -q "$1"); do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$id")" = healthy ] && n=$((n + 1))
  done
  echo "$n"
}
# The executors the driver's web UI lists as active (its REST API, with the operator secret).
executors_api() { curl -sf -H "Authorization: Bearer $(cat "$EMBER_OPERATOR_SECRET_FILE")" "http://127.0.0.1:$ui_port/api/v1/executors"; }
registered() { executors_api | python3 -c 'import json, sys; print(sum(e["lost_ms"] is None for e in json.load(sys.stdin)))' 2>/dev/null; }

# A job run in a container of the compose project (as uid 10001, like the executors).
# Started detached and waited for with `docker wait` (bounded), not through compose's
# attached `run`; its stdout and stderr come from `docker logs`; exit code as the job's.
# JOB_ENV: more `-e NAME=VALUE` options for the job's container.
JOB_ENV=()
job() {
  local id rc
  id=$(compose run -d "${JOB_ENV[@]}" job "/jobs/$1" --master http://driver:7077 "${@:2}")
  rc=$(timeout -k 5 180 docker wait "$id" || echo 124)
  docker logs "$id" 2> >(cat >&2)
  docker rm -f "$id" >/dev/null 2>&1
  return "$rc"
}
# The same job in local mode on the host: the reference.
local_job() { EMBER_LOG=warn EMBER_PROGRESS=0 timeout 180 "$EMBER_JOBS_DIR/$1" --master 'local[2]' "${@:2}"; }
parts() { cat "$1"/part-*; }
# Map stages the driver submitted again, for part of their partitions, since time $1.
resubmissions_since() {
  driver_log_since "$1" | grep -cE 'submitting stage .*: [0-9]+ of [0-9]+ partitions' || true
}
# The driver's log since time $1 (docker-compose 1.x's `logs` has no --since).
driver_log_since() { docker logs --since "$1" "$(compose ps -q driver)" 2>&1; }
# What the driver logged about failures so far: "N executors lost, M fetch failures".
failures() {
  local log; log=$(compose logs --no-color driver 2>/dev/null)
  echo "$(grep -c 'executor lost:' <<<"$log") executor-lost and $(grep -c 'fetch failure:' <<<"$log") fetch-failure log lines"
}

step "build the images"
mkdir -p "$EMBER_DATA_DIR"
deploy/build-images.sh "$EMBER_IMAGE_TAG" 2>&1 | grep -E '^built ' | sed 's/^/   /'
if [ "${EMBER_BUILD_PROFILE:-release}" = dev ]; then
  mkdir -p "$EMBER_JOBS_DIR"
  for job in $(find "$target_dir/debug/examples" -maxdepth 1 -type f -executable ! -name '*-*'); do
    strip -o "$EMBER_JOBS_DIR/$(basename "$job")" "$job"
  done
  echo "   stripped debug job binaries in $EMBER_JOBS_DIR: $(du -sh "$EMBER_JOBS_DIR" | cut -f1)"
fi
done_step

step "generate input data"
python3 - "$EMBER_DATA_DIR" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(12)
words = ["w%d" % i for i in range(5000)]
os.makedirs(f"{root}/text")
for f in range(6):
    with open(f"{root}/text/part-{f}.txt", "w") as out:
        for _ in range(20000):
            out.write(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) + "\n")
keys = list(range(200000))
rng.shuffle(keys)
os.makedirs(f"{root}/kv")
for f in range(4):
    with open(f"{root}/kv/part-{f}.txt", "w") as out:
        for k in keys[f::4]:
            out.write(f"{k},{rng.randint(0, 999)}.{rng.randint(0, 999):03d}\n")
PY
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$EMBER_SECRET_FILE"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$EMBER_EXECUTOR_SECRET_FILE"
# The driver and clients run as uid 10001: it (alone) must read the secrets. Tasks run
# as worker uids of group 10001: the shared data dir is the group's and setgid.
chown 10001 "$EMBER_SECRET_FILE" "$EMBER_EXECUTOR_SECRET_FILE"
chmod 0400 "$EMBER_SECRET_FILE" "$EMBER_EXECUTOR_SECRET_FILE"
chown 10001:10001 "$EMBER_DATA_DIR"
chmod 2775 "$EMBER_DATA_DIR"
chmod 0755 "$scratch"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$EMBER_OPERATOR_SECRET_FILE"
chown 10001 "$EMBER_OPERATOR_SECRET_FILE"
chmod 0400 "$EMBER_OPERATOR_SECRET_FILE"
du -sh "$EMBER_DATA_DIR" | sed 's/^/   /'
done_step

step "bring up a driver and 3 executors, wait until healthy"
compose up -d --scale executor=3 >/dev/null 2>&1
driver_port=$(compose port driver 7077 | sed 's/.*://')
ui_port=$(compose port driver 4040 | sed 's/.*://')
wait_for "3 healthy executors" 90 '[ "$(healthy_count executor)" = 3 ]'
[ "$(healthy_count driver)" = 1 ] || fail "the driver is not healthy"
[ "$(registered)" = 3 ] || fail "the web UI lists $(registered) active executors, not 3"
echo "   driver on 127.0.0.1:$driver_port (ui $ui_port), 3 executors healthy and registered"
# Every client holds the cluster secret: it must not open the web UI.
ui_code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$EMBER_SECRET_FILE")" "http://127.0.0.1:$ui_port/api/v1/jobs")
[ "$ui_code" = 401 ] || fail "the web UI answered the cluster secret with $ui_code, not 401"
done_step

step "wordcount and sort through the cluster vs local mode"
D=$EMBER_DATA_DIR
job wordcount --partitions 6 "$D/text" "$D/wc-cluster" >/dev/null 2>&1 || fail "wordcount failed on the cluster"
local_job wordcount --partitions 6 "$D/text" "$scratch/wc-local" 2>/dev/null
[ "$(parts "$D/wc-cluster" | sort | md5sum)" = "$(parts "$scratch/wc-local" | sort | md5sum)" ] \
  || fail "wordcount on the cluster differs from local mode"
echo "   wordcount: $(parts "$D/wc-cluster" | wc -l) words, identical to local mode"
job sort --partitions 5 "$D/kv" "$D/sort-cluster" >/dev/null 2>&1 || fail "sort failed on the cluster"
local_job sort --partitions 5 "$D/kv" "$scratch/sort-local" 2>/dev/null
cmp -s <(parts "$D/sort-cluster") <(parts "$scratch/sort-local") \
  || fail "sort on the cluster differs from local mode (keys are unique: order must match)"
echo "   sort: $(parts "$D/sort-cluster" | wc -l) lines in the same global order as local mode"
# A client on the host (as uid 10001, the owner of the shared data dir) works too.
EMBER_LOG=warn EMBER_PROGRESS=0 timeout 180 setpriv --reuid=10001 --regid=10001 --clear-groups \
  "$EMBER_JOBS_DIR/wordcount" --master "http://127.0.0.1:$driver_port" --partitions 6 "$D/text" "$D/wc-host" \
  2>/dev/null || fail "wordcount from a host client failed"
[ "$(parts "$D/wc-host" | sort | md5sum)" = "$(parts "$scratch/wc-local" | sort | md5sum)" ] \
  || fail "wordcount from the host differs from local mode"
echo "   wordcount from a host client: identical"
done_step

step "job code cannot read the executor secret (tasks run as their session's worker uid)"
# The client plans splits from the input's size, so it gets a stand-in of the same size at
# the path; the executors' tasks then open the real secret there.
printf '%064d' 0 > "$scratch/decoy"
chmod 0444 "$scratch/decoy"
leak=$(compose run -d -v "$scratch/decoy:/run/secrets/ember_executor_secret:ro" job \
  /jobs/wordcount --master http://driver:7077 /run/secrets/ember_executor_secret "$D/leak")
rc=$(timeout -k 5 180 docker wait "$leak" || echo 124)
leak_err=$(docker logs "$leak" 2>&1)
docker rm -f "$leak" >/dev/null 2>&1
[ "$rc" != 0 ] || fail "a job read the executor secret through the cluster"
grep -q 'Permission denied' <<<"$leak_err" \
  || { echo "$leak_err" | tail -5; fail "the job reading the executor secret failed, but not with a permission error"; }
[ ! -e "$D/leak/_SUCCESS" ] || fail "the job reading the executor secret wrote an output"
echo "   refused: $(grep -o -m1 'I/O error on /run/secrets/ember_executor_secret: Permission denied' <<<"$leak_err")"
done_step

local_job faultjob --partitions 6 "$D/kv" "$scratch/fault-local" > "$scratch/fault-local.out" 2>/dev/null
# A gated faultjob in the background: returns once its reducers wait at the gate.
start_gated() {
  local name=$1
  mkdir -p "$D/gate-$name"
  # the executors' tasks (worker uids of group 10001) write their waiting-* files here
  chown 10001:10001 "$D/gate-$name"
  chmod 2775 "$D/gate-$name"
  (job faultjob --partitions 6 --gate "$D/gate-$name" "${@:2}" "$D/kv" "$D/fault-$name" \
     > "$scratch/fault-$name.out" 2> "$scratch/fault-$name.err"; echo $? > "$scratch/fault-$name.rc") &
  wait_for "faultjob's reducers at the gate" 120 "ls '$D/gate-$name' | grep waiting >/dev/null"
}
finish_gated() {
  local name=$1
  touch "$D/gate-$name/open"
  wait_for "faultjob to end" 180 "[ -f '$scratch/fault-$name.rc' ]"
  [ "$(cat "$scratch/fault-$name.rc")" = 0 ] || { tail -5 "$scratch/fault-$name.err"; fail "faultjob ($name) failed"; }
  [ "$(parts "$D/fault-$name" | sort | md5sum)" = "$(parts "$scratch/fault-local" | sort | md5sum)" ] \
    || fail "faultjob ($name) output differs from local mode"
  [ "$(grep 'records parsed' "$scratch/fault-$name.out")" = "$(grep 'records parsed' "$scratch/fault-local.out")" ] \
    || fail "faultjob ($name) counted $(grep 'records parsed' "$scratch/fault-$name.out"), local mode $(grep 'records parsed' "$scratch/fault-local.out")"
}

step "docker kill an executor while a job's reducers wait for its map output"
start_gated kill
victim=$(compose ps -q executor | sed -n 1p)
docker kill "$victim" >/dev/null
finish_gated kill
echo "   killed ${victim:0:12}; the job finished with local mode's exact output ($(grep 'records parsed' "$scratch/fault-kill.out")); driver so far: $(failures)"
docker start "$victim" >/dev/null
wait_for "the killed executor back and registered" 90 '[ "$(healthy_count executor)" = 3 ] && [ "$(registered)" = 3 ]'
echo "   restarted it: 3 executors registered"
done_step

step "docker kill an executor under replicated:1 shuffle durability: no map task runs again"
since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
JOB_ENV=(-e EMBER_SHUFFLE_DURABILITY=replicated:1)
start_gated replicated
JOB_ENV=()
victim=$(compose ps -q executor | sed -n 1p)
docker kill "$victim" >/dev/null
finish_gated replicated
log=$(driver_log_since "$since")
grep -q 'map outputs of the lost executor are served by their replicas' <<<"$log" \
  || fail "the killed executor's outputs were not read from replicas"
[ "$(resubmissions_since "$since")" = 0 ] || fail "a stage ran again under replicated:1"
echo "   killed ${victim:0:12}; its outputs were read from their replicas, no stage ran again, exact output"
docker start "$victim" >/dev/null
wait_for "the killed executor back and registered" 90 '[ "$(healthy_count executor)" = 3 ] && [ "$(registered)" = 3 ]'
done_step

step "docker stop an executor (SIGTERM) while its reducers wait: it decommissions"
since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
start_gated stop --reduce-delay-ms 3000
victim=$(compose ps -q executor | sed -n 1p)
(docker stop -t 90 "$victim" >/dev/null 2>&1; echo done > "$scratch/stopped") &
sleep 1
[ "$(docker inspect -f '{{.State.Running}}' "$victim")" = true ] \
  || fail "the executor left without waiting for its running tasks"
finish_gated stop
wait_for "the stopped executor to exit" 100 "[ -f '$scratch/stopped' ]"
code=$(docker inspect -f '{{.State.ExitCode}}' "$victim")
[ "$code" = 0 ] || fail "the decommissioned executor exited $code"
log=$(driver_log_since "$since")
grep -q 'executor decommissioned' <<<"$log" || fail "the driver did not see a decommission"
[ "$(resubmissions_since "$since")" = 0 ] || fail "a stage ran again after the decommission"
moved=$(grep -o 'map outputs moved off a decommissioning executor.*outputs=[0-9]*' <<<"$log" | grep -o '[0-9]*$' | sed -n 1p)
echo "   stopped ${victim:0:12}: exit 0, ${moved:-0} map outputs moved, no stage ran again, exact output"
docker start "$victim" >/dev/null
wait_for "the stopped executor back and registered" 90 '[ "$(healthy_count executor)" = 3 ] && [ "$(registered)" = 3 ]'
done_step

step "docker network disconnect an executor during a job, then reconnect it"
net="${project}_default"
start_gated cut
cut=$(compose ps -q executor | tail -1)
docker network disconnect "$net" "$cut"
finish_gated cut
echo "   cut off ${cut:0:12}; the job finished right; driver so far: $(failures)"
wait_for "the driver to declare the cut-off executor lost" 60 '[ "$(registered)" = 2 ]'
echo "   the driver lost it (heartbeat timeout ${EMBER_HEARTBEAT_TIMEOUT_MS} ms): 2 executors registered"
docker network connect "$net" "$cut"
wait_for "the cut-off executor to rejoin" 90 '[ "$(healthy_count executor)" = 3 ] && [ "$(registered)" = 3 ]'
echo "   reconnected: it re-registered, 3 executors"
done_step

step "docker kill the driver while a job's reducers wait, then docker start it: the job finishes"
start_gated driverkill
# The next whole second, then past it: the log window holds nothing of before the kill
# (`docker logs --since` takes whole seconds; the job only waits at its gate meanwhile).
since=$(date -u -d '+1 second' +%Y-%m-%dT%H:%M:%SZ)
sleep 1.2
driver=$(compose ps -q driver)
docker kill "$driver" >/dev/null
sleep 1
docker start "$driver" >/dev/null
wait_for "the driver healthy again" 60 '[ "$(healthy_count driver)" = 1 ]'
ui_port=$(compose port driver 4040 | sed 's/.*://')
finish_gated driverkill
log=$(driver_log_since "$since")
grep -q 'session reopened by its client after a driver restart' <<<"$log" \
  || fail "the client did not reopen its session on the restarted driver"
recovered=$(grep -o 'map outputs recovered from executors.*outputs=[0-9]*' <<<"$log" | grep -o '[0-9]*$' | awk '{s+=$1} END {print s+0}')
[ "${recovered:-0}" -ge 6 ] || fail "the restarted driver recovered ${recovered:-0} map outputs, not the first stage's 6"
grep 'map outputs recovered from executors' <<<"$log" | sed 's/^/   driver: /' | cut -c1-220
grep -E 'submitting stage ' <<<"$log" | sed 's/^/   driver: /' | cut -c1-200 | sed -n 1,10p
ran=$(grep -cE 'submitting stage ' <<<"$log" || true)
[ "$ran" = 2 ] || fail "the restarted driver ran $ran stages, not 2 (the finished map stage must be skipped)"
echo "   killed and started the driver: the client reopened its session, $recovered map outputs recovered, the finished stage skipped, exact output"
wait_for "3 executors registered" 90 '[ "$(registered)" = 3 ]'
done_step

step "restart the driver between two jobs"
job wordcount --partitions 4 "$D/text" "$D/wc-before" >/dev/null 2>&1 || fail "the job before the restart failed"
compose restart -t 5 driver >/dev/null 2>&1
wait_for "the driver healthy again" 60 '[ "$(healthy_count driver)" = 1 ]'
ui_port=$(compose port driver 4040 | sed 's/.*://')
wait_for "3 executors re-registered" 90 '[ "$(registered)" = 3 ]'
job wordcount --partitions 4 "$D/text" "$D/wc-after" >/dev/null 2>&1 || fail "the job after the restart failed"
[ "$(parts "$D/wc-after" | sort | md5sum)" = "$(parts "$scratch/wc-local" | sort | md5sum)" ] \
  || fail "the job after the driver restart differs from local mode"
echo "   executors re-registered; the next job's output is identical to local mode"
done_step

echo "test-compose: all steps passed"
