//! The Claude Code plugin in the repository: both manifests pass the real
//! `claude plugin validate` (the CLI from npm, `CHATROOM_TEST_CLAUDE`, as
//! .ci/run installs it), and the files it names hold together.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn json(path: &str) -> Value {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `claude plugin validate` passes on plugin/ and on the repository root
/// (the marketplace), with no error line.
#[test]
fn claude_plugin_validate_passes() {
    let Ok(claude) = std::env::var("CHATROOM_TEST_CLAUDE") else {
        panic!("set CHATROOM_TEST_CLAUDE to the Claude Code CLI (.ci/run installs it)");
    };
    for dir in ["plugin", "."] {
        let out = Command::new(&claude)
            .args(["plugin", "validate", dir])
            .current_dir(root())
            .env("HOME", tempfile::tempdir().unwrap().path())
            .output()
            .expect("run claude");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{dir}: {text}");
        assert!(text.contains("Validation passed"), "{dir}: {text}");
        assert!(!text.contains('✘'), "{dir}: {text}");
    }
}

/// The plugin's parts: the token is sensitive, the HTTP entry sends it as a
/// bearer header, the hooks and the monitor call chatroom as SPEC §8a says,
/// the channel binds to a server of the plugin, and the skill is the text
/// the repository keeps.
#[test]
fn the_plugin_holds_together() {
    let m = json(".claude-plugin/marketplace.json");
    assert_eq!(m["name"], "chatroom");
    assert_eq!(m["plugins"][0]["name"], "chatroom");
    let p = json("plugin/.claude-plugin/plugin.json");
    assert_eq!(p["name"], "chatroom");
    assert_eq!(p["userConfig"]["token"]["sensitive"], true);
    let http = &p["mcpServers"]["chatroom"];
    assert_eq!(http["type"], "http");
    assert_eq!(
        http["headers"]["Authorization"],
        "Bearer ${user_config.token}"
    );
    let channel = p["channels"][0]["server"].as_str().unwrap();
    assert_eq!(p["mcpServers"][channel]["args"][0], "channel");
    let h = json("plugin/hooks/hooks.json");
    let cmd = |event: &str| h["hooks"][event][0]["hooks"][0].clone();
    assert_eq!(cmd("UserPromptSubmit")["command"], "chatroom hook");
    let stop = cmd("Stop");
    assert!(
        stop["command"]
            .as_str()
            .unwrap()
            .starts_with("chatroom hook --rewake")
    );
    assert_eq!(stop["async"], true);
    assert_eq!(stop["asyncRewake"], true);
    assert!(
        stop["timeout"].as_i64().unwrap() > 50 * 60,
        "outlasts the wait"
    );
    assert!(
        cmd("SessionStart")["command"]
            .as_str()
            .unwrap()
            .contains("--save-connection")
    );
    assert_eq!(cmd("SessionEnd")["command"], "chatroom hook");
    let mon = json("plugin/monitors/monitors.json");
    let mon_cmd = mon[0]["command"].as_str().unwrap();
    assert!(
        mon_cmd.starts_with("chatroom watch --monitor --connection"),
        "{mon_cmd}"
    );
    let skill = std::fs::read_to_string(root().join("plugin/skills/chatroom/SKILL.md")).unwrap();
    assert!(skill.starts_with("---\nname: chatroom\n"));
    assert_eq!(skill, chatroom::assets::COORDINATION_SKILL);
}
