//! Records the commit the binary is built from, for `chatroom --version`.
//! `CHATROOM_BUILD_COMMIT` wins (a Docker build, whose context has no
//! `.git`, can pass it as a build argument); else `git` is asked; a checkout
//! without either builds as well and says `unknown`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CHATROOM_BUILD_COMMIT");
    let commit = match std::env::var("CHATROOM_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            // Rebuild when HEAD moves: HEAD itself, and the branch it names.
            for path in [
                git(&["rev-parse", "--git-path", "HEAD"]),
                git(&["symbolic-ref", "-q", "HEAD"])
                    .and_then(|r| git(&["rev-parse", "--git-path", &r])),
                git(&["rev-parse", "--git-path", "packed-refs"]),
            ]
            .into_iter()
            .flatten()
            {
                if Path::new(&path).exists() {
                    println!("cargo:rerun-if-changed={path}");
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=CHATROOM_COMMIT={commit}");
}
