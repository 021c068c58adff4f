//! `vramscope mcp`: vramscope's answers for coding agents, as a Model Context Protocol server on
//! standard input and output.
//!
//! The protocol is JSON-RPC 2.0, one message per line (no headers), in the handshake form every
//! client speaks (`initialize`, then requests; versions 2024-11-05 to 2025-11-25). Written by
//! hand: the server answers a handful of requests one at a time, which needs neither an async
//! runtime nor an SDK. Standard output carries protocol messages only; what goes wrong in a tool
//! goes back in its result (`isError`), and warnings go to standard error, which clients log.
//! The server ends when its input does.
//!
//! The tools (`tools.rs`) answer what `info`, `diff` and `advise` answer, with the same numbers.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

mod args;
mod inputs;
mod tools;

/// The longest message read; a longer line is skipped and answered with an error.
const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The protocol versions of the handshake form, oldest first; the last is offered to a client
/// that asks for one we do not know.
const VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The first version whose tool results carry `structuredContent` and tools an `outputSchema`.
const STRUCTURED_SINCE: &str = "2025-06-18";

/// What the server tells the model about itself when a client connects.
const INSTRUCTIONS: &str = "vramscope reads GPU memory traces of deep-learning runs: PyTorch memory snapshots \
(.pickle), PyTorch profiler traces (.json, .json.gz) and vramscope recordings (.vtrace), one file or a directory \
of one file per rank. Start with `summary` (peaks, categories at the peak, phases, growth); then `peak_breakdown` \
or `memory_at` for what was alive and where it was allocated, `oom` for an out-of-memory error, `compare` for two \
runs (with gates, for CI), `growth` for memory that grows every iteration, and `advise` for what each remedy would \
do to the peak. Bytes are exact integers; times ending in _us are microseconds on the trace's clock.";

/// JSON-RPC error codes.
mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
}

/// Serves MCP on standard input and output until the input ends.
pub fn serve_stdio() -> anyhow::Result<()> {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    serve(stdin, stdout)
}

/// Serves MCP on `input` and `output` until the input ends.
pub fn serve(mut input: impl BufRead, mut output: impl Write) -> anyhow::Result<()> {
    let mut server = Server::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let reply = match read_line(&mut input, &mut line)? {
            Line::End => return Ok(()),
            Line::TooLong => Some(error(
                &Value::Null,
                code::INVALID_REQUEST,
                &format!("a message longer than {} MiB was skipped", MAX_MESSAGE_BYTES >> 20),
            )),
            Line::Read if line.trim_ascii().is_empty() => None,
            Line::Read => server.handle(&line),
        };
        if let Some(reply) = reply {
            // serde_json escapes newlines inside strings: one message is one line.
            output.write_all(reply.to_string().as_bytes())?;
            output.write_all(b"\n")?;
            output.flush()?;
        }
    }
}

/// What reading a line gave.
enum Line {
    /// A line, without its newline, in the buffer.
    Read,
    /// A line over [`MAX_MESSAGE_BYTES`], read to its end and dropped.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads one line into `line`, holding at most [`MAX_MESSAGE_BYTES`] of it.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let (done, used) = {
            let available = match input.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(match (too_long, line.is_empty()) {
                    (true, _) => Line::TooLong,
                    (false, true) => Line::End,
                    (false, false) => Line::Read,
                });
            }
            let (part, done) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], Some(at + 1)),
                None => (available, None),
            };
            if !too_long && line.len() + part.len() <= MAX_MESSAGE_BYTES {
                line.extend_from_slice(part);
            } else {
                too_long = true;
                line.clear();
            }
            (done.is_some(), done.unwrap_or(available.len()))
        };
        input.consume(used);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Read });
        }
    }
}

/// The server's state: the protocol version agreed on.
#[derive(Default)]
pub struct Server {
    version: Option<&'static str>,
}

