//! `vramscope schema [DOCUMENT]`: the JSON Schema of what the commands print as JSON, derived
//! from the documents' types ([`crate::query::documents`]).

use std::io::Write;

use anyhow::{Result, bail};

use crate::query::documents::{DOCUMENTS, SCHEMA_VERSION, schema};

/// Prints the schema of `document`; without one, every document's, by name.
pub fn run(document: Option<&str>, list: bool, out: &mut dyn Write) -> Result<()> {
    if list {
        writeln!(out, "documents (schema version {SCHEMA_VERSION}):")?;
        for (name, what) in DOCUMENTS {
            writeln!(out, "  {name:<11} {what}")?;
        }
        return Ok(());
    }
    let value = match document {
        Some(name) => match schema(name) {
            Some(value) => value,
            None => {
                let names: Vec<&str> = DOCUMENTS.iter().map(|d| d.0).collect();
                bail!("no document named {name:?}: give one of {}", names.join(", "))
            }
        },
        None => {
            let documents: serde_json::Map<String, serde_json::Value> =
                DOCUMENTS.iter().filter_map(|(name, _)| Some(((*name).to_owned(), schema(name)?))).collect();
            serde_json::json!({ "schema_version": SCHEMA_VERSION, "documents": documents })
        }
    };
    serde_json::to_writer_pretty(&mut *out, &value)?;
    writeln!(out)?;
    Ok(())
}
