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
            "text/plain": { "schema": { "type": "string" } },
            "application/json": { "schema": { "type": "object", "required": ["toml"], "properties": { "toml": { "type": "string" } } } }
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
        "summary": "One topology: state (RUNNING, STOPPED, FAILED), heartbeat, last committed epoch, rows per stage, checkpoint duration and size, CPU by thread family, error.",
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
          "status": { "type": ["object", "null"], "description": "The run's status record (as `fvhost status` prints it)." }
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
