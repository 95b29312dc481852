//! The `chatroom` binary: parse the command line and hand over.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    chatroom::cli::main()
}