impl Server {
    /// The reply to one message (none to a notification or a response).
    pub fn handle(&mut self, message: &[u8]) -> Option<Value> {
        let message: Value = match serde_json::from_slice(message) {
            Ok(message) => message,
            Err(e) => return Some(error(&Value::Null, code::PARSE_ERROR, &format!("not JSON: {e}"))),
        };
        let Some(object) = message.as_object() else {
            let what = if message.is_array() { "batches are not supported" } else { "a message is a JSON object" };
            return Some(error(&Value::Null, code::INVALID_REQUEST, what));
        };
        let id = object.get("id");
        if id.is_some_and(|id| !(id.is_string() || id.is_i64() || id.is_u64())) {
            return Some(error(&Value::Null, code::INVALID_REQUEST, "a request's id is a string or an integer"));
        }
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            // A response to a request of ours (we send none): nothing to say.
            if object.contains_key("result") || object.contains_key("error") {
                return None;
            }
            return Some(error(id.unwrap_or(&Value::Null), code::INVALID_REQUEST, "a request names its method"));
        };
        // A notification (no id) is never answered: `notifications/initialized`, cancellations.
        let id = id?;
        let params = object.get("params").unwrap_or(&Value::Null);
        if !(params.is_null() || params.is_object()) {
            return Some(error(id, code::INVALID_PARAMS, "params is an object"));
        }
        Some(match method {
            "initialize" => self.initialize(id, params),
            "ping" => result(id, json!({})),
            "tools/list" => self.list_tools(id, params),
            "tools/call" => self.call_tool(id, params),
            other => error(id, code::METHOD_NOT_FOUND, &format!("method not found: {other}")),
        })
    }

    fn initialize(&mut self, id: &Value, params: &Value) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = VERSIONS.iter().copied().find(|v| Some(*v) == asked).unwrap_or(VERSIONS[VERSIONS.len() - 1]);
        self.version = Some(version);
        result(
            id,
            json!({
                "protocolVersion": version,
                "capabilities": { "tools": { "listChanged": false } },
                "serverInfo": { "name": "vramscope", "title": "vramscope", "version": env!("CARGO_PKG_VERSION") },
                "instructions": INSTRUCTIONS,
            }),
        )
    }

    /// Whether results carry structured content (and tools their output's schema).
    fn structured(&self) -> bool {
        self.version.is_none_or(|v| v >= STRUCTURED_SINCE)
    }

    fn list_tools(&self, id: &Value, params: &Value) -> Value {
        // Every tool fits on one page: no cursor is ever given out, so none is valid.
        if let Some(cursor) = params.get("cursor").filter(|c| !c.is_null()) {
            return error(
                id,
                code::INVALID_PARAMS,
                &format!("unknown cursor {cursor}: every tool is on the first page"),
            );
        }
        let structured = self.structured();
        let tools: Vec<Value> = tools::TOOLS.iter().map(|t| t.listing(structured)).collect();
        result(id, json!({ "tools": tools }))
    }

    fn call_tool(&self, id: &Value, params: &Value) -> Value {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return error(id, code::INVALID_PARAMS, "tools/call names the tool in params.name");
        };
        let Some(tool) = tools::TOOLS.iter().find(|t| t.name == name) else {
            let names: Vec<&str> = tools::TOOLS.iter().map(|t| t.name).collect();
            return error(id, code::INVALID_PARAMS, &format!("unknown tool {name:?}; the tools: {}", names.join(", ")));
        };
        let empty = serde_json::Map::new();
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(arguments)) => arguments,
            Some(_) => return error(id, code::INVALID_PARAMS, "params.arguments is an object"),
        };
        // A tool that fails says so in its result, for the model to read and correct.
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.call(arguments)))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("vramscope failed inside {name} (a bug: please report it)")));
        let answer = answered.and_then(|value| {
            let text = value.to_string();
            if text.len() > tools::MAX_ANSWER_BYTES {
                anyhow::bail!(
                    "the answer is {} bytes, more than the {} an answer may be: ask for less (limit, blocks, range)",
                    text.len(),
                    tools::MAX_ANSWER_BYTES
                );
            }
            Ok((text, value))
        });
        match answer {
            Ok((text, value)) => {
                let mut answer = json!({ "content": [{ "type": "text", "text": text }], "isError": false });
                if self.structured() {
                    answer["structuredContent"] = value;
                }
                result(id, answer)
            }
            Err(e) => result(id, json!({ "content": [{ "type": "text", "text": format!("{e:#}") }], "isError": true })),
        }
    }
}

fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(server: &mut Server, message: &str) -> Option<Value> {
        server.handle(message.as_bytes())
    }

    #[test]
    fn malformed_messages_get_the_right_error_and_no_panic() {
        let mut s = Server::default();
        let code_of = |v: Option<Value>| v.and_then(|v| v["error"]["code"].as_i64());
        assert_eq!(code_of(ask(&mut s, "{")), Some(code::PARSE_ERROR));
        assert_eq!(code_of(ask(&mut s, "[]")), Some(code::INVALID_REQUEST));
        assert_eq!(code_of(ask(&mut s, "3")), Some(code::INVALID_REQUEST));
        assert_eq!(code_of(ask(&mut s, r#"{"id":null,"method":"ping"}"#)), Some(code::INVALID_REQUEST));
        assert_eq!(code_of(ask(&mut s, r#"{"id":{},"method":"ping"}"#)), Some(code::INVALID_REQUEST));
        assert_eq!(code_of(ask(&mut s, r#"{"id":1}"#)), Some(code::INVALID_REQUEST));
        assert_eq!(code_of(ask(&mut s, r#"{"id":1,"method":"server/discover"}"#)), Some(code::METHOD_NOT_FOUND));
        assert_eq!(code_of(ask(&mut s, r#"{"id":1,"method":"tools/call","params":[]}"#)), Some(code::INVALID_PARAMS));
        assert_eq!(code_of(ask(&mut s, r#"{"id":1,"method":"tools/call","params":{}}"#)), Some(code::INVALID_PARAMS));
        let unknown = r#"{"id":1,"method":"tools/call","params":{"name":"rm"}}"#;
        assert_eq!(code_of(ask(&mut s, unknown)), Some(code::INVALID_PARAMS));
        let cursor = r#"{"id":1,"method":"tools/list","params":{"cursor":"x"}}"#;
        assert_eq!(code_of(ask(&mut s, cursor)), Some(code::INVALID_PARAMS));
        // Notifications and responses are not answered.
        assert_eq!(ask(&mut s, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(ask(&mut s, r#"{"jsonrpc":"2.0","id":5,"result":{}}"#), None);
    }

    #[test]
    fn the_version_asked_for_is_agreed_when_known_else_the_newest() {
        let mut s = Server::default();
        let init = |v: &str| format!(r#"{{"id":"a","method":"initialize","params":{{"protocolVersion":"{v}"}}}}"#);
        let agreed = |s: &mut Server, v: &str| ask(s, &init(v)).map(|r| r["result"]["protocolVersion"].clone());
        assert_eq!(agreed(&mut s, "2024-11-05"), Some(json!("2024-11-05")));
        // No structured content for a client from before it existed.
        let listed = ask(&mut s, r#"{"id":2,"method":"tools/list"}"#).unwrap_or_default();
        assert!(listed["result"]["tools"][0].get("outputSchema").is_none(), "{listed}");
        assert_eq!(agreed(&mut s, "2099-01-01"), Some(json!("2025-11-25")));
        assert_eq!(ask(&mut s, &init("2025-11-25")).unwrap_or_default()["id"], json!("a"));
    }

    /// Messages mutated at random (bytes flipped, cut, repeated): every one is answered with one
    /// well-formed JSON-RPC message or not at all (notifications), and nothing panics.
    #[test]
    fn mutated_messages_never_break_the_server() {
        let seeds: [&[u8]; 5] = [
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":null}}"#,
            br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"summary","arguments":{"paths":["no/such.pickle"],"limit":5}}}"#,
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"compare","arguments":{"a":"n1","b":"n2","fail_if_category_grows":{"activation":1}}}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut server = Server::default();
        for round in 0..20_000 {
            let mut message = seeds[round % seeds.len()].to_vec();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() as usize) % message.len().max(1);
                match next() % 4 {
                    0 => {
                        let byte = next() as u8;
                        if let Some(b) = message.get_mut(at) {
                            *b = byte;
                        }
                    }
                    1 => message.truncate(at),
                    2 => {
                        let byte = b"{}[]\":,0-9e\\"[(next() % 12) as usize];
                        message.insert(at.min(message.len()), byte);
                    }
                    _ => {
                        let piece: Vec<u8> = message[at..].iter().take(16).copied().collect();
                        message.splice(at..at, piece);
                    }
                }
            }
            if let Some(reply) = server.handle(&message) {
                assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
                assert!(reply.get("result").is_some() != reply.get("error").is_some(), "{reply}");
                assert!(!reply.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn lines_are_bounded_and_a_long_one_is_skipped_whole() {
        let long = format!("{}\n{{\"id\":1,\"method\":\"ping\"}}\n", "x".repeat(MAX_MESSAGE_BYTES + 10));
        let mut out = Vec::new();
        serve(std::io::BufReader::with_capacity(1024, long.as_bytes()), &mut out).unwrap_or_default();
        let lines: Vec<Value> =
            String::from_utf8_lossy(&out).lines().map(|l| serde_json::from_str(l).unwrap_or_default()).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["error"]["code"], json!(code::INVALID_REQUEST));
        assert_eq!(lines[1]["result"], json!({}));
        assert_eq!(lines[1]["id"], json!(1));
    }
}
