// Runs a job of SQL steps in chDB (a current ClickHouse engine in process)
// for TestCurrentClickHouse (chdb_test.go), and prints what each answered.
//
// Usage: node chdb.cjs JOB.json
// JOB: {"chdb": "<dir holding node_modules/chdb>", "dir": "<session dir>",
//       "config": "<clickhouse config file, or empty>",
//       "steps": [{"name": "...", "sql": "...", "query": true|false}, ...]}
// Every step runs, in order, whatever the ones before answered. Output (one
// JSON object on stdout): {"version": "...", "steps": [{"name", "error",
// "columns", "rows"}]}, where a query's rows are arrays of strings
// (JSONCompact, every value as text) and a statement's are empty.
"use strict";
const fs = require("fs");
const path = require("path");

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const { Session } = require(path.join(job.chdb, "node_modules", "chdb"));
const args = job.config ? ["--config-file=" + job.config] : [];
const session = new Session(job.dir, { connectionArgs: args });
const out = { version: "", steps: [] };
try {
  out.version = session.query("SELECT version()", "TSV").trim();
  for (const step of job.steps) {
    const r = { name: step.name, error: "", columns: [], rows: [] };
    try {
      if (step.query) {
        const text = session.query(step.sql, "JSONCompact");
        const res = JSON.parse(text);
        r.columns = res.meta.map((m) => m.name);
        r.rows = res.data.map((row) => row.map((v) => (v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v))));
      } else {
        session.query(step.sql, "TSV");
      }
    } catch (e) {
      r.error = String(e && e.message ? e.message : e);
    }
    out.steps.push(r);
  }
} finally {
  session.close();
}
process.stdout.write(JSON.stringify(out));
