//! A tool's arguments as the client sent them (checked: a wrong name or type is said, naming the
//! argument), and the paging of long lists in an answer.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value, json};

/// The arguments of one call, with the names the tool takes.
pub struct Args<'a> {
    given: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    /// The arguments, refused when one is not among `known`.
    pub fn new(given: &'a Map<String, Value>, known: &[&str]) -> Result<Self> {
        if let Some(unknown) = given.keys().find(|k| !known.contains(&k.as_str())) {
            bail!("unknown argument {unknown:?}; this tool takes {}", known.join(", "));
        }
        Ok(Args { given })
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.given.get(name).filter(|v| !v.is_null())
    }

    /// A required string.
    pub fn string(&self, name: &str) -> Result<&'a str> {
        self.opt_string(name)?.ok_or_else(|| anyhow!("the argument {name:?} is required"))
    }

    /// An optional string.
    pub fn opt_string(&self, name: &str) -> Result<Option<&'a str>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => bail!("the argument {name:?} is a string, not {other}"),
        }
    }

    /// A required path to a trace (or a directory of them).
    pub fn path(&self, name: &str) -> Result<PathBuf> {
        let text = self.string(name)?;
        checked_path(name, text)
    }

    /// One path or a list of them.
    pub fn paths(&self, name: &str) -> Result<Vec<PathBuf>> {
        let paths: Vec<PathBuf> = match self.get(name) {
            None => bail!("the argument {name:?} is required"),
            Some(Value::String(s)) => vec![checked_path(name, s)?],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v.as_str() {
                    Some(text) => checked_path(name, text),
                    None => bail!("{name:?} lists paths as strings, not {v}"),
                })
                .collect::<Result<_>>()?,
            Some(other) => bail!("the argument {name:?} is a path or a list of paths, not {other}"),
        };
        if paths.is_empty() {
            bail!("the argument {name:?} needs at least one path");
        }
        Ok(paths)
    }

    /// A required list of strings, not empty (a command and its arguments).
    pub fn strings(&self, name: &str) -> Result<Vec<String>> {
        let Some(Value::Array(items)) = self.get(name) else {
            bail!("the argument {name:?} is a list of strings: the command and its arguments");
        };
        let strings: Vec<String> = items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| anyhow!("{name:?} lists strings, not {v}")))
            .collect::<Result<_>>()?;
        if strings.is_empty() || strings[0].is_empty() {
            bail!("the argument {name:?} needs the program to run");
        }
        Ok(strings)
    }

    /// An optional flag (false when absent).
    pub fn flag(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => bail!("the argument {name:?} is true or false, not {other}"),
        }
    }

    /// An optional whole number within `min..=max`.
    pub fn opt_count(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_u64().filter(|n| (min..=max).contains(n)) {
                Some(n) => Ok(Some(n)),
                None => bail!("the argument {name:?} is a whole number from {min} to {max}, not {v}"),
            },
        }
    }

    /// An optional number (a percentage, say).
    pub fn opt_number(&self, name: &str) -> Result<Option<f64>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64().filter(|n| n.is_finite()) {
                Some(n) => Ok(Some(n)),
                None => bail!("the argument {name:?} is a number, not {v}"),
            },
        }
    }

    /// An optional object of numbers by name (`{"activation": 10}`), in the order given.
    pub fn opt_numbers(&self, name: &str) -> Result<Vec<(&'a str, f64)>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v.as_f64().filter(|n| n.is_finite()) {
                    Some(n) => Ok((k.as_str(), n)),
                    None => bail!("{name:?} maps names to numbers: {k:?} is {v}"),
                })
                .collect(),
            Some(other) => bail!("the argument {name:?} is an object of numbers by name, not {other}"),
        }
    }

    /// An optional value parsed from its text as the command line parses it (a device given
    /// as a number is its index).
    pub fn opt_parsed<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        let text = match self.get(name) {
            None => return Ok(None),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(other) => bail!("the argument {name:?} is a string, not {other}"),
        };
        text.parse().map(Some).map_err(|e| anyhow!("the argument {name:?} ({text:?}): {e}"))
    }
}

