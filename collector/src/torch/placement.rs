//! Where each process of a recording ran and what to call it, from the first meta line of its
//! PyTorch shim's log.

use std::collections::HashMap;

use super::{Line, Log};

/// Where a process ran: its node, its rank on it, its host (from its shim's meta line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// `GROUP_RANK`.
    pub node: Option<u32>,
    /// `LOCAL_RANK`.
    pub local_rank: Option<u32>,
    /// The host's name.
    pub host: Option<String>,
    /// Recorded inside the program, without the driver-level hook.
    pub in_process: bool,
    /// What to call it: its script, and a first argument that is a plain word
    /// (`shared_gpu.py trainer`).
    pub name: Option<String>,
}

/// What to call a Python program by its `sys.argv`.
fn program_name(argv: &[String]) -> Option<String> {
    let script = std::path::Path::new(argv.first()?).file_name()?.to_string_lossy().into_owned();
    let plain = |a: &&String| {
        !a.is_empty()
            && a.len() <= 24
            && a.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
            && !a.starts_with('-')
    };
    Some(match argv.get(1).filter(plain) {
        Some(word) => format!("{script} {word}"),
        None => script,
    })
}

/// Each pid's placement, from the first meta line of its log.
pub fn placements(logs: &[Log]) -> HashMap<u32, Placement> {
    logs.iter()
        .filter_map(|log| {
            log.lines.iter().find_map(|l| match l {
                Line::Meta { node, local_rank, host, in_process, argv, .. } => Some((
                    log.pid,
                    Placement {
                        node: *node,
                        local_rank: *local_rank,
                        host: host.clone(),
                        in_process: *in_process,
                        name: program_name(argv),
                    },
                )),
                _ => None,
            })
        })
        .collect()
}
