#!/usr/bin/env bash
# Fuzzes every reader (or the ones named) for SECONDS each with cargo fuzz,
# on the stack the servers give their threads (8 MiB, set with ulimit), from
# the committed corpora plus deep-nesting and long-chain seeds generated here.
# Needs cargo-fuzz (cargo install cargo-fuzz); RUSTC_BOOTSTRAP lets the stable
# toolchain take the sanitizer flags.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(read_jsdl read_xrsl read_rsl read_jdl read_condor read_slurm read_json read_workflow)
fi
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
rep() { python3 -c "import sys; sys.stdout.write(sys.argv[1] * int(sys.argv[2]))" "$1" "$2"; }
for n in 50 101 257 1000 20000; do
  mkdir -p "$seeds"/{read_xrsl,read_rsl,read_jdl,read_condor,read_jsdl,read_json,read_slurm,read_workflow}
  { printf '&'; rep '(|' $n; printf '(executable=/bin/true)'; rep ')' $n; } > "$seeds/read_xrsl/deep-$n"
  { printf '&(executable=/bin/true)(arguments='; rep '(' $n; printf a; rep ')' $n; printf ')'; } > "$seeds/read_xrsl/seq-$n"
  { printf '+'; rep '(' $n; printf '(&(executable=/bin/true))'; rep ')' $n; } > "$seeds/read_rsl/deep-$n"
  { printf '[ Executable = "/bin/true"; Requirements = '; rep '(' $n; printf true; rep ')' $n; printf '; ]'; } > "$seeds/read_jdl/parens-$n"
  { printf '[ Executable = "/bin/true"; Requirements = true'; rep ' && true' $n; printf '; ]'; } > "$seeds/read_jdl/chain-$n"
  { printf '[ Executable = "/bin/true"; A = '; rep '[ B = ' $n; printf 1; rep ']' $n; printf '; ]'; } > "$seeds/read_jdl/records-$n"
  { printf 'executable = /bin/true\nrequirements = '; rep '!' $n; printf 'true\nqueue\n'; } > "$seeds/read_condor/unary-$n"
  { printf 'executable = /bin/true\nrequirements = 1'; rep ' + 1' $n; printf '\nqueue\n'; } > "$seeds/read_condor/chain-$n"
  { printf '<JobDefinition xmlns="http://schemas.ggf.org/jsdl/2005/11/jsdl">'; rep '<x>' $n; rep '</x>' $n; printf '</JobDefinition>'; } > "$seeds/read_jsdl/deep-$n"
  { rep '[' $n; rep ']' $n; } > "$seeds/read_json/deep-$n"
  { printf '#!/bin/sh\n#SBATCH --time=1\n'; rep '$((' $n; printf 'true\n'; } > "$seeds/read_slurm/deep-$n"
  { rep 'JOB N a.sub\n' 1; python3 -c "import sys; n=int(sys.argv[1]); print(''.join(f'JOB N{i} a.sub\nPARENT N{i} CHILD N{i+1}\n' for i in range(n)))" $n; } > "$seeds/read_workflow/chain-$n"
  { printf '{"name": "d", "tasks": [{"id": "a", "runtime": 1, "x": '; rep '[' $n; rep ']' $n; printf '}]}'; } > "$seeds/read_workflow/deep-$n"
  { printf '[ Type = "dag"; Nodes = [ a = [ description = [ Executable = "a"; ]; ]; b = [ file = "b.jdl"; ]; ]; Dependencies = { {a, '; rep '{' $n; printf b; rep '}' $n; printf '} }; ]'; } > "$seeds/read_workflow/jdl-dag-$n"
done
ulimit -s 8192
cd fuzz
failed=()
for t in "${targets[@]}"; do
  echo "== $t for ${seconds}s"
  # The other targets still run after a crash; the script fails at the end.
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "corpus/$t" "$seeds/$t" -- \
    -max_total_time="$seconds" -max_len=262144 -timeout=10 -print_final_stats=1 > "$seeds/$t.log" 2>&1; then
    failed+=("$t")
  fi
  grep -a -E "^(stat::|#[0-9]+ +DONE|==[0-9]+==|SUMMARY|Done|thread)" "$seeds/$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
