#!/usr/bin/env bash
# Sets up what the project needs on a fresh Debian machine, idempotently:
# Debian packages, the virtualenv with pinned Python packages, and the Iceberg
# Spark runtime jars. Expensive artefacts (the pyspark wheel, the jars) are
# cached outside the repository so repeated runs take seconds.
#
# usage: scripts/bootstrap.sh [demo|test]   (default: test)
#   demo: only what `make demo` and `make walkthrough` run (Spark, Airflow, the
#         SQLite JDBC driver), so the demo's set-up stays short;
#   test: everything, adding what only the tests use: the PostgreSQL server
#         and its JDBC driver, Chromium and its driver, DuckDB, selenium,
#         pytest and its plugins, ruff and mypy (the `dev` extra), SeaweedFS
#         (an S3 server and REST catalog) and Hadoop's S3A jars.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE="${1:-test}"

CACHE="${CT_CACHE_DIR:-$HOME/.cache/airflow-provider-ct}"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
UV_VERSION="0.13.8"
PYSPARK_VERSION="3.5.9"
DEBS=(default-jre-headless zip unzip libxerial-sqlite-jdbc-java)
case "$PROFILE" in
  demo) EXTRAS="spark"; JARS="" ;;
  # postgresql: the suite's throwaway server; chromium + chromium-driver: the
  # end-to-end test clicks through the Airflow UI.
  # s3a: the object-store tests run Spark on S3 through Hadoop's S3A jars.
  test) EXTRAS="dev"; JARS="s3a"; DEBS+=(libpostgresql-jdbc-java postgresql chromium chromium-driver) ;;
  *) echo "bootstrap: unknown profile '$PROFILE' (demo or test)" >&2; exit 2 ;;
esac

missing=()
for deb in "${DEBS[@]}"; do
  # "install ok installed": a removed package keeps a status entry (config files).
  dpkg-query -W -f='${Status}' "$deb" 2>/dev/null | grep -q "install ok installed" || missing+=("$deb")
done
# A JDK already on PATH satisfies Spark; do not pull a second one.
if command -v java >/dev/null 2>&1; then
  missing=("${missing[@]/default-jre-headless}")
fi
if [ -n "$(echo "${missing[@]}" | tr -d ' ')" ]; then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq || true
  # shellcheck disable=SC2068
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ${missing[@]}
fi

mkdir -p "$CACHE/wheels"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/uv" --version 2>/dev/null | grep -q "$UV_VERSION"; then
  "$VENV/bin/pip" install -q "uv==$UV_VERSION"
fi
# pyspark ships as a ~318 MB sdist: build its wheel once into the cache.
if ! ls "$CACHE/wheels"/pyspark-"$PYSPARK_VERSION"-*.whl >/dev/null 2>&1; then
  echo "bootstrap: building the pyspark $PYSPARK_VERSION wheel once into $CACHE/wheels"
  "$VENV/bin/pip" wheel -q --no-deps "pyspark==$PYSPARK_VERSION" -w "$CACHE/wheels"
fi
# --compile-bytecode: write the .pyc files at install time. Without them every
# process (each Airflow task, each Spark driver) recompiles pyiceberg, pyarrow,
# pandas and Airflow from source, about 1.7 s per process measured here, and
# nothing else writes them where PYTHONDONTWRITEBYTECODE is set.
"$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" \
  --find-links "$CACHE/wheels" -c constraints.txt -e ".[$EXTRAS]"

CT_CACHE_DIR="$CACHE" VENV="$VENV" scripts/assemble_jars.sh $JARS
echo "bootstrap: ready for $PROFILE ($VENV, jars in $CACHE/jars)"
