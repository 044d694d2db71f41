#!/usr/bin/env python3
"""Flink as the oracle for fvhost's SQL front end (issue 35).

Writes Nexmark bid / auction / person events to JSON-lines files once (with
fvhost's own `generator` plugin and `file-sink`), then runs each query of the
public nexmark-flink suite (q0..q22, plus the window forms fvhost documents)
in Apache Flink (PyFlink, streaming mode, parallelism 1, a filesystem source
over those files with the suite's WATERMARK) and in fvhost (`fvhost run
x.sql`, `file-source` over the same files, `file-sink` for the result), and
compares the two outputs as multisets of rows.

    python3.11 tests/flink-oracle/run.py [--events 200000] [--only q0,q5-topn]

See README.md beside this file. Standard library only; the Flink side runs
in a virtualenv this script creates (`$FVHOST_TOOLS/flink`) and is started
as `<venv>/bin/python run.py --flink-worker JOB.json`, one JVM per query.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import queries  # noqa: E402  (beside this file)

FLINK_VERSION = os.environ.get("FLINK_VERSION", "2.3.0")
DEFAULT_FVHOST = "/var/tmp/fvhost-target/release/fvhost"


def tools_dir() -> Path:
    return Path(os.environ.get("FVHOST_TOOLS") or Path.home() / ".cache/fvhost/tools")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# PyFlink in a virtualenv
# --------------------------------------------------------------------------


def ensure_pyflink() -> Path:
    """The venv's python with apache-flink FLINK_VERSION installed."""
    venv = tools_dir() / "flink"
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m; print(m.version('apache-flink'))"]
    if py.exists():
        r = subprocess.run(probe, capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == FLINK_VERSION:
            return py
    if shutil.which("java") is None:
        sys.exit("Flink needs a Java runtime (17) on PATH: apt-get install openjdk-17-jre-headless")
    log(f"installing apache-flink=={FLINK_VERSION} from PyPI into {venv} (about 850 MB, a minute or two)")
    started = time.time()
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-input", "--quiet", f"apache-flink=={FLINK_VERSION}"],
        check=True,
    )
    log(f"apache-flink installed in {time.time() - started:.0f} s")
    return py


# --------------------------------------------------------------------------
# fvhost
# --------------------------------------------------------------------------


def fvhost_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{tools_dir() / 'bin'}:{env.get('PATH', '')}"
    env.setdefault("RUST_LOG", "warn")
    return env


def wait_for_fvhost(binary: Path, wait_s: int) -> None:
    deadline = time.time() + wait_s
    while True:
        if binary.exists():
            r = subprocess.run([str(binary), "--help"], capture_output=True, env=fvhost_env())
            if r.returncode == 0:
                return
        if time.time() >= deadline:
            sys.exit(f"{binary} is missing or does not run (`--help` failed); build it with `cargo build --release` (CARGO_TARGET_DIR) or pass --fvhost")
        log(f"waiting for {binary} (polling every 60 s)")
        time.sleep(60)


