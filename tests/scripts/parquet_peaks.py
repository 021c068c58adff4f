"""Reads `vramscope export --format parquet`'s tables with DuckDB and works out, in SQL alone,
each rank's peak of allocated bytes and the bytes by category at it: what `vramscope info`
reports, from the tables. Prints one JSON object: {rank: {"peak": bytes, "categories": {...}}}."""
import json
import sys

import duckdb

tables = sys.argv[1]
con = duckdb.connect()
for name in ["ranks", "events", "blocks", "segments", "annotations", "tags"]:
    con.execute(f"create view {name} as select * from read_parquet('{tables}/{name}.parquet')")

# Each block adds its size when allocated and takes it away when freed, in the trace's order
# (time, then the event's place); blocks from before the trace count from the start.
con.execute("""
create view changes as
    select rank, device, alloc_ns as t, alloc_seq as s, size_bytes as delta from blocks where alloc_ns is not null
    union all
    select rank, device, free_ns, free_seq, -size_bytes from blocks where free_ns is not null
    union all
    select rank, device, -9223372036854775807, -1, size_bytes from blocks where alloc_ns is null
""")
con.execute("""
create view running as
    select rank, device, t, s,
           sum(delta) over (partition by rank, device order by t, s rows unbounded preceding) as live
    from changes
""")
# The first moment each rank's busiest device is at its highest.
peaks = con.sql("""
    with top as (select rank, device, max(live) as peak from running group by rank, device),
         busiest as (select rank, arg_max(device, peak) as device, max(peak) as peak from top group by rank),
         first_at as (
             select r.rank, r.device, b.peak, arg_min(r.t, (r.t, r.s)) as t, arg_min(r.s, (r.t, r.s)) as s
             from running r join busiest b on r.rank = b.rank and r.device = b.device and r.live = b.peak
             group by r.rank, r.device, b.peak)
    select rank, device, peak, t, s from first_at order by rank
""").fetchall()
out = {}
for rank, device, peak, t, s in peaks:
    alive = con.execute("""
        select category, sum(size_bytes) from blocks
        where rank = ? and device = ?
          and (alloc_ns is null or (alloc_ns, alloc_seq) <= (?, ?))
          and (free_ns is null or (free_ns, free_seq) > (?, ?))
        group by category
    """, [rank, device, t, s, t, s]).fetchall()
    out[str(rank)] = {"device": device, "peak": int(peak), "categories": {c: int(b) for c, b in alive if b}}
print(json.dumps(out))
