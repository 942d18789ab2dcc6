#!/usr/bin/env bash
# Fetches the Iceberg Spark runtime for Spark 3.5 (and, for the tests, Hadoop's
# S3A jars) without Maven, once, into the cache.
#
# usage: scripts/assemble_jars.sh [s3a]
#   s3a: also fetch hadoop-aws and the AWS SDK bundle (the object-store tests
#        run Spark on S3 through them; `make demo` stays on local folders).
#
# The only copies of the runtime reachable here are the jars inside the PyPI
# package snowpark-connect-deps-iceberg. Its 1.0.2 release carries Iceberg
# 1.10.2's complete runtime, relocated Jackson and Apache HttpClient 5 (the
# REST client) included; 1.0.3 lacks both relocations (they had to be rebuilt
# with jarjar, and REST catalogs could not run in Spark). The S3A jars come
# from the source distribution of sagemaker-pyspark 1.4.5, which is only
# downloaded (never installed: it pins another pyspark). See docs/environment.md.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CT_CACHE_DIR:-$HOME/.cache/airflow-provider-ct}"
VENV="${VENV:-.venv}"
OUT="$CACHE/jars"
DEPS_VERSION="1.0.2"
RUNTIME="iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
# A class the REST client needs and the one the first table load needs: both
# must be relocated inside the runtime jar.
NEEDED=(
  "org/apache/iceberg/shaded/org/apache/hc/client5/http/impl/classic/HttpClients.class"
  "org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class"
)
SAGEMAKER_VERSION="1.4.5"
S3A_JARS=(hadoop-aws-3.3.1.jar aws-java-sdk-bundle-1.11.901.jar)
# The marker names the runtime's source, so a cache assembled from 1.0.3 is redone.
MARKER="$OUT/.complete-deps-$DEPS_VERSION"

mkdir -p "$OUT" "$CACHE/download"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ ! -f "$MARKER" ]; then
  whl="$(ls "$CACHE/download"/snowpark_connect_deps_iceberg-"$DEPS_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$whl" ]; then
    "$VENV/bin/pip" download -q --no-deps "snowpark-connect-deps-iceberg==$DEPS_VERSION" -d "$CACHE/download"
    whl="$(ls "$CACHE/download"/snowpark_connect_deps_iceberg-"$DEPS_VERSION"-*.whl | head -n1)"
  fi
  unzip -q -o -j "$whl" "snowpark_connect_deps_iceberg/jars/$RUNTIME" -d "$work"
  listing="$(unzip -Z1 "$work/$RUNTIME")"
  for class in "${NEEDED[@]}"; do
    if ! grep -qxF "$class" <<<"$listing"; then
      echo "assemble_jars: $RUNTIME from snowpark-connect-deps-iceberg==$DEPS_VERSION lacks $class" >&2
      exit 1
    fi
  done
  # A rename, not a copy over the old jar: a running JVM keeps reading the file it opened.
  cp "$work/$RUNTIME" "$OUT/.$RUNTIME.tmp"
  mv -f "$OUT/.$RUNTIME.tmp" "$OUT/$RUNTIME"
  touch "$MARKER"
  echo "assemble_jars: Iceberg runtime (with its REST client) in $OUT"
fi

if [ "${1:-}" = "s3a" ] && [ ! -f "$OUT/s3a/.complete" ]; then
  sdist="$(ls "$CACHE/download"/sagemaker_pyspark-"$SAGEMAKER_VERSION".tar.gz 2>/dev/null || true)"
  if [ -z "$sdist" ]; then
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: \
      "sagemaker-pyspark==$SAGEMAKER_VERSION" -d "$CACHE/download"
    sdist="$CACHE/download/sagemaker_pyspark-$SAGEMAKER_VERSION.tar.gz"
  fi
  mkdir -p "$OUT/s3a"
  members=()
  for jar in "${S3A_JARS[@]}"; do
    members+=("sagemaker_pyspark-$SAGEMAKER_VERSION/deps/jars/$jar")
  done
  tar -xzf "$sdist" -C "$work" "${members[@]}"
  for jar in "${S3A_JARS[@]}"; do
    mv -f "$work/sagemaker_pyspark-$SAGEMAKER_VERSION/deps/jars/$jar" "$OUT/s3a/$jar"
  done
  touch "$OUT/s3a/.complete"
  echo "assemble_jars: Hadoop S3A jars in $OUT/s3a"
fi
