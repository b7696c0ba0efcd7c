# Sourced by the cross-check scripts: `pypi_venv NAME MODULE PACKAGE WHAT`
# leaves the path of a virtual environment under .venv/NAME that imports
# MODULE (installing PACKAGE from PyPI into it the first time) in $venv, or
# says why WHAT is skipped and exits 0 where Python or PyPI is missing.
pypi_venv() {
  local name=$1 module=$2 package=$3 what=$4
  if ! command -v python3 >/dev/null 2>&1; then
    echo "python3 not found: $what skipped"
    exit 0
  fi
  venv=.venv/$name
  if ! "$venv/bin/python" -c "import $module" >/dev/null 2>&1; then
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check "$package"; }; then
      echo "could not install $package from PyPI: $what skipped"
      exit 0
    fi
  fi
}
