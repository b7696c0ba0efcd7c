//! The OpenAPI 3.1 description of the client API, served at `/openapi.json`.

use serde_json::{json, Value};

/// The document.
pub fn document() -> Value {
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let ok = |code: &str, schema: Value| {
        json!({code: {"description": "OK", "content": {"application/json": {"schema": schema}}},
               "400": err, "401": err, "403": err, "404": err, "503": err})
    };
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Brokk broker service", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Jobs in any supported job description language, brokered over the service's sites. \
                                 Times are RFC 3339 UTC, durations whole seconds; /v1 needs `Authorization: Bearer <token>`."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
                "Submit": {"type": "object", "required": ["description"], "properties": {
                    "description": {"type": "string"},
                    "format": {"enum": ["jsdl", "xrsl", "rsl", "jdl", "condor", "slurm", "json"]},
                    "reservation": {"type": "string", "description": "a reservation made with POST /v1/reservations"},
                    "preferences": {"type": "object", "description": "objective, earliest_start, latest_start, benchmarks, penalty_factor, use_reservations, queue_adaptation"},
                    "uploads": {"type": "object", "additionalProperties": {"type": "string"},
                                "description": "local input file name -> SHA-256 of a file uploaded with PUT /v1/uploads/{sha256}"},
                    "hold": {"type": "boolean", "description": "keep the jobs held until POST /v1/jobs/{id}/release"}}},
                "Upload": {"type": "object", "properties": {"sha256": {"type": "string"}, "size": {"type": "integer"}}},
                "Accepted": {"type": "object", "properties": {"id": {"type": "string"},
                    "ids": {"type": "array", "items": {"type": "string"}}, "warnings": {"type": "array", "items": {"type": "string"}}}},
                "Job": {"type": "object", "properties": {
                    "id": {"type": "string"}, "owner": {"type": "string"}, "format": {"type": "string"},
                    "state": {"enum": ["accepted", "held", "planned", "reserving", "moving", "dispatched", "running", "finished", "failed", "cancelled"]},
                    "name": {"type": ["string", "null"]}, "stderr": {"type": ["string", "null"]},
                    "outputs": {"type": "array", "items": {"type": "string"}}, "wall_time": {"type": ["integer", "null"]},
                    "site": {"type": ["string", "null"]}, "site_job": {"type": ["string", "null"]},
                    "predicted_tts": {"type": ["integer", "null"]}, "predicted_ttd": {"type": ["integer", "null"]},
                    "submitted": {"type": "string", "format": "date-time"},
                    "started": {"type": ["string", "null"]}, "ended": {"type": ["string", "null"]},
                    "exit_code": {"type": ["integer", "null"]}, "reason": {"type": ["string", "null"]},
                    "warnings": {"type": "array", "items": {"type": "string"}}, "stdout": {"type": ["string", "null"]},
                    "member": {"type": "object", "description": "absent for a job of its own; a workflow's task run {kind: task, workflow, task, attempt}, or a co-allocation's part {kind: part, coallocation, index}",
                        "properties": {"kind": {"enum": ["task", "part"]}, "workflow": {"type": "string"}, "task": {"type": "integer"},
                                       "attempt": {"type": "integer"}, "coallocation": {"type": "string"}, "index": {"type": "integer"}}},
                    "history": {"type": "array", "items": {"type": "object", "properties": {
                        "at": {"type": "string"}, "state": {"type": "string"}, "detail": {"type": ["string", "null"]}}}}}},
                "Coalloc": {"type": "object", "required": ["jobs", "earliest", "latest", "delta"], "properties": {
                    "jobs": {"type": "array", "items": {"type": "object", "properties": {
                        "description": {"type": "string"}, "format": {"type": "string"}}}},
                    "earliest": {"type": "string", "format": "date-time"}, "latest": {"type": "string", "format": "date-time"},
                    "delta": {"type": "integer"}}},
                "Reservation": {"type": "object", "properties": {"id": {"type": "string"}, "owner": {"type": "string"},
                    "site": {"type": "string"}, "site_reservation": {"type": "integer"}, "amount": {"type": "integer"},
                    "start": {"type": "string", "format": "date-time"}, "end": {"type": "string", "format": "date-time"},
                    "state": {"enum": ["committed", "cancelled"]},
                    "workflow": {"type": "string", "description": "the workflow whose task it was made for; absent otherwise"}}},
                "Coallocated": {"type": "object", "properties": {"ids": {"type": "array"}, "sites": {"type": "array"}, "starts": {"type": "array"}}},
                "WorkflowRequest": {"type": "object", "required": ["workflow"], "properties": {
                    "workflow": {"type": "object", "description": "Brokk's workflow JSON (`brokk workflow validate --json`): name, tasks (id, job, runtime, cores, retries, format), edges (parent, child, bytes), coallocations, earliest, deadline"},
                    "scheduler": {"enum": ["single", "heftsync", "heftsyncbt", "hlst", "genetic"]},
                    "uploads": {"type": "object", "additionalProperties": {"type": "string"}, "description": "input name -> SHA-256 of an upload, for local inputs no parent task makes"}}},
                "Workflow": {"type": "object", "properties": {"id": {"type": "string"}, "owner": {"type": "string"}, "name": {"type": "string"},
                    "scheduler": {"type": "string"}, "state": {"enum": ["running", "finished", "failed", "cancelled"]},
                    "submitted": {"type": "string", "format": "date-time"}, "deadline": {"type": "string", "format": "date-time"},
                    "start": {"type": "string", "format": "date-time"}, "finish": {"type": "string", "format": "date-time"},
                    "ended": {"type": "string", "format": "date-time"}, "reason": {"type": "string"},
                    "tasks": {"type": "array", "items": {"type": "object", "properties": {"task": {"type": "string"}, "job": {"type": "string"},
                        "site": {"type": "string"}, "reservation": {"type": "string"}, "start": {"type": "string", "format": "date-time"},
                        "end": {"type": "string", "format": "date-time"}, "retried": {"type": "integer"}, "state": {"type": "string"},
                        "exit_code": {"type": "integer"}}}},
                    "transfers": {"type": "array", "items": {"type": "object"}}}},
                "WorkflowRefused": {"type": "object", "properties": {"error": {"type": "string"}, "rejection": {"type": "object", "properties": {
                    "reason": {"enum": ["too_large", "past_deadline", "no_room", "share", "time_up", "co_allocation", "network", "late_finish", "search_exhausted"]},
                    "earliest_finish": {"type": ["string", "null"], "format": "date-time"}}}}}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {"get": {"security": [], "responses": {"200": {"description": "alive"}}}},
            "/readyz": {"get": {"security": [], "responses": {"200": {"description": "ready to take work"}, "503": {"description": "not ready, with why"}}}},
            "/metrics": {"get": {"security": [], "responses": {"200": {"description": "Prometheus text format"}}}},
            "/v1/jobs": {
                "get": {"description": "a page of the caller's jobs, newest first; a full page answers with a `Link` header (rel=\"next\") to the next",
                        "parameters": [
                            {"name": "state", "in": "query", "schema": {"type": "string"}},
                            {"name": "since", "in": "query", "description": "submitted at or after: RFC 3339 or seconds since the epoch", "schema": {"type": "string"}},
                            {"name": "before", "in": "query", "description": "the last job of the page before", "schema": {"type": "string"}},
                            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}}],
                        "responses": ok("200", json!({"type": "array", "items": {"$ref": "#/components/schemas/Job"}}))},
                "post": {"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Submit"}}}},
                         "responses": ok("202", json!({"$ref": "#/components/schemas/Accepted"}))}},
            "/v1/jobs/{id}": {
                "get": {"responses": ok("200", json!({"$ref": "#/components/schemas/Job"}))},
                "delete": {"responses": ok("200", json!({"$ref": "#/components/schemas/Job"}))}},
            "/v1/jobs/{id}/files/{name}": {"get": {"responses": {"200": {"description": "the file", "content": {"application/octet-stream": {}}}, "404": err}}},
            "/v1/jobs/{id}/hold": {"post": {"description": "keep a job not yet dispatched from being dispatched (409 once it is at a site)",
                "responses": ok("200", json!({"$ref": "#/components/schemas/Job"}))}},
            "/v1/jobs/{id}/release": {"post": {"responses": ok("200", json!({"$ref": "#/components/schemas/Job"}))}},
            "/v1/uploads/{sha256}": {
                "get": {"description": "whether your store holds this file", "responses": ok("200", json!({"$ref": "#/components/schemas/Upload"}))},
                "put": {"description": "the file's bytes; stored if their SHA-256 is the name (400 otherwise, 413 over the size limit)",
                        "requestBody": {"content": {"application/octet-stream": {}}},
                        "responses": ok("201", json!({"$ref": "#/components/schemas/Upload"}))}},
            "/v1/events": {"get": {"description": "server-sent events: `job` with a job as JSON each time one of yours changes; `resync` when the reader fell behind",
                "responses": {"200": {"description": "event stream", "content": {"text/event-stream": {}}}, "401": err}}},
            "/v1/me": {"get": {"responses": ok("200", json!({"type": "object", "properties": {"identity": {"type": "string"}}}))}},
            "/ui/": {"get": {"security": [], "responses": {"200": {"description": "the web dashboard", "content": {"text/html": {}}}}}},
            "/v1/coallocations": {"post": {"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Coalloc"}}}},
                "responses": ok("201", json!({"$ref": "#/components/schemas/Coallocated"}))}},
            "/v1/reservations": {"get": {"responses": ok("200", json!({"type": "array", "items": {"$ref": "#/components/schemas/Reservation"}}))},
                "post": {"requestBody": {"content": {"application/json": {"schema": {"type": "object",
                "required": ["amount", "duration", "earliest", "latest"], "properties": {"amount": {"type": "integer"},
                "duration": {"type": "integer"}, "earliest": {"type": "string", "format": "date-time"},
                "latest": {"type": "string", "format": "date-time"}}}}}},
                "responses": ok("201", json!({"$ref": "#/components/schemas/Reservation"}))}},
            "/v1/reservations/{id}": {
                "get": {"responses": ok("200", json!({"$ref": "#/components/schemas/Reservation"}))},
                "delete": {"responses": ok("200", json!({"$ref": "#/components/schemas/Reservation"}))}},
            "/v1/workflows": {"get": {"responses": ok("200", json!({"type": "array", "items": {"$ref": "#/components/schemas/Workflow"}}))},
                "post": {"description": "admit a workflow against its deadline: every task reserved at a site and every transfer on the network, or nothing (409 with the reason and the earliest finish on offer)",
                    "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/WorkflowRequest"}}}},
                    "responses": {"201": {"description": "admitted", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Workflow"}}}},
                        "409": {"description": "not admitted", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WorkflowRefused"}}}},
                        "400": err}}},
            "/v1/workflows/{id}": {
                "get": {"responses": ok("200", json!({"$ref": "#/components/schemas/Workflow"}))},
                "delete": {"description": "cancel its tasks and every reservation left", "responses": ok("200", json!({"$ref": "#/components/schemas/Workflow"}))}},
            "/v1/resources": {"get": {"responses": ok("200", json!({"type": "array"}))}},
            "/site/v1": {"description": "the site API of `brokk site` (its /v1 paths under /site/v1), for the brokers this one serves as a site (`delegates`): info, probe, reservations, jobs, changes, files, uploads"}
        }
    })
}
