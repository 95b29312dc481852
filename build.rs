//! Records the commit the binary is built from, for `chatroom --version`.
//! `CHATROOM_BUILD_COMMIT` wins (a Docker build, whose context has no
//! `.git`, can pass it as a build argument); else `git` is asked; a checkout
//! without either builds as well and says `unknown`.
//!
//! A release build also lays out the functions that start-up and an idle
//! server run side by side in the executable ([`startup_order`]).

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
    startup_order();
}

/// Hands `link/startup.order` (made by `bench/startup-order.sh`) to the
/// linker in a release build, which then places those functions first and
/// together. Why: the kernel maps a program's cached pages in blocks of 64 KB
/// around each page it runs, and start-up touches code all over the
/// binary, so an idle server held 13.5 MB of its executable's code
/// resident; with the order, 6 MB (BENCHMARKS.md, "Idle memory"). A
/// function the list misses still links, elsewhere.
///
/// Only GNU-style LLD reads such a list, and the build must not fail where
/// another linker runs: the list is passed only on x86_64 Linux with Rust
/// 1.90 or later whose toolchain carries its own LLD (its default linker
/// there), and not when the build names a linker of its own.
/// `CHATROOM_LINK_ORDER=off` leaves it out too.
fn startup_order() {
    const LIST: &str = "link/startup.order";
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed=CHATROOM_LINK_ORDER");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // A linker named in the flags: `-C linker=…`, or `-fuse-ld=…` passed on.
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = !var("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_empty()
        || flags.contains("linker")
        || flags.contains("fuse-ld");
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join(LIST);
    if var("PROFILE") != "release"
        || var("TARGET") != "x86_64-unknown-linux-gnu"
        || var("CHATROOM_LINK_ORDER") == "off"
        || own_linker
        || !list.exists()
        || !rustc_links_with_lld(&var("RUSTC"))
    {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        list.display()
    );
    // Names the list has and this build does not (another version's
    // functions) are expected, not worth a warning.
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// Whether `rustc` links x86_64 Linux programs with its own LLD: from 1.90,
/// when its sysroot carries `gcc-ld/ld.lld`.
fn rustc_links_with_lld(rustc: &str) -> bool {
    let ask = |arg: &str| {
        let out = Command::new(rustc).arg(arg).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let minor = ask("--version").and_then(|v| {
        // "rustc 1.95.0 (59807616e 2026-04-14)"
        let version = v.split_whitespace().nth(1)?.to_owned();
        let mut parts = version.split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        (major == 1).then_some(minor)
    });
    let lld = ask("--print=sysroot").is_some_and(|root| {
        Path::new(&root)
            .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld")
            .exists()
    });
    minor.is_some_and(|m| m >= 90) && lld
}