def run_proc(cmd, timeout_s, cwd=None, env=None, log_path=None):
    """Run `cmd` in its own process group; kill the group on timeout.
    Returns (exit code or None on timeout, stdout, stderr, seconds)."""
    started = time.time()
    p = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout_s)
        code = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        code = None
    try:  # whatever the process left behind in its own group (a JVM)
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if log_path:
        Path(log_path).write_text(f"$ {' '.join(map(str, cmd))}\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return code, out, err, time.time() - started


def fvhost_error(stderr: str, sql_file: Path) -> str:
    """The first line of fvhost's error message, without the file's path."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    first = next((l for l in lines if l.startswith("error")), lines[-1] if lines else "(no message)")
    first = re.sub(r"^(error:\s*)+", "", first)
    first = first.replace(str(sql_file), sql_file.name)
    return first.strip()


# --------------------------------------------------------------------------
# The input events, written once by fvhost
# --------------------------------------------------------------------------


def generate_inputs(fvhost: Path, data: Path, events: int, rate: int, timeout_s: int) -> dict:
    """bid.jsonl, auction.jsonl, person.jsonl (and side_input.csv) in `data`."""
    stamp = data / "inputs.json"
    want = {"events": events, "first_event_rate": rate, "extra": ""}
    if stamp.exists():
        try:
            have = json.loads(stamp.read_text())
            if have.get("params") == want and all((data / f"{t}.jsonl").exists() for t in queries.TABLES):
                log(f"reusing the input files in {data}")
                return have
        except ValueError:
            pass
    if data.exists():
        shutil.rmtree(data)
    raw = data / "raw"
    raw.mkdir(parents=True)
    gen = data / "generate.sql"
    parts = []
    for table, columns in queries.TABLES.items():
        cols = ",\n  ".join(f"{n} {t}" for n, t, _ in columns if n != "extra")
        parts.append(
            f"CREATE TABLE {table} (\n  {cols}\n) WITH (\n"
            f"  'connector' = 'generator',\n  'config.stream' = '{table}',\n"
            f"  'config.events' = {events},\n  'config.first_event_rate' = {rate}\n);\n"
        )
        parts.append(
            f"CREATE TABLE {table}_file WITH (\n  'connector' = 'file-sink',\n"
            f"  'allow_write' = '{raw}',\n  'config.path' = '{raw / table}',\n"
            f"  'config.format' = 'jsonl'\n);\n"
        )
        select = ", ".join(n for n, _, _ in columns if n != "extra")
        # The generator has no `extra` (nexmark pads events with a random
        # string there); the files carry it as '' so the suite's queries
        # that read it run unchanged.
        parts.append(f"INSERT INTO {table}_file SELECT {select}, '' AS extra FROM {table};\n")
    gen.write_text("\n".join(parts))
    log(f"writing {events} Nexmark events ({rate} events/s of event time) with fvhost")
    code, out, err, secs = run_proc(
        [str(fvhost), "run", str(gen), "--state-dir", str(data / "state"), "--no-progress"],
        timeout_s, cwd=REPO, env=fvhost_env(), log_path=data / "generate.log",
    )
    if code != 0:
        sys.exit(f"generating the inputs failed (exit {code}); see {data / 'generate.log'}:\n{err[-3000:]}")
    counts = {}
    for table in queries.TABLES:
        files = sorted(p for p in (raw / table).iterdir() if not p.name.startswith("."))
        n = 0
        last = ""
        with open(data / f"{table}.jsonl", "w") as out_f:
            for f in files:  # epoch order: part-<stage>-<task>-<epoch:010>.jsonl
                for line in open(f):
                    if not line.strip():
                        continue
                    t = json.loads(line)["date_time"]
                    if norm_ts(t) < last:
                        sys.exit(f"{f}: event times go backwards ({t} after {last}); the oracle needs ordered input")
                    last = norm_ts(t)
                    out_f.write(line if line.endswith("\n") else line + "\n")
                    n += 1
        counts[table] = n
    # The side input of q13 (nexmark's side_input.txt: key, value).
    with open(data / "side_input.csv", "w") as f:
        for k in range(10000):
            f.write(f"{k},{k}\n")
    shutil.rmtree(raw)
    shutil.rmtree(data / "state", ignore_errors=True)
    info = {"params": want, "rows": counts, "seconds": round(secs, 1)}
    stamp.write_text(json.dumps(info, indent=1))
    log(f"inputs: {counts} in {secs:.0f} s")
    return info


# --------------------------------------------------------------------------
# The per-engine SQL
# --------------------------------------------------------------------------


def source_ddl(table: str, engine: str, data: Path) -> str:
    cols = ",\n  ".join(f"{n} {t}" for n, t, _ in queries.TABLES[table])
    wm = f"WATERMARK FOR date_time AS date_time - INTERVAL '{queries.WATERMARK_DELAY_S}' SECOND"
    if engine == "flink":
        with_ = (
            "  'connector' = 'filesystem',\n"
            f"  'path' = '{data / (table + '.jsonl')}',\n"
            "  'format' = 'json',\n"
            "  'json.timestamp-format.standard' = 'ISO-8601'"
        )
    else:
        types = ", ".join(f"'{n}:{ft}'" for n, _, ft in queries.TABLES[table])
        with_ = (
            "  'connector' = 'file-source',\n"
            f"  'allow_read' = '{data}',\n"
            f"  'config.path' = '{data / (table + '.jsonl')}',\n"
            "  'config.format' = 'jsonl',\n"
            f"  'config.columns' = ARRAY[{types}]"
        )
    return f"CREATE TABLE {table} (\n  {cols},\n  {wm}\n) WITH (\n{with_}\n)"


def side_input_ddl(engine: str, data: Path) -> str:
    path = data / "side_input.csv"
    if engine == "flink":
        # The suite declares it with the legacy 'connector.type' options,
        # which Flink 2 no longer has.
        return (
            "CREATE TABLE side_input (\n  key BIGINT,\n  `value` VARCHAR\n) WITH (\n"
            f"  'connector' = 'filesystem',\n  'path' = '{path}',\n  'format' = 'csv'\n)"
        )
    # `key` quoted: fvhost's SQL parser reads an unquoted `key BIGINT` in a
    # column list as a MySQL-style KEY index ("Expected: a list of columns
    # in parentheses").
    return (
        "CREATE TABLE side_input (\n  `key` BIGINT,\n  `value` VARCHAR\n) WITH (\n"
        f"  'connector' = 'file-source',\n  'allow_read' = '{data}',\n  'config.path' = '{path}',\n"
        "  'config.format' = 'csv',\n  'config.header' = false,\n"
        "  'config.columns' = ARRAY['key:int64', 'value:utf8']\n)"
    )


def sink_ddl(q: dict, engine: str, out: Path) -> str:
    name, cols = q["sink"]
    cols = queries.adapt(cols).strip("\n")
    if engine == "flink":
        with_ = (
            "  'connector' = 'filesystem',\n"
            f"  'path' = '{out}',\n"
            "  'format' = 'debezium-json',\n"
            "  'debezium-json.timestamp-format.standard' = 'ISO-8601',\n"
            "  'debezium-json.encode.decimal-as-plain-number' = 'true'"
        )
    else:
        with_ = (
            "  'connector' = 'file-sink',\n"
            f"  'allow_write' = '{out}',\n"
            f"  'config.path' = '{out}',\n"
            "  'config.format' = 'jsonl'"
        )
    return f"CREATE TABLE {name} (\n{cols}\n) WITH (\n{with_}\n)"


def statements_for(q: dict, engine: str, data: Path, out: Path) -> list[str]:
    st = [source_ddl(t, engine, data) for t in q["tables"]]
    if q.get("side_input"):
        st.append(side_input_ddl(engine, data))
    st.append(sink_ddl(q, engine, out))
    st += [queries.adapt(s).strip() for s in q["statements"]]
    return st


def sink_columns(q: dict) -> list[str]:
    """The sink's column names (lower case), in order."""
    cols, depth, item = [], 0, ""
    for ch in queries.adapt(q["sink"][1]) + ",":
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            if item.strip():
                cols.append(item.split()[0].strip("`").lower())
            item = ""
        else:
            item += ch
    return cols


# --------------------------------------------------------------------------
# Reading and comparing outputs
# --------------------------------------------------------------------------

TS_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?Z?$")


def norm_ts(s: str) -> str:
    m = TS_RE.match(s)
    if not m:
        return s
    frac = (m.group(3) or "").ljust(3, "0")[:3]
    return f"{m.group(1)} {m.group(2)}.{frac}"


def norm(v):
    """One value as both engines' outputs are compared: timestamps as
    `YYYY-MM-DD HH:MM:SS.mmm`, numbers as integers when integral, else
    rounded to 6 decimals (DECIMAL vs DOUBLE)."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        f = float(v)
        if not math.isfinite(f):
            return str(f)
        if isinstance(v, int) or abs(f - round(f)) < 1e-9:
            return int(round(f))
        return round(f, 6)
    if isinstance(v, str):
        return norm_ts(v) if TS_RE.match(v) else v
    return json.dumps(v, sort_keys=True)


def to_row(obj: dict, columns: list[str]) -> tuple:
    lower = {k.lower(): v for k, v in obj.items()}
    if all(c in lower for c in columns) or len(lower) < len(columns):
        # By name (a missing key is a null: arrow's JSON writer leaves
        # nulls out).
        return tuple(norm(lower.get(c)) for c in columns)
    return tuple(norm(v) for v in obj.values())  # by position


def data_files(out: Path) -> list[Path]:
    if not out.exists():
        return []
    return sorted(p for p in out.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))


def read_fvhost(out: Path, columns: list[str]) -> collections.Counter:
    """fvhost's rows; a changelog (an `op` column the sink does not
    declare: +I, -U, +U, -D) applied, so the result is its final table."""
    rows = collections.Counter()
    for f in data_files(out):
        for line in open(f):
            if line.strip():
                rec = json.loads(line)
                op = rec.pop("op", None) if "op" not in columns else None
                rows[to_row(rec, columns)] += -1 if op in ("-U", "-D") else 1
    return collections.Counter({k: n for k, n in rows.items() if n != 0})


def read_flink(out: Path, columns: list[str], upsert_key: list[str] | None = None) -> tuple[collections.Counter, int]:
    """The final table of Flink's changelog (debezium-json): inserts add
    `after`, deletes (and update-befores) take `before` away. An upsert
    stream (`upsert_key`: Flink sends update-afters without their
    update-befores, which debezium-json writes as inserts, "c") is applied
    by key instead: each row replaces the key's row, a delete removes it."""
    rows = collections.Counter()
    by_key: dict = {}
    changes = 0
    for f in data_files(out):
        for line in open(f):
            if not line.strip():
                continue
            rec = json.loads(line)
            changes += 1
            op = rec.get("op")
            if upsert_key is not None:
                if op in ("c", "r", "u") and rec.get("after") is not None:
                    by_key[tuple(rec["after"][k] for k in upsert_key)] = rec["after"]
                elif op == "d" and rec.get("before") is not None:
                    by_key.pop(tuple(rec["before"][k] for k in upsert_key), None)
                continue
            if op in ("d", "u") and rec.get("before") is not None:
                key = to_row(rec["before"], columns)
                rows[key] -= 1
                if rows[key] == 0:
                    del rows[key]
            if op in ("c", "r", "u") and rec.get("after") is not None:
                rows[to_row(rec["after"], columns)] += 1
    if upsert_key is not None:
        rows = collections.Counter(to_row(r, columns) for r in by_key.values())
    return rows, changes


