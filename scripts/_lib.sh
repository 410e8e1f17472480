# Shared shell helpers for scripts/*: the project's own venv, kept in .venv/ and
# refreshed when pyproject.toml changes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="${SPYRE_SERVING_CACHE:-$HOME/.cache/spyre-serving}"
VENV="$ROOT/.venv"

ensure_venv() {
  local stamp="$VENV/.installed-$(cat "$ROOT/pyproject.toml" "$ROOT/devcluster/pyproject.toml" | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo ">> preparing the project venv in .venv (first run takes a minute)" >&2
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    # explicit `|| return`: set -e is off inside functions called from `&&` chains
    "$VENV/bin/pip" install --quiet --upgrade pip >&2 || return 1
    # the dev cluster is a distribution of its own (devcluster/): the operator image lacks it
    "$VENV/bin/pip" install --quiet -e "$ROOT[operator,dev]" -e "$ROOT/devcluster" >&2 || return 1
    rm -f "$VENV"/.installed-*
    touch "$stamp"
  fi
  export PATH="$VENV/bin:$PATH"
}

# Debian packages the tests need as tools (e.g. lua5.1 for the Argo CD health script).
ensure_apt() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo ">> apt-get install ${missing[*]}" >&2
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2 || return 1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2 || return 1
}

# The declared minimum version of every runtime dependency (the `>=` floors in
# pyproject.toml of `dependencies` and the `operator` extra), as exact pins.
floor_pins() {
  python3 - "$ROOT/pyproject.toml" <<'PY'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
for dep in project["dependencies"] + project["optional-dependencies"]["operator"]:
    found = re.match(r"^([A-Za-z0-9_.-]+)\s*>=\s*([^,;\s]+)", dep)
    if not found:
        sys.exit(f"pyproject.toml: {dep!r} declares no >= floor to test")
    print(f"{found[1]}=={found[2]}")
PY
}

# A second venv, .venv-floor/, with those exact floors (and the newest dev tools).
ensure_floor_venv() {
  FLOOR_VENV="$ROOT/.venv-floor"
  local pins
  pins=$(floor_pins) || return 1
  local stamp="$FLOOR_VENV/.installed-$(cat "$ROOT/pyproject.toml" "$ROOT/devcluster/pyproject.toml" | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo ">> preparing .venv-floor with the minimum versions: $(echo $pins)" >&2
    [ -x "$FLOOR_VENV/bin/python" ] || python3 -m venv "$FLOOR_VENV"
    "$FLOOR_VENV/bin/pip" install --quiet --upgrade pip >&2 || return 1
    "$FLOOR_VENV/bin/pip" install --quiet -e "$ROOT[operator,dev]" -e "$ROOT/devcluster" $pins >&2 || return 1
    rm -f "$FLOOR_VENV"/.installed-*
    touch "$stamp"
  fi
}
