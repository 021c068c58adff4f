//! Generic parts of a snapshot's pickle (settings, keys vramscope does not read) as JSON, bounded
//! in depth and size.

use super::pickle::{ContainerKind, Store, Value};
use crate::model::ids::StackId;

/// Bound on nodes converted to JSON from generic parts of the pickle (settings, unknown keys).
pub(super) const MAX_JSON_NODES: usize = 1_000_000;
/// Bound on the nesting of generic parts of the pickle.
const MAX_JSON_DEPTH: usize = 64;

/// Converts a generic part of the pickle to JSON, bounded in depth and size.
pub(super) fn to_json(
    store: &Store,
    value: Value,
    depth: usize,
    budget: &mut usize,
) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if *budget == 0 {
        return Err("too many values in a generic part of the snapshot".to_owned());
    }
    *budget -= 1;
    if depth > MAX_JSON_DEPTH {
        return Err(format!("values nested deeper than {MAX_JSON_DEPTH} levels"));
    }
    Ok(match value {
        Value::None | Value::Missing => J::Null,
        Value::Bool(b) => J::Bool(b),
        Value::Int(v) => J::from(v),
        Value::UInt(v) => J::from(v),
        Value::BigInt => J::String("<integer wider than 64 bits>".to_owned()),
        Value::Float(v) => serde_json::Number::from_f64(v).map_or(J::Null, J::Number),
        Value::Str(id) => J::String(store.interner.resolve(id).to_owned()),
        Value::Bytes(n) => J::String(format!("<{n} bytes>")),
        // The fast path reads an empty list as the empty stack.
        Value::Stack(StackId(0)) => J::Array(Vec::new()),
        Value::Frame(_) | Value::Stack(_) | Value::Record(..) => J::String("<converted>".to_owned()),
        Value::Container(h) => match store.kind(h)? {
            ContainerKind::Dict => {
                let mut map = serde_json::Map::new();
                let mut failure = None;
                store.for_each_pair(h, |key, value| {
                    let key = match key {
                        Value::Str(id) => store.interner.resolve(id).to_owned(),
                        other => match to_json(store, other, depth + 1, budget)? {
                            J::String(s) => s,
                            j => j.to_string(),
                        },
                    };
                    match to_json(store, value, depth + 1, budget) {
                        Ok(v) => {
                            map.insert(key, v);
                        }
                        Err(e) => failure = Some(e),
                    }
                    Ok(())
                })?;
                if let Some(e) = failure {
                    return Err(e);
                }
                J::Object(map)
            }
            _ => {
                let mut list = Vec::new();
                for item in store.items(h)? {
                    list.push(to_json(store, item, depth + 1, budget)?);
                }
                J::Array(list)
            }
        },
    })
}