def differing_columns(a: collections.Counter, b: collections.Counter, columns: list[str]) -> list[str]:
    """The columns which, left out, make both sides equal (each alone, then
    every pair): where the difference lies."""
    def without(c, drop):
        out = collections.Counter()
        for row, n in c.items():
            out[tuple(v for i, v in enumerate(row) if i not in drop)] += n
        return out
    width = len(columns)
    for size in (1, 2):
        found = []
        for i in range(width):
            for j in range(i, width) if size == 2 else [i]:
                if size == 2 and j == i:
                    continue
                drop = {i, j}
                if without(a, drop) == without(b, drop):
                    found.append(" and ".join(f"`{columns[k]}`" for k in sorted(drop) if k < width))
        if found:
            return found
    return []


def diff_sample(a: collections.Counter, b: collections.Counter, n=5):
    only_a = list((a - b).elements())[:n]
    only_b = list((b - a).elements())[:n]
    return only_a, only_b


# --------------------------------------------------------------------------
# The Flink worker (runs in the PyFlink venv, one JVM per query)
# --------------------------------------------------------------------------


def flink_worker(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    result = {"ok": False}
    try:
        from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment
        from pyflink.table.udf import udf

        t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        conf = t_env.get_config()
        conf.set("parallelism.default", "1")
        conf.set("table.exec.resource.default-parallelism", "1")
        # The filesystem sink commits its files on checkpoints (and on the
        # final checkpoint when the bounded input ends).
        conf.set("execution.checkpointing.interval", "2s")
        # Join and top-N state outgrows the default in-memory checkpoint
        # storage (5 MiB), after which no checkpoint completes and the
        # files are never committed.
        conf.set("execution.checkpointing.storage", "filesystem")
        conf.set("execution.checkpointing.dir", Path(job["checkpoints"]).as_uri())
        conf.set("python.executable", sys.executable)
        conf.set("python.client.executable", sys.executable)
        conf.set("pipeline.name", job["id"])

        for name in job.get("udfs", []):
            if name == "count_char":
                # nexmark's com.github.nexmark.flink.udf.CountChar:
                # occurrences of c's first character in s.
                @udf(result_type=DataTypes.BIGINT())
                def count_char(s, c):
                    if s is None or not c:
                        return 0
                    return s.count(c[0])

                t_env.create_temporary_system_function("count_char", count_char)
        *ddl, insert = job["statements"]
        for s in ddl:
            t_env.execute_sql(s)
        # What kind of changes the sink receives: [I] appends, [I,UB,UA]
        # (and D) a retracting changelog, [I,UA] (and D) upserts by a key
        # the planner derived, whose update-befores it leaves out.
        from pyflink.table.explain_detail import ExplainDetail

        plan = t_env.explain_sql(insert, ExplainDetail.CHANGELOG_MODE)
        physical = plan.split("== Optimized Physical Plan ==")[-1].split("== Optimized Execution Plan ==")[0]
        modes = re.findall(r"changelogMode=\[([^\]]*)\]", physical)
        r = t_env.execute_sql(insert)
        r.wait(int(job["timeout_s"] * 1000))
        result = {"ok": True, "changelog": modes[1] if len(modes) > 1 else None}
    except Exception as e:  # noqa: BLE001 - reported, not handled
        result = {"ok": False, "error": java_message(str(e))}
    print("FLINK-RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # do not wait for the gateway JVM's shutdown hooks


def java_message(text: str) -> str:
    """The most telling line of a (Java) exception text."""
    # Every JVM announces JAVA_TOOL_OPTIONS on stderr first: not a message.
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("Picked up JAVA_TOOL_OPTIONS")]
    caused = [l for l in lines if l.startswith("Caused by:")]
    # py4j: "An error occurred while calling o91.await.\n: java.util…Exception: …"
    thrown = [l.lstrip(": ") for l in lines if re.match(r"^:?\s*[\w.$]+(Exception|Error)\b", l)]
    pick = caused[-1] if caused else thrown[0] if thrown else (lines[0] if lines else "(no message)")
    pick = re.sub(r"^Caused by:\s*", "", pick)
    pick = re.sub(r"^(org\.apache\.flink\.[\w.]+\.|java\.lang\.|py4j\.protocol\.)", "", pick)
    return pick[:400]


# --------------------------------------------------------------------------
# One query in both engines
# --------------------------------------------------------------------------


def run_query(q, fvhost, flink_py, data, work, timeout_s, keep_outputs=False):
    qid = q["id"]
    qdir = work / "queries" / qid
    if qdir.exists():
        shutil.rmtree(qdir)
    qdir.mkdir(parents=True)
    res = {"id": qid, "title": q["title"], "variant": q.get("variant", False)}
    columns = sink_columns(q)

    # fvhost
    fv_out = qdir / "fvhost-out"
    # fvhost names the topology after the file stem (no dots allowed).
    fv_sql = qdir / f"{qid}.sql"
    fv_sql.write_text(";\n\n".join(statements_for(q, "fvhost", data, fv_out)) + ";\n")
    code, out, err, secs = run_proc(
        [str(fvhost), "run", str(fv_sql), "--state-dir", str(qdir / "fvhost-state"), "--no-progress"],
        timeout_s, cwd=REPO, env=fvhost_env(), log_path=qdir / "fvhost.log",
    )
    res["fvhost_secs"] = round(secs, 1)
    if code == 0:
        res["fvhost"] = "runs"
        res["fvhost_rows"] = read_fvhost(fv_out, columns)
        late = re.search(r"(\d[\d,]*) late rows? dropped", out + err)
        if late and late.group(1) not in ("0",):
            res["fvhost_late"] = late.group(1)
    elif code == 2:
        res["fvhost"] = "refused"
        res["fvhost_msg"] = fvhost_error(err, fv_sql)
    elif code is None:
        res["fvhost"] = "timeout"
        res["fvhost_msg"] = f"no result within {timeout_s} s"
    else:
        res["fvhost"] = "failed"
        res["fvhost_msg"] = f"exit {code}: " + fvhost_error(err, fv_sql)
    log(f"{qid}: fvhost {res['fvhost']} in {secs:.1f} s" + (f": {res.get('fvhost_msg')}" if res.get("fvhost_msg") else ""))

    # Flink
    fl_out = qdir / "flink-out"
    statements = statements_for(q, "flink", data, fl_out)
    (qdir / f"{qid}.flink.sql").write_text(";\n\n".join(statements) + ";\n")
    job = {"id": qid, "statements": statements, "udfs": q.get("flink_udfs", []), "timeout_s": timeout_s,
           "checkpoints": str(qdir / "flink-checkpoints")}
    job_file = qdir / "flink-job.json"
    job_file.write_text(json.dumps(job, indent=1))
    # The JVM's temporary files (Flink unpacks a 24 MB RPC jar there per
    # job, and a job cut at its timeout never deletes it) go to a directory
    # of the query's own, removed below, not to /tmp.
    java_tmp = qdir / "java-tmp"
    java_tmp.mkdir(exist_ok=True)
    java_options = " ".join(filter(None, [os.environ.get("JAVA_TOOL_OPTIONS"), f"-Djava.io.tmpdir={java_tmp}"]))
    code, out, err, secs = run_proc(
        [str(flink_py), str(Path(__file__).resolve()), "--flink-worker", str(job_file)],
        timeout_s + 60, cwd=qdir,
        env=dict(os.environ, FLINK_LOG_DIR=str(qdir / "flink-logs"), JAVA_TOOL_OPTIONS=java_options),
        log_path=qdir / "flink.log",
    )
    res["flink_secs"] = round(secs, 1)
    shutil.rmtree(qdir / "flink-checkpoints", ignore_errors=True)  # up to ~100 MB a query
    shutil.rmtree(java_tmp, ignore_errors=True)
    m = re.search(r"^FLINK-RESULT (.*)$", out, re.M)
    if code is None:
        res["flink"] = "failed"
        res["flink_msg"] = f"timeout after {timeout_s} s"
    elif not m:
        res["flink"] = "failed"
        res["flink_msg"] = java_message(err[-4000:]) if err else f"exit {code}"
    else:
        r = json.loads(m.group(1))
        # Upserts: update-afters without update-befores ([I,UA]); or, for
        # a ranking whose rank number is not selected, Flink's "no ranking
        # output" optimisation: each new first row is written as an insert
        # ([I]) and the sink is meant to upsert by the partition key (Flink's
        # Top-N documentation), which the query names as `upsert_key`.
        mode = (r.get("changelog") or "").split(",")
        upsert = "UB" not in mode and ("UA" in mode or bool(q.get("upsert_key")))
        if r["ok"] and upsert and not q.get("upsert_key"):
            res["flink"] = "failed"
            res["flink_msg"] = (f"Flink writes upserts ([{','.join(mode)}]) without their key: "
                                "give the query its `upsert_key` in queries.py")
        elif r["ok"]:
            res["flink"] = "ran"
            rows, changes = read_flink(fl_out, columns, q.get("upsert_key") if upsert else None)
            res["flink_rows"] = rows
            res["flink_changes"] = changes
        else:
            res["flink"] = "failed"
            res["flink_msg"] = r.get("error", "?")
    log(f"{qid}: Flink {res['flink']} in {secs:.1f} s" + (f": {res.get('flink_msg')}" if res.get("flink_msg") else ""))

    # Compare
    if res["fvhost"] == "runs" and res["flink"] == "ran":
        a, b = res["fvhost_rows"], res["flink_rows"]
        res["equal"] = a == b
        if q.get("nondeterministic"):
            res["equal_note"] = q["nondeterministic"]
        if not res["equal"]:
            only_fv, only_fl = diff_sample(a, b)
            res["diff"] = {"only_fvhost": only_fv, "only_flink": only_fl,
                           "n_only_fvhost": sum((a - b).values()), "n_only_flink": sum((b - a).values()),
                           "columns": differing_columns(a, b, columns)}
            log(f"{qid}: outputs differ: {res['diff']['n_only_fvhost']} rows only in fvhost, {res['diff']['n_only_flink']} only in Flink")
        else:
            log(f"{qid}: outputs equal ({sum(a.values())} rows)")
    if not keep_outputs and not res.get("diff"):
        # Kept only where the engines disagree (or with --keep-outputs).
        for d in ("fvhost-out", "flink-out", "fvhost-state"):
            shutil.rmtree(qdir / d, ignore_errors=True)
    return res


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def cells(r) -> list[str]:
    fv = r["fvhost"]
    if r.get("fvhost_msg"):
        fv += ": " + r["fvhost_msg"]
    if r.get("fvhost_late"):
        fv += f" ({r['fvhost_late']} late rows dropped)"
    fl = r["flink"]
    if r.get("flink_msg"):
        fl += ": " + r["flink_msg"]
    if "equal" in r:
        n_fv = sum(r["fvhost_rows"].values())
        n_fl = sum(r["flink_rows"].values())
        eq = ("yes" if r["equal"] else "**no**") + f" ({n_fv} / {n_fl} rows)"
        if r.get("equal_note"):
            eq += f" — not comparable: {r['equal_note']}"
    elif r["flink"] == "ran":
        eq = f"— (Flink: {sum(r['flink_rows'].values())} rows)"
    else:
        eq = "—"
    name = r["id"] + ("*" if r["variant"] else "")
    return [name, fv, fl, eq]


def print_table(results) -> None:
    rows = [["query", "fvhost", "Flink", "outputs equal? (fvhost / Flink rows)"]] + [cells(r) for r in results]
    width = [min(max(len(row[i]) for row in rows), 70) for i in range(4)]
    for i, row in enumerate(rows):
        print(" | ".join(c[:70].ljust(width[j]) for j, c in enumerate(row)))
        if i == 0:
            print("-+-".join("-" * w for w in width))


def write_results(path: Path, results, info, args, flink_version, started) -> None:
    suite = [r for r in results if not r["variant"]]
    both = [r for r in suite if "equal" in r]
    equal = [r for r in both if r["equal"]]
    lines = [
        "# Flink oracle: Nexmark queries in fvhost and in Apache Flink",
        "",
        f"Written by `tests/flink-oracle/run.py` on {time.strftime('%Y-%m-%d %H:%M')} "
        f"({time.time() - started:.0f} s). Apache Flink {flink_version} (PyFlink from PyPI, "
        "streaming mode, parallelism 1) against `fvhost` "
        f"(`{args.fvhost}`).",
        "",
        f"Input: {info['params']['events']} Nexmark events from fvhost's `generator` "
        f"(seed 42, {info['params']['first_event_rate']} events per second of event time), "
        f"written once with `file-sink` as JSON lines: {info['rows']}. Both engines read "
        "these files (Flink: `filesystem` source, `json` format; fvhost: `file-source`) with "
        f"the suite's `WATERMARK FOR date_time AS date_time - INTERVAL '{queries.WATERMARK_DELAY_S}' SECOND`.",
        "",
        f"Suite queries run by both engines: **{len(both)} of {len(suite)}**; outputs equal: "
        f"**{len(equal)} of {len(both)}**.",
        "",
        "| query | fvhost | Flink | outputs equal? (fvhost / Flink rows) |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append("| " + " | ".join(md_escape(c) for c in cells(r)) + " |")
    lines += [
        "",
        "`*`: not in the suite — the window forms fvhost documents "
        "(`examples/nexmark/q5.sql`, `q7.sql`, `q18.sql`, `q19.sql`, `hot_auctions.sql`), run the same way. "
        "\"Flink: N rows\" where fvhost does not run the query is Flink's final table "
        "(its changelog applied), for the record.",
        "",
    ]
    notes = [q for q in queries.SUITE + queries.VARIANTS if q.get("note") and q["id"] in {r["id"] for r in results}]
    if notes:
        lines += ["## Notes on single queries", ""]
        lines += [f"- **{q['id']}**: {q['note']}" for q in notes]
        lines.append("")
    diffs = [r for r in results if r.get("diff")]
    if diffs:
        lines += ["## Differences", ""]
        for r in diffs:
            d = r["diff"]
            lines += [
                f"**{r['id']}**: {d['n_only_fvhost']} rows only in fvhost, {d['n_only_flink']} only in Flink"
                + (f"; without {' or '.join(d['columns'])} the outputs are equal" if d.get("columns") else "")
                + ". Examples (columns as the sink declares them: "
                + ", ".join(sink_columns(next(q for q in queries.SUITE + queries.VARIANTS if q["id"] == r["id"])))
                + "):",
                "",
                "```",
                *(f"fvhost only: {row}" for row in d["only_fvhost"]),
                *(f"Flink only:  {row}" for row in d["only_flink"]),
                "```",
                "",
            ]
    lines += ADAPTATION_NOTES
    path.write_text("\n".join(lines) + "\n")


ADAPTATION_NOTES = [
    "## How the queries were adapted",
    "",
    "The query text (INSERT, CREATE VIEW) is the suite's "
    "(`nexmark-flink/src/main/resources/queries/qN.sql` of nexmark/nexmark), "
    "with these changes only, the same for both engines:",
    "",
    "- Column names, everywhere (query and DDL): "
    + ", ".join(f"`{a}` → `{b}`" for a, b in queries.RENAMES)
    + ". fvhost's generator names its columns in snake_case, and DataFusion lower-cases "
    "unquoted identifiers. The backquotes the suite puts around `dateTime` go with it. "
    "Aliases such as `bid_dateTime` are left as written.",
    "- `extra`: fvhost's generator has no `extra` column (nexmark pads each event "
    "with a random string there); the input files carry `extra` = `''` so that the queries "
    "that read it run unchanged.",
    "- DDL: the suite's `datagen`/`nexmark` source and its views become one table per "
    "stream over the files (Flink `filesystem` + `json`, fvhost `file-source`), each "
    "with the suite's 4-second watermark. Sinks (the suite's `blackhole`) keep their "
    "columns and become Flink `filesystem` + `debezium-json` (so updating results can be "
    "written: the oracle applies the changelog) and fvhost `file-sink` (JSON lines).",
    "- q9: Flink 2.3 plans the top-1 per auction (its rank number not selected) as "
    "`Rank(strategy=[AppendFastStrategy])` with changelog mode `[I]`: every new winner "
    "is written as an insert, which the sink is to upsert by the partition key (Flink's "
    "Top-N documentation, \"no ranking output optimization\"). Flink's rows are applied "
    "as upserts by `id`; fvhost writes a changelog (`+I`, `-U`, `+U`) applied as usual. "
    "A query whose Flink plan sends upserts without naming their key is reported as failed.",
    "- q10: the sink loses `PARTITIONED BY (dt, hm)` and its partition-commit options.",
    "- q13: `side_input` is a `filesystem` CSV table (the suite's legacy "
    "`'connector.type'` options are gone in Flink 2) over `key,value` rows "
    "`0,0` … `9999,9999`; for fvhost a `file-source` table whose `key` column is "
    "quoted (`` `key` BIGINT ``: unquoted, fvhost's SQL parser reads `key BIGINT` as a "
    "MySQL-style KEY index and stops with \"Expected: a list of columns in parentheses\").",
    "- q14: `count_char` is the suite's Java UDF (`com.github.nexmark.flink.udf.CountChar`, "
    "not on PyPI); Flink gets the same function as a Python UDF, fvhost (which has no "
    "SQL function declaration) gets the query without the CREATE FUNCTION.",
    "- q20: the suite declares `discard_sink` but inserts into `nexmark_q20`; the sink "
    "is declared as `nexmark_q20`.",
    "",
    "Comparison: each side's rows as a multiset (Flink's changelog applied first), "
    "columns by the sink's names; timestamps as `YYYY-MM-DD HH:MM:SS.mmm`, numbers as "
    "integers when integral, else rounded to 6 decimals (Flink's `DECIMAL(23, 3)` "
    "against fvhost's `DOUBLE`).",
    "",
]


# --------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--flink-worker":
        flink_worker(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=int(os.environ.get("ORACLE_EVENTS", 200_000)),
                    help="Nexmark events (all three streams together; default 200000)")
    ap.add_argument("--rate", type=int, default=1000,
                    help="generator first_event_rate: events per second of event time (default 1000: "
                         "one event per millisecond, so no two events share a timestamp)")
    ap.add_argument("--only", default="", help="comma-separated query ids (q0,q5-topn,…)")
    ap.add_argument("--no-variants", action="store_true", help="only the suite's q0..q22")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per query and engine")
    ap.add_argument("--fvhost", default=os.environ.get("FVHOST_BIN", DEFAULT_FVHOST))
    ap.add_argument("--wait-fvhost", type=int, default=0,
                    help="seconds to wait (polling each minute) for the fvhost binary to appear")
    ap.add_argument("--keep-outputs", action="store_true",
                    help="keep every query's outputs in work/ (by default only those of queries whose outputs differ)")
    ap.add_argument("--work", default=str(HERE / "work"), help="scratch directory (inputs, outputs, logs)")
    ap.add_argument("--results", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args()
    started = time.time()

    fvhost = Path(args.fvhost)
    wait_for_fvhost(fvhost, args.wait_fvhost)
    flink_py = ensure_pyflink()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    info = generate_inputs(fvhost, data, args.events, args.rate, max(args.timeout, 600))

    selected = queries.SUITE + ([] if args.no_variants else [dict(v, variant=True) for v in queries.VARIANTS])
    if args.only:
        want = {s.strip() for s in args.only.split(",") if s.strip()}
        selected = [q for q in selected if q["id"] in want]
    results = []
    for q in selected:
        results.append(run_query(q, fvhost, flink_py, data, work, args.timeout, args.keep_outputs))

    print()
    print_table(results)
    write_results(Path(args.results), results, info, args, FLINK_VERSION, started)
    print(f"\nwritten: {args.results} ({time.time() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
