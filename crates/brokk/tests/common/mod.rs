//! What the end-to-end tests of `brokk site` and `brokk serve` share: scratch
//! directories and starting a server process on an ephemeral port.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command};

/// A fresh directory for one test.
pub fn scratch(kind: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brokk-{kind}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Spawns `cmd` (with stdout piped) and waits for its `listening on URL` line.
pub fn spawn_listening(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("listening on ").expect(&line).to_string();
    (child, url)
}
