#!/usr/bin/env python3
"""Runs docs/EXPORT.md's Spark SQL blocks, as they are written there, with pyspark in local mode
on the tables `vramscope export --format parquet` wrote, and prints what each query answers.
Run by hand (it is not part of the tests: Spark needs a Java runtime and a 400 MB package):

    python3 -m venv /var/tmp/spark && /var/tmp/spark/bin/pip install pyspark
    /var/tmp/spark/bin/python scripts/spark-export-queries.py TABLES_DIR

Its output on a 4-rank run is in docs/EXPORT.md, beside the queries.
"""
import pathlib
import re
import sys
import time

from pyspark.sql import SparkSession

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs/EXPORT.md"


def blocks_of(markdown: str) -> dict[str, str]:
    """The page's SQL blocks, by their first line (a `-- ...` comment)."""
    out = {}
    for body in re.findall(r"```sql\n(.*?)```", markdown, flags=re.S):
        first, _, _ = body.partition("\n")
        out[first.removeprefix("-- ").strip()] = body
    return out


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tables = pathlib.Path(sys.argv[1]).resolve()
    sql = blocks_of(PAGE.read_text())
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("vramscope-export-queries")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark {spark.version}, local mode, tables in {tables}")
    register = sql["register the tables (Spark SQL)"].replace("'tables/", f"'{tables}/")
    for statement in filter(str.strip, register.split(";")):
        spark.sql(statement)
    for name in ["each rank's peak (DuckDB and Spark SQL)",
                 "each rank's peak and the bytes by category at it (DuckDB and Spark SQL)"]:
        started = time.monotonic()
        rows = spark.sql(sql[name]).collect()
        print(f"\n-- {name}: {len(rows)} rows in {time.monotonic() - started:.1f} s")
        if rows:
            columns = list(rows[0].asDict())
            print(" | ".join(columns))
            for row in rows:
                print(" | ".join(str(row[c]) for c in columns))
    spark.stop()


if __name__ == "__main__":
    main()
