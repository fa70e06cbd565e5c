# Sourced by the set-up scripts: picks the Python the project installs into and exports PY.
#
# In order: the active virtual environment ($VIRTUAL_ENV); the project's own .venv if an earlier
# set-up made one; the base Python ($PYTHON, default python3) when it is a writable, not
# externally-managed install; otherwise (PEP 668 "externally-managed-environment", or a
# system site-packages this user cannot write) a new project venv .venv, said out loud.
# shellcheck shell=bash

pick_python() {
  local root="$1" base="${PYTHON:-python3}" verdict
  if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    PY="$VIRTUAL_ENV/bin/python"
    echo "set-up: installing into the active virtual environment $VIRTUAL_ENV"
    export PY; return
  fi
  if [[ -x "$root/.venv/bin/python" ]]; then
    PY="$root/.venv/bin/python"
    echo "set-up: installing into the project's virtual environment $root/.venv"
    export PY; return
  fi
  if ! command -v "$base" >/dev/null 2>&1; then
    echo "set-up: no '$base' on PATH; install Python >= 3.11 or point PYTHON at one" >&2
    return 1
  fi
  verdict="$("$base" - <<'PY'
import os, sys, sysconfig
if sys.version_info < (3, 11):
    print("too-old")
elif sys.prefix != sys.base_prefix or os.environ.get("CONDA_PREFIX") == sys.prefix:
    print("ok")
elif os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")):
    print("externally-managed")
elif not os.access(sysconfig.get_path("purelib"), os.W_OK):
    print("not-writable")
else:
    print("ok")
PY
)"
  case "$verdict" in
    ok)
      PY="$(command -v "$base")"
      echo "set-up: installing into $("$PY" -c 'import sys; print(sys.prefix)') ($PY)"
      ;;
    too-old)
      echo "set-up: $base is $("$base" --version 2>&1); the project needs Python >= 3.11 (set PYTHON=...)" >&2
      return 1
      ;;
    *)
      echo "set-up: $base is $verdict (PEP 668), so the project gets its own virtual environment:"
      echo "set-up:   $root/.venv  (activate it later with: . .venv/bin/activate)"
      if ! "$base" -m venv "$root/.venv" 2>/dev/null; then
        rm -rf "$root/.venv"
        if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
          echo "set-up: python3 -m venv needs Debian's python3-venv; installing it"
          apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
          "$base" -m venv "$root/.venv"
        else
          echo "set-up: '$base -m venv' failed; install your distribution's venv package (Debian/Ubuntu: sudo apt-get install python3-venv) and run this again" >&2
          return 1
        fi
      fi
      PY="$root/.venv/bin/python"
      ;;
  esac
  export PY
}

# pick_python quietly, then put that environment's console scripts (agentcore-rl, ...) first on
# PATH, as an activated venv would: a project .venv made by the set-up is not activated in the
# caller's shell.
use_python() {
  pick_python "$1" >/dev/null || return 1
  PATH="$(dirname "$(command -v "$PY")"):$PATH"
  export PATH
}
