//! The `chatroom` binary: parse the command line and hand over.
#![forbid(unsafe_code)]

/// mimalloc: the server allocates many small, short-lived objects per
/// request (JSON trees, strings, rows); glibc's allocator spent about a sixth
/// of the server's CPU time on them (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The command line, with the server that `chatroom serve` launches.
fn main() -> std::process::ExitCode {
    chatroom::cli::main(|config, listener, shutdown| {
        Box::pin(chatroom::server::launch(config, listener, shutdown))
    })
}
