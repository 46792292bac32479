#!/usr/bin/env bash
# A new user's own crate, outside the repository, made from the README's section "Use
# ember in your own crate" (this directory holds its two files; the script first checks
# that the README shows them verbatim). In a temp dir the script:
#   1. builds the crate (path dependency on this checkout, sharing its target dir and
#      Cargo.lock, so only the crate itself and a few differently-featured dependencies
#      compile), runs the job in local mode and compares its output with the means
#      computed here from the readings in main.rs;
#   2. starts a driver and two executors on 127.0.0.1 (ephemeral ports) and runs the same
#      binary against them, with the same expected output;
#   3. adds a capturing closure to the job, in the two shapes users write, and compares
#      the compiler's stderr (paths and ember's line numbers normalised) with
#      capture-check.stderr (`cargo check`: the closure without `move`) and
#      capture-build.stderr (`cargo build`: `move |x| *x > k` with `k: u64`, which only
#      a build catches).
# `BLESS=1` rewrites the two .stderr files instead of comparing. Everything it starts is
# killed and its temp dir removed on exit, failure included. Run by `.ci/run`.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/tests/own_crate"
tmp=$(mktemp -d -t ember-own-crate-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# `timeout` sends TERM: exit through the EXIT trap then too.
trap 'exit 143' TERM INT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}" CARGO_TERM_COLOR=never
export EMBER_LOG="${EMBER_LOG:-warn}"
unset EMBER_MASTER EMBER_SECRET EMBER_SECRET_FILE EMBER_EXECUTOR_SECRET_FILE
fail() { echo "own_crate: $*" >&2; exit 1; }

# The README's section shows these files as they are.
python3 - "$repo/README.md" "$here/Cargo.toml" "$here/src/main.rs" <<'EOF'
import sys
readme = open(sys.argv[1]).read()
start = readme.index("## Use ember in your own crate")
section = readme[start:readme.index("\n## ", start + 1)]
for path in sys.argv[2:]:
    if open(path).read() not in section:
        sys.exit(f"own_crate: {path} is not shown verbatim in README.md's own-crate section")
EOF

# The files are as rustfmt writes them.
rustfmt --edition 2021 --check "$here/src/main.rs"

# 1. The crate, built and run in local mode.
job="$tmp/city-temps"
mkdir -p "$job/src"
cp "$here/Cargo.toml" "$job/Cargo.toml"
cp "$here/src/main.rs" "$job/src/main.rs"
sed -i "s|path = \"../ember\"|path = \"$repo\"|" "$job/Cargo.toml"
grep -q "path = \"$repo\"" "$job/Cargo.toml" || fail "the template's ember dependency is not path = \"../ember\""
cp "$repo/Cargo.lock" "$job/Cargo.lock"
(cd "$job" && cargo build --offline --quiet)
bin="$CARGO_TARGET_DIR/debug/city-temps"

# The expected output, from the readings in main.rs: per city, the mean of the
# readings that parse and are at least 0.
python3 - "$here/src/main.rs" >"$tmp/expected" <<'EOF'
import re, sys
src = open(sys.argv[1]).read()
lines = re.findall(r'"([A-Za-z]+,[^"]*)"', re.search(r"let lines = vec!\[(.*?)\];", src, re.S).group(1))
sums = {}
for l in lines:
    city, t = l.split(",", 1)
    try:
        c = float(t)
    except ValueError:
        continue
    if c >= 0:
        s, n = sums.get(city, (0.0, 0))
        sums[city] = (s + c, n + 1)
assert len(sums) >= 2, lines
for city in sorted(sums):
    s, n = sums[city]
    print(f"{city}\t{s / n:.2f}")
EOF
check_output() { # $1: output dir, $2: what ran
  [ -f "$1/_SUCCESS" ] || fail "$2: no _SUCCESS in $1"
  cat "$1"/part-* | sort >"$tmp/got"
  diff -u "$tmp/expected" "$tmp/got" || fail "$2: output differs from the expected means"
  echo "own_crate: $2: $(wc -l <"$tmp/got") cities as expected"
}
timeout 120 "$bin" --master 'local[2]' "$tmp/out-local" >"$tmp/local.stdout"
check_output "$tmp/out-local" "local mode"

