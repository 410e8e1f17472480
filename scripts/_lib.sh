# Shared shell helpers for scripts/*: the project's own venv, kept in .venv/ and
# refreshed when pyproject.toml changes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="${SPYRE_SERVING_CACHE:-$HOME/.cache/spyre-serving}"
VENV="$ROOT/.venv"

ensure_venv() {
  local stamp="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo ">> preparing the project venv in .venv (first run takes a minute)" >&2
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    # explicit `|| return`: set -e is off inside functions called from `&&` chains
    "$VENV/bin/pip" install --quiet --upgrade pip >&2 || return 1
    "$VENV/bin/pip" install --quiet -e "$ROOT[operator,dev]" >&2 || return 1
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