/// A path given as an argument: not empty, and not `-` (standard input carries the protocol).
fn checked_path(name: &str, text: &str) -> Result<PathBuf> {
    match text {
        "" => bail!("the argument {name:?} is empty: give a trace's path"),
        "-" => bail!("the argument {name:?} is '-', standard input, which carries the protocol here: give a file"),
        _ => Ok(PathBuf::from(text)),
    }
}

/// The items of a long list an answer holds, unless asked for a number.
pub const DEFAULT_PAGE: usize = 50;
/// The most items of a long list one answer holds.
pub const MAX_PAGE: usize = 500;

/// Cuts each list at `patterns` (JSON pointers; `*` stands for every item of an array) to
/// `offset..offset + limit`, and says in the answer's `page` what was cut: each list's length,
/// and the offset of the next page when there is more.
pub fn paginate(value: &mut Value, patterns: &[&str], (offset, limit): (usize, usize)) {
    let mut lists = Vec::new();
    for pattern in patterns {
        let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
        cut(value, &parts, String::new(), (offset, limit), &mut lists);
    }
    if lists.is_empty() {
        return;
    }
    let more = lists.iter().any(|l: &Value| l["total"].as_u64().is_some_and(|t| t as usize > offset + limit));
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "page".to_owned(),
            json!({ "offset": offset, "limit": limit, "lists": lists, "next_offset": more.then_some(offset + limit) }),
        );
    }
}

fn cut(value: &mut Value, parts: &[&str], at: String, (offset, limit): (usize, usize), lists: &mut Vec<Value>) {
    let Some((first, rest)) = parts.split_first() else {
        if let Value::Array(items) = value {
            let total = items.len();
            let kept: Vec<Value> = items.drain(..).skip(offset).take(limit).collect();
            lists.push(json!({ "list": at, "total": total, "returned": kept.len() }));
            *items = kept;
        }
        return;
    };
    match (value, *first) {
        (Value::Array(items), "*") => {
            for (i, item) in items.iter_mut().enumerate() {
                cut(item, rest, format!("{at}/{i}"), (offset, limit), lists);
            }
        }
        (Value::Object(map), key) => {
            if let Some(inner) = map.get_mut(key) {
                cut(inner, rest, format!("{at}/{key}"), (offset, limit), lists);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_cut_and_the_page_says_what_is_left() {
        let mut v = json!({ "devices": [{ "xs": [1, 2, 3, 4, 5] }, { "xs": [1] }], "ranks": [0, 1, 2] });
        paginate(&mut v, &["/devices/*/xs", "/ranks", "/absent/*"], (1, 2));
        assert_eq!(v["devices"][0]["xs"], json!([2, 3]));
        assert_eq!(v["devices"][1]["xs"], json!([]));
        assert_eq!(v["ranks"], json!([1, 2]));
        assert_eq!(v["page"]["next_offset"], json!(3));
        assert_eq!(v["page"]["lists"][0], json!({ "list": "/devices/0/xs", "total": 5, "returned": 2 }));
        let mut w = json!({ "ranks": [0, 1, 2] });
        paginate(&mut w, &["/ranks"], (0, 3));
        assert_eq!(w["page"]["next_offset"], Value::Null);
    }

    #[test]
    fn arguments_of_the_wrong_kind_are_named() {
        let given = json!({ "path": 3, "limit": 0, "extra": true });
        let given = given.as_object().cloned().unwrap_or_default();
        let refused = Args::new(&given, &["path", "limit"]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("\"extra\""), "{refused}");
        let args = Args::new(&given, &["path", "limit", "extra"]).ok();
        let limit =
            args.as_ref().map(|a| a.opt_count("limit", 1, 500).err().map(|e| e.to_string()).unwrap_or_default());
        assert!(limit.unwrap_or_default().contains("\"limit\""));
        let path = args.as_ref().map(|a| a.path("path").err().map(|e| e.to_string()).unwrap_or_default());
        assert!(path.unwrap_or_default().contains("\"path\" is a string"));
    }
}
