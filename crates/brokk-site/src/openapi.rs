//! The OpenAPI 3.1 description of the site API, served at `/openapi.json`.

use serde_json::{json, Value};

/// The document.
pub fn document() -> Value {
    let err = json!({"$ref": "#/components/schemas/Error"});
    let ok = |schema: Value| json!({"description": "OK", "content": {"application/json": {"schema": schema}}});
    let errors = |codes: &[&str]| {
        codes
            .iter()
            .map(|c| {
                (
                    (*c).to_string(),
                    json!({"description": c, "content": {"application/json": {"schema": err}}}),
                )
            })
            .collect::<serde_json::Map<String, Value>>()
    };
    let with = |mut base: serde_json::Map<String, Value>, code: &str, v: Value| {
        base.insert(code.to_string(), v);
        Value::Object(base)
    };
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Brokk site API", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Times are RFC 3339 UTC, durations whole seconds. Every /v1 call needs `Authorization: Bearer <token>`."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
                "Request": {"type": "object", "required": ["amount", "duration", "earliest", "latest"], "properties": {
                    "amount": {"type": "integer", "minimum": 1}, "duration": {"type": "integer", "description": "seconds"},
                    "earliest": {"type": "string", "format": "date-time"}, "latest": {"type": "string", "format": "date-time"},
                    "flexible": {"type": "boolean", "default": false}}},
                "ReservationRequest": {"allOf": [{"$ref": "#/components/schemas/Request"},
                    {"type": "object", "properties": {"hold": {"type": "integer", "description": "seconds the reservation stays preliminary"}}}]},
                "Granted": {"type": "object", "properties": {"id": {"type": "integer"}, "start": {"type": "string", "format": "date-time"},
                    "state": {"enum": ["preliminary", "committed"]}}},
                "Rejected": {"type": "object", "properties": {"reply": {"const": "rejected"}, "next_start": {"type": ["string", "null"], "format": "date-time"}}},
                "Never": {"type": "object", "properties": {"reply": {"const": "never"}, "reason": {"type": "string"}}},
                "Reservation": {"type": "object", "properties": {"id": {"type": "integer"}, "owner": {"type": "string"},
                    "start": {"type": "string", "format": "date-time"}, "end": {"type": "string", "format": "date-time"},
                    "amount": {"type": "integer"}, "state": {"enum": ["preliminary", "committed"]},
                    "expires": {"type": ["string", "null"], "format": "date-time"}, "window": {"type": ["array", "null"]}}},
                "Change": {"type": "object", "properties": {"amount": {"type": "integer"}, "duration": {"type": "integer"},
                    "window": {"type": "array", "items": {"type": "string", "format": "date-time"}, "minItems": 2, "maxItems": 2}}},
                "Info": {"type": "object", "properties": {"name": {"type": "string"}, "capacity": {"type": "integer"},
                    "free_now": {"type": "integer"}, "running": {"type": "integer"}, "waiting": {"type": "integer"},
                    "estimated_wait": {"type": "integer"}, "benchmarks": {"type": "array"},
                    "bandwidth_bytes_per_s": {"type": ["integer", "null"]}, "reservations": {"type": "boolean"},
                    "available": {"type": "boolean", "description": "false while the resource manager does not answer"},
                    "unavailable_reason": {"type": "string"},
                    "cluster": {"type": "object", "description": "the resource manager's cluster: manager, partitions, nodes (name, state, cpus, cpus_allocated, memory_mib, partitions, load), cpus, cpus_allocated, running_jobs, pending_jobs, reservations"}}},
                "Job": {"type": "object", "description": "Brokk's canonical job JSON; `reservation` claims a reservation by id."},
                "JobView": {"type": "object", "properties": {"id": {"type": "string"}, "owner": {"type": "string"},
                    "state": {"enum": ["accepted", "staging-in", "queued", "running", "staging-out", "finished", "failed", "cancelled"]},
                    "reason": {"type": ["string", "null"]}, "exit_code": {"type": ["integer", "null"]},
                    "reservation": {"type": ["integer", "null"]}, "planned_start": {"type": ["string", "null"]},
                    "started": {"type": ["string", "null"]}, "ended": {"type": ["string", "null"]}}}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {"get": {"security": [], "responses": {"200": {"description": "alive"}}}},
            "/readyz": {"get": {"security": [], "responses": {"200": {"description": "ready to take work"}, "503": {"description": "not ready, with why"}}}},
            "/metrics": {"get": {"security": [], "description": "the site's figures in Prometheus's text format: jobs by state, reservations, free slots, subscriptions, and every API call by route, method and status with its latency",
                "responses": {"200": {"description": "text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/v1/info": {"get": {"responses": {"200": ok(json!({"$ref": "#/components/schemas/Info"})),
                "401": {"description": "no token"},
                "503": {"description": "the resource manager does not answer (available: false, unavailable_reason)",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Info"}}}}}}},
            "/v1/info/stream": {"get": {"description": "the site's information as server-sent `info` events (each /v1/info's body): at once, then at least every `every` seconds and, unless on_change=false, within a second of a change",
                "parameters": [{"name": "every", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                               {"name": "on_change", "in": "query", "schema": {"type": "boolean"}}],
                "responses": with(errors(&["400", "401", "503"]), "200", json!({"description": "event stream",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}}}))}},
            "/v1/probe": {"post": {"parameters": [{"name": "k", "in": "query", "schema": {"type": "integer"}}],
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Request"}}}},
                "responses": with(errors(&["400", "401", "413", "503"]), "200", ok(json!({"type": "object", "properties": {"candidates": {"type": "array"}}})))}},
            "/v1/slots": {"get": {"description": "free capacity over [from, to) (default: the next day) in runs of at least min_amount processors lasting at least min_duration seconds, computed at computed_at",
                "parameters": [{"name": "from", "in": "query", "schema": {"type": "string"}},
                               {"name": "to", "in": "query", "schema": {"type": "string"}},
                               {"name": "min_amount", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                               {"name": "min_duration", "in": "query", "schema": {"type": "integer", "minimum": 0}}],
                "responses": with(errors(&["400", "401"]), "200", ok(json!({"type": "object", "properties": {
                    "computed_at": {"type": "string"}, "until": {"type": "string"},
                    "ranges": {"type": "array", "items": {"type": "object", "properties": {
                        "start": {"type": "string"}, "end": {"type": "string"}, "free": {"type": "integer"}}}}}})))}},
            "/v1/reservations": {"post": {
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ReservationRequest"}}}},
                "responses": {"201": ok(json!({"$ref": "#/components/schemas/Granted"})),
                              "409": ok(json!({"$ref": "#/components/schemas/Rejected"})),
                              "422": ok(json!({"$ref": "#/components/schemas/Never"})),
                              "400": {"description": "malformed"}, "401": {"description": "no token"},
                              "503": {"description": "the resource manager does not answer"}}}},
            "/v1/reservations/{id}": {
                "get": {"responses": with(errors(&["401", "403", "404"]), "200", ok(json!({"$ref": "#/components/schemas/Reservation"})))},
                "patch": {"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Change"}}}},
                    "responses": with(errors(&["400", "401", "403", "404", "409", "422", "503"]), "200", ok(json!({"$ref": "#/components/schemas/Reservation"})))},
                "delete": {"responses": with(errors(&["401", "403", "404", "409"]), "204", json!({"description": "cancelled"}))}},
            "/v1/reservations/{id}/commit": {"post": {"responses": with(errors(&["401", "403", "404"]), "200", ok(json!({"$ref": "#/components/schemas/Reservation"})))}},
            "/v1/jobs": {"post": {"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}},
                "responses": with(errors(&["400", "401", "403", "404", "409", "413", "503"]), "201", ok(json!({"type": "object", "properties": {"id": {"type": "string"}}})))}},
            "/v1/jobs/{id}": {
                "get": {"responses": with(errors(&["401", "403", "404"]), "200", ok(json!({"$ref": "#/components/schemas/JobView"})))},
                "delete": {"responses": with(errors(&["401", "403", "404"]), "200", ok(json!({"$ref": "#/components/schemas/JobView"})))}},
            "/v1/jobs/changes": {"get": {"description": "the caller's jobs changed after version `after` of run `epoch`",
                "parameters": [{"name": "epoch", "in": "query", "schema": {"type": "integer"}},
                               {"name": "after", "in": "query", "schema": {"type": "integer"}},
                               {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                "responses": with(errors(&["400", "401"]), "200", ok(json!({"type": "object", "properties": {
                    "epoch": {"type": "integer"}, "version": {"type": "integer"},
                    "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/JobView"}}}})))}},
            "/v1/jobs/by-key/{key}": {"get": {"description": "the caller's job submitted with this Idempotency-Key",
                "responses": with(errors(&["401", "404"]), "200", ok(json!({"$ref": "#/components/schemas/JobView"})))}},
            "/v1/jobs/{id}/files/{name}": {"get": {"responses": with(errors(&["400", "401", "403", "404"]), "200",
                json!({"description": "the file", "content": {"application/octet-stream": {}}}))}}
        }
    })
}