# 2. The same binary on a driver and two executors.
# (`--workspace ... --example`: the features `cargo test --workspace` resolved, so CI
# finds the daemons it built fresh instead of building them again.)
(cd "$repo" && cargo build --quiet --workspace --bins --example wordcount)
first_line() { # $1: file; waits up to 30 s for a line on stdout ending in an address
  for _ in $(seq 300); do
    line=$(grep -m1 -o 'http://[0-9.:]*$' "$1" 2>/dev/null || true)
    [ -n "$line" ] && { echo "$line"; return; }
    sleep 0.1
  done
  fail "no address in $1 after 30 s: $(cat "${1%.out}.log" 2>/dev/null | tail -5)"
}
"$CARGO_TARGET_DIR/debug/ember-driver" --host 127.0.0.1 --port 0 \
  --binary-dir "$tmp/driver-binaries" >"$tmp/driver.out" 2>"$tmp/driver.log" &
pids+=($!)
url=$(first_line "$tmp/driver.out")
for i in 1 2; do
  "$CARGO_TARGET_DIR/debug/ember-executor" --driver "$url" --host 127.0.0.1 --shuffle-port 0 \
    --cores 1 --memory 512m --work-dir "$tmp/executor-$i" >"$tmp/executor-$i.out" 2>"$tmp/executor-$i.log" &
  pids+=($!)
done
for i in 1 2; do
  addr=$(first_line "$tmp/executor-$i.out")
  for _ in $(seq 300); do
    "$CARGO_TARGET_DIR/debug/ember-executor" health --addr "$addr" >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$CARGO_TARGET_DIR/debug/ember-executor" health --addr "$addr" >/dev/null \
    || fail "executor $i did not register within 30 s"
done
timeout 120 "$bin" --master "$url" "$tmp/out-cluster" >"$tmp/cluster.stdout" \
  || fail "the job failed on the cluster; driver log: $(tail -5 "$tmp/driver.log")"
check_output "$tmp/out-cluster" "cluster (a driver, two executors)"

# 3. Capturing closures: the compiler's words, at the user's line.
compile_fail() { # $1: cargo command, $2: the line added before `let mut means`, $3: expected file
  bad="$tmp/bad-$1"
  mkdir -p "$bad/src"
  sed 's/^name = "city-temps"/name = "city-temps-'"$1"'"/' "$job/Cargo.toml" >"$bad/Cargo.toml"
  cp "$job/Cargo.lock" "$bad/Cargo.lock"
  python3 - "$job/src/main.rs" "$2" >"$bad/src/main.rs" <<'EOF'
import sys
src, added = open(sys.argv[1]).read(), sys.argv[2]
print(src.replace("    let mut means", added + "\n    let mut means", 1), end="")
EOF
  if (cd "$bad" && cargo "$1" --offline --quiet 2>"$tmp/stderr"); then
    fail "cargo $1 accepted a capturing closure: $2"
  fi
  # Paths and the line numbers inside ember and the standard library vary; the user's
  # src/main.rs:LINE:COL stays.
  sed -E -e "s|$repo|\$EMBER|g" -e 's|/rustc/[0-9a-f]+/|$RUSTC/|g' \
    -e '/(\$EMBER|\$RUSTC)/ s/:[0-9]+:[0-9]+/:LL:CC/g' \
    -e 's/^ *[0-9]+ ( *\|)/LL\1/' -e 's/^ +//' -e 's/^\.\.\. +\|/... |/' \
    "$tmp/stderr" >"$tmp/normalised"
  if [ -n "${BLESS:-}" ]; then
    cp "$tmp/normalised" "$here/$3"
    echo "own_crate: wrote $3"
  else
    diff -u "$here/$3" "$tmp/normalised" || fail "cargo $1 stderr differs from $3 (BLESS=1 rewrites it)"
    echo "own_crate: cargo $1 fails as $3 says"
  fi
}
readings='    let big = ctx.parallelize((0..10u64).collect(), 2);
    let k: u64 = 3;'
compile_fail check "$readings
    println!(\"{}\", big.filter(|x| *x > k).count()?);" capture-check.stderr
compile_fail build "$readings
    println!(\"{}\", big.filter(move |x| *x > k).count()?);" capture-build.stderr
