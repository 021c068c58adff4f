"""Runs the DuckDB queries of docs/EXPORT.md, as they are written there, on the tables
`vramscope export --format parquet` wrote: each rank's peak from the ranks table, and from the
blocks alone the peak and the bytes by category at it. Prints one JSON object:
{rank: {"device": d, "peak": bytes, "categories": {category: bytes}, "ranks_table": {device: peak}}}.

    python parquet_peaks.py TABLES_DIR [EXPORT_MD]
"""
import json
import pathlib
import re
import sys

import duckdb


def blocks_of(markdown: str) -> dict[str, str]:
    """The page's SQL blocks, by their first line (a `-- ...` comment)."""
    out = {}
    for body in re.findall(r"```sql\n(.*?)```", markdown, flags=re.S):
        first, _, _ = body.partition("\n")
        out[first.removeprefix("-- ").strip()] = body
    return out


def main() -> None:
    tables = pathlib.Path(sys.argv[1]).resolve()
    page = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else pathlib.Path(__file__).parents[2] / "docs/EXPORT.md"
    sql = blocks_of(page.read_text())
    con = duckdb.connect()
    register = sql["register the tables (DuckDB)"].replace("'tables/", f"'{tables}/")
    for statement in filter(str.strip, register.split(";")):
        con.execute(statement)
    out: dict[str, dict] = {}
    for rank, _node, device, peak, _reserved, _time in con.sql(sql["each rank's peak (DuckDB and Spark SQL)"]).fetchall():
        out.setdefault(str(rank), {"categories": {}, "ranks_table": {}})["ranks_table"][str(device)] = int(peak)
    query = sql["each rank's peak and the bytes by category at it (DuckDB and Spark SQL)"]
    for rank, device, peak, category, size in con.sql(query).fetchall():
        row = out.setdefault(str(rank), {"categories": {}, "ranks_table": {}})
        row["device"], row["peak"] = device, int(peak)
        if size:
            row["categories"][category] = int(size)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
