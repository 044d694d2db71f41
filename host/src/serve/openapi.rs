//! The OpenAPI 3.1 document of the control plane, served at
//! `/openapi.json`. Kept by hand next to the routes in `api.rs`; the tests
//! check that every route is in it.

/// The document.
pub const DOCUMENT: &str = r##"{
  "openapi": "3.1.0",
  "info": {
    "title": "fvhost control plane",
    "version": "0.1.0",
    "description": "Host many topologies in one process: submit, start, stop, watch. With tokens set, every route but /healthz and /readyz needs `Authorization: Bearer <token>` (or `?token=` on a GET): the read token (FVHOST_READ_TOKEN) for reads, the admin token (FVHOST_TOKEN) for submit, stop, start and delete."
  },
  "paths": {
    "/topologies": {
      "get": {
        "summary": "Every hosted topology with its state and status record.",
        "responses": { "200": { "description": "A list of topologies", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Topology" } } } } } }
      },
      "post": {
        "summary": "Validate a topology exactly like `fvhost validate`, store it and start it.",
        "requestBody": {
          "required": true,
          "content": {
            "application/toml": { "schema": { "type": "string" } },
            "application/sql": { "schema": { "type": "string", "description": "A SQL topology: the statements `fvhost run pipeline.sql` takes" } },
            "text/plain": { "schema": { "type": "string", "description": "TOML" } },
            "application/json": { "schema": { "type": "object", "description": "One of `toml` and `sql`", "properties": { "toml": { "type": "string" }, "sql": { "type": "string" } } } }
          }
        },
        "responses": {
          "201": { "description": "Started", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Topology" } } } },
          "400": { "description": "Invalid: every error with file, line and key", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
          "401": { "description": "Missing or wrong bearer token" },
          "409": { "description": "A topology of that name exists" },
          "413": { "description": "The body is larger than 1 MiB" }
        }
      }
    },
    "/topologies/{name}": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "get": {
        "summary": "One topology: state (RUNNING, STOPPED, FAILED), its DAG, and the status record: heartbeat, last committed epoch, rows and rows/s history per stage, watermarks, how full each edge is, the checkpoint history (duration, size, failures), CPU by thread family, error.",
        "responses": { "200": { "description": "The topology", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Topology" } } } }, "404": { "description": "No such topology" } }
      },
      "delete": {
        "summary": "Forget a stopped topology; `?purge=true` also deletes its checkpoints.",
        "parameters": [ { "name": "purge", "in": "query", "schema": { "type": "boolean", "default": false } } ],
        "responses": { "204": { "description": "Deleted" }, "404": { "description": "No such topology" }, "409": { "description": "It is running" } }
      }
    },
    "/topologies/{name}/stop": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "post": {
        "summary": "Stop: sources stop, the final epoch is checkpointed and committed, then STOPPED.",
        "responses": { "200": { "description": "Stopped", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Topology" } } } }, "404": { "description": "No such topology" } }
      }
    },
    "/topologies/{name}/start": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "post": {
        "summary": "Start a stopped or failed topology; it resumes from its newest manifest.",
        "responses": { "200": { "description": "Running", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Topology" } } } }, "404": { "description": "No such topology" }, "409": { "description": "It is running already" } }
      }
    },
    "/topologies/{name}/stages/{stage}/tail": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }, { "name": "stage", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "get": {
        "summary": "Server-sent events: every row leaving the source or stage as a JSON object (`data:`), live. Each watcher has a buffer of 10,000 rows; a slow one loses the oldest and gets `event: missed` with how many. Watching never slows the topology.",
        "responses": { "200": { "description": "text/event-stream" }, "404": { "description": "No such topology or stage" }, "409": { "description": "Not running" } }
      }
    },
    "/metrics": { "get": { "summary": "Prometheus exposition: per topology and stage rows, late and dead-lettered rows, state held, last epoch, checkpoint duration and size, CPU by thread family.", "responses": { "200": { "description": "text/plain; version=0.0.4" } } } },
    "/healthz": { "get": { "summary": "The process is up.", "responses": { "200": { "description": "ok" } } } },
    "/readyz": { "get": { "summary": "The topologies of the data directory have been resumed.", "responses": { "200": { "description": "ready" }, "503": { "description": "still resuming" } } } },
    "/openapi.json": { "get": { "summary": "This document.", "responses": { "200": { "description": "OpenAPI 3.1" } } } }
  },
  "components": {
    "schemas": {
      "Topology": {
        "type": "object",
        "properties": {
          "name": { "type": "string" },
          "state": { "enum": ["RUNNING", "STOPPED", "FAILED"] },
          "graph": { "type": "array", "description": "The DAG: sources, stages, sinks, each with the nodes it reads from.", "items": { "type": "object", "properties": { "name": { "type": "string" }, "kind": { "type": "string" }, "inputs": { "type": "array", "items": { "type": "string" } } } } },
          "status": { "oneOf": [ { "$ref": "#/components/schemas/Status" }, { "type": "null" } ], "description": "The run's status record (as `fvhost status` prints it)." }
        }
      },
      "Status": {
        "type": "object",
        "description": "A run's status record. Fields added later are absent from records written before them.",
        "properties": {
          "topology": { "type": "string" },
          "state": { "enum": ["RUNNING", "STOPPED", "FAILED"] },
          "pid": { "type": "integer" },
          "started_at_ms": { "type": "integer", "description": "Unix milliseconds." },
          "heartbeat_at_ms": { "type": "integer" },
          "finished_at_ms": { "type": ["integer", "null"] },
          "last_committed_epoch": { "type": ["integer", "null"] },
          "last_checkpoint_micros": { "type": ["integer", "null"] },
          "last_checkpoint_bytes": { "type": ["integer", "null"] },
          "stages": { "type": "array", "items": { "$ref": "#/components/schemas/StageStatus" } },
          "edges": { "type": "array", "description": "How full each edge's bounded channels are (backpressure).", "items": { "$ref": "#/components/schemas/EdgeStatus" } },
          "checkpoints": { "type": "array", "description": "The newest checkpoints (at most 20), committed or failed, oldest first; a restarted run continues the history of the one before.", "items": { "$ref": "#/components/schemas/Checkpoint" } },
          "cpu": { "type": ["object", "null"], "description": "CPU milliseconds by thread family (Linux)." },
          "error": { "type": ["string", "null"] }
        }
      },
      "StageStatus": {
        "type": "object",
        "properties": {
          "name": { "type": "string" },
          "kind": { "type": "string", "description": "source, sink, or the stage kind (sql, step, window, …)." },
          "rows_in": { "type": "integer" },
          "rows_out": { "type": "integer", "description": "Rows sent on (sinks: written)." },
          "dead_lettered": { "type": "integer" },
          "late_rows": { "type": "integer" },
          "restarts": { "type": "integer" },
          "state_groups": { "type": "integer" },
          "watermark_ms": { "type": ["integer", "null"], "description": "The node's watermark (its slowest task's): Unix milliseconds of event time." },
          "batch_latency": { "type": ["object", "null"] },
          "read_to_write": { "type": ["object", "null"] },
          "read_to_commit": { "type": ["object", "null"] },
          "rows_per_second": { "type": "array", "items": { "type": "integer" }, "description": "rows_out per second, one sample a second, oldest first: the last minute at most." }
        }
      },
      "EdgeStatus": {
        "type": "object",
        "description": "The bounded channels from every task of `from` to every task of `to`; fullest / capacity is the edge's fill (1: a sender waits).",
        "properties": {
          "from": { "type": "string" },
          "to": { "type": "string" },
          "side": { "type": "boolean", "description": "A side output (dead letters, late rows), not one of `to`'s inputs." },
          "channels": { "type": "integer" },
          "capacity": { "type": "integer", "description": "Messages one channel holds (channel_capacity)." },
          "queued": { "type": "integer", "description": "Messages waiting in all its channels." },
          "fullest": { "type": "integer", "description": "Messages waiting in its fullest channel." }
        }
      },
      "Checkpoint": {
        "type": "object",
        "properties": {
          "epoch": { "type": "integer" },
          "at_ms": { "type": "integer", "description": "When it committed or failed, Unix milliseconds." },
          "duration_micros": { "type": "integer", "description": "Barrier to durable manifest (or to the failure)." },
          "bytes": { "type": "integer", "description": "Manifest and state objects written (0 when it failed)." },
          "state_bytes": { "type": "integer", "description": "Of those, the stateful stages' state." },
          "error": { "type": ["string", "null"], "description": "Why it failed; absent when it committed." }
        }
      },
      "Error": {
        "type": "object",
        "properties": { "error": { "type": "string" }, "errors": { "type": "array", "items": { "type": "string" } } }
      }
    }
  }
}
"##;

#[cfg(test)]
mod tests {
    use crate::runtime::status::{self, RunState};
    use crate::runtime::{RunControl, StageMetrics};

    /// Every field the status record serializes is documented, so the
    /// document does not fall behind the record.
    #[test]
    fn the_document_parses_and_lists_every_status_field() {
        let doc: serde_json::Value = serde_json::from_str(super::DOCUMENT).expect("valid JSON");
        let schemas = &doc["components"]["schemas"];
        let control = RunControl::default();
        control.committed(1, 10, 20, 5);
        let source = std::sync::Arc::new(StageMetrics::new("n", "source"));
        let sink = std::sync::Arc::new(StageMetrics::new("out", "sink"));
        let edge = crate::runtime::edge::EdgeGauge::new("n", "out", false, 1, 8);
        sink.watch_edge(edge);
        let metrics = [source, sink];
        let record = status::record("t", 0, &metrics, &control, RunState::Running, None);
        let record = serde_json::to_value(&record).expect("serializes");
        let documented = |schema: &str, value: &serde_json::Value| {
            let props = schemas[schema]["properties"]
                .as_object()
                .unwrap_or_else(|| panic!("schema {schema}"));
            for key in value.as_object().expect("an object").keys() {
                assert!(props.contains_key(key), "{schema}.{key} is documented");
            }
        };
        documented("Status", &record);
        documented("StageStatus", &record["stages"][0]);
        documented("EdgeStatus", &record["edges"][0]);
        documented("Checkpoint", &record["checkpoints"][0]);
    }
}
