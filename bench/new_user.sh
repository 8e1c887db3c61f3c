#!/usr/bin/env bash
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The collection as a new user meets it (make new-user): `pip install ansible` with no pin on the newest Python 3.12
# or later found, the collection built and installed from its tarball into that user's ~/.ansible, no project
# ansible.cfg, then site.yml and tune_kv.yml by their FQCN on one simulated field-case host (make sim-up N=1).
# Writes bench/results/new-user.md: the versions pip chose and the lines each command printed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$repo/.tmp/new-user
result=$repo/bench/results/new-user.md
python=$("$repo/.ci/find-python" 3.14 3.13 3.12) || { echo "new-user: no Python 3.12 or later"; exit 1; }

rm -rf "$work" && mkdir -p "$work/home" "$work/project"
# The hardware first, with the checkout's own tools: one simulated host, sim1, written to inventories/sim.
make -C "$repo" --no-print-directory sim-up N=1 PROFILE=field
cp -r "$repo/inventories/sim" "$work/project/inventory"

# From here on the user's shell: a HOME of its own (its ~/.ansible), nothing of the checkout's Ansible settings.
export HOME=$work/home
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH VIRTUAL_ENV
export PATH=$work/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cd "$work/project"

step() {  # step NAME COMMAND...: run it, keep what it printed in $work/NAME.log
  local name=$1; shift
  echo "\$ $*" | tee "$work/$name.log"
  "$@" 2>&1 | tee -a "$work/$name.log"
}

step venv "$python" -m venv "$work/venv"
step pip pip install --disable-pip-version-check -q ansible
step versions ansible --version
step build ansible-galaxy collection build --output-path "$work/dist" "$repo"
step install ansible-galaxy collection install "$(ls "$work"/dist/llmserve-sglang-*.tar.gz)"
step site ansible-playbook llmserve.sglang.site -i inventory
step tune ansible-playbook llmserve.sglang.tune_kv -i inventory

{
  echo "# A new user's first run"
  echo
  echo "\`make new-user\` (bench/new_user.sh) on $(date -u +%F), at $(git -C "$repo" rev-parse --short HEAD):"
  echo "\`pip install ansible\` (no pin) on $("$python" --version), the collection installed from its tarball into"
  echo "a fresh ~/.ansible, no ansible.cfg, site.yml and tune_kv.yml by FQCN on one simulated 8x RTX PRO 6000 host."
  echo
  echo "Versions pip chose: $(pip list --disable-pip-version-check 2>/dev/null | awk '$1 == "ansible" || $1 == "ansible-core" {printf "%s %s; ", $1, $2}')"
  for name in versions install site tune; do
    echo
    echo '```'
    case $name in
      site) head -n 1 "$work/$name.log"; echo "[...]"; tail -n 8 "$work/$name.log" ;;
      tune) head -n 1 "$work/$name.log"; echo "[...]"; tail -n 60 "$work/$name.log" ;;
      *) cat "$work/$name.log" ;;
    esac
    echo '```'
  done
} > "$result"
echo "new-user: $result"
