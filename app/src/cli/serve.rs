//! `vramscope serve DIR|FILE`: a recording in progress (or a file) served to viewers on other
//! machines until Ctrl+C (`crate::serve`).

use std::path::Path;

use anyhow::Result;

use crate::follow::Source;
use crate::serve::{Served, Server};

/// Serves what `source` names (as `open --follow` takes it) on `addr`, asking viewers for
/// `token` (else $VRAMSCOPE_TOKEN, else a new one; none with `no_token`).
pub fn run(source: Option<&Path>, addr: &str, token: Option<String>, no_token: bool) -> Result<()> {
    let served = match Source::resolve(source)? {
        Source::Recording(dir) => {
            let output = vramscope_collector::live::Manifest::read(&dir).and_then(|m| m.output);
            Served::Recording { dir, output }
        }
        Source::File(path) => Served::File(path),
    };
    let addr = crate::serve::parse_addr(addr)?;
    let token = match (no_token, token) {
        (true, _) => None,
        (false, Some(token)) => Some(token),
        (false, None) => Some(crate::serve::token_from_env()?),
    };
    if !addr.ip().is_loopback() {
        eprintln!(
            "vramscope: serving beyond this machine, on {addr}: whoever reaches it{} reads the run",
            if token.is_some() { " with the token" } else { ", without a token," }
        );
    }
    let listener = Server::bind(addr)?;
    let what = match &served {
        Served::Recording { dir, .. } => format!("the recording in {}", dir.display()),
        Served::File(path) => path.display().to_string(),
    };
    let server = Server::start(listener, served, token, None)?;
    eprintln!("vramscope: serving {what} until Ctrl+C");
    eprintln!("{}", server.how_to_connect("open"));
    loop {
        std::thread::park();
    }
}
